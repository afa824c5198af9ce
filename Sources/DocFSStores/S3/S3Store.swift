// S3Store: the store protocol over the S3 REST API, for AWS S3 and S3-compatible servers
// (MinIO, SeaweedFS, Ceph RGW, R2, moto). This file owns the store itself: its configuration
// checked and its addressing worked out once, its identity and capabilities, and the mapping
// of store paths onto keys. The rest is split by concern:
//   S3Store+Configuration.swift  the configuration, and `s3://` URLs into one
//   S3Store+Requests.swift       one call: wire form, signature, sending; many calls at once
//   S3Store+Errors.swift         S3 error codes onto StoreError
//   S3Store+Listing.swift        directories on a flat namespace, ListObjectsV2 pages
//   S3Store+Stat.swift           what one path is (HEAD), an object's entry and version
//   S3Store+Reading.swift        content, whole or a range
//   S3Store+Writing.swift        content and attributes going up, conditional writes
//   S3Store+Namespace.swift      mkdir, delete, move (not atomic on S3)
//   S3Store+Symlinks.swift       links the way s3fs writes them
//   S3Multipart.swift            multipart uploads and copies above 5 GiB
//   S3Store+UploadLedger.swift   multipart uploads under way, recorded so a crash's are aborted
// Signing lives in SigV4Signer.swift, credentials in S3Credentials.swift, XML in
// S3ListParser.swift, object metadata in S3Metadata.swift; the HTTP transport (client,
// timeouts, transport errors) is the one WebDAVStore uses, from HTTPClient+Store.swift.
//
// Credentials: signed into each request; never part of a URL, a log line, an error or the
// identity. Logs name the operation and the store path, never a URL or a header.

import AsyncHTTPClient
import DocFSStore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

public final class S3Store: Store {
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
    /// Where multipart uploads under way are recorded, once the mount gives a directory for it
    /// (`keepUnfinishedWork(in:)`).
    let uploadLedger = Mutex<UploadLedger<MultipartRecord>?>(nil)
    /// Folders seen to exist a moment ago (S3Store+KnownFolders.swift).
    let knownFolders = KnownFolders()
    public let uploadMeter: UploadMeter? = UploadMeter()

    static let metadataTimeout: TimeAmount = .seconds(30)
    /// A server-side copy (CopyObject, UploadPartCopy) until its whole answer: no bytes pass
    /// through us, the server keeps the connection busy (whitespace) while it copies, and the
    /// transport's idle timeout ends a copy whose server went quiet.
    static let serverSideCopyTimeout: TimeAmount = .hours(24)
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
            let parsed = try StoreURL(endpoint)
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
        self.transport = HTTPTransport(authorization: nil, timeouts: configuration.timeouts, logger: logger)
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
                          symlinkDiscovery: configuration.symlinks ? .byStat(maximumTargetBytes: Self.maximumLinkTargetBytes) : .inListings,
                          looksUpByStat: true, streamsUploads: true, renamesByCopying: true, keepsFolderAttributes: false)
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
}
