// DocFileSystem+StateEvents: what `user.docfs.state` says of each item, told as it changes, so
// a file manager's emblems follow a download, an upload or a pin without polling. The mount's
// daemon publishes the changes on a socket (its path is the root's `user.docfs.events`).

import DocFSStore

extension DocFileSystem {
    /// On the mount's root: the path of the Unix socket that tells state changes (absent when
    /// the daemon publishes none).
    public static let eventsAttribute = "user.docfs.events"

    /// An item's shown state changed: its path in the mount (from the root, `/` first) and
    /// what `user.docfs.state` says now.
    public struct StateChange: Sendable, Equatable {
        public var path: String
        public var state: String
    }

    /// Calls `handler` with the items whose `user.docfs.state` may have changed, within a tenth
    /// of a second, while `isListened` says someone listens (no cost otherwise: a listing of a
    /// big folder would make a batch of every row); `socketPath` is what the root's
    /// `user.docfs.events` announces. Call once.
    public func followStates(announcedAt socketPath: String, isListened: @escaping @Sendable () -> Bool,
                             _ handler: @escaping @Sendable ([StateChange]) -> Void) {
        stateFeed.socketPath.withLock { $0 = socketPath }
        stateFeed.start(watching: catalog, isWanted: isListened) { [weak self] inodes in
            guard let self else { return }
            var changes: [StateChange] = []
            for inode in inodes.sorted() {
                // An item gone by now shows nothing; its folder's listing says so.
                guard let item = try? catalog.item(inode), let state = try? shownState(of: item) else { continue }
                changes.append(StateChange(path: item.path.description, state: state))
            }
            if !changes.isEmpty { handler(changes) }
        }
    }
}
