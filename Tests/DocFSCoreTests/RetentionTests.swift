@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

@Suite("What stays local: pins, --evict-delay, --cache-max")
struct RetentionTests {
    @Test func aPinnedLifeKeepsItsCopyUntilUnpinned() {
        var life = CopyLife(content: .present, base: ETag("v1"))
        life.opened()
        _ = life.pinChanged(true)
        #expect(life.evictionRefusal == "it is open")
        #expect(life.released() == .none)
        #expect(life.evictionRefusal == nil)
        #expect(life.pinChanged(false) == .evict)
        var dirty = CopyLife(content: .present, base: ETag("v1"))
        dirty.changed()
        #expect(dirty.evictionRefusal == "it has changes the store does not have yet")
    }

    @Test func pinDownloadsAndKeepsAcrossReleaseAndRestart() async throws {
        let fixture = try CoreFixture()
        let content = randomBytes(50_000)
        fixture.store.addFile("keep.bin", content)
        let item = try await fixture.lookup("keep.bin")
        try await fixture.fs.pin(item.inode)
        #expect(fixture.store.readCount("keep.bin") == 1)
        #expect(fixture.cachedFiles() == [item.id])
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(try fixture.readAll(handle: handle, size: 50_000) == content)
        await fixture.fs.release(handle: handle)
        #expect(fixture.cachedFiles() == [item.id], "a pinned copy outlives its release")
        #expect(fixture.store.readCount("keep.bin") == 1)
        await fixture.fs.shutdown()

        let again = try CoreFixture(store: fixture.store, reuse: fixture.directory)
        try await again.fs.start()
        #expect(again.cachedFiles() == [item.id], "a pinned copy outlives the mount")
        #expect(String(decoding: try again.fs.extendedAttribute("user.docfs.state", of: item.inode), as: UTF8.self) == "pinned")
        let reopened = try await again.fs.open(item.inode, mode: .read)
        #expect(try again.readAll(handle: reopened, size: 50_000) == content)
        await again.fs.release(handle: reopened)
        #expect(again.store.readCount("keep.bin") == 1, "no download after the restart")

        try await again.fs.evict(item.inode)
        #expect(again.cachedFiles().isEmpty)
        #expect(try again.fs.item(item.inode).state == .placeholder)
        #expect(try !again.catalog.isPinned(item.inode))
    }

    /// A chmod of a pinned file kept from an earlier mount, on a store whose version follows the
    /// file's attributes (Apache and rclone give mtime-based ETags): the copy no one holds open
    /// follows the store's new version, so the next open needs no download.
    @Test func aPinnedCopyFromAnEarlierMountFollowsItsOwnAttributeChange() async throws {
        let fixture = try CoreFixture(readOnly: false)
        let content = randomBytes(50_000)
        fixture.store.addFile("keep.bin", content)
        let item = try await fixture.lookup("keep.bin")
        try await fixture.fs.pin(item.inode)
        await fixture.fs.shutdown()

        let store = fixture.store
        store.afterSettingAttributes { _ in store.addFile("keep.bin", content) }  // a new version, the same bytes
        let again = try CoreFixture(store: store, readOnly: false, reuse: fixture.directory)
        try await again.fs.start()
        _ = try await again.fs.setAttributes(of: item.inode, .init(mode: 0o600), handle: nil)
        #expect(store.attributes(of: "keep.bin")?.mode == 0o600)
        let reopened = try await again.fs.open(item.inode, mode: .read)
        #expect(try again.readAll(handle: reopened, size: 50_000) == content)
        await again.fs.release(handle: reopened)
        #expect(store.readCount("keep.bin") == 1, "the kept copy is the store's version: no download")
    }

    @Test func aListingOfAPinnedFolderDownloadsWhatTheStoreAdded() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("keep/a.txt", Array("v1".utf8))
        fixture.store.addFile("free/b.txt", Array("b".utf8))
        let folder = try await fixture.lookup("keep")
        let free = try await fixture.lookup("free")
        try await fixture.fs.pin(folder.inode)
        _ = try await fixture.fs.children(of: free.inode)
        #expect(fixture.store.readCount("keep/a.txt") == 1)

