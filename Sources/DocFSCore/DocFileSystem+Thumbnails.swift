// DocFileSystem+Thumbnails: turns on the thumbnails of Thumbnails.swift for this mount, with
// what the daemon knows (the mount point, the user's cache folder).

import DocFSStore
import Synchronization

extension DocFileSystem {
    /// Writes thumbnails of listed placeholders from the store's previews (where the store
    /// makes them), and removes file managers' failure markers of files whose copies become
    /// local (on every store). Call once, before the mount serves requests; returns the owner,
    /// for tests.
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
