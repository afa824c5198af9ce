import DocFSStore
import Foundation
import Logging
import Synchronization

/// Fills the catalog with directory listings from the store: File Provider's
/// `enumerator(for:)` with its pages.
///
/// A directory never listed is listed before the caller gets an answer. A directory listed
/// before (in this mount or an earlier one: the catalog persists) answers from the catalog at
/// once; when its listing is older than the TTL, or from an earlier mount, a refresh runs in
/// the background (stale-while-revalidate), so a remount shows the cached tree without waiting
/// for the server, and a stopped server leaves the cached tree browsable.
/// Concurrent requests for the same directory share one listing.
///
/// A tree walk lists ahead: once a second never-listed child folder of one folder had to be
/// listed before an answer (`find`, `du`, `cp -r`, `ls -R`, a file manager going from folder
/// to folder), that folder's other never-listed child folders are listed in the background,
/// `ListAhead.concurrency` at a time, up to `ListAhead.folders` of them, so the walk finds them
/// listed or joins a listing under way instead of waiting for one request after another. A
/// single descent (opening one folder) lists nothing more, and neither does `ls -l`, which
/// looks names up without listing the folders among them.
public actor DirectoryEnumerator {
    /// How far a tree walk lists ahead (`--list-ahead`).
    public struct ListAhead: Sendable, Equatable {
        /// Child folders of one folder listed ahead per walk into it (0: never list ahead).
        public var folders: Int
        /// Of those, how many listings run at once.
        public var concurrency: Int

        public init(folders: Int, concurrency: Int = 4) {
            self.folders = max(0, folders)
            self.concurrency = max(1, concurrency)
        }

        public static let `default` = ListAhead(folders: 32)
        public static let off = ListAhead(folders: 0)
    }

    let store: any Store
    let catalog: Catalog
    let ttl: Double
    let retry: RetryPolicy
    let logger: Logger
    private let startedAt = Date().timeIntervalSince1970
    private var inFlight: [Inode: Task<Void, any Error>] = [:]
    let listAhead: ListAhead
    /// Folders not walked yet one of whose never-listed child folders was listed before an
    /// answer (the second makes the folder walked).
    private var enteredOnce: Set<Inode> = []
    /// Folders being walked: their never-listed child folders are listed ahead.
    private var walked: Set<Inode> = []
    /// Folders whose child folders are being listed ahead.
    private var listingAhead: [Inode: Task<Void, Never>] = [:]
    /// Never-listed folders whose names are looked up by `stat`, and how far the lookups paid
    /// for their listings (see `noteLookupByName`).
    var listingsBoughtByLookups: [Inode: ListingBoughtByLookups] = [:]
    /// Directories whose background refresh was asked for from outside the actor and has not
    /// ended: one request each, however many lookups find them stale meanwhile.
    private nonisolated let refreshRequested = Mutex<Set<Inode>>([])
    /// Kinds of small objects to be confirmed at their first lookup (see `SymlinkProbe`).
    private nonisolated let confirmations: KindConfirmations
    /// Objects above this size are never links (nil: the store's listings show every kind).
    private nonisolated let maximumLinkSize: Int64?
    /// Told about each directory whose listing reached the catalog (`whenListed`).
    nonisolated let listedHandler = Mutex<(@Sendable (Item) -> Void)?>(nil)
    /// Told about the files of each listing page the store has previews of (`whenPreviewsListed`).
    nonisolated let previewsHandler = Mutex<PreviewsHandler?>(nil)

    /// Given a listing page's files with previews and, when a caller waits for the listing (a
    /// folder's first `readdir`), when the listing started; returns once their thumbnails are
    /// written or its patience ran out, at once when no one waits (see `whenPreviewsListed`).
    public typealias PreviewsHandler = @Sendable (Item, [StorePath], ContinuousClock.Instant?) async -> Void
    /// Drops clean copies a listing found gone from the store (`whenCopiesGoneFromStore`).
    private nonisolated let goneHandler = Mutex<(@Sendable ([Inode]) async -> Bool)?>(nil)

    public init(store: any Store, catalog: Catalog, ttl: Double, retry: RetryPolicy = .interactive,
                listAhead: ListAhead = .default, logger: Logger) {
        self.store = store
        self.listAhead = listAhead
        self.catalog = catalog
        self.ttl = ttl
        self.retry = retry
        self.logger = logger
        self.confirmations = KindConfirmations(store: store, catalog: catalog, retry: retry, logger: logger)
        self.maximumLinkSize = SymlinkProbe.maximumSize(of: store)
    }

    /// Calls `handler` after each listing that reached the catalog whole (on the listing's
    /// task: it must not wait for anything).
    public nonisolated func whenListed(_ handler: @escaping @Sendable (Item) -> Void) {
        listedHandler.withLock { $0 = handler }
    }

    /// Calls `handler` with each listing page's files the store says it has previews of
    /// (`RemoteEntry.hasPreview`), once the page is in the catalog, on the listing's task: the
    /// listing ends when it returns, so a folder's first `readdir` can wait (boundedly: the
    /// handler's own deadline) for the thumbnails a file manager asks for right after it.
    /// Thumbnails.swift makes them.
    public nonisolated func whenPreviewsListed(_ handler: @escaping PreviewsHandler) {
        previewsHandler.withLock { $0 = handler }
    }

    /// Calls `handler` with the files a listing found gone from the store while they had clean
    /// local copies (kept past their release: pinned, or idle), before the listing ends; it
    /// returns whether any went. When some did, the folder is listed once more, so that the
    /// names they held show what the store has there now (a folder that took one).
    public nonisolated func whenCopiesGoneFromStore(_ handler: @escaping @Sendable ([Inode]) async -> Bool) {
        goneHandler.withLock { $0 = handler }
    }

    /// `item`, when its kind is still to be confirmed before a lookup answers with it (see
    /// `SymlinkProbe`); nil on stores whose listings show every kind, and for most items.
    public nonisolated func kindToConfirm(_ item: Item) -> Catalog.KindToConfirm? {
        guard let maximumLinkSize else { return nil }
        return try? catalog.kindToConfirm(item, maximumSize: maximumLinkSize)
    }

    /// Confirms the kind of `item` with the store (one HEAD, shared with any other lookup of
    /// it), and starts confirming the rest of its folder in the background.
    public nonisolated func confirmKind(_ item: Catalog.KindToConfirm) async {
        await confirmations.confirm(item)
    }

    /// The children of `directory` whose kind is still to be confirmed.
    public nonisolated func inodesToConfirm(in directory: Inode) -> Set<Inode> {
        guard let maximumLinkSize else { return [] }
        return (try? catalog.inodesToConfirm(in: directory, maximumSize: maximumLinkSize)) ?? []
    }

    /// Makes sure the catalog can answer for `directory`'s children.
    public func ensureListed(_ directory: Item) async throws(FSError) {
        guard directory.isDirectory else { throw .notADirectory }
        if let listedAt = directory.listedAt {
            let now = Date().timeIntervalSince1970
            if listedAt < startedAt || now - listedAt >= ttl {
                _ = listing(directory)
            }
            return
        }
        noteDescent(into: directory)
        do {
            try await listing(directory, awaited: true).value
        } catch {
            throw (error as? FSError) ?? .io("\(error)")
        }
    }

    /// Whether the catalog can answer for `directory`'s children without waiting: it was listed
    /// (in this mount or an earlier one). A stale listing is refreshed in the background, as
    /// `ensureListed` does. Never waits and never hops onto the actor unless a refresh is due.
    public nonisolated func canAnswerNow(for directory: Item) -> Bool {
        guard let listedAt = directory.listedAt else { return false }
        let now = Date().timeIntervalSince1970
        if listedAt < startedAt || now - listedAt >= ttl {
            let first = refreshRequested.withLock { $0.insert(directory.inode).inserted }
            if first {
                Task {
                    _ = await self.listingInBackground(directory)
                }
            }
        }
        return true
    }

    private func listingInBackground(_ directory: Item) async {
        let task = listing(directory)
        _ = await task.result
        refreshRequested.withLock { _ = $0.remove(directory.inode) }
    }

    /// Waits until no listing is in flight, including those that start meanwhile and those
    /// listed ahead.
    public func waitUntilIdle() async {
        while true {
            if let task = listingAhead.values.first {
                await task.value
            } else if let task = listingsBoughtByLookups.values.lazy.compactMap(\.fetching).first {
                _ = await task.value
            } else if let task = inFlight.values.first {
                _ = await task.result
            } else {
                return
            }
            await Task.yield()
        }
    }

    /// Notes a walk into `directory`, never listed, and lists its siblings ahead when its
    /// parent is being walked: from the second such walk into the parent, or from the first
    /// when the parent is itself a folder of a walked one (`find` going down a tree).
    private func noteDescent(into directory: Item) {
        guard listAhead.folders > 0, let parent = directory.parent, inFlight[directory.inode] == nil else { return }
        if !walked.contains(parent) {
            let grandparentWalked = (try? catalog.item(parent))?.parent.map { walked.contains($0) } ?? false
            guard grandparentWalked || enteredOnce.contains(parent) else {
                enteredOnce.insert(parent)
                return
            }
            enteredOnce.remove(parent)
            walked.insert(parent)
        }
        guard listingAhead[parent] == nil else { return }
        listingAhead[parent] = Task { await self.listChildFolders(of: parent, after: directory.name) }
    }

    /// Lists the never-listed child folders of `parent` that come after `name`, in name order
    /// (the order a walk takes them in), `listAhead.concurrency` at a time. A folder listed or
    /// being listed meanwhile is joined or skipped, never listed twice. A listing that fails
    /// for any reason but the folder itself (gone, or not a folder) ends the batch: a store that
    /// is down gets the few listings already under way, not one failing listing per folder.
    private func listChildFolders(of parent: Inode, after name: String) async {
        defer { listingAhead[parent] = nil }
        guard let folders = try? catalog.foldersNeverListed(in: parent, after: name, limit: listAhead.folders),
              !folders.isEmpty else { return }
        logger.debug("listing ahead", metadata: ["parent": "\(parent)", "after": "\(name)", "folders": "\(folders.count)"])
        var running: [Task<Void, any Error>] = []
        var storeFailed = false
        for folder in folders {
            if inFlight[folder.inode] == nil {
                guard let current = try? catalog.item(folder.inode), current.listedAt == nil else { continue }
            }
            running.append(listing(folder))
            if running.count >= listAhead.concurrency, Self.storeFailed(await running.removeFirst().result) {
                storeFailed = true
                break
            }
        }
        for task in running { _ = await task.result }
        if storeFailed { logger.debug("listing ahead stopped: a listing failed", metadata: ["parent": "\(parent)"]) }
    }

    /// Whether a listing failed because of the store rather than the folder listed.
    private static func storeFailed(_ result: Result<Void, any Error>) -> Bool {
        guard case .failure(let error) = result else { return false }
        switch error as? FSError {
        case .notFound?, .notADirectory?: return false
        default: return true
        }
    }

    /// Lists `directory` now and waits for it (used by tests and explicit refreshes).
    public func refresh(_ directory: Item) async throws(FSError) {
        // A file is never listed: the store's answer for its path (a folder another client made
        // there) would become children of the file's row, and they went with that row unseen.
        guard directory.isDirectory else { throw .notADirectory }
        do {
            try await listing(directory).value
        } catch {
            throw (error as? FSError) ?? .io("\(error)")
        }
    }

    /// `awaited`: a caller waits for this listing (a folder's first readdir or lookup): a file
    /// manager asks for the folder's thumbnails right after it (Thumbnails.swift), and lookups
    /// of its names follow (the folder's rows are read into the cache of rows). Listings ahead
    /// of a walk or in the background do neither.
    private func listing(_ directory: Item, awaited: Bool = false) -> Task<Void, any Error> {
        if let task = inFlight[directory.inode] { return task }
        let handler = listedHandler.withLock { $0 }
        let dropGone = goneHandler.withLock { $0 }
        let previews = previewsHandler.withLock { $0 }
        // A whole listing takes over from lookups paying for one page by page: when the page
        // under way was the last, the folder is listed, and this listing need not ask again.
        let pageUnderWay = listingsBoughtByLookups.removeValue(forKey: directory.inode)?.fetching
        let task = Task { [store, catalog, retry, logger] in
            defer { self.finished(directory.inode) }
            if let pageUnderWay, await pageUnderWay.value == .listed { return }
            try await Self.list(directory, store: store, catalog: catalog, retry: retry, logger: logger, previews: previews,
                                awaited: awaited)
            handler?(directory)
            if let dropGone, let gone = try? catalog.cleanCopiesGoneFromStore(in: directory.inode), !gone.isEmpty, await dropGone(gone) {
                try await Self.list(directory, store: store, catalog: catalog, retry: retry, logger: logger)
                handler?(directory)
            }
        }
        inFlight[directory.inode] = task
        return task
    }

    /// Lists `directory` and applies the listing to the catalog. Nonisolated: it runs off the
    /// actor, so lookups (which only need the actor to start or join a listing) never wait for
    /// a big directory; the catalog write runs on the blocking queue, off the cooperative pool.
    private nonisolated static func list(_ directory: Item, store: any Store, catalog: Catalog, retry: RetryPolicy,
                                         logger: Logger, previews: PreviewsHandler? = nil, awaited: Bool = false) async throws {
        let progress = ListingProgress(startedAt: Date().timeIntervalSince1970)
        let waiting = awaited ? ContinuousClock.now : nil
        var page: PageToken? = nil
        repeat {
            // Each page reaches the catalog as it arrives: a huge folder is never held whole in
            // memory, and the catalog grows while the listing runs.
            page = try await listPage(page, of: directory, progress: progress, store: store, catalog: catalog, retry: retry, logger: logger,
                                      previews: previews, awaitingSince: waiting)
        } while page != nil
        try await finishListing(directory, progress: progress, catalog: catalog, logger: logger, lookupsFollow: awaited)
    }

    /// Asks the store for the page of `directory`'s listing that `token` names (the first for
    /// nil) and applies it to the catalog; returns the next page's token, nil after the last.
    /// The page's files the store has previews of go to `previews` (Thumbnails.swift) once the
    /// page is in the catalog; `awaitingSince`: a caller waits for this listing, since then, and
    /// so does the page for their thumbnails (boundedly), nil: no one waits for them.
    nonisolated static func listPage(_ token: PageToken?, of directory: Item, progress: ListingProgress, store: any Store,
                                     catalog: Catalog, retry: RetryPolicy, logger: Logger, previews: PreviewsHandler? = nil,
                                     awaitingSince: ContinuousClock.Instant? = nil) async throws(FSError) -> PageToken? {
        do {
            let askedAt = Date().timeIntervalSince1970
            let result = try await retry.run { () async throws(StoreError) -> ListPage in
                try await store.list(directory.path, page: token)
            }
            let resolved = try SymlinkProbe(store: store, catalog: catalog, logger: logger).resolve(result.entries, in: directory)
            try await Blocking.run { () throws(FSError) in
                try catalog.applyListingPage(resolved.entries, kindUnknown: resolved.unknown, of: directory.inode,
                                             askedAt: askedAt, progress: progress)
            }
            if let previews {
                let withPreviews = resolved.entries.filter { $0.hasPreview && $0.kind == .file }.map(\.path)
                if !withPreviews.isEmpty { await previews(directory, withPreviews, awaitingSince) }
            }
            return result.next
        } catch let error as StoreError {
            logger.warning("listing failed", metadata: ["path": "\(directory.path)", "error": "\(error)"])
            throw FSError(error)
        } catch {
            throw (error as? FSError) ?? .io("\(error)")
        }
    }

    /// The last page was applied: what the listing did not see is gone, and the folder is listed.
    nonisolated static func finishListing(_ directory: Item, progress: ListingProgress, catalog: Catalog, logger: Logger,
                                          lookupsFollow: Bool) async throws(FSError) {
        try await Blocking.run { () throws(FSError) in
            try catalog.finishListing(progress, of: directory.inode, listedAt: Date().timeIntervalSince1970, lookupsFollow: lookupsFollow)
        }
        logger.debug("listed", metadata: ["path": "\(directory.path)", "entries": "\(progress.count)"])
    }

    func isListing(_ inode: Inode) -> Bool { inFlight[inode] != nil }

    private func finished(_ inode: Inode) {
        inFlight[inode] = nil
    }
}
