import Glibc

/// A set of names compared by their bytes (as `FileName` compares them), held compactly: what a
/// listing remembers of every name it has handed out, so that a name shows once however many
/// pages it comes on, and so that the names it did not show can be found at its end.
///
/// A `Set<FileName>` of a 100,000-entry folder took 4 MiB of hash table (16 bytes a slot, a
/// power of two above 133,000 slots) plus, while it grew, the old table: a listing kept two
/// such sets (the store's and the catalog's), a quarter of the daemon's peak. Here the names'
/// bytes sit end to end in one array, and the table holds 4-byte indexes into it: ~2 MiB for the
/// same folder, and nothing allocated per name.
public struct NameSet: Sendable {
    /// Every name's bytes, one after another.
    private var bytes: [UInt8] = []
    /// Where each name starts in `bytes`; the next one's start (or the end) is where it ends.
    private var starts: [UInt32] = []
    /// Open addressing (linear probing) over the names' indexes plus one; 0 is an empty slot.
    /// Kept at most half full, its size a power of two.
    private var slots: [UInt32] = Array(repeating: 0, count: 16)
    private let seed = Int.random(in: .min ... .max)

    public init() {}

    /// How many names the set holds.
    public var count: Int { starts.count }

    /// Adds `name` if it is not there. Returns whether it was added, and its index (the order
    /// in which names were first added; stable for the set's life).
    @discardableResult
    public mutating func insert(_ name: String) -> (inserted: Bool, index: Int) {
        var name = name
        return name.withUTF8 { name in
            var slot = self.slot(of: name)
            if slots[slot] != 0 { return (false, Int(slots[slot]) - 1) }
            let index = starts.count
            // Unreachable through a listing: 1,000,000 entries (`ListingLimits`) of at most 255
            // bytes are 255 MB.
            precondition(bytes.count + name.count <= Int(UInt32.max), "NameSet: more than 4 GiB of names")
            starts.append(UInt32(bytes.count))
            bytes.append(contentsOf: name)
            if starts.count * 2 > slots.count {
                grow()
                slot = self.slot(of: name)
            }
            slots[slot] = UInt32(index + 1)
            return (true, index)
        }
    }

    /// The index of `name`, nil when the set does not hold it.
    public func index(of name: String) -> Int? {
        var name = name
        return name.withUTF8 { name in
            let value = slots[slot(of: name)]
            return value == 0 ? nil : Int(value) - 1
        }
    }

    public func contains(_ name: String) -> Bool { index(of: name) != nil }

    /// The slot that holds `name`, or the empty one where it would go.
    private func slot(of name: UnsafeBufferPointer<UInt8>) -> Int {
        let mask = slots.count - 1
        var slot = hash(name) & mask
        while slots[slot] != 0 {
            if equals(Int(slots[slot]) - 1, name) { return slot }
            slot = (slot + 1) & mask
        }
        return slot
    }

    private func hash(_ name: UnsafeBufferPointer<UInt8>) -> Int {
        var hasher = Hasher()
        hasher.combine(seed)
        hasher.combine(bytes: UnsafeRawBufferPointer(name))
        return hasher.finalize()
    }

    private func range(of index: Int) -> Range<Int> {
        let start = Int(starts[index])
        let end = index + 1 < starts.count ? Int(starts[index + 1]) : bytes.count
        return start..<end
    }

    private func equals(_ index: Int, _ name: UnsafeBufferPointer<UInt8>) -> Bool {
        let range = range(of: index)
        guard range.count == name.count else { return false }
        return bytes.withUnsafeBufferPointer { all in
            name.count == 0 || memcmp(all.baseAddress! + range.lowerBound, name.baseAddress!, name.count) == 0
        }
    }

    /// Doubles the table and places every name again.
    private mutating func grow() {
        let size = slots.count * 2
        var table = [UInt32](repeating: 0, count: size)
        let mask = size - 1
        bytes.withUnsafeBufferPointer { all in
            for index in 0..<starts.count {
                let range = range(of: index)
                var slot = hash(UnsafeBufferPointer(rebasing: all[range])) & mask
                while table[slot] != 0 { slot = (slot + 1) & mask }
                table[slot] = UInt32(index + 1)
            }
        }
        slots = table
    }
}
