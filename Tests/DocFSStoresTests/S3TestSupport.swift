// Test support for S3Store: a real moto server (`moto_server`, from `pip install 'moto[server]'`)
// on a free port of 127.0.0.1, started per test with a fresh bucket and killed by its PID at the
// end, also on failure; and python3 helpers (boto3, botocore) for fixtures and cross-checks.
// A missing moto_server, python3, boto3 or botocore FAILS the test with a message: never a skip.

#if canImport(Glibc)
import Glibc
#endif
import DocFSStore
@testable import DocFSStores
import Foundation
import Logging
import Testing

/// Finds an executable on PATH (and the usual pip/pyenv places).
func findExecutable(_ name: String) -> String? {
    let environment = ProcessInfo.processInfo.environment
    var directories = (environment["PATH"] ?? "").split(separator: ":").map(String.init)
    let home = environment["HOME"] ?? NSHomeDirectory()
    directories += ["\(home)/.local/bin", "\(home)/.pyenv/shims", "/usr/local/bin", "/usr/bin", "/bin"]
    for directory in directories where !directory.isEmpty {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    return nil
}

/// Runs a python3 script, returns its stdout; throws with its stderr when it fails.
@discardableResult
/// Runs a Python script and returns what it printed. Async, and the wait happens on a Dispatch
/// thread: a blocked wait for a process (boto3 takes a second or two to start on a busy
/// machine) on the cooperative pool's 2 threads stalled every other test of the run.
func runPython(_ script: String, environment extra: [String: String] = [:], input: String? = nil) async throws -> String {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async {
            continuation.resume(with: Result { try runPythonBlocking(script, environment: extra, input: input) })
        }
    }
}

private func runPythonBlocking(_ script: String, environment extra: [String: String], input: String?) throws -> String {
    guard let python = findExecutable("python3") else {
        throw TestFailure("python3 is not installed (needed for the S3 tests: boto3 and botocore; `make test` installs them)")
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: python)
    process.arguments = ["-c", script]
    var environment = ProcessInfo.processInfo.environment
    for (name, value) in extra { environment[name] = value }
    process.environment = environment
    let output = Pipe()
    let errors = Pipe()
    let stdin = Pipe()
    process.standardOutput = output
    process.standardError = errors
    process.standardInput = stdin
    try process.run()
    if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
    try? stdin.fileHandleForWriting.close()
    // Read both pipes before waiting, so a chatty script cannot block on a full pipe.
    let outData = output.fileHandleForReading.readDataToEndOfFile()
    let errData = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let out = String(decoding: outData, as: UTF8.self)
    guard process.terminationStatus == 0 else {
        throw TestFailure("python3 failed (\(process.terminationStatus)): \(String(decoding: errData, as: UTF8.self).suffix(2000))")
    }
    return out
}

let s3TestCredentials = S3Credentials(accessKeyId: "AKIDMOTOTEST", secretAccessKey: "moto/secret+key")

/// The start of every boto3 fixture script: `s3` is a client of the test's moto, `B` its bucket.
let boto3Prelude = """
    import os, sys, json, concurrent.futures
    import boto3, botocore
    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"], region_name="us-east-1",
                      aws_access_key_id="AKIDMOTOTEST", aws_secret_access_key="moto/secret+key",
                      config=botocore.config.Config(s3={"addressing_style": "path"}, max_pool_connections=32))
    B = os.environ["S3_BUCKET"]

    """

/// Where the sources of uploads go: one directory per test process, removed when it exits
/// (the files, made inline by many tests, were left in /tmp: 10 per run).
let s3UploadDirectory = NSTemporaryDirectory() + "/docfs-s3-uploads-\(getpid())"

private let s3UploadDirectoryMade: Bool = {
    try? FileManager.default.createDirectory(atPath: s3UploadDirectory, withIntermediateDirectories: true)
    atexit { try? FileManager.default.removeItem(atPath: s3UploadDirectory) }
    return true
}()

