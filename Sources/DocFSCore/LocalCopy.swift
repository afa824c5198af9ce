import DocFSStore
import Foundation
import Synchronization

/// One item's content in the private cache, and the one owner of its `CopyLife`. Every life
/// change is recorded before the copy takes it, so the journal never lags the copy: a first
/// write is journaled before its bytes land. The catalog is written under `journal`, never
/// under `state`; no lock is held across the network. Lock order: `landing`, `journal`, `state`.
public final class LocalCopy: ContentSink, Sendable {
    public let path: String
    public let inode: Inode
    let catalog: Catalog
    let state: Mutex<State>
    /// Taken around every change of `state.life` and the catalog write that records it (see
    /// `changeLife`), and before a write begins: SQLite runs under it, never under `state`.
    let journal = Mutex(())
    /// Taken around every write of bytes (before `state`): a fetched chunk never lands over a user's write.
    let landing = Mutex(())

    struct State {
        /// A retired descriptor goes once its own users are done, or endless reads keep an old file alive.
        mutating func releaseDescriptor(_ used: Int32) -> [Int32] {
            if let count = retired[used] {
                retired[used] = count > 1 ? count - 1 : nil
                return count > 1 ? [] : [used]
            }
            users -= 1
            return closable()
        }

        mutating func closable() -> [Int32] {
            guard users == 0, discarded, !closed else { return [] }
            closed = true
            return [descriptor]
        }

        /// Never closed under a user; replaced by `unshare`.
        var descriptor: Int32
        var retired: [Int32: Int] = [:]
        /// A snapshot shares the copy's file: the first change gives the copy its own.
        var sharedWithSnapshot = false
        /// A completed stream still reads the file, as a snapshot does (only `unshare` clears it).
        var sharedWithStream = false

        var held = ByteRangeSet()
        var length: Int64 = 0
        /// Counts the changes of the file's bytes or length: `allocatedBlocks` asks the file
        /// system again only when it moved (a cache of idle copies is summed without an fstat each).
        var contentGeneration: UInt64 = 0
        var contentChangedAt = ContinuousClock.now
        var measuredBlocks: (generation: UInt64, descriptor: Int32, blocks: Int64)?

        mutating func contentChanged() {
            contentGeneration &+= 1
            contentChangedAt = .now
        }
        /// Then its time is the item's.
        var written = false
        /// A utimensat time and what the file system kept of it (ext4 keeps nothing before 1901).
        var setTime: (requested: Timestamp, kept: Timestamp)?
        /// A snapshot waits for none landing.
        var writesInFlight = 0
        /// A discarded copy's descriptor is closed by the last user, never under one (its number could be reused).
        var users = 0
        var discarded = false
        var closed = false
        var fetcher: RangeFetcher?
        /// Until the detached fetcher's last requests end, a fetched chunk may still arrive.
        var draining: Task<Void, Never>?
        /// Fetched bytes never land on these.
        var local = ByteRangeSet()
        var heldLog: HeldLog?
        var streamed: StreamedUpload?
        var streamTried = false

        func mayStream(_ policy: StreamedUpload.Policy) -> Bool {
            !streamTried && length >= policy.minimumLength && life.startedFromNothing && life.uploaded == 0
        }
        var life: CopyLife
    }

    /// Nothing is recorded: the caller does once it is in place.
    public init(path: String, inode: Inode, catalog: Catalog, life: CopyLife) throws(FSError) {
        let fd = CacheDirectory.creating(path) { open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw .local(errno: errno, "cannot create local copy \(path): \(String(cString: strerror(errno)))") }
        self.path = path
        self.inode = inode
        self.catalog = catalog
        self.state = Mutex(State(descriptor: fd, life: life))
    }

