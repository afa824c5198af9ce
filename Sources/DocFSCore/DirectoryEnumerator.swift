import DocFSStore
import Foundation
import Logging
import Synchronization

/// Fills the catalog with listings. A folder listed before answers at once and is refreshed in
/// the background when stale, so a stopped server leaves the cached tree browsable.
public actor DirectoryEnumerator {
    public struct ListAhead: Sendable, Equatable {
        /// 0: never list ahead.
        public var folders: Int
        public var concurrency = 4

        public init(folders: Int) {
            self.folders = max(0, folders)
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
    /// Of the listings in flight: what they have applied so far (read by lookups off the actor).
    private nonisolated let progressOf = Mutex<[Inode: ListingProgress]>([:])
    let listAhead: ListAhead
    /// Folders with one never-listed child listed before an answer (the second makes it walked).
    private var enteredOnce: Set<Inode> = []
    private var walked: Set<Inode> = []
    private var listingAhead: [Inode: Task<Void, Never>] = [:]
    /// Never-listed folders whose lookups are paying for their listing (`noteLookupByName`).
    var listingsBoughtByLookups: [Inode: ListingBoughtByLookups] = [:]
    /// Refreshes asked for from outside the actor and not ended: one request each.
    private nonisolated let refreshRequested = Mutex<Set<Inode>>([])
    /// A lookup's: one HEAD shared with other lookups; the rest of the folder follows in the background.
    nonisolated let confirmations: KindConfirmations
    /// Nil: listings show every kind.
    private nonisolated let maximumLinkSize: Int64?
    nonisolated let listedHandler = Mutex<(@Sendable (Item) -> Void)?>(nil)
    nonisolated let previewsHandler = Mutex<PreviewsHandler?>(nil)

    /// Returns once the thumbnails are written or patience ran out; at once when no one waits.
    public typealias PreviewsHandler = @Sendable (Item, [StorePath], ContinuousClock.Instant?) async -> Void
    private nonisolated let goneHandler = Mutex<(@Sendable ([Inode]) async -> Bool)?>(nil)
    private nonisolated let foldersBeingMade = Mutex<(@Sendable (StorePath) async -> Void)?>(nil)

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

    /// Runs on the listing's task: it must not wait for anything.
    public nonisolated func whenListed(_ handler: @escaping @Sendable (Item) -> Void) {
        listedHandler.withLock { $0 = handler }
    }

    /// Runs on the listing's task, which ends when it returns: a first `readdir` waits for thumbnails.
    public nonisolated func whenPreviewsListed(_ handler: @escaping PreviewsHandler) {
        previewsHandler.withLock { $0 = handler }
    }

    /// Returns once the store has the folder at `path` and those above it that this mount made
    /// ahead (`Uploader+FoldersAhead`): a listing never asks for one before.
    public nonisolated func whenFoldersBeingMade(_ wait: @escaping @Sendable (StorePath) async -> Void) {
        foldersBeingMade.withLock { $0 = wait }
    }

    /// Returns whether any went; then the folder is listed again to show what is there now.
    public nonisolated func whenCopiesGoneFromStore(_ handler: @escaping @Sendable ([Inode]) async -> Bool) {
        goneHandler.withLock { $0 = handler }
    }

    /// Nil for most items.
    public nonisolated func kindToConfirm(_ item: Item) -> Catalog.KindToConfirm? {
        guard let maximumLinkSize else { return nil }
        return try? catalog.kindToConfirm(item, maximumSize: maximumLinkSize)
    }

    /// A folder never listed is listed, the caller waiting; a stale one is refreshed behind it.
    /// `name`: a folder listed for the first time returns as soon as a page that holds it is
    /// in the catalog, so a `stat` of a name in a big folder waits for its page, not for the
    /// whole listing. Whether a name is absent is known only at the end.
    public func ensureListed(_ directory: Item, holding name: String? = nil) async throws(FSError) {
        guard directory.isDirectory else { throw .notADirectory }
        if directory.listedAt != nil {
            if isStale(directory) { _ = listing(directory) }
            return
        }
        noteDescent(into: directory)
        let task = listing(directory, awaited: true)
        if let name, let progress = progressOf.withLock({ $0[directory.inode] }) {
            var applied = 0
            while let now = await progress.pageApplied(after: applied) {
                applied = now
                if progress.hasSeen(name), (try? catalog.child(of: directory.inode, named: name)) != nil { return }
            }
        }
        try await task.valueOrFSError
    }

    /// Whether a first listing of `directory` under way has put `child` in the catalog: then
    /// a lookup needs to wait for nothing.
    public nonisolated func firstListingHolds(_ child: Item, in directory: Item) -> Bool {
        guard directory.listedAt == nil, let progress = progressOf.withLock({ $0[directory.inode] }) else { return false }
        return progress.hasSeen(child.name)
    }

    /// Never waits; hops onto the actor only if a refresh is due.
    public nonisolated func canAnswerNow(for directory: Item) -> Bool {
        guard directory.listedAt != nil else { return false }
        if isStale(directory), refreshRequested.withLock({ $0.insert(directory.inode).inserted }) {
            Task {
                _ = await self.listing(directory).result
                self.refreshRequested.withLock { _ = $0.remove(directory.inode) }
            }
        }
        return true
    }

    /// Listed before this mount, or longer ago than the time to live.
    private nonisolated func isStale(_ directory: Item) -> Bool {
        guard let listedAt = directory.listedAt else { return false }
        return listedAt < startedAt || Date().timeIntervalSince1970 - listedAt >= ttl
    }

    /// A folder never listed is listed, nothing waiting for it (a reader walking it by name).
    /// Off with `--list-ahead 0`, as every listing ahead of a reader is.
    public func listIfNeverListed(_ directory: Item) async {
        guard listAhead.folders > 0, directory.isDirectory, inFlight[directory.inode] == nil,
              (try? catalog.item(directory.inode))??.listedAt == nil else { return }
        _ = await listing(directory).result
    }

    /// Including listings that start meanwhile and those listed ahead.
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

    /// From the second walk into a parent, or the first when the parent is in a walked folder.
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

    /// In name order, never a folder twice. A store failure ends the batch: a store that is down
    /// gets no failing listing per folder.
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
            let listed = listing(folder)
            running.append(listed)
            if maximumLinkSize != nil {
                Task { [confirmations] in
                    if case .success = await listed.result { await confirmations.sweepAhead(folder.inode) }
                }
            }
            if running.count >= listAhead.concurrency, Self.storeFailed(await running.removeFirst().result) {
                storeFailed = true
                break
            }
        }
        for task in running { _ = await task.result }
        if storeFailed { logger.debug("listing ahead stopped: a listing failed", metadata: ["parent": "\(parent)"]) }
    }

    private static func storeFailed(_ result: Result<Void, any Error>) -> Bool {
        guard case .failure(let error) = result else { return false }
        switch error as? FSError {
        case .notFound?, .notADirectory?: return false
        default: return true
        }
    }

    public func refresh(_ directory: Item) async throws(FSError) {
        // A file is never listed: a folder made there elsewhere would become the file's children.
        guard directory.isDirectory else { throw .notADirectory }
        try await listing(directory).valueOrFSError
    }

    /// `awaited`: a caller waits, so thumbnails are waited for and rows read into the cache.
    private func listing(_ directory: Item, awaited: Bool = false) -> Task<Void, any Error> {
        if let task = inFlight[directory.inode] { return task }
        let handler = listedHandler.withLock { $0 }
        let dropGone = goneHandler.withLock { $0 }
        let previews = previewsHandler.withLock { $0 }
        // If the lookups' page under way was the last, the folder is listed already.
        let pageUnderWay = listingsBoughtByLookups.removeValue(forKey: directory.inode)?.fetching
        let progress = ListingProgress(startedAt: Date().timeIntervalSince1970)
        let task = Task {
            defer {
                progress.ended()
                self.finished(directory.inode)
            }
            if let pageUnderWay, await pageUnderWay.value == .listed {
                handler?(directory)  // the page's own end no longer finds its entry to say so
                return
            }
            try await self.list(directory, progress: progress, previews: previews, awaited: awaited)
            handler?(directory)
            if let dropGone, let gone = try? self.catalog.cleanCopiesGoneFromStore(in: directory.inode), !gone.isEmpty, await dropGone(gone) {
                let again = ListingProgress(startedAt: Date().timeIntervalSince1970)
                try await self.list(directory, progress: again)
                handler?(directory)
            }
        }
        inFlight[directory.inode] = task
        progressOf.withLock { $0[directory.inode] = progress }
        return task
    }

    /// Off the actor, so lookups never wait for a big folder. The next page is read while this
    /// one is applied: parsing a page and writing it to the catalog each take about as long as
    /// the other, so neither waits for the other.
    private nonisolated func list(_ directory: Item, progress: ListingProgress, previews: PreviewsHandler? = nil,
                                  awaited: Bool = false) async throws {
        let waiting = awaited ? ContinuousClock.now : nil
        var page = try await readPage(nil, of: directory)
        while true {
            // Page by page: a huge folder is never held whole in memory, two pages at most.
            let token = page.next
            async let following = readPage(after: token, of: directory)
            try await apply(page, of: directory, progress: progress, previews: previews, awaitingSince: waiting)
            progress.pageApplied()
            guard let next = try await following else { break }
            page = next
        }
        try await finishListing(directory, progress: progress, lookupsFollow: awaited)
    }

    /// A page read from the store, its kinds resolved, not applied yet.
    struct ReadPage: Sendable {
        var entries: [RemoteEntry]
        var kindUnknown: Set<FileName>
        var askedAt: Double
        var next: PageToken?
    }

    /// Nil after the last page.
    private nonisolated func readPage(after token: PageToken?, of directory: Item) async throws(FSError) -> ReadPage? {
        guard let token else { return nil }
        return try await readPage(token, of: directory)
    }

    nonisolated func readPage(_ token: PageToken?, of directory: Item) async throws(FSError) -> ReadPage {
        if let wait = foldersBeingMade.withLock({ $0 }) { await wait(directory.path) }
        let askedAt = Date().timeIntervalSince1970
        let result: ListPage
        do {
            result = try await retry.run { () async throws(StoreError) -> ListPage in
                try await store.list(directory.path, page: token)
            }
        } catch {
            logger.warning("listing failed", metadata: ["path": "\(directory.path)", "error": "\(error)"])
            throw FSError(error)
        }
        let resolved = try SymlinkProbe.resolve(result.entries, in: directory, store: store, catalog: catalog)
        return ReadPage(entries: resolved.entries, kindUnknown: resolved.unknown, askedAt: askedAt, next: result.next)
    }

    /// `awaitingSince`: a caller waits, so the page waits (boundedly) for its thumbnails.
    nonisolated func apply(_ page: ReadPage, of directory: Item, progress: ListingProgress, previews: PreviewsHandler?,
                           awaitingSince: ContinuousClock.Instant?) async throws(FSError) {
        try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.applyListingPage(page.entries, kindUnknown: page.kindUnknown, of: directory.inode,
                                         askedAt: page.askedAt, progress: progress, rememberNew: awaitingSince != nil)
        }
        if let previews {
            let withPreviews = page.entries.filter { $0.hasPreview && $0.kind == .file }.map(\.path)
            if !withPreviews.isEmpty { await previews(directory, withPreviews, awaitingSince) }
        }
    }

    /// What the listing did not see is gone.
    nonisolated func finishListing(_ directory: Item, progress: ListingProgress, lookupsFollow: Bool) async throws(FSError) {
        try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.finishListing(progress, of: directory.inode, listedAt: Date().timeIntervalSince1970, lookupsFollow: lookupsFollow)
        }
        logger.debug("listed", metadata: ["path": "\(directory.path)", "entries": "\(progress.count)"])
    }

    func isListing(_ inode: Inode) -> Bool { inFlight[inode] != nil }

    private func finished(_ inode: Inode) {
        inFlight[inode] = nil
        progressOf.withLock { $0[inode] = nil }
    }
}
