// What an unmount does to callers still waiting on uploads: they get an answer, within the grace.

@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Synchronization
import Testing

@Suite("Unmount and waiting callers")
struct UnmountWaitTests {
    /// An fsync whose upload was still queued (every upload slot held by a store that does not
    /// answer) when the unmount stopped the uploader waited forever: nothing woke it.
    @Test func anFsyncQueuedAtUnmountIsAnswered() async throws {
        let fixture = try CoreFixture.writable()
        let (never, _) = AsyncStream<Void>.makeStream()
        fixture.store.holdWrites { for await _ in never { return } }
        // Uploads take every slot and wait on the store.
        for index in 0..<Uploader.maximumConcurrentUploads { try await fixture.createFile("busy-\(index).txt", Array("busy".utf8)) }
        let (item, handle) = try await fixture.fs.create(in: Item.rootInode, name: "synced.txt", mode: 0o644, owner: 0, group: 0,
                                                          exclusive: true, truncate: false)
        try fixture.write(handle: handle, Array("kept for the next mount".utf8))
        let fs = fixture.fs
        let fsync = Task { () -> Result<Void, FSError> in
            do throws(FSError) { try await fs.fsync(handle: handle); return .success(()) } catch { return .failure(error) }
        }
        let deadline = ContinuousClock.now + testPatience
        while await !fixture.fs.uploader.isQueued(item.inode) {
            guard ContinuousClock.now < deadline else { throw TimedOut(what: "the fsync's upload to wait in the queue") }
            try await Task.sleep(for: .milliseconds(10))
        }
        await fixture.fs.shutdown(uploadGrace: .milliseconds(100))
        let answer = try await withDeadline(testPatience, "the fsync to be answered after the unmount") { await fsync.value }
        #expect(throws: Uploader.stoppedBeforeUpload) { try answer.get() }
    }

    /// The holes of several changed sparse copies are filled side by side at unmount, within
    /// one grace in all. One after another, each waited a whole grace of its own (N + 1 graces
    /// where "at most the grace" was meant); here the store answers no fill until all four are
    /// asked for, so only fills made side by side get their copies committed and uploaded.
    @Test func unfilledCopiesAtUnmountAreFilledSideBySide() async throws {
        let store = InMemoryStore()
        for index in 0..<4 { store.addFile("big-\(index).bin", [UInt8](repeating: 7, count: 4 << 20)) }
        let fixture = try CoreFixture.writable(store: store)
        for index in 0..<4 {
            let item = try await fixture.lookup("big-\(index).bin")
            let handle = try await fixture.fs.open(item.inode, mode: .init(writable: true, truncate: false))
            try fixture.write(handle: handle, Array("changed".utf8), at: 1 << 20)
        }
        let asked = Mutex(0)
        store.holdReads {
            asked.withLock { $0 += 1 }
            while asked.withLock({ $0 }) < 4 && !Task.isCancelled { try? await Task.sleep(for: .milliseconds(5)) }
        }
        await fixture.fs.shutdown(uploadGrace: .seconds(10))
        for index in 0..<4 {
            let content = try #require(store.content("big-\(index).bin"))
            #expect(Array(content[(1 << 20)..<((1 << 20) + 7)]) == Array("changed".utf8), "big-\(index).bin")
            #expect(content.count == 4 << 20)
        }
    }
}
