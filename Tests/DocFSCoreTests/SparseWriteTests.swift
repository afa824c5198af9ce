@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// A write into a sparse copy (a large file streamed, not downloaded at open) lands at once;
/// the bytes it does not cover are fetched before the commit, from the version the copy
/// started from, and never land on the user's; a crash in between keeps the user's bytes with
/// the store's around them.
@Suite("A write into a sparse copy fetches only what it does not overwrite")
struct SparseWriteTests {
    static let mebibyte = 1 << 20
    static let size = 8 * mebibyte

    private func openWriter(_ store: InMemoryStore, through proxy: (any Store)? = nil) async throws -> (CoreFixture, UInt64, [UInt8]) {
        let content = randomBytes(Self.size)
        store.addFile("disk.img", content)
        let fixture = try CoreFixture(store: store, through: proxy ?? store)
        let item = try await fixture.lookup("disk.img")
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        return (fixture, handle, content)
    }

    static let mine = Array("MINE".utf8)
    static let mineAt = 5 * mebibyte

    /// A writer of the store's file, reaching it through a proxy that can be crashed or taken
    /// down, that has written `mine` at `mineAt` (the copy holds its head and those bytes).
    private func writerThroughProxy() async throws -> (InMemoryStore, CrashableStore, CoreFixture, UInt64, [UInt8]) {
        let store = InMemoryStore()
        let proxy = CrashableStore(wrapping: store)
        let (fixture, handle, content) = try await openWriter(store, through: proxy)
        try fixture.write(handle: handle, Self.mine, at: Int64(Self.mineAt))
        return (store, proxy, fixture, handle, content)
    }

    /// `content` with `mine` written at `mineAt`.
    private func withMine(_ content: [UInt8]) -> [UInt8] {
        var edited = content
        edited.replaceSubrange(Self.mineAt..<(Self.mineAt + Self.mine.count), with: Self.mine)
        return edited
    }

    private func unsavedCopies(_ fixture: CoreFixture) -> [String] {
        fixture.store.fileNames(in: "/").filter { $0.hasPrefix("disk (unsaved ") }
    }

