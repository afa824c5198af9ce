// S3UploadLedger: the multipart uploads this store began and has not completed or aborted yet,
// one small file each in a directory of the mount's own state. A daemon killed during a
// multipart upload leaves the parts it sent on the server, where they are billed and seen by no
// listing; the next mount aborts exactly those, and never an upload another client has under
// way in the same bucket (ListMultipartUploads cannot tell them apart: same credentials).

import Crypto
import DocFSStore
import Foundation
import Logging

final class S3UploadLedger: Sendable {
    /// What is recorded of one upload.
    struct Upload: Codable, Equatable, Sendable {
        var key: String
        var uploadId: String
        /// The store path, for logs.
        var path: String
    }

    let directory: String
    private let logger: Logger

    init(directory: String, logger: Logger) {
        self.directory = directory
        self.logger = logger
        mkdir(directory, 0o700)
    }

    /// Records `upload` before its first part is sent, durably (a crash of the machine must not
    /// lose the record while the parts survive on the server). Returns the record's file, or
    /// nil when it could not be written: the upload goes on, unrecorded.
    func record(_ upload: Upload) -> String? {
        let file = directory + "/" + Self.name(of: upload.uploadId)
        do {
            let data = try JSONEncoder().encode(upload)
            let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            defer { close(fd) }
            let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written == data.count, fsync(fd) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            Self.syncDirectory(directory)
            return file
        } catch {
            unlink(file)
            logger.warning("cannot record a multipart upload; a crash during it would leave its parts on the server",
                           metadata: ["path": "\(upload.path)", "error": "\(error)"])
            return nil
        }
    }

    /// The upload of record `file` was completed or aborted.
    func remove(_ file: String) {
        unlink(file)
    }

    /// The uploads recorded and never completed nor aborted (by an earlier run), with their files.
    func unfinished() -> [(file: String, upload: Upload)] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        return names.sorted().compactMap { name in
            let file = directory + "/" + name
            guard let data = FileManager.default.contents(atPath: file),
                  let upload = try? JSONDecoder().decode(Upload.self, from: data) else {
                unlink(file)  // a record cut short by a crash: its upload was never begun
                return nil
            }
            return (file, upload)
        }
    }

    private static func name(of uploadId: String) -> String {
        SHA256.hash(data: Data(uploadId.utf8)).prefix(16).map { String(format: "%02x", $0) }.joined() + ".json"
    }

    private static func syncDirectory(_ directory: String) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        fsync(fd)
        close(fd)
    }
}

extension S3Store {
    /// Records the multipart uploads of this run in `directory/s3-uploads`, and aborts those an
    /// earlier run recorded there and never finished (in the background: a store that cannot
    /// be reached now gets them aborted by a later mount).
    public func keepUnfinishedWork(in directory: String) async {
        let ledger = S3UploadLedger(directory: directory + "/s3-uploads", logger: logger)
        let leftovers = ledger.unfinished()
        uploadLedger.withLock { $0 = ledger }
        guard !leftovers.isEmpty else { return }
        Task {
            for (file, upload) in leftovers {
                let path = (try? StorePath(upload.path)) ?? .root
                do {
                    try await self.abortMultipartUpload(upload.key, uploadId: upload.uploadId, path: path)
                    ledger.remove(file)
                    self.logger.info("aborted a multipart upload an earlier run left unfinished", metadata: ["path": "\(path)"])
                } catch {
                    self.logger.info("cannot abort a multipart upload an earlier run left unfinished; the next mount tries again",
                                     metadata: ["path": "\(path)", "error": "\(error)"])
                }
            }
        }
    }

    /// Begins a multipart upload of `objectKey`, recorded in the ledger until it is completed
    /// or aborted; runs `body` with its id, and aborts it when `body` fails (cancellation too).
    func withMultipartUpload<T>(_ objectKey: String, path: StorePath, metadata: [(name: String, value: String)] = [],
                                _ body: (String) async throws(StoreError) -> T) async throws(StoreError) -> T {
        let uploadId = try await createMultipartUpload(objectKey, path: path, metadata: metadata)
        let ledger = uploadLedger.withLock { $0 }
        let record = ledger?.record(S3UploadLedger.Upload(key: objectKey, uploadId: uploadId, path: path.description))
        do {
            let result = try await body(uploadId)
            if let record { ledger?.remove(record) }
            return result
        } catch {
            if await abortInBackground(objectKey, uploadId: uploadId, path: path), let record { ledger?.remove(record) }
            throw error
        }
    }
}
