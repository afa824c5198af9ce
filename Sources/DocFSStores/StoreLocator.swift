// StoreLocator: turns the store argument of the command line (a path or a URL) and the
// credential sources into a store. It owns the credential precedence — in the URL, else
// DOCFS_USER/DOCFS_PASSWORD, else a `--credentials` file that only its owner can read — and
// makes sure no credential reaches an identity, a log line or an error message.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
import Foundation
import Logging

public enum StoreLocator {
    /// The store for `argument`: a directory path or `file:///abs/path` (local), `http(s)://` or
    /// `webdav(s)://` (WebDAV). `credentialsFile` holds `user=…` and `password=…` lines.
    public static func store(for argument: String, credentialsFile: String?, environment: [String: String],
                             logger: Logger) throws(StoreLocatorError) -> any Store {
        let trimmed = argument.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { throw .emptyArgument }
        guard let schemeEnd = trimmed.range(of: "://") else {
            return try local(path: trimmed, logger: logger)
        }
        let scheme = trimmed[..<schemeEnd.lowerBound].lowercased()
        let rest = String(trimmed[schemeEnd.upperBound...])
        switch scheme {
        case "file":
            // file:///abs/path or file://localhost/abs/path
            var path = Substring(rest)
            if path.hasPrefix("localhost/") { path = path.dropFirst("localhost".count) }
            guard path.hasPrefix("/") else { throw .invalidURL(StoreURL.redacted(trimmed), reason: "a file URL needs an absolute path (file:///…)") }
            var decoded: [String] = []
            for segment in path.split(separator: "/", omittingEmptySubsequences: false) {
                guard let part = PercentEncoding.decode(segment) else {
                    throw .invalidURL(StoreURL.redacted(trimmed), reason: "the path is not valid UTF-8 once decoded")
                }
                decoded.append(part)
            }
            return try local(path: decoded.joined(separator: "/"), logger: logger)
        case "http", "https", "webdav", "webdavs":
            let httpScheme = (scheme == "https" || scheme == "webdavs") ? "https" : "http"
            let url: StoreURL
            do {
                url = try StoreURL(httpScheme + "://" + rest)
            } catch {
                throw .invalidURL(StoreURL.redacted(trimmed), reason: "\(error)")
            }
            let credentials = try self.credentials(url: url, file: credentialsFile, environment: environment)
            // The store gets the URL without credentials; they travel separately.
            let bare = url.origin + "/" + url.components.map { PercentEncoding.encode($0) }.joined(separator: "/")
            do {
                return try WebDAVStore(baseURL: bare, username: credentials?.user, password: credentials?.password,
                                       timeouts: HTTPTimeouts.from(environment: environment), logger: logger,
                                       listingLimits: ListingLimits(environment: environment))
            } catch {
                throw .invalidURL(StoreURL.redacted(trimmed), reason: "\(error)")
            }
        case "s3":
            // Endpoint, region, path style, unsigned requests and part size come from the URL's
            // query or the environment (AWS_ENDPOINT_URL, AWS_REGION, DOCFS_S3_*), keys from the
            // AWS sources (S3CredentialResolver); none of it reaches a message.
            do {
                let configuration = try S3Store.Configuration.from(url: trimmed, environment: environment)
                return try S3Store(configuration: configuration, logger: logger)
            } catch {
                throw .invalidURL(StoreURL.redacted(trimmed), reason: "\(error)")
            }
        default:
            throw .unsupportedURL(StoreURL.redacted(trimmed))
        }
    }

    /// `argument` without the `user:password@` of a URL, as messages and argv may show it.
    public static func redacted(_ argument: String) -> String {
        StoreURL.redacted(argument)
    }

    /// Releases what a store holds (the HTTP client of a WebDAV store). Call once, when done with it.
    public static func shutdownIfNeeded(_ store: any Store) async {
        if let store = store as? WebDAVStore { await store.shutdown() }
        if let store = store as? S3Store { await store.shutdown() }
    }

