@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Logging
import Synchronization

// Support for ModelTests: a fixture whose core talks to the store through a `CrashableStore`,
// the daemon's startup after a crash, the operations and a seeded random generator.

extension CoreFixture {
    /// A writable fixture whose core reaches `store` through `proxy` (a `CrashableStore` that
    /// can be crashed or taken down); `store` stays the test's handle for arranging changes.
    init(store: InMemoryStore, through proxy: any Store, streaming: StreamingPolicy = .default,
         conflictClock: @escaping @Sendable () -> Date = { Date() }, streamedUploads: StreamedUpload.Policy = .default,
         reuse directory: String? = nil, capturing log: CapturedLog? = nil) throws {
        try self.init(store: store, through: proxy as (any Store)?, readOnly: false, streaming: streaming, conflictClock: conflictClock,
                      streamedUploads: streamedUploads, reuse: directory, capturing: log)
        self.streaming = streaming
    }

    /// `kill -9` of the daemon, in process: `proxy` (this core's way to the store) parks every
    /// later call, so the store never hears from this core again. Returns a copy of the
    /// directory (catalog and cache) as the killed daemon left it, taken now: whatever this
    /// core's tasks still do (a retry timer, a listing answered before the crash) lands in the
    /// old directory, never in the one the restarted daemon uses.
    func crash(_ proxy: CrashableStore) async throws -> String {
        proxy.crash()
        // Let work that was between two store calls run into the parked proxy.
        try? await Task.sleep(for: .milliseconds(20))
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-model-\(UUID().uuidString)").path
        try FileManager.default.copyItem(atPath: directory, toPath: copy)
        // SQLite's shared-memory index is rebuilt from the WAL by the next opener, as after a reboot.
        try? FileManager.default.removeItem(atPath: copy + "/catalog.sqlite-shm")
        return copy
    }

    /// The daemon starting on the catalog and cache a killed daemon left in `directory`, with
    /// the store reached through `proxy`: what `docfs mount` does before it serves anything.
    func restart(from directory: String, through proxy: any Store) async throws -> CoreFixture {
        let next = try CoreFixture(store: store, through: proxy, streaming: streaming, conflictClock: conflictClock,
                                   streamedUploads: streamedUploads, reuse: directory, capturing: capturedLog)
        try await next.fs.start()
        return next
    }

    /// A background directory listing of `directoryPath` ("/" for the root), waited for.
    func refresh(_ directoryPath: String) async throws {
        try await fs.refresh(directory: try await lookup(directoryPath).inode)
    }

    /// Local copies in the cache that are not pinned ones (which stay by design).
    func unpinnedCachedFiles() throws -> [String] {
        let pinned = try catalog.pinnedCopyIDs()
        return cachedFiles().filter { !pinned.contains($0) }
    }

    /// Files the catalog still holds unsynced changes for (a catalog that cannot tell fails
    /// the test: it is not "nothing pending").
    func pendingUploads() throws -> [Item] {
        try fs.catalog.items(in: [.modified, .uploading])
    }
}

/// One step of a model-test sequence. The description is Swift source, so a failing sequence
/// printed by the test can be pasted into a scripted test. Handles are numbered by the
/// open/create that made them (h0 is the first open or create of the sequence, failed or not).
enum ModelOp: Sendable, CustomStringConvertible {
    enum Access: String, Sendable {
        case read, readWrite, truncate
        /// Opened for writing and never read (`dd conv=notrunc`, a patcher): its edit is of the
        /// version the open saw, whatever the store has by its writes and its close.
        case blindWrite
        /// The same with O_APPEND (`>>`): every write lands at the end of that version.
        case blindAppend

        var writable: Bool { self != .read }
        var isBlind: Bool { self == .blindWrite || self == .blindAppend }
    }

    case open(String, Access)
    /// O_CREAT | O_TRUNC (what a shell's `>` does).
    case create(String)
    case read(handle: Int, offset: Int, count: Int)
    case write(handle: Int, offset: Int, count: Int)
    case flush(handle: Int)
    case fsync(handle: Int)
    /// close(): flush, then release.
    case close(handle: Int)
    /// ftruncate through an open handle.
    case truncateHandle(handle: Int, size: Int)
    /// truncate(2) of a path.
    case truncatePath(String, size: Int)
    case rename(String, String)
    case unlink(String)
    /// mkdir(2); in a folder this mount made a moment ago, the folder is made ahead of its files
    /// (its MKCOL in the background, before any upload below it).
    case mkdir(String)
    /// Another client writes the file (a new version, or a new file).
    case remoteChange(String, size: Int)
    case remoteDelete(String)
    case remoteRename(String, String)
    /// Another client replaces a file by a directory (holding one file), or a directory by a file.
    case remoteKindChange(String)
    /// A background listing of a directory ("/" for the root), waited for.
    case refresh(String)
    case serverDown
    case serverUp
    /// kill -9 of the daemon, then the daemon's startup on the same catalog and cache.
    case crashAndRestart
    /// An `.unlink` or `.rename` during which the daemon is killed the moment the store made
    /// its change (the answer never arrives), then the restart: the operation counts as done.
    /// One the store is not asked about (a file never uploaded), or that fails, ends first.
    indirect case killedDuring(ModelOp)
    /// Wait until every queued upload was tried.
    case settle
    /// Wait until no upload is queued, under way or waiting for a retry: the retries of uploads
    /// that failed run meanwhile (the server must be up). Not drawn by the generator; scripted
    /// sequences use it to place a retry between two operations.
    case waitForRetries
    /// Uploads wait at the store, before reading their snapshot, until `releaseUploads`; scripted
    /// sequences use it (with `waitForHeldUpload`) to run operations while an upload is on its
    /// way. Not drawn by the generator.
    case holdUploads
    /// Wait until an upload waits at the store (see `holdUploads`).
    case waitForHeldUpload
    case releaseUploads
    /// `docfs pin`: keep the file (a folder: everything below it) downloaded, across releases,
    /// unmounts and crashes.
    case pin(String)
    /// `docfs unpin`.
    case unpin(String)

