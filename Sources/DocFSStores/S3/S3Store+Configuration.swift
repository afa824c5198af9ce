// S3Store+Configuration: what an S3 store is told — bucket, prefix, region, endpoint,
// addressing style, signing, part size, concurrency, links — and how an `s3://bucket/prefix`
// URL, its query options, the environment and the AWS config files become that configuration.

import DocFSStore
import Foundation

extension S3Store {
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
        /// Connect, idle and transfer deadlines of every request (`DOCFS_*_TIMEOUT`, HTTPTimeouts.swift).
        public var timeouts: HTTPTimeouts = .default
        /// How far a listing is followed (`DOCFS_MAX_LISTING_ENTRIES`; S3Store+Listing.swift).
        public var listingLimits = ListingLimits.standard

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
                    let name = (PercentEncoding.decode(parts[0]) ?? String(parts[0])).lowercased().replacingOccurrences(of: "_", with: "-")
                    let value = parts.count > 1 ? (PercentEncoding.decode(parts[1]) ?? String(parts[1])) : "1"
                    options[name] = value
                }
                rest = rest[..<question]
            }
            let slash = rest.firstIndex(of: "/") ?? rest.endIndex
            let bucket = String(rest[..<slash])
            guard !bucket.isEmpty else { throw .invalidName("an s3:// URL needs a bucket: s3://bucket/prefix") }
            var components: [String] = []
            for segment in rest[slash...].split(separator: "/", omittingEmptySubsequences: true) {
                guard let name = PercentEncoding.decode(segment), StorePath.isValidName(name) else {
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
            configuration.listingLimits = ListingLimits(environment: environment)
            configuration.timeouts = try HTTPTimeouts.from(environment: environment)
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
}
