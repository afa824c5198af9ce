@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Synchronization
import Testing

@Suite("Changes go back to the store, and nothing is lost")
struct ChangeTests {
    @Test func aNewFileIsUploadedOnceOnCloseWithoutDownloading() async throws {
        let fixture = try CoreFixture.writable()
        let item = try await fixture.createFile("new.txt", Array("hello".utf8))
        await fixture.settle()
        #expect(fixture.store.content("new.txt") == Array("hello".utf8))
        #expect(fixture.store.writeCount("new.txt") == 1)
        #expect(fixture.store.totalReads == 0)
        #expect(fixture.cachedFiles().isEmpty, "evicted once the store has it")
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
        #expect(try fixture.fs.item(item.inode).etag != nil)
    }

    @Test func truncatingOpenDoesNotDownloadTheOldContent() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("doc.txt", randomBytes(100_000))
        let item = try await fixture.lookup("doc.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("short".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.totalReads == 0)
        #expect(fixture.store.content("doc.txt") == Array("short".utf8))
    }

    @Test func anEditUploadsOnlyTheFinalContentOnce() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("doc.txt", Array("0123456789".utf8))
        let item = try await fixture.lookup("doc.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        try fixture.write(handle: handle, Array("ab".utf8), at: 2)
        try fixture.write(handle: handle, Array("XYZ".utf8), at: 10)
        #expect(try fixture.fs.item(item.inode).size == 13, "stat shows the local size while editing")
        try await fixture.fs.flush(handle: handle)
        #expect(fixture.store.writeCount("doc.txt") == 0, "nothing uploaded before the last close")
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("doc.txt") == Array("01ab456789XYZ".utf8))
        #expect(fixture.store.writeCount("doc.txt") == 1)
    }

    @Test func fsyncUploadsNowAndCloseDoesNotUploadAgain() async throws {
        let fixture = try CoreFixture.writable()
        let (_, handle) = try await fixture.fs.create(in: Item.rootInode, name: "f", mode: 0o644, owner: 0, group: 0,
                                                      exclusive: true, truncate: false)
        try fixture.write(handle: handle, Array("data".utf8))
        try await fixture.fs.fsync(handle: handle)
        #expect(fixture.store.content("f") == Array("data".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.writeCount("f") == 1)
    }

    @Test func aConflictKeepsBothVersions() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("report.txt", Array("original".utf8))
        let item = try await fixture.lookup("report.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("mine".utf8))
        fixture.store.addFile("report.txt", Array("theirs".utf8))  // changed on the server meanwhile
        await fixture.fs.release(handle: handle)
        await fixture.settle()

        #expect(fixture.store.content("report.txt") == Array("theirs".utf8))
        let names = fixture.store.fileNames(in: "/")
        let copy = try #require(names.first { $0.hasPrefix("report (conflict ") && $0.hasSuffix(").txt") })
        #expect(fixture.store.content(copy) == Array("mine".utf8))
        let shown = try fixture.fs.item(item.inode)
        #expect(shown.conflictCopy == copy)
        #expect(shown.size == 6)
        #expect(try fixture.catalog.child(of: Item.rootInode, named: copy) != nil, "the conflict copy is browsable")
    }

    @Test func aNewFileMeetingAnExistingOneIsAConflictToo() async throws {
        let fixture = try CoreFixture.writable()
        _ = try await fixture.fs.children(of: Item.rootInode)
        let (_, handle) = try await fixture.fs.create(in: Item.rootInode, name: "a.txt", mode: 0o644, owner: 0, group: 0,
                                                      exclusive: true, truncate: false)
        try fixture.write(handle: handle, Array("local".utf8))
        fixture.store.addFile("a.txt", Array("remote".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("a.txt") == Array("remote".utf8))
        #expect(fixture.store.fileNames(in: "/").contains { $0.hasPrefix("a (conflict ") })
    }

    @Test func failedUploadsAreRetriedUntilTheStoreIsBack() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.failWrites(with: .unreachable("down"))
        let item = try await fixture.createFile("offline.txt", Array("kept".utf8))
        await fixture.settle()
        #expect(try fixture.fs.item(item.inode).state == .modified)
        #expect(try fixture.fs.item(item.inode).uploadError?.contains("unreachable") == true)
        #expect(fixture.cachedFiles().count == 1, "never evicted while unsynced")
        fixture.store.failWrites(with: nil)
        for _ in 0..<100 where fixture.store.content("offline.txt") == nil {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(fixture.store.content("offline.txt") == Array("kept".utf8))
    }

    @Test func unsyncedChangesSurviveARestart() async throws {
        let store = InMemoryStore()
        store.failWrites(with: .unreachable("down"))
        let first = try CoreFixture.writable(store: store)
        try await first.createFile("journal.txt", Array("survives".utf8))
        await first.settle()
        await first.fs.shutdown(uploadGrace: .milliseconds(10))
        #expect(first.cachedFiles().count == 1, "the unsynced copy stays on disk, and no upload's snapshot")

        store.failWrites(with: nil)
        let second = try CoreFixture.writable(store: store, reuse: first.directory)
        try second.catalog.resetTransientStates()
        try await second.fs.start()
        await second.settle()
        #expect(store.content("journal.txt") == Array("survives".utf8))
        #expect(second.cachedFiles().isEmpty)
    }

    /// An upload cancelled by the unmount still ends its attempt afterwards (it gives up its
    /// snapshot and records why it failed): the next mount of the same cache must not meet it.
    @Test func shutdownReturnsOnlyOnceTheUploadsItCancelledHaveEnded() async throws {
        let store = InMemoryStore()
        // A store that takes a while to notice a cancelled request, and then fails it.
        store.holdWrites { await sleepIgnoringCancellation(.milliseconds(300)) }
        store.failWrites(with: .unreachable("down"))
        let fixture = try CoreFixture.writable(store: store)
        let item = try await fixture.createFile("journal.txt", Array("survives".utf8))
        for _ in 0..<200 where !fixture.cachedFiles().contains(where: { $0.hasSuffix(".upload") }) {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(fixture.cachedFiles().contains { $0.hasSuffix(".upload") }, "the upload is under way")
        await fixture.fs.shutdown(uploadGrace: .milliseconds(10))
        let left = fixture.cachedFiles()
        #expect(left.filter { $0.hasSuffix(".upload") }.isEmpty, "its snapshot is gone when shutdown returns: \(left)")
        #expect(left.count == 1, "the unsynced copy stays for the next mount")
        #expect(try fixture.catalog.item(item.inode)?.state == .modified)
    }

    @Test func renameMovesOnTheStoreWithoutReupload() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("a.txt", Array("content".utf8))
        fixture.store.addDirectory("dir")
        let item = try await fixture.lookup("a.txt")
        let dir = try await fixture.lookup("dir")
        try await fixture.fs.rename(from: Item.rootInode, name: "a.txt", to: dir.inode, newName: "b.txt", noReplace: false)
        #expect(fixture.store.content("dir/b.txt") == Array("content".utf8))
        #expect(fixture.store.mutations == ["MOVE /a.txt /dir/b.txt"])
        let moved = try await fixture.lookup("dir/b.txt")
        #expect(moved.inode == item.inode, "a rename keeps identity")
    }

    @Test func renameNoReplaceRefusesAnExistingTarget() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("a", [1])
        fixture.store.addFile("b", [2])
        _ = try await fixture.fs.children(of: Item.rootInode)
        await #expect(throws: FSError.exists) {
            try await fixture.fs.rename(from: Item.rootInode, name: "a", to: Item.rootInode, newName: "b", noReplace: true)
        }
    }

    @Test func anEditorSaveEndsWithExactlyTheNewContent() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("notes.txt", Array("old".utf8))
        _ = try await fixture.lookup("notes.txt")
        // write tmp; fsync; rename tmp over original
        let (_, handle) = try await fixture.fs.create(in: Item.rootInode, name: ".notes.txt.tmp", mode: 0o644, owner: 0, group: 0,
                                                      exclusive: true, truncate: false)
        try fixture.write(handle: handle, Array("new".utf8))
        try await fixture.fs.fsync(handle: handle)
        await fixture.fs.release(handle: handle)
        try await fixture.fs.rename(from: Item.rootInode, name: ".notes.txt.tmp", to: Item.rootInode, newName: "notes.txt", noReplace: false)
        await fixture.settle()
        #expect(fixture.store.content("notes.txt") == Array("new".utf8))
        #expect(fixture.store.content(".notes.txt.tmp") == nil)
        #expect(fixture.store.fileNames(in: "/") == ["notes.txt"])
    }

    @Test func renamingAFileBeforeItsUploadUploadsUnderTheNewName() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.failWrites(with: .unreachable("down"))
        try await fixture.createFile("draft", Array("x".utf8))
        await fixture.settle()
        try await fixture.fs.rename(from: Item.rootInode, name: "draft", to: Item.rootInode, newName: "final", noReplace: false)
        fixture.store.failWrites(with: nil)
        try await fixture.fs.uploader.sync(try await fixture.lookup("final").inode)
        #expect(fixture.store.fileNames(in: "/") == ["final"])
    }

    @Test func unlinkRemovesFromTheStoreAndCancelsPendingUploads() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("old", [1])
        _ = try await fixture.lookup("old")
        try await fixture.fs.remove(from: Item.rootInode, name: "old", directory: false)
        #expect(fixture.store.content("old") == nil)

        fixture.store.failWrites(with: .unreachable("down"))
        try await fixture.createFile("never", [1])
        try await fixture.fs.remove(from: Item.rootInode, name: "never", directory: false)
        fixture.store.failWrites(with: nil)
        await fixture.settle()
        #expect(fixture.store.content("never") == nil)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func directoriesAreMadeAndRemovedOnTheStore() async throws {
        let fixture = try CoreFixture.writable()
        let dir = try await fixture.fs.makeDirectory(in: Item.rootInode, name: "d", mode: 0o755, owner: 0, group: 0)
        try await fixture.createFile("inside", [1], in: dir.inode)
        await fixture.settle()
        await #expect(throws: FSError.notEmpty) {
            try await fixture.fs.remove(from: Item.rootInode, name: "d", directory: true)
        }
        try await fixture.fs.remove(from: dir.inode, name: "inside", directory: false)
        try await fixture.fs.remove(from: Item.rootInode, name: "d", directory: true)
        #expect(fixture.store.mutations == ["MKDIR /d", "PUT /d/inside", "DELETE /d/inside", "DELETE /d"])
    }

    @Test func attributesStickAcrossEviction() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("a", [1, 2, 3])
        let item = try await fixture.lookup("a")
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(mode: 0o600, owner: 1000, group: 1000, modified: 1234), handle: nil)
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        await fixture.fs.release(handle: handle)
        let after = try fixture.fs.item(item.inode)
        #expect(after.mode == 0o600)
        #expect(after.owner == 1000)
        #expect(after.modified == 1234)
        #expect(after.changed != nil)
    }

    @Test func attributesSetWhileTheUploadIsOnItsWayReachTheStore() async throws {
        let fixture = try CoreFixture.writable()
        let (opened, gate) = AsyncStream<Void>.makeStream()
        fixture.store.holdWrites { for await _ in opened { return } }
        let item = try await fixture.createFile("new.txt", Array("content".utf8))
        for _ in 0..<200 where try fixture.fs.item(item.inode).state != .uploading {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(try fixture.fs.item(item.inode).state == .uploading)

        // chmod and touch while the upload (with the old mode and time) is in flight.
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(mode: 0o600, modified: Timestamp(seconds: 1_600_000_000)), handle: nil)
        gate.yield()
        gate.finish()
        await fixture.settle()

        #expect(fixture.store.content("new.txt") == Array("content".utf8))
        let kept = try #require(fixture.store.attributes(of: "new.txt"))
        #expect(kept.mode == 0o600)
        #expect(kept.modified == Timestamp(seconds: 1_600_000_000))
    }

    /// Small files go up thirty-two at a time (a few round trips each, not a queue of them);
    /// large ones at most four at a time, as they share the bandwidth.
    @Test func thirtyTwoSmallUploadsGoAtOnceAndFourLargeOnes() async throws {
        for (size, slots) in [(16, Uploader.maximumConcurrentUploads), (Int(Uploader.largeUpload), Uploader.maximumConcurrentLargeUploads)] {
            let fixture = try CoreFixture.writable()
            let begun = Mutex(0)
            let (release, gate) = AsyncStream<Void>.makeStream()
            fixture.store.holdWrites {
                begun.withLock { $0 += 1 }
                for await _ in release { return }
            }
            var items: [Item] = []
            for index in 0...slots { items.append(try await fixture.createFile("f\(index)", [UInt8](repeating: 1, count: size))) }
            try await eventually("\(slots) uploads of \(size) bytes under way") { begun.withLock { $0 } == slots }
            // The one more is queued, not sent.
            #expect(await fixture.fs.uploader.isQueued(items[slots].inode))
            #expect(begun.withLock { $0 } == slots)
            gate.finish()
            await fixture.settle()
            #expect(begun.withLock { $0 } == slots + 1)
        }
    }

    /// A chmod that lands as an upload ends: after the uploader looked for attributes changed
    /// on the way, before it recorded the upload. The chmod still saw the upload under way and
    /// left its mode to it, so neither sent it, and a later listing put the store's old mode
    /// back (a group-only file read by everyone on a shared mount). Raced at many offsets.
    @Test func aChmodAsAnUploadEndsReachesTheStore() async throws {
        let fixture = try CoreFixture.writable()
        for round in 0..<120 {
            let name = "f\(round).txt"
            let (opened, gate) = AsyncStream<Void>.makeStream()
            fixture.store.holdWrites { for await _ in opened { return } }
            let item = try await fixture.createFile(name, [UInt8(round % 256)])
            for _ in 0..<500 where try fixture.fs.item(item.inode).state != .uploading {
                try await Task.sleep(for: .milliseconds(2))
            }
            let mode = UInt32(0o600 | (round % 8) << 3)
            gate.yield()
            gate.finish()
            for _ in 0..<(round % 40) { await Task.yield() }
            _ = try await fixture.fs.setAttributes(of: item.inode, .init(mode: mode), handle: nil)
            await fixture.settle()
            #expect(fixture.store.attributes(of: name)?.mode == mode, "round \(round)")
            #expect(try fixture.fs.item(item.inode).mode == mode)
        }
    }

    /// Model seed 600517: the attributes changed during an upload go to the store after it,
    /// and the version read back then was taken as the upload's own. Another client's version
    /// stored between those requests became the base of the next upload, which replaced it.
    @Test func anotherClientsVersionStoredRightAfterAnUploadIsNotTakenForIt() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("a.txt", Array("old".utf8))
        let item = try await fixture.lookup("a.txt")
        let writer = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        let (opened, gate) = AsyncStream<Void>.makeStream()
        fixture.store.holdWrites { for await _ in opened { return } }
        try fixture.write(handle: writer, Array("ours, first".utf8))
        try await fixture.fs.flush(handle: writer)
        await fixture.fs.release(handle: writer)
        for _ in 0..<200 where try fixture.fs.item(item.inode).state != .uploading {
            try await Task.sleep(for: .milliseconds(10))
        }
        // An editor opens the file again while its upload is on its way: the same copy.
        let keeper = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        // A touch while the upload is on its way: its time goes to the store after the upload,
        // and another client's version lands just then.
        let theirs = Array("their version".utf8)
        let store = fixture.store
        store.afterSettingAttributes { path in
            guard path.description == "/a.txt" else { return }
            store.afterSettingAttributes(nil)
            store.addFile("a.txt", theirs, modified: 1_750_000_000)
        }
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(modified: Timestamp(seconds: 1_600_000_000)), handle: nil)
        fixture.store.holdWrites(until: nil)
        gate.yield()
        gate.finish()
        await fixture.settle()
        #expect(store.content("a.txt") == theirs)

        try fixture.write(handle: keeper, Array("ours, second".utf8))
        try await fixture.fs.flush(handle: keeper)
        await fixture.fs.release(handle: keeper)
        await fixture.settle()
        #expect(store.content("a.txt") == theirs, "the other client's version was replaced")
        let kept = store.fileNames(in: "/").filter { $0.hasPrefix("a (conflict") }.map { store.content($0) }
        #expect(kept == [Array("ours, second".utf8)], "ours is kept next to it")
    }

    /// A chmod of a file whose copy is open, and another client's version landing right after
    /// it: the copy's base follows the version the chmod made (which the store names), not
    /// what a stat finds next, so the edit that follows meets theirs as a conflict.
    @Test func anotherClientsVersionStoredRightAfterAChmodIsNotTakenForIt() async throws {
        let store = InMemoryStore(tellsVersionAfterAttributes: true)
        let fixture = try CoreFixture.writable(store: store)
        store.addFile("a.txt", Array("v1;".utf8))
        let item = try await fixture.lookup("a.txt")
        let reader = try await fixture.fs.open(item.inode, mode: .read)
        #expect(try fixture.readAll(handle: reader, size: 3) == Array("v1;".utf8))
        let theirs = Array("v1;theirs;".utf8)
        store.afterSettingAttributes { path in
            guard path.description == "/a.txt" else { return }
            store.afterSettingAttributes(nil)
            store.addFile("a.txt", theirs)
        }
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(mode: 0o600), handle: nil)
        #expect(store.content("a.txt") == theirs)

        let writer = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        try fixture.write(handle: writer, Array("ours;".utf8), at: 3)
        try await fixture.fs.flush(handle: writer)
        await fixture.fs.release(handle: writer)
        await fixture.fs.release(handle: reader)
        await fixture.settle()
        #expect(store.content("a.txt") == theirs, "the other client's version was replaced")
        let kept = store.fileNames(in: "/").filter { $0.hasPrefix("a (conflict") }.map { store.content($0) }
        #expect(kept == [Array("v1;ours;".utf8)], "ours is kept next to it")
    }

    @Test func truncateWithoutAHandleToZeroDoesNotDownload() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("big", randomBytes(10_000))
        let item = try await fixture.lookup("big")
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(size: 0), handle: nil)
        await fixture.settle()
        #expect(fixture.store.totalReads == 0)
        #expect(fixture.store.content("big") == [])
    }

    @Test func aListingNeverDropsAnUnsyncedFile() async throws {
        let fixture = try CoreFixture(store: InMemoryStore(), ttl: 0, readOnly: false)
        fixture.store.failWrites(with: .unreachable("down"))
        try await fixture.createFile("local-only", [9])
        try await fixture.fs.refresh(directory: Item.rootInode)
        #expect(try fixture.catalog.children(of: Item.rootInode).map(\.name) == ["local-only"])
    }
}

