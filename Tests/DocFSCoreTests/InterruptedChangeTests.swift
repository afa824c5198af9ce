@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// A removal or a rename changes the store first and the catalog after. A daemon killed in
/// between (the store did it, the answer never arrived) used to wake up with the catalog of
/// before: a deleted file with unsent changes came back with them, and a renamed one was sent
/// again under its old name next to its stale new one. The catalog now notes the change before
/// the request (`Catalog+ChangesUnderWay.swift`), and the next start asks the store which way
/// it went (`InterruptedChanges`).
@Suite("A removal or rename cut short by a kill ends as the store has it")
struct InterruptedChangeTests {
    /// A started mount of `store` whose client can be killed, with uploads refused until the
    /// test lets them through: the changes it makes stay unsent.
    /// `renamesByCopying`: a file's rename is a copy, then a deletion, as on S3.
    private func startedMount(of store: InMemoryStore, renamesByCopying: Bool = false) async throws -> (proxy: CrashableStore, fixture: CoreFixture) {
        let proxy = CrashableStore(wrapping: store, renamesByCopying: renamesByCopying)
        let fixture = try CoreFixture(store: store, through: proxy)
        try await fixture.fs.start()
        store.failWrites(with: .unreachable("down"))
        return (proxy, fixture)
    }

    /// Rewrites `name` with `content` and closes it: a committed change the store does not have.
    private func rewrite(_ name: String, with content: String, in fixture: CoreFixture) async throws {
        let item = try await fixture.lookup(name)
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array(content.utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
    }

    /// Runs `operation` until the store has made the change `matching`, then kills the daemon
    /// (the operation never returns). Returns the directory the killed daemon left; uploads are
    /// allowed again.
    private func kill(_ fixture: CoreFixture, _ proxy: CrashableStore, rightAfter change: String,
                      during operation: @escaping @Sendable () async throws -> Void) async throws -> String {
        proxy.crash(rightAfter: { $0 == change })
        let cut = Task { try? await operation() }
        let deadline = ContinuousClock.now + testPatience
        while !proxy.isCrashed, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(proxy.isCrashed, "the store never saw \(change)")
        let left = try await fixture.crash(proxy)
        fixture.store.failWrites(with: nil)
        _ = cut
        return left
    }

    /// `kill`, then the next daemon started on what it left, its uploads settled.
    private func killed(_ fixture: CoreFixture, _ proxy: CrashableStore, rightAfter change: String,
                        during operation: @escaping @Sendable () async throws -> Void) async throws -> CoreFixture {
        let left = try await kill(fixture, proxy, rightAfter: change, during: operation)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: fixture.store))
        await restarted.settle()
        return restarted
    }

    /// Renames draft.txt, holding "new" not sent yet, to final.txt, and kills the daemon the
    /// moment the store has moved it. Returns the store and the directory the daemon left.
    private func renameKilledRightAfterTheMove() async throws -> (InMemoryStore, CoreFixture, String) {
        let store = InMemoryStore()
        store.addFile("draft.txt", Array("old".utf8))
        let (proxy, fixture) = try await startedMount(of: store)
        try await rewrite("draft.txt", with: "new", in: fixture)
        let left = try await kill(fixture, proxy, rightAfter: "MOVE /draft.txt /final.txt") {
            try await fixture.fs.rename(from: Item.rootInode, name: "draft.txt", to: Item.rootInode, newName: "final.txt", noReplace: false)
        }
        return (store, fixture, left)
    }

    /// Waits until the store holds `content` at `name` (at most `testPatience`).
    private func waitUntil(_ store: InMemoryStore, holds content: String, at name: String) async throws {
        let deadline = ContinuousClock.now + testPatience
        while store.content(name) != Array(content.utf8), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    @Test func aFileWithUnsentChangesRemovedJustBeforeAKillStaysRemoved() async throws {
        let store = InMemoryStore()
        store.addFile("notes.txt", Array("old".utf8))
        store.addFile("other.txt", Array("kept".utf8))
        let (proxy, fixture) = try await startedMount(of: store)
        try await rewrite("notes.txt", with: "new", in: fixture)
        let restarted = try await killed(fixture, proxy, rightAfter: "DELETE /notes.txt") {
            try await fixture.fs.remove(from: Item.rootInode, name: "notes.txt", directory: false)
        }
        #expect(store.fileNames(in: "/") == ["other.txt"], "the removed file is not sent again")
        await #expect(throws: FSError.notFound) { try await restarted.lookup("notes.txt") }
        #expect(restarted.cachedFiles().isEmpty, "its copy went with it")
        #expect(try restarted.fs.catalog.items(in: [.modified, .uploading]).isEmpty)
    }

    @Test func aFileWithUnsentChangesRenamedJustBeforeAKillEndsUnderItsNewName() async throws {
        let (store, fixture, left) = try await renameKilledRightAfterTheMove()
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        #expect(store.fileNames(in: "/") == ["final.txt"], "the old name is not made again")
        #expect(store.content("final.txt") == Array("new".utf8), "the changes reach the new name")
        await #expect(throws: FSError.notFound) { try await restarted.lookup("draft.txt") }
        #expect(try await restarted.lookup("final.txt").size == 3)
    }

    /// An editor's save: the new content goes to a temporary name and is renamed over the file.
    /// Unsent, the temporary file is not on the store: the rename deletes the stored file.
    @Test func anEditorsSaveKilledAfterTheStoreDroppedTheOldFileEndsUnderTheFilesName() async throws {
        let store = InMemoryStore()
        store.addFile("essay.txt", Array("first draft".utf8))
        let (proxy, fixture) = try await startedMount(of: store)
        try await fixture.createFile(".essay.txt.swp", Array("second draft".utf8))
        await fixture.settle()
        let restarted = try await killed(fixture, proxy, rightAfter: "DELETE /essay.txt") {
            try await fixture.fs.rename(from: Item.rootInode, name: ".essay.txt.swp", to: Item.rootInode, newName: "essay.txt", noReplace: false)
        }
        #expect(store.fileNames(in: "/") == ["essay.txt"])
        #expect(store.content("essay.txt") == Array("second draft".utf8))
        await #expect(throws: FSError.notFound) { try await restarted.lookup(".essay.txt.swp") }
    }

    /// The other way round: the daemon died before the store made the change (the request never
    /// left). The removal did not happen; the changes are sent as they would have been.
    @Test func aRemovalTheStoreNeverSawLeavesTheFileAndItsChanges() async throws {
        let store = InMemoryStore()
        store.addFile("notes.txt", Array("old".utf8))
        let (proxy, fixture) = try await startedMount(of: store)
        try await rewrite("notes.txt", with: "new", in: fixture)
        let item = try await fixture.lookup("notes.txt")
        try fixture.catalog.recordChangeUnderWay(.removal(of: item))
        let left = try await fixture.crash(proxy)
        store.failWrites(with: nil)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        #expect(store.content("notes.txt") == Array("new".utf8))
        #expect(try restarted.catalog.changesUnderWay().isEmpty)
    }

    /// S3 renames a file by copying it to the new name, then deleting the old one. Killed between
    /// the two, the daemon left the file under both names: the next start took the rename for
    /// never made, and a listing showed both (an unsent edit went up under the old name). Now it
    /// sees the copy whole (the same version as the old name's) and finishes the rename. A clean
    /// file is noted too on such a store, since nothing else would finish it.
    @Test(arguments: [true, false])
    func aRenameKilledBetweenItsCopyAndItsDeletionEndsUnderTheNewName(edited: Bool) async throws {
        let store = InMemoryStore()
        store.addFile("draft.txt", Array("old".utf8))
        let (proxy, fixture) = try await startedMount(of: store, renamesByCopying: true)
        if edited { try await rewrite("draft.txt", with: "new", in: fixture) }
        _ = try await fixture.lookup("draft.txt")
        let left = try await kill(fixture, proxy, rightAfter: "COPY /draft.txt /final.txt") {
            try await fixture.fs.rename(from: Item.rootInode, name: "draft.txt", to: Item.rootInode, newName: "final.txt", noReplace: false)
        }
        #expect(store.fileNames(in: "/") == ["draft.txt", "final.txt"], "the kill fell between the copy and the deletion")
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store, renamesByCopying: true))
        let content = edited ? "new" : "old"
        try await waitUntil(store, holds: content, at: "final.txt")
        await restarted.settle()
        try await restarted.refresh("/")
        #expect(store.fileNames(in: "/") == ["final.txt"], "the old name went")
        #expect(store.content("final.txt") == Array(content.utf8))
        await #expect(throws: FSError.notFound) { try await restarted.lookup("draft.txt") }
        #expect(try await restarted.lookup("final.txt").size == 3)
    }

    /// Killed before the copy was made, the rename never happened: the note goes and the file
    /// stays under its old name, its changes sent there.
    @Test func aRenameOnAStoreThatCopiesKilledBeforeTheCopyLeavesTheFileWhereItWas() async throws {
        let store = InMemoryStore()
        store.addFile("draft.txt", Array("old".utf8))
        let (proxy, fixture) = try await startedMount(of: store, renamesByCopying: true)
        try await rewrite("draft.txt", with: "new", in: fixture)
        let item = try await fixture.lookup("draft.txt")
        try fixture.catalog.recordChangeUnderWay(.move(of: item, to: Item.rootInode, name: "final.txt", gone: item.path))
        let left = try await fixture.crash(proxy)
        store.failWrites(with: nil)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store, renamesByCopying: true))
        try await waitUntil(store, holds: "new", at: "draft.txt")
        await restarted.settle()
        #expect(store.fileNames(in: "/") == ["draft.txt"])
        #expect(try restarted.catalog.changesUnderWay().isEmpty)
    }

    /// A store that cannot be reached at the restart cannot say which way the change went: the
    /// item waits, unsent, until it can, instead of being sent under a name it may have left.
    @Test func aRenameCutShortWaitsForTheStoreBeforeItsChangesAreSent() async throws {
        let (store, fixture, left) = try await renameKilledRightAfterTheMove()
        let down = CrashableStore(wrapping: store)
        down.outage = .unreachable("down")
        let restarted = try await fixture.restart(from: left, through: down)
        try await Task.sleep(for: .milliseconds(300))
        #expect(store.fileNames(in: "/") == ["final.txt"], "nothing is sent while the store cannot say")
        down.outage = nil
        try await waitUntil(store, holds: "new", at: "final.txt")
        await restarted.settle()
        #expect(store.fileNames(in: "/") == ["final.txt"])
        #expect(store.content("final.txt") == Array("new".utf8))
    }

    /// While the store cannot say (here: it answers everything but `stat`), the file shows under
    /// its old name, and a rename of it fails there (the store has no such file any more). That
    /// failure must not take the note of the change cut short away with its own.
    @Test func aRenameThatFailsMeanwhileKeepsTheNoteOfTheOneCutShort() async throws {
        let (store, fixture, left) = try await renameKilledRightAfterTheMove()
        store.failStats(with: .unreachable("down"))
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await #expect(throws: FSError.self) {
            try await restarted.fs.rename(from: Item.rootInode, name: "draft.txt", to: Item.rootInode, newName: "other.txt", noReplace: false)
        }
        #expect(try restarted.catalog.changesUnderWay().count == 1, "the note of the rename cut short stays")
        store.failStats(with: nil)
        try await waitUntil(store, holds: "new", at: "final.txt")
        await restarted.settle()
        #expect(store.fileNames(in: "/") == ["final.txt"])
        #expect(store.content("final.txt") == Array("new".utf8))
    }
}
