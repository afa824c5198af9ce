import DocFSStore
import Foundation
import Synchronization

/// The content of one item on local disk, in docfs's private cache directory (mode 0600).
///
/// A local copy is filled by byte ranges and knows which ranges it holds (`held`), so a read
/// can be served only from bytes that really arrived; a partial download is never presented
/// as the file. The store writes into it through `ContentSink`; readers use `read(into:at:)`.
/// Reads and writes use `pread`/`pwrite` on one descriptor, which is safe from any thread;
/// the range set is guarded by a mutex.
public final class LocalCopy: ContentSink, Sendable {
    public let path: String
    private let descriptor: Int32
    private let state: Mutex<State>

    private struct State {
        var held = ByteRangeSet()
        /// The file's length as the user sees it (downloads and local writes extend it).
        var length: Int64 = 0
        /// Bumped by every local change; an upload knows which generation it sent.
        var generation: UInt64 = 0
        var discarded = false
    }

    /// Creates an empty local copy at `path` (replacing whatever was there).
    public init(path: String) throws(FSError) {
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .local(errno: errno, "cannot create local copy \(path): \(String(cString: strerror(errno)))") }
        self.path = path
        self.descriptor = fd
        self.state = Mutex(State())
    }

    /// Reopens a complete local copy that is already on disk (unsynced changes from before a
    /// restart): every byte of it is held.
    public init(adopting path: String) throws(FSError) {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw .local(errno: errno, "cannot open local copy \(path): \(String(cString: strerror(errno)))") }
        var info = stat()
        fstat(fd, &info)
        self.path = path
        self.descriptor = fd
        var initial = State()
        initial.length = Int64(info.st_size)
        initial.held = ByteRangeSet([0..<Int64(info.st_size)])
        self.state = Mutex(initial)
    }

    /// The file's current length.
    public var length: Int64 { state.withLock { $0.length } }

    /// Which local change this copy is at.
    public var generation: UInt64 { state.withLock { $0.generation } }

    /// Makes the copy complete and empty, without a download (O_TRUNC, a new file).
    public func makeEmpty() throws(FSError) {
        try truncate(to: 0)
    }

    // MARK: Local changes

    /// Writes the user's bytes at `offset`. They are held from now on, and the copy is one
    /// generation further.
    public func writeLocal(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(FSError) -> Int {
        var written = 0
        while written < bytes.count {
            let n = pwrite(descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
            if n < 0 {
                if errno == EINTR { continue }
                throw .local(errno: errno, "writing \(path): \(String(cString: strerror(errno)))")
            }
            written += n
        }
        state.withLock { state in
            if offset > state.length { state.held.insert(state.length..<offset) }  // the hole reads as zeros
            state.held.insert(offset..<(offset + Int64(written)))
            state.length = max(state.length, offset + Int64(written))
            state.generation += 1
        }
        return written
    }

    /// Sets the length (truncate/ftruncate/O_TRUNC). Growing adds zeros, which are held.
    public func truncate(to size: Int64) throws(FSError) {
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            throw .local(errno: errno, "truncating \(path): \(String(cString: strerror(errno)))")
        }
        state.withLock { state in
            if size < state.length {
                state.held = ByteRangeSet(state.held.ranges.compactMap { range in
                    range.lowerBound < size ? range.lowerBound..<min(range.upperBound, size) : nil
                })
            } else if size > state.length {
                state.held.insert(state.length..<size)
            }
            if size == 0 { state.held = ByteRangeSet() }
            state.length = size
            state.generation += 1
        }
    }

    /// Whether every byte of the file is local.
    public var isComplete: Bool {
        state.withLock { $0.held.contains(0..<$0.length) }
    }

    /// Makes the local changes durable on disk (before close/fsync returns).
    public func sync() throws(FSError) {
        guard fdatasync(descriptor) == 0 else {
            throw .local(errno: errno, "syncing \(path): \(String(cString: strerror(errno)))")
        }
    }

    deinit {
        state.withLock { state in
            if !state.discarded { Glibc.close(descriptor) }
        }
    }

    /// The byte ranges that have arrived.
    public var held: ByteRangeSet { state.withLock { $0.held } }

    // MARK: ContentSink

    public func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        var written = 0
        while written < bytes.count {
            let n = pwrite(descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                throw .localIO(errno: code, message: "writing the local copy: \(String(cString: strerror(code)))")
            }
            written += n
        }
        state.withLock { state in
            state.held.insert(offset..<(offset + Int64(bytes.count)))
            state.length = max(state.length, offset + Int64(bytes.count))
        }
    }

    // MARK: Reading

    /// Reads up to `buffer.count` bytes at `offset`. Only bytes the copy holds are read;
    /// asking for bytes that have not arrived is a programming error reported as EIO.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(FSError) -> Int {
        let end = min(offset + Int64(buffer.count), length)
        guard end > offset else { return 0 }
        guard held.contains(offset..<end) else {
            throw .io("bytes \(offset)..<\(end) of \(path) are not local")
        }
        var total = 0
        let wanted = Int(end - offset)
        while total < wanted {
            let n = pread(descriptor, buffer.baseAddress! + total, wanted - total, off_t(offset) + off_t(total))
            if n < 0 {
                if errno == EINTR { continue }
                throw .local(errno: errno, "reading the local copy: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            total += n
        }
        return total
    }

    /// Forgets every byte (before a fetch is tried again from the start).
    public func reset() {
        state.withLock { state in
            state.held = ByteRangeSet()
            state.length = 0
        }
        _ = ftruncate(descriptor, 0)
    }

    /// Sets the file's length to the downloaded item's size.
    public func setLength(_ size: Int64) throws(FSError) {
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            throw .local(errno: errno, "sizing the local copy: \(String(cString: strerror(errno)))")
        }
        state.withLock { $0.length = size }
    }

    /// The local file's modification time (the kernel moves it on every local write).
    public var modificationTime: Timestamp {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 0 }
        return Timestamp(seconds: Int64(info.st_mtim.tv_sec), nanoseconds: Int64(info.st_mtim.tv_nsec))
    }

    /// Sets the local file's modification time (utimensat on an item with local changes).
    public func setModificationTime(_ time: Timestamp) {
        var times = [timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2),  // UTIME_OMIT: leave atime
                     timespec(tv_sec: Int(time.parts.seconds), tv_nsec: Int(time.parts.nanoseconds))]
        _ = futimens(descriptor, &times)
    }

    /// Disk space the copy really uses, in 512-byte blocks (what `st_blocks` reports).
    public var allocatedBlocks: Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 0 }
        return Int64(info.st_blocks)
    }

    /// Closes the copy and keeps the file (unsynced changes stay on disk for a later upload).
    public func close() {
        let shouldClose = state.withLock { state -> Bool in
            defer { state.discarded = true }
            return !state.discarded
        }
        if shouldClose { Glibc.close(descriptor) }
    }

    /// Closes and deletes the copy. Idempotent.
    public func discard() {
        let shouldClose = state.withLock { state -> Bool in
            defer { state.discarded = true }
            return !state.discarded
        }
        if shouldClose {
            Glibc.close(descriptor)
            unlink(path)
        }
    }
}
