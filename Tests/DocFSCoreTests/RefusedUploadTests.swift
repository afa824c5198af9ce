@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Glibc
import Synchronization
import Testing

/// An upload the store refuses for good (413, 403, a name it will not take) is not sent
/// again and again; it stays in the journal with the reason (issue 10, item 2).
@Suite("A refused upload stops")
struct RefusedUploadTests {
    @Test func aRefusedUploadIsTriedOnceAndKept() async throws {
        let fixture = try CoreFixture(readOnly: false)
        let attempts = Mutex(0)
        fixture.store.holdWrites(until: { attempts.withLock { $0 += 1 } })
        fixture.store.failWrites(with: .accessDenied("PUT /big.txt: HTTP 403 Forbidden"))
        _ = try await fixture.fs.children(of: Item.rootInode)
        let item = try await fixture.createFile("big.txt", Array("kept".utf8))
        await fixture.settle()
        // The fixture's upload backoff is 200 ms at most: a retried upload would be sent again
        // several times in this second.
        try await Task.sleep(for: .seconds(1))
        #expect(attempts.withLock { $0 } == 1, "a refused upload was sent \(attempts.withLock { $0 }) times")
        let row = try fixture.fs.item(item.inode)
        #expect(row.state == .modified, "the change stays in the journal")
        #expect(row.uploadError?.hasPrefix(Uploader.refusedPrefix) == true, "\(row.uploadError ?? "no error")")
        #expect(fixture.cachedFiles().count == 1, "its copy stays")

        // A new change tries again; once the store takes it, it is uploaded.
        fixture.store.failWrites(with: nil)
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("accepted".utf8))
        try await fixture.fs.flush(handle: handle)
        await fixture.fs.release(handle: handle)
        try await eventually("big.txt on the store") { fixture.store.content("big.txt") != nil }
        #expect(fixture.store.content("big.txt") == Array("accepted".utf8))
    }

    /// A close while a refused upload was on its way queues nothing (an upload is under way);
    /// its commit is other content than the one refused, and must still reach the store.
    @Test func aCommitMadeWhileARefusedUploadWasOnItsWayIsSentOnItsOwn() async throws {
        let fixture = try CoreFixture(readOnly: false)
        let attempts = Mutex(0)
        let secondCommitted = Mutex(false)
        let store = fixture.store
        store.holdWrites(until: {
            let attempt = attempts.withLock { $0 += 1; return $0 }
            guard attempt == 1 else {
                store.failWrites(with: nil)  // the second content is one the store takes
                return
            }
            // Bounded: should the test fail first, the held write ends instead of hanging the run.
            let deadline = ContinuousClock.now + .seconds(30)
            while !secondCommitted.withLock({ $0 }), ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(5)) }
            store.failWrites(with: .refused(status: 413, message: "PUT /a.txt: HTTP 413 Payload Too Large"))
        })
        _ = try await fixture.fs.children(of: Item.rootInode)
        let item = try await fixture.createFile("a.txt", Array("far too large".utf8))
        try await eventually("an upload attempt") { attempts.withLock { $0 } > 0 }
        let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("small".utf8))
        try await fixture.fs.flush(handle: handle)
        await fixture.fs.release(handle: handle)
        secondCommitted.withLock { $0 = true }
        try await eventually("a.txt on the store") { fixture.store.content("a.txt") != nil }
        #expect(fixture.store.content("a.txt") == Array("small".utf8), "after \(attempts.withLock { $0 }) PUTs")
        await fixture.settle()
        #expect(try fixture.fs.item(item.inode).uploadError == nil)
    }

    /// A PUT that finds no folder (404) again and again, each time after the folder was made
    /// again, is not retried forever: after a few rounds it counts as refused and is kept.
    @Test func aPutThatFindsNoFolderAfterItWasMadeAgainStops() async throws {
        let store = InMemoryStore()
        store.addDirectory("docs")
        let fixture = try CoreFixture.writable(store: store)
        let attempts = Mutex(0)
        fixture.store.holdWrites(until: { attempts.withLock { $0 += 1 } })
        fixture.store.failWrites(with: .notFound(try StorePath("docs")))
        let docs = try await fixture.lookup("docs")
        let item = try await fixture.createFile("a.txt", Array("kept".utf8), in: docs.inode)
        func refused() throws -> Bool {
            try fixture.fs.item(item.inode).uploadError?.hasPrefix(Uploader.refusedPrefix) == true
        }
        // The fixture's upload backoff is 200 ms at most: rounds come quickly, unless the whole
        // suite keeps both threads busy (it once took 38 s).
        try await eventually("the upload refused", timeout: .seconds(90)) { try refused() }
        let row = try fixture.fs.item(item.inode)
        #expect(row.uploadError?.hasPrefix(Uploader.refusedPrefix) == true,
                "after \(attempts.withLock { $0 }) PUTs: \(row.uploadError ?? "no error")")
        #expect(row.state == .modified, "the change stays in the journal")
        #expect(fixture.cachedFiles().count == 1, "its copy stays")
        let tries = attempts.withLock { $0 }
        try await Task.sleep(for: .seconds(1))
        #expect(attempts.withLock { $0 } == tries, "not sent again once refused")
        #expect(tries <= 2 * Uploader.maximumFolderRemakes + 2, "\(tries) PUTs")
    }

    @Test func aTransientFailureIsStillRetried() async throws {
        let fixture = try CoreFixture(readOnly: false)
        let attempts = Mutex(0)
        fixture.store.holdWrites(until: { attempts.withLock { $0 += 1 } })
        fixture.store.failWrites(with: .serverError(status: 503, message: "busy"))
        _ = try await fixture.fs.children(of: Item.rootInode)
        _ = try await fixture.createFile("later.txt", Array("kept".utf8))
        try await eventually("three upload attempts", timeout: .seconds(30)) { attempts.withLock { $0 } >= 3 }
        #expect(attempts.withLock { $0 } >= 3, "a transient failure is retried (\(attempts.withLock { $0 }) tries in 10 s)")
        fixture.store.failWrites(with: nil)
        try await eventually("later.txt on the store") { fixture.store.content("later.txt") != nil }
        #expect(fixture.store.content("later.txt") == Array("kept".utf8))
    }
}
