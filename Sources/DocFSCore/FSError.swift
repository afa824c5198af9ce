import DocFSStore

/// Why an operation failed, in the core's terms; the FUSE adapter maps each case to one errno.
/// Only the local disk's own failures carry an errno (`local(errno:)`).
public enum FSError: Error, Sendable, Equatable, CustomStringConvertible {
    case notFound
    case notADirectory
    case isADirectory
    case notEmpty
    case exists
    case readOnly
    case accessDenied
    /// Not permitted on this kind of item or store (hard links, FIFOs).
    case notPermitted
    case invalidArgument
    case nameTooLong
    case notSupported
    /// Removed from the store while in use.
    case stale
    /// The caller may not fetch content that is not local (`--no-fetch-for`). Names the item.
    case fetchRefused(String)
    case noAttribute
    /// The caller's buffer is too small (xattr).
    case rangeTooSmall
    /// In use or holding changes (an eviction asked for now): the message says which.
    case busy(String)
    case storeUnreachable(String)
    case timedOut(String)
    /// ENOSPC and friends, with the OS's errno.
    case local(errno: Int32, String)
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
        // Another client holds it locked (WebDAV 423): in use elsewhere, not a failure.
        case .busy(status: 423, retryAfter: _, message: let m): self = .busy(m)
        case .serverError, .busy, .refused, .protocolError: self = .io(error.description)
        case .localIO(let e, let m): self = .local(errno: e, m)
        }
    }
}

extension Task where Failure == any Error {
    /// The task's value, its error as the core's own.
    var valueOrFSError: Success {
        get async throws(FSError) {
            do { return try await value } catch { throw (error as? FSError) ?? .io("\(error)") }
        }
    }
}
