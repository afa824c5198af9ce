import Glibc

/// A random UUID per row, which also names the item's copy in the cache: never reused or guessed.
enum ItemIdentifier {
    static func make() -> String {
        var batch = Batch(count: 1)
        return batch.next()
    }

    /// Ids for a listing's page from one system call, where `UUID().uuidString` costs three
    /// and a formatted print each.
    struct Batch {
        private let count: Int
        private var random: [UInt8] = []
        private var used = 0

        init(count: Int) { self.count = max(count, 1) }

        /// Upper case, as `UUID().uuidString`: `XXXXXXXX-XXXX-4XXX-[89AB]XXX-XXXXXXXXXXXX`.
        mutating func next() -> String {
            if used == random.count {
                random = [UInt8](repeating: 0, count: 16 * count)
                random.withUnsafeMutableBytes { arc4random_buf($0.baseAddress!, $0.count) }
                used = 0
            }
            random[used + 6] = (random[used + 6] & 0x0F) | 0x40  // version 4
            random[used + 8] = (random[used + 8] & 0x3F) | 0x80  // RFC 4122 variant
            let bytes = random[used..<used + 16]
            used += 16
            let hex = Array("0123456789ABCDEF".utf8)
            return String(unsafeUninitializedCapacity: 36) { out in
                var at = 0
                for (index, byte) in zip(0..., bytes) {
                    if [4, 6, 8, 10].contains(index) { out[at] = UInt8(ascii: "-"); at += 1 }
                    out[at] = hex[Int(byte >> 4)]
                    out[at + 1] = hex[Int(byte & 0x0F)]
                    at += 2
                }
                return at
            }
        }
    }
}
