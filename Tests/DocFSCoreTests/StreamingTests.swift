@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

@Suite("A large file is streamed: open fetches its head, a read waits only for its bytes")
struct StreamingTests {
    static let mebibyte = 1 << 20

    /// A store holding `name` with `size` random bytes, opened for reading.
    private func openLarge(_ name: String = "movie.bin", size: Int = 8 * mebibyte,
                           streaming: StreamingPolicy = .default) async throws -> (CoreFixture, Item, UInt64, [UInt8]) {
        let fixture = try CoreFixture.writable(streaming: streaming)
        let content = randomBytes(size)
        fixture.store.addFile(name, content)
        let item = try await fixture.lookup(name)
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        return (fixture, item, handle, content)
    }

    /// A chmod here gives the content a new version (S3's copy onto itself of a multipart
    /// object, a touch on a local directory), and a ranged read asks for the old one after the
    /// store has made it, before the answer is back: the read waits for that answer and asks
    /// again for the new version, instead of failing as if another client had changed the file.
    @Test func aRangedReadThatMeetsThisMountsOwnChmodFollowsItsVersion() async throws {
        let store = InMemoryStore(tellsVersionAfterAttributes: true, attributesMakeVersions: true)
        let fixture = try CoreFixture.writable(store: store)
        let content = randomBytes(8 * Self.mebibyte)
        store.addFile("movie.bin", content)
        let item = try await fixture.lookup("movie.bin")
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        let gate = Gate()
        store.holdNextAttributeAnswer(until: { await gate.wait() })
        let chmod = Task { try await fixture.fs.setAttributes(of: item.inode, .init(mode: 0o600), handle: nil) }
        try await eventually("the chmod made on the store") { store.attributes(of: "movie.bin")?.mode == 0o600 }

        let offset = 6 * Self.mebibyte
        let read = Task { try await fixture.fs.read(handle: handle, offset: Int64(offset), count: 4096) }
        try await eventually("a read of the version before the chmod") { store.readsOfAnotherVersion > 0 }
        // Had the read taken the new version for another client's, it would have failed by now.
        _ = try? await withDeadline(.seconds(1), "the read") { _ = await read.result }
        await gate.open()
        _ = try await chmod.value
        #expect(try await read.value == Array(content[offset..<offset + 4096]))
        #expect(try await fixture.fs.read(handle: handle, offset: 0, count: content.count) == content)
        await fixture.fs.release(handle: handle)
    }

