@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing
import Logging
import Synchronization

/// A fresh catalog and cache directory in a temporary folder, with the core wired to an
/// in-memory store.
struct CoreFixture {
    let directory: String
    let store: InMemoryStore
    let catalog: Catalog
    let fs: DocFileSystem
    /// How the core streams large files (a tiny policy makes every file of a test streamed).
    var streaming: StreamingPolicy
    /// When a new file is uploaded while it is written (where the store can).
    var streamedUploads: StreamedUpload.Policy
    /// The time the core names conflict copies after.
    var conflictClock: @Sendable () -> Date
    /// Where the core's log goes, at debug level (nil: only critical messages, to stderr).
    let capturedLog: CapturedLog?
    var cacheDirectory: String { directory + "/cache" }

    /// `proxy`: the way the core reaches `store` (a `CrashableStore`), if not directly.
    init(store: InMemoryStore = InMemoryStore(), through proxy: (any Store)? = nil, ttl: Double = 30, readOnly: Bool = true,
         streaming: StreamingPolicy = .default, retention: RetentionPolicy = .onLastRelease,
         listAhead: DirectoryEnumerator.ListAhead = .default,
         conflictClock: @escaping @Sendable () -> Date = { Date() }, streamedUploads: StreamedUpload.Policy = .default,
         reuse directory: String? = nil, capturing capturedLog: CapturedLog? = nil, versionTrust: Duration = .zero) throws {
        let directory = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("docfs-core-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory + "/cache", withIntermediateDirectories: true)
        self.directory = directory
        self.store = store
        self.streaming = streaming
        self.streamedUploads = streamedUploads
        self.conflictClock = conflictClock
        catalog = try Catalog(path: directory + "/catalog.sqlite")
        self.capturedLog = capturedLog
        var logger = capturedLog.map { log in Logger(label: "docfs", factory: { _ in CapturedLog.Handler(log: log) }) } ?? Logger(label: "test")
        logger.logLevel = capturedLog == nil ? .critical : .debug
        fs = DocFileSystem(store: proxy ?? store, catalog: catalog, cacheDirectory: directory + "/cache", directoryTTL: ttl,
                           readOnly: readOnly, uploadBackoff: .milliseconds(200), streaming: streaming,
                           retry: Self.quickRetry, retention: retention, listAhead: listAhead, conflictClock: conflictClock,
                           stateDirectory: directory, streamedUploads: streamedUploads, versionTrust: versionTrust, logger: logger)
    }

    /// A few quick tries: the tests' outages are switched on and off by the test itself, and
    /// a call that meets one should fail in about a second, not wait out a real mount's patience.
    static let quickRetry = RetryPolicy(attempts: 3, initialDelay: .milliseconds(250), maximumDelay: .seconds(2))

    /// Files in the cache directory: local copies on disk.
    func cachedFiles() -> [String] {
        guard FileManager.default.fileExists(atPath: cacheDirectory) else { return [] }  // made with the first copy
        do {
            return try FileManager.default.contentsOfDirectory(atPath: cacheDirectory)
        } catch {
            Issue.record("cannot read the cache directory \(cacheDirectory): \(error)")
            return ["(unreadable)"]  // never read as an empty cache
        }
    }

    func lookup(_ path: String) async throws -> Item {
        var inode = Item.rootInode
        var item = try fs.item(inode)
        for name in path.split(separator: "/") {
            item = try await fs.lookup(parent: inode, name: String(name))
            inode = item.inode
        }
        return item
    }

    /// Reads a whole open file through the handle, as the kernel would; its bytes must be
    /// local (a read that would wait for a fetch fails).
    func readAll(handle: UInt64, size: Int64) throws -> [UInt8] {
        var result: [UInt8] = []
        var offset: Int64 = 0
        while offset < size {
            guard let loan = try fs.lendForRead(handle: handle, offset: offset, count: 65536) else {
                throw FSError.io("bytes at \(offset) are not local")
            }
            let bytes = try loan.bytes(at: offset)
            if bytes.isEmpty { break }
            result += bytes
            offset += Int64(bytes.count)
        }
        return result
    }
}

extension DocFileSystem {
    /// Reads `count` bytes at `offset` the way the FUSE layer does: lent from the copy when
    /// they are local, else once they were fetched.
    func read(handle: UInt64, offset: Int64, count: Int) async throws(FSError) -> [UInt8] {
        if let loan = try lendForRead(handle: handle, offset: offset, count: count) { return try loan.bytes(at: offset) }
        try await waitForContent(handle: handle, offset: offset, count: count)
        return try lendLocalBytes(handle: handle, offset: offset, count: count).bytes(at: offset)
    }
}

extension DocFileSystem {
    /// A read as the kernel sends it, not waited for: true when its bytes were local; else
    /// their fetch (and a sequential reader's read-ahead) has started.
    @discardableResult
    func startRead(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> Bool {
        try lendForRead(handle: handle, offset: offset, count: count) != nil
    }
}

extension DescriptorLoan {
    /// The lent bytes, read from the descriptor as the kernel's splice would.
    func bytes(at offset: Int64) throws(FSError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var total = 0
        while total < count {
            let n = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress! + total, count - total, off_t(offset) + off_t(total)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .local(errno: errno, "reading a lent descriptor")
            }
            if n == 0 { break }
            total += n
        }
        return Array(bytes[0..<total])
    }
}

extension CoreFixture {
    /// A writable fixture.
    static func writable(store: InMemoryStore = InMemoryStore(), streaming: StreamingPolicy = .default,
                         streamedUploads: StreamedUpload.Policy = .default, reuse directory: String? = nil) throws -> CoreFixture {
        try CoreFixture(store: store, readOnly: false, streaming: streaming, streamedUploads: streamedUploads, reuse: directory)
    }