    /// Committed changes from before a restart.
    public init(adopting path: String, inode: Inode, catalog: Catalog, life: CopyLife) throws(FSError) {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw .local(errno: errno, "cannot open local copy \(path): \(String(cString: strerror(errno)))") }
        var info = stat()
        fstat(fd, &info)
        self.path = path
        self.inode = inode
        self.catalog = catalog
        var initial = State(descriptor: fd, life: life)
        initial.length = Int64(info.st_size)
        initial.held = ByteRangeSet([0..<Int64(info.st_size)])
        initial.written = true
        self.state = Mutex(initial)
    }

    public var length: Int64 { state.withLock { $0.length } }

    public var life: CopyLife { state.withLock { $0.life } }

    public var wasWritten: Bool { state.withLock { $0.written } }

    // MARK: Local changes

    /// Journaled before the bytes land; a sparse copy's other bytes are fetched before commit.
    public func writeLocal(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(FSError) -> Int {
        try landing.withLock { _ throws(FSError) -> Int in try landUsers(bytes, at: offset) }
    }

    /// O_APPEND: at the end as it stands when the bytes land.
    public func appendLocal(_ bytes: UnsafeRawBufferPointer) throws(FSError) -> (Int, Int64) {
        try landing.withLock { _ throws(FSError) -> (Int, Int64) in
            let end = length
            return (try landUsers(bytes, at: end), end)
        }
    }

    private func landUsers(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(FSError) -> Int {
        let range = offset..<(offset + Int64(bytes.count))
        let descriptor = try beginChange(writing: range)
        if let code = Self.writeAll(descriptor, bytes, at: offset) {
            endChange(descriptor) { $0.contentChanged() }  // some bytes may have landed
            throw .local(errno: code, "writing \(path): \(String(cString: strerror(code)))")
        }
        endChange(descriptor) { state in
            if offset > state.length { state.held.insert(state.length..<offset) }  // the hole reads as zeros
            state.held.insert(range)
            state.length = max(state.length, range.upperBound)
            state.written = true
            state.contentChanged()
            state.streamed?.wrote(range)
        }
        return bytes.count
    }

    /// `pwrite` until every byte is written. Returns the errno that stopped it, or nil.
    static func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int64) -> Int32? {
        var written = 0
        while written < bytes.count {
            let n = pwrite(descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
            if n < 0 {
                if errno == EINTR { continue }
                return errno
            }
            written += n
        }
        return nil
    }

    private func endChange(_ descriptor: Int32, _ done: (inout State) -> Void = { _ in }) {
        let unused = state.withLock { state -> [Int32] in
            state.writesInFlight -= 1
            done(&state)
            return state.releaseDescriptor(descriptor)
        }
        Self.close(unused)
    }

    private static func close(_ descriptors: [Int32]) {
        for descriptor in descriptors { Glibc.close(descriptor) }
    }

    /// A change like a write. Growing adds held zeros.
    public func truncate(to size: Int64) throws(FSError) {
        let descriptor = try beginChange()
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            let code = errno
            endChange(descriptor)
            throw .local(errno: code, "truncating \(path): \(String(cString: strerror(code)))")
        }
        endChange(descriptor) { state in
            if size < state.length {
                state.held = ByteRangeSet(state.held.ranges.compactMap { range in
                    range.lowerBound < size ? range.lowerBound..<min(range.upperBound, size) : nil
                })
            } else if size > state.length {
                state.held.insert(state.length..<size)
            }
            if size == 0 { state.held = ByteRangeSet() }
            if size != state.length { state.streamed?.abandon() }
            state.length = size
            state.written = true
            state.contentChanged()
        }
    }

    /// A new, empty file: it must reach the store.
    public func markChanged() throws(FSError) {
        endChange(try beginChange())
    }

    /// The journal's commit. Only `durably` (fsync) flushes first, as on local file systems.
    /// Returns false if nothing was committed (`unlessOpen`: also while a handle has it open).
    @discardableResult
    public func commit(durably: Bool = false, unlessOpen: Bool = false) throws(FSError) -> Bool {
        guard life.uncommitted else { return false }
        if durably { try sync() }
        return try changeLife { (state) throws(FSError) -> (next: CopyLife?, result: Bool) in
            // A write still landing, or one that began after the sync, stays uncommitted.
            guard state.life.uncommitted, state.writesInFlight == 0 else { return (nil, false) }
            if unlessOpen, state.life.openCount > 0 { return (nil, false) }
            // Holes are never committed: `fetchRemaining` first.
            guard state.fetcher == nil else { throw .io("\(path) is committed before all its content is local") }
            var life = state.life
            life.committedChanges()
            return (life, true)
        }
    }

    /// A write into a sparse copy marks and logs its bytes before they land; other changes need a complete copy.
    private func beginChange(writing range: ByteRange? = nil) throws(FSError) -> Int32 {
        try unshareAhead()
        var lent: Int32?
        do {
            return try changeLife { (state) throws(FSError) -> (next: CopyLife?, result: Int32) in
                guard !state.discarded else { throw .stale }
                if state.fetcher != nil || state.draining != nil {
                    guard let range else { throw .io("\(path) is changed before all its content is local") }
                    let users = range.lowerBound > state.length ? state.length..<range.upperBound : range
                    if state.fetcher != nil {
                        if state.heldLog == nil { state.heldLog = try HeldLog(copyPath: path, holding: state.held) }
                        try state.heldLog?.append(users)
                    }
                    state.local.insert(users)
                }
                try unshare(&state)
                state.writesInFlight += 1
                state.users += 1
                lent = state.descriptor
                guard !state.life.uncommitted else { return (nil, state.descriptor) }
                var life = state.life
                life.changed()
                return (life, state.descriptor)
            }
        } catch {
            if let lent { endChange(lent) }  // not journaled: no byte lands
            throw error
        }
    }

    public var isComplete: Bool {
        state.withLock { $0.held.contains(0..<$0.length) }
    }

    public func sync() throws(FSError) {
        guard let descriptor = try acquireDescriptor() else { throw .stale }
        defer { releaseDescriptor(descriptor) }
        guard fdatasync(descriptor) == 0 else {
            throw .local(errno: errno, "syncing \(path): \(String(cString: strerror(errno)))")
        }
    }

    deinit {
        state.withLock { state in
            Self.close(Array(state.retired.keys))
            if !state.closed { Glibc.close(state.descriptor) }
        }
    }

    public var held: ByteRangeSet { state.withLock { $0.held } }

    // MARK: ContentSink

    /// Never on bytes the user wrote meanwhile (`local`).
    public func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        try landing.withLock { _ throws(StoreError) in try land(bytes, at: offset) }
    }

    private func land(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        let range = offset..<(offset + Int64(bytes.count))
        let lent: (descriptor: Int32, pieces: [ByteRange])?
        do throws(FSError) {
            try unshareAhead()
            lent = try state.withLock { (state) throws(FSError) -> (descriptor: Int32, pieces: [ByteRange])? in
                guard !state.discarded else { return nil }
                try unshare(&state)
                state.users += 1
                return (state.descriptor, state.local.isEmpty ? [range] : state.local.missing(in: range))
            }
        } catch .local(let code, let message) {
            throw .localIO(errno: code, message: message)
        } catch {
            throw .localIO(errno: EIO, message: "\(error)")
        }
        guard let (descriptor, pieces) = lent else { throw .localIO(errno: EBADF, message: "the local copy \(path) is gone") }
        for piece in pieces {
            let start = Int(piece.lowerBound - offset)
            let chunk = UnsafeRawBufferPointer(rebasing: bytes[start..<(start + Int(piece.upperBound - piece.lowerBound))])
            if let code = Self.writeAll(descriptor, chunk, at: piece.lowerBound) {
                state.withLock { $0.contentChanged() }  // some bytes may have landed
                releaseDescriptor(descriptor)
                throw .localIO(errno: code, message: "writing the local copy: \(String(cString: strerror(code)))")
            }
        }
        let (unused, log) = state.withLock { state -> ([Int32], HeldLog?) in
            state.held.insert(range)
            state.length = max(state.length, range.upperBound)
            state.contentChanged()
            return (state.releaseDescriptor(descriptor), state.heldLog)
        }
        Self.close(unused)
        // Still under `landing`: in order with the user's writes.
        do { try log?.append(range) } catch { throw .localIO(errno: EIO, message: "\(error)") }
    }

    /// `forChange`: a change an upload's snapshot must not see.
    private func acquireDescriptor(forChange: Bool = false) throws(FSError) -> Int32? {
        if forChange { try unshareAhead() }
        return try state.withLock { (state) throws(FSError) -> Int32? in
            guard !state.discarded else { return nil }
            if forChange { try unshare(&state) }
            state.users += 1
            return state.descriptor
        }
    }

    func releaseDescriptor(_ descriptor: Int32) {
        Self.close(state.withLock { $0.releaseDescriptor(descriptor) })
    }

    // MARK: Reading

    /// All bytes must be held: the caller reads them from the file.
    public func lend(at offset: Int64, count: Int) throws(FSError) -> DescriptorLoan {
        let (available, descriptor) = try state.withLock { (state) throws(FSError) -> (Int, Int32) in
            (try lendable(at: offset, count: count, &state), state.descriptor)
        }
        return DescriptorLoan(descriptor: descriptor, count: available, copy: available > 0 ? self : nil)
    }

    /// The hot path of every read. Nil when a sparse copy must fetch first (`waitForBytes`).
    public func lendForRead(at offset: Int64, count: Int, stream: UInt64) throws(FSError) -> DescriptorLoan? {
        let (available, descriptor, fetcher) = try state.withLock { (state) throws(FSError) -> (Int, Int32, RangeFetcher?) in
            if let fetcher = state.fetcher { return (0, state.descriptor, fetcher) }
            return (try lendable(at: offset, count: count, &state), state.descriptor, nil)
        }
        if let fetcher {
            guard fetcher.prepare(offset..<(offset + Int64(count)), stream: stream) else { return nil }
            return try lend(at: offset, count: count)
        }
        return DescriptorLoan(descriptor: descriptor, count: available, copy: available > 0 ? self : nil)
    }

    private func lendable(at offset: Int64, count: Int, _ state: inout State) throws(FSError) -> Int {
        let end = min(offset + Int64(count), state.length)
        guard end > offset else { return 0 }
        guard !state.discarded else { throw .stale }
        guard state.held.contains(offset..<end) else {
            throw .io("bytes \(offset)..<\(end) of \(path) are not local")
        }
        state.users += 1
        return Int(end - offset)
    }

    /// Before a fetch is retried from the start.
    public func reset() {
        state.withLock { state in
            state.streamed?.abandon()
            state.held = ByteRangeSet()
            state.length = 0
        }
        try? setLength(0)
    }

    public func setLength(_ size: Int64) throws(FSError) {
        guard let descriptor = try acquireDescriptor(forChange: true) else { throw .stale }
        defer { releaseDescriptor(descriptor) }
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            throw .local(errno: errno, "sizing the local copy: \(String(cString: strerror(errno)))")
        }
        state.withLock { state in
            state.length = size
            state.contentChanged()
        }
    }

    /// The set time while no write came after it. Nil once closed (an fstat would read garbage).
    public var modificationTime: Timestamp? { state.withLock { $0.closed ? nil : modificationTime($0) } }

    func modificationTime(_ state: State) -> Timestamp {
        let onDisk = fileModificationTime(state.descriptor)
        if let set = state.setTime, set.kept == onDisk { return set.requested }
        return onDisk
    }

    private func fileModificationTime(_ descriptor: Int32) -> Timestamp {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 0 }
        return Timestamp(seconds: Int64(info.st_mtim.tv_sec), nanoseconds: Int64(info.st_mtim.tv_nsec))
    }

    public func setModificationTime(_ time: Timestamp) {
        state.withLock { state in
            guard !state.closed else { return }
            var times = [timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2),  // UTIME_OMIT: leave atime
                         timespec(tv_sec: Int(time.parts.seconds), tv_nsec: Int(time.parts.nanoseconds))]
            _ = futimens(state.descriptor, &times)
            state.setTime = (time, fileModificationTime(state.descriptor))
        }
    }

    /// `st_blocks`, asked of the file system only after the bytes or length changed.
    public var allocatedBlocks: Int64 {
        let (generation, known) = state.withLock { state -> (UInt64, Int64?) in
            guard let measured = state.measuredBlocks, measured.generation == state.contentGeneration,
                  measured.descriptor == state.descriptor else { return (state.contentGeneration, nil) }
            return (state.contentGeneration, measured.blocks)
        }
        if let known { return known }
        guard let descriptor = try? acquireDescriptor() else { return 0 }
        defer { releaseDescriptor(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 0 }
        let blocks = Int64(info.st_blocks)
        // Measured before a change that lands meanwhile: its generation is the older one. Some
        // file systems (ZFS) count a write's blocks only seconds later: not kept until then.
        state.withLock { state in
            guard ContinuousClock.now - state.contentChangedAt > .seconds(10) else { return }
            state.measuredBlocks = (generation, descriptor, blocks)
        }
        return blocks
    }

    public func discard() {
        if close() {
            unlink(path)
            HeldLog.remove(copyPath: path)
        }
    }

    /// Unsynced changes stay on disk for a later upload. Returns whether this call did it.
    @discardableResult
    public func close() -> Bool {
        let (first, unused, fetcher) = state.withLock { state -> (Bool, [Int32], RangeFetcher?) in
            guard !state.discarded else { return (false, [], nil) }
            state.discarded = true
            state.streamed?.abandon()
            let fetcher = state.fetcher
            state.fetcher = nil
            state.heldLog = nil  // closed by its last holder (`land` may be appending to it)
            return (true, state.closable(), fetcher)
        }
        fetcher?.cancel(.stale)
        Self.close(unused)
        return first
    }

}

/// The copy cannot close the descriptor until the loan ends.
public struct DescriptorLoan: ~Copyable {
    public let descriptor: Int32
    public let count: Int
    fileprivate let copy: LocalCopy?

    deinit { copy?.releaseDescriptor(descriptor) }
}
