// `user.docfs.state` changes told as they happen, so file manager emblems follow without
// polling; the daemon publishes them on a socket (the root's `user.docfs.events`).

import DocFSStore

extension DocFileSystem {
    /// On the root; absent when the daemon publishes none.
    public static let eventsAttribute = "user.docfs.events"

    /// The path is from the mount's root, `/` first.
    public struct StateChange: Sendable, Equatable {
        public var path: String
        public var state: String
    }

    /// Within a tenth of a second, only while `isListened` (else a big listing would batch every
    /// row). Call once.
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
