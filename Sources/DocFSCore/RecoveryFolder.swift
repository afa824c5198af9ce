import Foundation

/// Where a mount that ends with changes not on the store yet (`docfs unmount --force` while the
/// store is down, a killed daemon, a SIGTERM) leaves them for the user: each under its own path
/// in the store, in `$XDG_STATE_HOME/docfs/<key>/recovery/<YYYY-MM-DD HHMMSS>/`, readable
/// without docfs.
///
/// The journal (the catalog's `modified` rows and their copies in the cache, named by item id)
/// still drives the upload: the next mount of the store uploads them, and once nothing is
/// pending it removes the recovery folders, whose files then all reached the store.
/// Files are hard links to the cache's copies (no bytes copied; a copy when the cache lies
/// on another filesystem), so a second call for the same pending files finds them already kept.
public enum RecoveryFolder {
    /// The folder holding every recovery folder of a mount's state directory.
    public static func root(stateDirectory: String) -> String { stateDirectory + "/recovery" }

    /// Keeps `pending` (items with unsynced changes, whose local copies are in `cacheDirectory`)
    /// under their names; returns the folder, or nil when there is nothing to keep.
    public static func keep(_ pending: [Item], cacheDirectory: String, stateDirectory: String, now: Date = Date()) throws(FSError) -> String? {
        let files = pending.filter { FileManager.default.fileExists(atPath: cacheDirectory + "/" + $0.id) }
        guard !files.isEmpty else { return nil }
        if let latest = latestFolder(stateDirectory: stateDirectory),
           files.allSatisfy({ sameFile(cacheDirectory + "/" + $0.id, latest + $0.path.description) }) {
            return latest
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd HHmmss"
        var folder = root(stateDirectory: stateDirectory) + "/" + formatter.string(from: now)
        var suffix = 2
        while FileManager.default.fileExists(atPath: folder) {
            folder = root(stateDirectory: stateDirectory) + "/" + formatter.string(from: now) + " \(suffix)"
            suffix += 1
        }
        for item in files {
            let source = cacheDirectory + "/" + item.id
            let target = folder + item.path.description
            do {
                try FileManager.default.createDirectory(atPath: (target as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                if link(source, target) != 0 {
                    guard errno == EXDEV || errno == EPERM else { throw FSError.local(errno: errno, "cannot keep \(item.path) in \(folder)") }
                    try FileManager.default.copyItem(atPath: source, toPath: target)
                }
            } catch let error as FSError {
                throw error
            } catch {
                throw .local(errno: EIO, "cannot keep \(item.path) in \(folder): \(error.localizedDescription)")
            }
        }
        _ = chmod(root(stateDirectory: stateDirectory), 0o700)
        return folder
    }

    /// Removes every recovery folder: call when nothing is pending any more.
    public static func removeAll(stateDirectory: String) {
        try? FileManager.default.removeItem(atPath: root(stateDirectory: stateDirectory))
    }

    /// The recovery folders there are, oldest first.
    public static func folders(stateDirectory: String) -> [String] {
        let root = root(stateDirectory: stateDirectory)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return names.sorted().map { root + "/" + $0 }
    }

    private static func latestFolder(stateDirectory: String) -> String? {
        folders(stateDirectory: stateDirectory).last
    }

    private static func sameFile(_ a: String, _ b: String) -> Bool {
        var first = stat()
        var second = stat()
        guard stat(a, &first) == 0, stat(b, &second) == 0 else { return false }
        return first.st_dev == second.st_dev && first.st_ino == second.st_ino
    }
}
