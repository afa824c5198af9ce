// `docfs serve DIR`: serve a directory over WebDAV, the built-in demo and test store.
// Prints one line to stdout once listening; SIGINT/SIGTERM stop it cleanly (exit 0).
// Fit to expose: Basic auth from a credentials file (required off loopback unless `--no-auth`),
// TLS, a PUT size limit; the server itself checks Host and Destination and never leaves DIR.

import ArgumentParser
import DocFSServe
import DocFSStores
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve a directory over WebDAV (the built-in demo and test store)"
    )

    @Argument(help: ArgumentHelp("The directory to serve.", valueName: "DIR"))
    var dir: String

    @Option(help: ArgumentHelp("Port to listen on (0 = any free port).", valueName: "N"))
    var port: Int = 8080

    @Option(help: ArgumentHelp("Address to listen on.", valueName: "H"))
    var host: String = "127.0.0.1"

    @Option(name: .customLong("request-log"), help: ArgumentHelp("Append one line per request to FILE (METHOD, PATH, STATUS, BYTES, RANGE; tab-separated).", valueName: "FILE"))
    var requestLog: String?

    @Option(help: ArgumentHelp("""
        Require HTTP Basic authentication with the user and password in FILE (lines user=NAME \
        and password=SECRET; the file must not be readable by group or others, as for docfs mount). \
        Required when --host is not a loopback address, unless --no-auth is given.
        """, valueName: "FILE"))
    var credentials: String?

    @Flag(name: .customLong("no-auth"), help: "Serve without authentication on a non-loopback address (everyone who can reach it can read and change DIR).")
    var noAuth = false

    @Option(help: ArgumentHelp("How much to log on stderr: trace, debug (every request), info, notice, warning, error or critical (default: info).",
                               valueName: "level"))
    var logLevel: Logger.Level = .info

    @Option(name: .customLong("tls-cert"), help: ArgumentHelp("Serve HTTPS with this PEM certificate (chain); needs --tls-key.", valueName: "FILE"))
    var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: ArgumentHelp("The PEM private key of --tls-cert.", valueName: "FILE"))
    var tlsKey: String?

    @Option(name: .customLong("max-upload"), help: ArgumentHelp("Refuse PUT bodies larger than SIZE with 413 (bytes, or with K, M, G, T; 'unlimited').", valueName: "SIZE"))
    var maxUpload: String = "10G"

    @Option(name: .customLong("allow-host"), help: ArgumentHelp("Also accept requests whose Host is NAME (any port) or NAME:PORT, e.g. the public name behind a reverse proxy. Repeatable. Loopback names and --host are always accepted.", valueName: "NAME[:PORT]"))
    var allowHost: [String] = []

    @Flag(name: .customLong("no-previews"), help: "Make no previews of images and videos (PROPFIND then says nothing of them).")
    var noPreviews = false

    @Option(name: .customLong("preview-cache"), help: ArgumentHelp("Where previews of images (made with gdk-pixbuf-thumbnailer) and videos (ffmpegthumbnailer), where installed, are kept: one PNG per file version and size (default: $XDG_CACHE_HOME/docfs/previews).", valueName: "DIR"))
    var previewCache: String?

    func validate() throws {
        var st = stat()
        guard stat(dir, &st) == 0 else {
            throw ValidationError("cannot serve '\(dir)': \(String(cString: strerror(errno)))")
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            throw ValidationError("cannot serve '\(dir)': not a directory")
        }
        guard (0...65535).contains(port) else {
            throw ValidationError("--port must be between 0 and 65535")
        }
        if (tlsCert == nil) != (tlsKey == nil) {
            throw ValidationError("--tls-cert and --tls-key go together")
        }
        guard ByteSize.parse(maxUpload) != nil else {
            throw ValidationError("--max-upload: '\(maxUpload)' is not a size (e.g. 100M, 10G, unlimited)")
        }
        if let bad = allowHost.first(where: { !ServedOrigin.isValidAllowedHost($0) }) {
            throw ValidationError("--allow-host: '\(bad)' is not NAME or NAME:PORT")
        }
        if credentials != nil && noAuth {
            throw ValidationError("--credentials and --no-auth contradict each other")
        }
        if credentials == nil && !noAuth && !ServedOrigin.isLoopback(host) {
            throw ValidationError("""
                --host \(host) is not a loopback address: give --credentials FILE (user= and password= lines, \
                mode 600), or --no-auth to serve without authentication
                """)
        }
        if let credentials {
            do {
                _ = try StoreLocator.credentialsFile(credentials)
            } catch {
                throw ValidationError(error.description)
            }
        }
    }

    /// `$XDG_CACHE_HOME/docfs/previews`, else `~/.cache/docfs/previews`.
    static func defaultPreviewCache() -> String {
        if let cache = getenv("XDG_CACHE_HOME").map({ String(cString: $0) }), cache.hasPrefix("/") { return cache + "/docfs/previews" }
        let home = getenv("HOME").map { String(cString: $0) } ?? "/tmp"
        return home + "/.cache/docfs/previews"
    }

    func run() async throws {
        var logger = Logger(label: "docfs.serve")
        logger.logLevel = logLevel
        let basic = try credentials.map { path in
            let (user, password) = try StoreLocator.credentialsFile(path)
            return BasicCredentials(user: user, password: password)
        }
        if noAuth && !ServedOrigin.isLoopback(host) {
            FileHandleStderr.write("docfs serve: warning: serving \(dir) on \(host) without authentication (--no-auth): anyone who can reach it can read, change and delete its files\n")
        }
        let limit: Int64? = switch ByteSize.parse(maxUpload) {
        case .bytes(let bytes): bytes
        case .unlimited, nil: nil
        }
        var configuration = WebDAVServerConfiguration(
            root: dir, host: host, port: port, requestLogPath: requestLog, credentials: basic,
            tlsCertificatePath: tlsCert, tlsKeyPath: tlsKey, maxUpload: limit
        )
        configuration.allowedHosts = allowHost
        if !noPreviews { configuration.previewCacheDirectory = previewCache ?? Self.defaultPreviewCache() }
        let server = WebDAVServer(configuration: configuration, logger: logger)
        let dir = self.dir
        let host = self.host
        let scheme = configuration.scheme
        // SIGINT/SIGTERM cancel the server task; run() then returns and we exit 0. The handlers
        // are in place before the server listens: a signal that came between its "serving" line
        // and their installation was ignored, and the server never stopped (a test that stops it
        // at once timed out under load).
        let serving = ServingTask()
        let signals = SignalHandlers(signals: [SIGINT, SIGTERM]) { _ in serving.stop() }
        defer { signals.cancel() }
        let task = serving.start {
            try await server.run { port in
                let shownHost = host.contains(":") ? "[\(host)]" : host
                print("docfs serve: serving \(dir) at \(scheme)://\(shownHost):\(port)/")
                fflush(nil)  // all output streams: stdout itself is not concurrency-safe to name
            }
        }
        do {
            try await task.value
        } catch is CancellationError {
            // stopped by a signal
        } catch {
            if task.isCancelled { return }
            throw error
        }
    }
}

/// The server's task, and whether a signal asked it to stop (also before it began).
private final class ServingTask: Sendable {
    private let state = Mutex<(task: Task<Void, any Error>?, stopped: Bool)>((nil, false))

    func start(_ body: @escaping @Sendable () async throws -> Void) -> Task<Void, any Error> {
        let task = Task { try await body() }
        state.withLock { state in
            state.task = task
            if state.stopped { task.cancel() }
        }
        return task
    }

    func stop() {
        state.withLock { state in
            state.stopped = true
            state.task?.cancel()
        }
    }
}

/// One line to stderr, unbuffered.
private enum FileHandleStderr {
    static func write(_ text: String) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
