// SigV4Signer: AWS Signature Version 4 for request headers. It owns the canonical request
// (URI-encoding of path and query, header canonicalisation), the string to sign, the signing-key
// derivation and the `Authorization` header. It is a pure function of its inputs: no clock, no
// network, no state, so it is unit-tested against AWS's published vectors and against botocore.
//
// The path is encoded once, as S3 wants it (S3 is the one service that neither normalises nor
// double-encodes the canonical URI): every byte but `A-Za-z0-9-._~` becomes `%XX`, `/` is kept.
// The secret key never leaves this file except inside an HMAC.

import Crypto
import Foundation
import Synchronization

struct SigV4Signer: Sendable {
    let credentials: S3Credentials
    let region: String
    let service: String
    /// The signing key of the last day signed for: it depends on nothing else that changes, and
    /// deriving it is four HMACs, a quarter of the signing of a HEAD.
    private let lastKey = LastSigningKey()

    init(credentials: S3Credentials, region: String, service: String) {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// SHA-256 of the empty body, the payload hash of GET, HEAD and DELETE.
    static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    /// The payload hash that tells S3 the body is not part of the signature (uploads of files,
    /// which would otherwise be read twice).
    static let unsignedPayload = "UNSIGNED-PAYLOAD"

    /// One request to sign. `path` is the wire path, already URI-encoded (see `encodePath`);
    /// `query` holds decoded names and values; `headers` are the headers to sign, `host` included.
    struct Request: Sendable {
        var method: String
        var path: String
        var query: [(name: String, value: String)]
        var headers: [(name: String, value: String)]
        var payloadHash: String

        init(method: String, path: String, query: [(name: String, value: String)] = [],
             headers: [(name: String, value: String)], payloadHash: String) {
            self.method = method
            self.path = path
            self.query = query
            self.headers = headers
            self.payloadHash = payloadHash
        }
    }

    /// What signing produced: the intermediate strings (for tests and debugging, they carry no
    /// secret) and the `Authorization` header.
    struct Signature: Sendable {
        var canonicalRequest: String
        var stringToSign: String
        var signedHeaders: String
        var signature: String
        var authorization: String
    }

    // MARK: - Signing

    /// Signs `request` at `date` (`yyyyMMddTHHmmssZ`, which must also be the request's
    /// `x-amz-date` header when the caller adds one).
    func sign(_ request: Request, amzDate: String) -> Signature {
        let day = String(amzDate.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let (canonicalHeaders, signedHeaders) = Self.canonicalHeaders(request.headers)
        let canonicalRequest = [
            request.method,
            request.path.isEmpty ? "/" : request.path,
            Self.canonicalQuery(request.query),
            canonicalHeaders,
            signedHeaders,
            request.payloadHash,
        ].joined(separator: "\n")
        let stringToSign = [
            "AWS4-HMAC-SHA256",
            amzDate,
            scope,
            Self.hex(SHA256.hash(data: Data(canonicalRequest.utf8))),
        ].joined(separator: "\n")
        let key = signingKey(day: day)
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key))
        let authorization = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyId)/\(scope), "
            + "SignedHeaders=\(signedHeaders), Signature=\(signature)"
        return Signature(canonicalRequest: canonicalRequest, stringToSign: stringToSign, signedHeaders: signedHeaders,
                         signature: signature, authorization: authorization)
    }

    /// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), service), "aws4_request"),
    /// derived once a day.
    private func signingKey(day: String) -> SymmetricKey {
        if let key = lastKey.key(for: day) { return key }
        func hmac(_ key: SymmetricKey, _ text: String) -> SymmetricKey {
            SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(text.utf8), using: key)))
        }
        let secret = SymmetricKey(data: Data(("AWS4" + credentials.secretAccessKey).utf8))
        let key = hmac(hmac(hmac(hmac(secret, day), region), service), "aws4_request")
        lastKey.remember(key, for: day)
        return key
    }

    // MARK: - Canonical forms

    /// Lowercased names, sorted; values trimmed with inner runs of spaces collapsed; repeated
    /// names joined with `,` in the order given.
    static func canonicalHeaders(_ headers: [(name: String, value: String)]) -> (canonical: String, signed: String) {
        var byName: [String: [String]] = [:]
        for header in headers {
            let name = header.name.utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") })
                ? header.name.lowercased() : header.name
            byName[name, default: []].append(trimmedHeaderValue(header.value))
        }
        let names = byName.keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        let canonical = names.map { "\($0):\(byName[$0]!.joined(separator: ","))\n" }.joined()
        return (canonical, names.joined(separator: ";"))
    }

    static func trimmedHeaderValue(_ value: String) -> String {
        // Most values (dates, hashes, hosts, ranges, ETags) are ASCII with no space or tab to
        // trim or collapse.
        if !value.utf8.contains(where: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") || $0 >= 0x80 }) { return value }
        var result = ""
        var pendingSpace = false
        for character in value.trimmingCharacters(in: .whitespaces) {
            if character == " " || character == "\t" {
                pendingSpace = true
                continue
            }
            if pendingSpace { result.append(" ") }
            pendingSpace = false
            result.append(character)
        }
        return result
    }

    /// `name=value` pairs, both URI-encoded (`/` too), sorted by encoded name then value, byte-wise.
    static func canonicalQuery(_ query: [(name: String, value: String)]) -> String {
        query.map { (uriEncode($0.name, encodeSlash: true), uriEncode($0.value, encodeSlash: true)) }
            .sorted { a, b in
                if a.0 != b.0 { return Array(a.0.utf8).lexicographicallyPrecedes(Array(b.0.utf8)) }
                return Array(a.1.utf8).lexicographicallyPrecedes(Array(b.1.utf8))
            }
            .map { "\($0.0)=\($0.1)" }
            .joined(separator: "&")
    }

    /// AWS's UriEncode: unreserved bytes (`A-Za-z0-9-._~`) kept, `/` kept unless `encodeSlash`,
    /// every other byte of the UTF-8 form as `%XX` with upper-case hex (PercentEncoding.swift).
    static func uriEncode(_ string: String, encodeSlash: Bool) -> String {
        PercentEncoding.encode(string, keepingSlash: !encodeSlash)
    }

    /// The wire (and canonical) path of an object key: `/` + the key, encoded with `/` kept.
    static func encodePath(_ key: String) -> String {
        "/" + uriEncode(key, encodeSlash: false)
    }

    // MARK: - Helpers

    /// `yyyyMMddTHHmmssZ` in UTC, the form of `x-amz-date`.
    static func amzDate(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)\(two(parts.tm_mon + 1))\(two(parts.tm_mday))T\(two(parts.tm_hour))\(two(parts.tm_min))\(two(parts.tm_sec))Z"
    }

    static func sha256Hex(_ data: Data) -> String {
        hex(SHA256.hash(data: data))
    }

    static func hex<D: Sequence>(_ bytes: D) -> String where D.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func hex(_ digest: SHA256.Digest) -> String { hex(Array(digest)) }
    static func hex(_ code: HMAC<SHA256>.MAC) -> String { hex(Array(code)) }
}

/// The one signing key a signer keeps (see `SigV4Signer.signingKey`): that of the day of the
/// last request, replaced when the day (UTC) changes. Kept as bytes, which are `Sendable`.
private final class LastSigningKey: Sendable {
    private let last = Mutex<(day: String, key: [UInt8])?>(nil)

    func key(for day: String) -> SymmetricKey? {
        last.withLock { $0?.day == day ? $0?.key : nil }.map { SymmetricKey(data: $0) }
    }

    func remember(_ key: SymmetricKey, for day: String) {
        let bytes = key.withUnsafeBytes { Array($0) }
        last.withLock { $0 = (day, bytes) }
    }
}
