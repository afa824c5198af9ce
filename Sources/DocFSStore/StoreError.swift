/// Why a store call failed, in the store's terms. The core maps these to its own errors.
///
/// Three classes, which callers may rely on:
/// - `isTransient` (unreachable, timedOut, serverError, busy): the same call may succeed when
///   tried again; `retryAfter` says when, if the store said (HTTP `Retry-After`).
/// - `isPermanent` (accessDenied, notSupported, invalidName, refused, protocolError): the store
///   has refused this call and will refuse it again unchanged; trying it again (an upload every
///   few seconds) only repeats the failure. The caller should stop and report it.
/// - neither (notFound, notADirectory, isADirectory, versionMismatch, alreadyExists, notEmpty,
///   localIO): a fact about the store's namespace or the local disk that the caller acts on
///   (make the missing folder, keep a conflict copy, free space) before it tries again.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The entry does not exist (HTTP 404, ENOENT, NoSuchKey).
    case notFound(StorePath)
    /// A path component is not a directory, or a listing was asked of a file.
    case notADirectory(StorePath)
    /// A file operation was asked of a directory.
    case isADirectory(StorePath)
    /// The store refuses us (HTTP 401/403, EACCES, AccessDenied).
    case accessDenied(String)
    /// The content's version is not the one asked for (If-Match failed, 412).
    case versionMismatch(StorePath)
    /// The entry exists already (If-None-Match failed, MKCOL on an existing collection).
    case alreadyExists(StorePath)
    /// A directory that must be empty is not.
    case notEmpty(StorePath)
    /// The store cannot do this (no write support, 405/501).
    case notSupported(String)
    /// A name the store sent, or was asked for, is not a safe file name.
    case invalidName(String)
    /// Could not reach the store at all (connection refused, DNS, TLS).
    case unreachable(String)
    /// The call took longer than its deadline.
    case timedOut(String)
    /// The store answered, but with a server-side error (HTTP 5xx).
    case serverError(status: Int, message: String)
    /// The store asks us to come back later (HTTP 429, a 5xx with `Retry-After`, S3 SlowDown);
    /// `retryAfter` is the wait it asked for (already capped by the store to a sane maximum), if any.
    case busy(status: Int, retryAfter: Duration?, message: String)
    /// The store refuses this request as it is and will refuse it again unchanged (HTTP 400,
    /// 409, 411, 413, 414, 422, 431; S3 EntityTooLarge, KeyTooLongError, InvalidArgument).
    case refused(status: Int, message: String)
    /// The store answered something we cannot understand.
    case protocolError(String)
    /// Writing fetched bytes to the local sink failed (disk full: `errno` says).
    case localIO(errno: Int32, message: String)

    /// Whether trying the same call again may succeed.
    public var isTransient: Bool {
        switch self {
        case .unreachable, .timedOut, .serverError, .busy: return true
        default: return false
        }
    }

    /// Whether the store refused the call for good: trying it again unchanged fails the same way.
    public var isPermanent: Bool {
        switch self {
        case .accessDenied, .notSupported, .invalidName, .refused, .protocolError: return true
        default: return false
        }
    }

    /// How long the store asked us to wait before trying again (`Retry-After`), if it said.
    public var retryAfter: Duration? {
        if case .busy(_, let retryAfter, _) = self { return retryAfter }
        return nil
    }

    public var description: String {
        switch self {
        case .notFound(let p): return "not found: \(p)"
        case .notADirectory(let p): return "not a directory: \(p)"
        case .isADirectory(let p): return "is a directory: \(p)"
        case .accessDenied(let m): return "access denied: \(m)"
        case .versionMismatch(let p): return "changed on the store: \(p)"
        case .alreadyExists(let p): return "already exists: \(p)"
        case .notEmpty(let p): return "directory not empty: \(p)"
        case .notSupported(let m): return "not supported by the store: \(m)"
        case .invalidName(let n): return "unsafe name from the store: \(n.debugDescription)"
        case .unreachable(let m): return "store unreachable: \(m)"
        case .timedOut(let m): return "store timed out: \(m)"
        case .serverError(let s, let m): return "store error \(s): \(m)"
        case .busy(let s, let r, let m):
            return "store busy (\(s)\(r.map { ", retry after \($0.components.seconds) s" } ?? "")): \(m)"
        case .refused(let s, let m): return "store refused the request (\(s)): \(m)"
        case .protocolError(let m): return "unexpected answer from the store: \(m)"
        case .localIO(let e, let m): return "local write failed (errno \(e)): \(m)"
        }
    }
}
