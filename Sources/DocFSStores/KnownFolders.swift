// KnownFolders: what this mount knows for a moment about folders without asking. Every new
// S3 key first asks whether its parent exists (a LIST), lest a file land in a folder another
// client removed; in a burst of writes into one folder (`cp -r`, `tar x`) the answer is the
// same each time: a folder seen to exist, or made, is taken to exist for a few seconds. A
// folder removed by another client in that window gets back the files written into it: S3
// makes it again by their keys; nothing is lost. Likewise, a name never used in a folder this
// mount just made is taken to be free: on S3 the first key written there asks nothing first,
// on WebDAV the first MKCOL there is not preceded by a PROPFIND.

import DocFSStore
import Synchronization

final class KnownFolders: Sendable {
    static let lifetime = Duration.seconds(10)
    private let seen = Mutex<[StorePath: ContinuousClock.Instant]>([:])
    /// Folders this mount made, and the names it has used in them since: for a moment, a name
    /// never used in a folder made here is taken to be free (`isFresh`).
    private let made = Mutex<(at: [StorePath: ContinuousClock.Instant], used: Set<StorePath>)>(([:], []))

    func exists(_ path: StorePath) -> Bool {
        if path.isRoot { return true }
        return seen.withLock { seen in
            guard let at = seen[path] else { return false }
            if ContinuousClock.now - at < Self.lifetime { return true }
            seen[path] = nil
            return false
        }
    }

    func saw(_ path: StorePath) {
        seen.withLock { seen in
            if seen.count > 4096 { seen.removeAll() }
            seen[path] = .now
        }
    }

    /// `path` and everything below it were removed or moved away.
    func forget(_ path: StorePath) {
        seen.withLock { seen in seen = seen.filter { !$0.key.isSame(orInside: path) } }
        made.withLock { made in made.at = made.at.filter { !$0.key.isSame(orInside: path) } }
    }

    /// This mount made the folder `path` (empty, then).
    func madeFolder(_ path: StorePath) {
        saw(path)
        made.withLock { made in
            if made.at.count > 4096 { made = ([:], []) }
            made.at[path] = .now
        }
    }

    /// Whether `path` names nothing on the store as far as a moment's knowledge goes: its folder
    /// was made here within `lifetime`, and this mount has not used the name in it since. Marks
    /// the name used either way, as `used` does (a second question about it goes to the store). What another client put at
    /// that name within the moment is met by the write's own condition (S3's `If-None-Match: *`,
    /// WebDAV's MKCOL or MOVE with `Overwrite: F`).
    func isFresh(_ path: StorePath) -> Bool {
        guard let parent = path.parent else { return false }
        return made.withLock { made in
            guard let at = made.at[parent] else { return false }
            guard ContinuousClock.now - at < Self.lifetime else {
                made.at[parent] = nil
                return false
            }
            return Self.use(path, &made)
        }
    }

    /// The mount used `path` (wrote, made or moved something there).
    func used(_ path: StorePath) {
        guard let parent = path.parent else { return }
        made.withLock { made in
            if made.at[parent] != nil { _ = Self.use(path, &made) }
        }
    }

    /// Only names in folders made here are kept; past a bound all are dropped, folders first
    /// (then every name is asked about again).
    private static func use(_ path: StorePath, _ made: inout (at: [StorePath: ContinuousClock.Instant], used: Set<StorePath>)) -> Bool {
        if made.used.count >= 65_536 { made = ([:], []) }
        return made.used.insert(path).inserted && made.at[path.parent ?? .root] != nil
    }
}
