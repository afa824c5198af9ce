@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Logging
import Testing

/// On a store whose listings show links as small files (S3), the catalog still shows links as
/// links: a listing asks nothing per entry, a lookup asks `stat` about a small file once per
/// version, and never relisting turns a link into a file.
@Suite("Links on stores whose listings cannot show them")
struct SymlinkDiscoveryTests {
    static func linkHidingStore() -> InMemoryStore {
        InMemoryStore(symlinkDiscovery: .byStat(maximumTargetBytes: 4095))
    }

    @Test func aLinkMadeElsewhereIsFoundWithOneStatPerSmallFile() async throws {
        let fixture = try CoreFixture(store: Self.linkHidingStore())
        fixture.store.addSymlink("link", target: "docs/a.txt")
        fixture.store.addFile("small", [1, 2, 3])
        fixture.store.addFile("empty", [])
        fixture.store.addFile("large", [UInt8](repeating: 7, count: 4096))
        fixture.store.addDirectory("docs")

        // The listing asks nothing per entry: what may be a link is confirmed at its lookup.
        let children = try await fixture.fs.children(of: Item.rootInode)
        #expect(children.count == 5)
        #expect(fixture.store.statCount == 0)
        #expect(try fixture.childrenToConfirm(of: Item.rootInode).count == 3)

        let link = try await fixture.lookup("link")
        #expect(link.kind == .symlink)
        #expect(link.symlinkTarget == "docs/a.txt")
        #expect(try await fixture.lookup("small").kind == .file)
        #expect(try await fixture.lookup("large").kind == .file)
        #expect(try await fixture.lookup("docs").kind == .directory)
        // Only the files that could be links or special files (an empty object may be a FIFO,
        // socket or device, as s3fs writes them) were asked about, once each: not the one
        // larger than any target, not the directory.
        #expect(try await fixture.lookup("empty").kind == .file)
        #expect(fixture.store.statCount == 3)
        #expect(try fixture.childrenToConfirm(of: Item.rootInode).isEmpty)
    }

    @Test func aStoreThatIsDownDoesNotHoldLookupsOfSmallFiles() async throws {
        let store = Self.linkHidingStore()
        // More names than the sweep may ask about before it sees the store down: its first wave
        // (64 at once, 3 attempts each) and a lookup's own question or two.
        let names = (0..<300).map { "small\($0)" }
        for name in names { store.addFile(name, [1]) }
        let fixture = try CoreFixture(store: store)
        _ = try await fixture.fs.children(of: Item.rootInode)
        #expect(try fixture.childrenToConfirm(of: Item.rootInode).count == names.count)

        // Offline: every connection refused. Each lookup answers with the kind the listing
        // gave, and once a HEAD found the store down, no lookup and no sweep asks it again
        // (before: every entry was asked, each lookup retrying for up to 20 s on a mount).
        store.failStats(with: .unreachable("connection refused"))
        for name in names {
            #expect(try await fixture.lookup(name).kind == .file)
        }
        #expect(store.statCount < names.count, "asked \(store.statCount) times about \(names.count) entries")
        #expect(try fixture.childrenToConfirm(of: Item.rootInode).count == names.count)
    }

    static let folders = 10, files = 40

    /// `folders` folders of `files` small files each on a link-hiding store, each listed (its
    /// kinds not yet asked); their inodes in name order.
    static func listedFolders(_ folders: Int, of files: Int) async throws -> (CoreFixture, [Inode]) {
        let store = linkHidingStore()
        for f in 0..<folders { for i in 0..<files { store.addFile("d\(f)/s\(i)", [1]) } }
        let fixture = try CoreFixture(store: store)
        var inodes: [Inode] = []
        for f in 0..<folders {
            let folder = try await fixture.lookup("d\(f)")
            _ = try await fixture.fs.children(of: folder.inode)
            inodes.append(folder.inode)
        }
        return (fixture, inodes)
    }

    /// `find` over a tree listed ahead: each folder listed ahead is swept, and a walk lists
    /// many. However many are swept, only a few sweeps ask at once (before: each folder's sweep
    /// started at once, 32 HEADs each, hundreds out at a time), and all are asked in the end.
    @Test func sweepsAheadOfAWalkAskOnlyAFewFoldersAtOnce() async throws {
        let (fixture, inodes) = try await Self.listedFolders(Self.folders, of: Self.files)
        let store = fixture.store
        #expect(store.statCount == 0)
        store.delayStats(by: .milliseconds(30))
        // The walk goes on stat'ing however long a loaded machine takes to sweep.
        let confirmations = KindConfirmations(store: store, catalog: fixture.catalog, retry: CoreFixture.quickRetry, logger: Logger(label: "test"),
                                              statsFollowFor: .seconds(600))
        // A lookup needed a kind (the walker stats what it walks), then the walk listed ahead.
        // From the catalog: a lookup through the file system would sweep with its own confirmations.
        let first = try #require(try fixture.catalog.child(of: inodes[0], named: "s0"))
        let toConfirm = try #require(try fixture.catalog.kindToConfirm(first, maximumSize: 4095))
        await confirmations.confirm(toConfirm)
        for inode in inodes.dropFirst() { await confirmations.sweepAhead(inode) }
        try await eventually("every folder swept", timeout: .seconds(60)) {
            try inodes.allSatisfy { try fixture.childrenToConfirm(of: $0).isEmpty }
        }
        #expect(store.statCount == Self.folders * Self.files)
        let bound = 2 * 64 + 1  // the reader's folder (64 HEADs), two ahead (32 each), and the lookup's own
        #expect(store.peakStatsInFlight <= bound, "\(store.peakStatsInFlight) HEADs at once (at most \(bound))")
    }

