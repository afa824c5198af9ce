// WebDAVStore: the store protocol over WebDAV (RFC 4918), for Nextcloud, ownCloud, Apache,
// rclone serve and `docfs serve`. It owns the mapping of store calls onto HTTP methods and of
// HTTP statuses onto StoreError; the wire helpers live in WebDAVMultistatus.swift (XML, dates),
// PercentEncoding.swift, StoreURL.swift (base URLs) and ETag+HTTP.swift, the transport
// (timeouts, auth, error mapping) in HTTPClient+Store.swift.
//
// Paths: names are percent-encoded on the wire (every byte but `A-Za-z0-9-._~`), hrefs in
// answers are decoded and compared component by component with the requested collection, so
// servers that encode differently (or answer with absolute URLs) are understood, and a hostile
// name (`..`, `a%2Fb`) is skipped with a warning instead of escaping the collection.
//
// Credentials: sent as Basic auth on every request, never part of a URL, a log line or an error.

import AsyncHTTPClient
import DocFSStore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

public final class WebDAVStore: Store {
    public let identity: StoreIdentity
    /// `scheme://host[:port]`, without credentials.
    let origin: String
    /// The decoded components of the base URL's path: the store's root.
    let baseComponents: [String]
    let transport: HTTPTransport
    let logger: Logger
    /// Whether the server keeps docfs's dead properties (WebDAVDeadProperties.swift).
    let deadProperties = DeadPropertySupport()
    /// What a PROPFIND need not ask of this server (WebDAVStore+PropfindAsks.swift).
    let propfindAsks = PropfindAsks()
    /// Bounds of a listing, and the PROPFIND answers read page by page (WebDAVStore+Listing.swift).
    let listingLimits: ListingLimits
    let propfindListings = PropfindListings()
    /// Why this server cannot take streamed uploads, once it showed it (WebDAVStore+StreamedUpload.swift).
    let streamedUploadRefusal = Mutex<String?>(nil)
    /// The longest chunked PUT body the server was seen to keep whole (-1: none yet).
    let chunkedBodiesKeptWhole = Mutex<Int64>(-1)
    /// Where streamed uploads' temporary files are recorded until they are moved in place or
    /// deleted, once the mount gives a directory for it (`keepUnfinishedWork(in:)`).
    let uploadLedger = Mutex<UploadLedger<TemporaryUpload>?>(nil)
    /// Whether the server checks If-Match on PUT, once probed (WebDAVStore+ConditionalWrites.swift).
    let conditionProbe = ConditionProbe()
    /// UNLOCKs sent after their uploads returned (PendingUnlocks.swift).
    let pendingUnlocks = PendingUnlocks()
    public let uploadMeter: UploadMeter? = UploadMeter()
    /// Where this server gives versions, once its answers showed it (WebDAVStore+Versions.swift).
    let versionSources = VersionSources()
    /// Who hears what the store learns about its server (WebDAVStore+Traits.swift).
    let traitWatch = TraitWatch()
    /// A listing said `has-preview` in Nextcloud's namespace: previews come from its own
    /// endpoint (WebDAVStore+Previews.swift).
    let saidNextcloud = Atomic<Bool>(false)
    /// Folders this mount just made, and the names used in them since (KnownFolders.swift).
    let knownFolders = KnownFolders()

    /// Deadline of a metadata call (PROPFIND, MKCOL, DELETE, MOVE, HEAD), body included.
    static let metadataTimeout: TimeAmount = .seconds(30)
    // A download's response head must come within the transport's `timeouts.base`, its body
    // keep up with `timeouts.minimumRate`; an upload gets `base + size / minimumRate` until its
    // whole answer (HTTPTimeouts.swift).
    /// A whole metadata answer (Depth 0 PROPFIND, PROPPATCH) larger than this is refused;
    /// listings are read as they stream, bounded by `ListingLimits` instead.
    static let maximumMultistatusBytes = 256 * 1024 * 1024

