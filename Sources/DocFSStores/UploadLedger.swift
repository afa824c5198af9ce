// UploadLedger: the uploads a store began and left something of on the server until they end,
// one small file each in a directory of the mount's own state. A daemon killed in the middle of
// one leaves that something behind, seen by no listing: S3 parts of a multipart upload (billed),
// a WebDAV streamed upload's temporary file. The next mount removes exactly those, and never
// what another client has under way on the same server (the server cannot tell them apart).

import Crypto
import DocFSStore
import Foundation
import Logging

final class UploadLedger<Entry: Codable & Equatable & Sendable>: Sendable {
    let directory: String
    private let logger: Logger
    /// Records are flushed to disk before the server keeps anything (see `record`); false for
    /// a ledger whose loss in a crash of the machine costs nothing but tidiness.
    private let durable: Bool

    init(directory: String, logger: Logger, durable: Bool = true) {
        self.directory = directory
        self.logger = logger
        self.durable = durable
        mkdir(directory, 0o700)
    }

    /// Records `entry`, known by `identity` (unique among the uploads under way), before the
    /// server keeps anything of it, durably (a crash of the machine must not lose the record
    /// while the server keeps what it names). Returns the record's file, or nil when it could
    /// not be written: the upload goes on, unrecorded.
    func record(_ entry: Entry, identity: String, path: StorePath) -> String? {
        let file = directory + "/" + Self.name(of: identity)
        do {
            let data = try JSONEncoder().encode(entry)
            let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            defer { close(fd) }
            let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written == data.count, !durable || fsync(fd) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            if durable { Self.syncDirectory(directory) }
            return file
        } catch {
            unlink(file)
            logger.warning("cannot record an upload; a crash during it would leave a part of it on the server",
                           metadata: ["path": "\(path)", "error": "\(error)"])
            return nil
        }
    }

    /// The upload of record `file` ended, and the server keeps nothing of it but its result.
    func remove(_ file: String) {
        unlink(file)
    }

    /// The record of the upload known by `identity`, if there is one.
    func remove(identity: String) {
        unlink(directory + "/" + Self.name(of: identity))
    }

    /// The uploads recorded and never ended (by an earlier run), with their files.
    func unfinished() -> [(file: String, entry: Entry)] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        return names.sorted().compactMap { name in
            let file = directory + "/" + name
            guard let data = FileManager.default.contents(atPath: file),
                  let entry = try? JSONDecoder().decode(Entry.self, from: data) else {
                unlink(file)  // a record cut short by a crash: its upload was never begun
                return nil
            }
            return (file, entry)
        }
    }

    /// Ends what an earlier run left of each unfinished upload with `end`, in the background (a
    /// store that cannot be reached now gets them ended by a later mount); a record goes once
    /// its `end` succeeded. `path` names an entry's file in the logs.
    func endUnfinished(what: String, path: @escaping @Sendable (Entry) -> String,
                       _ end: @escaping @Sendable (Entry) async throws(StoreError) -> Void) {
        let leftovers = unfinished()
        guard !leftovers.isEmpty else { return }
        Task {
            for (file, entry) in leftovers {
                do {
                    try await end(entry)
                    self.remove(file)
                    self.logger.info("removed \(what) an earlier run left unfinished", metadata: ["path": "\(path(entry))"])
                } catch {
                    self.logger.info("cannot remove \(what) an earlier run left unfinished; the next mount tries again",
                                metadata: ["path": "\(path(entry))", "error": "\(error)"])
                }
            }
        }
    }

    private static func name(of identity: String) -> String {
        SHA256.hash(data: Data(identity.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined() + ".json"
    }

    private static func syncDirectory(_ directory: String) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}
