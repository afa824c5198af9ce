// Listings read as they stream and bounded (issues 9 and 10): a WebDAV listing comes to the
// core in pages while its body is still arriving, a name that is not UTF-8 costs only itself,
// a listing over its entry bound is cut with an error, and an S3 server that keeps saying
// "truncated" (fresh tokens, or the same token again) is cut instead of followed for ever.

import DocFSStore
@testable import DocFSStores
import Foundation
import Testing

@Suite("Listings streamed and bounded")
struct ListingBoundsTests {
    static func multistatus(_ hrefs: [[UInt8]]) -> [UInt8] {
        var body = Array("<?xml version=\"1.0\"?><D:multistatus xmlns:D=\"DAV:\">".utf8)
        body += Array("<D:response><D:href>/base/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>".utf8)
        for href in hrefs {
            body += Array("<D:response><D:href>".utf8) + href
            body += Array("</D:href><D:propstat><D:prop><D:resourcetype/><D:getcontentlength>7</D:getcontentlength></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n".utf8)
        }
        return body + Array("</D:multistatus>".utf8)
    }

    /// The big listings' tests are about pages, not deadlines: a unit run beside a build once
    /// left one without a byte read for the default 30 s (`readTimeout`).
    static let patient = HTTPTimeouts(idle: .seconds(180), base: .seconds(180))

    static func drain(_ store: any Store, _ directory: StorePath = .root, limit: Int = 10_000) async throws -> (names: [String], pages: Int) {
        var names: [String] = []
        var token: PageToken?
        var pages = 0
        repeat {
            let page = try await store.list(directory, page: token)
            names += page.entries.map(\.name)
            token = page.next
            pages += 1
        } while token != nil && pages < limit
        return (names, pages)
    }

    @Test func aBigWebDAVListingComesInPages() async throws {
        let hrefs = (0..<2500).map { Array("/base/file-\($0).txt".utf8) }
        let body = Self.multistatus(hrefs)
        let server = try CannedHTTPServer { _ in CannedResponse("207 Multi-Status", body: body) }
        defer { server.stop() }
        let store = try WebDAVStore(baseURL: "http://127.0.0.1:\(server.port)/base/", timeouts: Self.patient, logger: testLogger)
        let listed = await Result(catching: { try await Self.drain(store) })
        await store.shutdown()
        let (names, pages) = try listed.get()
        #expect(pages == 3, "2,500 entries in pages of 1,000")
        #expect(names == (0..<2500).map { "file-\($0).txt" })
        #expect(server.requests.count == 1, "one PROPFIND for all pages")
    }

    @Test func aNameThatIsNotUTF8CostsOnlyItself() async throws {
        let body = Self.multistatus([Array("/base/good-1".utf8), Array("/base/raw".utf8) + [0xFF, 0xFE],
                                     Array("/base/pct%FF%FE".utf8), Array("/base/good-2".utf8)])
        try await withCannedServer({ _ in CannedResponse("207 Multi-Status", body: body) }) { _, store in
            let page = try await store.list(.root, page: nil)
            #expect(page.entries.map(\.name) == ["good-1", "good-2"])
        }
    }

    @Test func aWebDAVListingOverItsBoundIsCut() async throws {
        let hrefs = (0..<5000).map { Array("/base/f\($0)".utf8) }
        let body = Self.multistatus(hrefs)
        let server = try CannedHTTPServer { _ in CannedResponse("207 Multi-Status", body: body) }
        defer { server.stop() }
        let store = try WebDAVStore(baseURL: "http://127.0.0.1:\(server.port)/base/", timeouts: Self.patient, logger: testLogger,
                                    listingLimits: ListingLimits(maximumEntries: 1200))
        let listed = await Result(catching: { try await Self.drain(store) })
        await store.shutdown()
        #expect(throws: StoreError.self) { try listed.get() }
        if case .failure(let error as StoreError) = listed, case .protocolError(let message) = error {
            #expect(message.contains("more than 1200 entries"))
        }
    }

    @Test func aDroppedWebDAVListingResumesAfterItsLastName() async throws {
        let body = Self.multistatus((0..<7).map { Array("/base/n\($0)".utf8) })
        let server = try CannedHTTPServer { _ in CannedResponse("207 Multi-Status", body: body) }
        defer { server.stop() }
        let store = try WebDAVStore(baseURL: "http://127.0.0.1:\(server.port)/base/", logger: testLogger,
                                    listingLimits: ListingLimits(pageSize: 3))
        let resumed = await Result(catching: { try await store.list(.root, page: PageToken("999999/n2")) })
        let gone = await Result(catching: { try await store.list(.root, page: PageToken("999999/not-there")) })
        await store.shutdown()
        #expect(try resumed.get().entries.map(\.name) == ["n3", "n4", "n5"])
        #expect(throws: StoreError.self) { try gone.get() }
    }

    static func s3Page(truncated: Bool, token: String?, key: String) -> [UInt8] {
        var xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>b</Name><Prefix></Prefix><EncodingType>url</EncodingType>"
        xml += "<IsTruncated>\(truncated)</IsTruncated>"
        if let token { xml += "<NextContinuationToken>\(token)</NextContinuationToken>" }
        xml += "<Contents><Key>\(key)</Key><Size>1</Size></Contents></ListBucketResult>"
        return Array(xml.utf8)
    }

    static func withS3(_ handler: @escaping @Sendable (CannedRequest) -> CannedResponse,
                       _ body: (S3Store) async throws -> Void) async throws {
        let server = try CannedHTTPServer(handler)
        defer { server.stop() }
        var configuration = S3Store.Configuration(bucket: "b", endpoint: "http://127.0.0.1:\(server.port)", pathStyle: true,
                                                  noSignRequest: true)
        configuration.listingLimits = ListingLimits(maximumEntries: 1000)
        let store = try S3Store(configuration: configuration, logger: testLogger)
        let result = await Result(catching: { try await body(store) })
        await store.shutdown()
        try result.get()
    }

    @Test func anS3ListingThatRepeatsItsTokenIsCut() async throws {
        try await Self.withS3({ _ in CannedResponse("200 OK", body: Self.s3Page(truncated: true, token: "same", key: "k")) }) { store in
            let listed = await Result(catching: { try await Self.drain(store, limit: 100) })
            #expect(throws: StoreError.self) { try listed.get() }
        }
    }

    @Test func anS3ListingThatIsAlwaysTruncatedIsCut() async throws {
        let counter = Counter()
        try await Self.withS3({ _ in
            let n = counter.next()
            return CannedResponse("200 OK", body: Self.s3Page(truncated: true, token: "t\(n)", key: "k\(n)"))
        }) { store in
            let listed = await Result(catching: { try await Self.drain(store, limit: 1000) })
            #expect(throws: StoreError.self) { try listed.get() }
            // 1,000 entries allowed: at most 10 + 1000 / 100 pages.
            #expect(counter.value <= ListingLimits(maximumEntries: 1000).maximumPages)
        }
    }
}

/// A thread-safe count of the requests a canned handler saw.
/// `@unchecked Sendable`: `count` is only touched under `lock`.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func next() -> Int { lock.lock(); defer { lock.unlock() }; count += 1; return count }
    var value: Int { lock.lock(); defer { lock.unlock() }; return count }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
