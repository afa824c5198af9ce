@testable import DocFSCore
import DocFSStore
import Foundation
import Testing

/// A listing asked for before a local unlink or rename, and applied after it, still shows the
/// old name: it must not bring that name back (it did, as a placeholder of a file the store
/// no longer has, until the next refresh; test_special_files once failed on it).
@Suite("A listing older than a local unlink or rename does not bring the old name back")
struct ListingRaceTests {
    private func entry(_ path: String, directory: Bool = false) -> RemoteEntry {
        RemoteEntry(path: try! StorePath(path), kind: directory ? .directory : .file, size: 3, modified: 1000, etag: ETag("e-\(path)"))
    }

    private func catalog() throws -> Catalog {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-race-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return try Catalog(path: directory + "/catalog.sqlite")
    }

    private func names(_ catalog: Catalog) throws -> [String] {
        try catalog.children(of: Item.rootInode).map(\.name).sorted()
    }

    @Test func aRenamedNameStaysGone() throws {
        let catalog = try catalog()
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a.txt"), entry("dir", directory: true)], listedAt: 1)
        let asked = Date().timeIntervalSince1970
        let a = try #require(try catalog.child(of: Item.rootInode, named: "a.txt"))
        let dir = try #require(try catalog.child(of: Item.rootInode, named: "dir"))
        try catalog.moveItem(a.inode, to: Item.rootInode, name: "b.txt", changed: .now)
        try catalog.moveItem(dir.inode, to: Item.rootInode, name: "moved", changed: .now)
        // The store's answer to the listing asked before both renames.
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a.txt"), entry("dir", directory: true)],
                                 listedAt: asked + 1, askedAt: asked)
        #expect(try names(catalog) == ["b.txt", "moved"])
        // A listing asked after the renames is believed: someone made a new a.txt.
        try catalog.applyListing(of: Item.rootInode, entries: [entry("a.txt"), entry("b.txt"), entry("moved", directory: true)],
                                 listedAt: Date().timeIntervalSince1970 + 1, askedAt: Date().timeIntervalSince1970 + 0.001)
        #expect(try names(catalog) == ["a.txt", "b.txt", "moved"])
    }

    @Test func anUnlinkedNameStaysGone() throws {
        let catalog = try catalog()
        try catalog.applyListing(of: Item.rootInode, entries: [entry("gone.txt"), entry("kept.txt")], listedAt: 1)
        let asked = Date().timeIntervalSince1970
        try catalog.removeItem(try #require(try catalog.child(of: Item.rootInode, named: "gone.txt")).inode)
        try catalog.applyListing(of: Item.rootInode, entries: [entry("gone.txt"), entry("kept.txt")],
                                 listedAt: asked + 1, askedAt: asked)
        #expect(try names(catalog) == ["kept.txt"])
    }

    /// The store moved `pipe` into `sub` for a rename, and a listing of the top asked before
    /// that, answered after (no `pipe` there), is applied before the rename moves the row: the
    /// row must stay for the rename to move (the rename failed with EIO, test_special_files).
    @Test func aListingAppliedWhileARenameIsUnderWayKeepsTheRowItMoves() async throws {
        let catalog = try catalog()
        try catalog.applyListing(of: Item.rootInode, entries: [entry("pipe"), entry("sub", directory: true)], listedAt: 1)
        let asked = Date().timeIntervalSince1970
        let pipe = try #require(try catalog.child(of: Item.rootInode, named: "pipe"))
        let sub = try #require(try catalog.child(of: Item.rootInode, named: "sub"))
        try await catalog.moving.whileMoving(pipe.inode) { () async throws in
            try catalog.applyListing(of: Item.rootInode, entries: [entry("sub", directory: true)], listedAt: asked + 1, askedAt: asked)
            #expect(try catalog.item(pipe.inode) != nil)
            try catalog.moveItem(pipe.inode, to: sub.inode, name: "pipe", changed: .now)
        }
        #expect(try catalog.child(of: sub.inode, named: "pipe")?.inode == pipe.inode)
        #expect(try names(catalog) == ["sub"])
        #expect(!catalog.moving.contains(pipe.inode))
    }

    /// Outside a rename the same listing is believed: the item was deleted elsewhere.
    @Test func aListingWithoutAnItemDropsItsRowWhenNoRenameMovesIt() throws {
        let catalog = try catalog()
        try catalog.applyListing(of: Item.rootInode, entries: [entry("pipe"), entry("sub", directory: true)], listedAt: 1)
        let asked = Date().timeIntervalSince1970
        try catalog.applyListing(of: Item.rootInode, entries: [entry("sub", directory: true)], listedAt: asked + 1, askedAt: asked)
        #expect(try names(catalog) == ["sub"])
    }

    @Test func movingAnItemThatIsGoneSaysSoNotAnIOError() throws {
        let catalog = try catalog()
        #expect(throws: FSError.notFound) { try catalog.moveItem(424_242, to: Item.rootInode, name: "x", changed: .now) }
    }
}

/// An S3 listing vouches for no small object's kind (a link or special file is an object of a
/// few bytes, confirmed at its first lookup): such a listing must still move the store's
/// version under an open copy, or an edit of that copy overwrites the other client's version
/// without a conflict copy (test_nothing_lost's moto same-size replace failed so).
@Suite("A listing that cannot confirm kinds still shows a new version under an open copy")
struct UnconfirmedKindListingTests {
    @Test func theNewVersionReachesARowWithALocalCopy() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-kind-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let catalog = try Catalog(path: directory + "/catalog.sqlite")
        let ours = RemoteEntry(path: try StorePath("f.txt"), kind: .file, size: 3, modified: 1000, etag: ETag("ours"))
        try catalog.applyListing(of: Item.rootInode, entries: [ours], listedAt: 1)
        let item = try #require(try catalog.child(of: Item.rootInode, named: "f.txt"))
        var life = CopyLife(content: .present, base: ETag("ours"))
        life.opened()
        try catalog.recordCopy(item.inode, life)
        #expect(try catalog.item(item.inode)?.state == .local)

        let theirs = RemoteEntry(path: try StorePath("f.txt"), kind: .file, size: 3, modified: 2000, etag: ETag("theirs"))
        try catalog.applyListing(of: Item.rootInode, entries: [theirs], kindUnknown: [FileName("f.txt")],
                                 listedAt: Date().timeIntervalSince1970, askedAt: Date().timeIntervalSince1970)
        let after = try #require(try catalog.item(item.inode))
        #expect(after.etag == ETag("theirs"), "the store's version moved")
        #expect(after.state == .local, "the copy stays")
    }
}
