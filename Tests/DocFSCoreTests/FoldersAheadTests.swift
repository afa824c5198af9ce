@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Synchronization
import Testing

/// `tar x` and `cp -r` make a folder, then write into it: far from the store each `mkdir` that
/// waits for its MKCOL is a round trip in series. A folder made in one this mount just made is
/// there at once, and the store gets it before anything below it, whatever comes meanwhile.
@Suite("Folders made ahead of their files")
struct FoldersAheadTests {
    /// Lets folder makes through once opened.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

        func wait() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.open { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        }

        func open() {
            let waiters = state.withLock { state in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    /// A started mount over a store that makes nothing below a missing folder, with "/tree" made
    /// through it (on the store at once, as the first folder of a tree is) and folder makes
    /// held from then on.
    static func mountWithATree(of store: InMemoryStore = InMemoryStore(),
                               through proxy: CrashableStore? = nil) async throws -> (CoreFixture, Item, Gate) {
        store.requireParents()
        let fixture = try CoreFixture(store: store, through: proxy, readOnly: false)
        try await fixture.fs.start()
        let tree = try await fixture.fs.makeDirectory(in: Item.rootInode, name: "tree", mode: 0o755, owner: 0, group: 0)
        #expect(tree.onStore)
        #expect(store.mutations == ["MKDIR /tree"])
        let gate = Gate()
        store.holdDirectoryMakes(until: { await gate.wait() })
        return (fixture, tree, gate)
    }

    static func writeFile(_ fixture: CoreFixture, in folder: Item, _ name: String, _ content: String) async throws {
        let (_, handle) = try await fixture.fs.create(in: folder.inode, name: name, mode: 0o644, owner: 0, group: 0,
                                                      exclusive: true, truncate: false)
        try fixture.write(handle: handle, Array(content.utf8))
        try await fixture.fs.flush(handle: handle)
        await fixture.fs.release(handle: handle)
    }

    @Test func aFolderMadeInOneJustMadeIsThereAtOnceAndTheStoreGetsItBeforeItsFiles() async throws {
        let (fixture, tree, gate) = try await Self.mountWithATree()
        let sub = try await fixture.fs.makeDirectory(in: tree.inode, name: "sub", mode: 0o750, owner: 0, group: 0)
        let deeper = try await fixture.fs.makeDirectory(in: sub.inode, name: "deeper", mode: 0o755, owner: 0, group: 0)
        let deepest = try await fixture.fs.makeDirectory(in: deeper.inode, name: "deepest", mode: 0o755, owner: 0, group: 0)
        #expect(!sub.onStore && !deeper.onStore && !deepest.onStore, "made ahead: the store has not answered")
        try await Self.writeFile(fixture, in: deepest, "a.txt", "below three folders being made")
        try await Task.sleep(for: .milliseconds(100))
        #expect(fixture.store.mutations == ["MKDIR /tree"], "nothing below a folder goes before it")

        gate.open()
        await fixture.settle()
        #expect(fixture.store.mutations == ["MKDIR /tree", "MKDIR /tree/sub", "MKDIR /tree/sub/deeper", "MKDIR /tree/sub/deeper/deepest",
                                           "PUT /tree/sub/deeper/deepest/a.txt"])
        #expect(fixture.store.content("tree/sub/deeper/deepest/a.txt") == Array("below three folders being made".utf8))
        #expect(try fixture.fs.item(sub.inode).onStore)
        #expect(try fixture.fs.item(deeper.inode).onStore)
        #expect(try fixture.fs.item(sub.inode).mode == 0o750)
    }

    @Test func aFolderMadeElsewhereWaitsForTheStore() async throws {
        let (fixture, _, gate) = try await Self.mountWithATree()
        gate.open()
        // The root was not made by this mount: its new folders go to the store first.
        let other = try await fixture.fs.makeDirectory(in: Item.rootInode, name: "other", mode: 0o755, owner: 0, group: 0)
        #expect(other.onStore)
        #expect(fixture.store.mutations.last == "MKDIR /other")
    }

