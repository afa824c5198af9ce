import DocFSStore
import Foundation

/// Whether copies an earlier mount left can be trusted: a close does not flush, so a machine
/// crash may tear a copy. A mount marks `running BOOT-ID`, then `clean` after flushing; a
/// `running` marker of another boot means the copies may be torn.
struct SessionMarker {
    static let fileName = "session"

    private typealias SyncFS = @convention(c) (Int32) -> Int32
    /// Swift's glibc module does not export it (`_GNU_SOURCE`).
    nonisolated(unsafe) private static let syncFS: SyncFS? =
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs").map { unsafeBitCast($0, to: SyncFS.self) }

    let directory: String
    let cacheDirectory: String
    var path: String { directory + "/" + Self.fileName }

    static func currentBootID() -> String? {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else { return nil }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
    }

    /// A `running` marker of another boot ID, or none to compare. No marker: no earlier mount.
    func machineRestartedUnderAMount(bootID: String?) -> Bool {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return false }
        let words = text.split(whereSeparator: \.isWhitespace)
        if words.first == "clean" { return false }
        // No boot ID to compare, or unreadable: as if the machine had restarted.
        guard words.first == "running", words.count > 1, let bootID else { return true }
        return words[1] != bootID
    }

    func markRunning(bootID: String?) throws(FSError) {
        try write("running \(bootID ?? "")\n")
    }

    /// Flushes first, so the next mount may trust them.
    func markClean() throws(FSError) {
        let fd = open(cacheDirectory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .local(errno: errno, "cannot open \(cacheDirectory): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let flushed = Self.syncFS.map { $0(fd) == 0 } ?? { sync(); return true }()
        guard flushed else { throw .local(errno: errno, "cannot flush \(cacheDirectory): \(String(cString: strerror(errno)))") }
        try write("clean\n")
    }

    /// A new file, synced, renamed over the old, the directory synced.
    private func write(_ text: String) throws(FSError) {
        let temporary = path + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .local(errno: errno, "cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let synced = fdatasync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(temporary, path) == 0 else {
            let error = errno
            unlink(temporary)
            throw .local(errno: error, "cannot write \(path): \(String(cString: strerror(error)))")
        }
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            close(directoryFD)
        }
    }
}
