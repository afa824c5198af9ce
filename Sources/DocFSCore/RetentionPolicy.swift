import Foundation

/// How long an unused clean copy stays. By default the last release evicts; `evictDelay` keeps
/// it so a reopen downloads once; `cacheMax` bounds unpinned copies, evicting the least
/// recently released first. Pinned copies neither expire nor count.
public struct RetentionPolicy: Sendable, Equatable {
    /// Nil or zero: not kept for time's sake.
    public var evictDelay: Duration?
    /// Nil: no bound.
    public var cacheMax: Int64?

    public init(evictDelay: Duration? = nil, cacheMax: Int64? = nil) {
        self.evictDelay = evictDelay
        self.cacheMax = cacheMax
    }

    public static let onLastRelease = RetentionPolicy()

    public var keepsReleasedCopies: Bool {
        (evictDelay.map { $0 > .zero } ?? false) || cacheMax != nil
    }

    /// `500M`, `2G`, `1048576` or `64KiB` (powers of 1024).
    public static func parseSize(_ text: String) -> Int64? {
        var digits = text.trimmingCharacters(in: .whitespaces).uppercased()
        for suffix in ["IB", "B"] where digits.hasSuffix(suffix) && digits.count > suffix.count {
            digits.removeLast(suffix.count)
            break
        }
        let units: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
        var multiplier: Int64 = 1
        if let last = digits.last, let unit = units[last] {
            multiplier = unit
            digits.removeLast()
        }
        guard let value = Double(digits), value >= 0, value * Double(multiplier) < 9e18 else { return nil }
        return Int64(value * Double(multiplier))
    }
}
