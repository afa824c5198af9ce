import DocFSStore

/// Why a filesystem operation failed, in the core's terms. The FUSE adapter maps each case
/// to one errno in one table (`FSError+Errno.swift` there); the core names errno only for
/// the local disk's own failures (`local(errno:)`), which pass through as they are.
public enum FSError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound
    case notADirectory
    case isADirectory
    case notEmpty
    case exists
    case readOnly
    case accessDenied
    /// The operation is not permitted on this kind of item or store (hard links, FIFOs).
    case notPermitted
    case invalidArgument
    case nameTooLong
    case notSupported
    /// An item's identity is no longer valid (removed from the store while in use).
    case stale
    /// The content is not local and the caller may not have it fetched (a thumbnailer or
    /// indexer under `--no-fetch-for`): nothing was downloaded. The message names the item.
    case fetchRefused(String)
    /// The extended attribute does not exist.
    case noAttribute
    /// The caller's buffer is too small (xattr).
    case rangeTooSmall
    /// The item is in use or holds changes the store does not have (an eviction asked for
    /// now): the message says which.
    case busy(String)
    /// The store could not be reached.
    case storeUnreachable(String)
    /// The store did not answer in time.
    case timedOut(String)
    /// The local disk said no (ENOSPC and friends): carries the errno from the OS.
    case local(errno: Int32, String)
    /// Anything else that went wrong with the store: an I/O error for the caller.
    case io(String)

    public var description: String {
        switch self {
        case .notFound: return "no such item"
        case .notADirectory: return "not a directory"
        case .isADirectory: return "is a directory"
        case .notEmpty: return "directory not empty"
        case .exists: return "already exists"
        case .readOnly: return "read-only"
        case .accessDenied: return "access denied"
        case .notPermitted: return "operation not permitted"
        case .invalidArgument: return "invalid argument"
        case .nameTooLong: return "name too long"
        case .notSupported: return "not supported"
        case .stale: return "stale item"
        case .fetchRefused(let m): return "not local, and this process may not fetch it: \(m)"
        case .noAttribute: return "no such attribute"
        case .rangeTooSmall: return "buffer too small"
        case .busy(let m): return "busy: \(m)"
        case .storeUnreachable(let m): return "store unreachable: \(m)"
        case .timedOut(let m): return "store timed out: \(m)"
        case .local(let e, let m): return "local I/O error \(e): \(m)"
        case .io(let m): return "I/O error: \(m)"
        }
    }
}

extension FSError {
    /// The one place where a store's failure becomes a filesystem failure.
    public init(_ error: StoreError) {
        switch error {
        case .notFound: self = .notFound
        case .notADirectory: self = .notADirectory
        case .isADirectory: self = .isADirectory
        case .accessDenied: self = .accessDenied
        case .versionMismatch: self = .stale
        case .alreadyExists: self = .exists
        case .notEmpty: self = .notEmpty
        case .notSupported: self = .notSupported
        case .invalidName: self = .invalidArgument
        case .unreachable(let m): self = .storeUnreachable(m)
        case .timedOut(let m): self = .timedOut(m)
        case .refused(414, _): self = .nameTooLong
        case .serverError, .busy, .refused, .protocolError: self = .io(error.description)
        case .localIO(let e, let m): self = .local(errno: e, m)
        }
    }
}
