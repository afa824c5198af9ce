// docfs's POSIX dead properties: what a PROPFIND reports, what a PROPPATCH sends, and when a
// stored modification time is believed. Fixed samples; the round trip through a real server
// (wsgidav) is in the integration suite.

import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("WebDAV dead properties")
struct WebDAVDeadPropertiesTests {
    @Test func aPropfindReportsModeAndTimeOnlyFromFoundProperties() throws {
        let body = """
            <?xml version="1.0" encoding="utf-8"?>
            <D:multistatus xmlns:D="DAV:" xmlns:X="urn:x-docfs:posix">
              <D:response><D:href>/dav/a.txt</D:href>
                <D:propstat><D:prop><D:getetag>"v2"</D:getetag><X:mode>640</X:mode><X:mtime>1600000000.25</X:mtime>
                  <X:mtime-of>"v2"</X:mtime-of></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
              </D:response>
              <D:response><D:href>/dav/b.txt</D:href>
                <D:propstat><D:prop><D:getetag>"w"</D:getetag></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
                <D:propstat><D:prop><X:mode>777</X:mode><X:mtime/></D:prop><D:status>HTTP/1.1 404 Not Found</D:status></D:propstat>
              </D:response>
            </D:multistatus>
            """
        let responses = try WebDAVMultistatus.parse(Data(body.utf8))
        #expect(responses[0].posix == PosixProperties(mode: 0o640, modified: 1_600_000_000.25, modifiedOf: "\"v2\""))
        #expect(responses[0].propstatStatuses == [200])
        #expect(responses[1].posix == PosixProperties(), "a 404 propstat carries no values")
        #expect(responses[1].propstatStatuses == [200, 404])
    }

    @Test func aStoredTimeIsBelievedOnlyForTheContentItWasSetFor() {
        let properties = PosixProperties(mode: 0o600, modified: 1_600_000_000, modifiedOf: "\"v2\"")
        #expect(properties.modified(forVersion: ETag("\"v2\"")) == 1_600_000_000)
        #expect(properties.modified(forVersion: ETag("W/\"v2\"")) == 1_600_000_000)
        // Another client wrote new content since: its own time wins.
        #expect(properties.modified(forVersion: ETag("\"v3\"")) == nil)
        #expect(properties.modified(forVersion: nil) == nil)
    }

    @Test func aProppatchSetsOctalModeAndTheTimeWithItsVersion() throws {
        let body = PosixProperties.proppatchBody(StoreAttributes(mode: 0o100644, modified: Timestamp(nanoseconds: 1_600_000_000_500_000_000)),
                                                 version: ETag("\"a&b\""))
        #expect(body.contains("<P:mode>644</P:mode>"), "permission bits only, in octal")
        #expect(body.contains("<P:mtime>1600000000.500000000</P:mtime>"))
        #expect(body.contains("<P:mtime-of>&quot;a&amp;b&quot;</P:mtime-of>"))
        #expect(body.contains("xmlns:P=\"urn:x-docfs:posix\""))
        // No version known: no time (it could not be told apart from a later one).
        #expect(!PosixProperties.proppatchBody(StoreAttributes(modified: .now), version: nil).contains("mtime"))
    }

    @Test func aRefusedProppatchShowsInItsStatuses() throws {
        let body = """
            <?xml version="1.0" encoding="utf-8"?>
            <multistatus xmlns="DAV:"><response><href>/dav/a.txt</href>
              <propstat><prop><mode xmlns="urn:x-docfs:posix"/></prop><status>HTTP/1.1 403 Forbidden</status></propstat>
            </response></multistatus>
            """
        #expect(try WebDAVMultistatus.parse(Data(body.utf8)).flatMap(\.propstatStatuses) == [403])
    }
}
