// BasicAuth: HTTP Basic authentication (RFC 7617) for `docfs serve`, against one user and
// password read from a credentials file by the CLI. The comparison takes the same time
// whatever the guess: both sides are hashed to 32 bytes and compared with no early exit, so
// the time of a refusal tells an attacker neither a correct prefix nor the password's length.

import Crypto

public struct BasicCredentials: Sendable {
    public let user: String
    public let password: String

    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }
}

struct BasicAuth: Sendable {
    /// SHA-256 of `user:password`, the only form kept.
    private let expected: [UInt8]

    init(_ credentials: BasicCredentials) {
        expected = Array(SHA256.hash(data: Array((credentials.user + ":" + credentials.password).utf8)))
    }

    /// The refusal a request without valid credentials gets.
    static var challenge: DAVError {
        var error = DAVError(.unauthorized, "authentication required")
        error.headers = [("WWW-Authenticate", "Basic realm=\"docfs\", charset=\"UTF-8\"")]
        return error
    }

    /// Throws 401 unless `header` (an `Authorization` value) carries the expected credentials.
    func check(_ header: String?) throws(DAVError) {
        guard let header, let decoded = Self.decode(header) else { throw Self.challenge }
        let given = Array(SHA256.hash(data: decoded))
        var difference: UInt8 = 0
        for (a, b) in zip(given, expected) { difference |= a ^ b }
        guard difference == 0 else { throw Self.challenge }
    }

    /// The `user:password` bytes of a `Basic` header; nil when it is not one.
    static func decode(_ header: String) -> [UInt8]? {
        let value = header.trimmingSpaces
        guard value.count > 6, value.prefix(6).lowercased() == "basic " else { return nil }
        return base64Decode(value.dropFirst(6).trimmingSpaces)
    }

    /// Standard base64 with padding; nil for anything else.
    static func base64Decode(_ text: some StringProtocol) -> [UInt8]? {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count % 4 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count / 4 * 3)
        for start in stride(from: 0, to: bytes.count, by: 4) {
            var values: [UInt8] = []
            var padding = 0
            for (offset, byte) in bytes[start..<start + 4].enumerated() {
                if byte == UInt8(ascii: "=") {
                    // Padding only at the very end, and at most two.
                    guard start + 4 == bytes.count, offset >= 2 else { return nil }
                    padding += 1
                    values.append(0)
                    continue
                }
                guard padding == 0, let value = sextet(byte) else { return nil }
                values.append(value)
            }
            let triple = UInt32(values[0]) << 18 | UInt32(values[1]) << 12 | UInt32(values[2]) << 6 | UInt32(values[3])
            out.append(UInt8(triple >> 16 & 0xFF))
            if padding < 2 { out.append(UInt8(triple >> 8 & 0xFF)) }
            if padding < 1 { out.append(UInt8(triple & 0xFF)) }
        }
        return out
    }

    private static func sextet(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return byte - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return byte - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0") + 52
        case UInt8(ascii: "+"): return 62
        case UInt8(ascii: "/"): return 63
        default: return nil
        }
    }
}
