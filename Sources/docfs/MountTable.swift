import Foundation

/// The kernel's table of mounts (`/proc/mounts`), to tell whether a directory is a mount
/// point and whether it is a docfs mount.
struct MountTable {
    struct Entry: Equatable {
        var source: String
        var mountpoint: String
        var type: String
    }

    static let docfsType = "fuse.docfs"

    static func entries() -> [Entry] {
        guard let text = try? String(contentsOfFile: "/proc/mounts", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count >= 3 else { return nil }
            return Entry(source: unescape(fields[0]), mountpoint: unescape(fields[1]), type: String(fields[2]))
        }
    }

    /// The entry mounted at `path`, the most recent if there are several.
    static func entry(at path: String) -> Entry? {
        entries().last { $0.mountpoint == path }
    }

    /// The device minor of the mount at `path` (the most recent), from `/proc/self/mountinfo`:
    /// a FUSE mount's connection number under `/sys/fs/fuse/connections`. Read from the table,
    /// not by `stat` of the mount point, which a stuck mount would answer never.
    static func deviceMinor(at path: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return nil }
        let minors: [Int] = text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count >= 5, unescape(fields[4]) == path else { return nil }
            return fields[2].split(separator: ":").last.flatMap { Int($0) }
        }
        return minors.last
    }

    /// `/proc/mounts` writes space, tab, newline and backslash as `\040`, `\011`, `\012`, `\134`.
    private static func unescape(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.first {
            if byte == UInt8(ascii: "\\"), utf8.count >= 4,
               let value = UInt8(String(decoding: utf8.dropFirst().prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(4)
            } else {
                bytes.append(byte)
                utf8 = utf8.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Turns a user's path into the absolute, normalized form the mount table uses
/// (without resolving the last component, which may be a dead FUSE mount).
func absolutePath(_ path: String) -> String {
    let url = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
    var result = url.standardizedFileURL.path
    if result.count > 1 && result.hasSuffix("/") { result.removeLast() }
    return result
}
