// Test support for the store conformance suite: temporary directories, a sink that collects
// bytes, and the backends (a local directory, rclone's WebDAV server, docfs's own WebDAV server),
// each started on a fresh directory and stopped at the end of the test, also on failure.

#if canImport(Glibc)
import Glibc
#endif
import DocFSServe
import DocFSStore
@testable import DocFSStores
import Foundation
import Logging
import Testing

// MARK: - Temporary directories

final class TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/docfs-stores-test-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw TestFailure("mkdtemp failed: \(errno)") }
        path = String(cString: made)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
        try? FileManager.default.removeItem(atPath: uploads)
    }

    /// A sibling directory (outside the store's root) for the local files a test uploads.
    var uploads: String { path + "-uploads" }

    /// A local file holding `bytes`, to upload from; removed with the directory.
    func uploadSource(_ bytes: [UInt8]) throws -> String {
        try FileManager.default.createDirectory(atPath: uploads, withIntermediateDirectories: true)
        let file = uploads + "/" + UUID().uuidString
        guard FileManager.default.createFile(atPath: file, contents: Data(bytes)) else { throw TestFailure("cannot write \(file)") }
        return file
    }

    func file(_ relative: String) -> String { path + "/" + relative }

    func write(_ relative: String, _ bytes: [UInt8]) throws {
        let full = file(relative)
        try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: full, contents: Data(bytes)) else { throw TestFailure("cannot write \(full)") }
    }

    func write(_ relative: String, _ text: String) throws { try write(relative, Array(text.utf8)) }

    func mkdir(_ relative: String) throws {
        try FileManager.default.createDirectory(atPath: file(relative), withIntermediateDirectories: true)
    }

    func read(_ relative: String) -> [UInt8]? {
        FileManager.default.contents(atPath: file(relative)).map { Array($0) }
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

func randomBytes(_ count: Int, seed: UInt64 = 42) -> [UInt8] {
    var state = seed &* 6364136223846793005 &+ 1442695040888963407
    return (0..<count).map { _ in
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return UInt8(truncatingIfNeeded: state >> 33)
    }
}

// MARK: - A sink that collects bytes

/// Collects what a store streams. `@unchecked Sendable`: every access to the mutable state is under `lock`.
final class CollectingSink: ContentSink, @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [UInt8] = []
    private var writes: [(offset: Int64, count: Int)] = []

    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        lock.lock()
        defer { lock.unlock() }
        let end = Int(offset) + bytes.count
        if storage.count < end { storage.append(contentsOf: repeatElement(0, count: end - storage.count)) }
        storage.replaceSubrange(Int(offset)..<end, with: bytes)
        writes.append((offset, bytes.count))
    }

    /// The bytes from `start` on (what a range read starting at `start` delivered).
    func bytes(from start: Int = 0) -> [UInt8] {
        lock.lock()
        defer { lock.unlock() }
        return start < storage.count ? Array(storage[start...]) : []
    }

    var writeCount: Int {
        lock.lock()
        defer { lock.unlock() }
        return writes.count
    }

    /// Writes came in order, each starting where the previous ended, the first at `start`.
    func isContiguous(from start: Int64) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        var next = start
        for write in writes {
            if write.offset != next { return false }
            next += Int64(write.count)
        }
        return true
    }
}

// MARK: - Backends

enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case local
    case rcloneWebDAV
    case docfsServeWebDAV

    var testDescription: String { rawValue }
}

let testLogger: Logger = {
    var logger = Logger(label: "docfs.test.stores")
    logger.logLevel = .warning
    return logger
}()

/// Runs `body` with a store of `backend` over a fresh directory that `seed` fills first.
/// The directory and any server are gone when it returns, whatever happened.
func withStore(_ backend: Backend, seed: (TemporaryDirectory) throws -> Void = { _ in },
               _ body: (any Store, TemporaryDirectory) async throws -> Void) async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    try seed(directory)
    switch backend {
    case .local:
        let store = try LocalDirectoryStore(root: directory.path, logger: testLogger)
        try await body(store, directory)
    case .rcloneWebDAV:
        let server = try await RcloneServer.start(serving: directory.path)
        try await withWebDAVStore(port: server.port, stop: { await server.stop() }) { try await body($0, directory) }
    case .docfsServeWebDAV:
        let server = try await DocFSServer.start(serving: directory.path)
        try await withWebDAVStore(port: server.port, stop: { await server.stop() }) { try await body($0, directory) }
    }
}

/// A WebDAV store of the server on `port` for `body`; the store shut down and the server stopped
/// after it, also when it throws.
private func withWebDAVStore(port: Int, stop: () async -> Void, _ body: (WebDAVStore) async throws -> Void) async throws {
    do {
        let store = try WebDAVStore(baseURL: "http://127.0.0.1:\(port)/", logger: testLogger)
        do {
            try await body(store)
        } catch {
            await store.shutdown()
            throw error
        }
        await store.shutdown()
    } catch {
        await stop()
        throw error
    }
    await stop()
}

