import Foundation

/// A random UUID per row, which also names the item's copy in the cache: never reused or guessed.
enum ItemIdentifier {
    /// One call for the kernel's randomness per id, written out by hand: a first listing makes one per entry, and
    /// `UUID().uuidString` formats through `sprintf` (a share of applying a big listing in perf).
    static func make() -> String {
        var bytes = (UInt64(0), UInt64(0))
        withUnsafeMutableBytes(of: &bytes) { raw in
            arc4random_buf(raw.baseAddress!, raw.count)  // glibc's: the kernel's generator, one call, never fails
            raw[6] = (raw[6] & 0x0F) | 0x40  // version 4
            raw[8] = (raw[8] & 0x3F) | 0x80  // RFC 4122 variant
        }
        return withUnsafeBytes(of: &bytes) { raw in formatted(raw) }
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// `XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX` in upper case, as `UUID.uuidString` writes it.
    static func formatted(_ raw: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: 36) { out in
            var at = 0
            for (index, byte) in raw.prefix(16).enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 {
                    out[at] = UInt8(ascii: "-")
                    at += 1
                }
                out[at] = hexDigits[Int(byte >> 4)]
                out[at + 1] = hexDigits[Int(byte & 0x0F)]
                at += 2
            }
            return at
        }
    }
}
