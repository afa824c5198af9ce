// Percent-encoding of names and decoding of URL paths (PercentEncoding.swift), shared by the
// WebDAV and S3 stores and the store locator.

@testable import DocFSStores
import Testing

@Suite("Percent-encoding")
struct PercentEncodingTests {
    @Test func decodesPathsOfURLsAndHrefs() {
        #expect(PercentEncoding.decodedPathComponents(of: "http://h:1/a/b%20c/") == ["a", "b c"])
        #expect(PercentEncoding.decodedPathComponents(of: "https://h/") == [])
        #expect(PercentEncoding.decodedPathComponents(of: "/a%2Fb/c") == ["a/b", "c"])
        #expect(PercentEncoding.decodedPathComponents(of: "/100%/x") == ["100%", "x"], "a stray % is kept")
        #expect(PercentEncoding.decodedPathComponents(of: "/caf%C3%A9") == ["café"])
        #expect(PercentEncoding.decodedPathComponents(of: "/bad%C3") == nil)
    }

    @Test func encodesNames() {
        #expect(PercentEncoding.encode("a b#%?.txt") == "a%20b%23%25%3F.txt")
        #expect(PercentEncoding.encode("Az09-._~") == "Az09-._~")
        #expect(PercentEncoding.encode("é") == "%C3%A9")
        #expect(PercentEncoding.encode("a+b&c=d;e") == "a%2Bb%26c%3Dd%3Be")
        for name in awkwardNames + ["é/ü"] {
            let encoded = PercentEncoding.encode(name)
            #expect(!encoded.contains("/"))
            #expect(PercentEncoding.decode(Substring(encoded)) == name)
        }
    }

    @Test func encodesForSigV4KeepingSlashesOnlyWhenAsked() {
        #expect(PercentEncoding.encode("a b/c", keepingSlash: true) == "a%20b/c")
        #expect(PercentEncoding.encode("a b/c") == "a%20b%2Fc")
    }
}