    @Test func bytesAWriteCoversAreNeverFetched() async throws {
        let (fixture, handle, content) = try await openWriter(InMemoryStore())
        let overwritten = (2 * Self.mebibyte)..<(3 * Self.mebibyte)
        let ours = randomBytes(overwritten.count)
        // In pieces, as the kernel sends a large write.
        for start in stride(from: 0, to: ours.count, by: 128 << 10) {
            try fixture.write(handle: handle, Array(ours[start..<(start + (128 << 10))]), at: Int64(overwritten.lowerBound + start))
        }
        try await fixture.fs.flush(handle: handle)
        let asked = fixture.store.readRanges("disk.img")
        let written = Int64(overwritten.lowerBound)..<Int64(overwritten.upperBound)
        #expect(!asked.contains { $0?.overlaps(written) ?? true },
                "the written MiB was fetched: \(asked)")
        #expect(fixture.store.bytesDelivered("disk.img") == Int64(Self.size - overwritten.count))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        var expected = content
        expected.replaceSubrange(overwritten, with: ours)
        #expect(fixture.store.content("disk.img") == expected)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aReadOfWrittenBytesAndTheirNeighboursGivesEachItsOwn() async throws {
        let (fixture, handle, content) = try await openWriter(InMemoryStore())
        let at = 4 * Self.mebibyte + 10
        try fixture.write(handle: handle, Self.mine, at: Int64(at))
        // The ranged read around them fetches the store's bytes, which land around the user's.
        let read = try await fixture.fs.read(handle: handle, offset: Int64(4 * Self.mebibyte), count: 64 << 10)
        var expected = Array(content[(4 * Self.mebibyte)..<(4 * Self.mebibyte + (64 << 10))])
        expected.replaceSubrange(10..<14, with: Self.mine)
        #expect(read == expected)
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        var whole = content
        whole.replaceSubrange(at..<(at + 4), with: Self.mine)
        #expect(fixture.store.content("disk.img") == whole)
    }

    @Test func aFetchUnderWayNeverLandsOnBytesWrittenMeanwhile() async throws {
        let (fixture, handle, content) = try await openWriter(InMemoryStore())
        let gate = Gate()
        fixture.store.holdReads { await gate.wait() }
        let before = fixture.store.readCount("disk.img")
        let read = Task { try await fixture.fs.read(handle: handle, offset: Int64(4 * Self.mebibyte), count: 4096) }
        try await eventually("a read of disk.img") { fixture.store.readCount("disk.img") != before }
        #expect(fixture.store.readCount("disk.img") > before, "the ranged read is on its way")
        // Written while the range that holds them is on the wire.
        try fixture.write(handle: handle, Self.mine, at: Int64(4 * Self.mebibyte + 10))
        await gate.open()
        fixture.store.holdReads(until: nil)
        var expected = Array(content[(4 * Self.mebibyte)..<(4 * Self.mebibyte + 4096)])
        expected.replaceSubrange(10..<14, with: Self.mine)
        #expect(try await read.value == expected, "the fetched bytes landed around the written ones")
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        var whole = content
        whole.replaceSubrange((4 * Self.mebibyte + 10)..<(4 * Self.mebibyte + 14), with: Self.mine)
        #expect(fixture.store.content("disk.img") == whole)
    }

    @Test func aWritePastTheEndOfASparseCopyLeavesZerosBetween() async throws {
        let (fixture, handle, content) = try await openWriter(InMemoryStore())
        try fixture.write(handle: handle, Array("TAIL".utf8), at: Int64(Self.size + 100))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(fixture.store.content("disk.img") == content + [UInt8](repeating: 0, count: 100) + Array("TAIL".utf8))
    }

    @Test func aNewVersionBeforeTheCommitFailsItWithStaleAndKeepsTheWritesAsAConflictCopy() async throws {
        let store = InMemoryStore()
        let (fixture, handle, content) = try await openWriter(store)
        try fixture.write(handle: handle, Self.mine, at: Int64(Self.mineAt))
        let theirs = randomBytes(Self.size)
        store.addFile("disk.img", theirs)
        await #expect(throws: FSError.stale) { try await fixture.fs.flush(handle: handle) }
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(store.content("disk.img") == theirs, "another client's version is never overwritten")
        let conflicts = store.fileNames(in: "/").filter { $0.hasPrefix("disk (conflict ") }
        #expect(conflicts.count == 1)
        let kept = conflicts.first.flatMap { store.content($0) } ?? []
        #expect(kept.count == Self.size)
        #expect(Array(kept[Self.mineAt..<(Self.mineAt + 4)]) == Self.mine, "the user's bytes are kept")
        #expect(Array(kept[0..<(128 << 10)]) == Array(content[0..<(128 << 10)]), "so are the bytes fetched before")
        #expect(kept[7 * Self.mebibyte] == 0, "bytes never fetched are zeros, not another version's")
        #expect(try fixture.pendingUploads().isEmpty)
        #expect(fixture.cachedFiles().isEmpty)
    }

    /// Closes the writer while the store is down (its close fails): the writes wait for their
    /// fill. The store stays down; returns the file's item.
    private func closedWhileDown(_ handle: UInt64, _ proxy: CrashableStore, _ fixture: CoreFixture) async throws -> Item {
        proxy.outage = .unreachable("down for the test")
        do { try await fixture.fs.flush(handle: handle) } catch { _ = error }
        await fixture.fs.release(handle: handle)
        return try await fixture.lookup("disk.img")
    }

    @Test func aCloseWhileTheStoreIsDownHandsTheWritesToTheUploader() async throws {
        let (store, proxy, fixture, handle, content) = try await writerThroughProxy()
        proxy.outage = .unreachable("down for the test")
        let closed = Task {
            do { try await fixture.fs.flush(handle: handle) } catch { _ = error }
            await fixture.fs.release(handle: handle)
        }
        await closed.value
        #expect(store.content("disk.img") == content, "nothing is sent while the holes are missing")
        proxy.outage = nil
        await fixture.settle()
        #expect(store.content("disk.img") == withMine(content), "the rest was fetched once the store was back, then uploaded")
        #expect(try fixture.pendingUploads().isEmpty)
        #expect(fixture.cachedFiles().isEmpty)
    }

    /// A close while the store is down leaves its writes for the uploader, which fetches the
    /// rest once the store is back. A writer that opened the file meanwhile may be halfway
    /// through its own writes then: the copy is no version to send until its close (model
    /// streaming seed 96510: an append half done was uploaded).
    @Test func writesLeftByAFailedCloseWaitForAWriterThatOpenedSince() async throws {
        let (store, proxy, fixture, handle, content) = try await writerThroughProxy()
        let item = try await closedWhileDown(handle, proxy, fixture)
        let second = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        let later = Array("LATER".utf8)
        try fixture.write(handle: second, later, at: 100)
        proxy.outage = nil
        // The uploader's next try (after its wait for the store) fetches the rest.
        try await eventually("the uploader fetched the rest") { store.bytesDelivered("disk.img") >= Int64(content.count - Self.mine.count) }
        await fixture.settle()
        let unsent = store.content("disk.img") == content  // not printed: 8 MiB
        #expect(unsent, "nothing is sent while another writer has the file open")
        try await fixture.fs.flush(handle: second)
        await fixture.fs.release(handle: second)
        await fixture.settle()
        var expected = withMine(content)
        expected.replaceSubrange(100..<105, with: later)
        let sent = store.content("disk.img") == expected
        #expect(sent, "both writers' bytes sent after the last close")
        #expect(try fixture.pendingUploads().isEmpty)
        #expect(fixture.cachedFiles().isEmpty)
    }

    /// A pin while the writes of a closed file wait for their fill (the store is down): the
    /// pin's download joins the copy, fails, and gives its count back. The copy stays for its
    /// upload; it went with the failed download before (model seed 380: the writes were lost).
    @Test func aFailedPinDownloadLeavesWritesAwaitingTheirFill() async throws {
        let (store, proxy, fixture, handle, content) = try await writerThroughProxy()
        let item = try await closedWhileDown(handle, proxy, fixture)
        do { try await fixture.fs.pin(item.inode) } catch { _ = error }
        proxy.outage = nil
        await fixture.fs.waitForUploads()  // the retries too
        let reached = store.content("disk.img") == withMine(content)
        #expect(reached, "the writes reached the store once it was back")
        #expect(try fixture.pendingUploads().isEmpty)
    }

    /// A rename fetches the rest of an open streamed copy first; if that fails, the bytes
    /// still to fetch are read from the new name afterwards (the old one would answer 404, and
    /// the version would count as lost).
    @Test func aRenameWhoseFetchFailedReadsTheRestFromTheNewName() async throws {
        let (store, _, fixture, handle, content) = try await writerThroughProxy()
        store.injectReadFaults([.fail(.accessDenied("not now"))])
        let root = try await fixture.lookup("/")
        try await fixture.fs.rename(from: root.inode, name: "disk.img", to: root.inode, newName: "moved.img", noReplace: false)
        try await fixture.fs.flush(handle: handle)
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(store.content("moved.img") == withMine(content))
        #expect(store.fileNames(in: "/") == ["moved.img"], "no conflict copy, nothing under the old name")
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aKilledDaemonsSparseWritesAreKeptWithTheStoresBytesAround() async throws {
        let (store, proxy, fixture, handle, content) = try await writerThroughProxy()
        let left = try await fixture.crash(proxy)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        #expect(store.content("disk.img") == content, "the store's version is intact")
        let unsaved = unsavedCopies(restarted)
        #expect(unsaved.count == 1)
        #expect(unsaved.first.flatMap { store.content($0) } == withMine(content), "the unsaved copy is the version with the writes")
        #expect(restarted.cachedFiles().isEmpty)
        _ = handle
    }

    @Test func aKilledDaemonsSparseWritesSurviveANewVersionWithZerosAround() async throws {
        let (store, proxy, fixture, handle, content) = try await writerThroughProxy()
        let left = try await fixture.crash(proxy)
        let theirs = randomBytes(Self.size)
        store.addFile("disk.img", theirs)
        let restarted = try await fixture.restart(from: left, through: CrashableStore(wrapping: store))
        await restarted.settle()
        #expect(store.content("disk.img") == theirs)
        let unsaved = unsavedCopies(restarted).first.flatMap { store.content($0) } ?? []
        #expect(unsaved.count == Self.size)
        #expect(Array(unsaved[Self.mineAt..<(Self.mineAt + 4)]) == Self.mine, "the user's bytes are kept")
        #expect(Array(unsaved[0..<(128 << 10)]) == Array(content[0..<(128 << 10)]), "the bytes fetched before the crash are kept")
        #expect(unsaved[Self.mebibyte] == 0 && unsaved[7 * Self.mebibyte] == 0, "bytes never fetched are zeros, not another version's")
        _ = handle
    }
}
