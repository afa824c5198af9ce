// Unit tests for the pure parts of `docfs serve`: path decoding/encoding, Destination headers,
// byte ranges and ETag matching.

@testable import DocFSServe
import Testing

@Suite struct DAVPathTests {
    @Test func decodesAndEncodesNames() throws {
        let path = try DAVPath(percentEncoded: "/a%20b/%C3%BC%25%23%3F%26/./c")
        #expect(path.components == ["a b", "ü%#?&", "c"])
        #expect(path.href(isDirectory: false) == "/a%20b/%C3%BC%25%23%3F%26/c")
        #expect(path.href(isDirectory: true) == "/a%20b/%C3%BC%25%23%3F%26/c/")
        #expect(try DAVPath(percentEncoded: "/").href(isDirectory: true) == "/")
        #expect(try DAVPath(percentEncoded: "//x//").components == ["x"])
    }

    @Test func refusesTraversalNulAndBadEncoding() {
        for raw in ["/..", "/a/../b", "/a/%2e%2e/b", "/a%2f..%2fb", "/a%00b"] {
            #expect(throws: DAVError.self) { try DAVPath(percentEncoded: raw) }
        }
        #expect((try? DAVPath(percentEncoded: "/%zz")) == nil)
        #expect((try? DAVPath(percentEncoded: "/%C3")) == nil, "invalid UTF-8")
    }

    @Test func namesCompareBytesAndSplitOnTheSlashByte() throws {
        let nfc = try DAVPath(percentEncoded: "/d/caf%C3%A9"), nfd = try DAVPath(percentEncoded: "/d/cafe%CC%81")
        #expect(nfc != nfd, "NFC and NFD are two files on the served file system")
        #expect(Set([nfc, nfd]).count == 2)
        #expect(!nfd.isSame(orInside: nfc))
        #expect(try DAVPath(percentEncoded: "/d/caf%C3%A9/x").isSame(orInside: nfc))
        // A `/` followed by a combining mark is one Character, but still the separator byte.
        #expect(try DAVPath(percentEncoded: "/a/%CC%81b").components == ["a", "\u{301}b"])
        #expect(throws: DAVError.self) { try DAVPath(percentEncoded: "/a/../%CC%81b") }
    }

    @Test func destinationHeaders() {
        #expect(DAVPath.destinationPath("http://host:8080/a%20b/c") == "/a%20b/c")
        #expect(DAVPath.destinationPath("https://host") == "/")
        #expect(DAVPath.destinationPath("/x/y?q=1") == "/x/y")
        #expect(DAVPath.destinationPath("relative") == nil)
    }

    @Test func byteRanges() {
        #expect(ByteRangeRequest(header: "bytes=2-4")?.resolve(size: 10) == 2...4)
        #expect(ByteRangeRequest(header: "bytes=7-")?.resolve(size: 10) == 7...9)
        #expect(ByteRangeRequest(header: "bytes=-3")?.resolve(size: 10) == 7...9)
        #expect(ByteRangeRequest(header: "bytes=-30")?.resolve(size: 10) == 0...9)
        #expect(ByteRangeRequest(header: "bytes=5-100")?.resolve(size: 10) == 5...9)
        #expect(ByteRangeRequest(header: "bytes=10-")?.resolve(size: 10) == nil)
        #expect(ByteRangeRequest(header: "bytes=0-")?.resolve(size: 0) == nil)
        #expect(ByteRangeRequest(header: "bytes=-0")?.resolve(size: 10) == nil)
        #expect(ByteRangeRequest(header: "bytes=1-2,4-5") == nil)
        #expect(ByteRangeRequest(header: "items=1-2") == nil)
        #expect(ByteRangeRequest(header: "bytes=5-2") == nil)
    }

    @Test func etagLists() {
        #expect(ETagMatch.matches("\"a\", \"b\"", etag: "\"b\"", weak: false))
        #expect(ETagMatch.matches("*", etag: "\"b\"", weak: false))
        #expect(!ETagMatch.matches("*", etag: nil, weak: false))
        #expect(!ETagMatch.matches("W/\"b\"", etag: "\"b\"", weak: false))
        #expect(ETagMatch.matches("W/\"b\"", etag: "\"b\"", weak: true))
    }
}
