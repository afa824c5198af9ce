// S3Store+KnownFolders: S3 has no folders to write into, so every new key first asks whether
// its parent exists (a LIST), lest a file land in a folder another client removed. In a burst
// of writes into one folder (`cp -r`, `tar x`) the answer is the same each time: a folder seen
// to exist, or made, is taken to exist for a few seconds. A folder removed by another client in
// that window gets back the files written into it: S3 makes it again by their keys; nothing is
// lost.

import DocFSStore
import Synchronization

final class KnownFolders: Sendable {
    static let lifetime = Duration.seconds(10)
    private let seen = Mutex<[StorePath: ContinuousClock.Instant]>([:])

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
    }
}

extension S3Store {
    /// Whether `path`'s parent exists: known for a moment after it was seen, else one LIST.
    func parentExists(of path: StorePath) async throws(StoreError) -> Bool {
        guard let parent = path.parent, !parent.isRoot else { return true }
        if knownFolders.exists(parent) { return true }
        let exists = try await directoryExists(parent).exists
        if exists { knownFolders.saw(parent) }
        return exists
    }
}
