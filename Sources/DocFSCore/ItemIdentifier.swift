import Foundation

/// A random UUID per row, which also names the item's copy in the cache: never reused or guessed.
enum ItemIdentifier {
    /// The system generator asks `getrandom`, where `UUID()` costs three system calls per id.
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (generator.next() as UInt64, generator.next() as UInt64)
        return withUnsafeMutableBytes(of: &bytes) { raw in
            raw[6] = (raw[6] & 0x0F) | 0x40  // version 4
            raw[8] = (raw[8] & 0x3F) | 0x80  // RFC 4122 variant
            let uuid = raw.load(as: uuid_t.self)
            return UUID(uuid: uuid).uuidString
        }
    }
}
