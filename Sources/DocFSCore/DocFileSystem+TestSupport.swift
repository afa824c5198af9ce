// DocFileSystem+TestSupport: calls only tests make, to wait for background work or to start it
// now. Internal: tests reach them through `@testable import`; the FUSE layer never does.

import DocFSStore

extension DocFileSystem {
    /// Uploads `inode`'s pending changes now and waits until the store has them.
    func uploadNow(_ inode: Inode) async throws(FSError) {
        try await uploader.sync(inode)
    }

    /// Waits until no directory listing is in flight (background refreshes included).
    func waitForListings() async {
        await enumerator.waitUntilIdle()
    }

    /// Waits until the background downloads and listings of pinned folders are done.
    func waitForPinnedRefresh() async {
        await pinnedRefresher.waitUntilIdle()
    }

    /// Lists `directory` from the store now and waits for it.
    func refresh(directory inode: Inode) async throws(FSError) {
        try await enumerator.refresh(try item(inode))
    }

    /// Items with changes the store does not have yet.
    func unsyncedItems() throws(FSError) -> [Item] {
        try catalog.items(in: [.modified, .uploading])
    }
}
