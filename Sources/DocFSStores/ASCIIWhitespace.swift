/// The whitespace XML allows around a value (space, tab, CR, LF), trimmed as bytes. Foundation's
/// `trimmingCharacters` went through NSString and UTF-16 for every value of a listing (a seventh
/// of a 100,000-entry listing's CPU), and trimmed Unicode spaces too, which a name may end with.
enum ASCIIWhitespace {
    static func contains(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    /// `bytes` without that whitespace at either end.
    static func trimmed<Bytes: BidirectionalCollection>(_ bytes: Bytes) -> Bytes.SubSequence where Bytes.Element == UInt8 {
        var slice = bytes[...]
        while let first = slice.first, contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, contains(last) { slice = slice.dropLast() }
        return slice
    }

    /// `text` without that whitespace at either end.
    static func trimmed(_ text: Substring) -> Substring {
        Substring(trimmed(text.utf8))
    }
}
