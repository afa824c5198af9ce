// On stores that look names up one by one (S3), lookups in a never-listed folder pay for its
// listing page by page.

import DocFSStore
import Foundation

/// Ski rental: page k+1 is asked once `lookupsPerPage` × k names were looked up, so a few
/// lookups cost a page at most. Until the last page, lookups ask the store.
struct ListingBoughtByLookups: Sendable {
    static let lookupsPerPage = 8

    var lookups = 1
    var pagesListed = 0
    var next: PageToken?
    /// A listing left half-way past the folder's time to live starts again.
    var lastPageAt = Date().timeIntervalSince1970
    let progress = ListingProgress(startedAt: Date().timeIntervalSince1970)
    var fetching: Task<PageOutcome, Never>?

    enum PageOutcome: Sendable, Equatable {
        case listed
        case more(PageToken)
        case failed
    }

    var pageDue: Bool {
        guard fetching == nil else { return false }
        return pagesListed == 0 ? lookups >= 2 : lookups >= Self.lookupsPerPage * pagesListed
    }
}

extension DirectoryEnumerator {
    /// A small folder is listed by the second name looked up. Nothing waits for a page; a failed
    /// page ends it. Off with `--list-ahead 0`.
    public func noteLookupByName(in directory: Item) {
        guard listAhead.folders > 0, directory.listedAt == nil, !isListing(directory.inode) else { return }
        let inode = directory.inode
        guard var bought = listingsBoughtByLookups[inode] else {
            listingsBoughtByLookups[inode] = ListingBoughtByLookups()
            return
        }
        if bought.fetching == nil, bought.pagesListed > 0, Date().timeIntervalSince1970 - bought.lastPageAt > ttl {
            bought = ListingBoughtByLookups()  // pages that old may be out of date: from the first again
        }
        bought.lookups += 1
        if bought.pageDue {
            let previews = previewsHandler.withLock { $0 }
            bought.fetching = Task { [token = bought.next, progress = bought.progress] in
                let outcome: ListingBoughtByLookups.PageOutcome
                do {
                    let page = try await self.readPage(token, of: directory)
                    try await self.apply(page, of: directory, progress: progress, previews: previews, awaitingSince: nil)
                    if let next = page.next {
                        outcome = .more(next)
                    } else {
                        try await self.finishListing(directory, progress: progress, lookupsFollow: true)
                        outcome = .listed
                    }
                } catch {
                    outcome = .failed  // the lookups ask by name, and say what failed
                }
                await self.pageBought(outcome, of: directory, progress: progress)
                return outcome
            }
        }
        listingsBoughtByLookups[inode] = bought
    }

    private func pageBought(_ outcome: ListingBoughtByLookups.PageOutcome, of directory: Item, progress: ListingProgress) {
        // A whole listing may have taken over meanwhile (and removed the entry).
        guard var bought = listingsBoughtByLookups[directory.inode], bought.progress === progress else { return }
        switch outcome {
        case .listed:
            listingsBoughtByLookups[directory.inode] = nil
            listedHandler.withLock { $0 }?(directory)
        case .more(let next):
            bought.fetching = nil
            bought.next = next
            bought.pagesListed += 1
            bought.lastPageAt = Date().timeIntervalSince1970
            listingsBoughtByLookups[directory.inode] = bought
            logger.debug("a page of a folder looked up by name", metadata: ["path": "\(directory.path)", "pages": "\(bought.pagesListed)"])
        case .failed:
            listingsBoughtByLookups[directory.inode] = nil
        }
    }
}
