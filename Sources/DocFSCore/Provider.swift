import DocFSStore
import Foundation
import Logging
import Synchronization

/// Provides and evicts local copies: File Provider's `startProvidingItemAtURL:` and
/// `stopProvidingItemAtURL:`.
///
/// The first `open()` of a file creates its local copy and fetches the content; concurrent
/// opens of the same item share that one copy and that one fetch. An open that truncates,
/// or a new file, gets an empty copy without any download. Each successful open is matched
/// by one `release()`. What happens to a copy is decided by its `CopyLife` (held and recorded
/// by the `LocalCopy`); the provider keeps the copies by inode and carries out the actions:
/// fetching, evicting, and handing copies with committed changes to the uploader.
///
/// The provider is an actor: its map is touched only on its executor, and the network work
/// happens in a detached task it awaits, never on a caller's thread.
public actor Provider {
    private let store: any Store
    let catalog: Catalog
    private let cacheDirectory: String
    private let retry: RetryPolicy
    private let streaming: StreamingPolicy
    /// How long an opener waits for its content (`--io-timeout`) before it gets `ETIMEDOUT`.
    private let ioTimeout: Duration?
    let logger: Logger
    var providing: [Inode: Providing] = [:]
    var isShutDown = false
    /// How long released clean copies stay (`--evict-delay`, `--cache-max`).
    let retention: RetentionPolicy
    /// Clean copies nobody uses that the retention policy keeps, with when each was released
    /// (the least recently released go first when `cacheMax` needs room).
    var idle: [Inode: ContinuousClock.Instant] = [:]

    /// Files up to this size are fetched whole at open; larger ones are streamed.
    public nonisolated var wholeFileLimit: Int64 { streaming.wholeFileLimit }

    /// Where copies holding changes go on their last release (the uploader, once wired).
    public nonisolated let writeback = Writeback()

    /// Copies by inode, readable without hopping onto the actor (for `st_blocks`, `stat` sizes).
    public nonisolated let presentCopies = Mutex<[Inode: LocalCopy]>([:])

    struct Providing {
        var copy: LocalCopy
        var fetch: Task<Void, any Error>
        /// The last failure the fetch met and is retrying after: what an opener that stops
        /// waiting is told (a store that cannot be reached is `EHOSTDOWN`, not a timeout).
        var trouble = FetchTrouble()
    }

    /// The last transient failure a fetch is retrying after.
    final class FetchTrouble: Sendable {
        private let last = Mutex<StoreError?>(nil)
        func record(_ error: StoreError) { last.withLock { $0 = error } }
        var error: StoreError? { last.withLock { $0 } }
    }

    /// How an open wants the content.
    public enum OpenIntent: Sendable, Equatable {
        /// Every byte of the current content, fetched if it is not local (a writer's open:
        /// only a complete copy may be changed and uploaded).
        case content
        /// The current content for reading: a large file is streamed (its head now, the rest
        /// by ranges as reads ask for it; see `StreamingPolicy`), a small one fetched whole.
        case streamed
        /// For reading, with nothing fetched at open: the store still has this version (just
        /// asked) and the kernel still caches pages of it (`keep_cache`), so most reads never
        /// reach docfs. Those that do fetch what they need by ranges pinned to that version (a
        /// small file whole, at its first read); a newer version on the store fails them with
        /// `ESTALE`, as for a streamed file.
        case cached(RemoteEntry)
        /// Empty (O_TRUNC, a new file): no download.
        case empty
        /// A writer's open from outside, of the version `opened` describes: the one whose size
        /// the kernel was given, from which the program computes its writes (an append's offset,
        /// a patch, a truncate). A small file is fetched whole now, as for `.streamed`, so a
        /// conflict copy is always the whole edited file. A large one (`dd conv=notrunc` over a
        /// disk image, `touch`) gets a sparse copy of that version with nothing fetched: its
        /// reads fetch ranges of it, its commit what the writes did not cover, and a newer
        /// version on the store fails them with `ESTALE`, so the edit is kept as a conflict
        /// copy and never lands on a version it was not made against.
        case writer(opened: RemoteEntry)
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

    /// The path of an item's local copy in the cache directory.
    public nonisolated func copyPath(for item: Item) -> String {
        cacheDirectory + "/" + item.id
    }

    /// Where an upload's snapshot of an item's copy goes.
    public nonisolated func snapshotPath(for item: Item) -> String {
        cacheDirectory + "/" + item.id + ".upload"
    }

    /// Makes `item`'s content local (or joins the fetch already under way) and counts one
    /// more user of the copy. The opener waits at most `ioTimeout` (`ETIMEDOUT`), and only
    /// while its task is not cancelled (a FUSE interrupt: `EINTR`); when it gives up and no
    /// other opener holds the copy, the copy goes and its download is cancelled.
    /// `mayFetch` false (a caller under `--no-fetch-for`): only a copy that needs no download
    /// opens (one in use or kept, an adopted one, an empty one); else `fetchRefused`, and
    /// nothing is fetched. Decided here, on the actor, so no other open can slip in between.
    public func open(_ item: Item, intent: OpenIntent = .content, mayFetch: Bool = true) async throws(FSError) -> LocalCopy {
        guard item.kind == .file else { throw item.isDirectory ? .isADirectory : .invalidArgument }
        guard !isShutDown else { throw .io("the mount is going away") }
        let entry: Providing
        if let existing = providing[item.inode], reusable(existing.copy, for: item) {
            // A writer needs every byte: a sparse copy would fetch the rest.
            if !mayFetch, intent == .content, existing.copy.isSparse { throw .fetchRefused(item.path.description) }
            idle[item.inode] = nil
            entry = existing
        } else {
            entry = try startProviding(item, intent: intent, mayFetch: mayFetch)
        }
        try entry.copy.update { $0.opened() }
        do {
            let fetch = entry.fetch
            let timedOut = { @Sendable [ioTimeout] in Self.gaveUp(on: item, after: ioTimeout, trouble: entry.trouble) }
            // A reader's open waits for a head or a small file; a writer's for the whole file.
            let fetchedAtOpen = intent.isStreamed ? min(item.size, streaming.wholeFileLimit) : item.size
            try await CallerWait.run(limit: ioTimeout.map { Self.wholeTransferLimit($0, bytes: fetchedAtOpen) }, timeout: timedOut) { () throws(FSError) in
                do { try await fetch.value } catch { throw (error as? FSError) ?? .io("\(error)") }
            }
            switch intent {
            case .content: try await complete(entry.copy, of: item, trouble: entry.trouble)
            case .empty: await entry.copy.stopFetching()
            case .streamed, .cached, .writer: break
            }
        } catch {
            // This opener never got a handle: give its count back.
            fetchFailed(item.inode, copy: entry.copy)
            throw error
        }
        return entry.copy
    }

    /// Fetches every byte a sparse copy of `item` lacks (none a write set), before a commit or a
    /// truncate (only a complete copy is committed and uploaded). The caller waits as an opener does: at most
    /// `--io-timeout` plus a second per MiB of the file, and only while its task is not
    /// cancelled (`EINTR`); the fetch of what it gave up on goes on for the next one who asks.
    public func complete(_ copy: LocalCopy, of item: Item) async throws(FSError) {
        guard copy.isBeingFilled else { return }
        try await complete(copy, of: item, trouble: providing[item.inode]?.trouble ?? FetchTrouble())
    }

    private func complete(_ copy: LocalCopy, of item: Item, trouble: FetchTrouble) async throws(FSError) {
        let timedOut = { @Sendable [ioTimeout] in Self.gaveUp(on: item, after: ioTimeout, trouble: trouble) }
        // A writer waits for every byte: its limit grows with the file.
        try await CallerWait.run(limit: ioTimeout.map { Self.wholeTransferLimit($0, bytes: item.size) },
                                 timeout: timedOut) { () throws(FSError) in try await copy.fetchRemaining() }
    }

    /// What an opener that waited `--io-timeout` for the content of `item` is told: the store
    /// cannot be reached (`EHOSTDOWN`) if that is what the fetch keeps retrying after, else a
    /// timeout (`ETIMEDOUT`: the store accepts the request but does not deliver).
    private static func gaveUp(on item: Item, after limit: Duration?, trouble: FetchTrouble) -> FSError {
        if case .unreachable(let message) = trouble.error { return .storeUnreachable(message) }
        return .timedOut("no content of \(item.path) within \(limit.map { "\($0)" } ?? "the limit")")
    }

    /// How long a wait for `bytes` bytes may take: the io timeout, plus a second per MiB (a
    /// store slower than 1 MiB/s is treated as stalled for a whole-file wait).
    static func wholeTransferLimit(_ ioTimeout: Duration, bytes: Int64) -> Duration {
        ioTimeout + .seconds(max(0, bytes) >> 20)
    }

    /// One user let go. The last one evicts the copy (or keeps it: pinned, or by the retention
    /// policy) or, when it holds committed changes, hands it to the uploader, which keeps it
    /// until the store confirms them. Every release comes here, whoever lets go last (a
    /// pinned file's download can share its copy with a writer that closed first).
    @discardableResult
    public func release(_ inode: Inode) async -> ReleaseOutcome {
        guard let entry = providing[inode] else { return .notPresent }
        let action: CopyLife.Action
        do {
            action = try entry.copy.update { $0.released() }
        } catch {
            logger.error("cannot record a release", metadata: ["inode": "\(inode)", "error": "\(error)"])
            return .stillOpen
        }
        let outcome = perform(action, on: entry.copy)
        if outcome == .needsUpload { await writeback.uploader?.enqueue(inode) }
        return outcome
    }

    /// The copy the uploader should send for `item`: the one in use, or (after a restart) the
    /// one the journal left in the cache, adopted with the life the journal recorded. Nil when
    /// there is nothing local to send.
    public func copyForUpload(of item: Item) -> LocalCopy? {
        if let entry = providing[item.inode] {
            return entry.copy.life.removed ? nil : entry.copy
        }
        guard !isShutDown, item.hasUnsyncedChanges, FileManager.default.fileExists(atPath: copyPath(for: item)) else { return nil }
        do {
            guard let life = try catalog.recordedLife(of: item.inode) else { return nil }
            let copy = try LocalCopy(adopting: copyPath(for: item), inode: item.inode, catalog: catalog, life: life)
            providing[item.inode] = Providing(copy: copy, fetch: Task {})
            presentCopies.withLock { $0[item.inode] = copy }
            return copy
        } catch {
            logger.error("cannot reopen a pending local copy", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return nil
        }
    }

    /// The store confirmed commit `commit` of `copy` as `entry`. Returns whether nothing newer
    /// was committed meanwhile (writes still open are sent after their own close).
    @discardableResult
    public func uploaded(_ copy: LocalCopy, commit: UInt64, as entry: RemoteEntry) throws(FSError) -> Bool {
        _ = perform(try copy.uploaded(commit, etag: entry.etag), on: copy)
        let life = copy.life
        return life.removed || life.committed == life.uploaded
    }

    /// The store had moved on; commit `commit` of `copy` is on the store as `conflictCopy`.
    public func conflictKept(_ copy: LocalCopy, commit: UInt64, conflictCopy: String, storeVersion: RemoteEntry?) throws(FSError) {
        _ = perform(try copy.conflictKept(commit, as: conflictCopy, storeVersion: storeVersion), on: copy)
    }

    /// The store gave the item a new version without a new content (attributes set): a copy
    /// based on the old version is based on the new one, or its next upload would conflict.
    public func storeVersionChanged(_ inode: Inode, from old: ETag?, to new: ETag?) {
        guard let copy = providing[inode]?.copy, let old, let new, copy.life.base == old else { return }
        logger.debug("a copy's base follows the store's new version", metadata: ["inode": "\(inode)", "from": "\(old.value)", "to": "\(new.value)"])
        copy.rebase(from: old, to: new)
        do { try copy.update { $0.rebased(from: old, to: new) } } catch {
            logger.warning("cannot record a copy's new base", metadata: ["inode": "\(inode)", "error": "\(error)"])
        }
    }

    /// Fetches the rest of every streamed (sparse) copy whose item `isAffected` says is about
    /// to be renamed or removed on the store: its ranges could no longer be read from there,
    /// and an open file stays readable whatever happens to its name (POSIX). A failed fetch is
    /// left to the copy's readers, which get its error.
    public func completeStreams(where isAffected: (Inode) -> Bool) async {
        let sparse = providing.values.map(\.copy).filter { $0.isSparse && isAffected($0.inode) }
        for copy in sparse {
            do { try await copy.fetchRemaining() } catch {
                logger.warning("cannot fetch the rest of an open file before its name changes", metadata: ["inode": "\(copy.inode)", "error": "\(error)"])
            }
        }
    }

    /// A rename on the store moved items: every copy still being filled reads its ranges from
    /// its item's path now (`pathOf`). The rename fetched the rest of them first
    /// (`completeStreams`), but a fetch that failed then must not ask the old path later: a
    /// 404 there would count the version as lost.
    public func followRenames(_ pathOf: (Inode) -> StorePath?) {
        for entry in providing.values where entry.copy.isBeingFilled {
            if let path = pathOf(entry.copy.inode) { entry.copy.retarget(to: path) }
        }
    }

    /// A listing found `inodes` gone from the store (deleted there, or another kind now) while
    /// they had clean copies: each copy no one uses goes now, pinned or kept idle, with its
    /// row (as at any eviction of an item not on the store), so the folder shows what the
    /// store has once the enumerator lists it again. A copy in
    /// use stays for its handles (POSIX): unpinned, it goes at its last release, as it always
    /// did; pinned, at the next listing of its folder. One holding changes goes up through the
    /// uploader, which recreates the file. Returns whether any went.
    public func dropCopiesGoneFromStore(_ inodes: [Inode]) -> Bool {
        var dropped = false
        for inode in inodes {
            guard let item = try? catalog.item(inode), !item.onStore, item.state == .local else { continue }
            // An eviction: it removes the row of an item not on the store with the copy.
            if let entry = providing[inode] {
                guard entry.copy.life.isIdle else { continue }
                idle[inode] = nil
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

    /// The upload could not finish (it will be retried): keep the copy.
    public func uploadFailed(_ copy: LocalCopy) {
        // Also when the catalog cannot record it (a full disk): the attempt is over, and the
        // next one must be able to start once there is space again.
        if let error = copy.updateLettingTheJournalLag({ $0.uploadFailed() }) {
            logger.error("cannot record a failed upload", metadata: ["inode": "\(copy.inode)", "error": "\(error)"])
        }
    }

    /// Nothing was sent (nothing committed to send): a copy nobody uses goes.
    public func uploadNotNeeded(_ copy: LocalCopy) {
        guard let entry = providing[copy.inode], entry.copy === copy else { return }
        let life = copy.life
        if life.isUnused, life.content == .present, !life.pinned {
            _ = perform(.evict, on: copy)
        }
    }

    /// The item was unlinked. An open copy lives on for its handles (POSIX), nothing is uploaded.
    public func itemRemoved(_ inode: Inode, item: Item) {
        if let entry = providing[inode] {
            do {
                _ = perform(try entry.copy.update { $0.removedLocally() }, on: entry.copy)
            } catch {
                // The copy lives on for its handles as it was; the journal did not take the removal.
                logger.error("cannot record the removal of an open copy", metadata: ["inode": "\(inode)", "error": "\(error)"])
            }
        } else {
            unlink(copyPath(for: item))
        }
    }

    /// Evicts every clean local copy and closes the others, whose files stay for the next
    /// mount to upload: the mount is going away.
    public func shutdown() {
        isShutDown = true
        for (_, entry) in providing {
            entry.fetch.cancel()
            let life = entry.copy.life
            // A pinned complete copy stays for the next mount (the catalog keeps it `local`).
            if life.isDirty || (life.pinned && life.content == .present && !entry.copy.isSparse && !life.removed) {
                entry.copy.close()
            } else {
                evict(entry.copy)
            }
        }
        providing.removeAll()
        idle.removeAll()
        presentCopies.withLock { $0.removeAll() }
    }

    /// Bytes done and total of the download filling `inode`'s copy, if one runs.
    public nonisolated func downloadProgress(of inode: Inode) -> (done: Int64, total: Int64)? {
        presentCopies.withLock { $0[inode] }?.downloadProgress
    }

    /// The files whose content is coming down now: whole at open, or streamed by ranges (a
    /// streamed copy is `local` in the catalog from its first bytes on).
    public nonisolated func downloadsUnderWay() -> [Inode] {
        presentCopies.withLock { $0 }.compactMap { $0.value.downloadProgress != nil ? $0.key : nil }.sorted()
    }

    // MARK: Private

    func perform(_ action: CopyLife.Action, on copy: LocalCopy) -> ReleaseOutcome {
        switch action {
        case .evict:
            if retention.keepsReleasedCopies, !copy.life.removed, providing[copy.inode]?.copy === copy {
                keepIdle(copy)
                return .kept
            }
            evict(copy)
            return .evicted
        case .upload:
            return .needsUpload
        case .none:
            let life = copy.life
            if life.openCount > 0 { return .stillOpen }
            if life.pinned, !life.isDirty, life.uploading == nil { return .kept }
            return life.uploading != nil ? .uploadInFlight : .stillOpen
        }
    }

    /// Whether an existing copy can serve a new open of `item`: one in use always does (opens
    /// share a copy); one kept after its release only while it is still the store's version
    /// (else it goes, and the open fetches the new one).
    private func reusable(_ copy: LocalCopy, for item: Item) -> Bool {
        let life = copy.life
        guard life.isIdle else { return true }
        if let base = life.base, base == item.etag { return true }
        logger.debug("a kept copy is not the store's version any more", metadata: ["path": "\(item.path)"])
        idle[item.inode] = nil
        evict(copy)
        return false
    }

    /// An opener gave up (its fetch failed or it stopped waiting): its count goes back, and a
    /// copy no one else holds goes, unless it holds changes the store does not have (an opener
    /// that joined a copy whose writes wait for their fill, as a pin's download does): those
    /// stay for their upload.
    private func fetchFailed(_ inode: Inode, copy: LocalCopy) {
        _ = try? copy.update { $0.openAbandoned() }
        let life = copy.life
        if life.isUnused, providing[inode]?.copy === copy {
            evict(copy)
        }
    }

    private func startProviding(_ opened: Item, intent: OpenIntent, mayFetch: Bool = true) throws(FSError) -> Providing {
        // The row as it is now, not as the caller read it before hopping here: an upload that
        // finished and evicted meanwhile moved its version, which a new copy must start from.
        guard let item = try catalog.item(opened.inode) else { throw .notFound }
        let path = copyPath(for: item)
        // Committed changes from before a restart: the copy on disk is the truth.
        if item.hasUnsyncedChanges, !item.hasUncommittedWrites, FileManager.default.fileExists(atPath: path),
           let life = try catalog.recordedLife(of: item.inode) {
            let copy = try LocalCopy(adopting: path, inode: item.inode, catalog: catalog, life: life)
            return register(Providing(copy: copy, fetch: Task {}))
        }
        let pinned = try catalog.isPinned(item.inode)
        // A pinned copy kept from before (a remount), still the store's version: no download.
        if pinned, item.state == .local, intent != .empty, let base = item.baseEtag, base == item.etag,
           FileManager.default.fileExists(atPath: path), let life = try catalog.recordedLife(of: item.inode, pinned: true) {
            let copy = try LocalCopy(adopting: path, inode: item.inode, catalog: catalog, life: life)
            return register(Providing(copy: copy, fetch: Task {}))
        }
        let fetchNeeded = intent != .empty && item.onStore
        if fetchNeeded, !mayFetch { throw .fetchRefused(item.path.description) }
        if fetchNeeded { makeRoom(for: item.size) }
        // The version an empty copy replaces is the one the catalog knows (a writer's: the one
        // it opened); an upload of it meets any newer one as a conflict.
        var base = item.onStore ? item.etag : nil
        if case .writer(let opened) = intent, item.onStore { base = opened.etag }
        let life = CopyLife(content: fetchNeeded ? .fetching : .present, base: base, startedFromNothing: !item.onStore, pinned: pinned)
        let copy = try LocalCopy(path: path, inode: item.inode, catalog: catalog, life: life)
        try copy.begin()
        let streamed = intent.isStreamed && item.size > streaming.wholeFileLimit && item.etag != nil
        logger.debug("providing", metadata: ["path": "\(item.path)", "base": "\(life.base?.value ?? "-")", "fetch": "\(fetchNeeded)",
                                             "streamed": "\(streamed)"])
        guard fetchNeeded else {
            // No download: O_TRUNC, or a file created here whose copy is gone (nothing to fetch).
            return register(Providing(copy: copy, fetch: Task {}))
        }
        if case .cached(let entry) = intent, let version = entry.etag, version == item.etag, store.capabilities.hasRangeReads {
            return register(Providing(copy: copy, fetch: fetchedOnDemand(item, version: version, entry: entry, into: copy)))
        }
        if case .writer(let opened) = intent, let version = opened.etag, opened.size > streaming.wholeFileLimit {
            return register(Providing(copy: copy, fetch: fetchedOnDemand(item, version: version, entry: opened, into: copy, learned: false)))
        }
        // Detached: the download must not run on (and hold up) the provider's executor.
        let trouble = FetchTrouble()
        let fetch = Task.detached { [store, catalog, retry, streaming, logger] () async throws -> Void in
            do {
                let askedAt = Date().timeIntervalSince1970
                let entry = streamed
                    ? try await Self.fetchHead(of: item, into: copy, store: store, retry: retry, streaming: streaming, trouble: trouble, logger: logger)
                    : try await Self.fetch(item, into: copy, store: store, retry: retry, trouble: trouble, logger: logger)
                try copy.fetched(entry, askedAt: askedAt)
                if entry.etag != item.etag, item.etag != nil {
                    logger.info("content changed on the store since listing", metadata: ["path": "\(item.path)"])
                }
                logger.debug("provided", metadata: ["path": "\(item.path)", "bytes": "\(entry.size)", "sparse": "\(copy.isSparse)"])
            } catch let error as StoreError {
                logger.error("download failed", metadata: ["path": "\(item.path)", "error": "\(error)"])
                throw FSError(error)
            } catch is CancellationError {
                throw FSError.io("download of \(item.path) cancelled")
            } catch {
                logger.error("download failed", metadata: ["path": "\(item.path)", "error": "\(error)"])
                throw error
            }
        }
        return register(Providing(copy: copy, fetch: fetch, trouble: trouble))
    }

    /// Downloads `item` into `copy`, all of it or its first `upTo` bytes, in one read, and sizes
    /// the copy to the item. A partial download is never presented as the file.
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

    /// Makes `copy` a sparse copy of `item` at `version` that reads fill (`OpenIntent.cached`),
    /// without asking the store for anything now. Returns the "fetch" the opener awaits: done,
    /// or failed (the opener's failure path evicts the copy, as for a failed download).
    /// `learned`: the store answered `entry` just now, and the catalog takes it as the item's
    /// version; false for a writer's (`OpenIntent.writer`), which is only what the catalog
    /// said at its open, and may be behind a listing that ran since.
    private func fetchedOnDemand(_ item: Item, version: ETag, entry: RemoteEntry, into copy: LocalCopy,
                                 learned: Bool = true) -> Task<Void, any Error> {
        do throws(FSError) {
            try copy.setLength(entry.size)
            if entry.size > 0 {
                copy.attach(RangeFetcher(store: store, path: item.path, version: version, size: entry.size, fetched: 0,
                                         copy: copy, policy: streaming, retry: retry, logger: logger))
            }
            try copy.fetchedOnDemand(version, entry: entry, learned: learned)
        } catch {
            logger.error("cannot prepare a local copy", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return Task { throw error }
        }
        logger.debug("provided without a fetch (the kernel caches this version)", metadata: ["path": "\(item.path)"])
        return Task {}
    }

    /// Downloads the head of a large `item`, which pins its version and tells its size, and
    /// leaves the rest to a `RangeFetcher` that fetches it as reads ask for it.
    private static func fetchHead(of item: Item, into copy: LocalCopy, store: any Store, retry: RetryPolicy,
                                  streaming: StreamingPolicy, trouble: FetchTrouble, logger: Logger) async throws -> RemoteEntry {
        let entry = try await fetch(item, upTo: streaming.head, into: copy, store: store, retry: retry, trouble: trouble, logger: logger)
        let headEnd = min(streaming.head, entry.size)
        guard headEnd < entry.size else { return entry }
        guard let version = entry.etag else {
            // No version to pin ranges to: the rest now, so that no read mixes two versions
            // of which it could not tell.
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
                                 copy: copy, policy: streaming, retry: retry, logger: logger))
        return entry
    }

    private func register(_ entry: Providing) -> Providing {
        providing[entry.copy.inode] = entry
        presentCopies.withLock { $0[entry.copy.inode] = entry.copy }
        return entry
    }

}

extension Provider.OpenIntent {
    /// Fetched as a reader's open fetches: a large file by ranges, a small one whole at open.
    var isStreamed: Bool {
        if case .writer = self { return true }
        return self == .streamed
    }
}

/// The uploader as the provider knows it: weakly, since the uploader holds the provider.
public final class Writeback: Sendable {
    private struct Target: @unchecked Sendable { weak var uploader: Uploader? }
    private let target = Mutex(Target())

    public func attach(_ uploader: Uploader) { target.withLock { $0.uploader = uploader } }
    var uploader: Uploader? { target.withLock { $0.uploader } }
}

/// What a release did: callers (and logs) can tell "kept because in use" from "gone".
public enum ReleaseOutcome: Sendable, Equatable {
    /// The copy is gone; the item is a placeholder again.
    case evicted
    /// Other handles still use the copy.
    case stillOpen
    /// The copy holds changes: it stays until the uploader has sent them.
    case needsUpload
    /// An upload of the copy is under way; it is evicted when that ends.
    case uploadInFlight
    /// Nobody uses the copy and it stays: pinned, or kept by the retention policy.
    case kept
    /// There was no copy.
    case notPresent
}
