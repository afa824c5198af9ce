@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Synchronization
import Testing

/// The scenarios of "nothing is lost" (issue 8): a refresh, a remote change, a crash or an
/// upload in flight never costs a version someone made, locally or elsewhere.
@Suite("Nothing is lost: every version survives refreshes, remote changes, uploads and crashes")
struct NothingLostTests {
    private func conflictCopies(_ fixture: CoreFixture, of stem: String, kind: String = "conflict") -> [String] {
        fixture.store.fileNames(in: "/").filter { $0.hasPrefix("\(stem) (\(kind) ") }
    }

    @Test func aRefreshUnderAnOpenCleanCopyNeverMovesItsBase() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("f.txt", Array("original".utf8))
        let item = try await fixture.lookup("f.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        fixture.store.addFile("f.txt", Array("theirs, newer".utf8))  // another client
        try await fixture.fs.refresh(directory: Item.rootInode)      // any `ls` lets this run
        try fixture.write(handle: handle, Array("MINE".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()

        #expect(fixture.store.content("f.txt") == Array("theirs, newer".utf8), "the other client's version is kept")
        let copies = conflictCopies(fixture, of: "f")
        #expect(copies.count == 1)
        #expect(copies.first.flatMap { fixture.store.content($0) } == Array("MINEinal".utf8), "the local edit, on the version it was made on")
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aFileDeletedOnTheStoreWhileOpenKeepsTheWritesMadeAfterwards() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("gone.txt", Array("hello".utf8))
        let item = try await fixture.lookup("gone.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        fixture.store.remove("gone.txt")
        try await fixture.fs.refresh(directory: Item.rootInode)
        try fixture.write(handle: handle, Array("J".utf8))
        try await fixture.fs.flush(handle: handle)
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("gone.txt") == Array("Jello".utf8), "the edit recreates the file: nothing dropped")
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aFileRenamedOnTheStoreWhileOpenKeepsBothVersions() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("old.txt", Array("hello".utf8))
        let item = try await fixture.lookup("old.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        fixture.store.remove("old.txt")
        fixture.store.addFile("new.txt", Array("hello".utf8))
        try await fixture.fs.refresh(directory: Item.rootInode)
        try fixture.write(handle: handle, Array("HE".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("new.txt") == Array("hello".utf8))
        #expect(fixture.store.content("old.txt") == Array("HEllo".utf8))
    }

    @Test func aCleanCopyOfAFileDeletedOnTheStoreGoesWithItsLastClose() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("gone.txt", Array("hello".utf8))
        let item = try await fixture.lookup("gone.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        fixture.store.remove("gone.txt")
        try await fixture.fs.refresh(directory: Item.rootInode)
        #expect(try fixture.readAll(handle: handle, size: 5) == Array("hello".utf8), "an open file stays readable")
        await fixture.fs.release(handle: handle)
        await #expect(throws: FSError.self) { try await fixture.lookup("gone.txt") }
        #expect(fixture.store.writeCount("gone.txt") == 0, "a read-only open never recreates it")
    }

    /// A rename of a file another client deleted, while its clean copy is still open here (or
    /// before the listing that found it gone drops its row): the store has nothing to move.
    /// It was taken for a new file replacing the target, which deleted the target on the store
    /// (model seed 106289: another client's b.txt was lost).
    @Test func aRenameOfAFileDeletedOnTheStoreLeavesTheTargetAlone() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("gone.txt", Array("mine".utf8))
        fixture.store.addFile("theirs.txt", Array("theirs".utf8))
        let item = try await fixture.lookup("gone.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        fixture.store.remove("gone.txt")
        try await fixture.fs.refresh(directory: Item.rootInode)
        await #expect(throws: FSError.notFound) {
            try await fixture.fs.rename(from: Item.rootInode, name: "gone.txt", to: Item.rootInode, newName: "theirs.txt", noReplace: false)
        }
        #expect(fixture.store.content("theirs.txt") == Array("theirs".utf8))
        #expect(try fixture.readAll(handle: handle, size: 4) == Array("mine".utf8), "an open file stays readable")
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("theirs.txt") == Array("theirs".utf8))
        #expect(try await fixture.lookup("theirs.txt").size == 6)
    }

    /// A server that writes files in place (`rclone serve webdav`) answered a GET sent during
    /// another client's PUT with the old bytes under the new version's ETag. An append made on
    /// those bytes, taken for that version, replaced it with no conflict, and the other
    /// client's save was lost (test_two_mounts[rclone]). The download is checked and made again.
    @Test func oldBytesUnderANewVersionNeverBecomeTheBaseOfAnEdit() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("f.txt", Array("V0;".utf8))
        let item = try await fixture.lookup("f.txt")
        fixture.store.injectReadFaults([.oldBytesUnderTheNewVersion(savedMeanwhile: Array("V0;A1;".utf8))])
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        try fixture.write(handle: handle, Array("B1;".utf8), at: try fixture.fs.item(item.inode).size)
        await fixture.fs.release(handle: handle)
        await fixture.settle()

        let kept = ["f.txt"] + conflictCopies(fixture, of: "f")
        let saved = kept.compactMap { fixture.store.content($0) }.map { String(decoding: $0, as: UTF8.self) }
        #expect(saved.contains { $0.contains("A1;") }, "the other client's save is on the store: \(saved)")
        #expect(saved.contains { $0.contains("B1;") }, "and the append made here: \(saved)")
        #expect(fixture.store.readCount("f.txt") == 2, "the download was made again")
    }

    // Writes made while a conflict copy uploads (item 4): ChangeTests'
    // writingOnAfterAConflictOnFsyncKeepsEveryVersion.

    @Test func aFolderThatBecameAFileOnTheStoreKeepsItsUnsyncedChildren() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addDirectory("a")
        let folder = try await fixture.lookup("a")
        fixture.store.failWrites(with: .unreachable("down"))
        try await fixture.createFile("note.txt", Array("unsynced".utf8), in: folder.inode)
        await fixture.settle()
        fixture.store.remove("a")
        fixture.store.addFile("a", Array("a file now".utf8))
        try await fixture.fs.refresh(directory: Item.rootInode)
        let note = try await fixture.lookup("a/note.txt")
        #expect(note.hasUnsyncedChanges, "the unsynced child is still there")
        let handle = try await fixture.fs.open(note.inode, mode: .read)
        #expect(try fixture.readAll(handle: handle, size: 8) == Array("unsynced".utf8))
        await fixture.fs.release(handle: handle)
    }

