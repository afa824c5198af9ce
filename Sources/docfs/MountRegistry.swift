import Crypto
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
}

enum MountRegistry {
    static func directory(environment: [String: String]) -> String {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let stateHome = environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/state"
        return stateHome + "/docfs/mounts"
    }

    static func path(for mountpoint: String, environment: [String: String]) -> String {
        let digest = SHA256.hash(data: Data(mountpoint.utf8)).prefix(12).map { String(format: "%02x", $0) }.joined()
        return directory(environment: environment) + "/" + digest + ".json"
    }

    static func save(_ record: MountRecord, environment: [String: String]) throws {
        try FileManager.default.createDirectory(atPath: directory(environment: environment), withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let data = try JSONEncoder().encode(record)
        try data.write(to: URL(fileURLWithPath: path(for: record.mountpoint, environment: environment)), options: .atomic)
    }

    static func load(_ mountpoint: String, environment: [String: String]) -> MountRecord? {
        guard let data = FileManager.default.contents(atPath: path(for: mountpoint, environment: environment)) else { return nil }
        return try? JSONDecoder().decode(MountRecord.self, from: data)
    }

    static func remove(_ mountpoint: String, environment: [String: String]) {
        unlink(path(for: mountpoint, environment: environment))
    }
}
