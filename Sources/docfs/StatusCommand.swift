import ArgumentParser
import DocFSCore
import Foundation

/// `docfs status [MOUNTPOINT|PATH...]`: what every docfs mount of this user is doing (or the
/// mounts holding the paths named), read from the
/// mount registry (`MountRegistry`, 0700 under the state directory) and each mount's catalog,
/// with live byte counts of running transfers from `user.docfs.progress` on the mount. It
/// needs no socket: anything the daemon knows that matters here is in the catalog.
/// `--watch` samples the same again and again (`StatusWatch`).
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show each docfs mount: store, cache size, files per state, pending uploads, transfers, errors.")

    @Argument(help: ArgumentHelp("Only the mounts holding these mount points or paths (default: every mount of this user).",
                                 valueName: "mountpoint-or-path"))
    var paths: [String] = []

    @Flag(help: "Print JSON for scripts (with --watch: one report per line).")
    var json = false

    @Flag(help: ArgumentHelp("Keep showing live transfers (progress bar, rate, time left) until the mount goes away or Ctrl-C.",
                             discussion: "On a terminal the view is redrawn in place; on a pipe it prints timestamped lines."))
    var watch = false

    @Option(help: ArgumentHelp("Seconds between two samples with --watch.", valueName: "SECONDS"))
    var interval: Double = 1

    func validate() throws {
        guard interval.isFinite, interval >= 0.1, interval <= 3600 else {
            throw ValidationError("--interval must be between 0.1 and 3600 seconds")
        }
        if interval != 1, !watch { throw ValidationError("--interval goes with --watch") }
    }

    struct Transfer: Codable {
        var path: String
        var state: String
        var done: Int64?
        var total: Int64?
        /// Bytes per second and seconds left, smoothed over samples (`--watch` only).
        var rate: Double?
        var eta: Double?
    }

    struct UploadError: Codable {
        var path: String
        var error: String
    }

    struct MountStatus: Codable {
        var mountpoint: String
        var store: String
        var pid: Int32
        var running: Bool
        var cacheDirectory: String
        var cacheBytes: Int64
        var cacheFiles: Int
        var states: [String: Int]
        var pendingUploads: Int
        var transfers: [Transfer]
        var errors: [UploadError]
        /// The mount's eviction policy; nil when its record predates it being recorded.
        var retention: Retention? = nil
        /// The cache's bytes split by pinned files and the rest (released kept copies, open
        /// and modified ones).
        var pinnedCacheBytes: Int64 = 0
        var unpinnedCacheBytes: Int64 = 0
        /// What the server does with the conditions of an upload (`If-Match`), once the mount
        /// found out (WebDAV only).
        var writeConditions: String? = nil
        /// The rest of what the mount found out about its WebDAV server, one `name: what` each.
        var serverTraits: [String]? = nil
        /// The mask on the modes entries show, when there is one.
        var modeMask: String? = nil
    }

    /// `--evict-delay` and `--cache-max` of a mount, as it runs.
    struct Retention: Codable, Equatable {
        /// Seconds a released copy is kept; 0: evicted on the last close.
        var evictDelay: Double
        /// Bytes released, unpinned copies may take; nil (JSON null): no bound.
        var cacheMax: Int64?

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(evictDelay, forKey: .evictDelay)
            try container.encode(cacheMax, forKey: .cacheMax)  // null rather than absent
        }

        /// `evict on last close`, `evict 5s after last close, cache max 500.0 MiB`.
        var summary: String {
            let delay = evictDelay > 0 ? "evict \(String(format: "%g", evictDelay))s after last close" : "evict on last close"
            return delay + (cacheMax.map { ", cache max " + StatusFrame.bytes(Double($0)) } ?? "")
        }
    }

    struct Report: Codable {
        var mounts: [MountStatus]
    }

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let all = Self.records(environment: environment)
        var wanted: [String] = []  // mount points, in the order asked, once each
        var failed = false
        for path in paths {
            if let record = Self.mount(holding: path, in: all) {
                if !wanted.contains(record.mountpoint) { wanted.append(record.mountpoint) }
            } else {
                printError("docfs: \(path) is not on a docfs mount of this user")
                failed = true
            }
        }
        let selected = { [paths] in
            let now = Self.records(environment: environment)
            return paths.isEmpty ? now : wanted.compactMap { point in now.first { $0.mountpoint == point } }
        }
        let records = selected()
        if !paths.isEmpty, records.isEmpty { throw ExitCode(1) }
        if watch {
            let drawable = Terminal.isTerminal && environment["TERM"] != "dumb"
            let output: StatusWatch.Output = json ? .json : (drawable ? .terminal : .plain)
            let code = await StatusWatch(interval: interval, output: output, environment: environment,
                                         watched: paths.isEmpty ? nil : paths.joined(separator: ", "), records: selected).run()
            if code != 0 || failed { throw ExitCode(failed ? 1 : code) }
            return
        }
        let report = Report(mounts: records.map(Self.status(of:)))
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else if report.mounts.isEmpty {
            print("no docfs mounts")
        } else {
            for mount in report.mounts { Self.printPlain(mount) }
        }
        if failed { throw ExitCode(1) }
    }

    /// The mount of `records` that holds `path` (a mount point, or a path below one): the
    /// longest mount point that is the path or a prefix of it ending at a `/`, compared after
    /// resolving symlinks (or, where that fails, e.g. a dead mount, on the absolute path).
    static func mount(holding path: String, in records: [MountRecord]) -> MountRecord? {
        let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
        var candidates = [absolute]
        if let resolved = realpath(path, nil) {
            candidates.insert(String(cString: resolved), at: 0)
            free(resolved)
        }
        for candidate in candidates {
            let holding = records.filter { record in
                record.mountpoint == candidate || candidate.hasPrefix(record.mountpoint == "/" ? "/" : record.mountpoint + "/")
            }
            if let longest = holding.max(by: { $0.mountpoint.count < $1.mountpoint.count }) { return longest }
        }
        return nil
    }

    static func records(environment: [String: String]) -> [MountRecord] {
        let directory = MountRegistry.directory(environment: environment)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasSuffix(".json") }.sorted().compactMap { name in
            FileManager.default.contents(atPath: directory + "/" + name).flatMap { try? JSONDecoder().decode(MountRecord.self, from: $0) }
        }
    }

    static func status(of record: MountRecord) -> MountStatus {
        let running = kill(record.pid, 0) == 0 || errno == EPERM
        let catalog = try? Catalog(path: record.catalogPath)
        let pinned = (try? catalog?.pinnedCopyIDs()) ?? []
        var (bytes, pinnedBytes, files) = (Int64(0), Int64(0), 0)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: record.cacheDirectory)) ?? [] {
            var info = stat()
            guard lstat(record.cacheDirectory + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            bytes += Int64(info.st_blocks) * 512
            if pinned.contains(name) { pinnedBytes += Int64(info.st_blocks) * 512 }
            files += 1
        }
        var status = MountStatus(mountpoint: record.mountpoint, store: record.store, pid: record.pid, running: running,
                                 cacheDirectory: record.cacheDirectory, cacheBytes: bytes, cacheFiles: files, states: [:],
                                 pendingUploads: 0, transfers: [], errors: [],
                                 retention: record.evictDelay.map { Retention(evictDelay: $0, cacheMax: record.cacheMax) },
                                 pinnedCacheBytes: pinnedBytes, unpinnedCacheBytes: bytes - pinnedBytes,
                                 writeConditions: record.writeConditions, serverTraits: record.serverTraits,
                                 modeMask: record.modeMask)
        guard let catalog else { return status }
        for (state, count) in (try? catalog.stateCounts()) ?? [] { status.states[state] = count }
        status.pendingUploads = ((try? catalog.itemsPendingUpload()) ?? []).count
        status.errors = ((try? catalog.uploadErrors()) ?? []).map { UploadError(path: $0.path, error: $0.error) }
        var transferring = (try? catalog.transferringPaths()) ?? []
        // Streamed downloads, which the catalog shows as local: the daemon lists them.
        if running, let listed = Steering.get(DocFileSystem.transfersAttribute, of: record.mountpoint) {
            for line in listed.split(separator: "\n") {
                let fields = line.split(separator: "\t", maxSplits: 1).map(String.init)
                guard fields.count == 2 else { continue }
                // A file fetched ahead of its reader is `downloading` in the catalog: the daemon says which.
                transferring.removeAll { $0.path == fields[1] }
                transferring.append((fields[1], fields[0]))
            }
            transferring.sort { $0.path < $1.path }
        }
        status.transfers = transferring.map { path, state in
            var transfer = Transfer(path: path, state: state)
            if running, let progress = Steering.get("user.docfs.progress", of: record.mountpoint + path) {
                let parts = progress.split(separator: "/").compactMap { Int64($0) }
                if parts.count == 2 { (transfer.done, transfer.total) = (parts[0], parts[1]) }
            }
            return transfer
        }
        return status
    }

    static func printPlain(_ mount: MountStatus) {
        print("\(mount.mountpoint)  \(mount.store)  (pid \(mount.pid)\(mount.running ? "" : ", not running"))")
        print("  cache: \(mount.cacheBytes) bytes in \(mount.cacheFiles) file(s) (pinned \(mount.pinnedCacheBytes), unpinned "
              + "\(mount.unpinnedCacheBytes)), \(mount.cacheDirectory)")
        if let retention = mount.retention { print("  policy: " + retention.summary) }
        if let mask = mount.modeMask { print("  modes: " + mask) }
        if let conditions = mount.writeConditions { print("  If-Match on upload: " + conditions) }
        for trait in mount.serverTraits ?? [] { print("  " + trait) }
        let order = ["placeholder", "downloading", "local", "pinned", "modified", "uploading", "error"]
        let states = mount.states.sorted { (order.firstIndex(of: $0.key) ?? 99, $0.key) < (order.firstIndex(of: $1.key) ?? 99, $1.key) }
        print("  files: " + (states.isEmpty ? "none" : states.map { "\($0.key)=\($0.value)" }.joined(separator: " ")))
        print("  pending uploads: \(mount.pendingUploads)")
        for transfer in mount.transfers {
            let bytes = transfer.done.map { done in " \(done)/\(transfer.total ?? 0) bytes" } ?? ""
            print("  \(transfer.state): \(transfer.path)\(bytes)")
        }
        for error in mount.errors { print("  error: \(error.path): \(error.error)") }
    }
}
