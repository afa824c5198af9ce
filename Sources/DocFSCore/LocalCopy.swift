import DocFSStore
import Foundation
import Synchronization

/// The content of one item on local disk, in docfs's private cache directory (mode 0600), and
/// the one owner of that copy's life (`CopyLife`).
///
/// A local copy is filled by byte ranges and knows which ranges it holds (`held`), so a read
/// can be served only from bytes that really arrived; a partial download is never presented
/// as the file. The store writes into it through `ContentSink`; readers borrow its descriptor (`lend`).
/// Reads and writes use `pread`/`pwrite` on one descriptor, which is safe from any thread.
///
/// Every change of the copy's life happens under its lock and is written to the catalog
/// before the lock is let go (`Catalog.recordCopy` and friends), so the journal on disk never
/// lags what the copy is: the first write after a commit is recorded *before* its bytes land
/// (write-ahead), a commit once its writes have landed (flushed to disk first by fsync), and an
/// upload's snapshot is taken while no write is under way. The lock is never held across the network.
public final class LocalCopy: ContentSink, Sendable {
    public let path: String
    public let inode: Inode
    let catalog: Catalog
    /// Everything about the copy that changes, under one lock. Touched only by `LocalCopy`'s
    /// own files (`LocalCopy+Fetching`, `LocalCopy+StreamedUpload`).
    let state: Mutex<State>
    /// Taken around every write of bytes into the file, the user's and the fetched ones alike
    /// (before `state`), so that a fetched chunk never lands over a write made meanwhile.
    let landing = Mutex(())

    struct State {
        /// One user of `used` (the descriptor it was given) is done; returns the descriptors to
        /// close now. A retired one goes as soon as its own users are done, whatever the current
        /// one is used for: reads that never pause would otherwise keep an old snapshot's file alive.
        mutating func releaseDescriptor(_ used: Int32) -> [Int32] {
            if let count = retired[used] {
                // Numbers are unambiguous: a retired descriptor is open, so no newer one has its number.
                retired[used] = count > 1 ? count - 1 : nil
                return count > 1 ? [] : [used]
            }
            users -= 1
            return closable()
        }

        /// A discarded copy's descriptor, once no call uses it.
        mutating func closable() -> [Int32] {
            guard users == 0, discarded, !closed else { return [] }
            closed = true
            return [descriptor]
        }

        /// The copy's file. Replaced (never closed under a user) when the copy stops sharing its
        /// file with an upload's snapshot (`unshare`).
        var descriptor: Int32
        /// Descriptors of files the copy left, with the calls that began before and still use them.
        var retired: [Int32: Int] = [:]
        /// An upload's snapshot is a second name of the copy's file (`startUpload`): the first
        /// change gives the copy a file of its own again, and the snapshot keeps the old one.
        var sharedWithSnapshot = false
        /// A completed stream still reads the copy's file: the first change gives the copy a file
        /// of its own, as for a snapshot (only `unshare` clears it, so no upload's end can).
        var sharedWithStream = false

        var held = ByteRangeSet()
        /// The file's length as the user sees it (downloads and local writes extend it).
        var length: Int64 = 0
        /// Whether a local write ever touched the copy (its time is then the item's).
        var written = false
        /// A time set with utimensat, and the one the cache's file system kept of it (ext4 keeps
        /// nothing before 1901): while the file still has the kept time, the set one is its time.
        var setTime: (requested: Timestamp, kept: Timestamp)?
        /// Local writes whose bytes are landing right now (a snapshot waits for none).
        var writesInFlight = 0
        /// Calls using the current descriptor right now: a discarded copy's descriptor is closed
        /// by the last of them, never under one (its number could be reused by another file).
        var users = 0
        var discarded = false
        var closed = false
        /// Fills a sparse copy on demand (a large file streamed, not downloaded at open).
        var fetcher: RangeFetcher?
        /// The fetcher's last requests ending, once it is detached from a complete copy: until
        /// then a fetched chunk may still arrive, and must not land on the user's bytes.
        var draining: Task<Void, Never>?
        /// Bytes the user wrote while fetched bytes could still arrive: those never land on them.
        var local = ByteRangeSet()
        /// Which bytes a changed sparse copy holds, on disk for a restart (see `HeldLog`).
        var heldLog: HeldLog?
        /// A new file's upload sent while it is written (`StreamedUpload`), until it is settled.
        var streamed: StreamedUpload?
        /// A stream was started once: a copy streams at most once.
        var streamTried = false

