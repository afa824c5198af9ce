// DirectoryEnumerator+ListingByLookups: on a store that looks names up one by one (S3: a HEAD
// per name), lookups in a folder never listed pay for its listing, page by page.

import DocFSStore
import Foundation

/// How far the lookups by name in one never-listed folder have paid for its listing.
///
/// Listing a folder of P pages costs P requests; asking about each name costs one per name.
/// How many names will be asked about is not known, nor is P until the last page. So the
/// lookups buy the listing as they come (the ski-rental rule): the second name asks for the
/// first page, and page k+1 is asked for once `lookupsPerPage` × k names were — a folder looked
/// up by a handful of names (a `stat` of one file in a bucket of millions) costs a page at
/// most, and a `stat` of every name of a big folder costs a few dozen lookups and its pages,
/// not one request per name. Until the last page is applied, every lookup asks the store
/// (what the pages applied hold may be a page behind); after it, the catalog answers.
struct ListingBoughtByLookups: Sendable {
    /// How many lookups by name pay for each page after the first.
    static let lookupsPerPage = 8

    /// Lookups by name in the folder since this began.
    var lookups = 1
    /// Pages applied, and the token of the next (nil before the first page).
    var pagesListed = 0
    var next: PageToken?
    /// When the last page was applied: a listing left half-way longer than the folder's time to
    /// live starts again from its first page.
    var lastPageAt = Date().timeIntervalSince1970
    let progress = ListingProgress(startedAt: Date().timeIntervalSince1970)
    /// The page being asked for, if one is.
    var fetching: Task<PageOutcome, Never>?

    enum PageOutcome: Sendable, Equatable {
        /// That was the last page: the folder is listed.
        case listed
        /// More pages follow.
        case more(PageToken)
        /// The page could not be had; the lookups go on by name.
        case failed
    }

    /// Whether the lookups so far have paid for the next page.
    var pageDue: Bool {
        guard fetching == nil else { return false }
        return pagesListed == 0 ? lookups >= 2 : lookups >= Self.lookupsPerPage * pagesListed
    }
}

extension DirectoryEnumerator {
    /// A lookup by name in `directory`, never listed, on a store that looks names up by `stat`.
    /// The lookups pay for the folder's listing page by page (`ListingBoughtByLookups`): a small
    /// folder is listed by the second name looked up (one page holds it), so `cat` or `cp` of
    /// its files by path costs one listing, not a HEAD per name. Nothing waits for a page: the
    /// lookups go on asking by name until the last one is applied. A page that fails ends it;
    /// the next two lookups start again. Off with `--list-ahead 0`.
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
            bought.fetching = Task { [store, catalog, retry, logger, token = bought.next, progress = bought.progress] in
                let outcome: ListingBoughtByLookups.PageOutcome
                do {
                    if let next = try await Self.listPage(token, of: directory, progress: progress, store: store, catalog: catalog,
                                                          retry: retry, logger: logger, previews: previews) {
                        outcome = .more(next)
                    } else {
                        try await Self.finishListing(directory, progress: progress, catalog: catalog, logger: logger, lookupsFollow: true)
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