    /// A walk that stopped stat'ing (no lookup needed a kind for a while) has the folders it
    /// listed ahead left unasked: those still waiting for a sweep are dropped.
    @Test func foldersListedAheadOfAWalkThatStoppedAreNotSwept() async throws {
        let (fixture, inodes) = try await Self.listedFolders(Self.folders, of: Self.files)
        let store = fixture.store
        store.delayStats(by: .milliseconds(100))
        let confirmations = KindConfirmations(store: store, catalog: fixture.catalog, retry: CoreFixture.quickRetry, logger: Logger(label: "test"),
                                              statsFollowFor: .milliseconds(150))
        let first = try #require(try fixture.catalog.child(of: inodes[0], named: "s0"))
        await confirmations.confirm(try #require(try fixture.catalog.kindToConfirm(first, maximumSize: 4095)))
        for inode in inodes.dropFirst() { await confirmations.sweepAhead(inode) }
        // A sweep takes 3 rounds of 100 ms: at most two ahead begin, and end after the walk
        // stopped; none starts once none runs.
        let deadline = ContinuousClock.now + .seconds(60)
        while await confirmations.sweepsAheadUnderWay, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(await !confirmations.sweepsAheadUnderWay)
        let unswept = try inodes.dropFirst().filter { try fixture.childrenToConfirm(of: $0).count == Self.files }
        #expect(unswept.count >= Self.folders - 3, "\(store.statCount) HEADs")
    }

    @Test func anUnchangedVersionIsNotAskedAboutAgain() async throws {
        let store = Self.linkHidingStore()
        store.addSymlink("link", target: "elsewhere")
        store.addFile("small", [1])
        let fixture = try CoreFixture(store: store)
        let root = try fixture.fs.item(Item.rootInode)
        try await fixture.fs.refresh(directory: root.inode)
        #expect(store.statCount == 0)
        #expect(try await fixture.lookup("link").kind == .symlink)
        #expect(try await fixture.lookup("small").kind == .file)
        #expect(store.statCount == 2)

        try await fixture.fs.refresh(directory: root.inode)
        // A remount reads the same catalog: still nothing to ask.
        let remounted = try CoreFixture(store: store, reuse: fixture.directory)
        try await remounted.fs.refresh(directory: root.inode)
        #expect(store.statCount == 2)
        #expect(try await remounted.lookup("link").kind == .symlink)
    }

    @Test func aLinkMadeHereStaysALinkWhenListedAgain() async throws {
        let fixture = try CoreFixture.writable(store: Self.linkHidingStore())
        let made = try await fixture.fs.makeSymlink(in: Item.rootInode, name: "here", target: "../there", owner: 0, group: 0)
        #expect(fixture.store.mutations == ["SYMLINK /here"])

        try await fixture.fs.refresh(directory: Item.rootInode)
        let listed = try await fixture.lookup("here")
        #expect(listed.inode == made.inode)
        #expect(listed.kind == .symlink)
        #expect(listed.symlinkTarget == "../there")
        #expect(fixture.store.statCount == 0)
    }

    @Test func aLinkReplacedByAFileOnTheStoreBecomesAFile() async throws {
        let fixture = try CoreFixture(store: Self.linkHidingStore())
        fixture.store.addSymlink("name", target: "target")
        let root = try fixture.fs.item(Item.rootInode)
        try await fixture.fs.refresh(directory: root.inode)
        #expect(try await fixture.lookup("name").kind == .symlink)

        fixture.store.addFile("name", Array("a file now".utf8))
        try await fixture.fs.refresh(directory: root.inode)
        let item = try await fixture.lookup("name")
        #expect(item.kind == .file)
        #expect(item.size == 10)
    }

    @Test func aStoreThatListsLinksIsNeverAsked() async throws {
        let fixture = try CoreFixture()
        fixture.store.addSymlink("link", target: "x")
        fixture.store.addFile("small", [1])
        let children = try await fixture.fs.children(of: Item.rootInode)
        #expect(children.first { $0.name == "link" }?.kind == .symlink)
        #expect(fixture.store.statCount == 0)
    }
}

extension CoreFixture {
    /// The children of `directory` that opendir types DT_UNKNOWN, so that `stat` looks them up.
    func childrenToConfirm(of directory: Inode) throws -> [Item] {
        try catalog.children(of: directory).filter(fs.kindUnconfirmed)
    }
}
