import Foundation
import Glibc
import Synchronization

/// Which processes may make docfs download content (`--no-fetch-for`).
///
/// Thumbnailers and indexers open every file of a folder they are shown; on a mount of
/// placeholders that would download the folder. Like Windows' cloud files API, which lets a
/// provider block hydration by process, docfs gives the processes named here only what is
/// local already: their open of a placeholder (or read of bytes a sparse copy lacks) fails
/// with `EACCES` and costs the store nothing. Everyone else is served as usual.
///
/// A process is known by its name as the kernel keeps it (`/proc/PID/comm`, at most 15
/// bytes), both the thread's that made the request and its process's (so a thumbnailing
/// thread inside a named process counts too). The name is read only for an open that would
/// fetch: opens of complete local copies and every other request never touch /proc.
public struct FetchPolicy: Sendable, Equatable {
    /// Process names, each cut to the 15 bytes the kernel keeps.
    public let blockedNames: Set<String>

    /// Thumbnailers and indexers from Debian's desktops (GNOME, KDE, Xfce), as their
    /// executables are named; `comm` keeps the first 15 bytes of each.
    public static let defaultNames = [
        // GNOME's thumbnailers (run by Nautilus through gnome-desktop, one process per file).
        "gdk-pixbuf-thumbnailer", "gnome-thumbnail-font", "totem-video-thumbnailer", "evince-thumbnailer",
        "gsf-office-thumbnailer", "gnome-epub-thumbnailer", "gnome-mobi-thumbnailer", "ffmpegthumbnailer",
        "papers-thumbnailer", "heif-thumbnailer", "atril-thumbnailer", "xreader-thumbnailer",
        // Xfce's thumbnail service (Thunar) and its plugins, which run inside it.
        "tumblerd",
        // GNOME's indexer (Tracker 3, renamed LocalSearch in GNOME 47) and KDE's (Baloo).
        "tracker-extract-3", "tracker-miner-fs-3", "localsearch-extractor-3", "localsearch-3",
        "baloo_file_extractor", "baloo_file",
        // Recoll's indexer.
        "recollindex",
    ]

    public static let `default` = FetchPolicy(names: defaultNames)
    public static let none = FetchPolicy(names: [])

    public init(names: some Sequence<String>) {
        blockedNames = Set(names.filter { !$0.isEmpty }.map(Self.kernelName))
    }

    /// `--no-fetch-for NAMES`: comma-separated names; an empty string blocks nobody.
    public init(list: String) {
        self.init(names: list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
    }

    /// A name as `/proc/PID/comm` shows it: its first 15 bytes (TASK_COMM_LEN less the NUL).
    static func kernelName(_ name: String) -> String {
        let bytes = Array(name.utf8.prefix(15))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether the process that made a request may have content fetched. `pid` is the
    /// requesting thread as the kernel gives it (0 for the kernel itself, or a caller in a
    /// pid namespace docfs cannot see: such callers are served).
    public func mayFetch(pid: pid_t) -> Bool {
        guard !blockedNames.isEmpty, pid > 0 else { return true }
        return Self.names(of: pid).allSatisfy { !blockedNames.contains($0) }
    }

    /// The thread's name and, when it is not the process's main thread, the process's. Names
    /// are read at every open (a process may exec or rename a thread at any time); which
    /// process a thread belongs to never changes, so that is read once a second: splitting
    /// /proc/PID/status for every open was most of the daemon's own time in `cat *`.
    static func names(of pid: pid_t) -> [String] {
        var names: [String] = []
        if let name = comm(of: pid) { names.append(name) }
        if let group = threadGroupRemembered(of: pid), group != pid, let name = comm(of: group) { names.append(name) }
        return names
    }

    private static func threadGroupRemembered(of pid: pid_t) -> pid_t? {
        let now = ContinuousClock.now
        if let known = recent.withLock({ $0[pid] }), now - known.readAt < Self.rereadAfter { return known.group }
        guard let group = threadGroup(of: pid) else { return nil }
        recent.withLock { recent in
            if recent.count >= Self.remembered { recent.removeAll(keepingCapacity: true) }
            recent[pid] = (now, group)
        }
        return group
    }

    /// How long a thread's process is reused. A thread id taken again by another process
    /// within it (the kernel hands ids out in order and wraps only after `pid_max`) is the cost.
    static let rereadAfter = Duration.seconds(1)
    private static let remembered = 256
    private static let recent = Mutex<[pid_t: (readAt: ContinuousClock.Instant, group: pid_t)]>([:])

    private static func comm(of pid: pid_t) -> String? {
        guard let text = smallFile("/proc/\(pid)/comm") else { return nil }
        return text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    /// The process a thread belongs to (`Tgid:` of /proc/PID/status, its fourth line).
    private static func threadGroup(of pid: pid_t) -> pid_t? {
        guard let status = smallFile("/proc/\(pid)/status") else { return nil }
        guard let line = status.utf8.split(separator: UInt8(ascii: "\n"), maxSplits: 8).first(where: { $0.starts(with: "Tgid:".utf8) })
        else { return nil }
        return pid_t(String(decoding: line.dropFirst(5), as: UTF8.self).trimmingCharacters(in: .whitespaces))
    }

    /// The first 4 KiB of a /proc file (all of comm and the top of status).
    private static func smallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }
}
