import DocFSCore
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
}
