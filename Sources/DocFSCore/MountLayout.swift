import Crypto
import DocFSStore
import Foundation

/// Catalog under `$XDG_STATE_HOME/docfs/<key>/`, copies under `$XDG_CACHE_HOME/docfs/<key>/`
/// (0700). The key comes from the store's credential-free identity, so a remount finds its state.
public struct MountLayout: Sendable, Equatable {
    public var key: String
    public var stateDirectory: String
    public var cacheDirectory: String
    public var catalogPath: String { Self.catalogPath(stateDirectory: stateDirectory) }

    /// For `docfs status` and `unmount`.
    public static func catalogPath(stateDirectory: String) -> String { stateDirectory + "/catalog.sqlite" }

    /// `--state-dir` and `--cache-dir` replace the XDG parents (mounting a store twice needs a
    /// second state: StateLock.swift).
    public init(store: StoreIdentity, environment: [String: String], stateDirectoryOverride: String? = nil,
                cacheDirectoryOverride: String? = nil) {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let stateHome = environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/state"
        let cacheHome = environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.cache"
        key = MountLayout.key(for: store)
        stateDirectory = (stateDirectoryOverride ?? stateHome + "/docfs") + "/" + key
        cacheDirectory = (cacheDirectoryOverride ?? cacheHome + "/docfs") + "/" + key
        ownsStateParent = stateDirectoryOverride == nil
        ownsCacheParent = cacheDirectoryOverride == nil
    }

    /// Not a directory the user named.
    private var ownsStateParent: Bool
    private var ownsCacheParent: Bool

    /// E.g. `webdav-127.0.0.1-8080-docs-1a2b3c4d5e6f`.
    public static func key(for store: StoreIdentity) -> String {
        let readable = (store.kind + "-" + store.location)
            .replacingOccurrences(of: "://", with: "-")
            .map { $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" ? String($0) : "-" }
            .joined()
            .split(separator: "-", omittingEmptySubsequences: true)
            .joined(separator: "-")
        let digest = SHA256.hash(data: Data(store.description.utf8)).map { String(format: "%02x", $0) }.joined()
        return String(readable.prefix(60)) + "-" + digest.prefix(12)
    }

    /// 0700, also making docfs's own parents 0700 when they exist with looser modes.
    public func createDirectories() throws(FSError) {
        for directory in [stateDirectory, cacheDirectory] {
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                        attributes: [.posixPermissions: 0o700])
                _ = chmod(directory, 0o700)
            } catch {
                throw .local(errno: EACCES, "cannot create \(directory): \(error.localizedDescription)")
            }
        }
        let parents = (ownsStateParent ? [stateDirectory] : []) + (ownsCacheParent ? [cacheDirectory] : [])
        for directory in parents { _ = chmod((directory as NSString).deletingLastPathComponent, 0o700) }
        try refuseOneDirectoryForBoth()
    }

    /// A mount empties its cache directory of all but the copies it keeps (`clear`): were it
    /// also the state directory (`XDG_CACHE_HOME` equal to `XDG_STATE_HOME`, or one `--cache-dir`
    /// and `--state-dir`), the catalog and the journal of unsynced changes would go with them.
    /// Compared by device and inode, so a symlink or `..` does not hide it.
    private func refuseOneDirectoryForBoth() throws(FSError) {
        var state = stat()
        var cache = stat()
        guard stat(stateDirectory, &state) == 0, stat(cacheDirectory, &cache) == 0 else { return }
        guard state.st_dev == cache.st_dev && state.st_ino == cache.st_ino else { return }
        throw .local(errno: EINVAL, "the cache directory \(cacheDirectory) is the state directory \(stateDirectory): docfs "
                     + "empties its cache directory at mount, and the catalog must not go with it; give them different "
                     + "parents (--cache-dir and --state-dir, or XDG_CACHE_HOME and XDG_STATE_HOME)")
    }

    /// Keeps the copies in `keeping` (unsynced changes: the journal needs them). Returns how many went.
    @discardableResult
    public static func clear(directory: String, keeping: Set<String>) -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return 0 }
        var removed = 0
        // A kept copy keeps its held-bytes log (see `HeldLog`).
        for name in names where !keeping.contains(name) && !keeping.contains(HeldLog.owner(ofFileNamed: name) ?? "") {
            unlink(directory + "/" + name)
            removed += 1
        }
        return removed
    }
}
