import ArgumentParser
import DocFSCore
import DocFSFuse
import DocFSStore
import DocFSStores
import DocFSThumbnails
import Dispatch
import Foundation
import Logging
import Synchronization

/// `docfs mount STORE MOUNTPOINT`: mount a store with placeholders.
struct MountCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mount",
        abstract: "Mount a store (WebDAV, S3 or a local directory) on a directory.",
        discussion: """
            STORE is a WebDAV URL (http://, https://, webdav://, webdavs://), an S3 bucket \
            (s3://bucket/prefix) or a local directory (a path or file:///path). Without \
            --foreground, docfs returns once the \
            mount is ready and keeps serving it in the background (log: --log-file, default \
            in the state directory).

            Credentials for WebDAV come from DOCFS_USER and DOCFS_PASSWORD, or from \
            --credentials FILE (lines user=NAME and password=SECRET; the file must not be \
            readable by group or others). S3 credentials come from AWS_ACCESS_KEY_ID / \
            AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or AWS_PROFILE with ~/.aws/credentials.

            Examples:
              docfs mount http://127.0.0.1:8080/ ~/docs
              docfs mount webdavs://cloud.example.org/remote.php/dav/files/me/ ~/cloud --credentials ~/.config/docfs/cloud
              docfs mount s3://my-bucket/reports ~/reports --region eu-west-1
              docfs mount s3://bucket/ ~/minio --endpoint http://127.0.0.1:9000
              docfs mount /srv/archive ~/archive --read-only
              docfs mount http://127.0.0.1:8080/ Mount --foreground --dir-cache-ttl 5

            The form mount(8) uses works too: 'docfs STORE MOUNTPOINT -o OPTIONS', so that \
            'mount -t fuse.docfs STORE MOUNTPOINT -o ...' and an /etc/fstab line of type fuse.docfs \
            mount with docfs on the PATH. In -o, every long option here is a mount option \
            (cache_dir=DIR,read_only,evict_delay=5,allow_other; underscore or dash), next to ro/rw, \
            the FUSE options (allow_root, nosuid, noatime, fsname=...) and the fstab ones \
            (noauto, _netdev, nofail, user, x-systemd.*), which are ignored.
            """
    )

    @Argument(help: "The store: a WebDAV URL, an S3 bucket (s3://bucket/prefix) or a local directory.")
    var store: String

    @Argument(help: "An existing, empty directory to mount on.")
    var mountpoint: String

    @Flag(help: "Stay in the foreground (Ctrl-C unmounts).")
    var foreground = false

    @Flag(help: "Refuse every change (EROFS).")
    var readOnly = false

    @Option(help: "Seconds a directory listing is trusted before it is revalidated in the background.")
    var dirCacheTtl: Double = 30

    @Option(help: ArgumentHelp("Folders listed ahead of a tree walk: once a second never-listed subfolder of one folder is opened (find, du, cp -r, a file manager), up to this many of its other never-listed subfolders are listed in the background, 4 at a time. 0 lists nothing ahead.",
                               valueName: "folders"))
    var listAhead: Int = DirectoryEnumerator.ListAhead.default.folders

    @Option(help: ArgumentHelp("Small files read ahead of a reader that goes through a folder in name order (cat *, grep -r, cp -r out of the mount): up to this many are fetched alongside the one it reads, and let go after 5 s if it never opens them. 0 reads nothing ahead.",
                               valueName: "files"))
    var prefetch: Int = Prefetcher.Policy.default.files

    @Flag(help: "Write no thumbnails from the store's previews, and leave file managers' thumbnail failure markers alone (see doc/desktop.md).")
    var noThumbnails = false

    @Option(help: "Where local copies are kept (default: $XDG_CACHE_HOME/docfs); not the state directory, which a mount would empty.")
    var cacheDir: String?

    @Option(help: "Where the catalog and the journal of changes are kept (default: $XDG_STATE_HOME/docfs); a store is mounted once per state directory.")
    var stateDir: String?

    @Option(help: "A file with user= and password= lines for the store (mode 0600).")
    var credentials: String?

    @Option(help: "Where the background daemon logs (default: the mount's state directory).")
    var logFile: String?

    @Option(help: ArgumentHelp("Files up to this many bytes are downloaded whole when opened; larger ones are streamed: read() fetches only the byte ranges it needs, and reads ahead for sequential readers.",
                               valueName: "bytes"))
    var wholeFileLimit: Int64 = StreamingPolicy.default.wholeFileLimit

    @Option(help: ArgumentHelp("WebDAV and S3: a new file written in order from its start (cp, dd, a download saved here) is uploaded while it is written, once it has this many bytes (e.g. 4M; 0 or 'off': only at close). On WebDAV it goes to a temporary name and is moved in place once whole, on S3 it is a multipart upload completed at close, so the store never shows a part of it.",
                               valueName: "size"))
    var uploadWhileWriting: String = "4M"

    @Option(help: ArgumentHelp("Seconds the kernel may trust a name it looked up (also one that was not found) before asking docfs again.",
                               valueName: "seconds"))
    var entryTimeout: Double = 1

    @Option(help: ArgumentHelp("Seconds the kernel may trust a file's size, times and mode before asking docfs again; also how long a reopen of a file the kernel caches takes the store's last word on its version.",
                               valueName: "seconds"))
    var attrTimeout: Double = 1

    @Option(help: ArgumentHelp("Seconds a process blocked in open() or read() waits for content from the store before it gets an error (ETIMEDOUT; EHOSTDOWN when the store cannot be reached). Ctrl-C ends such a wait at once.",
                               valueName: "seconds"))
    var ioTimeout: Double = 30

    @Option(help: ArgumentHelp("Seconds to set up a connection to the store (default 10; also DOCFS_CONNECT_TIMEOUT).", valueName: "seconds"))
    var connectTimeout: Double?

    @Option(help: ArgumentHelp("Seconds a store request may go without a byte before it is given up and tried again (default 30; also DOCFS_IDLE_TIMEOUT).", valueName: "seconds"))
    var idleTimeout: Double?

    @Option(help: ArgumentHelp("Seconds every transfer may take on top of its size at 16 KiB/s, so a body that trickles fails while a large healthy one is never cut (default 30; also DOCFS_TRANSFER_TIMEOUT).", valueName: "seconds"))
    var transferTimeout: Double?

    @Option(help: ArgumentHelp("Seconds a released, unchanged local copy is kept, so that a close then reopen downloads once (default 0: evict on the last close). A reopen reuses it while the store's version is unchanged.",
                               valueName: "seconds"))
    var evictDelay: Double = 0

    @Option(help: ArgumentHelp("Disk space released, unpinned local copies may take (e.g. 500M, 2G); the least recently used go first. Released copies are kept until space is needed (with --evict-delay: at most that long).",
                               valueName: "size"))
    var cacheMax: String?

    @Option(help: ArgumentHelp("Processes (comma-separated names, as in /proc/PID/comm) that get content only for files already local: opening a placeholder fails with EACCES and downloads nothing. '' blocks none. Default: thumbnailers and indexers (\(FetchPolicy.defaultNames.joined(separator: ", "))).",
                               valueName: "names"))
    var noFetchFor: String?

    /// `--upload-while-writing` as the core's policy (nil: off).
    var streamedUploads: StreamedUpload.Policy? {
        guard uploadWhileWriting.lowercased() != "off", let size = RetentionPolicy.parseSize(uploadWhileWriting), size > 0 else { return nil }
        return StreamedUpload.Policy(minimumLength: size)
    }

    @Option(name: .customShort("o"), help: "FUSE mount options, comma-separated (e.g. allow_other).")
    var options: [String] = []

    @OptionGroup(title: "S3")
    var s3: S3Options

    @OptionGroup(title: "Local access")
    var access: AccessOptions

    @Flag(name: .shortAndLong, help: "Log more (debug level).")
    var verbose = false

    @Option(help: ArgumentHelp("How much to log: trace, debug, info, notice, warning, error or critical (default: info, or DOCFS_LOG_LEVEL; -v is debug). With --foreground the log goes to stderr.",
                               valueName: "level"))
    var logLevel: Logger.Level?

    @Flag(help: .hidden)
    var daemonChild = false

    func validate() throws {
        guard dirCacheTtl >= 0 else { throw ValidationError("--dir-cache-ttl must be 0 or more seconds") }
        guard listAhead >= 0 else { throw ValidationError("--list-ahead must be 0 or more folders") }
        guard prefetch >= 0 else { throw ValidationError("--prefetch must be 0 or more files") }
        guard wholeFileLimit >= 0 else { throw ValidationError("--whole-file-limit must be 0 or more bytes") }
        guard entryTimeout >= 0, entryTimeout.isFinite else { throw ValidationError("--entry-timeout must be 0 or more seconds") }
        guard attrTimeout >= 0, attrTimeout.isFinite else { throw ValidationError("--attr-timeout must be 0 or more seconds") }
        guard ioTimeout > 0, ioTimeout <= 86_400 else { throw ValidationError("--io-timeout must be more than 0 and at most 86400 seconds") }
        for (name, value) in [("--connect-timeout", connectTimeout), ("--idle-timeout", idleTimeout), ("--transfer-timeout", transferTimeout)] {
            if let value, !(value > 0 && value <= 86_400) { throw ValidationError("\(name) must be more than 0 and at most 86400 seconds") }
        }
        guard evictDelay >= 0, evictDelay <= 31_536_000 else { throw ValidationError("--evict-delay must be 0 or more seconds (at most a year)") }
        if uploadWhileWriting.lowercased() != "off", RetentionPolicy.parseSize(uploadWhileWriting) == nil {
            throw ValidationError("--upload-while-writing must be a size such as 4M, or 0 or off (got '\(uploadWhileWriting)')")
        }
        if let cacheMax, RetentionPolicy.parseSize(cacheMax) == nil {
            throw ValidationError("--cache-max must be a size such as 500M or 2G (got '\(cacheMax)')")
        }
    }

    /// A mount point that cannot be used is a one-line reason, not a usage message.
    private func checkMountpoint(_ path: String) {
        var info = stat()
        if stat(path, &info) != 0 {
            if errno == ENOTCONN || errno == ECONNABORTED {
                fail("\(path) is a stale docfs mount: run 'docfs unmount \(mountpoint)' first")
            }
            fail("mount point does not exist: \(path)")
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { fail("mount point is not a directory: \(path)") }
    }

    func run() async throws {
        // First, so a password stays in argv or the environment of this process no longer
        // than it must, and never in the daemon's.
        let secrets = daemonChild ? SecretHandoff.receive() : SecretHandoff.take(storeArgument: store)
        let path = absolutePath(mountpoint)
        checkMountpoint(path)
        if let existing = MountTable.entry(at: path) {
            fail("\(path) is already a mount point (\(existing.type) from \(existing.source))")
        }
        if !foreground && !daemonChild {
            try Daemon.start(arguments: secrets.arguments(Array(CommandLine.arguments.dropFirst())) + ["--daemon-child"],
                             mountpoint: path, secrets: secrets.encoded())
        }
        if daemonChild { _ = setsid() }

        // The store's request timeouts: options win over the DOCFS_*_TIMEOUT variables.
        var timeouts: [String: String] = [:]
        timeouts["DOCFS_CONNECT_TIMEOUT"] = connectTimeout.map { "\($0)" }
        timeouts["DOCFS_IDLE_TIMEOUT"] = idleTimeout.map { "\($0)" }
        timeouts["DOCFS_TRANSFER_TIMEOUT"] = transferTimeout.map { "\($0)" }
        let environment = s3.applied(to: ProcessInfo.processInfo.environment.merging(secrets.variables) { $1 }.merging(timeouts) { $1 })
        var logger = Logger(label: "docfs")
        logger.logLevel = logLevel ?? (verbose ? .debug : (Logger.Level(rawValue: environment["DOCFS_LOG_LEVEL"] ?? "") ?? .info))

        let store: any Store
        do {
            store = try StoreLocator.store(for: secrets.storeArgument ?? self.store, credentialsFile: credentials, environment: environment, logger: logger)
        } catch {
            fail("\(error)")
        }
        let layout = MountLayout(store: store.identity, environment: environment, stateDirectoryOverride: stateDir.map(absolutePath),
                                 cacheDirectoryOverride: cacheDir.map(absolutePath))
        // The daemon would reach its own catalog or cache through its own mount, and hang.
        for directory in [layout.stateDirectory, layout.cacheDirectory] where absolutePath(directory).hasPrefix(path + "/") {
            await StoreLocator.shutdownIfNeeded(store)
            fail("\(directory) is inside the mount point \(path): use another --state-dir / --cache-dir (or XDG_STATE_HOME / XDG_CACHE_HOME)")
        }
        let catalog: Catalog
        let stateLock: StateLock
        do {
            try layout.createDirectories()
        } catch {
            await StoreLocator.shutdownIfNeeded(store)
            fail("\(error)")
        }
        // One mount per store's state: a second one would recover the first's live journal.
        do throws(StateLock.Failure) {
            stateLock = try await Self.lockState(of: layout, for: path)
        } catch .held(let holder) {
            await StoreLocator.shutdownIfNeeded(store)
            fail("\(store.identity) is mounted already \(holder); unmount it first, or give this mount its own --state-dir")
        } catch .unavailable(let code) {
            await StoreLocator.shutdownIfNeeded(store)
            fail("cannot lock \(layout.stateDirectory)/lock: \(String(cString: strerror(code)))")
        }
        do {
            catalog = try Catalog(path: layout.catalogPath)
        } catch {
            await StoreLocator.shutdownIfNeeded(store)
            fail("\(error)")
        }

        // A store we cannot reach is an error, unless we have its placeholders already. With
        // them, a few seconds of trying cover a blip, and then the mount shows them (the daemon
        // reaches the store again by itself); without them, the store gets the interactive 20 s
        // to come back (a restarting server) before the mount fails.
        let hasCache = (try? catalog.item(Item.rootInode))??.listedAt != nil
        let reachability = hasCache ? RetryPolicy.interactive.within(.seconds(3)) : RetryPolicy.interactive
        do {
            let root = try await reachability.run { () async throws(StoreError) -> RemoteEntry in
                try await store.stat(.root)
            }
            if root.modified > 0 { try? catalog.updateMetadata(of: Item.rootInode, from: root) }
        } catch {
            if error.isTransient && hasCache {
                logger.warning("store unreachable, serving cached placeholders", metadata: ["error": "\(error)"])
                printError("docfs: warning: \(store.identity) is unreachable (\(error)); showing cached placeholders")
            } else {
                await StoreLocator.shutdownIfNeeded(store)
                fail("cannot use \(store.identity): \(error)")
            }
        }

        // Before any upload of this mount: an S3 store records its multipart uploads there, and
        // aborts those a killed daemon left on the server.
        await store.keepUnfinishedWork(in: layout.stateDirectory)

        let filesystem = DocFileSystem(store: store, catalog: catalog, cacheDirectory: layout.cacheDirectory,
                                       directoryTTL: dirCacheTtl, readOnly: readOnly,
                                       streaming: StreamingPolicy(wholeFileLimit: wholeFileLimit),
                                       ioTimeout: .milliseconds(Int64(ioTimeout * 1000)),
                                       retention: RetentionPolicy(evictDelay: .milliseconds(Int64(evictDelay * 1000)),
                                                                  cacheMax: cacheMax.flatMap(RetentionPolicy.parseSize)),
                                       listAhead: DirectoryEnumerator.ListAhead(folders: listAhead),
                                       prefetch: Prefetcher.Policy(files: prefetch),
                                       stateDirectory: layout.stateDirectory, streamedUploads: streamedUploads,
                                       versionTrust: .milliseconds(Int64(attrTimeout * 1000)), logger: logger)
        // The source the mount table shows is the store as given (without credentials): what
        // an fstab line names, so `mount -a` sees the line is mounted already, and what df shows.
        var mountOptions = ["fsname=" + Self.escapedMountOption(StoreLocator.redacted(self.store)), "subtype=docfs", "default_permissions"]
        if readOnly { mountOptions.append("ro") }
        mountOptions += options.flatMap { $0.split(separator: ",").map(String.init) }
        mountOptions = access.mountOptions(adding: mountOptions)
        let mount = FuseMount(filesystem: filesystem, mountpoint: path, options: mountOptions,
                              cacheDirectory: layout.cacheDirectory, entryTimeout: entryTimeout, attributeTimeout: attrTimeout,
                              access: access.localAccess(mountOptions: mountOptions),
                              fetchPolicy: noFetchFor.map { FetchPolicy(list: $0) } ?? .default, logger: logger)
        // What an earlier mount left (pending uploads, writes never closed) is settled before
        // the first request.
        do {
            try await filesystem.start()
        } catch {
            await StoreLocator.shutdownIfNeeded(store)
            fail("cannot take over what the last mount left: \(error)")
        }
        // Thumbnails of placeholders from the store's previews, in the cache every file manager
        // looks in first, and failure markers of files made local removed (Sources/DocFSThumbnails).
        var thumbnails: Thumbnails?
        if !noThumbnails {
            let home = environment["HOME"] ?? NSHomeDirectory()
            let cacheHome = environment["XDG_CACHE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? home + "/.cache"
            thumbnails = Thumbnails.start(for: filesystem, store: store, catalog: catalog,
                                          settings: Thumbnails.Settings(mountPoint: path, cacheHome: cacheHome), logger: logger)
        }
        filesystem.startListingTheTop()
        // File managers' emblems follow state changes through this socket (Sources/desktop).
        let events: StateEventServer?
        do {
            let server = try StateEventServer(path: StateEventServer.path(key: layout.key, stateDirectory: layout.stateDirectory,
                                                                          environment: environment), logger: logger)
            filesystem.followStates(announcedAt: server.path, isListened: { server.hasClients }) { server.publish($0) }
            events = server
        } catch {
            logger.warning("no state events for file managers: cannot listen on a socket", metadata: ["error": "\(error)"])
            events = nil
        }
        do {
            try mount.mount()
        } catch {
            await StoreLocator.shutdownIfNeeded(store)
            fail("\(error)")
        }
        let environmentForRegistry = environment
        let record = MountRecord(pid: getpid(), mountpoint: path, store: store.identity.description,
                                 stateDirectory: layout.stateDirectory, cacheDirectory: layout.cacheDirectory,
                                 evictDelay: evictDelay, cacheMax: cacheMax.flatMap(RetentionPolicy.parseSize),
                                 modeMask: access.localAccess(mountOptions: mountOptions).maskDescription)
        try? MountRegistry.save(record, environment: environmentForRegistry)
        // What the first conditional upload finds out about the server, for `docfs status`.
        if let server = store as? WebDAVStore {
            let learnt = Mutex(record)
            let save = { @Sendable (change: (inout MountRecord) -> Void) in
                learnt.withLock { record in
                    change(&record)
                    try? MountRegistry.save(record, environment: environmentForRegistry)
                }
            }
            server.whenConditionsFound { support in save { $0.writeConditions = support.description } }
            server.whenServerTraitsChange { traits in save { $0.serverTraits = traits } }
        }

        let signals = SignalHandlers(signals: [SIGINT, SIGTERM, SIGHUP]) { [logger] signal in
            logger.info("signal \(signal): unmounting")
            mount.requestUnmount()
        }
        if daemonChild {
            Daemon.detach(logFile: logFile ?? layout.stateDirectory + "/docfs.log")
            logger.info("mounted", metadata: ["store": "\(store.identity)", "mountpoint": "\(path)"])
        } else {
            print("docfs: \(store.identity) mounted on \(path) (Ctrl-C or 'docfs unmount \(mountpoint)' to unmount)")
            fflush(nil)
        }

        let recoveryCleanup = Task { [filesystem, catalog, logger] in
            await Self.removeRecoveryFoldersOnceSynced(stateDirectory: layout.stateDirectory, filesystem: filesystem,
                                                       catalog: catalog, logger: logger)
        }
        let result = await mount.run()
        logger.info("unmounted, finishing uploads and evicting local copies", metadata: ["loop": "\(result)"])
        // Requests still being answered settle first (bounded; replies after that are
        // dropped), so the file system's shutdown sees their releases and no reply outlives
        // the session.
        await mount.finish()
        // After an abort (`umount -f`, /sys/fs/fuse/connections/N/abort) libfuse leaves the dead
        // mount point in place ("Transport endpoint is not connected"): take it away too.
        if MountTable.entry(at: path)?.type == MountTable.docfsType { mount.requestUnmount() }
        await filesystem.shutdown()
        events?.stop()
        recoveryCleanup.cancel()
        let unsynced = (try? catalog.items(in: [.modified, .uploading])) ?? []
        // Pinned copies stay for the next mount ("keep downloaded"); every other copy goes.
        let pinned = (try? catalog.pinnedLocalItems().map(\.id)) ?? []
        MountLayout.clear(directory: layout.cacheDirectory, keeping: Set(unsynced.map(\.id)).union(pinned))
        if !unsynced.isEmpty {
            let folder = try? RecoveryFolder.keep(unsynced, cacheDirectory: layout.cacheDirectory, stateDirectory: layout.stateDirectory)
            logger.warning("unsynced changes kept for the next mount",
                           metadata: ["count": "\(unsynced.count)", "recovery folder": "\(folder ?? layout.cacheDirectory)"])
        }
        MountRegistry.remove(path, environment: environmentForRegistry)
        signals.cancel()
        await StoreLocator.shutdownIfNeeded(store)
        // Held until everything above is settled: the next mount may take over from here.
        withExtendedLifetime((stateLock, thumbnails)) {}
        logger.info("stopped")
    }
}

extension MountCommand {
    /// The state lock of `layout` for a mount on `mountpoint`. A daemon whose mount point is
    /// gone already (a plain `umount`, `fusermount -u`) may still be finishing its uploads and
    /// evictions: its lock is waited for, up to a minute, as `docfs unmount` waits for it.
    static func lockState(of layout: MountLayout, for mountpoint: String) async throws(StateLock.Failure) -> StateLock {
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            do throws(StateLock.Failure) {
                return try StateLock(stateDirectory: layout.stateDirectory, mountpoint: mountpoint)
            } catch .held(let holder) {
                let stillMounted = holder.mountpoint.map { MountTable.entry(at: $0)?.type == MountTable.docfsType } ?? true
                guard !stillMounted, ContinuousClock.now < deadline else { throw .held(by: holder) }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// A value inside a FUSE `-o` list: libfuse splits at commas and takes a backslash as an escape.
    static func escapedMountOption(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ",", with: "\\,")
    }

    /// An earlier mount's recovery folders hold copies of changes the journal uploads now: once
    /// nothing is pending, every one of them is on the store, and the folders go.
    static func removeRecoveryFoldersOnceSynced(stateDirectory: String, filesystem: DocFileSystem, catalog: Catalog, logger: Logger) async {
        guard !RecoveryFolder.folders(stateDirectory: stateDirectory).isEmpty else { return }
        while !Task.isCancelled {
            await filesystem.waitForUploads()
            if Task.isCancelled { return }
            if let pending = try? catalog.items(in: [.modified, .uploading]), pending.isEmpty {
                RecoveryFolder.removeAll(stateDirectory: stateDirectory)
                logger.info("every kept change is on the store: recovery folders removed")
                return
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

/// Prints `docfs: reason` on stderr and exits 1.
func fail(_ reason: String) -> Never {
    printError("docfs: \(reason)")
    exit(1)
}

func printError(_ line: String) {
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// SIGINT/SIGTERM/SIGHUP through dispatch sources, so a signal is handled on a queue of ours
/// whatever thread it hits (libfuse's own handlers cannot wake a loop that runs on another thread).
// @unchecked: the sources are created in init and only cancelled afterwards; DispatchSource is thread-safe.
final class SignalHandlers: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]

    init(signals: [Int32], handler: @escaping @Sendable (Int32) -> Void) {
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { handler(number) }
            source.resume()
            return source
        }
    }

    func cancel() {
        for source in sources { source.cancel() }
    }
}
