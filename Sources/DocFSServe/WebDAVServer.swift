// WebDAVServer: `docfs serve`, a WebDAV (RFC 4918 class 1) server over one local directory,
// built on HummingbirdCore's HTTP/1.1 server. This file owns the server loop: binding (plain
// or TLS through HummingbirdTLS / swift-nio-ssl), reporting the bound port, admission before
// `Expect: 100-continue`, the Date header, and the request log (written before the response
// ends, so a client that has its answer can read its line).
// What each method does lives in WebDAVHandler; all file access in ServedDirectory.

import Hummingbird
import HummingbirdCore
import HummingbirdTLS
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
    /// Basic authentication; nil serves without (the CLI allows that on loopback or with `--no-auth`).
    public var credentials: BasicCredentials?
    /// PEM files of the certificate (chain) and its private key: serve HTTPS.
    public var tlsCertificatePath: String?
    public var tlsKeyPath: String?
    /// The largest PUT body accepted, in bytes; nil: no limit.
    public var maxUpload: Int64?
    /// More names a `Host` may give (`name` or `name:port`), for a reverse proxy or port forward.
    public var allowedHosts: [String] = []
    /// Where previews of images and videos are kept (ServedPreviews.swift); nil: no previews.
    public var previewCacheDirectory: String?

    public init(root: String, host: String = "127.0.0.1", port: Int = 0, requestLogPath: String? = nil,
                credentials: BasicCredentials? = nil, tlsCertificatePath: String? = nil, tlsKeyPath: String? = nil,
                maxUpload: Int64? = nil) {
        self.root = root
        self.host = host
        self.port = port
        self.requestLogPath = requestLogPath
        self.credentials = credentials
        self.tlsCertificatePath = tlsCertificatePath
        self.tlsKeyPath = tlsKeyPath
        self.maxUpload = maxUpload
    }

    public var scheme: String { tlsCertificatePath == nil ? "http" : "https" }
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
        let handler = WebDAVHandler(
            directory: directory, logger: logger,
            origin: ServedOrigin(scheme: configuration.scheme, host: configuration.host, allowedHosts: configuration.allowedHosts),
            auth: configuration.credentials.map(BasicAuth.init),
            maxUpload: configuration.maxUpload,
            previews: configuration.previewCacheDirectory.flatMap { ServedPreviews(cacheDirectory: $0, logger: self.logger) }
        )
        let builder = try makeServerBuilder()
        let logger = self.logger
        let root = directory.root

        // HummingbirdCore reports the CancellationError that ends `run` at error level; that is
        // our normal way to stop, so its own logging only shows when debugging.
        var serverLogger = logger
        if serverLogger.logLevel > .debug { serverLogger.logLevel = .critical }
        let server = try builder.buildServer(
            configuration: ServerConfiguration(
                address: .hostname(configuration.host, port: configuration.port),
                serverName: nil
            ),
            eventLoopGroup: MultiThreadedEventLoopGroup.singleton,
            logger: serverLogger,
            responder: { request, responseWriter, channel in
                let record = RequestRecord(request: request, log: requestLog)
                let port = channel.localAddress?.port ?? 0
                do {
                    var response: Response
                    if let refusal = await handler.admit(request, port: port) {
                        response = refusal
                    } else {
                        if request.headers[.expect]?.lowercased() == "100-continue" {
                            try await responseWriter.writeInformationalHead(HTTPResponse(status: .continue))
                        }
                        response = await handler.respond(to: request, port: port)
                    }
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
                logger.debug("serving \(root) at \(self.configuration.scheme)://\(self.configuration.host):\(port)/")
                onListening(port)
            }
        )
        try await server.run()
    }

    /// HTTP/1.1, wrapped in TLS when a certificate and key are configured.
    private func makeServerBuilder() throws -> HTTPServerBuilder {
        guard let certificatePath = configuration.tlsCertificatePath, let keyPath = configuration.tlsKeyPath else {
            return .http1()
        }
        do {
            let chain = try NIOSSLCertificate.fromPEMFile(certificatePath)
            let key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
            let tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            return try .tls(.http1(), tlsConfiguration: tls)
        } catch {
            throw WebDAVServerError(description: "cannot use TLS certificate \(certificatePath) and key \(keyPath): \(error)")
        }
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
