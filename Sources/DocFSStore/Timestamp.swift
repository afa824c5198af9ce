#if canImport(Glibc)
import Glibc
#endif
import Foundation

/// A point in time with the nanosecond precision `utimensat` and `stat` carry. A `Double` of
/// seconds since 1970 keeps only about a quarter of a microsecond today, so a time set with
/// `touch -d` or `cp -p` would not read back as set; the catalog keeps integers instead.
///
/// Every way in is total: times come from users (`touch -d 2300-01-01`, any `timespec` a
/// setattr carries) and from stores (an HTTP date, `x-amz-meta-mtime: 1e300`, a file's mtime),
/// and none of them may trap the daemon. Int64 nanoseconds reach from `earliest`
/// (1677-09-21 00:12:43.145224192 UTC) to `latest` (2262-04-11 23:47:16.854775807 UTC); a time
/// outside saturates to the nearer end, so it reads back as the nearest instant docfs can
/// hold, never as a wrapped-around one.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible,
                         ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral {
    /// Nanoseconds since 1970-01-01 00:00 UTC.
    public var nanoseconds: Int64

    /// The first instant a `Timestamp` holds: 1677-09-21 00:12:43.145224192 UTC.
    public static let earliest = Timestamp(nanoseconds: .min)
    /// The last instant a `Timestamp` holds: 2262-04-11 23:47:16.854775807 UTC.
    public static let latest = Timestamp(nanoseconds: .max)

    private static let nanosecondsPerSecond: Int64 = 1_000_000_000

    public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    /// From seconds as a store reports them (whole seconds or milliseconds: exact enough).
    /// Saturating: beyond the range (±infinity included) is `earliest` or `latest`.
    /// NaN is no time at all, so it is what stores already report when they give none: 0, the
    /// epoch (`RemoteEntry.modified` is 0 when a store sent no date). That keeps `stat` sane —
    /// 1970-01-01 reads as "no date", where `now` would move at every listing and make tools
    /// like `make` and `rsync` see a change that never happened.
    public init(seconds: Double) {
        guard !seconds.isNaN else { nanoseconds = 0; return }
        let scaled = (seconds * Double(Self.nanosecondsPerSecond)).rounded()
        // 2^63 is Int64.max + 1; -2^63 is Int64.min exactly.
        if scaled >= 0x1p63 {
            nanoseconds = .max
        } else if scaled < -0x1p63 {
            nanoseconds = .min
        } else {
            nanoseconds = Int64(scaled)
        }
    }

    /// From whole seconds and nanoseconds, as a `timespec` holds them. Saturating, like
    /// `init(seconds:)`; `nanoseconds` may be outside 0..<1e9 (it carries into the seconds).
    public init(seconds: Int64, nanoseconds: Int64) {
        let (carry, within) = nanoseconds.quotientAndRemainder(dividingBy: Self.nanosecondsPerSecond)
        let (whole, carried) = seconds.addingReportingOverflow(carry)
        guard !carried else { self.nanoseconds = carry < 0 ? .min : .max; return }
        let (scaled, multiplied) = whole.multipliedReportingOverflow(by: Self.nanosecondsPerSecond)
        guard !multiplied else { self.nanoseconds = whole < 0 ? .min : .max; return }
        let (total, added) = scaled.addingReportingOverflow(within)
        guard !added else { self.nanoseconds = within < 0 ? .min : .max; return }
        self.nanoseconds = total
    }

    /// Seconds written as text by `decimalSeconds` (or by s3fs, or anything `Double` reads:
    /// `1e300`, `-inf`), saturating; nil for text that is no number, and for NaN, which is no
    /// time: a store's `x-amz-meta-mtime: nan` is a missing time, not a time.
    public init?(decimalSeconds text: String) {
        guard let seconds = Self.representableSeconds(text) else { return nil }
        self.init(seconds: seconds)
    }

    /// The same text as the `Double` of seconds a `RemoteEntry` carries: the number as written
    /// when it is within `earliest...latest` (not rounded through nanoseconds, which would turn
    /// `.25` into `.2499998`), else the nearer end; nil for NaN and for text that is no number.
    public static func representableSeconds(_ text: String) -> Double? {
        guard let value = Double(text.trimmingCharacters(in: .whitespaces)), !value.isNaN else { return nil }
        return min(max(value, earliest.seconds), latest.seconds)
    }

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
        let (quotient, remainder) = nanoseconds.quotientAndRemainder(dividingBy: Self.nanosecondsPerSecond)
        return remainder < 0 ? (quotient - 1, remainder + Self.nanosecondsPerSecond) : (quotient, remainder)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    /// Seconds with all nine digits of the fraction, signed as a number is: half a second
    /// before 1970 is `-0.500000000` (not `parts`' floor form `-1` + `0.5`, which would read
    /// back as -1.5).
    public var description: String { decimal(alwaysWithFraction: true) }

    /// Seconds as stores keep them in text (S3's `x-amz-meta-mtime`, docfs's WebDAV `mtime`):
    /// whole seconds alone when there is no fraction (what s3fs's integer parser reads), else
    /// with all nine digits of it. `init(decimalSeconds:)` reads it back exactly as far as a
    /// `Double` carries (to the microsecond today).
    public var decimalSeconds: String { decimal(alwaysWithFraction: false) }

    private func decimal(alwaysWithFraction: Bool) -> String {
        // The magnitude, so Int64.min has one too and the sign goes in front of the whole number.
        let (whole, fraction) = nanoseconds.magnitude.quotientAndRemainder(dividingBy: UInt64(Self.nanosecondsPerSecond))
        let sign = nanoseconds < 0 ? "-" : ""
        guard fraction != 0 || alwaysWithFraction else { return sign + String(whole) }
        let digits = String(fraction)
        return sign + String(whole) + "." + String(repeating: "0", count: 9 - digits.count) + digits
    }
}
