/// A name compared by its bytes, as file systems and stores compare names.
///
/// Swift's `String` compares by Unicode canonical equivalence: `"café"` precomposed (NFC, `caf\u{E9}`)
/// and decomposed (NFD, `cafe\u{301}`) are equal as Strings, yet a Linux file system, S3 and
/// WebDAV servers keep them as two names of two files. Anything that compares names, or keys a
/// dictionary or a set by name, uses `FileName` (or compares `utf8` views), never `String`'s `==`:
/// otherwise one of the two files hides the other.
public struct FileName: Sendable, Hashable, Comparable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let string: String

    public init(_ string: String) { self.string = string }
    public init(stringLiteral value: String) { self.string = value }

    public var description: String { string }

    public static func == (lhs: FileName, rhs: FileName) -> Bool {
        lhs.string.utf8.elementsEqual(rhs.string.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(string.utf8.count)
        for byte in string.utf8 { hasher.combine(byte) }
    }

    /// Byte order (for UTF-8 that is code point order), consistent with `==`.
    public static func < (lhs: FileName, rhs: FileName) -> Bool {
        lhs.string.utf8.lexicographicallyPrecedes(rhs.string.utf8)
    }
}

extension String {
    /// This string as a name compared by its bytes.
    public var fileName: FileName { FileName(self) }
}
