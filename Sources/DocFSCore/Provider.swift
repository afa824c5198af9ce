import DocFSStore
import Foundation
import Logging
import Synchronization

/// Provides and evicts local copies; opens of one item share one copy and one fetch.
public actor Provider {
    /// Off the cooperative pool: its methods call the catalog and the file system synchronously.
    private nonisolated let executor = QueueExecutor(label: "docfs.provider")
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    private let store: any Store
    let catalog: Catalog
    private let cacheDirectory: String
    private let retry: RetryPolicy
    private let streaming: StreamingPolicy
    private let ioTimeout: Duration?
    let logger: Logger
    var providing: [Inode: Providing] = [:]
    var isShutDown = false
    let retention: RetentionPolicy
    /// Released clean copies the retention policy keeps, with their release time.
    var idle: [Inode: ContinuousClock.Instant] = [:]
    /// Read by a writer's open before it decides its version (`versionsMadeMark`).
    private nonisolated let madeHere = Mutex(VersionsMadeHere())
    private var beingMade = VersionsBeingMade()

    public nonisolated var wholeFileLimit: Int64 { streaming.wholeFileLimit }

    /// Taken by a writer's open before it decides its version (`OpenIntent.writer`).
    public nonisolated var versionsMadeMark: UInt64 { madeHere.withLock { $0.mark } }

    public nonisolated let writeback = Writeback()

    public nonisolated let presentCopies = Mutex<[Inode: LocalCopy]>([:])

    struct Providing {
        var copy: LocalCopy
        /// Nil once nothing is left to wait for (no fetch, or one an opener saw succeed).
        var fetch: Task<Void, any Error>?
        /// What an opener that stops waiting is told (`EHOSTDOWN` for an unreachable store).
        var trouble = FetchTrouble()
    }

    final class FetchTrouble: Sendable {
        private let last = Mutex<StoreError?>(nil)
        func record(_ error: StoreError) { last.withLock { $0 = error } }
        var error: StoreError? { last.withLock { $0 } }
    }

    public enum OpenIntent: Sendable, Equatable {
        /// Only a complete copy may be changed and uploaded.
        case content
        case streamed
        /// For reading, fetching nothing now: the kernel caches this version's pages; reads that reach
        /// docfs fetch ranges pinned to it.
        case cached(RemoteEntry)
        case empty
        /// A writer's open of `opened`: a large file gets a sparse copy pinned to it, so an edit never
        /// lands on a version it was not made against. Versions this mount made from it since
        /// are followed (`VersionsMadeHere`): `since` is its `versionsMadeMark` before it decided.
        case writer(opened: RemoteEntry, since: UInt64)

        var isStreamed: Bool {
            if case .writer = self { return true }
            return self == .streamed
        }
    }

    public init(store: any Store, catalog: Catalog, cacheDirectory: String, retry: RetryPolicy = .interactive,
                streaming: StreamingPolicy = .default, ioTimeout: Duration? = nil, retention: RetentionPolicy = .onLastRelease,
                logger: Logger) {
        self.store = store
        self.retention = retention
        self.ioTimeout = ioTimeout
        self.catalog = catalog
        self.cacheDirectory = cacheDirectory
        self.retry = retry
        self.streaming = store.capabilities.hasRangeReads ? streaming : .wholeFiles
        self.logger = logger
    }

    public nonisolated func copyPath(for item: Item) -> String {
        cacheDirectory + "/" + item.id
    }

    public nonisolated func snapshotPath(for item: Item) -> String {
        cacheDirectory + "/" + item.id + ".upload"
    }

    /// Waits at most `ioTimeout` and until cancelled. `mayFetch` false: only a copy needing no
    /// download opens, decided on the actor so no other open slips in between.
    public func open(_ item: Item, intent: OpenIntent = .content, mayFetch: Bool = true) async throws(FSError) -> LocalCopy {
        guard item.kind == .file else { throw item.isDirectory ? .isADirectory : .invalidArgument }
        guard !isShutDown else { throw .io("the mount is going away") }
        if let existing = providing[item.inode], existing.copy.isOutdated { try await awaitRelease(ofOutdated: existing.copy) }
        let entry: Providing
        if let existing = providing[item.inode], reusable(existing.copy, for: item) {
            if !mayFetch, intent == .content, existing.copy.isSparse { throw .fetchRefused(item.path.description) }
            idle[item.inode] = nil
            entry = existing
        } else {
            entry = try startProviding(item, intent: intent, mayFetch: mayFetch)
        }
        try entry.copy.opened()
        do {
            // Each wait is a hop off the provider's queue and back: none where nothing is fetched.
            if let fetch = entry.fetch {
                let timedOut = { @Sendable [ioTimeout] in Self.gaveUp(on: item, after: ioTimeout, trouble: entry.trouble) }
                let fetchedAtOpen = intent.isStreamed ? min(item.size, streaming.wholeFileLimit) : item.size
                try await CallerWait.run(limit: ioTimeout.map { Self.wholeTransferLimit($0, bytes: fetchedAtOpen) }, timeout: timedOut) { () throws(FSError) in
                    try await fetch.valueOrFSError
                }
                if providing[item.inode]?.copy === entry.copy { providing[item.inode]?.fetch = nil }
            }
            switch intent {
            case .content: if entry.copy.isBeingFilled { try await complete(entry.copy, of: item, trouble: entry.trouble) }
            case .empty: if entry.copy.isBeingFilled { await entry.copy.stopFetching() }
            case .streamed, .cached, .writer: break
            }
        } catch {
            await fetchFailed(item.inode, copy: entry.copy)
            throw error
        }
        return entry.copy
    }

    /// A file docfs creates: `create` makes its row, then its empty copy begins with its first
    /// change, in one visit to the provider's queue. A row whose copy could not begin goes again:
    /// with changes and no copy, it would never be uploaded nor dropped by a listing.
    public func openNew(_ create: @Sendable () throws(FSError) -> Item) async throws(FSError) -> (item: Item, copy: LocalCopy) {
        guard !isShutDown else { throw .io("the mount is going away") }
        let item = try create()
        do throws(FSError) {
            let copy = try await open(item, intent: .empty)
            do { try copy.markChanged() } catch {
                await release(item.inode)
                throw error
            }
            return (item, copy)
        } catch {
            do { try catalog.removeItem(item.inode, folderChanged: .now) } catch let removing {
                logger.error("cannot remove a new file whose copy could not begin", metadata: ["path": "\(item.path)", "error": "\(removing)"])
            }
            throw error
        }
    }

    /// Before a commit or truncate; the fetch goes on if the caller gives up.
    public func complete(_ copy: LocalCopy, of item: Item) async throws(FSError) {
        guard copy.isBeingFilled else { return }
        try await complete(copy, of: item, trouble: providing[item.inode]?.trouble ?? FetchTrouble())
    }

    private func complete(_ copy: LocalCopy, of item: Item, trouble: FetchTrouble) async throws(FSError) {
        let timedOut = { @Sendable [ioTimeout] in Self.gaveUp(on: item, after: ioTimeout, trouble: trouble) }
        try await CallerWait.run(limit: ioTimeout.map { Self.wholeTransferLimit($0, bytes: item.size) },
                                 timeout: timedOut) { () throws(FSError) in try await copy.fetchRemaining() }
    }

    private static func gaveUp(on item: Item, after limit: Duration?, trouble: FetchTrouble) -> FSError {
        if case .unreachable(let message) = trouble.error { return .storeUnreachable(message) }
        return .timedOut("no content of \(item.path) within \(limit.map { "\($0)" } ?? "the limit")")
    }

    /// A store slower than 1 MiB/s counts as stalled.
    static func wholeTransferLimit(_ ioTimeout: Duration, bytes: Int64) -> Duration {
        ioTimeout + .seconds(max(0, bytes) >> 20)
    }

    /// The last user evicts the copy, keeps it, or hands committed changes to the uploader.
    /// Returns whether it handed them over.
    @discardableResult
    public func release(_ inode: Inode) async -> Bool {
        guard let entry = providing[inode] else { return false }
        let action: CopyLife.Action
        do {
            action = try entry.copy.released()
        } catch {
            logger.error("cannot record a release", metadata: ["inode": "\(inode)", "error": "\(error)"])
            return false
        }
        let needsUpload = perform(action, on: entry.copy)
        if needsUpload { await writeback.uploader?.enqueue(inode) }
        return needsUpload
    }

    /// After a restart, the copy the journal left, adopted with its recorded life.
    public func copyForUpload(of item: Item) -> LocalCopy? {
        if let entry = providing[item.inode] {
            return entry.copy.life.removed ? nil : entry.copy
        }
        guard !isShutDown, item.hasUnsyncedChanges, FileManager.default.fileExists(atPath: copyPath(for: item)) else { return nil }
        do {
            guard let life = try catalog.recordedLife(of: item.inode) else { return nil }
            let copy = try LocalCopy(adopting: copyPath(for: item), inode: item.inode, catalog: catalog, life: life)
            return register(Providing(copy: copy, fetch: nil)).copy
        } catch {
            logger.error("cannot reopen a pending local copy", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return nil
        }
    }

    /// How one upload attempt ended, as the uploader tells it.
    public enum UploadEnd: Sendable {
        /// The store holds commit `commit` as `version`, which becomes the copy's base.
        case stored(commit: UInt64, version: RemoteEntry)
        /// The store had moved on: the commit went up as `conflictCopy`; the item shows `storeVersion`.
        case keptAsConflict(commit: UInt64, conflictCopy: String, storeVersion: RemoteEntry?)
        /// The store said no: the commit is not sent again (nil: refused before a commit was taken).
        case refused(commit: UInt64?)
        /// It did not get through; the uploader tries again later.
        case failed(commit: UInt64?)
        /// The copy had nothing committed to send.
        case notNeeded
    }

    /// The one way back from the uploader: the copy takes the end of the attempt as one event,
    /// and the action it returns is carried out here. Returns true when a newer commit waits to be
    /// sent, and the caller queues it. Throws when the journal cannot take a confirmed upload
    /// (then the copy stays as it was, and the next attempt finds its own version on the store).
    @discardableResult
    public func uploadEnded(_ copy: LocalCopy, _ end: UploadEnd) throws(FSError) -> Bool {
        switch end {
        case .stored(let commit, let version):
            let base = copy.life.base
            let action = try copy.uploaded(commit, etag: version.etag)
            if let base { madeHere.withLock { $0.uploaded(copy.inode, over: base, as: version) } }
            return perform(action, on: copy)
        case .keptAsConflict(let commit, let conflictCopy, let storeVersion):
            return perform(try copy.conflictKept(commit, as: conflictCopy, storeVersion: storeVersion), on: copy)
        case .refused(let commit):
            let (action, unrecorded) = copy.uploadRefused(commit)
            if let unrecorded {
                logger.error("cannot record a refused upload", metadata: ["inode": "\(copy.inode)", "error": "\(unrecorded)"])
            }
            return perform(action, on: copy)
        case .failed(let commit):
            if let error = copy.uploadFailed(commit) {
                logger.error("cannot record a failed upload", metadata: ["inode": "\(copy.inode)", "error": "\(error)"])
            }
            return false
        case .notNeeded:
            guard providing[copy.inode]?.copy === copy else { return false }
            return perform(try copy.nothingToUpload(), on: copy)
        }
    }

    /// The store's version moved from `old` to `new` by docfs's own change of attributes: the
    /// catalog learns it, and a copy based on `old` follows, or its next upload would conflict
    /// with that change. The base is written by the copy that holds it, or, for a copy no
    /// `LocalCopy` holds, here on the actor, where none can begin meanwhile. `named`: the store's
    /// answer named `new` (else a stat found it, and it may be another client's).
    public func storeVersionChanged(_ inode: Inode, from old: ETag?, to new: ETag?, named: Bool) throws(FSError) {
        try catalog.recordVersion(of: inode, etag: new)
        guard let old, let new else { return }
        if named { madeHere.withLock { $0.moved(inode, from: old, to: new) } }
        guard let copy = providing[inode]?.copy else {
            try catalog.rebaseUnheldCopy(inode, from: old, to: new)
            return
        }
        guard copy.life.base == old else { return }
        logger.debug("a copy's base follows the store's new version", metadata: ["inode": "\(inode)", "from": "\(old.value)", "to": "\(new.value)"])
        try copy.rebase(from: old, to: new)
    }

    /// Around an attribute change that may give the content a new version (`VersionsBeingMade`).
    func versionMayMove(_ inode: Inode) { beingMade.began(inode) }

    func versionMoveEnded(_ inode: Inode) {
        for waiter in beingMade.ended(inode) { waiter.resume() }
    }

    /// Returns once no attribute change of `inode` is on its way to the store, or the caller's
    /// task is cancelled (a fetcher being stopped).
    func versionMovesSettled(_ inode: Inode) async {
        guard beingMade.isUnderWay(inode) else { return }
        let id = beingMade.newWaiter()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                if Task.isCancelled { return continuation.resume() }
                beingMade.wait(id, for: inode, continuation)
            }
        } onCancel: {
            Task { await self.withdrawWaiter(id) }
        }
    }

    private func withdrawWaiter(_ id: UInt64) { beingMade.withdraw(id)?.resume() }

    /// An open file stays readable whatever happens to its name (POSIX).
    public func completeStreams(where isAffected: (Inode) -> Bool) async {
        let sparse = providing.values.map(\.copy).filter { $0.isSparse && isAffected($0.inode) }
        for copy in sparse {
            do { try await copy.fetchRemaining() } catch {
                logger.warning("cannot fetch the rest of an open file before its name changes", metadata: ["inode": "\(copy.inode)", "error": "\(error)"])
            }
        }
    }

    /// A 404 at the old path would count the version as lost.
    public func followRenames(_ pathOf: (Inode) -> StorePath?) {
        for entry in providing.values where entry.copy.isBeingFilled {
            if let path = pathOf(entry.copy.inode) { entry.copy.retarget(to: path) }
        }
    }

    /// Dropped with their rows so the folder shows what the store has; copies in use stay.
    /// Returns whether any went.
    public func dropCopiesGoneFromStore(_ inodes: [Inode]) -> Bool {
        var dropped = false
        for inode in inodes {
            guard let item = try? catalog.item(inode), !item.onStore, item.state == .local else { continue }
            if let entry = providing[inode] {
                guard entry.copy.life.isIdle else { continue }
                evict(entry.copy)
            } else {
                // A pinned copy kept from an earlier mount, not adopted yet.
                do { try LocalCopy.evict(at: copyPath(for: item), of: inode, in: catalog) } catch {
                    logger.warning("cannot drop the row of a file the store no longer has", metadata: ["path": "\(item.path)", "error": "\(error)"])
                }
            }
            dropped = true
            logger.info("a local copy of a file the store no longer has went", metadata: ["path": "\(item.path)"])
        }
        return dropped
    }

    /// POSIX: an open copy lives on for its handles.
    public func itemRemoved(_ inode: Inode, item: Item) {
        if let entry = providing[inode] {
            do {
                _ = perform(try entry.copy.removedLocally(), on: entry.copy)
            } catch {
                logger.error("cannot record the removal of an open copy", metadata: ["inode": "\(inode)", "error": "\(error)"])
            }
        } else {
            unlink(copyPath(for: item))
        }
    }

    /// Copies with changes stay on disk for the next mount to upload.
    public func shutdown() {
        isShutDown = true
        for (_, entry) in providing {
            entry.fetch?.cancel()
            if entry.copy.life.staysAfterUnmount(complete: !entry.copy.isSparse) {
                entry.copy.close()
            } else {
                evict(entry.copy)
            }
        }
        providing.removeAll()
        idle.removeAll()
        presentCopies.withLock { $0.removeAll() }
    }

    public nonisolated func downloadProgress(of inode: Inode) -> (done: Int64, total: Int64)? {
        presentCopies.withLock { $0[inode] }?.downloadProgress
    }

    public nonisolated func downloadsUnderWay() -> [Inode] {
        presentCopies.withLock { $0 }.compactMap { $0.value.downloadProgress != nil ? $0.key : nil }.sorted()
    }

    /// Returns whether a commit waits to be uploaded: the caller queues it.
    func perform(_ action: CopyLife.Action, on copy: LocalCopy) -> Bool {
        switch action {
        case .evict:
            if retention.keepsReleasedCopies, !copy.life.removed, providing[copy.inode]?.copy === copy {
                keepIdle(copy)
            } else {
                evict(copy)
            }
            return false
        case .upload: return true
        case .none: return false
        }
    }

    /// How long a new open waits for the last release of an outdated copy.
    static let outdatedCopyRelease: Duration = .seconds(2)

    /// FUSE sends RELEASE after `close()` has returned, so a program that closes the handle that
    /// met ESTALE and opens the file again may come before that copy is let go: it waits for the
    /// release (`release` evicts the copy), then gets a copy of the store's version. A copy a
    /// program keeps open fails the open with ESTALE: joining it would show the old version's
    /// bytes, and fail the reads of the rest.
    private func awaitRelease(ofOutdated copy: LocalCopy) async throws(FSError) {
        let deadline = ContinuousClock.now + Self.outdatedCopyRelease
        while providing[copy.inode]?.copy === copy, !copy.life.isUnused {
            guard ContinuousClock.now < deadline, !Task.isCancelled else { throw .stale }
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    /// A kept copy serves only while it is still the store's version.
    private func reusable(_ copy: LocalCopy, for item: Item) -> Bool {
        let life = copy.life
        guard life.isIdle else { return true }
        if let base = life.base, base == item.etag { return true }
        logger.debug("a kept copy is not the store's version any more", metadata: ["path": "\(item.path)"])
        evict(copy)
        return false
    }

    /// A copy no one else holds goes, unless it holds changes the store lacks. The open given up
    /// counts as a release, but a copy still being fetched is dropped here.
    private func fetchFailed(_ inode: Inode, copy: LocalCopy) async {
        var action = CopyLife.Action.none
        do {
            action = try copy.released()
        } catch {
            logger.warning("cannot record an open given up", metadata: ["inode": "\(inode)", "error": "\(error)"])
        }
        if copy.life.isUnused, providing[inode]?.copy === copy {
            evict(copy)
        } else if action == .upload {
            // An upload that ended while this open waited left a newer commit for the last close.
            await writeback.uploader?.enqueue(inode)
        }
    }

    private func startProviding(_ opened: Item, intent: OpenIntent, mayFetch: Bool = true) throws(FSError) -> Providing {
        // The row as it is now: an upload that ended meanwhile moved the base version.
        guard let item = try catalog.item(opened.inode) else { throw .notFound }
        let path = copyPath(for: item)
        // Committed changes from before a restart: the copy on disk is the truth.
        if item.hasUnsyncedChanges, !item.hasUncommittedWrites, FileManager.default.fileExists(atPath: path),
           let life = try catalog.recordedLife(of: item.inode) {
            let copy = try LocalCopy(adopting: path, inode: item.inode, catalog: catalog, life: life)
            return register(Providing(copy: copy, fetch: nil))
        }
        let pinned = try catalog.isPinned(item.inode)
        if pinned, item.state == .local, intent != .empty, let base = item.baseEtag, base == item.etag,
           FileManager.default.fileExists(atPath: path), let life = try catalog.recordedLife(of: item.inode, pinned: true) {
            let copy = try LocalCopy(adopting: path, inode: item.inode, catalog: catalog, life: life)
            return register(Providing(copy: copy, fetch: nil))
        }
        let fetchNeeded = intent != .empty && item.onStore
        if fetchNeeded, !mayFetch { throw .fetchRefused(item.path.description) }
        if fetchNeeded { makeRoom(for: item.size) }
        // An upload of the empty copy meets any newer version as a conflict.
        var base = item.onStore ? item.etag : nil
        var writersVersion: RemoteEntry?
        if case .writer(let opened, let since) = intent, item.onStore {
            writersVersion = madeHere.withLock { $0.newest(of: item.inode, after: opened, since: since) }
            base = writersVersion?.etag
        }
        let life = CopyLife(content: fetchNeeded ? .fetching : .present, base: base, startedFromNothing: !item.onStore, pinned: pinned)
        let copy = try LocalCopy(path: path, inode: item.inode, catalog: catalog, life: life)
        try copy.begin()
        let streamed = intent.isStreamed && item.size > streaming.wholeFileLimit && item.etag != nil
        logger.debug("providing", metadata: ["path": "\(item.path)", "base": "\(life.base?.value ?? "-")", "fetch": "\(fetchNeeded)",
                                             "streamed": "\(streamed)"])
        guard fetchNeeded else { return register(Providing(copy: copy, fetch: nil)) }
        if case .cached(let entry) = intent, let version = entry.etag, version == item.etag, store.capabilities.hasRangeReads {
            return register(Providing(copy: copy, fetch: fetchedOnDemand(item, version: version, entry: entry, into: copy)))
        }
        if let opened = writersVersion, let version = opened.etag, opened.size > streaming.wholeFileLimit {
            return register(Providing(copy: copy, fetch: fetchedOnDemand(item, version: version, entry: opened, into: copy, learned: false)))
        }
        // Detached: the download must not hold up the provider's executor.
        let trouble = FetchTrouble()
        let fetch = Task.detached { [store, catalog, retry, streaming, logger] () async throws -> Void in
            do {
                let askedAt = Date().timeIntervalSince1970
                let entry = streamed
                    ? try await Self.fetchHead(of: item, into: copy, store: store, retry: retry, streaming: streaming, trouble: trouble, logger: logger,
                                               ownVersionMoves: { [weak self] in await self?.versionMovesSettled(item.inode) })
                    : try await Self.fetch(item, into: copy, store: store, retry: retry, trouble: trouble, logger: logger)
                try await Blocking.run { () throws(FSError) in try copy.fetched(entry, askedAt: askedAt) }
                if entry.etag != item.etag, item.etag != nil {
                    logger.info("content changed on the store since listing", metadata: ["path": "\(item.path)"])
                }
                logger.debug("provided", metadata: ["path": "\(item.path)", "bytes": "\(entry.size)", "sparse": "\(copy.isSparse)"])
            } catch is CancellationError {
                throw FSError.io("download of \(item.path) cancelled")
            } catch {
                logger.error("download failed", metadata: ["path": "\(item.path)", "error": "\(error)"])
                if let error = error as? StoreError { throw FSError(error) }
                throw error
            }
        }
        return register(Providing(copy: copy, fetch: fetch, trouble: trouble))
    }

    private static func fetch(_ item: Item, upTo limit: Int64? = nil, into copy: LocalCopy, store: any Store,
                              retry: RetryPolicy, trouble: FetchTrouble? = nil, logger: Logger) async throws -> RemoteEntry {
        let entry = try await retry.run({ () async throws(StoreError) -> RemoteEntry in
            let entry = try await store.read(item.path, range: limit.map { 0..<$0 }, ifMatch: nil, into: copy)
            try await confirmDownloadedVersion(entry, of: item, whole: limit == nil, store: store)
            return entry
        }, beforeRetry: { error in
            logger.info("retrying download", metadata: ["path": "\(item.path)", "error": "\(error)"])
            trouble?.record(error)
            copy.reset()
        })
        try Task.checkCancellation()
        let end = min(limit ?? entry.size, entry.size)
        guard copy.held.contains(0..<end) else {
            throw FSError.io("incomplete download of \(item.path): \(copy.held.count) of \(end) bytes")
        }
        try copy.setLength(entry.size)
        return entry
    }

    /// `learned`: the catalog takes `entry` (false for a writer's, which may be behind a listing).
    private func fetchedOnDemand(_ item: Item, version: ETag, entry: RemoteEntry, into copy: LocalCopy,
                                 learned: Bool = true) -> Task<Void, any Error>? {
        do throws(FSError) {
            try copy.setLength(entry.size)
            if entry.size > 0 {
                copy.attach(RangeFetcher(store: store, path: item.path, version: version, size: entry.size, fetched: 0,
                                         copy: copy, policy: streaming, retry: retry, logger: logger,
                                         ownVersionMoves: { [weak self] in await self?.versionMovesSettled(item.inode) }))
            }
            try copy.fetched(entry, learned: learned)
        } catch {
            logger.error("cannot prepare a local copy", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return Task { throw error }
        }
        logger.debug("provided without a fetch (the kernel caches this version)", metadata: ["path": "\(item.path)"])
        return nil
    }

    /// The head pins the version; a `RangeFetcher` fetches the rest on demand.
    private static func fetchHead(of item: Item, into copy: LocalCopy, store: any Store, retry: RetryPolicy,
                                  streaming: StreamingPolicy, trouble: FetchTrouble, logger: Logger,
                                  ownVersionMoves: @escaping @Sendable () async -> Void) async throws -> RemoteEntry {
        let entry = try await fetch(item, upTo: streaming.head, into: copy, store: store, retry: retry, trouble: trouble, logger: logger)
        let headEnd = min(streaming.head, entry.size)
        guard headEnd < entry.size else { return entry }
        guard let version = entry.etag else {
            // No version to pin ranges to: fetch the rest now, so no read mixes two versions.
            let rest = headEnd..<entry.size
            _ = try await retry.run { () async throws(StoreError) -> RemoteEntry in
                try await store.read(item.path, range: rest, ifMatch: nil, into: copy)
            }
            guard copy.held.contains(0..<entry.size) else {
                throw FSError.io("incomplete download of \(item.path): \(copy.held.count) of \(entry.size) bytes")
            }
            return entry
        }
        copy.attach(RangeFetcher(store: store, path: item.path, version: version, size: entry.size, fetched: headEnd,
                                 copy: copy, policy: streaming, retry: retry, logger: logger, ownVersionMoves: ownVersionMoves))
        return entry
    }

    private func register(_ entry: Providing) -> Providing {
        providing[entry.copy.inode] = entry
        presentCopies.withLock { $0[entry.copy.inode] = entry.copy }
        return entry
    }
}

/// Weak: the uploader holds the provider.
public final class Writeback: Sendable {
    private struct Target: @unchecked Sendable { weak var uploader: Uploader? }
    private let target = Mutex(Target())

    public func attach(_ uploader: Uploader) { target.withLock { $0.uploader = uploader } }
    var uploader: Uploader? { target.withLock { $0.uploader } }
}
