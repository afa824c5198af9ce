// The empty files this mount's WebDAV LOCKs made at new names are known as its own until their
// PUT, also by the next mount after a daemon was killed between the LOCK and the PUT
// (LockMadeFiles.swift; on the seven servers: test_webdav_servers.py's kill test).

import DocFSStore
import DocFSTesting
@testable import DocFSStores
import Foundation
import Logging
import Synchronization
import Testing

@Suite("Empty files made by this mount's LOCKs")
struct LockMadeFilesTests {
    let directory = NSTemporaryDirectory() + "/docfs-lock-made-\(UUID().uuidString)"
    let path = try! StorePath("/d/new.txt")

    func empty(etag: String?, modified: Double = 1_700_000_000) -> RemoteEntry {
        RemoteEntry(path: path, kind: .file, size: 0, modified: modified, etag: etag.map(ETag.init))
    }

    func records() -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] }

    @Test func theFileALockMadeIsOursUntilItsPutAndNoOtherIs() {
        let files = LockMadeFiles()
        files.adopt(directory, logger: testLogger, unlock: { _, _ in }, stat: { _ throws(StoreError) in nil })
        #expect(files.isOurs(empty(etag: "\"1\""), at: path, under: HeldLock(token: "t1", created: true)))
        #expect(records().count == 1, "recorded until the PUT")
        let later = HeldLock(token: "t2", created: false)
        #expect(files.isOurs(empty(etag: "W/\"1\""), at: path, under: later), "the same version, marked weak for a moment")
        #expect(!files.isOurs(empty(etag: "\"2\""), at: path, under: later), "another empty file: another client's")
        var written = empty(etag: "\"1\"")
        written.size = 5
        #expect(!files.isOurs(written, at: path, under: later), "a file with bytes is never taken")
        files.forget(path)
        #expect(records().isEmpty)
        #expect(!files.isOurs(empty(etag: "\"1\""), at: path, under: later), "filled: no longer ours")
    }

    @Test func withoutTagsItIsToldByItsTime() {
        let files = LockMadeFiles()
        #expect(files.isOurs(empty(etag: nil), at: path, under: HeldLock(token: "t1", created: true)))
        let later = HeldLock(token: "t2", created: false)
        #expect(files.isOurs(empty(etag: nil), at: path, under: later))
        #expect(!files.isOurs(empty(etag: nil, modified: 1_700_000_009), at: path, under: later))
    }

    /// The next mount unlocks what the killed run held, and fills the file it left; a record of
    /// a file filled by someone else meanwhile is dropped.
    @Test func theNextMountTakesTheKilledRunsFilesAndLocksBack() async throws {
        let killed = LockMadeFiles()
        killed.adopt(directory, logger: testLogger, unlock: { _, _ in }, stat: { _ throws(StoreError) in nil })
        let other = try StorePath("/d/other.txt")
        #expect(killed.isOurs(empty(etag: "\"1\""), at: path, under: HeldLock(token: "t1", created: true)))
        #expect(killed.isOurs(RemoteEntry(path: other, kind: .file, size: 0, modified: 1, etag: ETag("\"9\"")), at: other,
                              under: HeldLock(token: "t9", created: true)))
        #expect(records().count == 2)

        let unlocked = Mutex<[String]>([])
        let next = LockMadeFiles()
        next.adopt(directory, logger: testLogger, unlock: { path, token in unlocked.withLock { $0.append("\(path) \(token)") } },
                   stat: { [path] asked throws(StoreError) in
                       asked == path ? RemoteEntry(path: asked, kind: .file, size: 0, modified: 1_700_000_000, etag: ETag("\"1\""))
                                     : RemoteEntry(path: asked, kind: .file, size: 12, modified: 2, etag: ETag("\"10\""))
                   })
        #expect(next.isOurs(empty(etag: "\"1\""), at: path, under: HeldLock(token: "t3", created: false)))
        try await eventually("the record of the file filled meanwhile dropped") { records().count == 1 }
        #expect(Set(unlocked.withLock { $0 }) == ["/d/new.txt t1", "/d/other.txt t9"])
        next.forget(path)
        #expect(records().isEmpty)
    }
}
