import DocFSStore
import Synchronization

/// The streamed uploads of a mount (see `StreamedUpload`): which copy starts one, and which are
/// not settled yet. A write on the FUSE thread asks `consider` (a lock and a few comparisons;
/// the catalog only when a stream starts); the uploader settles each stream before it uploads
/// the copy, and before a rename or unlink touches its path (`Uploader.exclusively`), so the
/// part a stream left on the store is always known as ours before the namespace moves.
public final class UploadStreams: Sendable {
    private let store: any Store
    private let catalog: Catalog
    public let policy: StreamedUpload.Policy
    private let state = Mutex(State())
    /// Told the item of each stream that ended: its settling is the uploader's (`whenEnded`).
    private let ended = Mutex<(@Sendable (Inode) -> Void)?>(nil)

    private struct State {
        /// Streams whose outcome nobody applied yet, by item.
        var unsettled: [Inode: StreamedUpload] = [:]
        /// Of those, the ones still sending.
        var sending = 0
        /// Paths a namespace operation holds (`Uploader.exclusively`): no stream starts there.
        var held: [Int: [StorePath]] = [:]
        /// Bumped by every namespace operation: a path read before one may be stale.
        var generation = 0

        /// Whether a stream of `inode` may start, as far as the streams under way go.
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

    /// After a write to `copy`: starts its stream if it is a new file that just became long
    /// enough, written in order, and nothing holds its path.
    func consider(_ copy: LocalCopy) {
        guard copy.mayStream(policy), hasRoom(for: copy.inode) else { return }
        let generation = state.withLock { $0.generation }
        guard let item = try? catalog.item(copy.inode) else { return }
        let path = item.path
        // Mode and owners as they are now (a store that sends them with the content does; a
        // change before the end is pushed when the stream is settled). Times are the store's.
        let attributes = StoreAttributes(mode: item.mode, owner: item.owner, group: item.group)
        let store = store
        // Started and registered in one step, which a namespace operation's `hold` cannot fall
        // into: either it finds the stream (and settles it), or the stream sees its paths (or
        // the path it read went stale meanwhile) and does not start.
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

    /// Calls `handler` with the item of each stream that ended (the uploader settles it).
    func whenEnded(_ handler: @escaping @Sendable (Inode) -> Void) {
        ended.withLock { $0 = handler }
    }

    /// Whether a stream that a commit completed is still to be settled: an upload under way.
    var hasCompletedUnsettled: Bool {
        state.withLock { $0.unsettled.values.contains { $0.sealedCommit != nil } }
    }

    /// How far the stream of `inode` got while it is sending (see `StreamedUpload.progress`).
    func progress(of inode: Inode) -> (sent: Int64, total: Int64, complete: Bool)? {
        state.withLock { $0.unsettled[inode] }?.progress
    }

    /// Whether a stream of `inode` could start now (before the catalog is asked for its path:
    /// while `maximumStreams` are sending, the writes of other files ask nothing).
    private func hasRoom(for inode: Inode) -> Bool {
        state.withLock { $0.admits(inode, policy) }
    }

    /// The stream of `inode`'s copy is being settled: it no longer counts.
    func settled(_ stream: StreamedUpload) {
        state.withLock { state in
            if state.unsettled[stream.inode] === stream { state.unsettled[stream.inode] = nil }
        }
    }

    /// A namespace operation (`holder`) touches `paths`: no stream starts there until `release`;
    /// returns the unsettled streams of those paths (and below them).
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

    /// The mount is going away: no stream starts, those sending end.
    func stop() {
        let streams = state.withLock { state in
            state.stopped = true
            return Array(state.unsettled.values)
        }
        for stream in streams { stream.cancel() }
    }
}
