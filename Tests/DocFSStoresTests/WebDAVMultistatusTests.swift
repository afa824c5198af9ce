// The PROPFIND parser, dates and the listing filter, on fixed samples (href decoding: PercentEncodingTests).

import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("WebDAV multistatus")
struct WebDAVMultistatusTests {
    static let sample = """
        <?xml version="1.0" encoding="utf-8"?>
        <d:multistatus xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns">
          <d:response>
            <d:href>http://example.com:8080/dav/docs/</d:href>
            <d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype>
              <d:getlastmodified>Sun, 06 Nov 1994 08:49:37 GMT</d:getlastmodified></d:prop>
              <d:status>HTTP/1.1 200 OK</d:status></d:propstat>
          </d:response>
          <d:response>
            <d:href>http://example.com:8080/dav/docs/with%20space.txt</d:href>
            <d:propstat><d:prop><d:resourcetype/><d:getcontentlength>12</d:getcontentlength>
              <d:getetag>"abc"</d:getetag><d:getlastmodified>Sunday, 06-Nov-94 08:49:37 GMT</d:getlastmodified></d:prop>
              <d:status>HTTP/1.1 200 OK</d:status></d:propstat>
            <d:propstat><d:prop><oc:size/></d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat>
          </d:response>
          <d:response>
            <d:href>/dav/docs/%C3%BCni%63ode%25%23</d:href>
            <d:propstat><d:prop><d:resourcetype><d:collection/></d:resourcetype>
              <d:getetag>unquoted</d:getetag><d:getlastmodified>Sun Nov  6 08:49:37 1994</d:getlastmodified></d:prop>
              <d:status>HTTP/1.1 200 OK</d:status></d:propstat>
          </d:response>
          <d:response><d:href>/dav/docs/..</d:href>
            <d:propstat><d:prop><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
          <d:response><d:href>/dav/docs/a%2Fb</d:href>
            <d:propstat><d:prop><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
          <d:response><d:href>/dav/docs/sub/deeper</d:href>
            <d:propstat><d:prop><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
          <d:response><d:href>/elsewhere/x</d:href>
            <d:propstat><d:prop><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
          <d:response><d:href>/dav/docs/nul%00name</d:href>
            <d:propstat><d:prop><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
          <d:response><d:href>/dav/docs/bad%FFutf8</d:href>
            <d:propstat><d:prop><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
          <d:response><d:href>/dav/docs/gone.txt</d:href><d:status>HTTP/1.1 404 Not Found</d:status></d:response>
          <d:response><d:href>/dav/docs/with%20space.txt</d:href>
            <d:propstat><d:prop><d:resourcetype/></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
        </d:multistatus>
        """

    /// Names are resolved once and remembered while the bindings in scope stay: a binding made
    /// and undone inside an entry (rclone declares a default namespace on each property it does
    /// not have) must still change what a name means inside it, and only there.
    @Test func aNameMeansWhatTheBindingsOpenAtItsElementSay() throws {
        let body = """
            <D:multistatus xmlns:D="DAV:">
              <D:response><D:href>/dav/a</D:href><D:propstat><D:prop>
                <mode xmlns="urn:x-docfs:posix">644</mode>
                <getetag xmlns="DAV:">"e1"</getetag>
                <getcontentlength>5</getcontentlength>
                <X:getcontentlength xmlns:X="DAV:">7</X:getcontentlength>
                <D:getlastmodified xmlns:D="urn:elsewhere">not a date</D:getlastmodified>
                <D:getlastmodified>Sun, 06 Nov 1994 08:49:37 GMT</D:getlastmodified>
                <mode>755</mode>
              </D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
              <D:response><D:href>/dav/b</D:href><D:propstat><D:prop xmlns="urn:x-docfs:posix">
                <mode>600</mode><D:getcontentlength>3</D:getcontentlength>
              </D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
              <D:response><D:href>/dav/c</D:href><D:propstat><D:prop>
                <mode>700</mode><getetag xmlns="DAV:">"e3"</getetag><getetag>"not DAV"</getetag>
              </D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            </D:multistatus>
            """
        let responses = try WebDAVMultistatus.parse(Data(body.utf8))
        #expect(responses.map(\.href) == ["/dav/a", "/dav/b", "/dav/c"])
        #expect(responses[0].posix.mode == 0o644)
        #expect(responses[0].etag == "\"e1\"")
        #expect(responses[0].contentLength == 7)
        #expect(responses[0].lastModified == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(responses[1].posix.mode == 0o600)
        #expect(responses[1].contentLength == 3)
        #expect(responses[2].posix.mode == nil)
        #expect(responses[2].etag == "\"e3\"")
    }

