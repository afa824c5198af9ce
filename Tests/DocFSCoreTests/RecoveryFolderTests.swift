@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Testing

/// What a forced unmount leaves the user: every unsynced file under its own name.
@Suite("Unsynced files are kept in a recovery folder under their names")
struct RecoveryFolderTests {
    /// A fixture with two files written while the store refuses uploads.
    func unsynced() async throws -> (CoreFixture, [Item]) {
        let fixture = try CoreFixture.writable()
        fixture.store.failWrites(with: .unreachable("connection refused"))
        let docs = try await fixture.fs.makeDirectory(in: Item.rootInode, name: "docs", mode: 0o755, owner: 0, group: 0)
        try await fixture.createFile("top.txt", Array("top".utf8))
        try await fixture.createFile("report (final).txt", Array("nested".utf8), in: docs.inode)
        await fixture.settle()
        let pending = try fixture.catalog.items(in: [.modified, .uploading])
        #expect(pending.count == 2)
        return (fixture, pending)
    }

    @Test func eachFileIsKeptUnderItsPathInTheStore() async throws {
        let (fixture, pending) = try await unsynced()
        let folder = try #require(try RecoveryFolder.keep(pending, cacheDirectory: fixture.cacheDirectory, stateDirectory: fixture.directory))
        #expect(folder.hasPrefix(fixture.directory + "/recovery/"))
        #expect(FileManager.default.contents(atPath: folder + "/top.txt") == Data("top".utf8))
        #expect(FileManager.default.contents(atPath: folder + "/docs/report (final).txt") == Data("nested".utf8))
    }

    @Test func keepingTheSameFilesAgainReusesTheFolder() async throws {
        let (fixture, pending) = try await unsynced()
        let first = try RecoveryFolder.keep(pending, cacheDirectory: fixture.cacheDirectory, stateDirectory: fixture.directory)
        let second = try RecoveryFolder.keep(pending, cacheDirectory: fixture.cacheDirectory, stateDirectory: fixture.directory,
                                             now: Date().addingTimeInterval(5))
        #expect(first == second)
        #expect(RecoveryFolder.folders(stateDirectory: fixture.directory).count == 1)
    }

    @Test func nothingPendingMakesNoFolder() async throws {
        let fixture = try CoreFixture.writable()
        #expect(try RecoveryFolder.keep([], cacheDirectory: fixture.cacheDirectory, stateDirectory: fixture.directory) == nil)
        #expect(RecoveryFolder.folders(stateDirectory: fixture.directory).isEmpty)
    }

    @Test func removingAllLeavesTheCacheCopiesForTheJournal() async throws {
        let (fixture, pending) = try await unsynced()
        _ = try RecoveryFolder.keep(pending, cacheDirectory: fixture.cacheDirectory, stateDirectory: fixture.directory)
        RecoveryFolder.removeAll(stateDirectory: fixture.directory)
        #expect(RecoveryFolder.folders(stateDirectory: fixture.directory).isEmpty)
        #expect(Set(fixture.cachedFiles()).isSuperset(of: pending.map(\.id)))
    }
}
