import DocFSStore

extension LocalCopy {
    func attach(_ fetcher: RangeFetcher) {
        state.withLock { $0.fetcher = fetcher }
    }

    /// Never waits.
    public func prepareRead(at offset: Int64, count: Int, stream: UInt64 = 0) -> Bool {
        guard let fetcher = state.withLock({ $0.fetcher }) else { return true }
        return fetcher.prepare(offset..<(offset + Int64(count)), stream: stream)
    }

    public func endReadStream(_ stream: UInt64) {
        state.withLock { $0.fetcher }?.endStream(stream)
    }

    public func waitForBytes(at offset: Int64, count: Int) async throws(FSError) {
        guard let fetcher = state.withLock({ $0.fetcher }) else { return }
        try await fetcher.wait(for: offset..<(offset + Int64(count)))
    }

    public func noteStall() {
        state.withLock { $0.fetcher }?.noteStall()
    }

    public func stalled(within window: Duration) -> Bool {
        state.withLock { $0.fetcher }?.stalled(within: window) ?? false
    }

    /// Before a commit or a truncate. Returns once no fetched byte can land any more.
    public func fetchRemaining() async throws(FSError) {
        if let fetcher = state.withLock({ $0.fetcher }) {
            try await fetcher.wait(for: 0..<fetcher.size)
            let complete = state.withLock { state -> Bool in
                guard state.fetcher === fetcher, state.held.contains(0..<state.length) else { return false }
                retire(&state)
                return true
            }
            if complete { try await Blocking.run { [catalog, inode] () throws(FSError) in try catalog.recordComplete(inode) } }
        }
        await state.withLock { $0.draining }?.value
    }

    func retarget(to path: StorePath) {
        state.withLock { $0.fetcher }?.retarget(to: path)
    }

    /// Before a truncate: no fetched byte lands after this.
    public func stopFetching() async {
        state.withLock { retire(&$0) }
        await state.withLock { $0.draining }?.value
    }

    /// The holes stay zeros, uploaded only ever as a new file. Returns how many bytes were lost.
    @discardableResult
    public func giveUpFetching() async throws(FSError) -> Int64 {
        await stopFetching()
        let missing = state.withLock { state -> Int64 in
            let missing = state.held.missing(in: 0..<state.length).reduce(Int64(0)) { $0 + ($1.upperBound - $1.lowerBound) }
            state.held.insert(0..<state.length)  // a sparse file's holes read as zeros
            return missing
        }
        try await Blocking.run { [catalog, inode] () throws(FSError) in try catalog.recordComplete(inode) }
        return missing
    }

    /// Retired for good: a reader that still holds the fetcher can start no request. Its
    /// requests end before the user's bytes stop being guarded from them.
    private func retire(_ state: inout State) {
        guard let fetcher = state.fetcher else { return }
        state.fetcher = nil
        state.draining = Task { [self] in
            await fetcher.stop(.stale)
            let log = self.state.withLock { state -> HeldLog? in
                state.draining = nil
                state.local = ByteRangeSet()
                defer { state.heldLog = nil }
                return state.heldLog
            }
            // Under `landing`: no fetched chunk is appending to it.
            landing.withLock { _ in log?.remove() }
        }
    }

    public var isSparse: Bool { state.withLock { $0.fetcher != nil } }

    /// Holds part of a version the store no longer has, and nothing of the user's: a new open
    /// needs a new copy (`Provider.open`). The fetcher is read outside the copy's lock, as it
    /// takes its own before the copy's.
    public var isOutdated: Bool {
        let fetcher = state.withLock { $0.fetcher }
        return fetcher?.metNewerVersion == true && !life.isDirty
    }

    /// A truncate waits until it is not.
    public var isBeingFilled: Bool { state.withLock { $0.fetcher != nil || $0.draining != nil } }

    public var needsFillBeforeCommit: Bool { state.withLock { $0.fetcher != nil && $0.life.uncommitted } }

    public var downloadProgress: (done: Int64, total: Int64)? {
        let (fetching, fetcher, done, length) = state.withLock { ($0.life.content == .fetching, $0.fetcher, $0.held.count, $0.length) }
        guard fetching || fetcher?.isFetching == true else { return nil }
        return (done, length)
    }
}
