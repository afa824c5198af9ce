// S3Store: the store protocol over the S3 REST API, for AWS S3 and S3-compatible servers
// (MinIO, SeaweedFS, Ceph RGW, R2, moto). It owns the mapping of store paths onto keys, of store
// calls onto S3 operations, and of S3 error codes onto StoreError. Signing lives in
// SigV4Signer.swift, credentials in S3Credentials.swift, XML in S3ListParser.swift, multipart
// uploads and large copies in S3Multipart.swift; the HTTP transport (client, timeouts, transport
// errors) is the one WebDAVStore uses, from HTTPClient+Store.swift.
//
// Directories on a flat namespace: `a/b` is a directory when a zero-byte marker key `a/b/`
// exists or when any key starts with `a/b/`. Listings are ListObjectsV2 with `delimiter=/`, one
// S3 page (≤ 1000 keys) per ListPage, the continuation token as the PageToken, so a prefix with
// any number of keys is listed without holding it in memory. Keys whose name below the listed
// prefix is not a safe file name (`..`, an empty segment from `a//b`, NUL) are skipped with a
// warning. A name that is both a file `x` and a directory `x/` is shown once, as the directory,
// when both are on the same page (S3 pages may split them; then both are shown).
//
// Moves are CopyObject + DeleteObject (UploadPartCopy above 5 GiB), directories key by key:
// S3 has no rename, so a move is NOT atomic — an interrupted directory move leaves some keys
// copied and the source still complete (sources are deleted only after every copy succeeded).
//
// Conditional writes: `If-None-Match: *` and `If-Match` go to the server (AWS and moto honour
// them on PutObject and CompleteMultipartUpload), and the condition is also checked with a HEAD
// first, because some S3-compatible servers ignore them and because a multipart upload should
// not send 100 MiB only to be refused at the end. With a server that ignores the headers, the
// window between that HEAD and the write is the only unprotected one.
//
// Credentials: signed into each request; never part of a URL, a log line, an error or the
// identity. Logs name the operation and the store path, never a URL or a header.

import AsyncHTTPClient
import DocFSStore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

public final class S3Store: Store {
    /// Everything an S3 store needs to know; the CLI's `--endpoint`, `--region`,
    /// `--no-sign-request` and `--part-size` map onto these fields.
    public struct Configuration: Sendable, Equatable {
        /// The bucket name.
        public var bucket: String
        /// The key prefix under which the store's root lies: "" or `a/b/` (normalised to end with `/`).
        public var prefix: String
        /// The signing region (and the region of the AWS endpoint).
        public var region: String
        /// `http(s)://host[:port]` of an S3-compatible server; nil for AWS.
        public var endpoint: String?
        /// Path-style (`endpoint/bucket/key`) instead of virtual-host style (`bucket.endpoint/key`).
        /// nil: path style with a custom endpoint or a bucket name that is not a DNS label, else virtual host.
        public var pathStyle: Bool?
        /// Send requests unsigned (public buckets): `--no-sign-request`.
        public var noSignRequest: Bool
        /// The keys; required unless `noSignRequest`.
        public var credentials: S3Credentials?
        /// Files of at least this size go up as multipart uploads, in parts of this size (≥ 5 MiB).
        public var partSize: Int
        /// Parts uploaded (and keys copied or deleted) at the same time.
        public var concurrency: Int
        /// Symbolic links as s3fs writes them (see S3Store+Symlinks.swift). Finding links made
        /// elsewhere costs a HEAD per small object on its first listing; off, none are made or found.
        public var symlinks: Bool

        public static let defaultPartSize = 8 * 1024 * 1024
        public static let minimumPartSize = 5 * 1024 * 1024
        public static let maximumPartSize = 5 * 1024 * 1024 * 1024

        public init(bucket: String, prefix: String = "", region: String = "us-east-1", endpoint: String? = nil,
                    pathStyle: Bool? = nil, noSignRequest: Bool = false, credentials: S3Credentials? = nil,
                    partSize: Int = Configuration.defaultPartSize, concurrency: Int = 4, symlinks: Bool = true) {
            self.bucket = bucket
            self.prefix = prefix
            self.region = region
            self.endpoint = endpoint
            self.pathStyle = pathStyle
            self.noSignRequest = noSignRequest
            self.credentials = credentials
            self.partSize = partSize
            self.concurrency = concurrency
            self.symlinks = symlinks
        }

