// Names are bytes: `café` in NFC and in NFD are two names for `StorePath`, for the stores'
// listings and for `FileName`, and a `/` or NUL hidden behind a combining mark is still refused.

import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

private let nfc = "caf\u{E9}"
private let nfd = "cafe\u{301}"

@Suite("Names are bytes")
struct NamesAreBytesTests {
    @Test func fileNamesAndPathsCompareBytes() throws {
        #expect(nfc == nfd, "Swift's String: canonical equivalence (the reason for FileName)")
        #expect(FileName(nfc) != FileName(nfd))
        #expect(Set([FileName(nfc), FileName(nfd)]).count == 2)
        #expect(FileName(nfc) == FileName("caf\u{E9}"))
        let a = try StorePath("dir/" + nfc), b = try StorePath("dir/" + nfd)
        #expect(a != b)
        #expect(Set([a, b]).count == 2)
        #expect([a: 1, b: 2][a] == 1)
        #expect((a < b) != (b < a))
        #expect(try StorePath("dir/" + nfc + "/x").isSame(orInside: a))
        #expect(!(try StorePath("dir/" + nfd + "/x").isSame(orInside: a)))
    }

    @Test func slashAndNulBehindACombiningMarkAreRefused() throws {
        #expect(!"a/\u{301}b".contains("/"), "Character-wise, the slash is not there")
        #expect(!StorePath.isValidName("a/\u{301}b"))
        #expect(!StorePath.isValidName("a\0\u{301}"))
        #expect(try StorePath("a/\u{301}b").components == ["a", "\u{301}b"])
        #expect(StorePath.isValidName("..\u{301}"), "not `..`: its own name")
    }

    @Test func localListingKeepsBothNames() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try dir.write(nfc, "precomposed")
        try dir.write(nfd, "decomposed")
        let store = try LocalDirectoryStore(root: dir.path, logger: testLogger)
        let names = try await store.list(.root, page: nil).entries.map { FileName($0.name) }
        #expect(Set(names) == [FileName(nfc), FileName(nfd)])
    }

    @Test func webDAVListingKeepsBothNames() async throws {
        let store = try WebDAVStore(baseURL: "http://127.0.0.1:1/dav/", logger: testLogger)
        let responses = [
            WebDAVResponse(href: "/dav/", isCollection: true),
            WebDAVResponse(href: "/dav/caf%C3%A9", isCollection: false, contentLength: 11),
            WebDAVResponse(href: "/dav/cafe%CC%81", isCollection: false, contentLength: 10),
            WebDAVResponse(href: "/dav/caf%C3%A9", isCollection: false, contentLength: 11),
        ]
        let children = try? store.listing(of: .root, from: responses).children
        await store.shutdown()
        #expect(children?.map { FileName($0.name) } == [FileName(nfc), FileName(nfd)])
        #expect(children?.map(\.size) == [11, 10])
    }
}
