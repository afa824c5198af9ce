@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// A pinned copy outlives its release and the mount: after a `kill -9` the next mount keeps it
/// only if it is the store's whole file, still there.
@Suite("A pinned copy a killed daemon left is kept only when it is whole and the store still has it")
struct PinnedAfterCrashTests {
    /// A pinned file opened when it had no copy (pinned while the store was down) is streamed:
    /// only its head came. Kept as if whole after a kill -9, its holes read as zeros, and an edit
    /// uploaded them over the store's file.
    @Test func aPinnedCopyFilledOnlyInPartIsFetchedAgainAfterACrash() async throws {
        let store = InMemoryStore()
        let content = randomBytes(4_000_000)
        store.addFile("keep/big.bin", content)
        let proxy = CrashableStore(wrapping: store)
        let fixture = try CoreFixture(store: store, through: proxy)
        let file = try await fixture.lookup("keep/big.bin")
        proxy.outage = .unreachable("down")
        do { try await fixture.fs.pin(file.inode) } catch {}
        proxy.outage = nil
        let (restarted, again, tail) = try await readTheHeadCrashAndReadTheTail(file, fixture, proxy)
        #expect(again.state == .placeholder, "a placeholder again after the restart, for the pinned folder's refresh to download")
        #expect(tail == Array(content[3_000_000..<3_000_100]), "bytes no one wrote: \(tail.prefix(4))")

        let writer = try await restarted.fs.open(again.inode, mode: .init(writable: true, truncate: false))
        try restarted.write(handle: writer, Array("X".utf8))
        await restarted.fs.release(handle: writer)
        await restarted.settle()
        let stored = store.content("keep/big.bin") ?? []
        #expect(stored.count == content.count)
        #expect(Array(stored.dropFirst()) == Array(content.dropFirst()),
                "the store's file was overwritten: \(stored.filter { $0 == 0 }.count) zero bytes of \(stored.count)")
    }

    /// The same through a version changed elsewhere: the pinned folder's copy is stale, the open
    /// streams the new version.
    @Test func aPinnedFileChangedElsewhereAndReadInPartIsWholeAfterACrash() async throws {
        let store = InMemoryStore()
        store.addFile("keep/big.bin", randomBytes(4_000_000))
        let proxy = CrashableStore(wrapping: store)
        let fixture = try CoreFixture(store: store, through: proxy)
        let folder = try await fixture.lookup("keep")
        try await fixture.fs.pin(folder.inode)
        let theirs = randomBytes(4_000_000)
        store.addFile("keep/big.bin", theirs)
        try await fixture.fs.refresh(directory: folder.inode)
        let file = try await fixture.lookup("keep/big.bin")
        let (_, _, tail) = try await readTheHeadCrashAndReadTheTail(file, fixture, proxy)
        #expect(tail == Array(theirs[3_000_000..<3_000_100]), "bytes no one wrote: \(tail.prefix(4))")
    }

    /// Reads the first bytes of `file` (streamed: only its head comes), lets it go (a pinned
    /// copy stays), kills the daemon and restarts it; returns the restarted core, the file there,
    /// and 100 bytes read at 3,000,000.
    private func readTheHeadCrashAndReadTheTail(_ file: Item, _ fixture: CoreFixture, _ proxy: CrashableStore) async throws
        -> (restarted: CoreFixture, file: Item, tail: [UInt8]) {
        let reader = try await fixture.fs.open(file.inode, mode: .read)
        _ = try await fixture.fs.read(handle: reader, offset: 0, count: 100)
        await fixture.fs.release(handle: reader)
        let left = try await fixture.crash(proxy)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: fixture.store))
        let again = try await restarted.lookup(file.path.description.trimmingCharacters(in: ["/"]))
        let second = try await restarted.fs.open(again.inode, mode: .read)
        let tail = try await restarted.fs.read(handle: second, offset: 3_000_000, count: 100)
        await restarted.fs.release(handle: second)
        return (restarted, again, tail)
    }

    /// A pinned file deleted on the store, or replaced by a folder there, while a listing kept
    /// its copy: after a kill -9 the next mount shows what the store has.
    @Test func aPinnedCopyOfAFileTheStoreNoLongerHasGoesAtTheRestart() async throws {
        let store = InMemoryStore()
        store.addFile("keep/a.txt", Array("mine".utf8))
        store.addFile("keep/b.txt", Array("mine".utf8))
        let proxy = CrashableStore(wrapping: store)
        let fixture = try CoreFixture(store: store, through: proxy)
        let folder = try await fixture.lookup("keep")
        try await fixture.fs.pin(folder.inode)
        store.remove("keep/a.txt")
        store.remove("keep/b.txt")
        store.addDirectory("keep/b.txt")
        store.addFile("keep/b.txt/inner.txt", Array("theirs".utf8))
        try await fixture.fs.refresh(directory: folder.inode)

        let left = try await fixture.crash(proxy)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        let deleted = try? await restarted.lookup("keep/a.txt")
        #expect(deleted == nil, "a file deleted on the store is back")
        #expect(try await restarted.lookup("keep/b.txt").isDirectory, "the store's folder is hidden by the pinned file")
        #expect(try await restarted.lookup("keep/b.txt/inner.txt").size == 6)
    }
}
