// S3Store+Errors: the one table from S3 error codes (and statuses without a code) to
// StoreError, and the error of a refused conditional write. Messages name the call and the
// store path and the S3 code, never a URL, a header or S3's own message.

import DocFSStore
import Logging

extension S3Store {
    /// The one table of S3 error codes; statuses without a code go to the transport's table.
    func error(_ answer: HTTPTransport.Answer, method: String, path: StorePath) -> StoreError {
        guard let body = S3XML.parseError(answer.body) else {
            if answer.status == 412 { return .versionMismatch(path) }
            return answer.error(method: method, path: path)
        }
        return Self.error(code: body.code, status: answer.status, method: method, path: path, logger: logger,
                          retryAfter: RetryAfter.parse(answer.headers))
    }

    static func error(code: String, status: Int, method: String, path: StorePath, logger: Logger,
                      retryAfter: Duration? = nil) -> StoreError {
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
        case "SlowDown", "ServiceUnavailable", "TooManyRequests":
            return .busy(status: status < 500 && status != 429 ? 503 : status, retryAfter: retryAfter, message: "\(method) \(path): S3 \(code)")
        case "InternalError", "RequestTimeout", "OperationAborted":
            if let retryAfter { return .busy(status: status, retryAfter: retryAfter, message: "\(method) \(path): S3 \(code)") }
            return .serverError(status: status < 500 ? 503 : status, message: "\(method) \(path): S3 \(code)")
        case "EntityTooLarge", "EntityTooSmall", "KeyTooLongError", "InvalidArgument", "InvalidRequest", "InvalidDigest",
             "BadDigest", "MalformedXML", "MaxMessageLengthExceeded", "MetadataTooLarge", "InvalidBucketName", "InvalidPart",
             "InvalidPartOrder", "IncompleteBody", "MissingContentLength":
            return .refused(status: status, message: "\(method) \(path): S3 \(code)")
        case "NotImplemented", "MethodNotAllowed":
            return .notSupported("\(method) \(path): S3 \(code)")
        default:
            switch HTTPTransport.statusError(status, reason: code, method: method, path: path, retryAfter: retryAfter) {
            case .protocolError: return .protocolError("\(method) \(path): S3 \(code) (HTTP \(status))")
            case let other: return other
            }
        }
    }

    /// The error of a refused conditional write.
    static func conditionError(_ condition: WriteCondition, path: StorePath) -> StoreError {
        if case .mustNotExist = condition { return .alreadyExists(path) }
        return .versionMismatch(path)
    }
}
