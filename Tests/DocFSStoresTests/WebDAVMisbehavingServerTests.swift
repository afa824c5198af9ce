// WebDAVStore against a canned HTTP server that misbehaves on purpose: truncated bodies,
// a 200 to a range request, ignored If-Match, hostile listings, auth failures, 5xx.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
@testable import DocFSStores
import Foundation
import Synchronization
import Testing

/// One canned answer: the raw head, the body, and whether to cut the body short.
struct CannedResponse: Sendable {
    var status: String
    var headers: [(String, String)]
    var body: [UInt8]
    /// Send only this many bytes of the body, then close.
    var sendOnly: Int?

    init(_ status: String, headers: [(String, String)] = [], body: [UInt8] = [], sendOnly: Int? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.sendOnly = sendOnly
    }
}

struct CannedRequest: Sendable {
    var method: String
    var target: String
    var headers: [String: String]  // lowercased names
}

/// A one-thread HTTP/1.1 server on 127.0.0.1 answering with `handler`; one request per connection.
/// `@unchecked Sendable`: `requests` is only touched under `lock`; the socket is closed once, in `stop`.
final class CannedHTTPServer: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let handler: @Sendable (CannedRequest) -> CannedResponse
    private let lock = NSLock()
    private var received: [CannedRequest] = []
    private var thread: Thread?

    var requests: [CannedRequest] {
        lock.lock()
        defer { lock.unlock() }
        return received
    }

    init(_ handler: @escaping @Sendable (CannedRequest) -> CannedResponse) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw TestFailure("cannot listen") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: address.sin_port))
        self.listener = fd
        self.handler = handler
        let thread = Thread { [self] in self.loop() }
        self.thread = thread
        thread.start()
    }

    private func loop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 { return }  // closed by stop()
            serve(connection)
            close(connection)
        }
    }

    private func serve(_ connection: Int32) {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        var headEnd: Int?
        while headEnd == nil {
            let count = recv(connection, &buffer, buffer.count, 0)
            if count <= 0 { return }
            data += buffer[0..<count]
            headEnd = data.indices.dropLast(3).first { data[$0] == 13 && data[$0 + 1] == 10 && data[$0 + 2] == 13 && data[$0 + 3] == 10 }
        }
        let head = String(decoding: data[0..<headEnd!], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        let requestLine = lines.removeFirst().split(separator: " ")
        var headers: [String: String] = [:]
        for line in lines {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        // Read (and drop) a request body.
        var bodyCount = data.count - (headEnd! + 4)
        let wanted = Int(headers["content-length"] ?? "0") ?? 0
        while bodyCount < wanted {
            let count = recv(connection, &buffer, buffer.count, 0)
            if count <= 0 { break }
            bodyCount += count
        }
        let request = CannedRequest(method: String(requestLine[0]), target: String(requestLine[1]), headers: headers)
        lock.lock()
        received.append(request)
        lock.unlock()
        let response = handler(request)
        var out = "HTTP/1.1 \(response.status)\r\nConnection: close\r\n"
        for (name, value) in response.headers { out += "\(name): \(value)\r\n" }
        if !response.headers.contains(where: { $0.0.lowercased() == "content-length" }) {
            out += "Content-Length: \(response.body.count)\r\n"
        }
        out += "\r\n"
        var bytes = Array(out.utf8)
        bytes += response.body.prefix(response.sendOnly ?? response.body.count)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return }
            sent += count
        }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}

func withCannedServer(_ handler: @escaping @Sendable (CannedRequest) -> CannedResponse,
                      _ body: (CannedHTTPServer, WebDAVStore) async throws -> Void,
                      username: String? = nil, password: String? = nil) async throws {
    let server = try CannedHTTPServer(handler)
    defer { server.stop() }
    try await withWebDAVStore("http://127.0.0.1:\(server.port)/base/", username: username, password: password) { store in
        try await body(server, store)
    }
}

@Suite("WebDAV against a misbehaving server")
struct WebDAVMisbehavingServerTests {
    static let content = randomBytes(100_000, seed: 3)

