@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

@Suite("Directory listings are cached and revalidated")
struct EnumerationTests {
    /// Model seed 700922: a pinned file replaced by a folder on the store was "listed" as a
    /// folder; the folder's file became a pinned child of the file's row, and its copy stayed in
    /// the cache once that row went.
    @Test func aFileIsNeverListed() async throws {
        let store = InMemoryStore()
        store.addFile("a.txt", Array("file".utf8))
        let fixture = try CoreFixture(store: store)
        let file = try await fixture.lookup("a.txt")
        store.remove("a.txt")
        store.addFile("a.txt/inner.txt", Array("theirs".utf8))
        await #expect(throws: FSError.notADirectory) { try await fixture.fs.refresh(directory: file.inode) }
        #expect(try fixture.catalog.children(of: file.inode).isEmpty)
    }

    @Test func aDirectoryIsListedOnceWithinTheTTL() async throws {
        let fixture = try CoreFixture(ttl: 60)
        fixture.store.addFile("a", [1])
        _ = try await fixture.fs.children(of: Item.rootInode)
        _ = try await fixture.fs.children(of: Item.rootInode)
        _ = try await fixture.lookup("a")
        #expect(fixture.store.totalListings == 1)
    }

    @Test func theTopFolderIsListedWhileTheMountComesUpAndTheFirstLookupFindsItDone() async throws {
        let fixture = try CoreFixture(ttl: 60)
        fixture.store.addFile("big.bin", [1, 2, 3])
        await fixture.fs.startListingTheTop()?.value
        #expect(fixture.store.totalListings == 1)
        // Answered from the catalog, on the caller's thread: no listing of its own.
        let found = try fixture.fs.lookupIfListed(parent: Item.rootInode, name: "big.bin")
        #expect(found?.size == 3)
        #expect(fixture.store.totalListings == 1)
    }

    @Test func aTopFolderListedByAnEarlierMountIsNotListedAgainAtMount() async throws {
        let store = InMemoryStore()
        store.addFile("a", [1])
        let first = try CoreFixture(store: store)
        _ = try await first.fs.children(of: Item.rootInode)
        let second = try CoreFixture(store: store, reuse: first.directory)
        #expect(second.fs.startListingTheTop() == nil)
        // The catalog answers at once; its refresh waits for the first lookup (stale-while-revalidate).
        #expect(store.totalListings == 1)
    }

    @Test func concurrentListingsShareOneRequest() async throws {
        let fixture = try CoreFixture()
        for index in 0..<50 { fixture.store.addFile("f\(index)", [1]) }
        async let a = fixture.fs.children(of: Item.rootInode)
        async let b = fixture.fs.children(of: Item.rootInode)
        let (first, second) = try await (a, b)
        #expect(first.count == 50 && second.count == 50)
        #expect(fixture.store.totalListings == 1)
    }

    @Test func aRemountShowsTheCachedTreeEvenWhenTheStoreIsDown() async throws {
        let store = InMemoryStore()
        store.addFile("docs/a.txt", [1, 2, 3])
        let first = try CoreFixture(store: store)
        let listed = try await first.lookup("docs")
        // Awaited whole (a lookup of docs/a.txt returns at the page that holds the name).
        _ = try await first.fs.children(of: listed.inode)
        await first.fs.waitForListings()
        #expect(try first.catalog.item(listed.inode)?.listedAt != nil, "the first mount did not record docs as listed")

        store.failListings(with: .unreachable("connection refused"))
        let second = try CoreFixture(store: store, reuse: first.directory)
        let docs = try await second.lookup("docs")
        let children = try await second.fs.children(of: docs.inode)
        #expect(children.map(\.name) == ["a.txt"])
        #expect(children[0].size == 3)
    }

