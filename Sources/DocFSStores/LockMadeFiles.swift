// LockMadeFiles: the empty files this mount's LOCKs made at new names, until their PUT fills
// them. A server with WebDAV locks (rclone, Apache, WsgiDAV, sabre/dav) makes an empty file when
// a name that does not exist is locked; docfs locks a new file's name, checks it under the lock,
// then PUTs. Found again under a later lock (a DELETE refused, or a daemon killed between the
// LOCK and the PUT), such a file is docfs's to fill, not another client's file to keep beside
// its own as a conflict copy. Each is recorded in the mount's state until its PUT, so the next
// mount knows the ones a killed daemon left, and the lock's token: it takes the lock back at
// once (nginx keeps a lock a minute whatever docfs asks, and the new file's upload would wait for
// it). An empty file another client put there meanwhile under the same version is taken for
// ours: it held no byte to lose.

import DocFSStore
import Foundation
import Logging
import Synchronization

/// An empty file a LOCK of this mount made, as the server showed it under that lock.
struct LockMadeFile: Codable, Equatable, Sendable {
    var path: String
    /// The server's tag of it; nil where the server gives none (sabre/dav's file tree).
    var etag: String?
    /// Its modification time, which tells it apart where there is no tag.
    var modified: Double
    /// The token of the lock that made it.
    var token: String

    init(path: StorePath, _ entry: RemoteEntry, token: String) {
        self.path = path.description
        self.etag = entry.etag?.value
        self.modified = entry.modified
        self.token = token
    }

    /// Whether `entry` is this very empty file, still unfilled.
    func isStill(_ entry: RemoteEntry) -> Bool {
        guard entry.kind == .file, entry.size == 0 else { return false }
        switch (etag, entry.etag) {
        case (let recorded?, let found?): return ETag.sameVersion(ETag(recorded), found)
        case (nil, nil): return modified > 0 && entry.modified == modified
        default: return false
        }
    }
}

final class LockMadeFiles: Sendable {
    private let files = Mutex<[StorePath: LockMadeFile]>([:])
    /// Each file's record is known by its path (one lock, so one file, per path at a time).
    private let ledger = Mutex<UploadLedger<LockMadeFile>?>(nil)

    /// Whether the empty file `found` at `path`, seen under `lock`, is one of this mount's
    /// LOCKs made. A lock that says it made the file is recorded then.
    func isOurs(_ found: RemoteEntry, at path: StorePath, under lock: HeldLock) -> Bool {
        guard found.kind == .file, found.size == 0 else { return false }
        guard lock.created else { return files.withLock { $0[path]?.isStill(found) ?? false } }
        let file = LockMadeFile(path: path, found, token: lock.token)
        _ = ledger.withLock { $0 }?.record(file, identity: path.description, path: path)
        files.withLock { $0[path] = file }
        return true
    }

    /// The file at `path` was filled by a PUT, or deleted: no longer one to recognise.
    /// `ifStill`: only if that is the file recorded there (a lock may have made another since).
    func forget(_ path: StorePath, ifStill expected: LockMadeFile? = nil) {
        let forgotten = files.withLock { files -> Bool in
            guard let held = files[path], expected == nil || held == expected else { return false }
            files[path] = nil
            return true
        }
        if forgotten { ledger.withLock { $0 }?.remove(identity: path.description) }
    }

    /// Records this mount's files in `directory`, and takes as its own the ones an earlier run
    /// recorded there and never filled (a daemon killed between a LOCK and its PUT): the next
    /// upload of that name fills them, once `unlock` took the killed run's lock back. A record
    /// whose file is not there unfilled any more is dropped once `stat` says so; one the store
    /// cannot answer for stays for the next mount.
    func adopt(_ directory: String, logger: Logger, unlock: @escaping @Sendable (StorePath, String) async -> Void,
               stat: @escaping @Sendable (StorePath) async throws(StoreError) -> RemoteEntry?) {
        // Not flushed: a record is there for a daemon killed, not for a machine that loses the
        // page cache, and costs nothing then but a conflict copy beside an empty file.
        let ledger = UploadLedger<LockMadeFile>(directory: directory, logger: logger, durable: false)
        let left = ledger.unfinished().compactMap { record -> (StorePath, LockMadeFile)? in
            guard let path = try? StorePath(record.entry.path) else { ledger.remove(record.file); return nil }
            return (path, record.entry)
        }
        files.withLock { files in
            for (path, file) in left { files[path] = file }
        }
        self.ledger.withLock { $0 = ledger }
        guard !left.isEmpty else { return }
        logger.info("empty files an earlier run's locks made are this mount's to fill", metadata: ["count": "\(left.count)"])
        Task {
            for (path, file) in left { await unlock(path, file.token) }
            for (path, file) in left {
                let found: RemoteEntry?
                do { found = try await stat(path) } catch { continue }  // asked again by the next mount
                if found.map(file.isStill) != true { forget(path, ifStill: file) }
            }
        }
    }
}
