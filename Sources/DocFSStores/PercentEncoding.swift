// PercentEncoding: `%XX` escapes in URL paths and queries, for every HTTP store (WebDAV hrefs
// and base URLs, S3 keys in listings and in `s3://` URLs, SigV4's canonical form) and for the
// store locator. One encoder and one decoder, both byte-wise over UTF-8; nothing here does I/O.

import Foundation

public enum PercentEncoding {
    /// Percent-decodes one path segment; a `%` not followed by two hex digits is kept as is.
    /// Returns nil if the bytes are not valid UTF-8.
    static func decode(_ segment: Substring) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(segment.utf8.count)
        let utf8 = Array(segment.utf8)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "%"), index + 2 < utf8.count,
               let high = hexValue(utf8[index + 1]), let low = hexValue(utf8[index + 2]) {
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The decoded path components of an absolute URL or an absolute path (a query dropped).
    /// Returns nil when a component cannot be decoded to UTF-8. Components may be unsafe names
    /// (`..`, names with `/` once decoded): the caller checks them.
    static func decodedPathComponents(of urlOrPath: String) -> [String]? {
        // A raw Unicode space at an end is part of the name.
        var path = ASCIIWhitespace.trimmed(Substring(urlOrPath))
        if let schemeEnd = schemeEnd(in: path) {
            let afterScheme = path[schemeEnd.upperBound...]
            path = afterScheme.firstIndex(of: "/").map { afterScheme[$0...] } ?? "/"
        }
        if let query = path.firstIndex(of: "?") { path = path[..<query] }
        var components: [String] = []
        for segment in path.split(separator: "/", omittingEmptySubsequences: true) {
            guard let decoded = decode(segment) else { return nil }
            components.append(decoded)
        }
        return components
    }

    /// Where `://` is in `path`. An href is nearly always ASCII (percent-encoded), and for
    /// ASCII a byte search finds what Foundation's `range(of:)` finds, without its cost (one
    /// per entry of a listing); anything else is left to Foundation.
    private static func schemeEnd(in path: Substring) -> Range<Substring.Index>? {
        let bytes = path.utf8
        guard bytes.allSatisfy({ $0 < 0x80 }) else { return path.range(of: "://") }
        let pattern: [UInt8] = [UInt8(ascii: ":"), UInt8(ascii: "/"), UInt8(ascii: "/")]
        var index = bytes.startIndex
        while let colon = bytes[index...].firstIndex(of: pattern[0]) {
            if bytes[colon...].starts(with: pattern) {
                return colon..<bytes.index(colon, offsetBy: 3)
            }
            index = bytes.index(after: colon)
        }
        return nil
    }

    /// Percent-encodes every byte of the UTF-8 form but the unreserved `A-Za-z0-9-._~` (and
    /// `/` when `keepingSlash`), as `%XX` with upper-case hex: a name for the wire, or AWS's
    /// UriEncode.
    public static func encode(_ string: String, keepingSlash: Bool = false) -> String {
        var result = ""
        result.reserveCapacity(string.utf8.count)
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where keepingSlash:
                result.append("/")
            default:
                result += "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 0xF, radix: 16, uppercase: true)
            }
        }
        return result
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