    /// - Parameters:
    ///   - baseURL: `http(s)://host[:port]/path/`; credentials in it are taken out (and used when
    ///     `username` is nil).
    ///   - timeouts: connect, idle and transfer deadlines of every request.
    public init(baseURL: String, username: String? = nil, password: String? = nil, timeouts: HTTPTimeouts = .default,
                logger: Logger = Logger(label: "docfs.store.webdav"), listingLimits: ListingLimits = .standard) throws(StoreError) {
        self.listingLimits = listingLimits
        let parsed = try StoreURL(baseURL)
        self.origin = parsed.origin
        self.baseComponents = parsed.components
        let user = username ?? parsed.username
        let pass = password ?? parsed.password
        var authorization: String?
        if let user {
            authorization = "Basic " + Data("\(user):\(pass ?? "")".utf8).base64EncodedString()
        }
        self.transport = HTTPTransport(authorization: authorization, timeouts: timeouts, logger: logger)
        self.logger = logger
        let location = parsed.origin + "/" + parsed.components.map { PercentEncoding.encode($0) }.joined(separator: "/")
        self.identity = StoreIdentity(kind: "webdav", location: location)
    }

    /// Closes the HTTP client. Call once, when done with the store (a debug build traps if an
    /// HTTP client is released without it).
    public func shutdown() async {
        propfindListings.removeAll()
        await pendingUnlocks.settleAll()
        await transport.shutdown()
    }

    public var capabilities: StoreCapabilities {
        StoreCapabilities(canWrite: true, canRename: true, hasRangeReads: true, streamsUploads: true, previews: true)
    }

    /// The wire URL of `path` (a collection's ends with `/`).
    func url(_ path: StorePath, collection: Bool = false) -> String {
        let components = baseComponents + path.components
        var url = origin + "/" + components.map { PercentEncoding.encode($0) }.joined(separator: "/")
        if collection, !components.isEmpty { url += "/" }
        return url
    }

    // MARK: - list (WebDAVStore+Listing.swift)

    func entry(_ path: StorePath, _ response: WebDAVResponse) -> RemoteEntry {
        let etag = version(of: response)
        let size = response.isCollection ? 0 : max(0, response.contentLength ?? 0)
        // A special file is an empty resource marked so (WebDAVStore+SpecialFiles.swift).
        let special = size == 0 && !response.isCollection ? response.posix.special : nil
        if response.previewFromNextcloud, !saidNextcloud.load(ordering: .relaxed) { saidNextcloud.store(true, ordering: .relaxed) }
        propfindAsks.saw(response)
        return RemoteEntry(path: path,
                           kind: response.isCollection ? .directory : special.map { .special($0) } ?? .file,
                           size: response.isCollection ? 0 : max(0, response.contentLength ?? 0),
                           modified: response.posix.modified(forVersion: etag) ?? response.lastModified.flatMap(HTTPDate.parse) ?? 0,
                           etag: etag, mode: response.posix.mode,
                           hasPreview: !response.isCollection && special == nil && response.hasPreview)
    }

    /// ETags as `"…"` (or `W/"…"`): some servers send them unquoted in PROPFIND and quoted in
    /// headers. The one implementation, shared with S3, is in ETag+HTTP.swift.
    static func normalizedETag(_ raw: String) -> ETag { ETag.normalized(raw) }

    /// Two ETags name the same version (the weak marker aside); see ETag+HTTP.swift.
    static func sameVersion(_ a: ETag, _ b: ETag) -> Bool { ETag.sameVersion(a, b) }

    // MARK: - stat

    public func stat(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        guard let match = try await propfindItself(path, body: propfindBody()) else { return try await head(path) }
        if match.isLockNull { throw .notFound(path) }
        return entry(path, match)
    }

    /// What a Depth 0 PROPFIND asking `body` says of `path` itself; nil when the server has no
    /// PROPFIND there (405).
    func propfindItself(_ path: StorePath, body: String) async throws(StoreError) -> WebDAVResponse? {
        let answer = try await transport.metadata(.PROPFIND, url: url(path, collection: path.isRoot), path: path,
                                                  headers: ["Depth": "0", "Content-Type": "application/xml; charset=utf-8"],
                                                  body: .bytes(ByteBuffer(string: body)), timeout: Self.metadataTimeout)
        switch answer.status {
        case 207: break
        case 405: return nil
        default: throw answer.error(method: "PROPFIND", path: path)
        }
        let responses = try WebDAVMultistatus.parse(answer.body)
        let wanted = baseComponents + path.components
        let match = responses.first { PercentEncoding.decodedPathComponents(of: $0.href) == wanted }
            ?? (responses.count == 1 ? responses.first : nil)
        guard let match else { throw .protocolError("PROPFIND of \(path) did not describe it") }
        if let status = match.status, !(200..<300).contains(status) {
            if status == 404 { throw .notFound(path) }
            throw .protocolError("PROPFIND of \(path) answered status \(status)")
        }
        return match
    }

