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

    deinit {
        state.withLock { state in
            if !state.discarded { close(descriptor) }
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
        state.withLock { $0.held.insert(offset..<(offset + Int64(bytes.count))) }
    }

    // MARK: Reading

    /// Reads up to `buffer.count` bytes at `offset`. Only bytes the copy holds are read;
    /// asking for bytes that have not arrived is a programming error reported as EIO.
    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, fileSize: Int64) throws(FSError) -> Int {
        let end = min(offset + Int64(buffer.count), fileSize)
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
        state.withLock { $0.held = ByteRangeSet() }
        _ = ftruncate(descriptor, 0)
    }

    /// Sets the file's length to the item's size (an empty file holds no range but is complete).
    public func setLength(_ size: Int64) throws(FSError) {
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            throw .local(errno: errno, "sizing the local copy: \(String(cString: strerror(errno)))")
        }
    }

    /// Disk space the copy really uses, in 512-byte blocks (what `st_blocks` reports).
    public var allocatedBlocks: Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 0 }
        return Int64(info.st_blocks)
    }

    /// Closes and deletes the copy. Idempotent.
    public func discard() {
        let shouldClose = state.withLock { state -> Bool in
            defer { state.discarded = true }
            return !state.discarded
        }
        if shouldClose {
            close(descriptor)
            unlink(path)
        }
    }
}
