// HTTPTransport: the HTTP side of WebDAVStore and S3Store. It owns the one HTTPClient of a
// store, its timeouts (HTTPTimeouts: connect, idle, and a transfer deadline that grows with the
// bytes moved), the Basic auth header, and the mapping of transport failures and HTTP statuses
// onto StoreError (transient, permanent, `Retry-After`). Logs name the method and the store
// path only: never a URL, never a header.

import AsyncHTTPClient
import DocFSStore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

struct HTTPTransport: Sendable {
    let client: HTTPClient
    /// `Basic …`, or nil. Never logged.
    private let authorization: String?
    let timeouts: HTTPTimeouts
    let logger: Logger

    init(authorization: String?, timeouts: HTTPTimeouts = .default, logger: Logger) {
        var configuration = HTTPClient.Configuration(
            redirectConfiguration: .disallow,
            // The client's read and write timeouts are idle timeouts: they restart with every byte.
            timeout: .init(connect: timeouts.connect.timeAmount, read: timeouts.idle.timeAmount, write: timeouts.idle.timeAmount),
            decompression: .disabled
        )
        // A refused connection fails the call at once: the core retries with its own policy,
        // so a stopped server gives a clear error in a second or two, not at the deadline.
        configuration.connectionPool.retryConnectionEstablishment = false
        // Thirty-two uploads (on S3 each asks up to three questions at once before its PUT),
        // eight prefetches and a listing may be under way at once: at a distance each waits a
        // round trip for a connection the default eight would make it share.
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 80
        self.client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        self.authorization = authorization
        self.timeouts = timeouts
        self.logger = logger
    }

    /// The deadline of a metadata call (its whole answer included).
    var metadataTimeout: TimeAmount { timeouts.base.timeAmount }

    /// The deadline of an upload of `bytes` bytes, until its whole answer.
    func uploadTimeout(bytes: Int64) -> TimeAmount { timeouts.deadline(forBytes: bytes).timeAmount }

    func shutdown() async {
        do {
            try await client.shutdown()
        } catch {
            logger.debug("HTTP client shutdown: \(error)")
        }
    }

    /// A whole answer of a metadata call: status, headers and (bounded) body.
    struct Answer: Sendable {
        var status: Int
        var reason: String
        var headers: HTTPHeaders
        var body: Data

        init(status: Int, reason: String, headers: HTTPHeaders, body: Data) {
            self.status = status
            self.reason = reason
            self.headers = headers
            self.body = body
        }

        /// Reads at most 64 KiB of an answer we will not use, for its status.
        init(consuming response: HTTPClientResponse) async {
            var body = Data()
            do {
                for try await buffer in response.body {
                    if body.count < 64 * 1024 { body.append(contentsOf: buffer.readableBytesView) } else { break }
                }
            } catch {}
            self.init(status: Int(response.status.code), reason: response.status.reasonPhrase, headers: response.headers, body: body)
        }

        /// The error for a status the caller has no special meaning for.
        func error(method: String, path: StorePath) -> StoreError {
            HTTPTransport.statusError(status, reason: reason, method: method, path: path, retryAfter: RetryAfter.parse(headers))
        }
    }

    /// Sends a request and returns as soon as the response head is in; the caller streams the body.
    func start(_ method: HTTPMethod, url: String, path: StorePath, headers: [String: String],
               body: HTTPClientRequest.Body?, timeout: TimeAmount) async throws(StoreError) -> HTTPClientResponse {
        var request = HTTPClientRequest(url: url)
        request.method = method
        if let authorization { request.headers.add(name: "Authorization", value: authorization) }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = body
        logger.debug("\(method.rawValue) \(path)")
        do {
            let response = try await client.execute(request, timeout: timeout)
            logger.debug("\(method.rawValue) \(path) -> \(response.status.code)")
            return response
        } catch {
            let mapped = HTTPTransport.storeError(error, method: method.rawValue, path: path)
            logger.debug("\(method.rawValue) \(path) failed: \(mapped)")
            throw mapped
        }
    }