        /// A new file nothing of which was uploaded, long enough, that never streamed.
        func mayStream(_ policy: StreamedUpload.Policy) -> Bool {
            !streamTried && length >= policy.minimumLength && life.startedFromNothing && life.uploaded == 0
        }
        var life: CopyLife
    }

    /// Creates an empty local copy at `path` (replacing whatever was there), at the start of
    /// `life`. Nothing is recorded yet: the caller records the copy once it is in place.
    public init(path: String, inode: Inode, catalog: Catalog, life: CopyLife) throws(FSError) {
        let fd = CacheDirectory.creating(path) { open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600) }
        guard fd >= 0 else { throw .local(errno: errno, "cannot create local copy \(path): \(String(cString: strerror(errno)))") }
        self.path = path
        self.inode = inode
        self.catalog = catalog
        self.state = Mutex(State(descriptor: fd, life: life))
    }

    /// Reopens a complete local copy that is already on disk (committed changes from before a
    /// restart, as the journal recorded them in `life`): every byte of it is held.
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

    /// The file's current length.
    public var length: Int64 { state.withLock { $0.length } }

    /// The copy's life as it stands.
    public var life: CopyLife { state.withLock { $0.life } }

    /// Whether a local write ever touched the copy.
    public var wasWritten: Bool { state.withLock { $0.written } }

    // MARK: Life

    /// Applies `event` to the copy's life and records the result in the catalog, under the
    /// copy's lock; returns the event's action. The one way anyone changes a copy's life.
    @discardableResult
    public func update<Result>(_ event: (inout CopyLife) -> Result) throws(FSError) -> Result {
        try state.withLock { (state) throws(FSError) -> Result in
            var life = state.life
            let result = event(&life)
            // Only what the catalog keeps is recorded (`CopyLife.Recorded`): an open or a
            // release that changes only the count of handles writes nothing.
            if life.recorded != state.life.recorded {
                try catalog.recordCopy(inode, life)
            }
            state.life = life
            return result
        }
    }

    /// Applies `event` and records it as `update` does, but keeps the new life also when the
    /// catalog cannot record it (its disk is full), and returns that error. Only for an event
    /// the journal may lag: one whose recorded result a restart reads as it reads the old one.
    /// (An upload attempt that ended leaves the journal saying `uploading`, which a restart
    /// takes for a pending change, as it is; in memory the attempt must be over, or no later
    /// one could start.)
    public func updateLettingTheJournalLag(_ event: (inout CopyLife) -> Void) -> FSError? {
        state.withLock { state in
            var life = state.life
            event(&life)
            var failure: FSError?
            if life.recorded != state.life.recorded {
                do throws(FSError) { try catalog.recordCopy(inode, life) } catch { failure = error }
            }
            state.life = life
            return failure
        }
    }

    // MARK: Local changes

    /// Writes the user's bytes at `offset`. The first change since a commit is recorded in
    /// the journal before the bytes land. A sparse copy is written at once: the bytes the
    /// write does not cover are fetched only before the commit (`fetchRemaining`), and none
    /// of them lands on the user's.
    public func writeLocal(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(FSError) -> Int {
        try landing.withLock { _ throws(FSError) -> Int in try landUsers(bytes, at: offset) }
    }

    /// `writeLocal` at the copy's end as it stands when the bytes land (O_APPEND), whatever
    /// offset the caller was given. Returns the count and where they landed.
    public func appendLocal(_ bytes: UnsafeRawBufferPointer) throws(FSError) -> (Int, Int64) {
        try landing.withLock { _ throws(FSError) -> (Int, Int64) in
            let end = length
            return (try landUsers(bytes, at: end), end)
        }
    }

    /// The body of `writeLocal`, under the `landing` lock.
    private func landUsers(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(FSError) -> Int {
        let descriptor = try beginChange(writing: offset..<(offset + Int64(bytes.count)))
        var written = 0
        while written < bytes.count {
            let n = pwrite(descriptor, bytes.baseAddress! + written, bytes.count - written, off_t(offset) + off_t(written))
            if n < 0 {
                if errno == EINTR { continue }
                let code = errno
                endChange(descriptor)
                throw .local(errno: code, "writing \(path): \(String(cString: strerror(code)))")
            }
            written += n
        }
        endChange(descriptor) { state in
            if offset > state.length { state.held.insert(state.length..<offset) }  // the hole reads as zeros
            state.held.insert(offset..<(offset + Int64(written)))
            state.length = max(state.length, offset + Int64(written))
            state.written = true
            state.streamed?.wrote(offset..<(offset + Int64(written)))
        }
        return written
    }

    /// Ends a change begun by `beginChange` on `descriptor`, applying `done` to the state under the same lock.
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

    /// Sets the length (truncate/ftruncate/O_TRUNC): a change like a write. Growing adds
    /// zeros, which are held.
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
        }
    }

    /// Records a change with no bytes (a new, empty file): it must reach the store.
    public func markChanged() throws(FSError) {
        endChange(try beginChange())
    }

    /// Hands the local changes over: the journal's commit (what close() and fsync() wait for).
    /// `durably` (fsync) flushes the copy to disk first; a close does not, as on any local file
    /// system: a daemon that dies loses nothing the kernel holds, and after a machine crash
    /// `SessionMarker` keeps copies that may be torn from replacing the store's version.
    /// Returns false when there was nothing to commit.
    @discardableResult
    public func commit(durably: Bool = false) throws(FSError) -> Bool {
        guard life.uncommitted else { return false }
        if durably { try sync() }
        return try state.withLock { (state) throws(FSError) -> Bool in
            // A write still landing, or one that began after the sync, stays uncommitted.
            guard state.life.uncommitted, state.writesInFlight == 0 else { return false }
            // Holes are never committed: `fetchRemaining` first (`DocFileSystem.completeForCommit`).
            guard state.fetcher == nil else { throw .io("\(path) is committed before all its content is local") }
            var life = state.life
            life.committedChanges()
            try record(life, in: &state)
            return true
        }
    }

    /// Records `life` in the catalog and makes it the copy's, under the lock; a new commit
    /// records the copy's size and time with it.
    func record(_ life: CopyLife, in state: inout State) throws(FSError) {
        if life.committed != state.life.committed {
            try catalog.recordCommit(inode, life, size: state.length, modified: modificationTime(state))
        } else {
            try catalog.recordCopy(inode, life)
        }
        state.life = life
    }

    /// Begins a local change; returns the descriptor to make it through (`endChange` ends it).
    /// A write (`writing`, the bytes it sets, under `landing`) may change a sparse copy: its
    /// bytes are marked the user's, so no fetched chunk lands on them, and recorded in the
    /// copy's `HeldLog` before they land. Any other change (a truncate) needs a complete copy
    /// (`DocFileSystem.provideForChange`).
    private func beginChange(writing range: ByteRange? = nil) throws(FSError) -> Int32 {
        try unshareAhead()
        return try state.withLock { (state) throws(FSError) -> Int32 in
            guard !state.discarded else { throw .stale }
            if state.fetcher != nil || state.draining != nil {
                guard let range else { throw .io("\(path) is changed before all its content is local") }
                // Zeros up to a write past the end are the user's too.
                let users = range.lowerBound > state.length ? state.length..<range.upperBound : range
                if state.fetcher != nil {
                    if state.heldLog == nil { state.heldLog = try HeldLog(copyPath: path, holding: state.held) }
                    try state.heldLog?.append(users)
                }
                state.local.insert(users)
            }
            try unshare(&state)
            if !state.life.uncommitted {
                var life = state.life
                life.changed()
                try record(life, in: &state)
            }
            state.writesInFlight += 1
            state.users += 1
            return state.descriptor
        }
    }

    /// Whether every byte of the file is local.
    public var isComplete: Bool {
        state.withLock { $0.held.contains(0..<$0.length) }
    }

    /// Makes the local changes durable on disk.
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

    /// The byte ranges that have arrived.
    public var held: ByteRangeSet { state.withLock { $0.held } }

    // MARK: ContentSink

    /// Fetched bytes land, except on any the user wrote meanwhile (`local`).
    public func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        let outcome = landing.withLock { _ in Result { () throws(StoreError) in try land(bytes, at: offset) } }
        try outcome.get()
    }

    /// `write`, under `landing`.
    private func land(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        let range = offset..<(offset + Int64(bytes.count))
        do { try unshareAhead() } catch {
            if case .local(let code, let message) = error { throw .localIO(errno: code, message: message) }
            throw .localIO(errno: EIO, message: "\(error)")
        }
        let acquired: Result<(descriptor: Int32, pieces: [ByteRange])?, FSError> = state.withLock { state in
            Result { () throws(FSError) -> (descriptor: Int32, pieces: [ByteRange])? in
                guard !state.discarded else { return nil }
                try unshare(&state)
                state.users += 1
                return (state.descriptor, state.local.isEmpty ? [range] : state.local.missing(in: range))
            }
        }
        let lent: (descriptor: Int32, pieces: [ByteRange])?
        switch acquired {
        case .success(let value): lent = value
        case .failure(.local(let code, let message)): throw .localIO(errno: code, message: message)
        case .failure(let error): throw .localIO(errno: EIO, message: "\(error)")
        }
        guard let (descriptor, pieces) = lent else { throw .localIO(errno: EBADF, message: "the local copy \(path) is gone") }
        for piece in pieces {
            let start = Int(piece.lowerBound - offset)
            let count = Int(piece.upperBound - piece.lowerBound)
            var written = 0
            while written < count {
                let n = pwrite(descriptor, bytes.baseAddress! + start + written, count - written, off_t(piece.lowerBound) + off_t(written))
                if n < 0 {
                    if errno == EINTR { continue }
                    let code = errno
                    releaseDescriptor(descriptor)
                    throw .localIO(errno: code, message: "writing the local copy: \(String(cString: strerror(code)))")
                }
                written += n
            }
        }
        let (unused, log) = state.withLock { state -> ([Int32], HeldLog?) in
            state.held.insert(range)
            state.length = max(state.length, range.upperBound)
            return (state.releaseDescriptor(descriptor), state.heldLog)
        }
        Self.close(unused)
        // After the bytes landed (still under `landing`, so in order with the user's writes).
        do { try log?.append(range) } catch { throw .localIO(errno: EIO, message: "\(error)") }
    }

    /// Counts one more user of the descriptor and returns it; nil when the copy is gone.
    /// `forChange`: the call changes the file, which an upload's snapshot must not see.
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

    /// Lends the descriptor for a read of `count` bytes at `offset` (stopping at the end of
    /// the file), all of which must be held: the caller reads them straight from the file.
    public func lend(at offset: Int64, count: Int) throws(FSError) -> DescriptorLoan {
        let (available, descriptor) = try state.withLock { (state) throws(FSError) -> (Int, Int32) in
            (try lendable(at: offset, count: count, &state), state.descriptor)
        }
        return DescriptorLoan(descriptor: descriptor, count: available, copy: available > 0 ? self : nil)
    }

    /// A read's loan when its bytes are local, in one lock for a complete copy; nil when a
    /// sparse copy must fetch them first (the fetch, and read-ahead for `stream`, has started:
    /// wait with `waitForBytes`). The hot path of every read.
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

    /// How many of `count` bytes at `offset` a read gets (0 at the end), counting a user of the
    /// descriptor when more than none; throws when they are not all local.
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

    /// Forgets every byte (before a fetch is tried again from the start).
    public func reset() {
        state.withLock { state in
            state.streamed?.abandon()
            state.held = ByteRangeSet()
            state.length = 0
        }
        guard let descriptor = try? acquireDescriptor(forChange: true) else { return }
        _ = ftruncate(descriptor, 0)
        releaseDescriptor(descriptor)
    }

    /// Sets the file's length to the downloaded item's size.
    public func setLength(_ size: Int64) throws(FSError) {
        guard let descriptor = try acquireDescriptor(forChange: true) else { throw .stale }
        defer { releaseDescriptor(descriptor) }
        guard ftruncate(descriptor, off_t(size)) == 0 else {
            throw .local(errno: errno, "sizing the local copy: \(String(cString: strerror(errno)))")
        }
        state.withLock { $0.length = size }
    }

    /// The local file's modification time (the kernel moves it on every local write), or the
    /// time last set with `setModificationTime` while no write came after it.
    /// The copy's time, or nil once its file is closed (evicted while a `stat` looked at it:
    /// an fstat of the closed descriptor read as time 0, or another file's time had the number
    /// been reused). The catalog's time is the item's then.
    public var modificationTime: Timestamp? { state.withLock { $0.closed ? nil : modificationTime($0) } }

    private func modificationTime(_ state: State) -> Timestamp {
        let onDisk = fileModificationTime(state.descriptor)
        if let set = state.setTime, set.kept == onDisk { return set.requested }
        return onDisk
    }

    private func fileModificationTime(_ descriptor: Int32) -> Timestamp {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 0 }
        return Timestamp(seconds: Int64(info.st_mtim.tv_sec), nanoseconds: Int64(info.st_mtim.tv_nsec))
    }

    /// Sets the local file's modification time (utimensat on an item with local changes).
    public func setModificationTime(_ time: Timestamp) {
        state.withLock { state in
            guard !state.closed else { return }
            var times = [timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2),  // UTIME_OMIT: leave atime
                         timespec(tv_sec: Int(time.parts.seconds), tv_nsec: Int(time.parts.nanoseconds))]
            _ = futimens(state.descriptor, &times)
            state.setTime = (time, fileModificationTime(state.descriptor))
        }
    }

    /// Disk space the copy really uses, in 512-byte blocks (what `st_blocks` reports).
    public var allocatedBlocks: Int64 {
        guard let descriptor = try? acquireDescriptor() else { return 0 }
        defer { releaseDescriptor(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return 0 }
        return Int64(info.st_blocks)
    }

    /// Closes the copy and keeps the file (unsynced changes stay on disk for a later upload).
    public func close() {
        _ = letGo()
    }

    /// Closes and deletes the copy. Idempotent.
    public func discard() {
        if letGo() {
            unlink(path)
            HeldLog.remove(copyPath: path)
        }
    }

    /// Marks the copy gone, stops its fetcher and closes the descriptor (now, or when its last
    /// user is done). Returns whether this call did it.
    private func letGo() -> Bool {
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

/// A local copy's descriptor, lent for one read: the copy cannot close it until the loan ends
/// (when this value goes away).
public struct DescriptorLoan: ~Copyable {
    public let descriptor: Int32
    /// How many bytes to read (0 at or past the end of the file).
    public let count: Int
    fileprivate let copy: LocalCopy?

    deinit { copy?.releaseDescriptor(descriptor) }
}
