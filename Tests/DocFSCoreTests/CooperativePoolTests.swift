@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// Swift's cooperative pool has one thread per core, and every task of the mount (each FUSE
/// request that waits, every listing, upload and download) runs on it. The core calls SQLite and
/// the file system synchronously, so that work must not run there: a catalog that stalls (a busy
/// disk, a big transaction) would stall the whole mount with it.
@Suite("The core's blocking work stays off the cooperative pool", .serialized)
struct CooperativePoolTests {
    /// What a FUSE request asks of the core, on a mount holding `file.bin` and the folder `docs`.
    enum Operation: String, CaseIterable, Sendable {
        case open, create, mkdir, remove, rename, chmod, pin
        /// The removal of a file whose changes the store has not taken (noted before the request).
        case removeUnsent
    }

    /// How long the catalogs stay held if the test never lets them go: a stuck pool waits that long.
    static let stuckFor: Double = 30

    @Test(arguments: Operation.allCases)
    func anOperationWaitingOnABusyCatalogLeavesThePoolFree(_ operation: Operation) async throws {
        // One mount per thread of the pool, each with an operation that waits for its catalog.
        let width = ProcessInfo.processInfo.activeProcessorCount
        var fixtures: [CoreFixture] = []
        for _ in 0..<width {
            let fixture = try CoreFixture(readOnly: false)
            fixture.store.addFile("file.bin", randomBytes(1000))
            fixture.store.addDirectory("docs")
            _ = try await fixture.lookup("file.bin")
            _ = try await fixture.lookup("docs")
            if operation == .removeUnsent { try await Self.changeUnsent("file.bin", in: fixture) }
            fixtures.append(fixture)
        }
        let release = DispatchSemaphore(value: 0)
        let held = DispatchSemaphore(value: 0)
        // Each catalog's writer is held by a thread of its own, outside the pool, and let go by
        // the test or, should the pool be stuck, by a deadline no test run reaches otherwise
        // (a loaded 2-core machine took up to 10 s to start the detached task below).
        for fixture in fixtures {
            Thread.detachNewThread { [catalog = fixture.catalog] in
                _ = try? catalog.write { _ in
                    held.signal()
                    _ = release.wait(timeout: .now() + Self.stuckFor)
                }
            }
        }
        for _ in fixtures { held.wait() }
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: Self.stuckFor)
            for _ in 0..<width { release.signal() }
        }
        let started = fixtures.map { fixture in
            Task { try await Self.perform(operation, on: fixture) }
        }
        // Long enough for each operation to reach its catalog (where it blocks whatever thread
        // runs it), then a task of its own: both need a thread of the pool.
        let asked = ContinuousClock.now
        try await Task.sleep(for: .milliseconds(300))
        let answered = await Task.detached { ContinuousClock.now }.value
        let waited = answered - asked
        for _ in fixtures { release.signal() }
        for (fixture, task) in zip(fixtures, started) {
            if let handle = try await task.value { await fixture.fs.release(handle: handle) }
        }
        #expect(waited < .seconds(Self.stuckFor / 2), "a task waited \(waited) for a thread of the pool while \(operation) waited for its catalog")
    }

    /// The handle, for an operation that opens one.
    private static func perform(_ operation: Operation, on fixture: CoreFixture) async throws -> UInt64? {
        let fs = fixture.fs
        switch operation {
        case .open:
            return try await fs.open(try await fixture.lookup("file.bin").inode, mode: .read)
        case .create:
            return try await fs.create(in: Item.rootInode, name: "new.txt", mode: 0o644, owner: 0, group: 0, exclusive: true, truncate: false).handle
        case .mkdir:
            _ = try await fs.makeDirectory(in: Item.rootInode, name: "made", mode: 0o755, owner: 0, group: 0)
        case .remove, .removeUnsent:
            try await fs.remove(from: Item.rootInode, name: "file.bin", directory: false)
        case .rename:
            try await fs.rename(from: Item.rootInode, name: "file.bin", to: Item.rootInode, newName: "moved.bin", noReplace: false)
        case .chmod:
            _ = try await fs.setAttributes(of: try await fixture.lookup("file.bin").inode, .init(mode: 0o600), handle: nil)
        case .pin:
            try await fs.pin(try await fixture.lookup("docs").inode)
        }
        return nil
    }

    /// `name` rewritten and closed while the store refuses writes: a change it does not have.
    private static func changeUnsent(_ name: String, in fixture: CoreFixture) async throws {
        fixture.store.failWrites(with: .unreachable("down"))
        let handle = try await fixture.fs.open(try await fixture.lookup(name).inode, mode: .init(writable: true, truncate: true))
        try fixture.write(handle: handle, Array("unsent".utf8))
        await fixture.fs.release(handle: handle)
        await fixture.settle()
        #expect(try fixture.fs.catalog.items(in: [.modified, .uploading]).count == 1)
    }
}
