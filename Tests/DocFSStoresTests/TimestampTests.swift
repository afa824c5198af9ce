// Timestamp: every conversion is total. Times beyond Int64 nanoseconds (1677-09-21 ..
// 2262-04-11) saturate to the nearer end, NaN is no time (the epoch), and text round-trips with
// its sign (half a second before 1970 stays there). DocFSStore has no test target of its own.

import DocFSStore
import Testing

@Suite("Timestamp")
struct TimestampTests {
    @Test("seconds as a Double saturate; NaN is the epoch", arguments: [
        (1e300, Timestamp.latest), (-1e300, .earliest), (.infinity, .latest), (-.infinity, .earliest),
        (10_413_792_000, .latest),       // 2300-01-01
        (-11_644_473_600, .earliest),    // 1601-01-01
        (-30_610_224_000, .earliest),    // 1000-01-01
        (9_223_372_037, .latest),        // just past 2262-04-11 23:47:16.854775807
        (.nan, Timestamp(nanoseconds: 0)),
    ] as [(Double, Timestamp)])
    func doubleSeconds(seconds: Double, expected: Timestamp) {
        #expect(Timestamp(seconds: seconds) == expected)
    }

    @Test func doubleSecondsInRangeAreKept() {
        #expect(Timestamp(seconds: 2_147_483_648).nanoseconds == 2_147_483_648_000_000_000)  // 2038-01-19 03:14:08
        #expect(Timestamp(seconds: -2_208_988_800).nanoseconds == -2_208_988_800_000_000_000)  // 1900-01-01
        #expect(Timestamp(seconds: -0.5).nanoseconds == -500_000_000)
    }

    @Test("whole seconds and nanoseconds saturate", arguments: [
        (10_413_792_000, 0, Timestamp.latest),          // 2300-01-01, `touch -d 2300-01-01`
        (-11_644_473_600, 0, .earliest),                // 1601-01-01
        (253_402_300_799, 999_999_999, .latest),        // 9999-12-31 23:59:59.999999999
        (.max, 999_999_999, .latest),
        (.min, 0, .earliest),
        (.min, -1, .earliest),                          // the carry itself overflows
        (.max, 1_000_000_000, .latest),
        (-9_223_372_036, -854_775_809, .earliest),      // one nanosecond before the first instant
        (9_223_372_036, 854_775_808, .latest),          // one nanosecond after the last
    ] as [(Int64, Int64, Timestamp)])
    func secondsAndNanoseconds(seconds: Int64, nanoseconds: Int64, expected: Timestamp) {
        #expect(Timestamp(seconds: seconds, nanoseconds: nanoseconds) == expected)
    }

    @Test func secondsAndNanosecondsAtTheEdgesAreExact() {
        #expect(Timestamp(seconds: -9_223_372_036, nanoseconds: -854_775_808) == .earliest)
        #expect(Timestamp(seconds: -9_223_372_037, nanoseconds: 145_224_192) == .earliest)
        #expect(Timestamp(seconds: 9_223_372_036, nanoseconds: 854_775_807) == .latest)
        #expect(Timestamp(seconds: -1, nanoseconds: 500_000_000).nanoseconds == -500_000_000)
        #expect(Timestamp(seconds: 5, nanoseconds: 2_500_000_000).nanoseconds == 7_500_000_000)  // nanoseconds carry
        #expect(Timestamp(integerLiteral: .max) == .latest)
    }

    @Test func partsOfTheExtremesAreAValidTimespec() {
        #expect(Timestamp.earliest.parts == (-9_223_372_037, 145_224_192))
        #expect(Timestamp.latest.parts == (9_223_372_036, 854_775_807))
        #expect(Timestamp(nanoseconds: -500_000_000).parts == (-1, 500_000_000))
    }

    @Test("text keeps its sign and reads back", arguments: [
        (Timestamp(nanoseconds: -500_000_000), "-0.500000000"),      // 1969-12-31 23:59:59.5
        (Timestamp(nanoseconds: -1_500_000_000), "-1.500000000"),
        (Timestamp(nanoseconds: -2_208_988_800_000_000_000), "-2208988800"),
        (Timestamp(nanoseconds: 1_700_000_000_000_000_001), "1700000000.000000001"),
        (.earliest, "-9223372036.854775808"),
        (.latest, "9223372036.854775807"),
        (Timestamp(nanoseconds: 0), "0"),
    ] as [(Timestamp, String)])
    func decimalSeconds(time: Timestamp, text: String) {
        #expect(time.decimalSeconds == text)
        // Read back through a Double: exact to the microsecond for times of today.
        let back = Timestamp(decimalSeconds: text)
        #expect(back.map { abs($0.nanoseconds.distance(to: time.nanoseconds)) <= 1_000 } == true)
    }

    @Test func descriptionHasTheSignInFront() {
        #expect(Timestamp(nanoseconds: -500_000_000).description == "-0.500000000")
        #expect(Timestamp(nanoseconds: 0).description == "0.000000000")
    }

    @Test("decimal text from anyone parses without trapping", arguments: [
        ("nan", nil), ("NaN", nil), ("", nil), ("yesterday", nil),
        ("1e300", Timestamp.latest), ("-1e300", .earliest), ("inf", .latest), ("-inf", .earliest),
        (" 1700000000 ", Timestamp(nanoseconds: 1_700_000_000_000_000_000)),
        ("-0.5", Timestamp(nanoseconds: -500_000_000)),
    ] as [(String, Timestamp?)])
    func decimalText(text: String, expected: Timestamp?) {
        #expect(Timestamp(decimalSeconds: text) == expected)
    }
}
