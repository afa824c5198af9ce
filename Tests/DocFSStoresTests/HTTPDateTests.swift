// HTTP dates (WebDAV getlastmodified, Last-Modified of WebDAV and S3): every year 1000..9999
// round-trips exactly, years beyond parse without trapping, and formatting never traps.

import DocFSStore
@testable import DocFSStores
import Testing

@Suite("HTTP dates")
struct HTTPDateTests {
    @Test("years 1000 to 9999 round-trip", arguments: [
        ("Wed, 01 Jan 1000 00:00:00 GMT", -30_610_224_000.0),
        ("Mon, 01 Jan 1601 00:00:00 GMT", -11_644_473_600),
        ("Tue, 21 Sep 1677 00:12:43 GMT", -9_223_372_037),
        ("Mon, 01 Jan 1900 00:00:00 GMT", -2_208_988_800),
        ("Wed, 31 Dec 1969 23:59:59 GMT", -1),
        ("Tue, 19 Jan 2038 03:14:08 GMT", 2_147_483_648),
        ("Sat, 12 Apr 2262 00:00:00 GMT", 9_223_372_800),
        ("Mon, 01 Jan 2300 00:00:00 GMT", 10_413_792_000),
        ("Fri, 31 Dec 9999 23:59:59 GMT", 253_402_300_799),
    ])
    func roundTrip(text: String, seconds: Double) {
        #expect(HTTPDate.parse(text) == seconds)
        #expect(HTTPDate.format(seconds) == text)
    }

    @Test func everyYearFrom1000To9999RoundTrips() {
        var mismatches: [String] = []
        for year in 1000...9999 {
            // 1 March of the year at 12:34:56: after February, so leap days of the year count.
            let text = "01 Mar \(year) 12:34:56 GMT"
            guard let seconds = HTTPDate.parse("Xxx, " + text) else { mismatches.append("\(year): no parse"); continue }
            let formatted = HTTPDate.format(seconds)
            if !formatted.hasSuffix(text) || HTTPDate.parse(formatted) != seconds { mismatches.append("\(year): \(formatted)") }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(10))")
    }

    @Test func outOfRangeDatesSaturateAsTimestamps() throws {
        let past = try #require(HTTPDate.parse("Wed, 01 Jan 1000 00:00:00 GMT"))
        let future = try #require(HTTPDate.parse("Mon, 01 Jan 2300 00:00:00 GMT"))
        #expect(Timestamp(seconds: past) == .earliest)
        #expect(Timestamp(seconds: future) == .latest)
    }

    @Test func yearsBeyondFourDigitsParseWithoutTrapping() throws {
        let fiveDigits = try #require(HTTPDate.parse("Sat, 01 Jan 10000 00:00:00 GMT"))
        #expect(fiveDigits == 253_402_300_800)
        let absurd = try #require(HTTPDate.parse("Sat, 01 Jan 99999999999999999999999999 00:00:00 GMT"))
        #expect(absurd > fiveDigits)
        #expect(Timestamp(seconds: absurd) == .latest)
        #expect(HTTPDate.parse("Mon, 01 Jan 0001 00:00:00 GMT") == -62_135_596_800)
        #expect(HTTPDate.parse("Sat, 15 Jun 0999 12:30:45 GMT") == -30_627_458_955)
    }

    @Test func malformedDatesAreNil() {
        #expect(HTTPDate.parse("Mon, 01 Jan 2000 99999999999999999999:00:00 GMT") == nil)
        #expect(HTTPDate.parse("Mon, 00 Jan 2000 00:00:00 GMT") == nil)
        #expect(HTTPDate.parse("Mon, 01 Foo 2000 00:00:00 GMT") == nil)
        #expect(HTTPDate.parse("Mon, 01 Jan 2000 24:00:00 GMT") == nil)
    }

    @Test func formattingSaturatesAtTheFourDigitYears() {
        #expect(HTTPDate.format(1e300) == "Fri, 31 Dec 9999 23:59:59 GMT")
        #expect(HTTPDate.format(.infinity) == "Fri, 31 Dec 9999 23:59:59 GMT")
        #expect(HTTPDate.format(-1e300) == "Mon, 01 Jan 0001 00:00:00 GMT")
        #expect(HTTPDate.format(.nan) == "Thu, 01 Jan 1970 00:00:00 GMT")
        #expect(HTTPDate.format(-0.5) == "Wed, 31 Dec 1969 23:59:59 GMT")
        #expect(HTTPDate.format(-30_627_458_955) == "Sat, 15 Jun 0999 12:30:45 GMT")
    }
}