    @Test func aCloseDuringAnUploadIsUploadedNextAndItsCopyStays() async throws {
        let fixture = try CoreFixture.writable()
        let gate = Gate()
        let arrived = Gate()
        fixture.store.holdWrites(until: { await arrived.open(); await gate.wait() })
        let item = try await fixture.createFile("log.txt", Array("first".utf8))
        await arrived.wait()  // the upload of "first" is in flight, held
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        try fixture.write(handle: handle, Array("second".utf8), at: 5)
        await fixture.fs.release(handle: handle)
        #expect(try fixture.fs.item(item.inode).state == .uploading || fixture.fs.item(item.inode).state == .modified)
        await gate.open()
        fixture.store.holdWrites(until: nil)
        await fixture.settle()
        #expect(fixture.store.content("log.txt") == Array("firstsecond".utf8))
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func bytesWrittenDuringAnUploadNeverTearTheUploadedObject() async throws {
        let fixture = try CoreFixture.writable()
        let gate = Gate()
        let (item, handle) = try await fixture.fs.create(in: Item.rootInode, name: "db", mode: 0o644, owner: 0, group: 0,
                                                         exclusive: true, truncate: false)
        try fixture.write(handle: handle, Array(repeating: UInt8(ascii: "a"), count: 1000))
        let arrived = Gate()
        fixture.store.holdWrites(until: { await arrived.open(); await gate.wait() })
        async let synced: Void = fixture.fs.fsync(handle: handle)
        await arrived.wait()  // the PUT is under way, held
        try fixture.write(handle: handle, Array(repeating: UInt8(ascii: "b"), count: 500), at: 0)
        await gate.open()
        fixture.store.holdWrites(until: nil)
        try await synced
        #expect(fixture.store.content("db") == Array(repeating: UInt8(ascii: "a"), count: 1000), "the store got the committed bytes, whole")
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("db") == Array(repeating: UInt8(ascii: "b"), count: 500) + Array(repeating: UInt8(ascii: "a"), count: 500))
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
    }

