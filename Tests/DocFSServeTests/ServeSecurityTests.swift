// `docfs serve` fit to expose (issue 10, item 6), in process over loopback: a COPY never
// recurses into its own destination, symlinks are never followed, two racing PUTs with the same
// If-Match cannot both win, Host and Destination must name this server, Basic auth, and the
// upload limit before and while a body streams.

import AsyncHTTPClient
@testable import DocFSServe
import DocFSStore
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@Suite struct ServeSecurityTests {
    // MARK: Containment

    /// Old code: `/link` resolved (realpath) inside the root, so COPY /tree -> /link/copy passed the
    /// check, and copyTree then read `tree` while writing into `tree/copy`: a copy of a copy of a
    /// copy, until the path was too long (hundreds of levels).
    @Test func copyThroughASymlinkIntoItsOwnSubtreeIsRefused() async throws {
        try await ServerFixture.with { server in
            try server.mkdir("tree")
            try server.write("tree/a.txt", "A")
            try FileManager.default.createSymbolicLink(atPath: server.root + "/link", withDestinationPath: "tree")
            let reply = try await server.request("COPY", "/tree/", headers: [("Destination", "/link/copy/")])
            #expect([403, 409].contains(reply.status), "got \(reply.status)")
            #expect(!server.exists("tree/copy"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: server.root + "/tree") == ["a.txt"])
            // The plain case, by path, stays a 409 (RFC 4918 §9.8.5).
            #expect(try await server.request("COPY", "/tree/", headers: [("Destination", "/tree/sub/")]).status == 409)
        }
    }

    /// Below the path check: a copy never copies a directory it created itself, whatever aliases
    /// lead back to it (bind mounts, or a caller that skipped the check).
    @Test func copyTreeNeverDescendsIntoItsOwnCopy() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-copyguard-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch + "/tree/sub", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        try Data("x".utf8).write(to: URL(fileURLWithPath: scratch + "/tree/sub/x.txt"))
        try FileManager.default.createSymbolicLink(atPath: scratch + "/tree/out", withDestinationPath: "/etc")
        let root = open(scratch, O_RDONLY | O_DIRECTORY)
        let tree = open(scratch + "/tree", O_RDONLY | O_DIRECTORY)
        defer { close(root); close(tree) }
        try ServedDirectory.copyTree(in: root, "tree", to: tree, "copy", recursive: true)
        let copied = try FileManager.default.subpathsOfDirectory(atPath: scratch + "/tree/copy").sorted()
        #expect(copied == ["sub", "sub/x.txt"], "one level, no copy of the copy, no symlink")
    }

    @Test func beneathWalkRefusesSymlinksBothWays() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-walk-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: scratch + "/a/b", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        try FileManager.default.createSymbolicLink(atPath: scratch + "/a/up", withDestinationPath: "..")
        try FileManager.default.createSymbolicLink(atPath: scratch + "/a/abs", withDestinationPath: scratch)
        let root = open(scratch, O_RDONLY | O_DIRECTORY)
        defer { close(root) }
        for walk in [BeneathWalk.openDirectory(below:_:), BeneathWalk.openDirectoryByWalking(below:_:)] {
            guard case .success(let fd) = walk(root, ["a", "b"]) else { Issue.record("a/b should open"); continue }
            close(fd)
            #expect(walk(root, ["a", "up", "a"]).isFailure(ELOOP))
            #expect(walk(root, ["a", "abs"]).isFailure(ELOOP))
            #expect(walk(root, ["a", ".."]).isFailure(EINVAL))
            #expect(walk(root, ["a/b"]).isFailure(EINVAL))
            #expect(walk(root, ["nope"]).isFailure(ENOENT))
        }
    }

    // MARK: Conditional PUT

    /// Old code checked If-Match before the body streamed and renamed after: two PUTs carrying
    /// the same ETag both passed the check, and both answered 204. Now the check is repeated
    /// under the path's lock with the rename, so exactly one wins each round.
    @Test func ofTwoRacingConditionalPutsExactlyOneWins() async throws {
        try await ServerFixture.with { server in
            try server.write("race.txt", "start")
            let rounds = 40
            var doubleWins = 0
            for round in 0..<rounds {
                let tag = try #require(try await server.request("HEAD", "/race.txt").header("ETag"))
                let bodies = ["a", "b"].map { String(repeating: "\($0)\(round)", count: 60_000) }
                async let first = server.request("PUT", "/race.txt", headers: [("If-Match", tag)], body: bodies[0])
                async let second = server.request("PUT", "/race.txt", headers: [("If-Match", tag)], body: bodies[1])
                let statuses = try await [first.status, second.status].sorted()
                if statuses == [204, 204] { doubleWins += 1; continue }
                #expect(statuses == [204, 412], "round \(round): \(statuses)")
                let content = try #require(server.read("race.txt"))
                #expect(bodies.contains(content))
            }
            #expect(doubleWins == 0, "\(doubleWins) of \(rounds) rounds had two winners")
            #expect(try FileManager.default.contentsOfDirectory(atPath: server.root) == ["race.txt"], "no temporary file left")
        }
    }

    @Test func pathLocksSerializeAndEmpty() async throws {
        let locks = PathLocks()
        let path = DAVPath(components: ["x"])
        let counter = Counter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    try await locks.withLocks([path, DAVPath(components: ["y"])]) {
                        let inside = await counter.enter()
                        #expect(inside == 1)
                        try await Task.sleep(nanoseconds: 200_000)
                        await counter.leave()
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(await locks.heldCount == 0)
    }

    // MARK: Origin

    @Test func hostAndDestinationMustNameThisServer() async throws {
        try await ServerFixture.with { server in
            try server.write("f.txt", "F")
            let port = try #require(URL(string: server.base)?.port)
            #expect(try await server.request("GET", "/f.txt", headers: [("Host", "evil.example:\(port)")]).status == 421)
            #expect(try await server.request("GET", "/f.txt", headers: [("Host", "127.0.0.1:\(port + 1)")]).status == 421)
            #expect(try await server.request("GET", "/f.txt", headers: [("Host", "localhost:\(port)")]).status == 200)
            #expect(try await server.request("GET", "/f.txt", headers: [("Host", "[::1]:\(port)")]).status == 200)
            #expect(try await server.request("PUT", "/g.txt", headers: [("Host", "rebound.example:\(port)")], body: "x").status == 421)
            #expect(!server.exists("g.txt"))
            let elsewhere = try await server.request("COPY", "/f.txt", headers: [("Destination", "http://other.example:\(port)/g.txt")])
            #expect(elsewhere.status == 502)
            #expect(try await server.request("COPY", "/f.txt", headers: [("Destination", "https://127.0.0.1:\(port)/g.txt")]).status == 502)
            #expect(!server.exists("g.txt"))
            #expect(try await server.request("COPY", "/f.txt", headers: [("Destination", "http://localhost:\(port)/g.txt")]).status == 201)
        }
    }

    @Test func allowedHostsNameThisServerToo() throws {
        let origin = ServedOrigin(scheme: "https", host: "127.0.0.1", allowedHosts: ["dav.example.org", "fwd.example:9443"])
        #expect(throws: Never.self) { try origin.checkHost("dav.example.org", port: 8080) }
        #expect(throws: Never.self) { try origin.checkHost("DAV.example.org:443", port: 8080) }
        #expect(throws: Never.self) { try origin.checkHost("fwd.example:9443", port: 8080) }
        #expect(throws: DAVError.self) { try origin.checkHost("fwd.example:9444", port: 8080) }
        #expect(throws: DAVError.self) { try origin.checkHost("fwd.example", port: 8080) }
        #expect(throws: DAVError.self) { try origin.checkHost("evil.dav.example.org", port: 8080) }
        #expect(throws: Never.self) { try origin.checkDestination("https://dav.example.org/a", port: 8080) }
        #expect(throws: DAVError.self) { try origin.checkDestination("http://dav.example.org/a", port: 8080) }
        // Bound to every address: IP literals name us, names do not.
        let wildcard = ServedOrigin(scheme: "http", host: "0.0.0.0")
        #expect(throws: Never.self) { try wildcard.checkHost("192.168.1.20:8080", port: 8080) }
        #expect(throws: DAVError.self) { try wildcard.checkHost("nas.local:8080", port: 8080) }
        #expect(throws: DAVError.self) { try wildcard.checkHost(nil, port: 8080) }
    }

    // MARK: Authentication

    @Test func basicAuthIsRequiredWhenConfigured() async throws {
        try await ServerFixture.with(configure: { $0.credentials = BasicCredentials(user: "ann", password: "s3cret:with colon") }) { server in
            try server.write("f.txt", "F")
            let none = try await server.request("GET", "/f.txt")
            #expect(none.status == 401)
            #expect(none.header("WWW-Authenticate")?.hasPrefix("Basic realm=\"docfs\"") == true)
            let good = "Basic " + Data("ann:s3cret:with colon".utf8).base64EncodedString()
            let bad = "Basic " + Data("ann:s3cret:with colo".utf8).base64EncodedString()
            #expect(try await server.request("GET", "/f.txt", headers: [("Authorization", good)]).body == "F")
            #expect(try await server.request("GET", "/f.txt", headers: [("Authorization", bad)]).status == 401)
            #expect(try await server.request("GET", "/f.txt", headers: [("Authorization", "Basic !!!!")]).status == 401)
            #expect(try await server.request("PUT", "/g.txt", headers: [("Authorization", bad)], body: "x").status == 401)
            #expect(!server.exists("g.txt"))
            #expect(try await server.request("PUT", "/g.txt", headers: [("Authorization", good)], body: "x").status == 201)
        }
    }

    @Test func base64DecodesOnlyStandardPaddedInput() {
        #expect(BasicAuth.base64Decode("YW5uOnB3") == Array("ann:pw".utf8))
        #expect(BasicAuth.base64Decode("YW5uOnB3ZA==") == Array("ann:pwd".utf8))
        #expect(BasicAuth.base64Decode("YW5uOnB3ZGQ=") == Array("ann:pwdd".utf8))
        for bad in ["", "YW5", "YW5uOn=3", "=W5u", "YW5u\nOnB3", "YW5uOnB3ZA=="+"AAAA"] {
            #expect(BasicAuth.base64Decode(bad) == nil, "\(bad)")
        }
    }

    // MARK: Upload limit

    @Test func putsLargerThanTheLimitAreRefusedBeforeAndWhileStreaming() async throws {
        try await ServerFixture.with(configure: { $0.maxUpload = 100_000 }) { server in
            #expect(try await server.request("PUT", "/fits.bin", body: String(repeating: "x", count: 100_000)).status == 201)
            // Declared length over the limit: refused from the head.
            #expect(try await server.request("PUT", "/big.bin", body: String(repeating: "x", count: 100_001)).status == 413)
            // Chunked (no length): refused when the count passes the limit; nothing kept.
            var request = HTTPClientRequest(url: server.base + "/chunked.bin")
            request.method = .PUT
            let chunks = (0..<20).map { _ in ByteBuffer(string: String(repeating: "y", count: 10_000)) }
            request.body = .stream(chunks.async, length: .unknown)
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            #expect(response.status.code == 413)
            #expect(!server.exists("big.bin") && !server.exists("chunked.bin"))
            #expect(try FileManager.default.contentsOfDirectory(atPath: server.root) == ["fits.bin"], "no temporary file left")
        }
    }
}

private actor Counter {
    var value = 0
    func enter() -> Int { value += 1; return value }
    func leave() { value -= 1 }
}

extension Result where Success == Int32, Failure == BeneathWalk.Failure {
    func isFailure(_ code: Int32) -> Bool {
        switch self {
        case .failure(let failure): return failure.errno == code
        case .success(let fd): close(fd); return false
        }
    }
}

extension Array where Element: Sendable {
    var async: AsyncStream<Element> {
        AsyncStream { continuation in
            for element in self { continuation.yield(element) }
            continuation.finish()
        }
    }
}
