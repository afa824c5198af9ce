import Foundation

/// How long a clean local copy nobody uses stays on disk: the trade-off between making users
/// wait for files they just used and filling the disk (see README, "Keeping files local").
///
/// The default is File Provider's: the last release evicts. `evictDelay` keeps a released copy
/// that long, so a close-then-reopen (editors, build tools, media players) downloads once;
/// `cacheMax` bounds the disk space of unpinned copies, evicting the least recently released
/// idle ones first. With only `cacheMax`, released copies stay until space is needed. Pinned
/// copies (`CopyLife.pinned`) are outside the policy: neither expires nor counts.
public struct RetentionPolicy: Sendable, Equatable {
    /// How long a released clean copy is kept; nil or zero: not kept for time's sake.
    public var evictDelay: Duration?
    /// The most bytes unpinned copies may take on disk; nil: no bound.
    public var cacheMax: Int64?

    public init(evictDelay: Duration? = nil, cacheMax: Int64? = nil) {
        self.evictDelay = evictDelay
        self.cacheMax = cacheMax
    }

    /// Evict on the last release.
    public static let onLastRelease = RetentionPolicy()

    /// Whether a released clean copy stays at all.
    public var keepsReleasedCopies: Bool {
        (evictDelay.map { $0 > .zero } ?? false) || cacheMax != nil
    }

    /// Parses a size such as `500M`, `2G`, `1048576` or `64KiB` (powers of 1024).
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