    @Test func openFetchesOnlyTheHead() async throws {
        let (fixture, item, handle, _) = try await openLarge()
        #expect(fixture.store.readRanges("movie.bin") == [0..<(128 << 10)])
        #expect(try fixture.fs.item(item.inode).size == Int64(8 * Self.mebibyte), "stat shows the whole size")
        #expect(fixture.fs.localBlocks(of: item) * 512 < Int64(Self.mebibyte), "the copy is sparse on disk")
        await fixture.fs.release(handle: handle)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aRandomReadFetchesItsBytesAndLittleMore() async throws {
        let (fixture, _, handle, content) = try await openLarge()
        let offset = 5 * Self.mebibyte + 1000
        let bytes = try await fixture.fs.read(handle: handle, offset: Int64(offset), count: 4096)
        #expect(bytes == Array(content[offset..<(offset + 4096)]))
        #expect(fixture.store.bytesDelivered("movie.bin") <= 2 * (128 << 10), "the head and one rounded range")
        await fixture.fs.release(handle: handle)
    }

    @Test func aSequentialReaderGetsEveryByteOnceWithGrowingRequests() async throws {
        let size = 24 * Self.mebibyte
        let (fixture, _, handle, content) = try await openLarge(size: size)
        var read: [UInt8] = []
        read.reserveCapacity(size)
        while read.count < size {
            read += try await fixture.fs.read(handle: handle, offset: Int64(read.count), count: 128 << 10)
        }
        #expect(read == content)
        #expect(fixture.store.bytesDelivered("movie.bin") == Int64(size), "no byte fetched twice")
        let requests = fixture.store.readRanges("movie.bin").count
        #expect(requests < 16, "read-ahead asks for large ranges, not one per read (\(requests) requests)")
        await fixture.fs.release(handle: handle)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aReadAtTheEndStopsAtTheEnd() async throws {
        let size = 3 * Self.mebibyte + 17
        let (fixture, _, handle, content) = try await openLarge(size: size)
        let bytes = try await fixture.fs.read(handle: handle, offset: Int64(size - 10), count: 4096)
        #expect(bytes == Array(content[(size - 10)...]))
        #expect(try await fixture.fs.read(handle: handle, offset: Int64(size), count: 4096).isEmpty)
        await fixture.fs.release(handle: handle)
    }

    @Test func aNewVersionOnTheStoreFailsTheReadWithStaleNeverMixingVersions() async throws {
        let (fixture, _, handle, _) = try await openLarge()
        fixture.store.addFile("movie.bin", randomBytes(8 * Self.mebibyte))
        await #expect(throws: FSError.stale) {
            _ = try await fixture.fs.read(handle: handle, offset: Int64(4 * Self.mebibyte), count: 4096)
        }
        await fixture.fs.release(handle: handle)
        #expect(fixture.cachedFiles().isEmpty)
    }

    /// `close()` returns before FUSE sends the release, so a program that closes the handle that
    /// met ESTALE and opens the file again can open before the old copy is let go. The new open
    /// waits for that release and reads the store's new version, instead of joining the copy of
    /// the old one and failing as its reads did.
    @Test func anOpenRightAfterTheCloseOfAStaleHandleReadsTheNewVersion() async throws {
        let (fixture, item, stale, _) = try await openLarge()
        let replacement = randomBytes(8 * Self.mebibyte)
        fixture.store.addFile("movie.bin", replacement)
        await #expect(throws: FSError.stale) {
            _ = try await fixture.fs.read(handle: stale, offset: Int64(4 * Self.mebibyte), count: 4096)
        }
        let reopened = Task { () throws -> [UInt8] in
            let handle = try await fixture.fs.open(item.inode, mode: .read)
            defer { Task { await fixture.fs.release(handle: handle) } }
            return try await fixture.fs.read(handle: handle, offset: 0, count: replacement.count)
        }
        try await Task.sleep(for: .milliseconds(100))  // the open waits, as FUSE's release is on its way
        await fixture.fs.release(handle: stale)
        #expect(try await reopened.value == replacement)
    }

