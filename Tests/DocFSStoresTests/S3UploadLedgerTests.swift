import DocFSStore
@testable import DocFSStores
import Foundation
import Logging
import Testing

/// The record of multipart uploads under way, which a mount after a crash aborts (the
/// integration test `test_s3_multipart` checks that on moto and SeaweedFS).
@Suite("S3 upload ledger")
struct S3UploadLedgerTests {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-ledger-\(UUID().uuidString)").path

    @Test func anUploadIsRecordedUntilItIsRemoved() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = S3UploadLedger(directory: directory, logger: Logger(label: "test"))
        let upload = S3UploadLedger.Upload(key: "dir/a\nb.bin", uploadId: "id-1", path: "/dir/a\nb.bin")
        let file = try #require(ledger.record(upload))
        let other = try #require(ledger.record(S3UploadLedger.Upload(key: "c", uploadId: "id-2", path: "/c")))

        // What a later run finds: every upload not removed, whatever its key holds.
        let later = S3UploadLedger(directory: directory, logger: Logger(label: "test"))
        #expect(Set(later.unfinished().map(\.upload.uploadId)) == ["id-1", "id-2"])
        #expect(later.unfinished().first { $0.upload.uploadId == "id-1" }?.upload == upload)

        ledger.remove(file)
        #expect(later.unfinished().map(\.upload.uploadId) == ["id-2"])
        ledger.remove(other)
        #expect(later.unfinished().isEmpty)
    }

    @Test func aRecordCutShortIsDropped() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = S3UploadLedger(directory: directory, logger: Logger(label: "test"))
        #expect(FileManager.default.createFile(atPath: directory + "/cut.json", contents: Data("{\"key\":".utf8)))
        #expect(ledger.unfinished().isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
    }

    @Test func theDirectoryIsPrivate() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = S3UploadLedger(directory: directory, logger: Logger(label: "test"))
        let mode = try #require(FileManager.default.attributesOfItem(atPath: directory)[.posixPermissions] as? Int)
        #expect(mode & 0o077 == 0)
    }
}
