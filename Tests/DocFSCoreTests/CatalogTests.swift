@testable import DocFSCore
import DocFSStore
import Foundation
import Testing

@Suite("The catalog keeps placeholders with stable identities")
struct CatalogTests {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("catalog-\(UUID().uuidString).sqlite").path

    func entry(_ path: String, size: Int64 = 1, etag: String? = nil, directory: Bool = false) -> RemoteEntry {
        RemoteEntry(path: try! StorePath(path), kind: directory ? .directory : .file, size: size, modified: 1000,
                    etag: etag.map(ETag.init))
    }

    @Test func aListingCreatesPlaceholders() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a.txt", size: 5), entry("docs", directory: true)], listedAt: 1)
        let children = try catalog.children(of: Item.rootInode)
        #expect(children.map(\.name) == ["a.txt", "docs"])
        #expect(children[0].state == .placeholder)
        #expect(children[0].size == 5)
        #expect(children[1].state == .directory)
        #expect(try catalog.item(Item.rootInode)?.listedAt == 1)
    }

    /// An item's identifier names its copy in the cache: a version 4 UUID, written as
    /// Foundation writes one, and a new one for every row.
    @Test func identifiersAreRandomUUIDsWrittenAsFoundationWritesThem() throws {
        for _ in 0..<100 {
            let uuid = UUID()
            let written = withUnsafeBytes(of: uuid.uuid) { ItemIdentifier.formatted($0) }
            #expect(written == uuid.uuidString)
        }
        let made = (0..<1000).map { _ in ItemIdentifier.make() }
        #expect(Set(made).count == made.count)
        for id in made.prefix(20) {
            let parsed = try #require(UUID(uuidString: id))
            #expect(parsed.uuidString == id)
            #expect(withUnsafeBytes(of: parsed.uuid) { $0[6] >> 4 } == 4)
            #expect(withUnsafeBytes(of: parsed.uuid) { $0[8] >> 6 } == 2)
        }
    }

    /// `docfs unmount` decides on what kind of failure an upload met, kept beside its message:
    /// never on the message's words.
    @Test func anUploadsFailureKeepsItsKind() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a.txt"), entry("b.txt")], listedAt: 1)
        let (a, b) = try (catalog.children(of: Item.rootInode)[0], catalog.children(of: Item.rootInode)[1])
        try catalog.recordUploadError(of: a.inode, "no route to the server", trouble: .unreachable)
        try catalog.recordUploadError(of: b.inode, "413 too large", trouble: .refused)
        #expect(try catalog.item(a.inode)?.uploadTrouble == .unreachable)
        #expect(try catalog.item(b.inode)?.uploadTrouble == .refused)
        try catalog.recordUploadError(of: a.inode, nil)
        #expect(try catalog.item(a.inode)?.uploadTrouble == nil)
        #expect(try Catalog(path: path).item(b.inode)?.uploadTrouble == .refused)
    }

    @Test func aBatchReadFindsExactlyTheInodesAskedForWhateverTheirNumber() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: (0..<40).map { entry(String(format: "f%02d", $0)) }, listedAt: 1)
        let inodes = try catalog.children(of: Item.rootInode).map(\.inode)
        for count in 1...inodes.count {
            let asked = Array(inodes.prefix(count))
            let found = try catalog.items(asked + [999_999])  // one that does not exist
            #expect(Set(found.keys) == Set(asked))
            #expect(found.values.allSatisfy { asked.contains($0.inode) })
        }
    }

    @Test func inodesSurviveRelistingAndReopening() throws {
        var catalog: Catalog? = try Catalog(path: path)
        try catalog!.applyListing(of: Item.rootInode, entries: [entry("a.txt", etag: "1")], listedAt: 1)
        let first = try #require(try catalog!.child(of: Item.rootInode, named: "a.txt"))
        try catalog!.applyListing(of: Item.rootInode, entries: [entry("a.txt", size: 9, etag: "2")], listedAt: 2)
        catalog = nil
        let reopened = try Catalog(path: path)
        let again = try #require(try reopened.child(of: Item.rootInode, named: "a.txt"))
        #expect(again.inode == first.inode)
        #expect(again.id == first.id)
        #expect(again.size == 9)
        #expect(again.etag == ETag("2"))
    }

    @Test func vanishedEntriesGoWithTheirSubtree() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("docs", directory: true), entry("b")], listedAt: 1)
        let docs = try #require(try catalog.child(of: Item.rootInode, named: "docs"))
        try catalog.applyListing(of: docs.inode, entries: [entry("docs/inner")], listedAt: 1)
        let inner = try #require(try catalog.child(of: docs.inode, named: "inner"))
        try catalog.applyListing(of: Item.rootInode, entries: [entry("b")], listedAt: 2)
        #expect(try catalog.item(docs.inode) == nil)
        #expect(try catalog.item(inner.inode) == nil)
    }

    @Test func aNameThatChangesKindIsANewItem() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("x")], listedAt: 1)
        let file = try #require(try catalog.child(of: Item.rootInode, named: "x"))
        try catalog.applyListing(of: Item.rootInode, entries: [entry("x", directory: true)], listedAt: 2)
        let directory = try #require(try catalog.child(of: Item.rootInode, named: "x"))
        #expect(directory.isDirectory)
        #expect(directory.inode != file.inode, "an inode never names a different item")
    }

    @Test func inodesAreNeverReused() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a"), entry("b")], listedAt: 1)
        let b = try #require(try catalog.child(of: Item.rootInode, named: "b"))
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a")], listedAt: 2)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a"), entry("c")], listedAt: 3)
        let c = try #require(try catalog.child(of: Item.rootInode, named: "c"))
        #expect(c.inode > b.inode)
    }

    @Test func aRestartTurnsLocalStatesBackIntoPlaceholders() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a")], listedAt: 1)
        let a = try #require(try catalog.child(of: Item.rootInode, named: "a"))
        try catalog.recordCopy(a.inode, CopyLife(content: .fetching, base: nil))
        try catalog.resetTransientStates()
        #expect(try catalog.item(a.inode)?.state == .placeholder)
    }

    /// Model seed 500407: a.txt was open (a clean copy) when another client replaced it by a
    /// folder; the listing kept its row for the copy, not on the store. After a `kill -9` that
    /// row came back as a placeholder with nothing to fetch: an empty file no one wrote, over
    /// the folder.
    @Test func aRestartDropsACleanCopyTheStoreNoLongerHasAndListsItsFolderAgain() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a.txt"), entry("b.txt")], listedAt: 1)
        let a = try #require(try catalog.child(of: Item.rootInode, named: "a.txt"))
        try catalog.recordCopy(a.inode, CopyLife(content: .present, base: a.etag))
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a.txt", directory: true), entry("b.txt")], listedAt: 2)
        #expect(try catalog.item(a.inode)?.onStore == false, "the open copy keeps its row while open")

        try catalog.resetTransientStates()
        #expect(try catalog.item(a.inode) == nil)
        #expect(try catalog.child(of: Item.rootInode, named: "a.txt") == nil)
        #expect(try catalog.item(Item.rootInode)?.listedAt == nil, "the next lookup lists the folder and finds what took the name")
        #expect(try catalog.child(of: Item.rootInode, named: "b.txt") != nil)
    }
}

