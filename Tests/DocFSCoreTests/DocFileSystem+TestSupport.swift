// Calls only tests make, to wait for or start the core's background work.

@testable import DocFSCore

extension DocFileSystem {
    /// Background refreshes included.
    func waitForListings() async {
        await enumerator.waitUntilIdle()
    }

    /// The changes a killed daemon left under way, settled in the background by `start`.
    func waitForChangesCutShort() async {
        await settlingChangesCutShort.withLock { $0 }?.value
    }

    func refresh(directory inode: Inode) async throws(FSError) {
        try await enumerator.refresh(try item(inode))
    }
}