    /// A program that keeps the stale handle open does not make a new open wait for ever: the
    /// new open fails with ESTALE after a moment, never mixing the old version's bytes with
    /// the new one's.
    @Test func anOpenWhileAStaleHandleStaysOpenFailsWithStale() async throws {
        let (fixture, item, stale, _) = try await openLarge()
        fixture.store.addFile("movie.bin", randomBytes(8 * Self.mebibyte))
        await #expect(throws: FSError.stale) {
            _ = try await fixture.fs.read(handle: stale, offset: Int64(4 * Self.mebibyte), count: 4096)
        }
        await #expect(throws: FSError.stale) { _ = try await fixture.fs.open(item.inode, mode: .read) }
        await fixture.fs.release(handle: stale)
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        await fixture.fs.release(handle: handle)
    }

    @Test func aWriterWritesAtOnceAndItsCommitFetchesWhatItDidNotWrite() async throws {
        let (fixture, item, reader, content) = try await openLarge()
        let head = fixture.store.bytesDelivered("movie.bin")
        let writer = try await fixture.fs.open(item.inode, mode: DocFileSystem.OpenMode(writable: true, truncate: false))
        try fixture.write(handle: writer, Array("EDIT".utf8), at: 100)
        #expect(fixture.store.bytesDelivered("movie.bin") == head, "the open and the write fetch nothing")
        try await fixture.fs.flush(handle: writer)
        #expect(fixture.store.bytesDelivered("movie.bin") == Int64(content.count), "the commit fetches the rest, once")
        await fixture.fs.release(handle: writer)
        await fixture.fs.release(handle: reader)
        await fixture.fs.waitForUploads()
        var expected = content
        expected.replaceSubrange(100..<104, with: Array("EDIT".utf8))
        #expect(fixture.store.content("movie.bin") == expected)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func truncatingStopsTheFetchAndLeavesAnEmptyFile() async throws {
        let (fixture, item, reader, _) = try await openLarge()
        try fixture.fs.startRead(handle: reader, offset: Int64(Self.mebibyte), count: 128 << 10)
        let writer = try await fixture.fs.open(item.inode, mode: DocFileSystem.OpenMode(writable: true, truncate: true))
        try fixture.write(handle: writer, Array("new".utf8))
        try await fixture.fs.flush(handle: writer)
        await fixture.fs.release(handle: writer)
        await fixture.fs.release(handle: reader)
        await fixture.fs.waitForUploads()
        #expect(fixture.store.content("movie.bin") == Array("new".utf8))
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func concurrentReadersShareTheFetchedBytes() async throws {
        let (fixture, item, first, content) = try await openLarge()
        let second = try await fixture.fs.open(item.inode, mode: .read)
        let offset = 6 * Self.mebibyte
        async let a = fixture.fs.read(handle: first, offset: Int64(offset), count: 65536)
        async let b = fixture.fs.read(handle: second, offset: Int64(offset), count: 65536)
        let (bytesA, bytesB) = try await (a, b)
        #expect(bytesA == Array(content[offset..<(offset + 65536)]))
        #expect(bytesB == bytesA)
        #expect(fixture.store.bytesDelivered("movie.bin") <= 2 * (128 << 10))
        await fixture.fs.release(handle: first)
        await fixture.fs.release(handle: second)
    }

    @Test func twoReadersInDifferentPlacesEachKeepTheirReadAhead() async throws {
        let (fixture, item, first, content) = try await openLarge(size: 32 * Self.mebibyte)
        let second = try await fixture.fs.open(item.inode, mode: .read)
        let chunk = 128 << 10
        let secondStart = 16 * Self.mebibyte
        for step in 0..<64 {
            let a = step * chunk
            let b = secondStart + step * chunk
            #expect(try await fixture.fs.read(handle: first, offset: Int64(a), count: chunk) == Array(content[a..<(a + chunk)]))
            #expect(try await fixture.fs.read(handle: second, offset: Int64(b), count: chunk) == Array(content[b..<(b + chunk)]))
        }
        let requests = fixture.store.readRanges("movie.bin").count
        // 128 reads; the window grows to half what each has read (a sniffer wastes little).
        #expect(requests < 32, "interleaved sequential readers read ahead each (\(requests) requests)")
        await fixture.fs.release(handle: first)
        await fixture.fs.release(handle: second)
    }

    @Test func aReleaseDuringReadAheadEvictsAndNothingLandsAfterwards() async throws {
        let (fixture, _, handle, _) = try await openLarge(size: 32 * Self.mebibyte)
        let gate = Gate()
        fixture.store.holdReads(until: { await gate.wait() })
        // Reads past the head start a read-ahead that the gate holds on the wire.
        try fixture.fs.startRead(handle: handle, offset: 0, count: 256 << 10)
        await fixture.fs.release(handle: handle)
        #expect(fixture.cachedFiles().isEmpty)
        await gate.open()
        try await Task.sleep(for: .milliseconds(200))
        #expect(fixture.cachedFiles().isEmpty, "no cancelled request recreated the copy")
    }

    @Test func aFailedRangeFailsTheReadAndALaterReadTriesAgain() async throws {
        let (fixture, _, handle, content) = try await openLarge()
        fixture.store.injectReadFaults([.fail(.notFound(try StorePath("movie.bin")))])
        let offset = 3 * Self.mebibyte
        await #expect(throws: FSError.notFound) {
            _ = try await fixture.fs.read(handle: handle, offset: Int64(offset), count: 4096)
        }
        let bytes = try await fixture.fs.read(handle: handle, offset: Int64(offset), count: 4096)
        #expect(bytes == Array(content[offset..<(offset + 4096)]))
        await fixture.fs.release(handle: handle)
    }

    /// Waits until the store has stopped delivering (the read-ahead on the wire has landed).
    private func settled(_ fixture: CoreFixture, _ name: String) async throws -> Int64 {
        var last: Int64 = -1
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let now = fixture.store.bytesDelivered(name)
            if now == last { return now }
            last = now
            try await Task.sleep(for: .milliseconds(150))
        }
        Issue.record("the store still delivered \(name) after 60 s")
        return last
    }

    @Test func aReaderThatStopsLeavesAtMostTwiceWhatItReadFetchedForNothing() async throws {
        // `file` reads the first 7 MiB of a file, sequentially, then jumps to its end.
        let read = 7 * Self.mebibyte
        let (fixture, _, handle, content) = try await openLarge(size: 64 * Self.mebibyte)
        for offset in stride(from: 0, to: read, by: 128 << 10) {
            #expect(try await fixture.fs.read(handle: handle, offset: Int64(offset), count: 128 << 10)
                == Array(content[offset..<(offset + (128 << 10))]))
        }
        let delivered = try await settled(fixture, "movie.bin")
        #expect(delivered >= Int64(read))
        #expect(delivered < 64 * Self.mebibyte)
        // Read-ahead reaches at most three times as far as the reader got: twice what it read
        // past it once it streams (the window at a distance grows by round trips), never the
        // whole file.
        #expect(delivered - Int64(read) <= 2 * Int64(read) + (256 << 10),
                "fetched \(delivered - Int64(read)) bytes past a reader that stopped after \(read)")
        await fixture.fs.release(handle: handle)
    }

    @Test func aReaderThatJumpsAwayDropsItsReadAheadNotYetOnTheWire() async throws {
        let policy = StreamingPolicy(maximumRequest: 1 << 20, requestsInFlight: 2)
        let (fixture, _, handle, _) = try await openLarge(size: 64 * Self.mebibyte, streaming: policy)
        let gate = Gate()
        fixture.store.holdReads(until: { await gate.wait() })
        // A sequential reader's first 8 MiB, asked for while the store holds every request:
        // two on the wire, the rest (its own bytes and its read-ahead) queued.
        let read = 8 * Self.mebibyte
        for offset in stride(from: 0, to: read, by: 128 << 10) {
            try fixture.fs.startRead(handle: handle, offset: Int64(offset), count: 128 << 10)
        }
        // It jumps to the end (as `file` does), then reads there.
        let end = 64 * Self.mebibyte - (128 << 10)
        try fixture.fs.startRead(handle: handle, offset: Int64(end), count: 128 << 10)
        await gate.open()
        try await fixture.fs.waitForContent(handle: handle, offset: Int64(end), count: 128 << 10)
        try await fixture.fs.waitForContent(handle: handle, offset: 0, count: read)
        let delivered = try await settled(fixture, "movie.bin")
        let past = fixture.store.readRanges("movie.bin").compactMap { $0 }
            .filter { $0.upperBound > Int64(read) + Int64(Self.mebibyte) && $0.lowerBound < Int64(end) }
        #expect(past.isEmpty, "read-ahead queued before the jump was still fetched: \(past)")
        #expect(delivered <= Int64(read) + 3 * Int64(Self.mebibyte), "\(delivered) bytes for 8 MiB and 128 KiB read")
        await fixture.fs.release(handle: handle)
    }

    @Test func smallFilesAreStillFetchedWholeAtOpen() async throws {
        let (fixture, _, handle, content) = try await openLarge("small.txt", size: 500_000)
        #expect(fixture.store.readRanges("small.txt") == [nil])
        #expect(try fixture.readAll(handle: handle, size: Int64(content.count)) == content)
        await fixture.fs.release(handle: handle)
    }
}

