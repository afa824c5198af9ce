@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

@Suite("Content is provided on open and evicted on the last release")
struct ProvidingTests {
    @Test func browsingDownloadsNothing() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("docs/report.pdf", randomBytes(1000))
        fixture.store.addFile("notes.txt", Array("hello".utf8))
        let docs = try await fixture.lookup("docs")
        let children = try await fixture.fs.children(of: docs.inode)
        #expect(children.map(\.name) == ["report.pdf"])
        #expect(children[0].size == 1000)
        #expect(try await fixture.lookup("notes.txt").size == 5)
        #expect(fixture.store.totalReads == 0)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func openFetchesOnceAndReleaseEvicts() async throws {
        let fixture = try CoreFixture()
        let content = randomBytes(300_000)
        fixture.store.addFile("big.bin", content)
        let item = try await fixture.lookup("big.bin")

        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(fixture.store.readCount("big.bin") == 1)
        #expect(try fixture.fs.item(item.inode).state == .local)
        #expect(fixture.cachedFiles() == [item.id])
        #expect(fixture.fs.localBlocks(of: item) > 0)
        #expect(try fixture.readAll(handle: handle, size: try fixture.fs.item(item.inode).size) == content)

        await fixture.fs.release(handle: handle)
        #expect(fixture.cachedFiles().isEmpty)
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
        #expect(fixture.fs.localBlocks(of: item) == 0)
    }

    @Test func concurrentOpensShareOneFetchAndOneCopy() async throws {
        let fixture = try CoreFixture()
        let content = randomBytes(100_000)
        fixture.store.addFile("shared.bin", content)
        let item = try await fixture.lookup("shared.bin")
        let gate = Gate()
        fixture.store.holdReads(until: { await gate.wait() })

        async let first = fixture.fs.open(item.inode, mode: .read)
        async let second = fixture.fs.open(item.inode, mode: .read)
        try await Task.sleep(for: .milliseconds(100))
        await gate.open()
        let (a, b) = try await (first, second)

        #expect(fixture.store.readCount("shared.bin") == 1)
        #expect(a != b)
        #expect(fixture.cachedFiles() == [item.id], "one local copy")
        #expect(try fixture.readAll(handle: a, size: 100_000) == content)
        await fixture.fs.release(handle: a)
        #expect(fixture.cachedFiles() == [item.id], "still open through the second handle")
        #expect(try fixture.readAll(handle: b, size: 100_000) == content)
        await fixture.fs.release(handle: b)
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aFailedFetchFailsOpenAndLeavesNothing() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("gone.txt", Array("x".utf8))
        let item = try await fixture.lookup("gone.txt")
        fixture.store.injectReadFaults([.fail(.accessDenied("no"))])
        await #expect(throws: FSError.accessDenied) {
            _ = try await fixture.fs.open(item.inode, mode: .read)
        }
        #expect(fixture.cachedFiles().isEmpty)
        #expect(try fixture.fs.item(item.inode).state == .placeholder)
        // The next open tries again.
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(try fixture.readAll(handle: handle, size: try fixture.fs.item(item.inode).size) == Array("x".utf8))
        await fixture.fs.release(handle: handle)
    }

    @Test func transientFailuresAreRetried() async throws {
        let fixture = try CoreFixture()
        let content = randomBytes(20_000)
        fixture.store.addFile("flaky.bin", content)
        let item = try await fixture.lookup("flaky.bin")
        fixture.store.injectReadFaults([.fail(.serverError(status: 503, message: "busy")), .fail(.timedOut("slow"))])
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(fixture.store.readCount("flaky.bin") == 3)
        #expect(try fixture.readAll(handle: handle, size: try fixture.fs.item(item.inode).size) == content)
        await fixture.fs.release(handle: handle)
    }

    @Test func anUnreachableStoreFailsOpenWithinBoundedTime() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("a.txt", Array("a".utf8))
        let item = try await fixture.lookup("a.txt")
        fixture.store.injectReadFaults(Array(repeating: .fail(.unreachable("refused")), count: 10))
        let started = ContinuousClock.now
        await #expect(throws: FSError.storeUnreachable("refused")) {
            _ = try await fixture.fs.open(item.inode, mode: .read)
        }
        // Bounded by the retry policy, not by a deadline: a fixed number of attempts.
        #expect(fixture.store.readCount("a.txt") == CoreFixture.quickRetry.attempts)
        #expect(ContinuousClock.now - started < .seconds(60), "no hang")
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aTruncatedDownloadIsNeverServed() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("cut.bin", randomBytes(50_000))
        let item = try await fixture.lookup("cut.bin")
        fixture.store.injectReadFaults([.truncate(after: 10_000)])
        await #expect(throws: FSError.self) {
            _ = try await fixture.fs.open(item.inode, mode: .read)
        }
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func aChangedFileIsFetchedNewAndTheCatalogFollows() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("doc.txt", Array("old".utf8))
        let item = try await fixture.lookup("doc.txt")
        fixture.store.addFile("doc.txt", Array("new content".utf8))
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(try fixture.readAll(handle: handle, size: try fixture.fs.item(item.inode).size) == Array("new content".utf8))
        let updated = try fixture.fs.item(item.inode)
        #expect(updated.size == 11)
        #expect(updated.etag == ETag("\"v2\""))
        await fixture.fs.release(handle: handle)
    }

    @Test func emptyFilesOpenAndReadAsEmpty() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("empty", [])
        let item = try await fixture.lookup("empty")
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(try fixture.readAll(handle: handle, size: try fixture.fs.item(item.inode).size) == [])
        await fixture.fs.release(handle: handle)
    }

    @Test func shutdownEvictsEverything() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("a", randomBytes(10))
        fixture.store.addFile("b", randomBytes(10))
        _ = try await fixture.fs.open(try await fixture.lookup("a").inode, mode: .read)
        _ = try await fixture.fs.open(try await fixture.lookup("b").inode, mode: .read)
        #expect(fixture.cachedFiles().count == 2)
        await fixture.fs.shutdown()
        #expect(fixture.cachedFiles().isEmpty)
    }

    @Test func writingIsRefusedOnAReadOnlyMount() async throws {
        let fixture = try CoreFixture()
        fixture.store.addFile("a", randomBytes(10))
        let item = try await fixture.lookup("a")
        await #expect(throws: FSError.readOnly) {
            _ = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
        }
        #expect(fixture.store.totalReads == 0)
    }
}

/// Lets a test hold a fake download until it says so.
actor Gate {
    private var isOpen = false
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func wait() async {
        if isOpen { return }
        await withCheckedContinuation { waiters.append($0) }
    }

    func open() {
        isOpen = true
        for waiter in waiters { waiter.resume() }
        waiters.removeAll()
    }
}