        // Another client changes one, adds a file and a folder; and adds to a folder not pinned.
        let added = randomBytes(20_000)
        fixture.store.addFile("keep/a.txt", Array("version 2".utf8))
        fixture.store.addFile("keep/new.bin", added)
        fixture.store.addFile("keep/sub/deep.txt", Array("deep".utf8))
        fixture.store.addFile("free/c.txt", Array("c".utf8))
        try await fixture.fs.refresh(directory: folder.inode)
        try await fixture.fs.refresh(directory: free.inode)
        let deadline = ContinuousClock.now + testPatience
        while ContinuousClock.now < deadline, fixture.store.readCount("keep/new.bin") == 0 || fixture.store.readCount("keep/sub/deep.txt") == 0 {
            try await Task.sleep(for: .milliseconds(20))
        }
        try await Task.sleep(for: .milliseconds(200))
        #expect(fixture.store.readCount("keep/new.bin") == 1)
        #expect(fixture.store.readCount("keep/sub/deep.txt") == 1)
        #expect(fixture.store.readCount("free/c.txt") == 0 && fixture.store.readCount("free/b.txt") == 0)
        for path in ["keep/new.bin", "keep/sub/deep.txt"] {
            let item = try await fixture.lookup(path)
            #expect(try fixture.catalog.isPinned(item.inode), "\(path)")
            #expect(item.state == .local && item.baseEtag == item.etag, "\(path): \(item.state)")
        }
        // The changed one keeps its copy of the old version until it is opened: the refresh
        // never drops a kept copy before the new version is there.
        #expect(fixture.store.readCount("keep/a.txt") == 1)
        let changed = try await fixture.lookup("keep/a.txt")
        #expect(changed.state == .local && changed.baseEtag != changed.etag)
        #expect(fixture.cachedFiles().count == 3)
        let reopened = try await fixture.fs.open(changed.inode, mode: .read)
        #expect(try fixture.readAll(handle: reopened, size: 100) == Array("version 2".utf8))
        await fixture.fs.release(handle: reopened)
        #expect(fixture.store.readCount("keep/a.txt") == 2)
        let new = try await fixture.lookup("keep/new.bin")
        let handle = try await fixture.fs.open(new.inode, mode: .read)
        #expect(try fixture.readAll(handle: handle, size: 20_000) == added)
        await fixture.fs.release(handle: handle)
        #expect(fixture.store.readCount("keep/new.bin") == 1, "read from the copy the refresh made")
    }

    /// Another client deletes a pinned file, and replaces another by a folder: the next
    /// listing of the folder shows neither old file, and their copies go. They stayed until
    /// the mount ended: `ls` showed the deleted file, and the folder stayed hidden.
    @Test func aPinnedFileTheStoreNoLongerHasGoesAtTheNextListing() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("keep/gone.txt", Array("bye".utf8))
        fixture.store.addFile("keep/now-folder", Array("file".utf8))
        fixture.store.addFile("keep/stays.txt", Array("stay".utf8))
        let folder = try await fixture.lookup("keep")
        try await fixture.fs.pin(folder.inode)
        #expect(fixture.cachedFiles().count == 3)

        fixture.store.remove("keep/gone.txt")
        fixture.store.remove("keep/now-folder")
        fixture.store.addFile("keep/now-folder/inside.txt", Array("in".utf8))
        try await fixture.fs.refresh(directory: folder.inode)
        let deadline = ContinuousClock.now + testPatience
        while ContinuousClock.now < deadline, fixture.cachedFiles().count > 1 { try await Task.sleep(for: .milliseconds(20)) }

        #expect(fixture.cachedFiles().count == 1)
        let names = try await fixture.fs.children(of: folder.inode).map(\.name).sorted()
        #expect(names == ["now-folder", "stays.txt"])
        #expect(try await fixture.lookup("keep/now-folder").isDirectory)
        let inside = try await fixture.lookup("keep/now-folder/inside.txt")
        #expect(try fixture.catalog.isPinned(inside.inode), "pinned, as a file the store added")
        await #expect(throws: FSError.notFound) { _ = try await fixture.lookup("keep/gone.txt") }
    }

    /// A pinned file open while the store deletes it stays readable for its handle (POSIX),
    /// and goes at the listing after its release.
    @Test func anOpenPinnedFileTheStoreNoLongerHasStaysForItsHandle() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("keep/open.txt", Array("open".utf8))
        let folder = try await fixture.lookup("keep")
        try await fixture.fs.pin(folder.inode)
        let file = try await fixture.lookup("keep/open.txt")
        let handle = try await fixture.fs.open(file.inode, mode: .read)
        fixture.store.remove("keep/open.txt")
        try await fixture.fs.refresh(directory: folder.inode)
        try await Task.sleep(for: .milliseconds(200))
        #expect(try fixture.readAll(handle: handle, size: 10) == Array("open".utf8))
        await fixture.fs.release(handle: handle)

        try await fixture.fs.refresh(directory: folder.inode)
        let deadline = ContinuousClock.now + testPatience
        while ContinuousClock.now < deadline, !fixture.cachedFiles().isEmpty { try await Task.sleep(for: .milliseconds(20)) }
        #expect(fixture.cachedFiles().isEmpty)
        #expect(try await fixture.fs.children(of: folder.inode).isEmpty)
    }

    @Test func aPinnedFolderRefreshLeavesAnOpenFileToItsHandles() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("keep/open.bin", randomBytes(4_000_000))
        let folder = try await fixture.lookup("keep")
        let file = try await fixture.lookup("keep/open.bin")
        // Open first (streamed: a sparse copy), then pin the folder and list it again.
        let handle = try await fixture.fs.open(file.inode, mode: .read)
        let before = fixture.store.readCount("keep/open.bin")
        try fixture.catalog.setPinned(folder, true)
        try await fixture.fs.refresh(directory: folder.inode)
        try await Task.sleep(for: .milliseconds(300))
        #expect(fixture.store.readCount("keep/open.bin") == before, "the refresh fetched an open file")
        await fixture.fs.release(handle: handle)
    }

    @Test func evictRefusesAModifiedFile() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("a.txt", Array("abc".utf8))
        let item = try await fixture.lookup("a.txt")
        fixture.store.failWrites(with: .serverError(status: 503, message: "down"))
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        try fixture.write(handle: handle, Array("xyz".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        await #expect(throws: FSError.busy("/a.txt: it has changes the store does not have yet")) {
            try await fixture.fs.evict(item.inode)
        }
        #expect(fixture.cachedFiles().contains(item.id))
    }

    @Test func aReopenWithinTheDelayReusesTheCopy() async throws {
        let fixture = try CoreFixture(retention: RetentionPolicy(evictDelay: .milliseconds(400)))
        let content = randomBytes(20_000)
        fixture.store.addFile("r.bin", content)
        let item = try await fixture.lookup("r.bin")
        for _ in 0..<3 {
            let handle = try await fixture.fs.open(item.inode, mode: .read)
            #expect(try fixture.readAll(handle: handle, size: 20_000) == content)
            await fixture.fs.release(handle: handle)
        }
        #expect(fixture.store.readCount("r.bin") == 1)
        #expect(fixture.cachedFiles() == [item.id])
        // The delay is 400 ms; a loaded machine may run the eviction later, never not at all.
        try await eventually("the kept copy to go once the delay has passed", timeout: .seconds(30)) { fixture.cachedFiles().isEmpty }
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
    }

    @Test func cacheMaxEvictsTheLeastRecentlyUsed() async throws {
        let fixture = try CoreFixture(retention: RetentionPolicy(cacheMax: 250_000))
        var items: [Item] = []
        for i in 0..<5 { fixture.store.addFile("f\(i).bin", randomBytes(100_000)) }
        for i in 0..<5 { items.append(try await fixture.lookup("f\(i).bin")) }
        for item in items {
            let handle = try await fixture.fs.open(item.inode, mode: .read)
            await fixture.fs.release(handle: handle)
            let used = fixture.cachedFiles().count
            #expect(used <= 2, "\(used) copies of 100,000 bytes under a 250,000-byte bound")
        }
        #expect(Set(fixture.cachedFiles()) == Set([items[3].id, items[4].id]))
    }

    @Test func sizesParse() {
        #expect(RetentionPolicy.parseSize("1M") == 1 << 20)
        #expect(RetentionPolicy.parseSize("2GiB") == 2 << 30)
        #expect(RetentionPolicy.parseSize("1500") == 1500)
        #expect(RetentionPolicy.parseSize("0.5K") == 512)
        #expect(RetentionPolicy.parseSize("lots") == nil)
        #expect(RetentionPolicy.parseSize("-1M") == nil)
    }
}
