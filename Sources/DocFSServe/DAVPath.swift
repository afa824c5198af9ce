// DAVPath: the one place where a URL path becomes a path under the served root.
// It percent-decodes, refuses `..`, NUL and bad encodings, and builds the hrefs we send back
// (percent-encoding everything except unreserved characters and `/`).

/// A request path, decoded and split into names. Never contains `..`, `.`, empty names or NUL.
/// Names compare and hash by their bytes, as the file system under the served root does:
/// `café` in NFC and in NFD are two paths (Swift's `String ==` would make them one).
struct DAVPath: Sendable, Hashable {
    let components: [String]

    static func == (lhs: DAVPath, rhs: DAVPath) -> Bool {
        lhs.components.elementsEqual(rhs.components) { $0.utf8.elementsEqual($1.utf8) }
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(components.count)
        for component in components {
            hasher.combine(component.utf8.count)
            for byte in component.utf8 { hasher.combine(byte) }
        }
    }

    init(components: [String]) {
        self.components = components
    }

    /// Decodes a percent-encoded path as received on the wire (no query, no fragment).
    init(percentEncoded raw: some StringProtocol) throws(DAVError) {
        guard let bytes = DAVPath.percentDecode(raw) else {
            throw DAVError(.badRequest, "invalid percent-encoding in path")
        }
        if bytes.contains(0) {
            throw DAVError(.forbidden, "NUL in path")
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw DAVError(.badRequest, "path is not valid UTF-8")
        }
        var names: [String] = []
        // Split and check on bytes: Character-wise, a `/` followed by a combining mark is not
        // a `/`, and would stay inside a name.
        for name in decoded.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true) {
            if name.elementsEqual(".".utf8) { continue }
            if name.elementsEqual("..".utf8) { throw DAVError(.forbidden, "`..` in path") }
            names.append(String(Substring(name)))
        }
        self.components = names
    }

    var isRoot: Bool { components.isEmpty }
    var name: String { components.last ?? "" }
    var parent: DAVPath { DAVPath(components: Array(components.dropLast())) }

    func appending(_ name: String) -> DAVPath {
        DAVPath(components: components + [name])
    }

    /// True when `self` is `other` or lies below it.
    func isSame(orInside other: DAVPath) -> Bool {
        components.count >= other.components.count
            && zip(components, other.components).allSatisfy { $0.utf8.elementsEqual($1.utf8) }
    }

    /// The href for this resource: percent-encoded, directories end with `/`.
    func href(isDirectory: Bool) -> String {
        if components.isEmpty { return "/" }
        let encoded = "/" + components.map(DAVPath.percentEncode).joined(separator: "/")
        return isDirectory ? encoded + "/" : encoded
    }

    // MARK: Encoding

    static func percentDecode(_ string: some StringProtocol) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(string.utf8.count)
        var iterator = string.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let hi = iterator.next().flatMap(hexValue), let lo = iterator.next().flatMap(hexValue) else {
                    return nil
                }
                out.append(hi << 4 | lo)
            } else {
                out.append(byte)
            }
        }
        return out
    }

    /// Percent-encodes one name: everything except RFC 3986 unreserved characters.
    static func percentEncode(_ name: String) -> String {
        percentEncode(name, keepingSlash: false)
    }

    static func percentEncode(_ string: String, keepingSlash: Bool) -> String {
        let hex: [UInt8] = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(string.utf8.count)
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(byte)
            case UInt8(ascii: "/") where keepingSlash:
                out.append(byte)
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// The path part of a `Destination` header: an absolute URL or an absolute path.
    /// Query and fragment are dropped (a name containing `?` or `#` arrives encoded).
    static func destinationPath(_ header: String) -> Substring? {
        var rest = Substring(header.trimmingSpaces)
        if let schemeEnd = rest.range(of: "://") {
            rest = rest[schemeEnd.upperBound...]
            guard let slash = rest.firstIndex(of: "/") else { return "/" }
            rest = rest[slash...]
        }
        guard rest.hasPrefix("/") else { return nil }
        if let cut = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) {
            rest = rest[..<cut]
        }
        return rest
    }
}

extension StringProtocol {
    var trimmingSpaces: Substring {
        var s = Substring(self)
        while let first = s.first, first == " " || first == "\t" { s.removeFirst() }
        while let last = s.last, last == " " || last == "\t" { s.removeLast() }
        return s
    }
}

extension Substring {
    fileprivate func range(of needle: String) -> Range<Index>? {
        var index = startIndex
        while index < endIndex {
            if self[index...].hasPrefix(needle) {
                return index..<self.index(index, offsetBy: needle.count)
            }
            index = self.index(after: index)
        }
        return nil
    }
}