/// A temporary local file holding `bytes`, the source of an upload.
func s3LocalFile(_ bytes: [UInt8]) throws -> String {
    _ = s3UploadDirectoryMade
    let file = s3UploadDirectory + "/\(UUID().uuidString)"
    guard FileManager.default.createFile(atPath: file, contents: Data(bytes)) else { throw TestFailure("cannot write \(file)") }
    return file
}

/// `moto_server` on a free port, killed by its PID at the end.
final class MotoServer: Sendable {
    let process: Process
    let port: Int
    let logFile: String
    var endpoint: String { "http://127.0.0.1:\(port)" }

    private init(process: Process, port: Int, logFile: String) {
        self.process = process
        self.port = port
        self.logFile = logFile
    }

    static func start() async throws -> MotoServer {
        guard let moto = findExecutable("moto_server") else {
            throw TestFailure("moto_server is not installed: run `python3 -m pip install 'moto[server]'` (`make test` does)")
        }
        var lastError: (any Error)?
        for _ in 0..<3 {
            let port = try freePort()
            let logFile = NSTemporaryDirectory() + "/docfs-moto-\(port)-\(UUID().uuidString).log"
            _ = FileManager.default.createFile(atPath: logFile, contents: Data())
            let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logFile))
            let process = Process()
            process.executableURL = URL(fileURLWithPath: moto)
            process.arguments = ["-H", "127.0.0.1", "-p", String(port)]
            process.standardOutput = log
            process.standardError = log
            try process.run()
            let server = MotoServer(process: process, port: port, logFile: logFile)
            do {
                try await server.waitUntilListening()
                return server
            } catch {
                await server.stop()
                lastError = error
            }
        }
        throw lastError ?? TestFailure("moto_server did not start")
    }

    private func waitUntilListening() async throws {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            guard process.isRunning else {
                throw TestFailure("moto_server exited before listening: \(log().suffix(1000))")
            }
            if Self.canConnect(port: port) { return }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        throw TestFailure("moto_server did not listen on port \(port) within 30 s")
    }

    static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    /// What moto logged (one line per request).
    func log() -> String {
        (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? ""
    }

    /// Runs a boto3 script against this server's `bucket`.
    @discardableResult
    func python(_ script: String, bucket: String) async throws -> String {
        try await runPython(boto3Prelude + script, environment: ["S3_ENDPOINT": endpoint, "S3_BUCKET": bucket])
    }

    /// Kills moto by its PID and reaps it.
    func stop() async {
        await offThePool { self.stopBlocking() }
    }

    private func stopBlocking() {
        if process.isRunning {
            kill(process.processIdentifier, SIGTERM)
            let deadline = Date().addingTimeInterval(5)
            while process.isRunning, Date() < deadline { usleep(20_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: logFile)
    }
}

/// A fresh moto with bucket `docfs-test`, an S3Store on it under `prefix`, both gone when `body`
/// returns, whatever happened.
func withS3Store(prefix: String = "", partSize: Int = S3Store.Configuration.defaultPartSize,
                 partHook: (@Sendable (Int) async throws -> Void)? = nil,
                 _ body: (S3Store, MotoServer) async throws -> Void) async throws {
    let server = try await MotoServer.start()
    do {
        try await server.python("s3.create_bucket(Bucket=B)", bucket: "docfs-test")
        var configuration = S3Store.Configuration(bucket: "docfs-test", prefix: prefix, region: "us-east-1",
                                                  endpoint: server.endpoint, credentials: s3TestCredentials, partSize: partSize)
        configuration.pathStyle = true
        let store = try S3Store(configuration: configuration, logger: testLogger, partHook: partHook)
        do {
            try await body(store, server)
        } catch {
            await store.shutdown()
            throw error
        }
        await store.shutdown()
    } catch {
        await server.stop()
        throw error
    }
    await server.stop()
}