        /// The configuration for `s3://bucket/prefix[?option=value…]`, with the options, the
        /// endpoint, the region and the credentials taken from the URL's query, else the
        /// environment (`AWS_ENDPOINT_URL`, `AWS_REGION`/`AWS_DEFAULT_REGION`, `DOCFS_S3_PATH_STYLE=1`,
        /// `DOCFS_S3_NO_SIGN=1`, `DOCFS_S3_PART_SIZE`, `DOCFS_S3_SYMLINKS=0`), else the AWS config
        /// files (`AWS_PROFILE`). Query options: `endpoint`, `region`, `path-style`, `no-sign-request`,
        /// `part-size`, `symlinks`.
        public static func from(url: String, environment: [String: String], home: String? = nil) throws(StoreError) -> Configuration {
            guard url.lowercased().hasPrefix("s3://") else { throw .notSupported("not an s3:// URL") }
            var rest = Substring(url.dropFirst(5))
            var options: [String: String] = [:]
            if let question = rest.firstIndex(of: "?") {
                for pair in rest[rest.index(after: question)...].split(separator: "&") {
                    let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                    let name = (WebDAVMultistatus.percentDecode(parts[0]) ?? String(parts[0])).lowercased().replacingOccurrences(of: "_", with: "-")
                    let value = parts.count > 1 ? (WebDAVMultistatus.percentDecode(parts[1]) ?? String(parts[1])) : "1"
                    options[name] = value
                }
                rest = rest[..<question]
            }
            let slash = rest.firstIndex(of: "/") ?? rest.endIndex
            let bucket = String(rest[..<slash])
            guard !bucket.isEmpty else { throw .invalidName("an s3:// URL needs a bucket: s3://bucket/prefix") }
            var components: [String] = []
            for segment in rest[slash...].split(separator: "/", omittingEmptySubsequences: true) {
                guard let name = WebDAVMultistatus.percentDecode(segment), StorePath.isValidName(name) else {
                    throw .invalidName(String(segment))
                }
                components.append(name)
            }
            func flag(_ value: String?) -> Bool? {
                guard let value = value?.lowercased() else { return nil }
                return ["1", "true", "yes", "on"].contains(value)
            }
            func nonEmpty(_ value: String?) -> String? { value.flatMap { $0.isEmpty ? nil : $0 } }

            let noSign = flag(options["no-sign-request"] ?? options["no-sign"]) ?? flag(environment["DOCFS_S3_NO_SIGN"]) ?? false
            let profile = try S3CredentialResolver.resolve(environment: environment, home: home)
            var configuration = Configuration(bucket: bucket, prefix: components.map { $0 + "/" }.joined())
            configuration.region = nonEmpty(options["region"]) ?? profile.region ?? "us-east-1"
            configuration.endpoint = nonEmpty(options["endpoint"]) ?? profile.endpointURL
            configuration.pathStyle = flag(options["path-style"]) ?? flag(environment["DOCFS_S3_PATH_STYLE"])
            configuration.noSignRequest = noSign
            configuration.symlinks = flag(options["symlinks"]) ?? flag(environment["DOCFS_S3_SYMLINKS"]) ?? true
            configuration.credentials = noSign ? nil : profile.credentials
            if let size = nonEmpty(options["part-size"]) ?? nonEmpty(environment["DOCFS_S3_PART_SIZE"]) {
                guard let bytes = parseSize(size) else { throw .invalidName("part size \(size.debugDescription) is not a size (e.g. 8M, 16MiB, 10485760)") }
                configuration.partSize = bytes
            }
            return configuration
        }

        /// `8388608`, `8M`, `8MiB`, `8MB` (binary units), `1G`.
        static func parseSize(_ text: String) -> Int? {
            let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
            let digits = trimmed.prefix { $0.isNumber }
            guard let number = Int(digits), number > 0 else { return nil }
            switch trimmed.dropFirst(digits.count).trimmingCharacters(in: .whitespaces) {
            case "", "b": return number
            case "k", "kb", "kib": return number * 1024
            case "m", "mb", "mib": return number * 1024 * 1024
            case "g", "gb", "gib": return number * 1024 * 1024 * 1024
            default: return nil
            }
        }
    }

    public let identity: StoreIdentity
    public let configuration: Configuration
    /// `scheme://host[:port]` that requests go to.
    let origin: String
    /// The `Host` header (signed), `host[:port]` of `origin`.
    let hostHeader: String
    /// The wire path of the bucket: `/bucket` (path style) or "" (virtual host).
    let bucketPath: String
    /// The key prefix of the store's root: "" or ending with `/`.
    let prefix: String
    let signer: SigV4Signer?
    let transport: HTTPTransport
    let logger: Logger
    /// Tests only: called before each part upload (part number), to inject failures.
    let partHook: (@Sendable (Int) async throws -> Void)?

    static let metadataTimeout: TimeAmount = .seconds(30)
    static let downloadHeadTimeout: TimeAmount = .seconds(60)
    /// An upload until its response head (the body is bounded by the transport's write/read-idle timeouts).
    static let uploadTimeout: TimeAmount = .hours(24)
    /// XML answers larger than this are refused (a 1000-key page is a few hundred KiB).
    static let maximumXMLBytes = 32 * 1024 * 1024

    public convenience init(configuration: Configuration, logger: Logger = Logger(label: "docfs.store.s3")) throws(StoreError) {
        try self.init(configuration: configuration, logger: logger, partHook: nil)
    }