    /// The entry at `path`, or nil when there is none.
    func statIfExists(_ path: StorePath) async throws(StoreError) -> RemoteEntry? {
        do {
            return try await stat(path)
        } catch .notFound {
            return nil
        }
    }

    func head(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        let answer = try await transport.metadata(.HEAD, url: url(path), path: path, headers: [:], body: nil, timeout: Self.metadataTimeout)
        guard answer.status == 200 else { throw answer.error(method: "HEAD", path: path) }
        let size = answer.headers.first(name: "Content-Length").flatMap { Int64($0) } ?? 0
        return RemoteEntry(path: path, kind: .file, size: size,
                           modified: answer.headers.first(name: "Last-Modified").flatMap(HTTPDate.parse) ?? 0,
                           etag: version(answeredIn: answer.headers, size: size))
    }

    // MARK: - read

    @discardableResult
    public func read(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry {
        learn(from: ifMatch)
        if let range, range.isEmpty || range.lowerBound < 0 { return try await stat(path, asking: ifMatch) }
        if versionSources.getsWithoutVersion.withLock({ $0 }) {
            return try await readCheckedAround(path, range: range, ifMatch: ifMatch, into: sink)
        }
        guard let answer = try await startGET(path, range: range, conditions: ifMatch.map(Self.readConditions) ?? [:]) else {
            return try await stat(path, asking: ifMatch)
        }
        if let ifMatch, let answered = answer.version, !Self.sameVersion(answered, ifMatch) {
            // The server ignored the condition; we do not.
            await HTTPTransport.discard(answer.response)
            throw .versionMismatch(path)
        }
        if answer.version == nil, noteGetWithoutVersion() {
            // The first GET to show that this server's downloads name no version: nothing of
            // it is delivered, and the read is made again with the version asked around it.
            await HTTPTransport.discard(answer.response)
            logger.notice("the server's downloads carry no version: docfs asks for it with a PROPFIND before and after each")
            return try await readCheckedAround(path, range: range, ifMatch: ifMatch, into: sink)
        }
        let size = try await receive(answer, range: range, path: path, into: sink)
        return RemoteEntry(path: path, kind: .file, size: size, modified: answer.modified, etag: answer.version)
    }

    /// A GET's answer whose body is still to be read.
    struct StartedGET {
        var response: HTTPClientResponse
        /// The version the answer names, if any (WebDAVStore+Versions.swift).
        var version: ETag?
        var modified: Double
    }

    /// Sends a GET of `path` (of `range`, with `conditions`) and reads its head. Nil when the
    /// range starts at or after the end (416): nothing to deliver.
    func startGET(_ path: StorePath, range: ByteRange?, conditions: [String: String]) async throws(StoreError) -> StartedGET? {
        var headers = conditions
        if let range { headers["Range"] = "bytes=\(range.lowerBound)-\(range.upperBound - 1)" }
        let response = try await transport.start(.GET, url: url(path), path: path, headers: headers, body: nil,
                                                 timeout: transport.metadataTimeout)
        let status = Int(response.status.code)
        switch status {
        case 200, 206: break
        case 412:
            await HTTPTransport.discard(response)
            throw .versionMismatch(path)
        case 416:
            await HTTPTransport.discard(response)
            return nil
        default:
            let answer = await HTTPTransport.Answer(consuming: response)
            throw answer.error(method: "GET", path: path)
        }
        if let encoding = response.headers.first(name: "Content-Encoding"), encoding.lowercased() != "identity" {
            await HTTPTransport.discard(response)
            throw .protocolError("GET \(path): unexpected Content-Encoding \(encoding)")
        }
        return StartedGET(response: response,
                          version: version(answeredIn: response.headers, size: Self.fileSize(answeredIn: response.headers, status: status)),
                          modified: response.headers.first(name: "Last-Modified").flatMap(HTTPDate.parse) ?? 0)
    }

    /// Reads a started GET's body into `sink`; returns the file's size.
    func receive(_ answer: StartedGET, range: ByteRange?, path: StorePath, into sink: any ContentSink) async throws(StoreError) -> Int64 {
        try await RangedBody.receive(answer.response, range: range, path: path, into: sink, timeouts: transport.timeouts) { () async throws(StoreError) in
            try await self.stat(path)
        }
    }

    /// The entry at `path`, which must be at version `wanted` when one is given.
    func stat(_ path: StorePath, asking wanted: ETag?) async throws(StoreError) -> RemoteEntry {
        let entry = try await stat(path)
        if let wanted, let etag = entry.etag, !Self.sameVersion(etag, wanted) { throw .versionMismatch(path) }
        return entry
    }

    // MARK: - write

    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry {
        try await upload(path, fromLocalFile: localFile, condition: condition, then: nil as (@Sendable (ETag?, [String: String]) async throws(StoreError) -> Bool)?).entry
    }

    /// The PUT of `localFile` under `condition`; then `attributes`, given the version the PUT
    /// made and the headers of the same write (a lock's token: another client's lock taken
    /// between the two must not fail an upload whose content landed). Returns the entry as the
    /// PUT left it and what `attributes` returned.
    func upload<A: Sendable>(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition,
                             then attributes: (@Sendable (ETag?, [String: String]) async throws(StoreError) -> A)?)
        async throws(StoreError) -> (entry: RemoteEntry, attributes: A?) {
        guard !path.isRoot else { throw .isADirectory(path) }
        knownFolders.used(path)
        if case .ifMatch(let version) = condition { learn(from: version) }
        let file = try LocalFileChunks(path: localFile, meter: uploadMeter)
        if condition == .mustNotExist, await createsByMoving(near: path) {
            let entry = try await putThenMove(path, replace: false) { (temporary) throws(StoreError) in
                let answer = try await transport.metadata(.PUT, url: url(temporary), path: temporary, headers: [:],
                                                          body: .stream(file, length: .known(file.size)),
                                                          timeout: transport.uploadTimeout(bytes: file.size))
                try await checkPUT(answer, temporary, .always)
            }
            return (entry, try await attributes?(entry.etag, [:]))
        }
        return try await underCondition(path, condition, bytes: file.size) { (headers) throws(StoreError) in
            let body = HTTPClientRequest.Body.stream(file, length: .known(file.size))
            let answer = try await transport.metadata(.PUT, url: url(path), path: path, headers: headers, body: body,
                                                      timeout: transport.uploadTimeout(bytes: file.size))
            try await checkPUT(answer, path, condition)
            let entry = try await entry(afterPUT: answer, path, size: file.size)
            return (entry, try await attributes?(entry.etag, headers.filter { $0.key == "If" }))
        }
    }

    /// The entry a PUT made: from its answer's version where it names one, else asked for.
    private func entry(afterPUT answer: HTTPTransport.Answer, _ path: StorePath, size: Int64) async throws(StoreError) -> RemoteEntry {
        guard let etag = version(answeredIn: answer.headers, size: size) else { return try await stat(path) }
        let modified = answer.headers.first(name: "Last-Modified").flatMap(HTTPDate.parse) ?? Date().timeIntervalSince1970
        return RemoteEntry(path: path, kind: .file, size: size, modified: modified, etag: etag)
    }

    /// What a PUT's status means.
    func checkPUT(_ answer: HTTPTransport.Answer, _ path: StorePath, _ condition: WriteCondition) async throws(StoreError) {
        switch answer.status {
        case 200, 201, 204: break
        case 207:
            // A status per resource, no write: Apache's answer when the lock named in `If` is
            // one its lock database lost meanwhile. Not a refusal: tried again.
            throw .busy(status: 207, retryAfter: nil, message: "PUT \(path): the server answered 207 (a lock it lost)")
        case 412:
            if case .mustNotExist = condition { throw .alreadyExists(path) }
            throw .versionMismatch(path)
        case 404, 405, 409:
            // A collection at the path, or no parent: say which.
            if let existing = try? await stat(path), existing.kind == .directory { throw .isADirectory(path) }
            if answer.status == 405 { throw answer.error(method: "PUT", path: path) }
            throw .notFound(path.parent ?? .root)
        default: throw answer.error(method: "PUT", path: path)
        }
    }

    // MARK: - makeDirectory

    public func makeDirectory(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .alreadyExists(path) }
        // Some servers (rclone's) answer 201 to MKCOL of an existing collection: look first,
        // unless the folder was made here a moment ago and this mount never used the name.
        if !knownFolders.isFresh(path), try await statIfExists(path) != nil { throw .alreadyExists(path) }
        let answer = try await transport.metadata(.MKCOL, url: url(path, collection: true), path: path, headers: [:], body: nil,
                                                  timeout: Self.metadataTimeout)
        switch answer.status {
        case 200, 201, 204: break
        case 405: throw .alreadyExists(path)
        case 409: throw .notFound(path.parent ?? .root)
        case 415: throw .notSupported("MKCOL with a body")
        default: throw answer.error(method: "MKCOL", path: path)
        }
        knownFolders.madeFolder(path)
        // Not asked back: a new folder's time is now, and a folder has no version to keep.
        return RemoteEntry(path: path, kind: .directory, size: 0, modified: Date().timeIntervalSince1970)
    }

