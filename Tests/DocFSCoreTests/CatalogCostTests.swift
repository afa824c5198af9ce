@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// What metadata and small files cost the catalog (issue 9): a lookup or getattr of a listed
/// folder's child is answered from memory, and a clean open/read/close writes only the
/// transactions its copy's life needs. Each bound here fails when a change makes the hot
/// paths go back to the database.
@Suite("Lookups and small files cost the catalog little")
struct CatalogCostTests {
    @Test func lookupsOfAListedFolderAreAnsweredFromMemory() async throws {
        let fixture = try CoreFixture()
        for index in 0..<200 { fixture.store.addFile("many/file-\(index).txt", Array("x\(index)".utf8)) }
        let folder = try await fixture.lookup("many")
        var listed: [Item] = []
        try await fixture.fs.forEachChild(of: folder.inode) { listed.append($0) }
        #expect(listed.count == 200)

        let before = fixture.catalog.itemReadsFromDatabase
        for child in listed {
            let found = try #require(try fixture.fs.lookupIfListed(parent: folder.inode, name: child.name))
            #expect(found == child)
            #expect(try fixture.fs.item(child.inode) == child)
        }
        // One read at most: the folder's own row, which the listing itself rewrote.
        let reads = fixture.catalog.itemReadsFromDatabase - before
        #expect(reads <= 1, "400 lookups and getattrs of listed names went to the database \(reads) times")
    }

    @Test func aCleanOpenReadCloseWritesAtMostThreeTransactions() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("small.bin", randomBytes(65536))
        let item = try await fixture.lookup("small.bin")
        await fixture.fs.waitForListings()  // a lookup is answered before its folder's listing ends and records
        let before = fixture.catalog.transactionsWritten

        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(try fixture.readAll(handle: handle, size: 65536).count == 65536)
        await fixture.fs.release(handle: handle)

        // The copy begins (the row says a download is under way: listings keep its version),
        // the download is recorded (the version it got), the eviction makes it a placeholder.
        let written = fixture.catalog.transactionsWritten - before
        #expect(written <= 3, "a clean open, read and close wrote \(written) catalog transactions")
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func anotherHandleOnAnOpenCopyWritesNothing() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("shared.bin", randomBytes(4096))
        let item = try await fixture.lookup("shared.bin")
        await fixture.fs.waitForListings()  // a lookup is answered before its folder's listing ends and records
        let first = try await fixture.fs.open(item.inode, mode: .read)
        let before = fixture.catalog.transactionsWritten
        let second = try await fixture.fs.open(item.inode, mode: .read)
        await fixture.fs.release(handle: second)
        #expect(fixture.catalog.transactionsWritten == before, "a second handle opened and closed on a present copy")
        #expect(try fixture.fs.item(item.inode).state == .local)
        await fixture.fs.release(handle: first)
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
    }

    /// The cache never shows a row as it was before a write: every kind of change is seen by
    /// the next lookup and getattr, with the names of a listed folder held in memory.
    @Test func everyChangeIsSeenThroughTheCache() async throws {
        let fixture = try CoreFixture.writable()
        fixture.store.addFile("dir/a.txt", Array("aaaa".utf8))
        fixture.store.addFile("dir/b.txt", Array("bb".utf8))
        fixture.store.addDirectory("other")
        let dir = try await fixture.lookup("dir")
        let other = try await fixture.lookup("other")
        func listed(_ folder: Inode) async throws -> [String: Item] {
            var children: [String: Item] = [:]
            try await fixture.fs.forEachChild(of: folder) { children[$0.name] = $0 }
            return children
        }
        var children = try await listed(dir.inode)
        let a = try #require(children["a.txt"])

        // A write through a handle: size, time and state follow.
        let handle = try await fixture.fs.open(a.inode, mode: DocFileSystem.OpenMode(writable: true, truncate: false))
        try fixture.write(handle: handle, Array("hello, world".utf8))
        try await fixture.fs.flush(handle: handle)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "a.txt")?.size == 12)
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(try fixture.fs.item(a.inode).size == 12)
        #expect(try fixture.fs.item(a.inode).state == .placeholder)
        #expect(fixture.store.content("dir/a.txt") == Array("hello, world".utf8))

        // Attributes.
        _ = try await fixture.fs.setAttributes(of: a.inode, DocFileSystem.AttributeChanges(mode: 0o600), handle: nil)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "a.txt")?.mode == 0o600)

        // A rename within the folder and across folders; the old name is gone at once.
        children = try await listed(dir.inode)
        try await fixture.fs.rename(from: dir.inode, name: "a.txt", to: dir.inode, newName: "c.txt", noReplace: false)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "c.txt")?.inode == a.inode)
        #expect(throws: FSError.notFound) { try fixture.fs.lookupIfListed(parent: dir.inode, name: "a.txt") }
        _ = try await listed(other.inode)
        try await fixture.fs.rename(from: dir.inode, name: "c.txt", to: other.inode, newName: "c.txt", noReplace: false)
        #expect(try fixture.fs.item(a.inode).parent == other.inode)
        #expect(throws: FSError.notFound) { try fixture.fs.lookupIfListed(parent: dir.inode, name: "c.txt") }
        #expect(try fixture.fs.lookupIfListed(parent: other.inode, name: "c.txt")?.inode == a.inode)

        // A removal.
        _ = try await listed(dir.inode)
        try await fixture.fs.remove(from: dir.inode, name: "b.txt", directory: false)
        #expect(throws: FSError.notFound) { try fixture.fs.lookupIfListed(parent: dir.inode, name: "b.txt") }

        // A create.
        let created = try await fixture.createFile("new.txt", Array("new".utf8), in: dir.inode)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "new.txt")?.inode == created.inode)

        // A change on the store, seen by a refresh of the listed folder.
        _ = try await listed(dir.inode)
        await fixture.settle()
        fixture.store.addFile("dir/new.txt", Array("changed elsewhere".utf8))
        fixture.store.addFile("dir/z.txt", Array("z".utf8))
        try await fixture.fs.refresh(directory: dir.inode)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "new.txt")?.size == 17)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "z.txt")?.size == 1)
        fixture.store.remove("dir/z.txt")
        try await fixture.fs.refresh(directory: dir.inode)
        #expect(throws: FSError.notFound) { try fixture.fs.lookupIfListed(parent: dir.inode, name: "z.txt") }
    }
}
