import DocFSCore
import Glibc

/// The one table that turns the core's errors into what a process sees from a syscall.
extension FSError {
    var errno: Int32 {
        switch self {
        case .notFound: return ENOENT
        case .notADirectory: return ENOTDIR
        case .isADirectory: return EISDIR
        case .notEmpty: return ENOTEMPTY
        case .exists: return EEXIST
        case .readOnly: return EROFS
        case .accessDenied: return EACCES
        case .notPermitted: return EPERM
        case .invalidArgument: return EINVAL
        case .nameTooLong: return ENAMETOOLONG
        case .notSupported: return EOPNOTSUPP
        case .stale: return ESTALE
        // What Windows' cloud files API answers a process blocked from hydrating (access
        // denied): open(2) documents EACCES, so every caller treats it as "cannot read this
        // file" and moves on; EAGAIN or EINTR would invite retries, EIO looks like a bad disk.
        case .fetchRefused: return EACCES
        case .noAttribute: return ENODATA
        case .rangeTooSmall: return ERANGE
        case .busy: return EBUSY
        case .storeUnreachable: return EHOSTDOWN
        case .timedOut: return ETIMEDOUT
        case .local(let code, _): return code
        case .io: return EIO
        }
    }
}
