import DocFSStore

/// Sorted, disjoint, non-adjacent half-open ranges a copy holds: a read is served only from these.
public struct ByteRangeSet: Sendable, Equatable, CustomStringConvertible {
    public private(set) var ranges: [ByteRange] = []

    public init() {}

    public init(_ ranges: [ByteRange]) {
        for range in ranges { insert(range) }
    }

    public var isEmpty: Bool { ranges.isEmpty }

    public var count: Int64 { ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }

    /// Merges with every range it overlaps or touches.
    public mutating func insert(_ range: ByteRange) {
        guard !range.isEmpty else { return }
        // Sorted and apart: the ranges it meets follow one another.
        let first = ranges.firstIndex { $0.upperBound >= range.lowerBound } ?? ranges.endIndex
        let end = ranges[first...].firstIndex { $0.lowerBound > range.upperBound } ?? ranges.endIndex
        let merged = ranges[first..<end].reduce(range) { min($0.lowerBound, $1.lowerBound)..<max($0.upperBound, $1.upperBound) }
        ranges.replaceSubrange(first..<end, with: [merged])
    }

    public func contains(_ range: ByteRange) -> Bool {
        if range.isEmpty { return true }
        return ranges.contains { $0.lowerBound <= range.lowerBound && range.upperBound <= $0.upperBound }
    }

    public func missing(in range: ByteRange) -> [ByteRange] {
        var result: [ByteRange] = []
        var cursor = range.lowerBound
        for held in ranges where held.upperBound > cursor && held.lowerBound < range.upperBound {
            if held.lowerBound > cursor { result.append(cursor..<held.lowerBound) }
            cursor = max(cursor, held.upperBound)
            if cursor >= range.upperBound { break }
        }
        if cursor < range.upperBound { result.append(cursor..<range.upperBound) }
        return result
    }

    public var description: String {
        ranges.map { "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ",")
    }
}
