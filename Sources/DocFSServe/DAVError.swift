// DAVError: every failure of a WebDAV request, carrying the HTTP status it is answered with.
// The errno -> status table lives here and nowhere else.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Hummingbird

struct DAVError: Error, CustomStringConvertible {
    let status: HTTPResponse.Status
    let reason: String
    /// Extra headers for the error response (e.g. `Content-Range` on 416, `Allow` on 405).
    var headers: [(String, String)] = []
    /// An RFC 4918 precondition element for the `<D:error>` body, e.g. `propfind-finite-depth`.
    var precondition: String? = nil

    init(_ status: HTTPResponse.Status, _ reason: String) {
        self.status = status
        self.reason = reason
    }

    var description: String { "\(status.code) \(reason)" }

    /// Maps an errno from a file system call to the status a WebDAV client expects.
    static func errno(_ code: Int32, _ what: String) -> DAVError {
        let message = "\(what): \(String(cString: strerror(code)))"
        switch code {
        case ENOENT: return DAVError(.notFound, message)
        case ENOTDIR: return DAVError(.conflict, message)
        case EACCES, EPERM, EROFS: return DAVError(.forbidden, message)
        case EEXIST: return DAVError(.methodNotAllowed, message)
        case ENOTEMPTY, EISDIR, EBUSY, EXDEV, EINVAL: return DAVError(.conflict, message)
        case ENAMETOOLONG: return DAVError(.uriTooLong, message)
        case ENOSPC, EDQUOT: return DAVError(.init(code: 507, reasonPhrase: "Insufficient Storage"), message)
        default: return DAVError(.internalServerError, message)
        }
    }
}

extension HTTPResponse.Status {
    static let multiStatus = HTTPResponse.Status(code: 207, reasonPhrase: "Multi-Status")
}
