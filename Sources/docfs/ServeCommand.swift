// `docfs serve DIR`: serve a directory over WebDAV, the built-in demo and test store.
// Prints one line to stdout once listening; SIGINT/SIGTERM stop it cleanly (exit 0).

import ArgumentParser
import Dispatch
import DocFSServe
import Logging

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
    }

    func run() async throws {
        let logger = Logger(label: "docfs.serve")
        let server = WebDAVServer(
            configuration: WebDAVServerConfiguration(root: dir, host: host, port: port, requestLogPath: requestLog),
            logger: logger
        )
        let dir = self.dir
        let host = self.host
        let serving = Task {
            try await server.run { port in
                let shownHost = host.contains(":") ? "[\(host)]" : host
                print("docfs serve: serving \(dir) at http://\(shownHost):\(port)/")
                fflush(nil)  // all output streams: stdout itself is not concurrency-safe to name
            }
        }
        // SIGINT/SIGTERM cancel the server task; run() then returns and we exit 0.
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { serving.cancel() }
            source.resume()
            sources.append(source)
        }
        defer { sources.forEach { $0.cancel() } }
        do {
            try await serving.value
        } catch is CancellationError {
            // stopped by a signal
        } catch {
            if serving.isCancelled { return }
            throw error
        }
    }
}