@Suite("A file being written shows its local state")
struct WritingStateTests {
    @Test func aNewFileShowsItsWrittenSizeAndSurvivesARelistingWhileOpen() async throws {
        let fixture = try CoreFixture(store: InMemoryStore(), ttl: 0, readOnly: false)
        _ = try await fixture.fs.children(of: Item.rootInode)
        let (item, handle) = try await fixture.fs.create(in: Item.rootInode, name: "w.txt", mode: 0o644, owner: 0, group: 0,
                                                         exclusive: true, truncate: true)
        try fixture.write(handle: handle, Array(repeating: 7, count: 5000))
        #expect(try fixture.fs.item(item.inode).size == 5000)
        #expect(try fixture.fs.item(item.inode).state == .modified)
        try await fixture.fs.refresh(directory: Item.rootInode)
        #expect(try await fixture.lookup("w.txt").inode == item.inode, "a relisting never drops an unsynced file")
        try fixture.write(handle: handle, Array(repeating: 8, count: 5000), at: 5000)
        #expect(try fixture.fs.item(item.inode).size == 10000)
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("w.txt")?.count == 10000)
    }
}

@Suite("Times read back exactly as set")
struct TimeTests {
    @Test func nanosecondsSurviveTheCatalog() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("t", [1])
        let item = try await fixture.lookup("t")
        let exact = Timestamp(seconds: 1_700_000_000, nanoseconds: 123_456_789)
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(modified: exact), handle: nil)
        #expect(try fixture.fs.item(item.inode).modified == exact)
    }

    @Test func settingOnlyTheModificationTimeLeavesTheAccessTime() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("t", [1], modified: 1_600_000_000)
        let item = try await fixture.lookup("t")
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(modified: 1_700_000_000), handle: nil)
        let after = try fixture.fs.item(item.inode)
        #expect(after.modified == 1_700_000_000)
        #expect(after.accessed == 1_600_000_000, "UTIME_OMIT for atime: atime stays")
    }
}