    @Test func aRenameOrRemovalOfAFolderBeingMadeWaitsUntilTheStoreHasIt() async throws {
        let (fixture, tree, gate) = try await Self.mountWithATree()
        _ = try await fixture.fs.makeDirectory(in: tree.inode, name: "sub", mode: 0o755, owner: 0, group: 0)
        _ = try await fixture.fs.makeDirectory(in: tree.inode, name: "gone", mode: 0o755, owner: 0, group: 0)
        let renamed = Task { () async throws in
            try await fixture.fs.rename(from: tree.inode, name: "sub", to: tree.inode, newName: "moved", noReplace: false)
        }
        let removed = Task { () async throws in try await fixture.fs.remove(from: tree.inode, name: "gone", directory: true) }
        try await Task.sleep(for: .milliseconds(100))
        #expect(fixture.store.mutations == ["MKDIR /tree"])

        gate.open()
        try await renamed.value
        try await removed.value
        await fixture.settle()
        #expect(fixture.store.fileNames(in: "/tree").isEmpty)
        #expect(fixture.store.mutations.contains("MKDIR /tree/sub"))
        #expect(fixture.store.mutations.contains("MKDIR /tree/gone"))
        #expect(fixture.store.mutations.contains("DELETE /tree/gone"))
        let moved = try await fixture.lookup("tree/moved")
        #expect(moved.onStore && moved.isDirectory)
        await #expect(throws: FSError.self) { _ = try await fixture.lookup("tree/gone") }
    }

    @Test func aListingOfItsParentMeanwhileKeepsIt() async throws {
        let (fixture, tree, gate) = try await Self.mountWithATree()
        let sub = try await fixture.fs.makeDirectory(in: tree.inode, name: "sub", mode: 0o755, owner: 0, group: 0)
        try await fixture.fs.refresh(directory: tree.inode)
        #expect(try fixture.fs.item(sub.inode).parent == tree.inode, "not on the store yet, and kept")
        gate.open()
        await fixture.settle()
        #expect(try fixture.fs.item(sub.inode).onStore)
    }

    /// The listing's first page is asked before the MKCOL and its end comes after it: the folder
    /// is not on the page it would be on, and its row says it was learned after the listing began.
    @Test func aListingAskedBeforeItsMkcolAndEndedAfterKeepsIt() async throws {
        let (fixture, tree, gate) = try await Self.mountWithATree()
        fixture.store.addFile("tree/a", [1])
        fixture.store.addFile("tree/b", [2])
        fixture.store.pageListings(by: 1)
        let pages = Gate()
        fixture.store.holdListingPagesAfterTheFirst(until: { await pages.wait() })
        // Sorts before "a": never on a page asked after the first.
        let early = try await fixture.fs.makeDirectory(in: tree.inode, name: "0-early", mode: 0o755, owner: 0, group: 0)
        let listing = Task { () async throws in try await fixture.fs.refresh(directory: tree.inode) }
        try await eventually("the listing's first page") { fixture.store.listings(of: "/tree") == 1 }
        gate.open()
        try await eventually("0-early on the store") { try fixture.fs.item(early.inode).onStore }
        pages.open()
        try await listing.value
        await fixture.settle()
        #expect(try fixture.fs.item(early.inode).onStore)
        #expect(try await fixture.lookup("tree/0-early").inode == early.inode)
    }

    @Test func aFolderBeingMadeWhenTheDaemonIsKilledIsMadeByTheNextMountBeforeItsFiles() async throws {
        let store = InMemoryStore()
        let proxy = CrashableStore(wrapping: store)
        let (fixture, tree, _) = try await Self.mountWithATree(of: store, through: proxy)
        let sub = try await fixture.fs.makeDirectory(in: tree.inode, name: "sub", mode: 0o755, owner: 0, group: 0)
        try await Self.writeFile(fixture, in: sub, "kept.txt", "written below a folder the store never got")
        try await Task.sleep(for: .milliseconds(50))
        let left = try await fixture.crash(proxy)
        // The killed daemon's MKCOL never comes (its call waits on the gate for good); the next one's goes.
        fixture.store.holdDirectoryMakes(until: nil)

        let next = try await fixture.restart(from: left, through: CrashableStore(wrapping: fixture.store))
        await next.settle()
        let made = fixture.store.mutations
        #expect(made.suffix(2) == ["MKDIR /tree/sub", "PUT /tree/sub/kept.txt"], "\(made)")
        #expect(fixture.store.content("tree/sub/kept.txt") == Array("written below a folder the store never got".utf8))
        #expect(try next.fs.item(sub.inode).onStore)
    }
}