    private static func local(path: String, logger: Logger) throws(StoreLocatorError) -> any Store {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: absolute, isDirectory: &isDirectory) else { throw .noSuchDirectory(absolute) }
        guard isDirectory.boolValue else { throw .notADirectory(absolute) }
        do {
            return try LocalDirectoryStore(root: absolute, logger: logger)
        } catch {
            throw .unusableDirectory(absolute, reason: "\(error)")
        }
    }

    struct Credentials: Equatable {
        var user: String
        var password: String
    }

    /// In the URL, else the environment, else the credentials file; nil when none is given.
    static func credentials(url: StoreURL, file: String?, environment: [String: String]) throws(StoreLocatorError) -> Credentials? {
        // A credentials file that others can read is refused even when another source wins:
        // the user asked for it, and should learn it is exposed.
        let fromFile = try file.map { (path) throws(StoreLocatorError) in try readCredentialsFile(path) }
        if let user = url.username {
            return Credentials(user: user, password: url.password ?? "")
        }
        let envUser = environment["DOCFS_USER"].flatMap { $0.isEmpty ? nil : $0 }
        let envPassword = environment["DOCFS_PASSWORD"]
        if let envUser {
            guard let envPassword else { throw .incompleteEnvironment("DOCFS_USER is set but DOCFS_PASSWORD is not") }
            return Credentials(user: envUser, password: envPassword)
        }
        if envPassword != nil, fromFile == nil { throw .incompleteEnvironment("DOCFS_PASSWORD is set but DOCFS_USER is not") }
        return fromFile
    }

    static func readCredentialsFile(_ path: String) throws(StoreLocatorError) -> Credentials {
        var info = stat()
        guard statFollowingLinks(path, &info) == 0 else {
            throw .credentialsFile(path, problem: String(cString: strerror(errno)))
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw .credentialsFile(path, problem: "not a regular file") }
        let mode = UInt32(info.st_mode) & 0o777
        guard mode & 0o077 == 0 else { throw .credentialsFileInsecure(path, mode: mode) }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw .credentialsFile(path, problem: "cannot be read as UTF-8 text")
        }
        var user: String?
        var password: String?
        for rawLine in text.split(whereSeparator: \.isNewline) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = String(line[line.index(after: equals)...])
            switch key {
            case "user", "username": user = value.trimmingCharacters(in: .whitespaces)
            case "password": password = value
            default: continue
            }
        }
        guard let user, !user.isEmpty else { throw .credentialsFile(path, problem: "no user= line") }
        guard let password else { throw .credentialsFile(path, problem: "no password= line") }
        return Credentials(user: user, password: password)
    }
}

/// Why the store argument or its credentials cannot be used. Messages are one line and carry no credential.
public enum StoreLocatorError: Error, Sendable, Equatable, CustomStringConvertible {
    case emptyArgument
    case noSuchDirectory(String)
    case notADirectory(String)
    case unusableDirectory(String, reason: String)
    case invalidURL(String, reason: String)
    case unsupportedURL(String)
    case credentialsFile(String, problem: String)
    case credentialsFileInsecure(String, mode: UInt32)
    case incompleteEnvironment(String)

    public var description: String {
        switch self {
        case .emptyArgument: return "no store given: pass a directory or a URL"
        case .noSuchDirectory(let path): return "store directory does not exist: \(path)"
        case .notADirectory(let path): return "store path is not a directory: \(path)"
        case .unusableDirectory(let path, let reason): return "cannot use store directory \(path): \(reason)"
        case .invalidURL(let url, let reason): return "invalid store URL \(url): \(reason)"
        case .unsupportedURL(let url): return "unsupported store URL: \(url) (use a directory, file://, http(s)://, webdav(s)://, s3://)"
        case .credentialsFile(let path, let problem): return "credentials file \(path): \(problem)"
        case .credentialsFileInsecure(let path, let mode):
            return "credentials file \(path) is readable by others (mode \(String(mode, radix: 8))); run: chmod 600 \(path)"
        case .incompleteEnvironment(let message): return "incomplete credentials in the environment: \(message)"
        }
    }
}
