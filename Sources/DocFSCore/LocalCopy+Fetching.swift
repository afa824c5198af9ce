import DocFSStore
import Foundation

/// A sparse copy filled by ranges as reads ask for them (`RangeFetcher`): which bytes are
/// there, waiting for those that are not, read-ahead per reader, stalls, and stopping the
/// fetch when the copy is truncated, renamed, rebased or evicted.
extension LocalCopy {
    /// Makes `fetcher` fill the copy on demand: it is sparse, `length` bytes long.
    func attach(_ fetcher: RangeFetcher) {
        state.withLock { $0.fetcher = fetcher }
    }

    /// Whether `count` bytes at `offset` can be read now. Starts fetching what a sparse copy
    /// lacks (and what the sequential reader `stream` will want next); never waits.
    public func prepareRead(at offset: Int64, count: Int, stream: UInt64 = 0) -> Bool {
        guard let fetcher = state.withLock({ $0.fetcher }) else { return true }
        return fetcher.prepare(offset..<(offset + Int64(count)), stream: stream)
    }

    /// The reader `stream` is gone: its read-ahead state goes too.
    public func endReadStream(_ stream: UInt64) {
        state.withLock { $0.fetcher }?.endStream(stream)
    }

    /// Waits until `count` bytes at `offset` are local (or cannot come: the error says why).
    public func waitForBytes(at offset: Int64, count: Int) async throws(FSError) {
        guard let fetcher = state.withLock({ $0.fetcher }) else { return }
        try await fetcher.wait(for: offset..<(offset + Int64(count)))
    }

    /// A reader gave up waiting for bytes: see `RangeFetcher.noteStall`.
    public func noteStall() {
        state.withLock { $0.fetcher }?.noteStall()
    }

    /// Whether the store stalled on this copy's ranges lately: see `RangeFetcher.stalled`.
    public func stalled(within window: Duration) -> Bool {
        state.withLock { $0.fetcher }?.stalled(within: window) ?? false
    }

    /// Fetches every byte a sparse copy lacks (none the user wrote): before its changes are
    /// committed, since only a complete copy is committed and uploaded, and before a truncate.
    /// Returns once no fetched byte can land any more.
    public func fetchRemaining() async throws(FSError) {
        if let fetcher = state.withLock({ $0.fetcher }) {
            try await fetcher.fetchAll()
            let complete = state.withLock { state -> Bool in
                guard state.fetcher === fetcher, state.held.contains(0..<state.length) else { return false }
                state.fetcher = nil
                // Retired for good: a reader that still holds it can start no request.
                state.draining = retirement(of: fetcher)
                return true
            }
            if complete { try catalog.recordComplete(inode) }
        }
        await state.withLock { $0.draining }?.value
    }

    /// The store version the copy's ranges come from changed without its content (attributes
    /// pushed by docfs itself).
    func rebase(from old: ETag, to new: ETag) {
        state.withLock { $0.fetcher }?.rebase(from: old, to: new)
    }

    /// The item was renamed on the store: the bytes still to fetch are read from `path`.
    func retarget(to path: StorePath) {
        state.withLock { $0.fetcher }?.retarget(to: path)
    }

    /// Stops filling the copy (it is about to be truncated): no fetched byte lands after this.
    public func stopFetching() async {
        state.withLock { state in
            guard let fetcher = state.fetcher else { return }
            state.fetcher = nil
            state.draining = retirement(of: fetcher)
        }
        await state.withLock { $0.draining }?.value
    }

    /// The version the copy's holes belong to is gone from the store: they stay zeros from now
    /// on, read as such and uploaded as such (only ever as a new file: `CopyLife.versionLost`).
    /// Returns how many bytes were lost that way.
    @discardableResult
    public func giveUpFetching() async throws(FSError) -> Int64 {
        await stopFetching()
        let missing = state.withLock { state -> Int64 in
            let missing = state.held.missing(in: 0..<state.length).reduce(Int64(0)) { $0 + ($1.upperBound - $1.lowerBound) }
            state.held.insert(0..<state.length)  // a sparse file's holes read as zeros
            return missing
        }
        try catalog.recordComplete(inode)
        return missing
    }

    /// Ends `fetcher`, just detached: its requests on the wire end before the user's bytes stop
    /// being guarded from them (`local`), and the copy needs no `HeldLog` once it is not sparse.
    private func retirement(of fetcher: RangeFetcher) -> Task<Void, Never> {
        Task { [self] in
            await fetcher.stop(.stale)
            let log = state.withLock { state -> HeldLog? in
                state.draining = nil
                state.local = ByteRangeSet()
                defer { state.heldLog = nil }
                return state.heldLog
            }
            // Under `landing`: no fetched chunk is appending to it.
            landing.withLock { _ in log?.remove() }
        }
    }

    /// Whether bytes are still to be fetched on demand.
    public var isSparse: Bool { state.withLock { $0.fetcher != nil } }

    /// Whether fetched bytes may still land: sparse, or its fetcher's last requests ending.
    /// A truncate waits until neither (`fetchRemaining`).
    public var isBeingFilled: Bool { state.withLock { $0.fetcher != nil || $0.draining != nil } }

    /// Whether the copy has changes to commit whose holes must be fetched first.
    public var needsFillBeforeCommit: Bool { state.withLock { $0.fetcher != nil && $0.life.uncommitted } }

    /// Bytes held and the file's length while a download fills the copy (the whole file at
    /// open, or ranges a reader asked for); nil when nothing is being fetched.
    public var downloadProgress: (done: Int64, total: Int64)? {
        let (fetching, fetcher, done, length) = state.withLock { ($0.life.content == .fetching, $0.fetcher, $0.held.count, $0.length) }
        guard fetching || fetcher?.isFetching == true else { return nil }
        return (done, length)
    }
}