    @Test func aStaleListingIsRefreshedInTheBackground() async throws {
        let fixture = try CoreFixture(ttl: 0)
        fixture.store.addFile("a", [1])
        _ = try await fixture.fs.children(of: Item.rootInode)
        fixture.store.addFile("b", [2])
        // Answered from the catalog at once; the refresh lands shortly after.
        _ = try await fixture.fs.children(of: Item.rootInode)
        var names: [String] = []
        for _ in 0..<100 {
            names = try fixture.catalog.children(of: Item.rootInode).map(\.name)
            if names == ["a", "b"] { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(names == ["a", "b"])
    }

    @Test func aNeverListedDirectoryFailsWhenTheStoreIsDown() async throws {
        let fixture = try CoreFixture()
        fixture.store.failListings(with: .unreachable("refused"))
        await #expect(throws: FSError.storeUnreachable("refused")) {
            _ = try await fixture.fs.children(of: Item.rootInode)
        }
    }

    @Test func removedEntriesDisappearAfterRelisting() async throws {
        let fixture = try CoreFixture(ttl: 0)
        fixture.store.addFile("a", [1])
        fixture.store.addFile("b", [1])
        _ = try await fixture.fs.children(of: Item.rootInode)
        fixture.store.remove("b")
        try await fixture.fs.refresh(directory: Item.rootInode)
        #expect(try fixture.catalog.children(of: Item.rootInode).map(\.name) == ["a"])
        await #expect(throws: FSError.notFound) { _ = try await fixture.lookup("b") }
    }

    // MARK: Listing ahead of a tree walk

    /// A store with `top/NAME/file.txt` for each of `names`.
    private func tree(_ names: [String], in store: InMemoryStore) {
        for name in names { store.addFile("top/\(name)/file.txt", [1]) }
    }

    private func open(_ path: String, in fixture: CoreFixture) async throws {
        _ = try await fixture.fs.children(of: try await fixture.lookup(path).inode)
    }

    @Test func openingOneFolderListsNoOtherFolder() async throws {
        let fixture = try CoreFixture(ttl: 60)
        tree(["a", "b", "c", "d"], in: fixture.store)
        try await open("top/b", in: fixture)
        await fixture.fs.waitForListings()
        #expect(fixture.store.listings(of: "top/b") == 1)
        #expect(["a", "c", "d"].map { fixture.store.listings(of: "top/\($0)") } == [0, 0, 0])
    }

    @Test func aSecondFolderOpenedListsTheFoldersAfterItAheadEachOnce() async throws {
        let fixture = try CoreFixture(ttl: 60)
        let names = (0..<12).map { String(format: "d%02d", $0) }
        tree(names, in: fixture.store)
        try await open("top/d03", in: fixture)
        try await open("top/d04", in: fixture)
        await fixture.fs.waitForListings()
        // Those after the second, in name order; not those before the walk started.
        #expect(names.map { fixture.store.listings(of: "top/\($0)") } == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1])
        // The walk finds them listed: no request more.
        let before = fixture.store.totalListings
        for name in names.dropFirst(5) { try await open("top/\(name)", in: fixture) }
        #expect(fixture.store.totalListings == before)
    }

    @Test func listingAheadStopsAtItsLimitAndGoesOnWhereTheWalkMeetsAFolderNeverListed() async throws {
        let fixture = try CoreFixture(ttl: 60, listAhead: .init(folders: 3))
        let names = (0..<10).map { "d\($0)" }
        tree(names, in: fixture.store)
        try await open("top/d0", in: fixture)
        try await open("top/d1", in: fixture)
        await fixture.fs.waitForListings()
        #expect(names.map { fixture.store.listings(of: "top/\($0)") } == [1, 1, 1, 1, 1, 0, 0, 0, 0, 0])
        try await open("top/d5", in: fixture)
        await fixture.fs.waitForListings()
        #expect(names.map { fixture.store.listings(of: "top/\($0)") } == [1, 1, 1, 1, 1, 1, 1, 1, 1, 0])
    }

    @Test func aWalkDownATreeListsTheSubfoldersOfEachFolderItEnters() async throws {
        let fixture = try CoreFixture(ttl: 60)
        for top in ["a", "b", "c"] {
            for sub in ["s0", "s1", "s2"] { fixture.store.addFile("top/\(top)/\(sub)/file.txt", [1]) }
        }
        try await open("top/a", in: fixture)
        try await open("top/b", in: fixture)  // `top` is walked: c is listed ahead
        await fixture.fs.waitForListings()
        #expect(fixture.store.listings(of: "top/c") == 1)
        // In a folder of a walked one, the first subfolder entered lists the others ahead.
        try await open("top/c/s0", in: fixture)
        await fixture.fs.waitForListings()
        #expect(["s0", "s1", "s2"].map { fixture.store.listings(of: "top/c/\($0)") } == [1, 1, 1])
        // Every folder of the walk, listed once in all.
        for top in ["a", "b", "c"] {
            for sub in ["s0", "s1", "s2"] { try await open("top/\(top)/\(sub)", in: fixture) }
        }
        await fixture.fs.waitForListings()
        for top in ["a", "b", "c"] {
            #expect(["s0", "s1", "s2"].map { fixture.store.listings(of: "top/\(top)/\($0)") } == [1, 1, 1], "\(top)")
        }
        #expect(fixture.store.totalListings == 1 + 1 + 3 + 9)
    }

    @Test func aStoreThatGoesDownEndsTheListingAheadAfterTheListingsUnderWay() async throws {
        let fixture = try CoreFixture(ttl: 60)
        let names = (0..<40).map { String(format: "d%02d", $0) }
        tree(names, in: fixture.store)
        try await open("top/d00", in: fixture)
        fixture.store.failListings(with: .unreachable("refused"))
        let before = fixture.store.listingsAsked
        await #expect(throws: FSError.storeUnreachable("refused")) { try await self.open("top/d01", in: fixture) }
        await fixture.fs.waitForListings()
        // d01's own listing, and the first four folders after it (one batch under way), each
        // with its retries: not the 38 folders after it.
        let attempts = CoreFixture.quickRetry.attempts
        #expect(fixture.store.listingsAsked - before <= (1 + 4) * attempts)
        // Once the store is back, the walk lists ahead again, from where it is: the 32 after d01.
        fixture.store.failListings(with: nil)
        try await open("top/d01", in: fixture)
        try await open("top/d02", in: fixture)
        await fixture.fs.waitForListings()
        #expect(names[1..<34].map { fixture.store.listings(of: "top/\($0)") } == Array(repeating: 1, count: 33))
    }

    // MARK: Lookups by name in folders never listed (S3)

    /// `top/dir` looked up once, as the kernel does before it keeps the entry.
    private func folderLookedUpByName(_ fixture: CoreFixture) async throws -> Item {
        try await fixture.lookup("top/dir")
    }

    @Test func theSecondNameLookedUpInASmallFolderListsItAndTheRestAskNothing() async throws {
        let store = InMemoryStore(looksUpByStat: true)
        for name in ["a", "b", "c", "d", "e"] { store.addFile("top/dir/\(name).bin", [1, 2, 3]) }
        let fixture = try CoreFixture(store: store, ttl: 60)
        let dir = try await folderLookedUpByName(fixture)
        let before = (stats: store.statCount, listings: store.listingsAsked)
        _ = try await fixture.fs.lookup(parent: dir.inode, name: "a.bin")
        #expect(store.statCount == before.stats + 1)  // one name: asked by name only
        #expect(store.listingsAsked == before.listings)
        // The second is asked by name too, and lists the folder in the background.
        _ = try await fixture.fs.lookup(parent: dir.inode, name: "b.bin")
        await fixture.fs.waitForListings()
        #expect(store.statCount == before.stats + 2)
        #expect(store.listings(of: "top/dir") == 1)
        for name in ["c", "d", "e"] {
            #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "\(name).bin")?.size == 3)
            #expect(try await fixture.fs.lookup(parent: dir.inode, name: "\(name).bin").size == 3)
        }
        await #expect(throws: FSError.notFound) { try await fixture.fs.lookup(parent: dir.inode, name: "missing.bin") }
        #expect(store.statCount == before.stats + 2)
        #expect(store.listingsAsked == before.listings + 1)
    }

    /// On S3 a listing shows when each version was stored (`LastModified`); only a HEAD shows
    /// the time the file carries (`x-amz-meta-mtime`, what `touch -d` set). A name's HEAD
    /// answered after the folder's listing landed still gives the name its own time.
    @Test func aNameAskedByNameKeepsItsOwnTimeWhenTheFolderListingLandsFirst() async throws {
        let store = InMemoryStore(looksUpByStat: true, listsStoredTimes: true)
        for name in ["a", "b", "c"] { store.addFile("top/dir/\(name).bin", [1, 2, 3], modified: 1_000) }
        let fixture = try CoreFixture(store: store, ttl: 60)
        let dir = try await folderLookedUpByName(fixture)
        #expect(try await fixture.fs.lookup(parent: dir.inode, name: "a.bin").modified == Timestamp(seconds: 1_000))
        // The second name's HEAD waits until the listing it started is in the catalog.
        let gate = Gate()
        store.holdNextStat(until: { await gate.wait() })
        let second = Task { try await fixture.fs.lookup(parent: dir.inode, name: "b.bin") }
        try await eventually("a listing of top/dir") { store.listings(of: "top/dir") > 0 }
        await fixture.fs.waitForListings()
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "b.bin")?.modified
                    == Timestamp(seconds: InMemoryStore.storedTime(ofVersion: 2)))  // the listing's time, for now
        await gate.open()
        #expect(try await second.value.modified == Timestamp(seconds: 1_000))
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "b.bin")?.modified == Timestamp(seconds: 1_000))
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "a.bin")?.modified == Timestamp(seconds: 1_000))
    }

    /// A HEAD asked before a `touch -d` here and answered after it carries the old time: the
    /// time set here stays (also while the store has not taken it yet: here, never).
    @Test func aTimeSetHereIsNotUndoneByAnAnswerAskedBeforeIt() async throws {
        let store = InMemoryStore(looksUpByStat: true, listsStoredTimes: true)
        store.addFile("top/dir/a.bin", [1, 2, 3], modified: 1_000)
        let fixture = try CoreFixture(store: store, ttl: 60, readOnly: false, listAhead: .off)
        let dir = try await folderLookedUpByName(fixture)
        let a = try await fixture.fs.lookup(parent: dir.inode, name: "a.bin")
        let gate = Gate()
        store.holdNextStat(until: { await gate.wait() })
        let asked = store.statCount
        let again = Task { try await fixture.fs.lookup(parent: dir.inode, name: "a.bin") }
        try await eventually("a stat") { store.statCount != asked }
        store.failAttributes(with: .unreachable("test"))
        _ = try await fixture.fs.setAttributes(of: a.inode, .init(modified: Timestamp(seconds: 5_000)), handle: nil)
        await gate.open()
        #expect(try await again.value.modified == Timestamp(seconds: 5_000))
        #expect(try fixture.fs.item(a.inode).modified == Timestamp(seconds: 5_000))
    }

    @Test func lookupsByNameInABigFolderBuyItsListingPageByPage() async throws {
        let store = InMemoryStore(looksUpByStat: true)
        let names = (0..<40).map { String(format: "f%02d.bin", $0) }
        for name in names { store.addFile("top/dir/\(name)", [1]) }
        let fixture = try CoreFixture(store: store, ttl: 60)
        let dir = try await folderLookedUpByName(fixture)
        store.pageListings(by: 10)
        let before = (stats: store.statCount, listings: store.listingsAsked)
        var pagesAfter: [Int] = []
        for name in names {
            #expect(try await fixture.fs.lookup(parent: dir.inode, name: name).size == 1)
            await fixture.fs.waitForListings()
            pagesAfter.append(store.listingsAsked - before.listings)
        }
        // The second name asks for the first page, the 8th for the second, the 16th for the
        // third and the 24th for the last (8 names per page listed): then the folder is listed.
        #expect(pagesAfter[0] == 0 && pagesAfter[1] == 1 && pagesAfter[6] == 1 && pagesAfter[7] == 2)
        #expect(pagesAfter[15] == 3 && pagesAfter[23] == 4 && pagesAfter.last == 4)
        #expect(store.statCount == before.stats + 24)  // the 16 names after the last page: no request
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "f39.bin")?.size == 1)
        #expect(try await fixture.fs.children(of: dir.inode).count == 40)
        #expect(store.listings(of: "top/dir") == 4)
    }

    @Test func aFewNamesLookedUpInABigFolderCostOnePageAtMost() async throws {
        let store = InMemoryStore(looksUpByStat: true)
        for i in 0..<30 { store.addFile("top/dir/f\(i).bin", [1]) }
        let fixture = try CoreFixture(store: store, ttl: 60)
        let dir = try await folderLookedUpByName(fixture)
        store.pageListings(by: 10)
        let before = store.listingsAsked
        for i in 0..<7 {
            _ = try await fixture.fs.lookup(parent: dir.inode, name: "f\(i).bin")
            await fixture.fs.waitForListings()
        }
        #expect(store.listingsAsked == before + 1)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "f0.bin") == nil)  // not listed yet
        // `ls` lists it whole.
        #expect(try await fixture.fs.children(of: dir.inode).count == 30)
    }

    @Test func aNameInABigFolderNeverListedIsAnsweredByThePageThatHoldsIt() async throws {
        let store = InMemoryStore()
        let names = (0..<30).map { String(format: "f%02d.bin", $0) }
        for name in names { store.addFile("top/dir/\(name)", [1]) }
        let fixture = try CoreFixture(store: store, ttl: 60)
        let top = try await fixture.lookup("top")
        store.pageListings(by: 10)
        let gate = Gate()
        store.holdListingPagesAfterTheFirst(until: { await gate.wait() })
        let dir = try await fixture.fs.lookup(parent: top.inode, name: "dir")
        // The first page is in while the second is held: its names are answered, by the
        // synchronous path too, and the folder is not listed yet.
        let first = try await withDeadline(.seconds(20), "a name of the first page") {
            try? await fixture.fs.lookup(parent: dir.inode, name: "f03.bin")
        }
        #expect(first?.size == 1)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "f09.bin")?.size == 1)
        #expect(try fixture.fs.lookupIfListed(parent: dir.inode, name: "f10.bin") == nil)
        let later = Task { try await fixture.fs.lookup(parent: dir.inode, name: "f25.bin") }
        let absent = Task { () -> FSError? in
            do {
                _ = try await fixture.fs.lookup(parent: dir.inode, name: "none.bin")
                return nil
            } catch { return error as? FSError }
        }
        await gate.open()
        #expect(try await later.value.size == 1)
        #expect(await absent.value == .notFound)  // known absent only once the listing ended
        #expect(try await fixture.fs.children(of: dir.inode).count == 30)
        #expect(store.listings(of: "top/dir") == 3)
    }

    @Test func listingAheadOffLooksEveryNameUpByName() async throws {
        let store = InMemoryStore(looksUpByStat: true)
        for name in ["a", "b", "c"] { store.addFile("top/dir/\(name).bin", [1]) }
        let fixture = try CoreFixture(store: store, ttl: 60, listAhead: .off)
        let dir = try await folderLookedUpByName(fixture)
        for name in ["a", "b", "c"] { _ = try await fixture.fs.lookup(parent: dir.inode, name: "\(name).bin") }
        #expect(store.listingsAsked == 0)
    }

    @Test func listingAheadOffListsOnlyWhatIsOpened() async throws {
        let fixture = try CoreFixture(ttl: 60, listAhead: .off)
        tree(["a", "b", "c", "d"], in: fixture.store)
        try await open("top/a", in: fixture)
        try await open("top/b", in: fixture)
        await fixture.fs.waitForListings()
        #expect(["a", "b", "c", "d"].map { fixture.store.listings(of: "top/\($0)") } == [1, 1, 0, 0])
    }
}
