#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A point in time with the nanosecond precision `utimensat` and `stat` carry. A `Double` of
/// seconds since 1970 keeps only about a quarter of a microsecond today, so a time set with
/// `touch -d` or `cp -p` would not read back as set; the catalog keeps integers instead.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible,
                         ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral {
    /// Nanoseconds since 1970-01-01 00:00 UTC.
    public var nanoseconds: Int64

    public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    /// From seconds as a store reports them (whole seconds or milliseconds: exact enough).
    public init(seconds: Double) { nanoseconds = Int64((seconds * 1_000_000_000).rounded()) }

    public init(seconds: Int64, nanoseconds: Int64) { self.nanoseconds = seconds * 1_000_000_000 + nanoseconds }

    public init(integerLiteral value: Int64) { self.init(seconds: value, nanoseconds: 0) }
    public init(floatLiteral value: Double) { self.init(seconds: value) }

    public static var now: Timestamp {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Timestamp(seconds: Int64(time.tv_sec), nanoseconds: Int64(time.tv_nsec))
    }

    public var seconds: Double { Double(nanoseconds) / 1_000_000_000 }

    /// Whole seconds and the nanoseconds within the second (0..<1e9, also before 1970).
    public var parts: (seconds: Int64, nanoseconds: Int64) {
        let (quotient, remainder) = nanoseconds.quotientAndRemainder(dividingBy: 1_000_000_000)
        return remainder < 0 ? (quotient - 1, remainder + 1_000_000_000) : (quotient, remainder)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    public var description: String { "\(parts.seconds).\(String(format: "%09lld", parts.nanoseconds))" }

    /// Seconds as stores keep them in text (S3's `x-amz-meta-mtime`, docfs's WebDAV `mtime`):
    /// whole seconds alone when there is no fraction (what s3fs's integer parser reads), else
    /// with all nine digits of it.
    public var decimalSeconds: String { parts.nanoseconds == 0 ? String(parts.seconds) : description }
}