    /// Sends a request and reads its whole (bounded) answer, all within `timeout`.
    func metadata(_ method: HTTPMethod, url: String, path: StorePath, headers: [String: String],
                  body: HTTPClientRequest.Body?, timeout: TimeAmount,
                  maximumBodyBytes: Int = WebDAVStore.maximumMultistatusBytes) async throws(StoreError) -> Answer {
        let seconds = Double(timeout.nanoseconds) / 1_000_000_000
        let what = "\(method.rawValue) \(path) took longer than \(Int(seconds)) s"
        do {
            return try await HTTPTransport.withDeadline(seconds: seconds, what: what) {
                let response = try await self.start(method, url: url, path: path, headers: headers, body: body, timeout: timeout)
                let buffer: ByteBuffer
                do {
                    buffer = try await response.body.collect(upTo: maximumBodyBytes)
                } catch let error as NIOTooManyBytesError {
                    _ = error
                    throw StoreError.protocolError("\(method.rawValue) \(path): answer larger than \(maximumBodyBytes) bytes")
                }
                return Answer(status: Int(response.status.code), reason: response.status.reasonPhrase,
                              headers: response.headers, body: Data(buffer.readableBytesView))
            }
        } catch {
            throw HTTPTransport.storeError(error, method: method.rawValue, path: path)
        }
    }

    /// Drops an answer we do not use (a short error body is read so the connection can be reused).
    static func discard(_ response: HTTPClientResponse) async {
        _ = await Answer(consuming: response)
    }

    /// Runs `body`, failing with `.timedOut(what)` when it is not done after `seconds`.
    static func withDeadline<T: Sendable>(seconds: Double, what: String,
                                          _ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(nanoseconds: UInt64(seconds * 1_000_000_000))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw StoreError.timedOut(what) }
            return value
        }
    }

    /// The one table of HTTP statuses without a call-specific meaning. `retryAfter`: the
    /// answer's `Retry-After`, which makes a 5xx a `busy`.
    static func statusError(_ status: Int, reason: String, method: String, path: StorePath,
                            retryAfter: Duration? = nil) -> StoreError {
        switch status {
        case 401, 403: return .accessDenied("\(method) \(path): HTTP \(status) \(reason)")
        case 404, 410: return .notFound(path)
        // Locked by another client, for the moment of its change (or until its lock expires).
        case 423: return .busy(status: status, retryAfter: retryAfter, message: "\(method) \(path): locked on the server (HTTP 423)")
        case 405, 501: return .notSupported("\(method) \(path): HTTP \(status) \(reason)")
        case 408: return .timedOut("\(method) \(path): HTTP 408 \(reason)")
        case 400, 409, 411, 413, 414, 422, 431:
            return .refused(status: status, message: "\(method) \(path): HTTP \(status) \(reason)")
        case 429: return .busy(status: status, retryAfter: retryAfter, message: "\(method) \(path): \(reason)")
        case 500..<600 where retryAfter != nil:
            return .busy(status: status, retryAfter: retryAfter, message: "\(method) \(path): \(reason)")
        case 500..<600: return .serverError(status: status, message: "\(method) \(path): \(reason)")
        default: return .protocolError("\(method) \(path): unexpected HTTP \(status) \(reason)")
        }
    }

    /// Runs `body`, a transfer that counts the bytes it moves in the `TransferProgress` it is
    /// given, and fails it with `.timedOut(what)` once it falls behind `timeouts`: when more
    /// than `base + bytes / minimumRate` has passed since it began. The transfer's task is
    /// cancelled then (which ends its HTTP request).
    static func withTransferDeadline<T: Sendable>(_ timeouts: HTTPTimeouts, what: String,
                                                  _ body: @escaping @Sendable (TransferProgress) async throws -> T) async throws -> T {
        let progress = TransferProgress()
        let clock = ContinuousClock()
        let start = clock.now
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body(progress) }
            group.addTask {
                while true {
                    let due = start + timeouts.deadline(forBytes: progress.bytes)
                    if clock.now >= due { return nil }
                    try await Task.sleep(until: due, clock: clock)
                }
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw StoreError.timedOut("\(what): slower than \(timeouts.minimumRate) bytes/s after \(Int(timeouts.base.seconds)) s (\(progress.bytes) bytes in \(Int((clock.now - start).seconds)) s)")
            }
            return value
        }
    }

    /// The one table of transport failures.
    static func storeError(_ error: any Error, method: String, path: StorePath) -> StoreError {
        if let error = error as? StoreError { return error }
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .deadlineExceeded, .readTimeout, .writeTimeout, .getConnectionFromPoolTimeout,
                 .tlsHandshakeTimeout, .socksHandshakeTimeout, .httpProxyHandshakeTimeout:
                return .timedOut("\(method) \(path): \(error)")
            case .cancelled:
                return .timedOut("\(method) \(path): cancelled")
            case .invalidURL, .emptyHost, .emptyScheme:
                return .protocolError("\(method) \(path): \(error)")
            default:
                return .unreachable("\(method) \(path): \(error)")
            }
        }
        if let error = error as? ChannelError, case .connectTimeout = error {
            return .timedOut("\(method) \(path): connect timed out")
        }
        if error is CancellationError { return .timedOut("\(method) \(path): cancelled") }
        return .unreachable("\(method) \(path): \(error)")
    }
}

