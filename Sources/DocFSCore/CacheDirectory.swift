import Foundation

/// The copies' directory may be removed while the mount runs (`rm -rf ~/.cache/*`): a file made
/// in it makes the directory again first. A copy whose file went lives on through its descriptor.
enum CacheDirectory {
    /// If `make` (returning -1 with `errno`) fails because the folder is gone, makes it (0700) and
    /// runs `make` once more.
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

    /// Mode 0700 for every folder it makes (docfs's cache is private).
    private static func makeFolder(_ folder: String) -> Bool {
        if mkdir(folder, 0o700) == 0 || errno == EEXIST { return true }
        guard errno == ENOENT else { return false }
        let parent = (folder as NSString).deletingLastPathComponent
        guard !parent.isEmpty, parent != folder, makeFolder(parent) else { return false }
        return mkdir(folder, 0o700) == 0 || errno == EEXIST
    }
}