    init(configuration: Configuration, logger: Logger, partHook: (@Sendable (Int) async throws -> Void)?) throws(StoreError) {
        var configuration = configuration
        let bucket = configuration.bucket
        guard !bucket.isEmpty, !bucket.contains("/"), bucket.utf8.count <= 255,
              bucket.unicodeScalars.allSatisfy({ $0.isASCII && $0.value > 32 }) else {
            throw .invalidName(bucket)
        }
        var prefixComponents: [String] = []
        for part in configuration.prefix.split(separator: "/", omittingEmptySubsequences: true) {
            guard StorePath.isValidName(String(part)) else { throw .invalidName(String(part)) }
            prefixComponents.append(String(part))
        }
        configuration.prefix = prefixComponents.map { $0 + "/" }.joined()
        guard configuration.partSize >= Configuration.minimumPartSize, configuration.partSize <= Configuration.maximumPartSize else {
            throw .notSupported("part size \(configuration.partSize) bytes: S3 parts are 5 MiB to 5 GiB")
        }
        configuration.concurrency = max(1, min(configuration.concurrency, 64))
        if configuration.noSignRequest {
            configuration.credentials = nil
            self.signer = nil
        } else {
            guard let credentials = configuration.credentials else {
                throw .accessDenied("no AWS credentials found (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials); "
                    + "use --no-sign-request for a public bucket")
            }
            self.signer = SigV4Signer(credentials: credentials, region: configuration.region, service: "s3")
        }

        // Addressing.
        let scheme: String
        let host: String
        if let endpoint = configuration.endpoint {
            let parsed = try WebDAVURL(endpoint)
            guard parsed.username == nil else { throw .accessDenied("credentials in the endpoint URL are not used; use AWS_ACCESS_KEY_ID") }
            guard parsed.components.isEmpty else { throw .notSupported("an endpoint with a path (\(parsed.origin)/…)") }
            let split = parsed.origin.range(of: "://")!
            scheme = String(parsed.origin[..<split.lowerBound])
            host = String(parsed.origin[split.upperBound...])
            configuration.endpoint = parsed.origin
        } else {
            scheme = "https"
            host = "s3.\(configuration.region).amazonaws.com"
        }
        let dnsSafe = bucket.range(of: "^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$", options: .regularExpression) != nil
        let usePathStyle = configuration.pathStyle ?? (configuration.endpoint != nil || !dnsSafe)
        if usePathStyle {
            origin = scheme + "://" + host
            hostHeader = host
            bucketPath = "/" + SigV4Signer.uriEncode(bucket, encodeSlash: true)
        } else {
            origin = scheme + "://" + bucket + "." + host
            hostHeader = bucket + "." + host
            bucketPath = ""
        }
        self.configuration = configuration
        self.prefix = configuration.prefix
        self.transport = HTTPTransport(authorization: nil, logger: logger)
        self.logger = logger
        self.partHook = partHook
        var location = "s3://\(bucket)/\(configuration.prefix)"
        if let endpoint = configuration.endpoint { location += " at \(endpoint)" }
        self.identity = StoreIdentity(kind: "s3", location: location)
    }

    /// Closes the HTTP client. Call once, when done with the store.
    public func shutdown() async {
        await transport.shutdown()
    }

    public var capabilities: StoreCapabilities {
        // With links off, listings are taken as they are: every object is a file.
        StoreCapabilities(canWrite: true, canRename: true, hasRangeReads: true,
                          symlinkDiscovery: configuration.symlinks ? .byStat(maximumTargetBytes: Self.maximumLinkTargetBytes) : .inListings)
    }

    // MARK: - Keys

    /// The object key of `path` (the root's is the prefix without its `/`).
    func key(_ path: StorePath) -> String {
        prefix + path.components.joined(separator: "/")
    }

    /// The prefix of a directory's children: "" or ending with `/`.
    func directoryPrefix(_ path: StorePath) -> String {
        path.isRoot ? prefix : key(path) + "/"
    }

    // MARK: - Requests

    /// One S3 call, before signing.
    struct Call: Sendable {
        var method: HTTPMethod
        /// nil for a bucket-level call.
        var key: String?
        var query: [(name: String, value: String)] = []
        var headers: [(name: String, value: String)] = []
        var payloadHash = SigV4Signer.emptyPayloadHash
    }

    /// The URL and the headers (signed when we sign) of `call`.
    func prepare(_ call: Call, now: Date = Date()) -> (url: String, headers: [String: String]) {
        var path = bucketPath
        if let key = call.key {
            path += SigV4Signer.encodePath(key)
        } else if path.isEmpty {
            path = "/"
        }
        var headers = call.headers
        headers.append((name: "Host", value: hostHeader))
        if let signer {
            let amzDate = SigV4Signer.amzDate(now)
            headers.append((name: "x-amz-date", value: amzDate))
            headers.append((name: "x-amz-content-sha256", value: call.payloadHash))
            if let token = signer.credentials.sessionToken { headers.append((name: "x-amz-security-token", value: token)) }
            let signature = signer.sign(SigV4Signer.Request(method: call.method.rawValue, path: path, query: call.query,
                                                            headers: headers, payloadHash: call.payloadHash), amzDate: amzDate)
            headers.append((name: "Authorization", value: signature.authorization))
        }
        // On the wire the query is exactly its canonical form (a value-less name stays bare: `?uploads`).
        let query = call.query
            .map { SigV4Signer.uriEncode($0.name, encodeSlash: true) + ($0.value.isEmpty ? "" : "=" + SigV4Signer.uriEncode($0.value, encodeSlash: true)) }
            .sorted()
            .joined(separator: "&")
        var dictionary: [String: String] = [:]
        for header in headers { dictionary[header.name] = header.value }
        return (origin + path + (query.isEmpty ? "" : "?" + query), dictionary)
    }

