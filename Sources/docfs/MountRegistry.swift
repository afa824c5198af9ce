import Crypto
import DocFSCore
import Foundation

/// What a running mount leaves for `docfs unmount`: which daemon serves it and where its
/// local copies live. One small JSON file per mount point under `$XDG_STATE_HOME/docfs/mounts/`.
struct MountRecord: Codable, Equatable {
    var pid: Int32
    var mountpoint: String
    var store: String
    var stateDirectory: String
    var cacheDirectory: String
    /// The eviction policy the mount runs with (`--evict-delay` in seconds, 0: evict on the
    /// last close; `--cache-max` in bytes, nil: no bound), for `docfs status`. Optional so a
    /// record written by an older docfs still reads.
    var evictDelay: Double?
    var cacheMax: Int64?
    /// What the server does with `If-Match` on PUT, once a WebDAV mount found out
    /// (`ConditionSupport`), in words, for `docfs status`; nil until then, and for other stores.
    var writeConditions: String?
    /// The rest of what a WebDAV mount found out about its server (`WebDAVStore.serverTraits`),
    /// one `name: what` line each; nil for other stores.
    var serverTraits: [String]?
    /// The mask on the modes entries show (`LocalAccess.maskDescription`), for `docfs status`;
    /// nil when modes show as they are.
    var modeMask: String?

    var catalogPath: String { MountLayout.catalogPath(stateDirectory: stateDirectory) }
}

enum MountRegistry {
    static func stateHome(environment: [String: String]) -> String {
        let home = environment["HOME"] ?? NSHomeDirectory()
        return environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/state"
    }

    static func directory(environment: [String: String]) -> String {
        stateHome(environment: environment) + "/docfs/mounts"
    }

    static func path(for mountpoint: String, environment: [String: String]) -> String {
        let digest = SHA256.hash(data: Data(mountpoint.utf8)).prefix(12).map { String(format: "%02x", $0) }.joined()
        return directory(environment: environment) + "/" + digest + ".json"
    }

    /// Writes the record 0600 (whatever the umask) into `docfs/mounts/` under the state
    /// directory, which it makes 0700 together with `docfs/`, also when they exist with looser
    /// modes: a record names the store and where its copies live, for this user only.
    static func save(_ record: MountRecord, environment: [String: String]) throws {
        let stateHome = stateHome(environment: environment)
        // The state home itself is the user's (XDG says 0700 when created); ours are below it.
        if access(stateHome, F_OK) != 0 {
            try FileManager.default.createDirectory(atPath: stateHome, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        }
        for directory in [stateHome + "/docfs", directory(environment: environment)] {
            if mkdir(directory, 0o700) != 0, errno != EEXIST { throw CocoaError.error(.fileWriteNoPermission, url: URL(fileURLWithPath: directory)) }
            guard chmod(directory, 0o700) == 0 else { throw CocoaError.error(.fileWriteNoPermission, url: URL(fileURLWithPath: directory)) }
        }
        let data = try JSONEncoder().encode(record)
        let target = path(for: record.mountpoint, environment: environment)
        let temporary = target + ".\(getpid()).tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw CocoaError.error(.fileWriteNoPermission, url: URL(fileURLWithPath: temporary)) }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let modeSet = fchmod(fd, 0o600) == 0
        close(fd)
        guard written == data.count, modeSet, rename(temporary, target) == 0 else {
            unlink(temporary)
            throw CocoaError.error(.fileWriteUnknown, url: URL(fileURLWithPath: target))
        }
    }

    static func load(_ mountpoint: String, environment: [String: String]) -> MountRecord? {
        guard let data = FileManager.default.contents(atPath: path(for: mountpoint, environment: environment)) else { return nil }
        return try? JSONDecoder().decode(MountRecord.self, from: data)
    }

    static func remove(_ mountpoint: String, environment: [String: String]) {
        unlink(path(for: mountpoint, environment: environment))
    }
}
