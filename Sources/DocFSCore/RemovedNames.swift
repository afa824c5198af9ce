import DocFSStore
import Foundation
import Synchronization

/// Names that local operations took out of a folder (an unlink, an rmdir, the old name of a
/// rename), with when: a listing asked for before the store made that change still shows the
/// name, and must not bring it back as a placeholder when it is applied after the change.
///
/// Only in memory: a listing asked before a restart is never applied after it. Entries older
/// than `horizon` go (a listing takes seconds, not minutes); a listing older than that is
/// treated like any other, which re-adds the name until the next refresh.
final class RemovedNames: Sendable {
    private struct Key: Hashable {
        let parent: Inode
        let name: FileName
    }

    private let removed = Mutex<[Key: Double]>([:])
    private let horizon: Double = 600

    /// Notes that `name` left `parent` at `time` (seconds since 1970, like `versionAt`).
    func note(_ name: String, in parent: Inode, at time: Double = Date().timeIntervalSince1970) {
        removed.withLock { removed in
            if removed.count >= 4096 { removed = removed.filter { time - $0.value < horizon } }
            removed[Key(parent: parent, name: name.fileName)] = time
        }
    }

    /// Whether `name` left `parent` at or after `time`: a listing asked at `time` is older.
    func removed(_ name: FileName, from parent: Inode, since time: Double) -> Bool {
        removed.withLock { removed in
            guard !removed.isEmpty, let when = removed[Key(parent: parent, name: name)] else { return false }
            return when >= time
        }
    }
}