    /// Sends a call and reads its whole (bounded) answer.
    func send(_ call: Call, path: StorePath, body: HTTPClientRequest.Body? = nil,
              timeout: TimeAmount = S3Store.metadataTimeout) async throws(StoreError) -> HTTPTransport.Answer {
        let (url, headers) = prepare(call)
        return try await transport.metadata(call.method, url: url, path: path, headers: headers, body: body,
                                            timeout: timeout, maximumBodyBytes: Self.maximumXMLBytes)
    }

    /// Sends a call and returns at the response head; the caller streams the body.
    func start(_ call: Call, path: StorePath, timeout: TimeAmount) async throws(StoreError) -> HTTPClientResponse {
        let (url, headers) = prepare(call)
        return try await transport.start(call.method, url: url, path: path, headers: headers, body: nil, timeout: timeout)
    }

    /// The one table of S3 error codes; statuses without a code go to the transport's table.
    func error(_ answer: HTTPTransport.Answer, method: String, path: StorePath) -> StoreError {
        guard let body = S3XML.parseError(answer.body) else {
            if answer.status == 412 { return .versionMismatch(path) }
            return answer.error(method: method, path: path)
        }
        return Self.error(code: body.code, status: answer.status, method: method, path: path, logger: logger)
    }

    static func error(code: String, status: Int, method: String, path: StorePath, logger: Logger) -> StoreError {
        switch code {
        case "NoSuchKey", "NoSuchUpload":
            return .notFound(path)
        case "NoSuchBucket":
            logger.warning("the bucket does not exist", metadata: ["call": "\(method) \(path)"])
            return .notFound(path)
        case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
             "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem", "InvalidSecurity", "RequestTimeTooSkewed",
             "AuthorizationHeaderMalformed", "InvalidObjectState":
            // The code only: an S3 message can echo the canonical request (never the secret, but still noise).
            return .accessDenied("\(method) \(path): S3 \(code)")
        case "PreconditionFailed", "ConditionalRequestConflict":
            return .versionMismatch(path)
        case "SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "OperationAborted":
            return .serverError(status: status < 500 ? 503 : status, message: "\(method) \(path): S3 \(code)")
        case "NotImplemented", "MethodNotAllowed":
            return .notSupported("\(method) \(path): S3 \(code)")
        default:
            switch HTTPTransport.statusError(status, reason: code, method: method, path: path) {
            case .protocolError: return .protocolError("\(method) \(path): S3 \(code) (HTTP \(status))")
            case let other: return other
            }
        }
    }

    // MARK: - Listing helpers