@Suite("A listing reaches the catalog page by page")
struct ListingPagesTests {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("catalog-\(UUID().uuidString).sqlite").path

    func entry(_ path: String, size: Int64 = 1, etag: String? = nil, directory: Bool = false) -> RemoteEntry {
        RemoteEntry(path: try! StorePath(path), kind: directory ? .directory : .file, size: size, modified: 1000,
                    etag: etag.map(ETag.init))
    }

    @Test func eachPageIsThereBeforeTheNextArrivesAndWhatVanishedGoesAtTheEnd() throws {
        let catalog = try Catalog(path: path)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("old"), entry("kept", etag: "1")], listedAt: 1)
        let kept = try #require(try catalog.child(of: Item.rootInode, named: "kept"))

        let progress = ListingProgress(startedAt: 2)
        try catalog.applyListingPage([entry("a"), entry("kept", size: 7, etag: "2")], of: Item.rootInode, askedAt: 2, progress: progress)
        #expect(try catalog.child(of: Item.rootInode, named: "a") != nil, "a page is applied as it arrives")
        #expect(try catalog.child(of: Item.rootInode, named: "old") != nil, "nothing vanishes before the last page")
        try catalog.applyListingPage([entry("b")], of: Item.rootInode, askedAt: 3, progress: progress)
        try catalog.finishListing(progress, of: Item.rootInode, listedAt: 4)

        #expect(try catalog.children(of: Item.rootInode).map(\.name) == ["a", "b", "kept"])
        let updated = try #require(try catalog.child(of: Item.rootInode, named: "kept"))
        #expect(updated.inode == kept.inode && updated.size == 7 && updated.etag == ETag("2"))
        #expect(try catalog.item(Item.rootInode)?.listedAt == 4)
        #expect(progress.count == 3)
    }

    @Test func aFolderWinsOverAFileOfTheSameNameOnAnotherPage() throws {
        let catalog = try Catalog(path: path)
        // S3: object `x` sorts before prefix `x/`, and a page may end between them.
        let first = ListingProgress(startedAt: 1)
        try catalog.applyListingPage([entry("x")], of: Item.rootInode, askedAt: 1, progress: first)
        try catalog.applyListingPage([entry("x", directory: true)], of: Item.rootInode, askedAt: 1, progress: first)
        try catalog.finishListing(first, of: Item.rootInode, listedAt: 1)
        #expect(try catalog.child(of: Item.rootInode, named: "x")?.isDirectory == true)

        let second = ListingProgress(startedAt: 2)
        try catalog.applyListingPage([entry("x", directory: true)], of: Item.rootInode, askedAt: 2, progress: second)
        try catalog.applyListingPage([entry("x")], of: Item.rootInode, askedAt: 2, progress: second)
        try catalog.finishListing(second, of: Item.rootInode, listedAt: 2)
        #expect(try catalog.child(of: Item.rootInode, named: "x")?.isDirectory == true)
    }

    @Test func aRefreshOfAnUnchangedFolderWritesOnlyItsListingTime() throws {
        let catalog = try Catalog(path: path)
        let entries = (0..<2_500).map { entry(String(format: "f%05d", $0), size: Int64($0), etag: "e\($0)") }
        try catalog.applyListing(of: Item.rootInode, entries: entries, listedAt: 1)
        let before = try catalog.rowsWritten()
        let progress = ListingProgress(startedAt: 2)
        for start in stride(from: 0, to: entries.count, by: 1000) {
            try catalog.applyListingPage(Array(entries[start..<min(start + 1000, entries.count)]), of: Item.rootInode,
                                         askedAt: 2, progress: progress)
        }
        try catalog.finishListing(progress, of: Item.rootInode, listedAt: 2)
        #expect(try catalog.rowsWritten() - before == 1, "only the folder's listing time")
        #expect(try catalog.itemCount() == 2_501)
    }
}