/// Runs `body` on a Dispatch thread: a test waiting for a busy server process to exit on the
/// cooperative pool's two threads stalls every other test of the run (a streamed listing of
/// another test then hits its read timeout).
func offThePool(_ body: @escaping @Sendable () -> Void) async {
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
        DispatchQueue.global().async {
            body()
            done.resume()
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; a tiny race with other processes remains).
func freePort() throws -> Int {
    let socket = try boundSocket()
    defer { close(socket.descriptor) }
    return socket.port
}

/// Runs `body` with a loopback port that refuses every connection: a socket is bound to it
/// but never listens, so the kernel answers a connect with a reset, and no other test can
/// take the port meanwhile (a port merely freed could be bound by a server another test
/// starts in parallel).
func withRefusingPort<Result>(_ body: (Int) async throws -> Result) async throws -> Result {
    let socket = try boundSocket()
    defer { close(socket.descriptor) }
    return try await body(socket.port)
}

/// A TCP socket bound to a port the kernel picked on 127.0.0.1, not listening.
private func boundSocket() throws -> (descriptor: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket failed") }
    var keep = false
    defer { if !keep { close(fd) } }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw TestFailure("bind failed") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    keep = true
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// Waits until a WebDAV server on `port` answers a PROPFIND of its root.
func waitUntilAnswering(port: Int, isAlive: @escaping @Sendable () -> Bool) async throws {
    let probe = try WebDAVStore(baseURL: "http://127.0.0.1:\(port)/", logger: testLogger)
    let deadline = Date().addingTimeInterval(15)
    var problem = "the server on port \(port) did not answer within 15 s"
    while Date() < deadline {
        guard isAlive() else {
            problem = "the server exited before answering"
            break
        }
        if (try? await probe.stat(.root)) != nil {
            await probe.shutdown()
            return
        }
        try? await Task.sleep(nanoseconds: 50_000_000)
    }
    await probe.shutdown()
    throw TestFailure(problem)
}

/// `rclone serve webdav DIR` on a free port, killed by its PID at the end.
final class RcloneServer: Sendable {
    let process: Process
    let port: Int
    let configFile: String

    private init(process: Process, port: Int, configFile: String) {
        self.process = process
        self.port = port
        self.configFile = configFile
    }

    static func executable() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") + ["/usr/bin", "/usr/local/bin"] {
            let candidate = "\(directory)/rclone"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    static func start(serving directory: String) async throws -> RcloneServer {
        guard let rclone = executable() else {
            throw TestFailure("rclone is not installed (needed for the WebDAV conformance tests; `make test` installs it)")
        }
        var lastError: (any Error)?
        for _ in 0..<3 {
            let port = try freePort()
            let configFile = NSTemporaryDirectory() + "/docfs-rclone-\(UUID().uuidString).conf"
            _ = FileManager.default.createFile(atPath: configFile, contents: Data())
            let process = Process()
            process.executableURL = URL(fileURLWithPath: rclone)
            process.arguments = ["serve", "webdav", directory, "--addr", "127.0.0.1:\(port)", "--config", configFile, "-q"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let server = RcloneServer(process: process, port: port, configFile: configFile)
            do {
                try await waitUntilAnswering(port: port, isAlive: { process.isRunning })
                return server
            } catch {
                await server.stop()
                lastError = error
            }
        }
        throw lastError ?? TestFailure("rclone did not start")
    }

    /// Kills this rclone by its PID and reaps it.
    func stop() async {
        await offThePool { self.stopBlocking() }
    }

    private func stopBlocking() {
        if process.isRunning {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: configFile)
    }
}

/// docfs's own `WebDAVServer` on a free port, in a task cancelled at the end.
final class DocFSServer: Sendable {
    let task: Task<Void, any Error>
    let port: Int

    private init(task: Task<Void, any Error>, port: Int) {
        self.task = task
        self.port = port
    }

    static func start(serving directory: String) async throws -> DocFSServer {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let server = WebDAVServer(configuration: WebDAVServerConfiguration(root: directory, host: "127.0.0.1", port: 0),
                                  logger: testLogger)
        let task = Task {
            defer { continuation.finish() }
            try await server.run(onListening: { port in continuation.yield(port) })
        }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next() else {
            let result = await task.result
            if case .failure(let error) = result { throw TestFailure("docfs serve did not start: \(error)") }
            throw TestFailure("docfs serve stopped before listening")
        }
        return DocFSServer(task: task, port: port)
    }

    func stop() async {
        task.cancel()
        _ = await task.result
    }
}

/// Runs `body` with a WebDAV store, and shuts its HTTP client down whatever happens
/// (a debug build traps when an HTTPClient is released without shutdown).
func withWebDAVStore(_ baseURL: String, username: String? = nil, password: String? = nil,
                     _ body: (WebDAVStore) async throws -> Void) async throws {
    let store = try WebDAVStore(baseURL: baseURL, username: username, password: password, logger: testLogger)
    do {
        try await body(store)
    } catch {
        await store.shutdown()
        throw error
    }
    await store.shutdown()
}
