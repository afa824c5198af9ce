import DocFSStore
import Synchronization

/// A mount's streamed uploads. Each is settled before its copy's upload and before a rename or
/// unlink touches its path, so what it left on the store is known as ours first.
public final class UploadStreams: Sendable {
    private let store: any Store
    private let catalog: Catalog
    public let policy: StreamedUpload.Policy
    private let state = Mutex(State())
    private let ended = Mutex<(@Sendable (Inode) -> Void)?>(nil)
    /// Whether a folder at or above a path is still being made (`Uploader+FoldersAhead`): no
    /// stream starts there; the file goes up after its close, once the folder is on the store.
    private let beingMade = Mutex<(@Sendable (StorePath) -> Bool)?>(nil)

    private struct State {
        var unsettled: [Inode: StreamedUpload] = [:]
        var sending = 0
        /// Held by namespace operations: no stream starts there.
        var held: [Int: [StorePath]] = [:]
        /// Bumped by every namespace operation: a path read before one may be stale.
        var generation = 0

        func admits(_ inode: Inode, _ policy: StreamedUpload.Policy) -> Bool {
            !stopped && sending < policy.maximumStreams && unsettled[inode] == nil
        }
        var stopped = false
    }

    init(store: any Store, catalog: Catalog, policy: StreamedUpload.Policy) {
        self.store = store
        self.catalog = catalog
        self.policy = policy
    }

    /// For a new file just long enough, written in order, whose path is not held.
    func consider(_ copy: LocalCopy) {
        // While `maximumStreams` send, other writes ask the catalog nothing.
        guard copy.mayStream(policy), let generation = state.withLock({ $0.admits(copy.inode, policy) ? $0.generation : nil }) else { return }
        guard let item = try? catalog.item(copy.inode) else { return }
        let path = item.path
        if let beingMade = beingMade.withLock({ $0 }), beingMade(path) { return }
        // Times are the store's; a later mode or owner change is pushed at settling.
        let attributes = StoreAttributes(mode: item.mode, owner: item.owner, group: item.group)
        let store = store
        // Started and registered in one step: a `hold` either finds the stream, or the stream sees the
        // held or stale path and does not start.
        state.withLock { state in
            guard state.admits(copy.inode, policy), state.generation == generation,
                  !state.held.values.contains(where: { Uploader.overlaps(path, $0) }) else { return }
            let started = copy.beginStream(to: path, policy: policy) { [weak self] (stream) async throws(StoreError) -> RemoteEntry in
                defer {
                    // After `consider` counted it: this lock is held until then.
                    self?.state.withLock { $0.sending -= 1 }
                    self?.ended.withLock { $0 }?(stream.inode)
                }
                return try await store.write(stream.path, growing: stream, condition: .mustNotExist, attributes: attributes)
            }
            guard let stream = started else { return }
            state.sending += 1
            state.unsettled[copy.inode] = stream
        }
    }

    func whenEnded(_ handler: @escaping @Sendable (Inode) -> Void) {
        ended.withLock { $0 = handler }
    }

    func whenFoldersBeingMade(_ test: @escaping @Sendable (StorePath) -> Bool) {
        beingMade.withLock { $0 = test }
    }

    var hasCompletedUnsettled: Bool {
        state.withLock { $0.unsettled.values.contains { $0.sealedCommit != nil } }
    }

    func progress(of inode: Inode) -> (sent: Int64, total: Int64, complete: Bool)? {
        state.withLock { $0.unsettled[inode] }?.progress
    }

    func settled(_ stream: StreamedUpload) {
        state.withLock { state in
            if state.unsettled[stream.inode] === stream { state.unsettled[stream.inode] = nil }
        }
    }

    /// Returns the unsettled streams at or below `paths`.
    func hold(_ holder: Int, _ paths: [StorePath]) -> [StreamedUpload] {
        state.withLock { state in
            state.held[holder] = paths
            state.generation += 1
            return state.unsettled.values.filter { Uploader.overlaps($0.path, paths) }
        }
    }

    func release(_ holder: Int) {
        state.withLock { _ = $0.held.removeValue(forKey: holder) }
    }

    func stop() {
        let streams = state.withLock { state in
            state.stopped = true
            return Array(state.unsettled.values)
        }
        for stream in streams { stream.cancel() }
    }
}
