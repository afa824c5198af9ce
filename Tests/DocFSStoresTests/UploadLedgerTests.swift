import DocFSStore
@testable import DocFSStores
import Foundation
import Logging
import Testing

/// The record of uploads under way, whose leftovers a mount after a crash removes (the
/// integration tests `test_s3_multipart` and `test_streamed_upload` check that on real servers).
@Suite("Upload ledger")
struct UploadLedgerTests {
    typealias Upload = S3Store.MultipartRecord

    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-ledger-\(UUID().uuidString)").path

    @Test func anUploadIsRecordedUntilItIsRemoved() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = UploadLedger<Upload>(directory: directory, logger: Logger(label: "test"))
        let upload = Upload(key: "dir/a\nb.bin", uploadId: "id-1", path: "/dir/a\nb.bin")
        let file = try #require(ledger.record(upload, identity: upload.uploadId, path: .root))
        let other = try #require(ledger.record(Upload(key: "c", uploadId: "id-2", path: "/c"), identity: "id-2", path: .root))

        // What a later run finds: every upload not removed, whatever its key holds.
        let later = UploadLedger<Upload>(directory: directory, logger: Logger(label: "test"))
        #expect(Set(later.unfinished().map(\.entry.uploadId)) == ["id-1", "id-2"])
        #expect(later.unfinished().first { $0.entry.uploadId == "id-1" }?.entry == upload)

        ledger.remove(file)
        #expect(later.unfinished().map(\.entry.uploadId) == ["id-2"])
        ledger.remove(other)
        #expect(later.unfinished().isEmpty)
    }

    @Test func aRecordCutShortIsDropped() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let ledger = UploadLedger<Upload>(directory: directory, logger: Logger(label: "test"))
        #expect(FileManager.default.createFile(atPath: directory + "/cut.json", contents: Data("{\"key\":".utf8)))
        #expect(ledger.unfinished().isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory).isEmpty)
    }

    @Test func theDirectoryIsPrivate() throws {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = UploadLedger<Upload>(directory: directory, logger: Logger(label: "test"))
        let mode = try #require(FileManager.default.attributesOfItem(atPath: directory)[.posixPermissions] as? Int)
        #expect(mode & 0o077 == 0)
    }
}