    @Test func parsesResponsesAndProperties() throws {
        let responses = try WebDAVMultistatus.parse(Data(Self.sample.utf8))
        #expect(responses.count == 11)
        #expect(responses[0].isCollection)
        #expect(responses[1].href == "http://example.com:8080/dav/docs/with%20space.txt")
        #expect(!responses[1].isCollection)
        #expect(responses[1].contentLength == 12)
        #expect(responses[1].etag == "\"abc\"")
        #expect(responses[2].isCollection)
        #expect(responses[9].status == 404)
    }

    /// rclone declares `xmlns:D="DAV:"` again inside every entry; another server may bind the
    /// prefix to another namespace for a while, and then `D:` names are not WebDAV's there.
    @Test func aPrefixBoundAgainMeansWhatItsInnermostBindingSays() throws {
        let xml = """
            <D:multistatus xmlns:D="DAV:">
              <D:response><D:href>/a</D:href><D:propstat><D:prop>
                <D:supportedlock><D:lockentry xmlns:D="DAV:"><D:locktype><D:write/></D:locktype></D:lockentry></D:supportedlock>
                <D:getcontentlength>5</D:getcontentlength>
                <X:wrapper xmlns:D="urn:not-dav" xmlns:X="urn:x"><D:getcontentlength>99</D:getcontentlength>
                  <D:resourcetype><D:collection/></D:resourcetype></X:wrapper>
                <D:getetag>"e1"</D:getetag>
              </D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
              <D:response><D:href>/b</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype>
              </D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            </D:multistatus>
            """
        let responses = try WebDAVMultistatus.parse(Data(xml.utf8))
        #expect(responses.map(\.href) == ["/a", "/b"])
        #expect(responses[0].contentLength == 5 && responses[0].etag == "\"e1\"" && !responses[0].isCollection)
        #expect(responses[1].isCollection)
    }

    @Test func listingKeepsOnlySafeDirectChildren() async throws {
        try await withWebDAVStore("http://example.com:8080/dav/docs") { store in
            let responses = try WebDAVMultistatus.parse(Data(Self.sample.utf8))
            let listing = try store.listing(of: .root, from: responses)
            #expect(listing.children.map(\.name) == ["with space.txt", "ünicode%#"])
            let file = listing.children[0]
            #expect(file.kind == .file)
            #expect(file.size == 12)
            #expect(file.etag == ETag("\"abc\""))
            #expect(file.modified == 784_111_777)
            let directory = listing.children[1]
            #expect(directory.kind == .directory)
            #expect(directory.etag == ETag("\"unquoted\""), "unquoted ETags are quoted")
            #expect(directory.modified == 784_111_777)
            // `..`, `a%2Fb`, a grandchild, another collection, NUL and bad UTF-8: skipped, counted.
            #expect(listing.skipped == 6)
        }
    }

    /// Apache's answer for a name locked before it was written (RFC 2518's lock-null
    /// resource): listed with an empty resource type, and 404 for length, time and version.
    static let lockNull = """
        <D:multistatus xmlns:D="DAV:"><D:response><D:href>/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/>
        </D:resourcetype><D:getlastmodified>Sun, 06 Nov 1994 08:49:37 GMT</D:getlastmodified></D:prop>
        <D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
        <D:response><D:href>/new.txt</D:href><D:propstat><D:prop><D:resourcetype/></D:prop><D:status>HTTP/1.1 200 OK</D:status>
        </D:propstat><D:propstat><D:prop><D:getcontentlength/><D:getlastmodified/><D:getetag/></D:prop>
        <D:status>HTTP/1.1 404 Not Found</D:status></D:propstat></D:response></D:multistatus>
        """

