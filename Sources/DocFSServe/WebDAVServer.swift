// WebDAVServer: `docfs serve`, a WebDAV (RFC 4918 class 1) server over one local directory,
// built on HummingbirdCore's HTTP/1.1 server. This file owns the server loop: binding,
// reporting the bound port, `Expect: 100-continue`, the Date header, and the request log
// (written before the response ends, so a client that has its answer can read its line).
// What each method does lives in WebDAVHandler; all file access in ServedDirectory.

import Hummingbird
import HummingbirdCore
public import Logging
import NIOCore
import NIOPosix

public struct WebDAVServerConfiguration: Sendable {
    /// The directory to serve.
    public var root: String
    public var host: String
    /// 0 binds any free port; `run` reports the bound one.
    public var port: Int
    /// Append one line per request here: `METHOD\tPATH\tSTATUS\tBYTES\tRANGE`.
    public var requestLogPath: String?

    public init(root: String, host: String = "127.0.0.1", port: Int = 0, requestLogPath: String? = nil) {
        self.root = root
        self.host = host
        self.port = port
        self.requestLogPath = requestLogPath
    }
}

public struct WebDAVServerError: Error, CustomStringConvertible {
    public let description: String
}

public final class WebDAVServer: Sendable {
    public let configuration: WebDAVServerConfiguration
    let logger: Logger

    public init(configuration: WebDAVServerConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Runs until the surrounding task is cancelled. Calls `onListening` with the bound port
    /// once the server accepts connections. Throws when the root or the request log cannot be
    /// opened, or the address cannot be bound.
    public func run(onListening: @escaping @Sendable (Int) -> Void) async throws {
        let directory: ServedDirectory
        let requestLog: RequestLog?
        do {
            directory = try ServedDirectory(path: configuration.root)
            requestLog = try configuration.requestLogPath.map { try RequestLog(path: $0) }
        } catch {
            throw WebDAVServerError(description: (error as? DAVError)?.reason ?? "\(error)")
        }
        let handler = WebDAVHandler(directory: directory, logger: logger)
        let logger = self.logger
        let root = directory.root

        // HummingbirdCore reports the CancellationError that ends `run` at error level; that is
        // our normal way to stop, so its own logging only shows when debugging.
        var serverLogger = logger
        if serverLogger.logLevel > .debug { serverLogger.logLevel = .critical }
        let server = try HTTPServerBuilder.http1().buildServer(
            configuration: ServerConfiguration(
                address: .hostname(configuration.host, port: configuration.port),
                serverName: nil
            ),
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
            logger: serverLogger,
            responder: { request, responseWriter, _ in
                let record = RequestRecord(request: request, log: requestLog)
                do {
                    if request.headers[.expect]?.lowercased() == "100-continue" {
                        try await responseWriter.writeInformationalHead(HTTPResponse(status: .continue))
                    }
                    var response = await handler.respond(to: request)
                    response.headers[.date] = HTTPDate.now()
                    record.status = response.status.code
                    logger.debug("\(request.method) \(request.uri.path) -> \(response.status.code)")
                    let bodyWriter = try await responseWriter.writeHead(response.head)
                    let declared = response.headers[.contentLength].flatMap { Int64($0) }
                    try await response.body.write(LoggingBodyWriter(parent: bodyWriter, record: record, declaredLength: declared))
                } catch {
                    // The client went away or the body failed half-way: still one log line.
                    record.finish()
                    throw error
                }
            },
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? 0
                logger.debug("serving \(root) at http://\(self.configuration.host):\(port)/")
                onListening(port)
            }
        )
        try await server.run()
    }
}

/// The request-log line of one request, filled in as the response is written.
/// `@unchecked Sendable`: used by the single task answering the request, sequentially.
final class RequestRecord: @unchecked Sendable {
    let method: String
    let path: String
    let range: String?
    let log: RequestLog?
    var status = 0
    var bytes: Int64 = 0
    private var done = false

    init(request: Request, log: RequestLog?) {
        self.method = request.method.rawValue
        self.path = request.head.path ?? request.uri.path
        self.range = request.headers[.range]
        self.log = log
    }

    func finish() {
        guard !done else { return }
        done = true
        log?.record(method: method, path: path, status: status, bytes: bytes, range: range)
    }
}

/// Counts the body bytes and writes the log line before the response ends. With a declared
/// Content-Length the line is written before the bytes that complete it leave: a client that has
/// the whole body (and may exit at once) must already find its request in the log.
struct LoggingBodyWriter<Parent: ResponseBodyWriter>: ResponseBodyWriter {
    var parent: Parent
    let record: RequestRecord
    let declaredLength: Int64?

    mutating func write(_ buffer: ByteBuffer) async throws {
        record.bytes += Int64(buffer.readableBytes)
        if let declaredLength, record.bytes >= declaredLength { record.finish() }
        try await parent.write(buffer)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        record.finish()
        try await parent.finish(trailingHeaders)
    }
}
