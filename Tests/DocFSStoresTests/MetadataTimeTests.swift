// Times that stores keep as text: S3's `x-amz-meta-mtime` (s3fs's convention) and docfs's WebDAV
// dead property `mtime`. Anyone can write them: `nan`, `1e300`, `-1e300` must not trap, and
// what docfs writes must read back as the same instant, also before 1970.

import DocFSStore
@testable import DocFSStores
import NIOHTTP1
import Testing

@Suite("Times in store metadata")
struct MetadataTimeTests {
    private func s3Modified(_ value: String) -> Double? {
        S3Metadata.modified(in: HTTPHeaders([(S3Metadata.mtimeHeader, value)]))
    }

    @Test("x-amz-meta-mtime from anyone", arguments: [
        ("nan", nil), ("-nan", nil), ("", nil), ("soon", nil),
        ("1e300", Timestamp.latest.seconds), ("-1e300", Timestamp.earliest.seconds),
        ("inf", Timestamp.latest.seconds),
        ("1700000000", 1_700_000_000), ("1700000000.5", 1_700_000_000.5),
        ("1600000000.25", 1_600_000_000.25),             // as written, not rounded through nanoseconds
        ("-11644473600", Timestamp.earliest.seconds),   // 1601-01-01: the nearest instant docfs holds
        ("10413792000", Timestamp.latest.seconds),      // 2300-01-01
    ] as [(String, Double?)])
    func s3Parse(value: String, expected: Double?) {
        #expect(s3Modified(value) == expected)
    }

    @Test("what docfs writes to S3 reads back", arguments: [
        Timestamp(nanoseconds: -500_000_000),           // 1969-12-31 23:59:59.5
        Timestamp(nanoseconds: -2_208_988_800_000_000_000),  // 1900-01-01
        Timestamp(nanoseconds: 2_147_483_648_000_000_000),   // 2038-01-19 03:14:08
        .earliest, .latest,
        Timestamp(seconds: -30_610_224_000),            // 1000-01-01, saturated
        Timestamp(seconds: 253_402_300_799),            // 9999-12-31, saturated
    ])
    func s3RoundTrip(time: Timestamp) throws {
        let headers = S3Metadata.headers(for: StoreAttributes(modified: time))
        let value = try #require(headers.first { $0.name == S3Metadata.mtimeHeader }?.value)
        let back = try #require(s3Modified(value))
        #expect(abs(Timestamp(seconds: back).nanoseconds.distance(to: time.nanoseconds)) <= 1_000, "\(value)")
    }

    @Test("a dead property mtime from anyone", arguments: [
        ("nan", nil), ("", nil),
        ("1e300", Timestamp.latest.seconds), ("-1e300", Timestamp.earliest.seconds),
        ("-0.500000000", -0.5), ("1700000000", 1_700_000_000),
    ] as [(String, Double?)])
    func deadProperty(value: String, expected: Double?) {
        var properties = PosixProperties()
        properties.set("mtime", to: value)
        #expect(properties.modified == expected)
    }
}
