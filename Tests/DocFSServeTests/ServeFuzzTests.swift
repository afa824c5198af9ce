// Fuzzing `docfs serve`'s request parsing (issue 10, item 10, serve part) with a seeded
// generator: thousands of random and mutated request paths and headers (Destination, If-Match,
// Depth, Range, Overwrite, Host, Authorization, sizes) go through the parsers. Nothing may
// crash, every accepted path must consist of plain names only, and opening it from a real root
// (which holds symlinks pointing outside and upwards) must never reach anything outside.
// The kernel's openat2 and the portable O_NOFOLLOW walk must agree on every path.
// A failure prints its seed and input; DOCFS_FUZZ_SEED / DOCFS_FUZZ_COUNT rerun or widen a run.

@testable import DocFSServe
import DocFSStore
import DocFSTesting
import Foundation
import Testing


private let pathPieces = [
    "/", "//", ".", "..", "%2e", "%2E", "%2e%2e", ".%2e", "%2f", "%2F", "%00", "%", "%z", "%zz", "%C3", "%A9",
    "%C3%A9", "%c0%ae", "%ff", "%5c", "\\", "a", "d", "e", "x", "link", "up", "secret", "ü", "e\u{301}", "~", "?", "#",
    " ", "%20", "%25", "%2", "\u{0}", "\u{202E}", "CON", "...", ".docfs-put-x",
]
private let headerPieces = [
    "\"", "W/", "*", ",", " ", "\t", "bytes=", "-", "0", "1", "9", "18446744073709551616", "-1", "=", "infinity", "T", "F",
    "t", "http://", "https://", "127.0.0.1", "localhost", "[::1]", "[", "]", ":", "80", "8080", "65536", "@", "evil.example",
    "/", "/a", "%2e%2e", "?", "#", "Basic ", "YW5uOnB3", "=", "K", "M", "G", "T", "unlimited", "\u{0}", "ü", "%",
]

private func piecesString(_ pieces: [String], count: Int, using random: inout SeededGenerator) -> String {
    (0..<count).map { _ in pieces.randomElement(using: &random)! }.joined()
}

/// Flips, inserts or deletes a few bytes (the result may not be valid UTF-8: it is decoded with
/// replacement, as a header or path arriving on the wire would be).
private func mutate(_ text: String, using random: inout SeededGenerator) -> String {
    var bytes = Array(text.utf8)
    for _ in 0..<Int.random(in: 1...4, using: &random) {
        switch Int.random(in: 0..<3, using: &random) {
        case 0 where !bytes.isEmpty: bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(in: 0...255, using: &random)
        case 1: bytes.insert(UInt8.random(in: 0...255, using: &random), at: Int.random(in: 0...bytes.count, using: &random))
        default: if !bytes.isEmpty { bytes.remove(at: Int.random(in: 0..<bytes.count, using: &random)) }
        }
    }
    return String(decoding: bytes, as: UTF8.self)
}

@Suite struct ServeFuzzTests {
    static var seed: UInt64 { ProcessInfo.processInfo.environment["DOCFS_FUZZ_SEED"].flatMap { UInt64($0) } ?? 20_261_124 }
    static var count: Int { ProcessInfo.processInfo.environment["DOCFS_FUZZ_COUNT"].flatMap { Int($0) } ?? 5000 }

    /// A root with a nested folder, a file, and symlinks that lead outside and upwards; and what
    /// lies outside it. Returns the root and the identities of everything inside.
    private static func makeTree() throws -> (scratch: String, root: String, inside: Set<[UInt64]>) {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-fuzz-\(UUID().uuidString)").path
        let root = scratch + "/root"
        try FileManager.default.createDirectory(atPath: root + "/d/e", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: scratch + "/outside/d", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/x"))
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/d/x"))
        try Data("secret".utf8).write(to: URL(fileURLWithPath: scratch + "/outside/secret"))
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: scratch + "/outside")
        try FileManager.default.createSymbolicLink(atPath: root + "/d/up", withDestinationPath: "../..")
        try FileManager.default.createSymbolicLink(atPath: root + "/secret", withDestinationPath: "../outside/secret")
        var inside: Set<[UInt64]> = []
        for relative in ["", "/d", "/d/e", "/x", "/d/x"] {
            var st = stat()
            #expect(lstat(root + relative, &st) == 0)
            inside.insert([UInt64(st.st_dev), UInt64(st.st_ino)])
        }
        return (scratch, root, inside)
    }

    /// (device, inode) of an opened directory, or the errno of a failed walk; closes the descriptor.
    private static func identity(_ result: Result<Int32, BeneathWalk.Failure>) -> [UInt64] {
        switch result {
        case .failure(let failure): return [UInt64(failure.errno)]
        case .success(let fd):
            defer { close(fd) }
            var st = stat()
            fstat(fd, &st)
            return [UInt64(st.st_dev), UInt64(st.st_ino)]
        }
    }

