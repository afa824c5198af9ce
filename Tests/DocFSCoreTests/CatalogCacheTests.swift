@testable import DocFSCore
import DocFSStore
import Testing

/// The rules that keep `CatalogCache` coherent with the catalog, checked one by one (a race
/// between a reader and a writer is too narrow to hit reliably through the catalog itself).
@Suite("The catalog's row cache never keeps a row older than the database")
struct CatalogCacheTests {
    private func item(_ inode: Inode, _ name: String, in parent: Inode = 1, size: Int64 = 0) -> Item {
        Item(inode: inode, id: "id-\(inode)", parent: parent, name: name, path: StorePath(validated: [name]), kind: .file,
             size: size, modified: Timestamp(nanoseconds: 0), etag: nil, symlinkTarget: nil, mode: nil, state: .placeholder,
             listedAt: nil, onStore: true, owner: nil, group: nil, accessed: nil, changed: nil, uploadError: nil,
             conflictCopy: nil, baseEtag: nil, hasUncommittedWrites: false, rdev: 0)
    }

    @Test func aRowReadBeforeAWriteIsNotKeptAfterIt() {
        let cache = CatalogCache()
        let ticket = cache.ticket()          // a reader starts, reads the old row...
        cache.invalidate(7)                  // ...a write of that row commits and invalidates...
        cache.fill(item(7, "a.txt", size: 1), ticket: ticket)  // ...and the reader comes back
        #expect(cache.item(7) == nil)
        #expect(cache.child(of: 1, named: "a.txt") == nil)

        let fresh = cache.ticket()
        cache.fill(item(7, "a.txt", size: 2), ticket: fresh)
        #expect(cache.item(7)?.size == 2)
        #expect(cache.child(of: 1, named: "a.txt")?.inode == 7)
    }

    @Test func anInvalidationOfOneRowLeavesTheOthersAndAllDropsEverything() {
        let cache = CatalogCache()
        cache.fill([item(7, "a.txt"), item(8, "b.txt")], ticket: cache.ticket())
        cache.invalidate(7)
        #expect(cache.item(7) == nil)
        #expect(cache.child(of: 1, named: "a.txt") == nil)
        #expect(cache.child(of: 1, named: "b.txt")?.inode == 8)
        cache.invalidateAll()
        #expect(cache.item(8) == nil)
        #expect(cache.child(of: 1, named: "b.txt") == nil)
    }

    /// SQLite compares names byte for byte; Swift's `==` would take these two as one name.
    @Test func namesAreComparedByteForByte() {
        let cache = CatalogCache()
        cache.fill(item(7, "caf\u{e9}"), ticket: cache.ticket())
        #expect(cache.child(of: 1, named: "caf\u{e9}")?.inode == 7)
        #expect(cache.child(of: 1, named: "cafe\u{301}") == nil)
        #expect(cache.child(of: 2, named: "caf\u{e9}") == nil)
    }

    @Test func itHoldsAtMostItsCapacity() {
        let cache = CatalogCache(capacity: 3)
        cache.fill((10..<20).map { item(Inode($0), "f\($0)") }, ticket: cache.ticket())
        #expect(cache.count == 3)
    }
}