@Suite("An open streamed file stays readable whatever happens to its name")
struct StreamingNamespaceTests {
    static let mebibyte = 1 << 20

    @Test func anUnlinkedOpenFileReadsToItsEnd() async throws {
        let fixture = try CoreFixture.writable()
        let content = randomBytes(8 * Self.mebibyte)
        fixture.store.addFile("film.bin", content)
        let item = try await fixture.lookup("film.bin")
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        try await fixture.fs.remove(from: Item.rootInode, name: "film.bin", directory: false)
        #expect(fixture.store.content("film.bin") == nil)
        let offset = 6 * Self.mebibyte
        #expect(try await fixture.fs.read(handle: handle, offset: Int64(offset), count: 4096) == Array(content[offset..<(offset + 4096)]))
        await fixture.fs.release(handle: handle)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aRenamedOpenFileReadsToItsEnd() async throws {
        let fixture = try CoreFixture.writable()
        let content = randomBytes(8 * Self.mebibyte)
        fixture.store.addFile("dir/film.bin", content)
        let item = try await fixture.lookup("dir/film.bin")
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        let directory = try await fixture.lookup("dir")
        try await fixture.fs.rename(from: Item.rootInode, name: "dir", to: Item.rootInode, newName: "moved", noReplace: false)
        #expect(fixture.store.content("moved/film.bin") == content)
        let offset = 7 * Self.mebibyte
        #expect(try await fixture.fs.read(handle: handle, offset: Int64(offset), count: 4096) == Array(content[offset..<(offset + 4096)]))
        await fixture.fs.release(handle: handle)
        #expect(directory.isDirectory)
        #expect(fixture.cachedFiles().isEmpty)
    }
}
