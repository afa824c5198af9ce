// HTTPDate: the date of HTTP (RFC 9110 §5.6.7), as WebDAV's `getlastmodified` and every
// `Last-Modified` header carry it — a WebDAV server's and an S3 server's alike, so it lives here
// and not on one store. The text comes from a server and may name any year: parsing never
// traps, whatever the year, and an instant docfs cannot hold is left for `Timestamp` to saturate.

/// HTTP dates: RFC 1123 (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`)
/// and asctime (`Sun Nov  6 08:49:37 1994`), always UTC.
enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Years beyond this many from year 0 are read as this one: far past any instant a
    /// `Timestamp` holds (which saturates them), and small enough that the day count and the
    /// seconds stay exact in `Int` and `Double`.
    private static let yearLimit = 100_000_000

    /// The instants `format` can write with a four-digit year, as HTTP's grammar wants:
    /// 0001-01-01 00:00:00 and 9999-12-31 23:59:59.
    static let formattable: ClosedRange<Double> = -62_135_596_800 ... 253_402_300_799

    /// Seconds since 1970, or nil if `string` is none of the three forms. Any year parses
    /// (1000, 1601, 9999 exactly); a year of more digits than an `Int` holds is read as
    /// `yearLimit`, so a far-future date stays a far-future date.
    static func parse(_ string: String) -> Double? {
        if let seconds = parseIMFFixdate(string) { return seconds }
        // Tokenise on spaces, commas and dashes; the weekday is ignored.
        let tokens = string.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "-" || $0 == "\t" }).map(String.init)
        guard tokens.count >= 4 else { return nil }
        var day: Int?, month: Int?, year: Int?, time: (Int, Int, Int)?
        for token in tokens {
            if let parsed = parseTime(token) { time = parsed; continue }
            if let index = months.firstIndex(of: token.lowercased()) { month = index + 1; continue }
            if !token.isEmpty, token.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
                let number = Int(token) ?? yearLimit
                if day == nil, token.count <= 2 { day = number; continue }
                if year == nil { year = token.count == 2 ? (number < 70 ? 2000 + number : 1900 + number) : min(number, yearLimit); continue }
            }
        }
        guard let day, let month, let year, let time, (1...31).contains(day), time.0 < 24, time.1 < 60, time.2 < 61 else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        return Double(days * 86_400 + time.0 * 3600 + time.1 * 60 + time.2)
    }

    /// The form nearly every server sends (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110's
    /// IMF-fixdate), read in place: a listing has one per entry, and the general reader below
    /// splits each into strings. Nil for anything else (which the general reader then reads,
    /// to the same result for every string this accepts: a weekday of letters is ignored there too).
    private static func parseIMFFixdate(_ string: String) -> Double? {
        let bytes = string.utf8
        guard bytes.count == 29 else { return nil }
        return bytes.withContiguousStorageIfAvailable { b -> Double? in
            func letter(_ i: Int) -> Bool { (b[i] | 0x20) >= UInt8(ascii: "a") && (b[i] | 0x20) <= UInt8(ascii: "z") }
            func digits(_ i: Int, _ n: Int) -> Int? {
                var value = 0
                for k in i..<(i + n) {
                    guard b[k] >= UInt8(ascii: "0"), b[k] <= UInt8(ascii: "9") else { return nil }
                    value = value * 10 + Int(b[k] - UInt8(ascii: "0"))
                }
                return value
            }
            guard letter(0), letter(1), letter(2), b[3] == UInt8(ascii: ","), b[4] == UInt8(ascii: " "),
                  b[7] == UInt8(ascii: " "), letter(8), letter(9), letter(10), b[11] == UInt8(ascii: " "),
                  b[16] == UInt8(ascii: " "), b[19] == UInt8(ascii: ":"), b[22] == UInt8(ascii: ":"),
                  b[25] == UInt8(ascii: " "), b[26] == UInt8(ascii: "G"), b[27] == UInt8(ascii: "M"), b[28] == UInt8(ascii: "T"),
                  let day = digits(5, 2), let year = digits(12, 4), let hour = digits(17, 2), let minute = digits(20, 2),
                  let second = digits(23, 2) else { return nil }
            let month = String(decoding: UnsafeBufferPointer(rebasing: b[8..<11]), as: UTF8.self).lowercased()
            guard let index = months.firstIndex(of: month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
            let days = daysFromCivil(year: year, month: index + 1, day: day)
            return Double(days * 86_400 + hour * 3600 + minute * 60 + second)
        } ?? nil
    }

    /// RFC 1123 form of `seconds` since 1970, to the second (the fraction is dropped, toward
    /// the past). Outside `formattable` the nearer end is written (HTTP has four digits for
    /// the year); NaN, no time, is written as the epoch.
    static func format(_ seconds: Double) -> String {
        let clamped = seconds.isNaN ? 0 : min(max(seconds, formattable.lowerBound), formattable.upperBound)
        let total = Int(clamped.rounded(.down))
        let days = total >= 0 ? total / 86_400 : (total - 86_399) / 86_400
        let rest = total - days * 86_400
        let (year, month, day) = civilFromDays(days)
        let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][((days % 7) + 7) % 7]
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let yearText = String(year)
        let fourDigits = String(repeating: "0", count: max(0, 4 - yearText.count)) + yearText
        return "\(weekday), \(two(day)) \(months[month - 1].capitalized) \(fourDigits) \(two(rest / 3600)):\(two(rest / 60 % 60)):\(two(rest % 60)) GMT"
    }

    private static func parseTime(_ token: String) -> (Int, Int, Int)? {
        let parts = token.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, let h = UInt8(parts[0]), let m = UInt8(parts[1]), let s = UInt8(parts[2]) else { return nil }
        return (Int(h), Int(m), Int(s))
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    private static func civilFromDays(_ days: Int) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
