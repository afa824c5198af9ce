// Turns on Thumbnails.swift for this mount, with what the daemon knows.

import DocFSStore
import Synchronization

extension DocFileSystem {
    /// Call once, before serving requests; returns the owner, for tests.
    @discardableResult
    public func startThumbnails(_ settings: Thumbnails.Settings) -> Thumbnails {
        let thumbnails = Thumbnails(store: store, catalog: catalog, settings: settings, logger: logger)
        if store.capabilities.previews {
            // Weakly: the enumerator outlives nothing it is told about.
            enumerator.whenPreviewsListed { [weak thumbnails] directory, paths, started in
                await thumbnails?.listed(directory, withPreviews: paths, listingStarted: started)
            }
        }
        thumbnails.startWatchingCopies()
        self.thumbnails.withLock { $0 = thumbnails }
        return thumbnails
    }
}
