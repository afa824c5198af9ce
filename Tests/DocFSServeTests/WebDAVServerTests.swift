// Drives `docfs serve` (WebDAVServer) in process over loopback with AsyncHTTPClient:
// PROPFIND, GET ranges and conditionals, PUT preconditions, MKCOL/DELETE/MOVE/COPY status
// codes, path traversal, names that need encoding, and the request log.

import AsyncHTTPClient
import DocFSServe
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Testing

/// A server on a fresh temporary directory, on a free port, stopped at the end of the test.
struct ServerFixture {
    let root: String
    let logPath: String
    let base: String

    static func with(
        configure: (inout WebDAVServerConfiguration) -> Void = { _ in },
        _ body: (ServerFixture) async throws -> Void
    ) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-serve-\(UUID().uuidString)").path
        let root = scratch + "/root"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let logPath = scratch + "/requests.log"
        var logger = Logger(label: "test.serve")
        logger.logLevel = .warning
        var configuration = WebDAVServerConfiguration(root: root, port: 0, requestLogPath: logPath)
        configure(&configuration)
        let server = WebDAVServer(configuration: configuration, logger: logger)
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let task = Task {
            try await server.run { port in
                continuation.yield(port)
                continuation.finish()
            }
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            task.cancel()
            _ = try await task.value
            Issue.record("server did not start")
            return
        }
        let fixture = ServerFixture(root: root, logPath: logPath, base: "http://127.0.0.1:\(port)")
        do {
            try await body(fixture)
        } catch {
            task.cancel()
            _ = try? await task.value
            throw error
        }
        task.cancel()
        _ = try? await task.value
    }

    func write(_ relative: String, _ content: String) throws {
        try Data(content.utf8).write(to: URL(fileURLWithPath: root + "/" + relative))
    }

    func mkdir(_ relative: String) throws {
        try FileManager.default.createDirectory(atPath: root + "/" + relative, withIntermediateDirectories: true)
    }

    func exists(_ relative: String) -> Bool {
        FileManager.default.fileExists(atPath: root + "/" + relative)
    }

    func read(_ relative: String) -> String? {
        FileManager.default.contents(atPath: root + "/" + relative).map { String(decoding: $0, as: UTF8.self) }
    }

    func logLines() -> [String] {
        (try? String(contentsOfFile: logPath, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
    }

    struct Reply {
        let status: Int
        let headers: HTTPHeaders
        let body: String
        func header(_ name: String) -> String? { headers.first(name: name) }
    }

    func request(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: String? = nil
    ) async throws -> Reply {
        var request = HTTPClientRequest(url: base + path)
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(string: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let collected = try await response.body.collect(upTo: 64 * 1024 * 1024)
        return Reply(status: Int(response.status.code), headers: response.headers, body: String(buffer: collected))
    }
}

@Suite struct WebDAVServerTests {
    @Test func optionsAdvertisesClass1() async throws {
        try await ServerFixture.with { server in
            let reply = try await server.request("OPTIONS", "/")
            #expect(reply.status == 200)
            #expect(reply.header("DAV") == "1")
            #expect(reply.header("Allow")?.contains("PROPFIND") == true)
        }
    }

    @Test func propfindDepthOneListsChildren() async throws {
        try await ServerFixture.with { server in
            try server.write("a b.txt", "hello")
            try server.mkdir("sub")
            try server.write("sub/inner.bin", "x")
            try server.write("ü %#?&.md", "weird")
            let reply = try await server.request("PROPFIND", "/", headers: [("Depth", "1")])
            #expect(reply.status == 207)
            #expect(reply.header("Content-Type")?.hasPrefix("application/xml") == true)
            let body = reply.body
            #expect(body.contains("<D:href>/</D:href>"))
            #expect(body.contains("<D:href>/a%20b.txt</D:href>"))
            #expect(body.contains("<D:href>/sub/</D:href>"))
            #expect(body.contains("<D:href>/%C3%BC%20%25%23%3F%26.md</D:href>"))
            #expect(body.contains("<D:displayname>ü %#?&amp;.md</D:displayname>"))
            #expect(body.contains("<D:collection/>"))
            #expect(body.contains("<D:getcontentlength>5</D:getcontentlength>"))
            #expect(body.contains("<D:getcontenttype>text/plain; charset=utf-8</D:getcontenttype>"))
            #expect(body.contains("<D:getetag>\""))
            #expect(body.contains(" GMT</D:getlastmodified>"))
            #expect(!body.contains("inner.bin"), "depth 1 must not descend")
            #expect(body.components(separatedBy: "<D:response>").count - 1 == 4)

            let depth0 = try await server.request("PROPFIND", "/sub/", headers: [("Depth", "0")],
                body: "<?xml version=\"1.0\"?><D:propfind xmlns:D=\"DAV:\"><D:allprop/></D:propfind>")
            #expect(depth0.status == 207)
            #expect(depth0.body.components(separatedBy: "<D:response>").count - 1 == 1)
            #expect(depth0.body.contains("<D:href>/sub/</D:href>"))

            let file = try await server.request("PROPFIND", "/a%20b.txt", headers: [("Depth", "0")])
            #expect(file.status == 207)
            #expect(file.body.contains("<D:resourcetype/>"))

            #expect(try await server.request("PROPFIND", "/", headers: [("Depth", "infinity")]).status == 403)
            #expect(try await server.request("PROPFIND", "/missing", headers: [("Depth", "1")]).status == 404)
        }
    }

    @Test func getRangesAndConditionals() async throws {
        try await ServerFixture.with { server in
            try server.write("f.txt", "0123456789")
            let full = try await server.request("GET", "/f.txt")
            #expect(full.status == 200)
            #expect(full.body == "0123456789")
            #expect(full.header("Accept-Ranges") == "bytes")
            let etag = try #require(full.header("ETag"))
            #expect(etag.hasPrefix("\"") && etag.hasSuffix("\""))

            let middle = try await server.request("GET", "/f.txt", headers: [("Range", "bytes=2-4")])
            #expect(middle.status == 206)
            #expect(middle.body == "234")
            #expect(middle.header("Content-Range") == "bytes 2-4/10")
            #expect(try await server.request("GET", "/f.txt", headers: [("Range", "bytes=7-")]).body == "789")
            let suffix = try await server.request("GET", "/f.txt", headers: [("Range", "bytes=-3")])
            #expect(suffix.status == 206 && suffix.body == "789")
            let clamped = try await server.request("GET", "/f.txt", headers: [("Range", "bytes=8-100")])
            #expect(clamped.status == 206 && clamped.body == "89" && clamped.header("Content-Range") == "bytes 8-9/10")

            let unsatisfiable = try await server.request("GET", "/f.txt", headers: [("Range", "bytes=10-")])
            #expect(unsatisfiable.status == 416)
            #expect(unsatisfiable.header("Content-Range") == "bytes */10")

            let head = try await server.request("HEAD", "/f.txt")
            #expect(head.status == 200 && head.body.isEmpty && head.header("Content-Length") == "10")

            #expect(try await server.request("GET", "/f.txt", headers: [("If-None-Match", etag)]).status == 304)
            #expect(try await server.request("GET", "/f.txt", headers: [("If-Match", "\"nope\"")]).status == 412)
            #expect(try await server.request("GET", "/f.txt", headers: [("If-Match", etag)]).status == 200)
            #expect(try await server.request("GET", "/missing.txt").status == 404)

            try server.write("empty", "")
            let empty = try await server.request("GET", "/empty")
            #expect(empty.status == 200 && empty.body.isEmpty)
        }
    }

    @Test func largeGetIsStreamedWhole() async throws {
        try await ServerFixture.with { server in
            let size = 3 * 1024 * 1024 + 17
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            try Data(bytes).write(to: URL(fileURLWithPath: server.root + "/big.bin"))
            var request = HTTPClientRequest(url: server.base + "/big.bin")
            request.method = .GET
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            let body = try await response.body.collect(upTo: 16 * 1024 * 1024)
            #expect(body.readableBytes == size)
            #expect(Array(body.readableBytesView) == bytes)
        }
    }

    @Test func putCreatesReplacesAndHonoursPreconditions() async throws {
        try await ServerFixture.with { server in
            let created = try await server.request("PUT", "/doc.txt", body: "one")
            #expect(created.status == 201)
            let firstTag = try #require(created.header("ETag"))
            #expect(server.read("doc.txt") == "one")

            let replaced = try await server.request("PUT", "/doc.txt", body: "two!")
            #expect(replaced.status == 204)
            let secondTag = try #require(replaced.header("ETag"))
            #expect(secondTag != firstTag)
            #expect(try await server.request("GET", "/doc.txt").header("ETag") == secondTag)

            #expect(try await server.request("PUT", "/doc.txt", headers: [("If-Match", firstTag)], body: "stale").status == 412)
            #expect(server.read("doc.txt") == "two!")
            #expect(try await server.request("PUT", "/doc.txt", headers: [("If-Match", secondTag)], body: "three").status == 204)
            #expect(server.read("doc.txt") == "three")
            #expect(try await server.request("PUT", "/doc.txt", headers: [("If-None-Match", "*")], body: "x").status == 412)
            #expect(try await server.request("PUT", "/new.txt", headers: [("If-Match", "*")], body: "x").status == 412)
            #expect(!server.exists("new.txt"))
            #expect(try await server.request("PUT", "/new.txt", headers: [("If-None-Match", "*")], body: "fresh").status == 201)
            #expect(server.read("new.txt") == "fresh")
            #expect(try await server.request("PUT", "/no/such/dir.txt", body: "x").status == 409)

            let name = "/%C3%A9t%C3%A9%20%23%3F%26%25.txt"
            #expect(try await server.request("PUT", name, body: "summer").status == 201)
            #expect(server.read("été #?&%.txt") == "summer")
            #expect(try await server.request("GET", name).body == "summer")

            // No temporary files are left behind.
            let names = try FileManager.default.contentsOfDirectory(atPath: server.root)
            #expect(!names.contains { $0.hasPrefix(".docfs-put-") })
        }
    }

    @Test func largePutIsStreamed() async throws {
        try await ServerFixture.with { server in
            let size = 8 * 1024 * 1024 + 3
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13) }
            var request = HTTPClientRequest(url: server.base + "/upload.bin")
            request.method = .PUT
            let chunk = 100_000
            let chunks = stride(from: 0, to: size, by: chunk).map { ByteBuffer(bytes: bytes[$0..<min($0 + chunk, size)]) }
            let stream = AsyncStream<ByteBuffer> { continuation in
                for buffer in chunks { continuation.yield(buffer) }
                continuation.finish()
            }
            request.body = .stream(stream, length: .known(Int64(size)))
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
            #expect(response.status.code == 201)
            let written = try #require(FileManager.default.contents(atPath: server.root + "/upload.bin"))
            #expect(written.count == size)
            #expect(Array(written) == bytes)
        }
    }

    @Test func mkcolAndDelete() async throws {
        try await ServerFixture.with { server in
            #expect(try await server.request("MKCOL", "/d").status == 201)
            #expect(server.exists("d"))
            #expect(try await server.request("MKCOL", "/d").status == 405)
            #expect(try await server.request("MKCOL", "/x/y").status == 409)
            #expect(try await server.request("MKCOL", "/withbody", body: "<x/>").status == 415)
            #expect(!server.exists("withbody"))

            try server.mkdir("d/e/f")
            try server.write("d/e/f/g.txt", "g")
            try server.write("lone.txt", "l")
            #expect(try await server.request("DELETE", "/lone.txt").status == 204)
            #expect(!server.exists("lone.txt"))
            #expect(try await server.request("DELETE", "/d/").status == 204)
            #expect(!server.exists("d"))
            #expect(try await server.request("DELETE", "/d/").status == 404)
            #expect(try await server.request("DELETE", "/").status == 403)
        }
    }

    @Test func moveAndCopy() async throws {
        try await ServerFixture.with { server in
            try server.write("a.txt", "A")
            try server.write("b.txt", "B")
            let dest = { (path: String) in [("Destination", server.base + path)] }

            #expect(try await server.request("MOVE", "/a.txt", headers: dest("/b.txt") + [("Overwrite", "F")]).status == 412)
            #expect(server.read("b.txt") == "B")
            #expect(try await server.request("MOVE", "/a.txt", headers: dest("/b.txt")).status == 204)
            #expect(server.read("b.txt") == "A" && !server.exists("a.txt"))
            #expect(try await server.request("MOVE", "/b.txt", headers: dest("/c%20d.txt")).status == 201)
            #expect(server.read("c d.txt") == "A")
            #expect(try await server.request("MOVE", "/c%20d.txt", headers: dest("/nope/c.txt")).status == 409)
            #expect(try await server.request("MOVE", "/missing", headers: dest("/m2")).status == 404)
            // A Destination given as a path works too.
            #expect(try await server.request("MOVE", "/c%20d.txt", headers: [("Destination", "/e.txt")]).status == 201)

            try server.mkdir("tree/sub")
            try server.write("tree/sub/leaf.txt", "leaf")
            #expect(try await server.request("COPY", "/tree/", headers: dest("/copy/")).status == 201)
            #expect(server.read("copy/sub/leaf.txt") == "leaf")
            #expect(server.read("tree/sub/leaf.txt") == "leaf")
            #expect(try await server.request("COPY", "/tree/", headers: dest("/copy/") + [("Overwrite", "F")]).status == 412)
            #expect(try await server.request("COPY", "/tree/", headers: dest("/copy/")).status == 204)
            #expect(try await server.request("COPY", "/tree/", headers: dest("/shallow/") + [("Depth", "0")]).status == 201)
            #expect(server.exists("shallow") && !server.exists("shallow/sub"))
            #expect(try await server.request("COPY", "/e.txt", headers: dest("/f.txt")).status == 201)
            #expect(server.read("f.txt") == "A" && server.read("e.txt") == "A")
            #expect(try await server.request("COPY", "/tree/", headers: dest("/tree/sub/inside/")).status == 409)
            #expect(try await server.request("MOVE", "/e.txt", headers: dest("/e.txt")).status == 403)
            #expect(try await server.request("MOVE", "/e.txt").status == 400)
            #expect(try await server.request("MOVE", "/e.txt", headers: dest("/g.txt") + [("If-Match", "\"old\"")]).status == 412)
            let tag = try #require(try await server.request("HEAD", "/e.txt").header("ETag"))
            #expect(try await server.request("MOVE", "/e.txt", headers: dest("/g.txt") + [("If-Match", tag)]).status == 201)
            #expect(try await server.request("DELETE", "/g.txt", headers: [("If-Match", "\"old\"")]).status == 412)
            #expect(try await server.request("DELETE", "/g.txt", headers: [("If-Match", tag)]).status == 204)
        }
    }

    @Test func pathTraversalIsRefused() async throws {
        try await ServerFixture.with { server in
            try server.mkdir("inside")
            try server.write("inside/ok.txt", "ok")
            let outside = URL(fileURLWithPath: server.root).deletingLastPathComponent().path
            try Data("secret".utf8).write(to: URL(fileURLWithPath: outside + "/secret.txt"))
            try FileManager.default.createSymbolicLink(atPath: server.root + "/escape", withDestinationPath: outside)
            try FileManager.default.createSymbolicLink(atPath: server.root + "/escape.txt", withDestinationPath: outside + "/secret.txt")
            try FileManager.default.createSymbolicLink(atPath: server.root + "/alias", withDestinationPath: "inside")

            #expect(try await server.request("GET", "/inside/%2e%2e/%2e%2e/secret.txt").status == 403)
            #expect(try await server.request("GET", "/inside/..%2f..%2fsecret.txt").status == 403)
            #expect(try await server.request("GET", "/escape/secret.txt").status == 403)
            #expect(try await server.request("GET", "/escape.txt").status == 403)
            #expect(try await server.request("PUT", "/escape/new.txt", body: "x").status == 403)
            #expect(try await server.request("GET", "/bad%00name").status == 403)
            #expect(try await server.request("MOVE", "/inside/ok.txt", headers: [("Destination", "/escape/moved.txt")]).status == 403)
            #expect(try await server.request("MOVE", "/inside/ok.txt", headers: [("Destination", "/%2e%2e/moved.txt")]).status == 403)
            #expect(!FileManager.default.fileExists(atPath: outside + "/moved.txt"))
            // Symlinks are never followed, not even ones that stay inside: a path is resolved
            // beneath the root without any link (openat2 RESOLVE_NO_SYMLINKS, or an O_NOFOLLOW walk).
            #expect(try await server.request("GET", "/alias/ok.txt").status == 403)
            #expect(try await server.request("PUT", "/alias/new.txt", body: "x").status == 403)
            #expect(!server.exists("inside/new.txt"))

            let listing = try await server.request("PROPFIND", "/", headers: [("Depth", "1")])
            #expect(listing.status == 207)
            #expect(!listing.body.contains("escape"))
            #expect(!listing.body.contains("alias"))
            // DELETE of a symlink removes the link, never what it points to.
            #expect(try await server.request("DELETE", "/escape").status == 204)
            #expect(FileManager.default.fileExists(atPath: outside + "/secret.txt"))
        }
    }

    @Test func requestLogHasOneLinePerRequest() async throws {
        try await ServerFixture.with { server in
            try server.write("f.txt", "0123456789")
            _ = try await server.request("GET", "/f.txt")
            _ = try await server.request("GET", "/f.txt", headers: [("Range", "bytes=2-4")])
            _ = try await server.request("HEAD", "/f.txt")
            _ = try await server.request("PROPFIND", "/", headers: [("Depth", "1")])
            _ = try await server.request("PUT", "/a%20b.txt", body: "xyz")
            _ = try await server.request("GET", "/missing")
            let lines = server.logLines()
            #expect(lines.count == 6)
            guard lines.count == 6 else { return }
            #expect(lines[0] == "GET\t/f.txt\t200\t10\t-")
            #expect(lines[1] == "GET\t/f.txt\t206\t3\tbytes=2-4")
            #expect(lines[2] == "HEAD\t/f.txt\t200\t0\t-")
            #expect(lines[3].hasPrefix("PROPFIND\t/\t207\t"))
            #expect(lines[4] == "PUT\t/a%20b.txt\t201\t0\t-")
            #expect(lines[5].hasPrefix("GET\t/missing\t404\t"))
        }
    }

    @Test func runStopsWhenCancelled() async throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-serve-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let server = WebDAVServer(configuration: WebDAVServerConfiguration(root: root), logger: Logger(label: "test"))
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let task = Task { try await server.run { continuation.yield($0); continuation.finish() } }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        #expect(port > 0)
        task.cancel()
        _ = try? await task.value  // returns instead of hanging
    }

    @Test func missingRootFails() async throws {
        let server = WebDAVServer(
            configuration: WebDAVServerConfiguration(root: "/nonexistent/docfs-serve"), logger: Logger(label: "test"))
        await #expect(throws: (any Error).self) {
            try await server.run { _ in }
        }
    }
}
