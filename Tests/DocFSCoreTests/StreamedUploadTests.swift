@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// A new file copied into the mount in order is sent while it is written, so the store has it
/// about when the close returns; whatever else the writer does, the store ends with exactly the
/// committed content, and nothing is kept as a conflict that was not one.
@Suite("A new file written in order is uploaded while it is written")
struct StreamedUploadTests {
    static let chunk = 64 << 10
    /// Streams from 128 KiB on (the default waits for 4 MiB).
    static let policy = StreamedUpload.Policy(minimumLength: 128 << 10, idleLimit: .seconds(5), minimumRate: 1)

    static func fixture() throws -> CoreFixture {
        try CoreFixture.writable(store: InMemoryStore(streamsUploads: true), streamedUploads: policy)
    }

    /// Creates `name` and writes `chunks` chunks of `content` in order through the new handle.
    static func create(_ fixture: CoreFixture, _ name: String, _ content: [UInt8], chunks: Int) async throws -> (Item, UInt64) {
        let (item, handle) = try await fixture.fs.create(in: Item.rootInode, name: name, mode: 0o644, owner: 0, group: 0,
                                                         exclusive: true, truncate: false)
        try writeChunks(fixture, handle, content, 0..<chunks)
        return (item, handle)
    }

    /// Writes chunks `indices` of `content` at their places, in order, as `cp` does.
    static func writeChunks(_ fixture: CoreFixture, _ handle: UInt64, _ content: [UInt8], _ indices: Range<Int>) throws {
        for index in indices {
            try fixture.write(handle: handle, Array(content[(index * chunk)..<((index + 1) * chunk)]), at: Int64(index * chunk))
        }
    }

    /// The last close of `handle`, as the kernel sends it (flush, release), and every upload tried.
    static func closeAndSettle(_ fixture: CoreFixture, _ handle: UInt64) async throws {
        try await fixture.fs.flush(handle: handle)
        await fixture.fs.release(handle: handle)
        await fixture.settle()
    }

    /// Waits (a few seconds at most) until the store is taking `name` as it is written.
    static func streamBegins(_ fixture: CoreFixture, _ name: String) async throws {
        try await eventually("the store to take \(name) as it is written") { fixture.store.streamedWritesBegun(name) == 1 }
    }