    @Test func truncatedBodyIsAnError() async throws {
        try await withCannedServer({ _ in
            CannedResponse("200 OK", headers: [("ETag", "\"v1\"")], body: Self.content, sendOnly: 40_000)
        }) { _, store in
            let sink = CollectingSink()
            await #expect(throws: StoreError.self) {
                try await store.read(path("f"), range: nil, ifMatch: nil, into: sink)
            }
            #expect(sink.bytes().count <= 40_000)
        }
    }

    @Test func truncatedRangeIsAnError() async throws {
        try await withCannedServer({ _ in
            CannedResponse("206 Partial Content", headers: [("Content-Range", "bytes 100-999/100000")],
                           body: Array(Self.content[100..<1000]), sendOnly: 500)
        }) { _, store in
            await #expect(throws: StoreError.self) {
                try await store.read(path("f"), range: 100..<1000, ifMatch: nil, into: CollectingSink())
            }
        }
    }

    @Test func wholeBodyToARangeRequestIsCutToTheRange() async throws {
        try await withCannedServer({ _ in
            CannedResponse("200 OK", headers: [("ETag", "\"v1\""), ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT")], body: Self.content)
        }) { server, store in
            let sink = CollectingSink()
            let entry = try await store.read(path("f"), range: 12_345..<54_321, ifMatch: nil, into: sink)
            #expect(sink.bytes(from: 12_345) == Array(Self.content[12_345..<54_321]))
            #expect(sink.isContiguous(from: 12_345))
            #expect(entry.size == 100_000)
            #expect(entry.etag == ETag("\"v1\""))
            #expect(entry.modified == 784_111_777)
            #expect(server.requests.first?.headers["range"] == "bytes=12345-54320")
            #expect(server.requests.first?.target == "/base/f")
        }
    }

    @Test func ignoredIfMatchIsCaughtByTheETag() async throws {
        try await withCannedServer({ _ in
            CannedResponse("200 OK", headers: [("ETag", "\"v2\"")], body: Self.content)
        }) { server, store in
            let sink = CollectingSink()
            await #expect(throws: StoreError.versionMismatch(path("f"))) {
                try await store.read(path("f"), range: nil, ifMatch: ETag("\"v1\""), into: sink)
            }
            #expect(sink.writeCount == 0)
            #expect(server.requests.first?.headers["if-match"] == "\"v1\"")
        }
    }

    /// A server that names locks in OPTIONS but refuses LOCK: uploads go with their condition,
    /// as on a server without locks, instead of failing.
    @Test func aServerThatRefusesLockGetsConditionalUploads() async throws {
        let listing = """
            <?xml version="1.0"?><D:multistatus xmlns:D="DAV:"><D:response><D:href>/base/f</D:href><D:propstat><D:prop>
            <D:resourcetype/><D:getcontentlength>3</D:getcontentlength><D:getetag>"v1"</D:getetag>
            <D:getlastmodified>Sun, 06 Nov 1994 08:49:37 GMT</D:getlastmodified></D:prop>
            <D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response></D:multistatus>
            """
        try await withCannedServer({ request in
            switch request.method {
            case "OPTIONS": return CannedResponse("200 OK", headers: [("DAV", "1, 2")])
            case "LOCK": return CannedResponse("405 Method Not Allowed")
            case "PROPFIND": return CannedResponse("207 Multi-Status", headers: [("Content-Type", "application/xml")], body: Array(listing.utf8))
            case "PUT" where request.headers["if-match"] == "\"v1\"": return CannedResponse("204 No Content", headers: [("ETag", "\"v2\"")])
            case "PUT" where request.headers["if-match"] != nil || request.headers["if-none-match"] != nil:
                return CannedResponse("412 Precondition Failed")
            case "PUT": return CannedResponse("201 Created")
            default: return CannedResponse("204 No Content")
            }
        }) { server, store in
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let written = try await store.write(path("f"), fromLocalFile: try dir.uploadSource(Array("new".utf8)), condition: .ifMatch(ETag("\"v1\"")))
            #expect(written.etag == ETag("\"v2\""))
            let puts = server.requests.filter { $0.method == "PUT" && $0.target.hasSuffix("/f") }
            #expect(puts.count == 1)
            #expect(puts.first?.headers["if-match"] == "\"v1\"")
            #expect(server.requests.filter { $0.method == "LOCK" }.count == 1)
            #expect(store.conditionProbe.locks.withLock { $0 } == false)
        }
    }

    /// A server with locks whose LOCK of a new name says it made the file (201), and what a
    /// PROPFIND under that lock then finds there: `length` bytes, and the locks it names.
    private func newNameUnderLock(length: Int, locks: [String],
                                  _ body: (CannedHTTPServer, WebDAVStore) async throws -> Void) async throws {
        let discovery = locks.map { "<D:activelock><D:locktoken><D:href>\($0)</D:href></D:locktoken></D:activelock>" }.joined()
        let entry = """
            <?xml version="1.0"?><D:multistatus xmlns:D="DAV:"><D:response><D:href>/base/new</D:href><D:propstat><D:prop>
            <D:resourcetype/><D:getcontentlength>\(length)</D:getcontentlength><D:getetag>"e\(length)"</D:getetag>
            <D:lockdiscovery>\(discovery)</D:lockdiscovery></D:prop>
            <D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response></D:multistatus>
            """
        try await withCannedServer({ request in
            switch request.method {
            case "OPTIONS": return CannedResponse("200 OK", headers: [("DAV", "1, 2")])
            case "LOCK": return CannedResponse("201 Created", headers: [("Lock-Token", "<opaquelocktoken:ours>")])
            case "PROPFIND": return CannedResponse("207 Multi-Status", headers: [("Content-Type", "application/xml")], body: Array(entry.utf8))
            case "PUT" where request.headers["if-match"] != nil || request.headers["if-none-match"] != nil:
                return CannedResponse("412 Precondition Failed")
            case "PUT": return CannedResponse("201 Created", headers: [("ETag", "\"mine\"")])
            default: return CannedResponse("204 No Content")
            }
        }, body)
    }

    private func uploadsOfNew(_ server: CannedHTTPServer) -> Int {
        server.requests.filter { $0.method == "PUT" && $0.target.hasSuffix("/new") }.count
    }

    /// sabre/dav's PDO lock backend looks for a conflicting lock, then inserts its own: two
    /// LOCKs of one new name at once can both be granted. Seen under docfs's lock, the other
    /// lock makes the upload wait and try again, not go ahead over the other client's.
    @Test func aLockGrantedBesideOursIsWaitedFor() async throws {
        try await newNameUnderLock(length: 0, locks: ["opaquelocktoken:ours", "opaquelocktoken:theirs"]) { server, store in
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            await #expect(throws: StoreError.self) {
                try await store.write(path("new"), fromLocalFile: try dir.uploadSource(Array("mine".utf8)), condition: .mustNotExist)
            }
            #expect(uploadsOfNew(server) == 0)
        }
    }

    /// A LOCK that answered "made" (201) from a look taken before another client's PUT landed:
    /// the bytes found under the lock are that client's file, so the new file is a conflict.
    @Test func bytesFoundUnderALockThatSaidItMadeTheFileAreAnotherClients() async throws {
        try await newNameUnderLock(length: 6, locks: ["opaquelocktoken:ours"]) { server, store in
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            await #expect(throws: StoreError.alreadyExists(path("new"))) {
                try await store.write(path("new"), fromLocalFile: try dir.uploadSource(Array("mine".utf8)), condition: .mustNotExist)
            }
            #expect(uploadsOfNew(server) == 0)
        }
    }

    /// A LOCK made the empty file, then met another client's lock beside it and could not take
    /// the file back: at the next try (LOCK answered 200, the file being there) that same empty
    /// version is still this upload's to fill, not another client's file to keep apart from.
    @Test func theEmptyFileOfABackedOffLockIsFilledAtTheNextTry() async throws {
        let locks = Mutex(0)
        @Sendable func entry(_ tokens: [String]) -> String {
            let discovery = tokens.map { "<D:activelock><D:locktoken><D:href>\($0)</D:href></D:locktoken></D:activelock>" }.joined()
            return """
                <?xml version="1.0"?><D:multistatus xmlns:D="DAV:"><D:response><D:href>/base/new</D:href><D:propstat><D:prop>
                <D:resourcetype/><D:getcontentlength>0</D:getcontentlength><D:getetag>"empty"</D:getetag>
                <D:lockdiscovery>\(discovery)</D:lockdiscovery></D:prop>
                <D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response></D:multistatus>
                """
        }
        try await withCannedServer({ request in
            switch request.method {
            case "OPTIONS": return CannedResponse("200 OK", headers: [("DAV", "1, 2")])
            case "LOCK":
                let first = locks.withLock { count in count += 1; return count == 1 }
                return CannedResponse(first ? "201 Created" : "200 OK", headers: [("Lock-Token", "<opaquelocktoken:ours>")])
            case "PROPFIND":
                let tokens = locks.withLock { $0 } == 1 ? ["opaquelocktoken:ours", "opaquelocktoken:theirs"] : ["opaquelocktoken:ours"]
                return CannedResponse("207 Multi-Status", headers: [("Content-Type", "application/xml")], body: Array(entry(tokens).utf8))
            case "DELETE": return CannedResponse("423 Locked")
            case "PUT" where request.headers["if-match"] != nil || request.headers["if-none-match"] != nil:
                return CannedResponse("412 Precondition Failed")
            case "PUT": return CannedResponse("204 No Content", headers: [("ETag", "\"mine\"")])
            default: return CannedResponse("204 No Content")
            }
        }) { server, store in
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            let source = try dir.uploadSource(Array("mine".utf8))
            await #expect(throws: StoreError.self) { try await store.write(path("new"), fromLocalFile: source, condition: .mustNotExist) }
            #expect(uploadsOfNew(server) == 0)
            _ = try await store.write(path("new"), fromLocalFile: source, condition: .mustNotExist)
            #expect(uploadsOfNew(server) == 1)
        }
    }

    /// The empty file the LOCK made, under docfs's lock alone: the new file goes up over it.
    @Test func theEmptyFileOurLockMadeIsFilled() async throws {
        try await newNameUnderLock(length: 0, locks: ["opaquelocktoken:ours"]) { server, store in
            let dir = try TemporaryDirectory()
            defer { dir.remove() }
            _ = try await store.write(path("new"), fromLocalFile: try dir.uploadSource(Array("mine".utf8)), condition: .mustNotExist)
            let puts = server.requests.filter { $0.method == "PUT" && $0.target.hasSuffix("/new") }
            #expect(puts.count == 1)
            #expect(puts.first?.headers["if"] == "(<opaquelocktoken:ours>)")
        }
    }

    @Test func preconditionFailedIsAVersionMismatch() async throws {
        try await withCannedServer({ _ in CannedResponse("412 Precondition Failed") }) { _, store in
            await #expect(throws: StoreError.versionMismatch(path("f"))) {
                try await store.read(path("f"), range: nil, ifMatch: ETag("\"v1\""), into: CollectingSink())
            }
        }
    }

    @Test func hostileListingStaysInside() async throws {
        let xml = """
            <D:multistatus xmlns:D="DAV:">
            <D:response><D:href>http://127.0.0.1/base/dir/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            <D:response><D:href>/base/dir/..</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            <D:response><D:href>/base/dir/..%2F..%2Fetc</D:href><D:propstat><D:prop><D:resourcetype/></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            <D:response><D:href>/base/dir/.</D:href><D:propstat><D:prop><D:resourcetype/></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            <D:response><D:href>/etc/passwd</D:href><D:propstat><D:prop><D:resourcetype/></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            <D:response><D:href>/base/dir/ok%2Etxt</D:href><D:propstat><D:prop><D:resourcetype/><D:getcontentlength>3</D:getcontentlength></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
            </D:multistatus>
            """
        try await withCannedServer({ request in
            if request.method == "PROPFIND" {
                return CannedResponse("207 Multi-Status", headers: [("Content-Type", "application/xml")], body: Array(xml.utf8))
            }
            return CannedResponse("500 Internal Server Error")
        }) { server, store in
            let page = try await store.list(path("dir"), page: nil)
            #expect(page.entries.map(\.name) == ["ok.txt"])
            #expect(page.entries.first?.path == path("dir/ok.txt"))
            #expect(page.next == nil)
            #expect(server.requests.first?.headers["depth"] == "1")
            #expect(server.requests.first?.target == "/base/dir/")
            // A delete of that "empty" directory is refused: the server listed members we skipped.
            await #expect(throws: StoreError.notEmpty(path("dir"))) { try await store.delete(path("dir"), isDirectory: true) }
        }
    }

    @Test func basicAuthIsSentAndFailuresAreAccessDenied() async throws {
        try await withCannedServer({ _ in CannedResponse("401 Unauthorized", headers: [("WWW-Authenticate", "Basic realm=\"x\"")]) },
                                   { server, store in
            do throws(StoreError) {
                _ = try await store.stat(path("f"))
                Issue.record("expected accessDenied")
            } catch {
                guard case .accessDenied = error else { Issue.record("got \(error)"); return }
                #expect(!"\(error)".contains("pa55"))
            }
            let expected = "Basic " + Data("alice:pa55 word".utf8).base64EncodedString()
            #expect(server.requests.first?.headers["authorization"] == expected)
            #expect(!store.identity.description.contains("pa55"))
        }, username: "alice", password: "pa55 word")
    }

    @Test func serverErrorsAreTransient() async throws {
        try await withCannedServer({ _ in CannedResponse("503 Service Unavailable") }) { _, store in
            do throws(StoreError) {
                _ = try await store.stat(path("f"))
                Issue.record("expected serverError")
            } catch {
                #expect(error.isTransient)
                guard case .serverError(503, _) = error else { Issue.record("got \(error)"); return }
            }
        }
    }

    @Test func refusedConnectionIsUnreachable() async throws {
        try await withRefusingPort { port in
            try await withWebDAVStore("http://127.0.0.1:\(port)/") { store in
                do throws(StoreError) {
                    _ = try await store.stat(.root)
                    Issue.record("expected unreachable")
                } catch {
                    guard case .unreachable = error else { Issue.record("got \(error)"); return }
                }
            }
        }
    }
}