    @Test func aNameLockedBeforeItWasWrittenIsNotAFile() async throws {
        try await withWebDAVStore("http://h/") { store in
            let responses = try WebDAVMultistatus.parse(Data(Self.lockNull.utf8))
            #expect(responses[1].isLockNull)
            #expect(!responses[0].isLockNull)
            let listing = try store.listing(of: .root, from: responses)
            #expect(listing.children.isEmpty)
            #expect(listing.skipped == 0)
        }
    }

    @Test func listingOfAFileIsNotADirectory() async throws {
        try await withWebDAVStore("http://h/") { store in
            let xml = """
                <D:multistatus xmlns:D="DAV:"><D:response><D:href>/f.txt</D:href><D:propstat><D:prop><D:resourcetype/>
                </D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response></D:multistatus>
                """
            let responses = try WebDAVMultistatus.parse(Data(xml.utf8))
            #expect(throws: StoreError.notADirectory(path("f.txt"))) { try store.listing(of: path("f.txt"), from: responses) }
        }
    }

    @Test func refusesMalformedXML() {
        #expect(throws: StoreError.self) { try WebDAVMultistatus.parse(Data("<D:multistatus xmlns:D=\"DAV:\"><D:response>".utf8)) }
        #expect(throws: StoreError.self) { try WebDAVMultistatus.parse(Data("<html><body>login</body></html>".utf8)) }
    }

    /// An external entity is neither fetched nor expanded: the parser (external entities off)
    /// accepts the document and drops the reference, so the href is what surrounds it.
    @Test func externalEntitiesAreNotExpanded() throws {
        let xxe = """
            <?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>
            <D:multistatus xmlns:D="DAV:"><D:response><D:href>/&x;</D:href></D:response></D:multistatus>
            """
        let responses = try WebDAVMultistatus.parse(Data(xxe.utf8))
        #expect(responses.map(\.href) == ["/"])
    }

    @Test func parsesHTTPDates() {
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == 784_111_777)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == 784_111_777)
        #expect(HTTPDate.parse("Thu, 01 Jan 1970 00:00:00 GMT") == 0)
        #expect(HTTPDate.parse("Tue, 29 Feb 2028 23:59:59 GMT") == 1_835_481_599)
        #expect(HTTPDate.parse("yesterday") == nil)
        #expect(HTTPDate.parse("") == nil)
        #expect(HTTPDate.format(784_111_777) == "Sun, 06 Nov 1994 08:49:37 GMT")
    }

    @Test func parsesContentRange() {
        let range = ContentRange("bytes 10-19/100")
        #expect(range?.first == 10 && range?.last == 19 && range?.total == 100)
        #expect(ContentRange("bytes 0-0/*")?.total == nil)
        #expect(ContentRange("bytes */100") == nil)
        #expect(ContentRange("items 1-2/3") == nil)
    }

    @Test func baseURLsAndIdentity() async throws {
        try await withWebDAVStore("https://alice:s3cret@example.com/remote.php/dav/files/alice%20b/") { store in
            #expect(store.identity == StoreIdentity(kind: "webdav", location: "https://example.com/remote.php/dav/files/alice%20b"))
            #expect(!store.identity.description.contains("s3cret"))
            #expect(store.url(path("a b/c#d")) == "https://example.com/remote.php/dav/files/alice%20b/a%20b/c%23d")
            #expect(store.url(path("dir"), collection: true) == "https://example.com/remote.php/dav/files/alice%20b/dir/")
        }
        #expect(throws: StoreError.self) { try StoreURL("http://h/a/../b") }
        #expect(throws: StoreError.self) { try StoreURL("ftp://h/") }
        #expect(throws: StoreError.self) { try StoreURL("http://h/?q=1") }
        #expect(StoreURL.redacted("http://u:p@h:1/x") == "http://h:1/x")
    }
}