    // MARK: - delete

    public func delete(_ path: StorePath, isDirectory: Bool) async throws(StoreError) {
        guard !path.isRoot else { throw .accessDenied("refusing to delete the store's root") }
        knownFolders.forget(path)
        // WebDAV DELETE of a collection is recursive: check first, so that neither an rmdir nor an
        // unlink that meets a directory can remove a tree.
        if isDirectory {
            let listing = try await propfindChildren(path)
            if !listing.children.isEmpty || listing.skipped > 0 { throw .notEmpty(path) }
        } else {
            let entry = try await stat(path)
            if entry.kind == .directory { throw .isADirectory(path) }
        }
        await pendingUnlocks.settle(path)
        let answer = try await transport.metadata(.DELETE, url: url(path, collection: isDirectory), path: path, headers: [:], body: nil,
                                                  timeout: Self.metadataTimeout)
        switch answer.status {
        case 200, 202, 204: return
        default: throw answer.error(method: "DELETE", path: path)
        }
    }

    // MARK: - move

    public func move(_ source: StorePath, to target: StorePath, replace: Bool) async throws(StoreError) -> RemoteEntry {
        try await move(source, to: target, replace: replace, isDirectory: (try await stat(source)).kind == .directory)
    }

    /// A folder is moved by its collection URLs, both ending in `/`: nginx refuses the move of
    /// `/d1` (400) and lighttpd redirects it (308), where every server takes `/d1/` to `/d2/`.
    public func move(_ source: StorePath, to target: StorePath, replace: Bool, isDirectory: Bool) async throws(StoreError) -> RemoteEntry {
        guard !source.isRoot else { throw .accessDenied("refusing to move the store's root") }
        guard !target.isRoot else { throw .alreadyExists(target) }
        knownFolders.used(target)
        knownFolders.forget(source)
        // A folder made here, replaced: no name in it is known to be free any more.
        if replace { knownFolders.forget(target) }
        if replace {
            // `Overwrite: T` deletes a target collection with all it holds; rename(2) would not.
            if let existing = try await statIfExists(target), existing.kind == .directory {
                let sourceEntry = try await stat(source)
                if sourceEntry.kind != .directory { throw .isADirectory(target) }
                let listing = try await propfindChildren(target)
                if !listing.children.isEmpty || listing.skipped > 0 { throw .notEmpty(target) }
            }
        }
        await pendingUnlocks.settle(source, target)
        let headers = ["Destination": url(target, collection: isDirectory), "Overwrite": replace ? "T" : "F"]
        let answer = try await transport.metadata(.MOVE, url: url(source, collection: isDirectory), path: source, headers: headers, body: nil,
                                                  timeout: Self.metadataTimeout)
        switch answer.status {
        case 200, 201, 204: break
        case 412: throw .alreadyExists(target)
        case 404: throw .notFound(source)
        case 409: throw .notFound(target.parent ?? .root)
        case 403:
            // Some servers (rclone's) say 403 when the source or the target's parent is missing.
            if try await statIfExists(source) == nil { throw .notFound(source) }
            if let parent = target.parent, try await statIfExists(parent) == nil { throw .notFound(parent) }
            throw answer.error(method: "MOVE", path: source)
        default: throw answer.error(method: "MOVE", path: source)
        }
        return try await stat(target)
    }
}

/// `Content-Range: bytes first-last/total` (total may be `*`).
struct ContentRange {
    var first: Int64
    var last: Int64
    var total: Int64?

    init?(_ header: String) {
        let value = header.trimmingCharacters(in: .whitespaces)
        guard value.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = value.dropFirst(6).trimmingCharacters(in: .whitespaces)
        let halves = spec.split(separator: "/", maxSplits: 1)
        guard halves.count == 2 else { return nil }
        let bounds = halves[0].split(separator: "-", maxSplits: 1)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first <= last else { return nil }
        self.first = first
        self.last = last
        self.total = halves[1] == "*" ? nil : Int64(halves[1])
    }
}