    @Test func requestPathsStayBeneathTheRoot() async throws {
        let (scratch, root, inside) = try Self.makeTree()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let served = try ServedDirectory(path: root)
        var random = SeededGenerator(seed: Self.seed)
        var accepted = 0, opened = 0
        let known = ["/d/e/", "/d/x", "/x", "/link/secret", "/d/up/outside/secret", "/secret", "/d/%2e%2e/x"]
        for index in 0..<Self.count {
            // CPU- and syscall-bound: leave the cooperative pool (2 threads on 2 cores) to the
            // tests running beside this one, or their awaits stall for tens of seconds.
            if index % 25 == 0 { await Task.yield() }
            let raw: String
            switch index % 3 {
            case 0: raw = "/" + piecesString(pathPieces, count: Int.random(in: 0...8, using: &random), using: &random)
            case 1: raw = mutate(known.randomElement(using: &random)!, using: &random)
            default: raw = mutate("/" + piecesString(pathPieces, count: Int.random(in: 1...5, using: &random), using: &random), using: &random)
            }
            guard let path = try? DAVPath(percentEncoded: raw) else { continue }
            accepted += 1
            for name in path.components {
                #expect(BeneathWalk.isStep(name), "seed \(Self.seed) #\(index): \(raw.debugDescription) -> name \(name.debugDescription)")
            }
            _ = path.href(isDirectory: Bool.random(using: &random))
            // openat2 (where the kernel has it) and the portable walk agree on every path.
            let fast = BeneathWalk.openDirectory(below: served.rootDirectory.fd, path.components)
            let walked = BeneathWalk.openDirectoryByWalking(below: served.rootDirectory.fd, path.components)
            #expect(Self.identity(fast) == Self.identity(walked), "seed \(Self.seed) #\(index): \(raw.debugDescription)")
            // Whatever opens must be one of the entries inside the root.
            if let directory = try? served.openDirectory(path) {
                opened += 1
                var st = stat()
                #expect(fstat(directory.fd, &st) == 0)
                #expect(inside.contains([UInt64(st.st_dev), UInt64(st.st_ino)]), "seed \(Self.seed) #\(index): \(raw.debugDescription) opened a directory outside")
            }
            if let (file, info) = try? served.openForReading(path, wantDescriptor: true) {
                opened += 1
                #expect(inside.contains([info.device, info.inode]), "seed \(Self.seed) #\(index): \(raw.debugDescription) reached outside")
                if let file {
                    var st = stat()
                    #expect(fstat(file.fd, &st) == 0 && inside.contains([UInt64(st.st_dev), UInt64(st.st_ino)]))
                }
            }
        }
        // The generator must actually reach both sides, or the test proves nothing.
        #expect(accepted > Self.count / 10 && opened > 50, "accepted \(accepted), opened \(opened)")
    }

    @Test func headersNeverCrashAndStayConsistent() async throws {
        var random = SeededGenerator(seed: Self.seed ^ 0xDAF5)
        let origin = ServedOrigin(scheme: "http", host: "127.0.0.1")
        let auth = BasicAuth(BasicCredentials(user: "ann", password: "pw"))
        let port = 8080
        var destinationsAccepted = 0
        for index in 0..<Self.count {
            if index % 100 == 0 { await Task.yield() }  // leave the cooperative pool to other tests
            let header = index % 2 == 0
                ? piecesString(headerPieces, count: Int.random(in: 0...10, using: &random), using: &random)
                : mutate(["bytes=0-9", "\"abc\", W/\"d\"", "http://127.0.0.1:8080/a/b", "localhost:8080", "1", "T", "Basic YW5uOnB3", "10G"]
                    .randomElement(using: &random)!, using: &random)
            let context = "seed \(Self.seed) #\(index): \(header.debugDescription)"

            // Destination: an accepted one names this origin and a path of plain names.
            if (try? origin.checkDestination(header, port: port)) != nil, let rawPath = DAVPath.destinationPath(header),
               let path = try? DAVPath(percentEncoded: rawPath) {
                destinationsAccepted += 1
                #expect(path.components.allSatisfy(BeneathWalk.isStep), "\(context)")
                if let schemeEnd = header.firstRange(of: "://") {
                    let authority = header[schemeEnd.upperBound...].prefix(while: { $0 != "/" && $0 != "?" && $0 != "#" })
                    let parsed = ServedOrigin.authority(authority)
                    #expect(parsed.map { ServedOrigin.isLoopback($0.host) && ($0.port ?? 80) == port } == true, "\(context)")
                }
            }
            // Host: accepted only for a loopback name on our port.
            if (try? origin.checkHost(header, port: port)) != nil {
                let parsed = ServedOrigin.authority(header)
                #expect(parsed.map { ServedOrigin.isLoopback($0.host) && ($0.port ?? 80) == port } == true, "\(context)")
            }
            // Range: a resolved range lies inside the file.
            if let range = ByteRangeRequest(header: header) {
                let size = Int64.random(in: 0...1_000, using: &random)
                if let resolved = range.resolve(size: size) {
                    #expect(resolved.lowerBound >= 0 && resolved.upperBound < size, "\(context) size \(size)")
                }
            }
            _ = ETagMatch.matches(header, etag: Bool.random(using: &random) ? "\"abc\"" : nil, weak: Bool.random(using: &random))
            if let depth = try? DAVHeaders.propfindDepth(header) { #expect(depth == 0 || depth == 1) }
            _ = try? DAVHeaders.copyRecursive(header, move: Bool.random(using: &random))
            _ = try? DAVHeaders.overwrite(header)
            if let size = ByteSize.parse(header), case .bytes(let bytes) = size { #expect(bytes >= 0, "\(context)") }
            if (try? auth.check(header)) != nil {
                #expect(BasicAuth.decode(header) == Array("ann:pw".utf8), "\(context)")
            }
            _ = try? DAVPath(percentEncoded: header)
        }
        #expect(destinationsAccepted > 0)
    }
}
