// S3Store+KnownFolders: a new key's parent, asked once a moment (KnownFolders.swift).

import DocFSStore

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
