// S3Store+UploadLedger: multipart uploads under way, recorded (UploadLedger.swift) so that the
// parts a killed daemon sent are aborted by the next mount.

import DocFSStore
import Foundation

extension S3Store {
    /// What is recorded of one multipart upload.
    struct MultipartRecord: Codable, Equatable, Sendable {
        var key: String
        var uploadId: String
        /// The store path, for logs.
        var path: String
    }

    /// Records the multipart uploads of this run in `directory/s3-uploads`, and aborts those an
    /// earlier run recorded there and never finished.
    public func keepUnfinishedWork(in directory: String) async {
        let ledger = UploadLedger<MultipartRecord>(directory: directory + "/s3-uploads", logger: logger)
        uploadLedger.withLock { $0 = ledger }
        ledger.endUnfinished(what: "a multipart upload", path: \.path) { upload throws(StoreError) in
            try await self.abortMultipartUpload(upload.key, uploadId: upload.uploadId, path: (try? StorePath(upload.path)) ?? .root)
        }
    }

    /// Begins a multipart upload of `objectKey`, recorded in the ledger until it is completed
    /// or aborted; runs `body` with its id, and aborts it when `body` fails (cancellation too).
    func withMultipartUpload<T>(_ objectKey: String, path: StorePath, metadata: [(name: String, value: String)] = [],
                                _ body: (String) async throws(StoreError) -> T) async throws(StoreError) -> T {
        let uploadId = try await createMultipartUpload(objectKey, path: path, metadata: metadata)
        let ledger = uploadLedger.withLock { $0 }
        let record = ledger?.record(MultipartRecord(key: objectKey, uploadId: uploadId, path: path.description),
                                    identity: uploadId, path: path)
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