    @Test func aKilledDaemonNeverUploadsWritesNoCloseHandedOver() async throws {
        let store = InMemoryStore()
        let good = randomBytes(50_000)
        store.addFile("report.pdf", good)
        let proxy = CrashableStore(wrapping: store)
        let fixture = try CoreFixture(store: store, through: proxy)
        let item = try await fixture.lookup("report.pdf")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("half of the new conte".utf8))
        // kill -9: no close, no shutdown. The next mount starts from the catalog and cache as left.
        let left = try await fixture.crash(proxy)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        #expect(store.content("report.pdf") == good, "the store's version is intact")
        let unsaved = conflictCopies(restarted, of: "report", kind: "unsaved")
        #expect(unsaved.count == 1)
        #expect(unsaved.first.flatMap { store.content($0) } == Array("half of the new conte".utf8), "the unsaved bytes are findable")
        let shown = try await restarted.lookup("report.pdf")
        #expect(shown.size == 50_000, "stat shows the store's size at once")
        #expect(shown.state == .placeholder)
        #expect(restarted.cachedFiles().isEmpty)
        _ = handle
    }

    @Test func aKilledDaemonStillUploadsWhatACloseCommitted() async throws {
        let store = InMemoryStore()
        store.failWrites(with: .unreachable("down"))
        let proxy = CrashableStore(wrapping: store)
        let fixture = try CoreFixture(store: store, through: proxy)
        try await fixture.createFile("done.txt", Array("closed".utf8))
        await fixture.settle()
        let left = try await fixture.crash(proxy)
        store.failWrites(with: nil)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        #expect(store.content("done.txt") == Array("closed".utf8))
        #expect(restarted.store.fileNames(in: "/") == ["done.txt"])
    }

    /// A close does not flush its copy to disk, so after the machine itself went down (power
    /// loss, a kernel crash) a committed copy may be torn: it goes to the store only as a new
    /// file `NAME (unsaved …)`, never over the store's version. After a daemon crash alone (the
    /// same boot: the kernel kept every byte), the same commit is uploaded as the file.
    @Test(arguments: [true, false])
    func aCommitNotUploadedWhenTheMachineWentDownNeverReplacesTheStoresVersion(machineRestarted: Bool) async throws {
        let good = randomBytes(50_000)
        let (store, fixture, _, left) = try await rewrittenWhileTheStoreIsDownThenKilled("report.pdf", had: good,
                                                                                      now: Array("the new content".utf8))
        let marker = try String(contentsOfFile: left + "/session", encoding: .utf8)
        #expect(marker.hasPrefix("running "), "a started mount says so before it commits anything: \(marker)")
        if machineRestarted { try theMachineRestarted(under: left) }
        store.failWrites(with: nil)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        let unsaved = conflictCopies(restarted, of: "report", kind: "unsaved")
        if machineRestarted {
            let intact = store.content("report.pdf") == good
            #expect(intact, "the store's version is intact")
            #expect(unsaved.count == 1)
            #expect(unsaved.first.flatMap { store.content($0) } == Array("the new content".utf8), "the bytes are findable")
            #expect(try await restarted.lookup("report.pdf").size == 50_000)
        } else {
            #expect(store.content("report.pdf") == Array("the new content".utf8))
            #expect(unsaved.isEmpty)
        }
        #expect(restarted.cachedFiles().isEmpty)
    }

    /// The copy a power loss tears most often is one left empty (ext4's delayed allocation
    /// writes nothing of a file closed a moment before). The journal says it holds the commit;
    /// it must not go to the store as the file.
    @Test func aCopyLeftEmptyByAMachineCrashNeverEmptiesTheStoresFile() async throws {
        let good = randomBytes(20_000)
        let (store, fixture, item, left) = try await rewrittenWhileTheStoreIsDownThenKilled("draft.txt", had: good,
                                                                                         now: Array("rewritten".utf8))
        try theMachineRestarted(under: left)
        #expect(truncate(left + "/cache/" + item.id, 0) == 0)   // what the disk kept of it
        store.failWrites(with: nil)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        let intact = store.content("draft.txt") == good
        #expect(intact, "the store's version is intact")
        #expect(try await restarted.lookup("draft.txt").size == 20_000)
        #expect(restarted.cachedFiles().isEmpty)
    }

    /// A pinned copy is a download no one flushed to disk: after a machine crash it may be
    /// torn, and is never served as the version the catalog names. It is fetched again.
    @Test func pinnedCopiesAreDroppedAfterAMachineCrash() async throws {
        let content = randomBytes(30_000)
        let (store, proxy, fixture) = try await startedMount(of: "kept.bin", holding: content)
        let item = try await fixture.lookup("kept.bin")
        try await fixture.fs.pin(item.inode)
        #expect(fixture.cachedFiles() == [item.id])
        let left = try await fixture.crash(proxy)
        try theMachineRestarted(under: left)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        #expect(restarted.cachedFiles().isEmpty, "a copy no one flushed is not trusted after the machine went down")
        #expect(try restarted.fs.item(item.inode).state == .placeholder)
        #expect(try restarted.catalog.isPinned(item.inode), "the pin itself stays")
        let handle = try await restarted.fs.open(item.inode, mode: .read)
        let read = try restarted.readAll(handle: handle, size: 30_000) == content
        #expect(read)
        await restarted.fs.release(handle: handle)
    }

    /// A started mount whose store holds `name` (`good`) rewrites it with `content` and closes
    /// it while the store refuses uploads; then the daemon is killed. Returns the store, the
    /// killed mount's fixture, the item and the directory the daemon left.
    private func rewrittenWhileTheStoreIsDownThenKilled(_ name: String, had good: [UInt8], now content: [UInt8])
        async throws -> (store: InMemoryStore, fixture: CoreFixture, item: Item, left: String) {
        let (store, proxy, fixture) = try await startedMount(of: name, holding: good)
        store.failWrites(with: .unreachable("down"))
        let item = try await fixture.lookup(name)
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, content)
        await fixture.fs.release(handle: handle)   // committed; its upload fails: the store is down
        await fixture.settle()
        return (store, fixture, item, try await fixture.crash(proxy))
    }

    /// A store holding `name`, and a started mount of it that can be killed (`CoreFixture.crash`).
    private func startedMount(of name: String, holding content: [UInt8]) async throws
        -> (store: InMemoryStore, proxy: CrashableStore, fixture: CoreFixture) {
        let store = InMemoryStore()
        store.addFile(name, content)
        let proxy = CrashableStore(wrapping: store)
        let fixture = try CoreFixture(store: store, through: proxy)
        try await fixture.fs.start()
        return (store, proxy, fixture)
    }

    /// The machine restarted under the mount that left `directory`: its marker names another boot.
    private func theMachineRestarted(under directory: String) throws {
        try "running 3f1e0c52-another-boot\n".write(toFile: directory + "/session", atomically: true, encoding: .utf8)
    }

    /// A mount that ends flushes what it leaves, and says so: the next one trusts its copies
    /// whatever happened to the machine in between.
    @Test func aMountThatEndsLeavesACleanMarkerAndItsChangesAreTrusted() async throws {
        let store = InMemoryStore()
        store.addFile("notes.txt", Array("old".utf8))
        let fixture = try CoreFixture(store: store, through: CrashableStore(wrapping: store))
        try await fixture.fs.start()
        store.failWrites(with: .unreachable("down"))
        let item = try await fixture.lookup("notes.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("new".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.fs.shutdown(uploadGrace: .milliseconds(300))
        #expect(try String(contentsOfFile: fixture.directory + "/session", encoding: .utf8) == "clean\n")
        store.failWrites(with: nil)
        let next = try await fixture.restart(from: fixture.directory, through: CrashableStore(wrapping: store))
        await next.settle()
        #expect(store.content("notes.txt") == Array("new".utf8))
        #expect(conflictCopies(next, of: "notes", kind: "unsaved").isEmpty)
    }

    /// An upload that hangs (a server that takes the body and never answers) does not hold an
    /// unmount past its grace: it is cancelled, its change stays for the next mount, which sends
    /// it, and an old attempt that reached the store after all is not taken for someone else's.
    @Test func anUploadThatHangsDoesNotHoldTheUnmountPastItsGrace() async throws {
        let store = InMemoryStore()
        store.addFile("notes.txt", Array("old".utf8))
        let fixture = try CoreFixture(store: store, through: CrashableStore(wrapping: store))
        try await fixture.fs.start()
        let hanging = Gate()
        let writes = Mutex(0)
        store.holdWrites(until: { if writes.withLock({ $0 += 1; return $0 }) == 1 { await hanging.wait() } })
        let item = try await fixture.lookup("notes.txt")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("new".utf8))
        await fixture.fs.release(handle: handle)
        try await eventually("a write") { writes.withLock { $0 } > 0 }

        let ended = Mutex(false)
        let unmounted = Task {
            await fixture.fs.shutdown(uploadGrace: .milliseconds(200))
            ended.withLock { $0 = true }
        }
        // Ends in about the grace and the uploader's patience (1.2 s); the rest is room for a
        // loaded machine (a full run beside a build once took over 10 s). A held unmount never ends.
        let deadline = ContinuousClock.now + .seconds(30)
        while !ended.withLock({ $0 }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(ended.withLock { $0 }, "the unmount waited for the hanging upload")
        if !ended.withLock({ $0 }) { await hanging.open() }  // so that a failing run ends
        let next = try await fixture.restart(from: fixture.directory, through: CrashableStore(wrapping: store))
        await next.settle()
        #expect(store.content("notes.txt") == Array("new".utf8))
        // The old attempt's answer comes at last; the store keeps one version, no conflict copy.
        await hanging.open()
        await unmounted.value
        await next.settle()
        #expect(store.content("notes.txt") == Array("new".utf8))
        #expect(store.fileNames(in: "").sorted() == ["notes.txt"])
        #expect(try next.pendingUploads().isEmpty)
    }

    @Test func aLargeUploadDoesNotHoldUpNamespaceChangesElsewhere() async throws {
        let fixture = try CoreFixture.writable()
        let gate = Gate()
        let arrived = Gate()
        fixture.store.holdWrites(until: { await arrived.open(); await gate.wait() })
        try await fixture.createFile("big.bin", randomBytes(10_000))
        await arrived.wait()  // its upload is in flight, held
        let fs = fixture.fs
        let mkdir = Task { try await fs.makeDirectory(in: Item.rootInode, name: "elsewhere", mode: 0o755, owner: 0, group: 0) }
        var finished = false
        for _ in 0..<40 where !finished {
            try await Task.sleep(for: .milliseconds(50))
            finished = fixture.store.mutations.contains { $0.contains("elsewhere") }
        }
        #expect(finished, "mkdir of another path did not wait for the upload")
        await gate.open()
        _ = try await mkdir.value
        fixture.store.holdWrites(until: nil)
        await fixture.settle()
    }
}