    @Test func theStoreGetsTheBytesBeforeTheCloseAndNothingIsUploadedAgain() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(8 * Self.chunk)
        let (item, handle) = try await Self.create(fixture, "copied.bin", content, chunks: 3)
        try await Self.streamBegins(fixture, "copied.bin")
        #expect(fixture.store.streamedWritesBegun("copied.bin") == 1)
        try Self.writeChunks(fixture, handle, content, 3..<8)
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.content("copied.bin") == content)
        #expect(fixture.store.writeCount("copied.bin") == 1)
        #expect(fixture.store.streamedWritesBegun("copied.bin") == 1)
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
        #expect(fixture.cachedFiles().isEmpty)
    }

    /// `dd of=FILE` opens FILE, dup2s it to its output and closes the first descriptor: a
    /// flush that commits the empty file before the first write.
    @Test func aNewFileCommittedEmptyBeforeItsFirstWriteStillStreams() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(4 * Self.chunk)
        let (_, handle) = try await fixture.fs.create(in: Item.rootInode, name: "dd.out", mode: 0o644, owner: 0, group: 0,
                                                      exclusive: false, truncate: true)
        try await fixture.fs.flush(handle: handle)
        try Self.writeChunks(fixture, handle, content, 0..<4)
        try await Self.streamBegins(fixture, "dd.out")
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.streamedWritesBegun("dd.out") == 1)
        #expect(fixture.store.writtenContents.map(\.content) == [content])
    }

    /// A flush comes whenever a dup of the writer's descriptor closes (a forked child that
    /// exits): it commits, but the stream goes on, and no part of the file reaches the store.
    @Test func aFlushWhileTheWriterGoesOnNeitherEndsTheStreamNorPublishesAPart() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(6 * Self.chunk)
        let (_, handle) = try await Self.create(fixture, "build.log", content, chunks: 3)
        try await Self.streamBegins(fixture, "build.log")
        try await fixture.fs.flush(handle: handle)
        try Self.writeChunks(fixture, handle, content, 3..<6)
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.streamedWritesBegun("build.log") == 1)
        #expect(fixture.store.writtenContents.map(\.content) == [content])
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aSmallFileGoesUpAtCloseAsBefore() async throws {
        let fixture = try Self.fixture()
        try await fixture.createFile("small.txt", randomBytes(Self.chunk))
        await fixture.settle()
        #expect(fixture.store.streamedWritesBegun("small.txt") == 0)
        #expect(fixture.store.writeCount("small.txt") == 1)
    }

    /// A zip or a video muxer writes its header last: the stream is cancelled, and the close
    /// uploads the file as before. The store never held a part of it.
    @Test func aWriteBackAtTheStartEndsTheStreamAndTheCloseUploadsTheWholeFile() async throws {
        let fixture = try Self.fixture()
        var content = randomBytes(6 * Self.chunk)
        let (_, handle) = try await Self.create(fixture, "archive.zip", content, chunks: 6)
        try await Self.streamBegins(fixture, "archive.zip")
        let header: [UInt8] = Array("PK\u{3}\u{4}".utf8)
        try fixture.write(handle: handle, header, at: 0)
        content.replaceSubrange(0..<4, with: header)
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.content("archive.zip") == content)
        #expect(fixture.store.fileNames(in: "/") == ["archive.zip"])
        #expect(fixture.store.streamedWritesBegun("archive.zip") == 1)
        #expect(fixture.store.writtenContents.map(\.content) == [content])
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aRenameWhileItStreamsMovesWhatWasSentAndTheRestFollowsUnderTheNewName() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(6 * Self.chunk)
        let (_, handle) = try await Self.create(fixture, "download.part", content, chunks: 3)
        try await Self.streamBegins(fixture, "download.part")
        try await fixture.fs.rename(from: Item.rootInode, name: "download.part", to: Item.rootInode, newName: "download.iso", noReplace: false)
        try Self.writeChunks(fixture, handle, content, 3..<6)
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.fileNames(in: "/") == ["download.iso"])
        #expect(fixture.store.content("download.iso") == content)
        #expect(fixture.store.writtenContents.map(\.path) == ["/download.iso"])
    }

    @Test func anUnlinkWhileItStreamsLeavesNothingOnTheStore() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(4 * Self.chunk)
        let (_, handle) = try await Self.create(fixture, "scratch.tmp", content, chunks: 4)
        try await Self.streamBegins(fixture, "scratch.tmp")
        try await fixture.fs.remove(from: Item.rootInode, name: "scratch.tmp", directory: false)
        try fixture.write(handle: handle, Array(content[0..<Self.chunk]), at: Int64(4 * Self.chunk))
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.fileNames(in: "/").isEmpty)
        #expect(fixture.store.writtenContents.isEmpty)
        #expect(fixture.cachedFiles().isEmpty)
    }

    /// fsync waits for what was sent so far; writes after it go in the next upload, never in
    /// the streamed one (it reads the file as it was at the commit).
    @Test func anFsyncCompletesTheStreamAndLaterWritesFollowInTheNextUpload() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(6 * Self.chunk)
        let (_, handle) = try await Self.create(fixture, "log.bin", content, chunks: 3)
        try await Self.streamBegins(fixture, "log.bin")
        try await fixture.fs.fsync(handle: handle)
        #expect(fixture.store.content("log.bin") == Array(content[0..<(3 * Self.chunk)]))
        #expect(fixture.store.writeCount("log.bin") == 1)
        try Self.writeChunks(fixture, handle, content, 3..<6)
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.content("log.bin") == content)
        #expect(fixture.store.writeCount("log.bin") == 2)
        #expect(fixture.store.writtenContents.map(\.content) == [Array(content[0..<(3 * Self.chunk)]), content])
    }

    @Test func aStreamThatFailsLeavesTheUploadToTheClose() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(4 * Self.chunk)
        fixture.store.failWrites(with: .unreachable("down for a moment"))
        let (_, handle) = try await Self.create(fixture, "report.pdf", content, chunks: 4)
        try await Self.streamBegins(fixture, "report.pdf")
        try await fixture.fs.flush(handle: handle)
        await fixture.fs.release(handle: handle)
        try await Task.sleep(for: .milliseconds(100))
        fixture.store.failWrites(with: nil)
        try await eventually("report.pdf on the store") { fixture.store.content("report.pdf") != nil }
        await fixture.settle()

        #expect(fixture.store.content("report.pdf") == content)
        #expect(fixture.store.fileNames(in: "/") == ["report.pdf"])
    }

    /// Another client creates the name while ours streams: both are kept, as for any new file.
    @Test func aFileSomeoneElseCreatedMeanwhileIsKeptNextToOurs() async throws {
        let fixture = try Self.fixture()
        let content = randomBytes(4 * Self.chunk)
        let (_, handle) = try await Self.create(fixture, "notes.bin", content, chunks: 4)
        try await Self.streamBegins(fixture, "notes.bin")
        fixture.store.addFile("notes.bin", Array("theirs".utf8))
        try await Self.closeAndSettle(fixture, handle)

        #expect(fixture.store.content("notes.bin") == Array("theirs".utf8))
        let names = fixture.store.fileNames(in: "/")
        #expect(names.count == 2)
        let conflict = try #require(names.first { $0 != "notes.bin" })
        #expect(conflict.contains("conflict"))
        #expect(fixture.store.content(conflict) == content)
    }

    /// A store that gives up on a body (a question asked alongside it found the name taken)
    /// cancels the task reading it: that reader is told `.cancelled` at once, though the writer
    /// is idle, and the stream itself goes on for whoever reads it next.
    @Test func aReaderWhoseTaskIsCancelledIsToldSoWhileTheWriterIsIdle() async throws {
        let descriptor = open("/dev/null", O_RDONLY)
        #expect(descriptor >= 0)
        let path = try StorePath("/idle.bin")
        // Neither the idle limit nor the minimum rate may end it, however slow the machine.
        let patient = StreamedUpload.Policy(minimumLength: 0, idleLimit: .seconds(3600), minimumRate: 1)
        let written: Int64 = 1 << 40
        let stream = StreamedUpload(inode: 2, path: path, descriptor: descriptor, written: written, policy: patient) {
            (stream) throws(StoreError) -> RemoteEntry in
            let reader = Task { await stream.next(after: written) }
            try? await Task.sleep(for: .milliseconds(100))
            reader.cancel()
            #expect(await reader.value == .cancelled)
            #expect(await Task { () -> GrowingExtent in
                withUnsafeCurrentTask { $0?.cancel() }
                return await stream.next(after: written)
            }.value == .cancelled, "a reader cancelled before it asks")
            #expect(await stream.next(after: 0) == .written(upTo: written), "the stream goes on")
            throw .notSupported("given up")
        }
        guard case .failed(.notSupported("given up")) = await stream.outcome() else {
            Issue.record("the store's answer is the stream's outcome")
            return
        }
    }
}
