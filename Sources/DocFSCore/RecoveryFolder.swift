import Foundation

/// Where a mount ending with unsent changes leaves them for the user, readable without docfs:
/// `<state>/recovery/<YYYY-MM-DD HHMMSS>/` under their store paths. The journal still drives
/// the upload; the next mount removes the folders once nothing is pending. Hard links to the
/// cache's copies (a copy across filesystems), so a second call finds them kept.
public enum RecoveryFolder {
    public static func root(stateDirectory: String) -> String { stateDirectory + "/recovery" }

    /// Returns the folder, or nil when there is nothing to keep.
    public static func keep(_ pending: [Item], cacheDirectory: String, stateDirectory: String, now: Date = Date()) throws(FSError) -> String? {
        let files = pending.filter { FileManager.default.fileExists(atPath: cacheDirectory + "/" + $0.id) }
        guard !files.isEmpty else { return nil }
        if let latest = folders(stateDirectory: stateDirectory).last,
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

    /// Call when nothing is pending any more.
    public static func removeAll(stateDirectory: String) {
        try? FileManager.default.removeItem(atPath: root(stateDirectory: stateDirectory))
    }

    /// Oldest first.
    public static func folders(stateDirectory: String) -> [String] {
        let root = root(stateDirectory: stateDirectory)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return names.sorted().map { root + "/" + $0 }
    }

    private static func sameFile(_ a: String, _ b: String) -> Bool {
        var first = stat()
        var second = stat()
        guard stat(a, &first) == 0, stat(b, &second) == 0 else { return false }
        return first.st_dev == second.st_dev && first.st_ino == second.st_ino
    }
}
