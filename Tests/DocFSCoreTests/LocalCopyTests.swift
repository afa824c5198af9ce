@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Glibc
import Testing
import Synchronization

/// A catalog with one file whose copy holds `content`, committed and not yet uploaded (a copy
/// adopted from an earlier mount), in a directory of its own that `remove()` deletes.
struct CommittedCopy {
    let directory: String
    let catalog: Catalog
    let item: Item
    let copy: LocalCopy

    init(named name: String, holding content: String) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-copy-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        catalog = try Catalog(path: directory + "/catalog.sqlite")
        item = try catalog.createItem(in: Item.rootInode, name: name, kind: .file, modified: 0, mode: 0o644, state: .modified, onStore: false)
        let copyPath = directory + "/copy"
        try Data(content.utf8).write(to: URL(fileURLWithPath: copyPath))
        var life = CopyLife(content: .present, base: nil, startedFromNothing: true)
        life.changed()
        life.committedChanges()
        copy = try LocalCopy(adopting: copyPath, inode: item.inode, catalog: catalog, life: life)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A local copy that was let go never touches its old descriptor number again: the kernel
/// gives that number to the next file opened, and in a full `swift test` under load the
/// next file was a catalog's database, whose first bytes were uploaded as a user's file.
@Suite("A closed local copy leaves its descriptor number alone")
struct LocalCopyDescriptorTests {
    @Test func anUploadOfAClosedCopyTakesNoSnapshotFromAReusedDescriptor() throws {
        let fixture = try CommittedCopy(named: "mine.txt", holding: "mine")
        defer { fixture.remove() }
        let (directory, copy) = (fixture.directory, fixture.copy)

        copy.close()  // the mount shuts down while the upload waits
        let other = directory + "/other"
        try Data("SQLite format 3".utf8).write(to: URL(fileURLWithPath: other))
        let reused = open(other, O_RDWR | O_CLOEXEC)  // most likely the copy's old number
        defer { Glibc.close(reused) }

        let snapshot = directory + "/snapshot"
        #expect(throws: FSError.stale) { _ = try copy.startUpload(snapshotTo: snapshot, committingPending: true) }
        #expect(!FileManager.default.fileExists(atPath: snapshot), "no snapshot from another file's bytes")
        #expect(copy.allocatedBlocks == 0)
        copy.setModificationTime(Timestamp(seconds: 86_400, nanoseconds: 0))
        var info = stat()
        fstat(reused, &info)
        #expect(info.st_mtim.tv_sec != 86_400, "the other file's time was left alone")
    }
}

/// A descriptor the copy left (`unshare`, the first change while an upload's snapshot shares
/// its file) is closed when the calls that use *it* are done, not when no call uses any.
@Suite("A retired local copy descriptor is closed by its own last user")
struct RetiredDescriptorTests {
    @Test func aRetiredDescriptorClosesWhileTheNewOneIsInUse() throws {
        let fixture = try CommittedCopy(named: "db", holding: "committed")
        defer { fixture.remove() }
        let (directory, copy) = (fixture.directory, fixture.copy)
        let snapshot = directory + "/snapshot"
        #expect(try copy.startUpload(snapshotTo: snapshot, committingPending: false) != nil)
        var snapshotInfo = stat()
        #expect(stat(snapshot, &snapshotInfo) == 0)

        // A read of the shared file is under way when a write moves the copy to a file of its own.
        let oldLoan = try copy.lend(at: 0, count: 4)
        let old = oldLoan.descriptor
        _ = try Array("new".utf8).withUnsafeBytes { try copy.writeLocal($0, at: 0) }
        // Reads of the new file never pause (a reader that always has one under way).
        let newLoan = try copy.lend(at: 0, count: 4)
        #expect(newLoan.descriptor != old)

        func holdsSnapshot(_ descriptor: Int32) -> Bool {
            var info = stat()
            return fstat(descriptor, &info) == 0 && info.st_ino == snapshotInfo.st_ino && info.st_dev == snapshotInfo.st_dev
        }
        #expect(holdsSnapshot(old), "the read under way still has its file")
        end(oldLoan)
        #expect(!holdsSnapshot(old), "the old descriptor is closed once its own read is done")
        end(newLoan)
        copy.snapshotReleased()
    }

    private func end(_ loan: consuming DescriptorLoan) {}
}

/// A copy's journal is written outside the lock its readers take: a read, a look at its state
/// (`user.docfs.state`, `docfs status`) or a fetched chunk never waits for SQLite, which a busy
/// disk or a long transaction of the catalog can hold for seconds.
@Suite("A copy's readers never wait for its journal")
struct JournalOutsideTheLockTests {
    @Test func aReadWhileAnUploadIsJournaledDoesNotWaitForTheCatalog() throws {
        let fixture = try CommittedCopy(named: "report.txt", holding: "the report")
        defer { fixture.remove() }
        let (directory, catalog, item, copy) = (fixture.directory, fixture.catalog, fixture.item, fixture.copy)

        // The catalog's writer is held (a long transaction) until the test lets it go, or 10 s.
        let release = DispatchSemaphore(value: 0)
        let held = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? catalog.write { _ in
                held.signal()
                _ = release.wait(timeout: .now() + 10)
            }
        }
        held.wait()
        // The upload starts: its snapshot is taken, then its start is journaled, which waits.
        let snapshot = directory + "/snapshot"
        let started = Mutex<Result<UInt64?, FSError>?>(nil)
        Thread.detachNewThread {
            let outcome = Result { () throws(FSError) -> UInt64? in try copy.startUpload(snapshotTo: snapshot, committingPending: false) }
            started.withLock { $0 = outcome }
        }
        let deadline = ContinuousClock.now + testPatience
        while !FileManager.default.fileExists(atPath: snapshot), ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(FileManager.default.fileExists(atPath: snapshot), "the upload took its snapshot")

        let asked = ContinuousClock.now
        let loan = try copy.lend(at: 0, count: 100)
        #expect(loan.count == 10)
        let state = copy.life
        let waited = ContinuousClock.now - asked
        let stillJournaling = started.withLock { $0 == nil }
        release.signal()

        #expect(waited < .seconds(2), "a read waited \(waited) for the catalog")
        #expect(stillJournaling, "the upload's start was still waiting for the catalog while the copy was read")
        #expect(state.uploading == nil, "the copy takes the upload's start only once the catalog holds it")
        let finish = ContinuousClock.now + .seconds(15)
        while started.withLock({ $0 == nil }), ContinuousClock.now < finish { Thread.sleep(forTimeInterval: 0.01) }
        let commit = try #require(try started.withLock { $0 }?.get())
        #expect(copy.life.uploading == commit)
        #expect(try catalog.item(item.inode)?.state == .uploading)
    }
}