@Suite("A conflict never costs the store's version")
struct ConflictWhileOpenTests {
    @Test func writingOnAfterAConflictOnFsyncKeepsEveryVersion() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("doc.txt", Array("v1".utf8))
        let item = try await fixture.lookup("doc.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("mine-1".utf8))
        fixture.store.addFile("doc.txt", Array("theirs".utf8))
        // A conflict is resolved by keeping "mine-1" as a copy on the store: the bytes are safe,
        // so fsync succeeds (an error here would tell the writer its data was not kept).
        try await fixture.fs.fsync(handle: handle)
        func conflictCopies() -> [String: String] {
            var contents: [String: String] = [:]
            for name in fixture.store.fileNames(in: "/") where name.hasPrefix("doc (conflict ") {
                contents[name] = fixture.store.content(name).map { String(decoding: $0, as: UTF8.self) }
            }
            return contents
        }
        let afterFsync = conflictCopies()
        #expect(Array(afterFsync.values) == ["mine-1"], "fsync has put the first version on the store as a conflict copy: \(afterFsync)")
        try fixture.write(handle: handle, Array("mine-2".utf8))  // the same open file goes on
        await fixture.fs.release(handle: handle)
        await fixture.settle()

        #expect(fixture.store.content("doc.txt") == Array("theirs".utf8), "the store's version is never overwritten")
        let copies = conflictCopies()
        for (name, content) in afterFsync {
            #expect(copies[name] == content, "the first version's copy is kept as it was: \(copies)")
        }
        #expect(copies.values.sorted() == ["mine-1", "mine-2"], "every local version is kept, each once: \(copies)")
    }
}
