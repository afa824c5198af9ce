@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// An S3 listing shows when each version was stored (`LastModified`); the time a client gave
/// the file (`x-amz-meta-mtime`, what `touch` sets) comes only with the object's HEAD or GET.
/// The in-memory store plays S3 here (`listsStoredTimes`).
@Suite("A file's own time replaces the time its version was stored")
struct OwnTimeTests {
    private static let ownTime = Timestamp(seconds: 1_000)

    private func s3LikeFixture() throws -> CoreFixture {
        let store = InMemoryStore(listsStoredTimes: true)
        store.addFile("touched.bin", randomBytes(64 << 10), modified: Self.ownTime.seconds)
        return try CoreFixture(store: store, ttl: 60, readOnly: false)
    }

    @Test func aReadBringsTheFilesOwnTimeAndAListingKeepsIt() async throws {
        let fixture = try s3LikeFixture()
        let item = try await fixture.lookup("touched.bin")
        #expect(item.modified == Timestamp(seconds: InMemoryStore.storedTime(ofVersion: 1)), "all a listing knows")
        let handle = try await fixture.fs.open(item.inode, mode: .read)
        #expect(try fixture.fs.item(item.inode).modified == Self.ownTime)
        await fixture.fs.release(handle: handle)
        try await fixture.fs.refresh(directory: try #require(item.parent))
        #expect(try fixture.fs.item(item.inode).modified == Self.ownTime, "the listing's time of storing does not come back")
    }

    @Test func aTouchHereWhileTheReadIsOnItsWayStays() async throws {
        let fixture = try s3LikeFixture()
        let item = try await fixture.lookup("touched.bin")
        let gate = Gate()
        fixture.store.holdReads(until: { await gate.wait() })
        fixture.store.failAttributes(with: .unreachable("test"))  // the store keeps the old time
        let opened = Task { try await fixture.fs.open(item.inode, mode: .read) }
        try await eventually("a read of touched.bin") { fixture.store.readCount("touched.bin") > 0 }
        _ = try await fixture.fs.setAttributes(of: item.inode, .init(modified: Timestamp(seconds: 5_000)), handle: nil)
        await gate.open()
        let handle = try await opened.value
        #expect(try fixture.fs.item(item.inode).modified == Timestamp(seconds: 5_000))
        await fixture.fs.release(handle: handle)
    }
}