    var description: String {
        switch self {
        case .open(let path, let access): return ".open(\"\(path)\", .\(access))"
        case .create(let path): return ".create(\"\(path)\")"
        case .read(let h, let offset, let count): return ".read(handle: \(h), offset: \(offset), count: \(count))"
        case .write(let h, let offset, let count): return ".write(handle: \(h), offset: \(offset), count: \(count))"
        case .flush(let h): return ".flush(handle: \(h))"
        case .fsync(let h): return ".fsync(handle: \(h))"
        case .close(let h): return ".close(handle: \(h))"
        case .truncateHandle(let h, let size): return ".truncateHandle(handle: \(h), size: \(size))"
        case .truncatePath(let path, let size): return ".truncatePath(\"\(path)\", size: \(size))"
        case .rename(let from, let to): return ".rename(\"\(from)\", \"\(to)\")"
        case .unlink(let path): return ".unlink(\"\(path)\")"
        case .mkdir(let path): return ".mkdir(\"\(path)\")"
        case .remoteChange(let path, let size): return ".remoteChange(\"\(path)\", size: \(size))"
        case .remoteDelete(let path): return ".remoteDelete(\"\(path)\")"
        case .remoteRename(let from, let to): return ".remoteRename(\"\(from)\", \"\(to)\")"
        case .remoteKindChange(let path): return ".remoteKindChange(\"\(path)\")"
        case .refresh(let path): return ".refresh(\"\(path)\")"
        case .serverDown: return ".serverDown"
        case .serverUp: return ".serverUp"
        case .crashAndRestart: return ".crashAndRestart"
        case .killedDuring(let op): return ".killedDuring(\(op))"
        case .settle: return ".settle"
        case .waitForRetries: return ".waitForRetries"
        case .holdUploads: return ".holdUploads"
        case .waitForHeldUpload: return ".waitForHeldUpload"
        case .releaseUploads: return ".releaseUploads"
        case .pin(let path): return ".pin(\"\(path)\")"
        case .unpin(let path): return ".unpin(\"\(path)\")"
        }
    }

    /// Whether this op makes a handle (and so takes the next handle number).
    var makesHandle: Bool {
        switch self {
        case .open, .create: return true
        default: return false
        }
    }
}


/// Uploads held at the store by a scripted sequence (`ModelOp.holdUploads`).
final class UploadHold: Sendable {
    let gate = Gate()
    let arrived = Mutex(0)
}

/// How a call bounded in time ended.
enum Timed<T: Sendable>: Sendable {
    case finished(Result<T, any Error>)
    case hung
}

/// Runs `body`, giving up on it (it stays parked) after `seconds`: a hang is a finding, and
/// must not hang the test.
func timed<T: Sendable>(_ seconds: Double, _ body: @escaping @Sendable () async throws -> T) async -> Timed<T> {
    let race = TimedRace<T>()
    return await withCheckedContinuation { (continuation: CheckedContinuation<Timed<T>, Never>) in
        race.waiter.withLock { $0 = continuation }
        let timer = Task {
            try? await Task.sleep(for: .seconds(seconds))
            guard !Task.isCancelled else { return }
            race.finish(.hung)
        }
        Task {
            let result: Result<T, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            timer.cancel()
            race.finish(.finished(result))
        }
    }
}

/// Who answers first: the call or the timer.
private final class TimedRace<T: Sendable>: Sendable {
    let waiter = Mutex<CheckedContinuation<Timed<T>, Never>?>(nil)

    func finish(_ outcome: Timed<T>) {
        waiter.withLock { $0.take() }?.resume(returning: outcome)
    }
}

/// Bytes for display: printable ASCII as is, the rest as `\xNN`, long content shortened.
func shown(_ bytes: [UInt8]) -> String {
    let text = bytes.prefix(48).map { byte -> String in
        byte >= 0x20 && byte < 0x7f && byte != UInt8(ascii: "\"") ? String(UnicodeScalar(byte)) : String(format: "\\x%02x", byte)
    }.joined()
    return "\"" + text + (bytes.count > 48 ? "…" : "") + "\" (\(bytes.count) bytes)"
}
