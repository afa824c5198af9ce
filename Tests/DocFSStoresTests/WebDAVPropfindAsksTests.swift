// A PROPFIND asks only for what the server can answer: docfs's dead properties until the server
// refuses to keep them, `has-preview` until a file is listed without it.

import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("A PROPFIND asks only what the server answers")
struct WebDAVPropfindAsksTests {
    private func response(_ xml: String) throws -> WebDAVResponse {
        let body = """
            <?xml version="1.0" encoding="utf-8"?>
            <D:multistatus xmlns:D="DAV:" xmlns:nc="http://nextcloud.org/ns">\(xml)</D:multistatus>
            """
        return try #require(try WebDAVMultistatus.parse(Data(body.utf8)).first)
    }

    private let file = """
        <D:propstat><D:prop><D:getcontentlength>3</D:getcontentlength><D:getetag>"v"</D:getetag></D:prop>
        <D:status>HTTP/1.1 200 OK</D:status></D:propstat>
        """

    @Test func aFileWithoutHasPreviewEndsTheQuestion() throws {
        let asks = PropfindAsks()
        #expect(asks.asksPreviews)
        asks.saw(try response("<D:response><D:href>/d/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"))
        #expect(asks.asksPreviews, "a folder says nothing about previews")
        asks.saw(try response("<D:response><D:href>/d/a</D:href>\(file)<D:propstat><D:prop><nc:has-preview/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status></D:propstat></D:response>"))
        #expect(!asks.asksPreviews)
    }

    @Test func aFileWhosePreviewIsFalseKeepsItAsked() throws {
        let asks = PropfindAsks()
        let answered = try response("<D:response><D:href>/d/a</D:href>\(file)<D:propstat><D:prop><nc:has-preview>false</nc:has-preview></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>")
        #expect(answered.answersPreview && !answered.hasPreview)
        asks.saw(answered)
        // A later file without it (a lock-null name, a server's odd entry) changes nothing.
        asks.saw(try response("<D:response><D:href>/d/b</D:href>\(file)</D:response>"))
        #expect(asks.asksPreviews)
    }

    @Test func theBodyLeavesOutWhatIsNotAsked() {
        let full = WebDAVStore.propfindBody(posix: true, previews: true, lockDiscovery: false)
        #expect(full.contains("<P:mode/>") && full.contains("<nc:has-preview/>") && full.contains("<D:getetag/>"))
        let bare = WebDAVStore.propfindBody(posix: false, previews: false, lockDiscovery: true)
        #expect(!bare.contains("P:") && !bare.contains("has-preview") && !bare.contains("xmlns:nc"))
        #expect(bare.contains("<D:resourcetype/><D:getcontentlength/><D:getlastmodified/><D:getetag/><D:lockdiscovery/>"))
    }

    /// rclone's server keeps no dead properties and makes no previews: once a listing and a
    /// refused PROPPATCH showed it, listings ask for the four properties docfs reads of it.
    @Test func rclonesListingsShrinkOnceItShowedWhatItLacks() async throws {
        try await withStore(.rcloneWebDAV, seed: { dir in
            try dir.write("a.txt", "hello")
            try dir.write("sub/b.txt", "inner")
        }) { store, _ in
            let webdav = try #require(store as? WebDAVStore)
            #expect(webdav.propfindBody().contains("has-preview") && webdav.propfindBody().contains("P:mode"))
            _ = try await listAll(store, .root)
            #expect(!webdav.propfindBody().contains("has-preview"), "a file listed without has-preview")
            #expect(webdav.propfindBody().contains("P:mode"), "not refused yet")
            #expect(try await store.setAttributes(try StorePath("a.txt"), StoreAttributes(mode: 0o600)) == false)
            #expect(!webdav.propfindBody().contains("P:"))
            let listed = try await listAll(store, try StorePath("sub"))
            #expect(listed.map(\.name) == ["b.txt"])
            #expect(listed.first?.size == 5 && listed.first?.etag != nil && listed.first?.modified ?? 0 > 0)
            #expect(try await store.stat(try StorePath("a.txt")).size == 5)
        }
    }
}
