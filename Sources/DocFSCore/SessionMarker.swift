import DocFSStore
import Foundation

/// Whether the local copies an earlier mount left can be trusted to hold what its catalog says
/// they hold.
///
/// A close hands changes over without `fdatasync` (as close does on any local file system;
/// `fsync()` is what makes data durable, and on docfs it waits for the store). A daemon that
/// dies loses nothing by that: the kernel's page cache keeps every byte written. Only a
/// machine that stops without flushing (power loss, a kernel crash) can leave a copy torn,
/// older than its commit, or half one version and half another, while the catalog (SQLite in
/// WAL mode, `synchronous = NORMAL`) keeps a consistent but possibly older history. Such a copy
/// must never replace the store's version.
///
/// So each mount leaves a marker in its state directory, written durably: `running BOOT-ID`
/// while it serves, `clean` once its copies and catalog were flushed at the end. At the next
/// mount, a marker that says `running` with another boot ID than the kernel's now means the
/// machine restarted under a mount that never ended: `CrashRecovery` then keeps every committed
/// change not yet uploaded as `NAME (unsaved DATE)` next to the item, as it does writes never
/// committed, instead of uploading it over the store's version.
struct SessionMarker {
    static let fileName = "session"

    private typealias SyncFS = @convention(c) (Int32) -> Int32
    /// glibc's `syncfs`, which its Swift module does not export (it is `_GNU_SOURCE`).
    nonisolated(unsafe) private static let syncFS: SyncFS? =
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs").map { unsafeBitCast($0, to: SyncFS.self) }

    enum Previous: Equatable {
        /// No marker: the first mount, or one by a docfs that synced every commit.
        case none
        case clean
        case running(bootID: String)
    }

    /// Where the marker lives (the mount's state directory, next to its catalog).
    let directory: String
    /// The local copies' directory, flushed before a mount ends `clean`.
    let cacheDirectory: String
    var path: String { directory + "/" + Self.fileName }

    /// The kernel's boot ID, new at every boot.
    static func currentBootID() -> String? {
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else { return nil }
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return id.isEmpty ? nil : id
    }

    func previous() -> Previous {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return .none }
        let words = text.split(whereSeparator: \.isWhitespace)
        switch words.first {
        case "clean": return .clean
        case "running": return .running(bootID: words.count > 1 ? String(words[1]) : "")
        default: return .running(bootID: "")  // unreadable: as if the machine had restarted
        }
    }

    /// Whether copies left by the mount before may be torn: it never ended, and the machine
    /// restarted since (another boot ID, or none to compare).
    func machineRestartedUnderAMount(bootID: String?) -> Bool {
        guard case .running(let then) = previous() else { return false }
        guard let bootID, !then.isEmpty else { return true }
        return then != bootID
    }

    /// Written before the mount commits anything.
    func markRunning(bootID: String?) throws(FSError) {
        try write("running \(bootID ?? "")\n")
    }

    /// The mount's end: the copies it leaves (changes not uploaded, pinned copies) are flushed
    /// to disk first, so the next mount may trust them whatever happens to the machine meanwhile.
    func markClean() throws(FSError) {
        let fd = open(cacheDirectory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .local(errno: errno, "cannot open \(cacheDirectory): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        // Without syncfs (never on Linux's glibc), the global sync.
        let flushed = Self.syncFS.map { $0(fd) == 0 } ?? { sync(); return true }()
        guard flushed else { throw .local(errno: errno, "cannot flush \(cacheDirectory): \(String(cString: strerror(errno)))") }
        try write("clean\n")
    }

    /// Replaces the marker durably: a new file, synced, renamed over the old, the directory synced.
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