/// The bytes a transfer has moved so far, for its deadline (`withTransferDeadline`).
final class TransferProgress: Sendable {
    private let moved = Mutex<Int64>(0)

    func add(_ count: Int) { moved.withLock { $0 += Int64(count) } }

    var bytes: Int64 { moved.withLock { $0 } }
}

/// The content of a local file, or of one byte range of it (`slice`: a part of a multipart
/// upload), as a stream of chunks read with `pread`, for an upload of a known length. Fails
/// (instead of sending a short body) if the file shrinks while it is read.
struct LocalFileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    /// Owns the descriptor; closes it when the last user lets go.
    /// `@unchecked Sendable`: the descriptor never changes, and `pread` takes its own offset, so
    /// reads from any thread are safe.
    final class OpenFile: @unchecked Sendable {
        let fd: Int32
        let path: String
        init(fd: Int32, path: String) { self.fd = fd; self.path = path }
        deinit { close(fd) }
    }

    let file: OpenFile
    /// The whole file's size.
    let size: Int64
    /// The bytes this sequence delivers.
    let range: Range<Int64>
    /// Counts what is read for sending, by the file's path.
    let meter: UploadMeter?

    init(path: String, meter: UploadMeter?) throws(StoreError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            throw .localIO(errno: code, message: "open \(path): \(String(cString: strerror(code)))")
        }
        let file = OpenFile(fd: fd, path: path)
        meter?.restart(path)  // a new attempt: `user.docfs.progress` counts from 0 again
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let code = errno
            throw .localIO(errno: code, message: "stat \(path): \(String(cString: strerror(code)))")
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw .localIO(errno: EINVAL, message: "\(path) is not a regular file") }
        self.file = file
        self.size = Int64(info.st_size)
        self.range = 0..<Int64(info.st_size)
        self.meter = meter
    }

    private init(file: OpenFile, size: Int64, range: Range<Int64>, meter: UploadMeter?) {
        self.file = file
        self.size = size
        self.range = range
        self.meter = meter
    }

    /// The same file, delivering only `range` (sharing the open descriptor).
    func slice(_ range: Range<Int64>) -> LocalFileChunks {
        LocalFileChunks(file: file, size: size, range: range, meter: meter)
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let file: OpenFile
        let meter: UploadMeter?
        let end: Int64
        var offset: Int64

        mutating func next() async throws -> ByteBuffer? {
            guard offset < end else { return nil }
            let want = Int(Swift.min(Int64(LocalDirectoryStore.chunkSize), end - offset))
            var buffer = ByteBufferAllocator().buffer(capacity: want)
            let fd = file.fd
            let at = offset
            var failure: Int32 = 0
            while buffer.readableBytes < want {
                let already = buffer.readableBytes
                let got = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want - already) { pointer in
                    let count = pread(fd, pointer.baseAddress, want - already, off_t(at) + off_t(already))
                    if count < 0 { failure = errno; return 0 }
                    return count
                }
                if failure == EINTR { failure = 0; continue }
                if failure != 0 {
                    throw StoreError.localIO(errno: failure, message: "read \(file.path): \(String(cString: strerror(failure)))")
                }
                if got == 0 {
                    throw StoreError.localIO(errno: EIO, message: "\(file.path) shrank while it was uploaded")
                }
            }
            offset += Int64(want)
            meter?.record(file.path, want)
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(file: file, meter: meter, end: range.upperBound, offset: range.lowerBound)
    }
}