    /// One ListObjectsV2 call. `delimiter` nil lists everything below `prefix`.
    func listObjects(prefix: String, delimiter: String?, maxKeys: Int, continuation: String?,
                     path: StorePath) async throws(StoreError) -> S3ListResult {
        var call = Call(method: .GET, key: nil)
        call.query = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys)), ("encoding-type", "url")]
        if let delimiter { call.query.append(("delimiter", delimiter)) }
        if let continuation { call.query.append(("continuation-token", continuation)) }
        let answer = try await send(call, path: path)
        guard answer.status == 200 else { throw error(answer, method: "LIST", path: path) }
        return try S3XML.parseList(answer.body)
    }

    /// Whether any key lies below `path/`, and the marker's time when the first key is the marker.
    func directoryExists(_ path: StorePath) async throws(StoreError) -> (exists: Bool, modified: Double?) {
        if path.isRoot { return (true, nil) }
        let marker = directoryPrefix(path)
        let result = try await listObjects(prefix: marker, delimiter: nil, maxKeys: 1, continuation: nil, path: path)
        let first = result.objects.first
        let isMarker = first.flatMap { Self.decodeListedKey($0.key, encoded: result.urlEncoded) }?.utf8.elementsEqual(marker.utf8) ?? false
        return (first != nil || !result.commonPrefixes.isEmpty, isMarker ? first?.lastModified : nil)
    }

    /// HEAD of a key: the file entry (or the link entry, see S3Store+Symlinks.swift), or nil for 404.
    func headObject(_ path: StorePath) async throws(StoreError) -> RemoteEntry? {
        let answer = try await send(Call(method: .HEAD, key: key(path)), path: path)
        switch answer.status {
        case 200:
            let entry = objectEntry(path, answer.headers)
            if configuration.symlinks, S3Metadata.type(in: answer.headers) == .symlink, entry.size <= Self.maximumLinkTargetBytes {
                return try await linkObject(path)
            }
            return entry
        case 404:
            return nil
        default:
            throw error(answer, method: "HEAD", path: path)
        }
    }

    /// The file entry that an object's HEAD or GET headers describe.
    func objectEntry(_ path: StorePath, _ headers: HTTPHeaders) -> RemoteEntry {
        RemoteEntry(path: path, kind: .file,
                    size: headers.first(name: "Content-Length").flatMap { Int64($0) } ?? 0,
                    modified: S3Metadata.modified(in: headers) ?? headers.first(name: "Last-Modified").flatMap(WebDAVDate.parse) ?? 0,
                    etag: headers.first(name: "ETag").map(Self.normalizedETag),
                    mode: S3Metadata.mode(in: headers))
    }

    /// `string` without its first `prefix.utf8.count` bytes (compared byte-wise by the caller:
    /// `String.hasPrefix` compares by canonical equivalence, keys are bytes).
    static func dropping(_ prefix: String, from string: String) -> String {
        String(decoding: string.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
    }

    /// ETags as `"…"`: S3 quotes them, some compatible servers do not in listings.
    static func normalizedETag(_ raw: String) -> ETag {
        let value = raw.trimmingCharacters(in: .whitespaces)
        if value.hasPrefix("\"") || value.hasPrefix("W/\"") { return ETag(value) }
        return ETag("\"" + value + "\"")
    }

    static func sameVersion(_ a: ETag, _ b: ETag) -> Bool {
        WebDAVStore.sameVersion(normalizedETag(a.value), normalizedETag(b.value))
    }

    /// A key from a listing with `encoding-type=url`: `%XX` decoded, `+` a space (AWS encodes
    /// spaces as `+` and a `+` as `%2B`). nil when it does not decode to UTF-8.
    static func decodeListedKey(_ raw: String, encoded: Bool) -> String? {
        guard encoded else { return raw }
        return WebDAVMultistatus.percentDecode(Substring(raw.replacingOccurrences(of: "+", with: " ")))
    }

    // MARK: - list

    public func list(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> ListPage {
        let listedPrefix = directoryPrefix(directory)
        let result = try await listObjects(prefix: listedPrefix, delimiter: "/", maxKeys: 1000,
                                           continuation: page?.value, path: directory)
        var byName: [String: RemoteEntry] = [:]
        var order: [String] = []
        var sawAnything = false
        func add(_ entry: RemoteEntry) {
            if let existing = byName[entry.name] {
                // A file `x` and keys under `x/`: the directory wins, the file is not reachable.
                if existing.kind == .directory { return }
                logger.warning("a file and a directory share a name; showing the directory",
                               metadata: ["directory": "\(directory)", "name": "\(entry.name.debugDescription)"])
            } else {
                order.append(entry.name)
            }
            byName[entry.name] = entry
        }
        /// The one name `key` adds below the listed prefix, and whether it is a directory.
        func child(_ key: String) -> (name: String, isDirectory: Bool)? {
            guard key.utf8.starts(with: listedPrefix.utf8) else {
                logger.warning("skipping a key outside the listed prefix", metadata: ["directory": "\(directory)"])
                return nil
            }
            var rest = Substring(Self.dropping(listedPrefix, from: key))
            var isDirectory = false
            if rest.hasSuffix("/") {
                rest = rest.dropLast()
                isDirectory = true
            }
            let name = String(rest)
            guard StorePath.isValidName(name) else {
                logger.warning("skipping an unsafe name", metadata: ["directory": "\(directory)", "key": "\(key.debugDescription)"])
                return nil
            }
            return (name, isDirectory)
        }
        for raw in result.commonPrefixes {
            sawAnything = true
            guard let decoded = Self.decodeListedKey(raw, encoded: result.urlEncoded), let (name, _) = child(decoded) else { continue }
            add(RemoteEntry(path: StorePath(validated: directory.components + [name]), kind: .directory, size: 0, modified: 0))
        }
        for object in result.objects {
            sawAnything = true
            guard let decoded = Self.decodeListedKey(object.key, encoded: result.urlEncoded) else {
                logger.warning("skipping a key that does not decode to UTF-8", metadata: ["directory": "\(directory)"])
                continue
            }
            if decoded.utf8.elementsEqual(listedPrefix.utf8) { continue }  // the directory's own marker
            guard let (name, isDirectory) = child(decoded) else { continue }
            let path = StorePath(validated: directory.components + [name])
            if isDirectory {
                add(RemoteEntry(path: path, kind: .directory, size: 0, modified: object.lastModified ?? 0))
            } else {
                add(RemoteEntry(path: path, kind: .file, size: max(0, object.size), modified: object.lastModified ?? 0,
                                etag: object.etag.map(Self.normalizedETag)))
            }
        }
        let next = result.isTruncated ? result.nextContinuationToken.map(PageToken.init) : nil
        if result.isTruncated, next == nil { throw .protocolError("LIST \(directory): truncated without a continuation token") }
        if page == nil, !sawAnything, next == nil, !directory.isRoot {
            // Nothing below `dir/`: a file, or nothing at all.
            if try await headObject(directory) != nil { throw .notADirectory(directory) }
            throw .notFound(directory)
        }
        return ListPage(entries: order.compactMap { byName[$0] }, next: next)
    }

    // MARK: - stat

    public func stat(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        if path.isRoot {
            // The root exists when the bucket does (and we may list it).
            _ = try await listObjects(prefix: prefix, delimiter: "/", maxKeys: 1, continuation: nil, path: path)
            return RemoteEntry(path: path, kind: .directory, size: 0, modified: 0)
        }
        if let file = try await headObject(path) { return file }
        let directory = try await directoryExists(path)
        guard directory.exists else { throw .notFound(path) }
        return RemoteEntry(path: path, kind: .directory, size: 0, modified: directory.modified ?? 0)
    }

    /// The entry at `path`, or nil when there is none.
    func statIfExists(_ path: StorePath) async throws(StoreError) -> RemoteEntry? {
        do {
            return try await stat(path)
        } catch .notFound {
            return nil
        }
    }

    // MARK: - read

    @discardableResult
    public func read(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .isADirectory(path) }
        if let range, range.isEmpty || range.lowerBound < 0 {
            let entry = try await stat(path)
            if entry.kind == .directory { throw .isADirectory(path) }
            if let ifMatch, let etag = entry.etag, !Self.sameVersion(etag, ifMatch) { throw .versionMismatch(path) }
            return entry
        }
        var call = Call(method: .GET, key: key(path))
        if let range { call.headers.append(("Range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")) }
        if let ifMatch { call.headers.append(("If-Match", ifMatch.value)) }
        let response = try await start(call, path: path, timeout: Self.downloadHeadTimeout)
        let status = Int(response.status.code)
        switch status {
        case 200, 206: break
        case 416:
            // The range starts at or after the end: nothing to deliver.
            await HTTPTransport.discard(response)
            let entry = try await stat(path)
            if let ifMatch, let etag = entry.etag, !Self.sameVersion(etag, ifMatch) { throw .versionMismatch(path) }
            return entry
        default:
            let answer = await HTTPTransport.Answer(consuming: response)
            let mapped = error(answer, method: "GET", path: path)
            if case .notFound = mapped, S3XML.parseError(answer.body)?.code != "NoSuchBucket",
               try await directoryExists(path).exists {
                throw .isADirectory(path)
            }
            throw mapped
        }
        let headerETag = response.headers.first(name: "ETag").map(Self.normalizedETag)
        if let ifMatch, let headerETag, !Self.sameVersion(headerETag, ifMatch) {
            // The server ignored If-Match; we do not.
            await HTTPTransport.discard(response)
            throw .versionMismatch(path)
        }
        let modified = response.headers.first(name: "Last-Modified").flatMap(WebDAVDate.parse) ?? 0
        let delivered = try await RangedBody.deliver(response, range: range, path: path, into: sink)
        var size = delivered.end
        if let totalSize = delivered.totalSize {
            size = totalSize
        } else if range != nil {
            size = try await stat(path).size
        }
        return RemoteEntry(path: path, kind: .file, size: size, modified: S3Metadata.modified(in: response.headers) ?? modified,
                           etag: headerETag, mode: S3Metadata.mode(in: response.headers))
    }

    // MARK: - write

    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry {
        try await write(path, fromLocalFile: localFile, condition: condition, attributes: StoreAttributes())
    }

    /// Mode and times travel with the content as object metadata: no second request.
    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .isADirectory(path) }
        let file = try LocalFileChunks(path: localFile)
        let metadata = S3Metadata.headers(for: attributes)

        // What S3 does not check for us: a directory at the path, a missing parent; and the
        // condition, for servers that ignore conditional headers (see the top of the file).
        async let isDirectory = Self.catching { () throws(StoreError) in try await self.directoryExists(path).exists }
        async let parentExists = Self.catching { () throws(StoreError) in try await self.directoryExists(path.parent ?? .root).exists }
        async let current = Self.catching { () throws(StoreError) -> RemoteEntry? in
            condition == .always ? nil : try await self.headObject(path)
        }
        if try await isDirectory.get() { throw .isADirectory(path) }
        if try await !parentExists.get() { throw .notFound(path.parent ?? .root) }
        let existing = try await current.get()
        var conditionHeaders: [(name: String, value: String)] = []
        switch condition {
        case .always: break
        case .mustNotExist:
            if existing != nil { throw .alreadyExists(path) }
            conditionHeaders.append(("If-None-Match", "*"))
        case .ifMatch(let etag):
            guard let existing, let currentETag = existing.etag, Self.sameVersion(currentETag, etag) else { throw .versionMismatch(path) }
            conditionHeaders.append(("If-Match", etag.value))
        }

        let etag: ETag
        if file.size < Int64(configuration.partSize) {
            etag = try await putObject(path, file: file, conditionHeaders: conditionHeaders, metadata: metadata, condition: condition)
        } else {
            etag = try await uploadMultipart(path, file: file, conditionHeaders: conditionHeaders, metadata: metadata, condition: condition)
        }
        return RemoteEntry(path: path, kind: .file, size: file.size, modified: attributes.modified?.seconds ?? Date().timeIntervalSince1970,
                           etag: etag, mode: attributes.mode)
    }

    /// The error of a refused conditional write.
    static func conditionError(_ condition: WriteCondition, path: StorePath) -> StoreError {
        if case .mustNotExist = condition { return .alreadyExists(path) }
        return .versionMismatch(path)
    }

    private func putObject(_ path: StorePath, file: LocalFileChunks, conditionHeaders: [(name: String, value: String)],
                           metadata: [(name: String, value: String)], condition: WriteCondition) async throws(StoreError) -> ETag {
        var call = Call(method: .PUT, key: key(path), headers: conditionHeaders + metadata, payloadHash: SigV4Signer.unsignedPayload)
        call.headers.append(("Content-Type", "application/octet-stream"))
        let answer = try await send(call, path: path, body: .stream(file, length: .known(file.size)), timeout: Self.uploadTimeout)
        switch answer.status {
        case 200, 201, 204: break
        case 412, 409: throw Self.conditionError(condition, path: path)
        case 404 where condition != .always && S3XML.parseError(answer.body)?.code == "NoSuchKey":
            throw .versionMismatch(path)  // If-Match on a key that is gone
        default: throw error(answer, method: "PUT", path: path)
        }
        guard let etag = answer.headers.first(name: "ETag") else { throw .protocolError("PUT \(path): no ETag in the answer") }
        return Self.normalizedETag(etag)
    }

    /// Runs a typed-throwing call as a Result, for `async let`.
    static func catching<T: Sendable>(_ body: @Sendable () async throws(StoreError) -> T) async -> Result<T, StoreError> {
        do {
            return .success(try await body())
        } catch {
            return .failure(error)
        }
    }

    // MARK: - makeDirectory

    public func makeDirectory(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .alreadyExists(path) }
        if let parent = path.parent, !parent.isRoot, try await !directoryExists(parent).exists { throw .notFound(parent) }
        if try await headObject(path) != nil { throw .alreadyExists(path) }
        if try await directoryExists(path).exists { throw .alreadyExists(path) }
        try await putDirectoryMarker(directoryPrefix(path), path: path, onlyIfAbsent: true)
        return RemoteEntry(path: path, kind: .directory, size: 0, modified: Date().timeIntervalSince1970)
    }

    /// Mode and mtime as object metadata (s3fs's keys). S3 cannot change an object's metadata in
    /// place: the object is copied onto itself with the metadata replaced (its other user
    /// metadata kept). Directories without a marker object, and objects above CopyObject's 5 GiB,
    /// keep their attributes in docfs's catalog only.
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool {
        guard !attributes.isEmpty, !path.isRoot else { return false }
        let head = try await send(Call(method: .HEAD, key: key(path)), path: path)
        guard head.status == 200 else {
            if head.status == 404 { return false }
            throw error(head, method: "HEAD", path: path)
        }
        let size = head.headers.first(name: "Content-Length").flatMap { Int64($0) } ?? 0
        guard size <= Int64(Configuration.maximumPartSize) else { return false }
        var metadata = S3Metadata.userMetadata(in: head.headers)
        // A link stays a link (s3fs's mode carries the type).
        let replaced = S3Metadata.headers(for: attributes, type: S3Metadata.type(in: head.headers) ?? .regular)
        metadata.removeAll { old in replaced.contains { $0.name == old.name } }
        var call = Call(method: .PUT, key: key(path))
        call.headers.append(("x-amz-copy-source", copySource(key(path))))
        call.headers.append(("x-amz-metadata-directive", "REPLACE"))
        call.headers.append(("Content-Type", head.headers.first(name: "Content-Type") ?? "application/octet-stream"))
        call.headers += metadata + replaced
        let answer = try await send(call, path: path, timeout: Self.uploadTimeout)
        guard answer.status == 200, S3XML.parseError(answer.body) == nil else {
            throw error(answer, method: "COPY", path: path)
        }
        return true
    }

    /// Writes a zero-byte `dir/` marker. Markers are written, never copied: some servers
    /// (SeaweedFS) refuse CopyObject of a marker with NoSuchKey although HEAD finds it.
    func putDirectoryMarker(_ key: String, path: StorePath, onlyIfAbsent: Bool) async throws(StoreError) {
        var call = Call(method: .PUT, key: key)
        if onlyIfAbsent { call.headers.append(("If-None-Match", "*")) }
        call.headers.append(("Content-Type", "application/x-directory"))
        let answer = try await send(call, path: path, body: .bytes(ByteBuffer()))
        switch answer.status {
        case 200, 201, 204: break
        case 412, 409: throw .alreadyExists(path)
        default: throw error(answer, method: "PUT", path: path)
        }
    }

    // MARK: - delete

    public func delete(_ path: StorePath, isDirectory: Bool) async throws(StoreError) {
        guard !path.isRoot else { throw .accessDenied("refusing to delete the store's root") }
        if !isDirectory {
            guard try await headObject(path) != nil else {
                if try await directoryExists(path).exists { throw .isADirectory(path) }
                throw .notFound(path)
            }
            try await deleteKey(key(path), path: path)
            return
        }
        let marker = directoryPrefix(path)
        let below = try await listObjects(prefix: marker, delimiter: nil, maxKeys: 2, continuation: nil, path: path)
        let keys = below.objects.compactMap { Self.decodeListedKey($0.key, encoded: below.urlEncoded) }
        if keys.isEmpty, below.commonPrefixes.isEmpty {
            if try await headObject(path) != nil { throw .notADirectory(path) }
            throw .notFound(path)
        }
        guard keys.allSatisfy({ $0 == marker }), below.commonPrefixes.isEmpty else { throw .notEmpty(path) }
        try await deleteKey(marker, path: path)
    }

    /// DeleteObject (which succeeds for a missing key too).
    func deleteKey(_ key: String, path: StorePath) async throws(StoreError) {
        let answer = try await send(Call(method: .DELETE, key: key), path: path)
        switch answer.status {
        case 200, 202, 204, 404: return
        default: throw error(answer, method: "DELETE", path: path)
        }
    }

    // MARK: - move

    public func move(_ source: StorePath, to target: StorePath, replace: Bool) async throws(StoreError) -> RemoteEntry {
        guard !source.isRoot else { throw .accessDenied("refusing to move the store's root") }
        guard !target.isRoot else { throw .alreadyExists(target) }
        if source == target { return try await stat(source) }
        let sourceEntry = try await stat(source)
        if sourceEntry.kind == .directory, target.components.starts(with: source.components) {
            throw .invalidName("cannot move \(source) into itself (\(target))")
        }
        if let parent = target.parent, !parent.isRoot, try await !directoryExists(parent).exists { throw .notFound(parent) }
        if let existing = try await statIfExists(target) {
            guard replace else { throw .alreadyExists(target) }
            switch (sourceEntry.kind, existing.kind) {
            case (.directory, .directory):
                let below = try await listObjects(prefix: directoryPrefix(target), delimiter: nil, maxKeys: 2, continuation: nil, path: target)
                let keys = below.objects.compactMap { Self.decodeListedKey($0.key, encoded: below.urlEncoded) }
                guard keys.allSatisfy({ $0 == directoryPrefix(target) }), below.commonPrefixes.isEmpty else { throw .notEmpty(target) }
            case (.directory, _): throw .notADirectory(target)
            case (_, .directory): throw .isADirectory(target)
            default: break
            }
        }
        if sourceEntry.kind == .directory {
            try await moveDirectory(source, to: target)
        } else {
            try await copyObject(from: key(source), size: sourceEntry.size, to: key(target), path: source)
            try await deleteKey(key(source), path: source)
        }
        return try await stat(target)
    }

    /// Copies every key below `source/` to the same name below `target/`, then deletes the
    /// sources. Not atomic (see the top of the file); the sources go only once all copies exist.
    private func moveDirectory(_ source: StorePath, to target: StorePath) async throws(StoreError) {
        let from = directoryPrefix(source)
        let to = directoryPrefix(target)
        var copied: [String] = []
        var token: String?
        repeat {
            let page = try await listObjects(prefix: from, delimiter: nil, maxKeys: 1000, continuation: token, path: source)
            var batch: [(key: String, size: Int64)] = []
            for object in page.objects {
                guard let key = Self.decodeListedKey(object.key, encoded: page.urlEncoded), key.utf8.starts(with: from.utf8) else {
                    throw .protocolError("LIST \(source): a key that does not decode or lies outside the directory")
                }
                batch.append((key, object.size))
            }
            try await forEachConcurrently(batch) { (item) throws(StoreError) in
                let rest = Self.dropping(from, from: item.key)
                if item.key.hasSuffix("/") && item.size == 0 {
                    try await self.putDirectoryMarker(to + rest, path: target, onlyIfAbsent: false)
                } else {
                    try await self.copyObject(from: item.key, size: item.size, to: to + rest, path: source)
                }
            }
            copied += batch.map(\.key)
            token = page.isTruncated ? page.nextContinuationToken : nil
        } while token != nil
        try await forEachConcurrently(copied.map { (key: $0, size: Int64(0)) }) { (item) throws(StoreError) in
            try await self.deleteKey(item.key, path: source)
        }
    }

    /// CopyObject, or a multipart copy for objects above 5 GiB (CopyObject's limit).
    func copyObject(from sourceKey: String, size: Int64, to targetKey: String, path: StorePath) async throws(StoreError) {
        if size > Int64(Configuration.maximumPartSize) {
            try await copyMultipart(from: sourceKey, size: size, to: targetKey, path: path)
            return
        }
        var call = Call(method: .PUT, key: targetKey)
        call.headers.append(("x-amz-copy-source", copySource(sourceKey)))
        let answer = try await send(call, path: path, timeout: Self.uploadTimeout)
        // A copy can fail after its 200 has been sent: the body is then an <Error>.
        guard answer.status == 200, S3XML.parseError(answer.body) == nil else {
            throw error(answer, method: "COPY", path: path)
        }
    }

    /// `x-amz-copy-source`: `/bucket/key`, URL-encoded.
    func copySource(_ key: String) -> String {
        "/" + SigV4Signer.uriEncode(configuration.bucket, encodeSlash: true) + SigV4Signer.encodePath(key)
    }

    /// Runs `body` for each item, `configuration.concurrency` at a time; the first error wins and
    /// cancels the rest.
    func forEachConcurrently<Item: Sendable>(_ items: [Item], _ body: @escaping @Sendable (Item) async throws(StoreError) -> Void) async throws(StoreError) {
        guard !items.isEmpty else { return }
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var iterator = items.makeIterator()
                var running = 0
                while running < configuration.concurrency, let item = iterator.next() {
                    group.addTask { try await body(item) }
                    running += 1
                }
                while try await group.next() != nil {
                    if let item = iterator.next() { group.addTask { try await body(item) } }
                }
            }
        } catch {
            throw HTTPTransport.storeError(error, method: "BATCH", path: .root)
        }
    }
}
