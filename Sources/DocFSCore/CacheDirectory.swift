import Foundation

/// The directory of a mount's local copies, which someone may remove while the mount runs: a
/// user freeing space with `rm -rf ~/.cache/*`, or a cleaner of old files. Every open then
/// failed with ENOENT for files that exist, and a change waiting for its upload could not be
/// snapshotted. A file made in the directory makes the directory again first, when it is gone.
///
/// A copy whose file went with the directory lives on through its open descriptor (its
/// snapshot is copied from that), as long as the daemon runs.
enum CacheDirectory {
    /// Runs `make`, a call that creates a file at `path` (returning -1 with `errno` set when it
    /// fails); when it fails because `path`'s folder is gone, makes that folder (0700, with the
    /// parents it lacks) and runs `make` once more.
    static func creating(_ path: String, _ make: () -> Int32) -> Int32 {
        let result = make()
        guard result < 0, errno == ENOENT else { return result }
        let folder = (path as NSString).deletingLastPathComponent
        guard !folder.isEmpty, access(folder, F_OK) != 0, makeFolder(folder) else {
            errno = ENOENT
            return -1
        }
        return make()
    }

    /// `mkdir -p` with mode 0700 for every folder it makes (docfs's cache is private).
    private static func makeFolder(_ folder: String) -> Bool {
        if mkdir(folder, 0o700) == 0 || errno == EEXIST { return true }
        guard errno == ENOENT else { return false }
        let parent = (folder as NSString).deletingLastPathComponent
        guard !parent.isEmpty, parent != folder, makeFolder(parent) else { return false }
        return mkdir(folder, 0o700) == 0 || errno == EEXIST
    }
}
