import Foundation

/// Item ids: a random (version 4) UUID per row, which also names the item's local copy in the
/// cache (see `Provider.copyPath`), so it is never reused or guessed.
enum ItemIdentifier {
    /// A new id. Foundation's `UUID()` opened, read and closed /dev/urandom for every id here:
    /// three system calls per row of a first listing (4% of a 100,000-entry listing's time).
    /// The system generator asks `getrandom` instead.
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
