import DocFSStore
import Foundation
import Synchronization

/// Names local operations removed, with when: a listing asked before the store's change must not
/// bring them back. In memory only; entries older than `horizon` go (a listing takes seconds).
final class RemovedNames: Sendable {
    private let removed = Mutex<[ChildName: Double]>([:])
    private let horizon: Double = 600

    /// `time` in seconds since 1970, like `versionAt`.
    func note(_ name: String, in parent: Inode, at time: Double = Date().timeIntervalSince1970) {
        removed.withLock { removed in
            if removed.count >= 4096 { removed = removed.filter { time - $0.value < horizon } }
            removed[ChildName(parent: parent, name: name.fileName)] = time
        }
    }

    /// A listing asked at `time` is older.
    func removed(_ name: FileName, from parent: Inode, since time: Double) -> Bool {
        removed.withLock { removed in
            guard !removed.isEmpty, let when = removed[ChildName(parent: parent, name: name)] else { return false }
            return when >= time
        }
    }
}