    /// Writes `bytes` at `offset` through a handle, as the kernel would.
    func write(handle: UInt64, _ bytes: [UInt8], at offset: Int64 = 0) throws {
        _ = try bytes.withUnsafeBytes { try fs.writeLanding(handle: handle, offset: offset, bytes: $0).count }
    }

    /// Creates `name` in the root with `content`, and closes it.
    @discardableResult
    func createFile(_ name: String, _ content: [UInt8], in parent: Inode = Item.rootInode) async throws -> Item {
        let (item, handle) = try await fs.create(in: parent, name: name, mode: 0o644, owner: 0, group: 0, exclusive: true, truncate: false)
        try write(handle: handle, content)
        try await fs.flush(handle: handle)
        await fs.release(handle: handle)
        return item
    }

    /// Waits until the changes a killed daemon left under way are settled and every queued
    /// upload has been tried.
    func settle() async {
        await fs.waitForChangesCutShort()
        await fs.waitForUploads(untilStalled: true)
    }
}

func randomBytes(_ count: Int) -> [UInt8] {
    // Eight bytes per draw from SplitMix64 seeded once: the system generator makes a getrandom
    // syscall per draw, and tens of MiB of that kept both cooperative threads busy for 20 s,
    // stalling every other test of the run.
    var generator = SeededGenerator(seed: UInt64.random(in: 0...UInt64.max))
    var words = [UInt64](repeating: 0, count: (count + 7) / 8)
    for index in words.indices { words[index] = generator.next() }
    return words.withUnsafeBytes { Array($0.prefix(count)) }
}

/// Waits `duration` even when the calling task is cancelled: a call that notices cancellation
/// late (a request already on the wire, a copy under way).
func sleepIgnoringCancellation(_ duration: Duration) async {
    await Task.detached { try? await Task.sleep(for: duration) }.value
}

/// A core's log kept in memory, each line with the time it was made, so that a model run can
/// show what the core did between its operations (`DOCFS_MODEL_LOG`). Printing it as it comes
/// slows the core enough to hide the timing-dependent failures it is wanted for.
final class CapturedLog: Sendable {
    private let lines = Mutex<[String]>([])

    func append(_ line: String) {
        let stamped = "\(Date().timeIntervalSince1970) \(line)"
        lines.withLock { $0.append(stamped) }
    }

    var text: String { lines.withLock { $0.joined(separator: "\n") } }

    struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
                 file: String, function: String, line: UInt) {
            let fields = self.metadata.merging(metadata ?? [:]) { $1 }.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            log.append("\(level) \(message) \(fields.joined(separator: " "))")
        }
    }
}

