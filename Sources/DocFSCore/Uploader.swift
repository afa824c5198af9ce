import DocFSStore
import Foundation
import Logging

/// Sends changed local copies back to the store: File Provider's `itemChangedAtURL:`.
///
/// The journal is the catalog itself: an item whose latest commit (`committedSeq`) the store has
/// not confirmed (`uploadedSeq`) has changes the store does not have, committed before
/// `close()`/`fsync()` returned, and its local copy stays in the cache until an upload of that
/// commit is confirmed. After a crash the next mount finds those rows and calls `resumePending()`.
///
/// Uploads are conditional on the version the edit started from (`If-Match`), and new files
/// on nothing being there yet (`If-None-Match: *`). When the store has moved on, both versions
/// survive: the local one is uploaded next to it as `NAME (conflict YYYY-MM-DD HHMMSS).EXT`.
/// Transient failures (store down, timeouts, 5xx) are retried for as long as the mount lives,
/// with the waits reads use (`RetryPolicy.delay`: exponential backoff with full jitter, up to
/// `maximumBackoff`, and never sooner than a `Retry-After` the store sent). A permanent one
/// (the store refuses the upload: 400, 403, 413, a name it will not take) stops: the change
/// stays in the journal with the reason in `user.docfs.error`, is not sent again until it
/// changes (or the next mount), and `docfs unmount` keeps it in the recovery folder instead
/// of waiting for it. Metadata operations run `exclusively` on the
/// paths they touch, so a rename never races an upload to the old name, and an upload
/// elsewhere never holds them up.
/// Every upload sends a snapshot of one commit of the copy (`LocalCopy.startUpload`), never
/// the live file that writes may still change.
public actor Uploader {
    let store: any Store
    let catalog: Catalog
    let provider: Provider
    let logger: Logger
    /// New files sent while they are written, settled here (nil: the store cannot, or it is off).
    let streams: UploadStreams?
    private let maximumConcurrentUploads = 4
    /// The waits between tries of an upload that failed transiently (only its `delay` is used:
    /// a background upload has no caller whose patience ends, so no deadline).
    private let retryDelays: RetryPolicy
    private var jitter = SystemRandomNumberGenerator()

    private var queue: [Inode] = []
    private var queued: Set<Inode> = []
    /// Uploads under way: the path each one writes, and its task (cancelled when the uploader stops).
    var inFlight: [Inode: (path: StorePath, task: Task<Void, Never>)] = [:]
    /// Items an fsync waits for right now, with how many fsyncs wait: an attempt started
    /// meanwhile commits the copy's pending writes before its snapshot, so the fsync is not
    /// answered with nothing sent. Only while the fsync waits: once it has returned (also with
    /// a failure, the upload then waiting for a retry), writes no close or fsync handed over
    /// are never committed by the uploader, since they may be a state the user never meant to
    /// keep (an `O_TRUNC` not refilled yet).
    private var forced: [Inode: Int] = [:]
    /// What uploads sent whose answer never came (see `SentVersions`).
    var sent = SentVersions()
    /// Transient failures in a row of each item's upload (what its next wait grows from).
    private var failures: [Inode: Int] = [:]
    /// Until when the store asked us not to send an item's upload again (`Retry-After`): a new
    /// change meanwhile waits for the retry already due, which sends the latest commit.
    private var notBefore: [Inode: ContinuousClock.Instant] = [:]
    /// Namespace operations under way, with the paths they touch (see `exclusively`).
    var exclusiveHolders: [Int: [StorePath]] = [:]
    var nextHolder = 0
    var exclusiveWaiters: [CheckedContinuation<Void, Never>] = []
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    private var itemWaiters: [Inode: [CheckedContinuation<Void, Never>]] = [:]
    private var retryTasks: [Inode: Task<Void, Never>] = [:]
    /// Rounds in a row in which an item's folder was made again and its PUT still found none
    /// (see `keepWhereFoldersWent`).
    var folderRemakes: [Inode: Int] = [:]
    /// After this many such rounds the upload counts as refused: the store will not take it there.
    public static let maximumFolderRemakes = 3
    /// Items whose last upload the store refused for good, with why (see `refusedPrefix`).
    private var refused: [Inode: String] = [:]
    private var stopped = false

    /// How `user.docfs.error` (the catalog's upload error) begins for an upload the store
    /// refused for good: `docfs unmount` keeps such files rather than waiting for them.
    public static let refusedPrefix = "refused by the store: "

    /// The time conflict copies and conflict folders are named after.
    let clock: @Sendable () -> Date

    /// `clock` names conflict copies (tests stop it, so names do not depend on the second a run crosses).
    public init(store: any Store, catalog: Catalog, provider: Provider, maximumBackoff: Duration = .seconds(15),
                clock: @escaping @Sendable () -> Date = { Date() }, streams: UploadStreams? = nil, logger: Logger) {
        self.store = store
        self.streams = streams
        self.catalog = catalog
        self.provider = provider
        self.retryDelays = RetryPolicy(attempts: .max, initialDelay: .milliseconds(500), maximumDelay: maximumBackoff)
        self.clock = clock
        self.logger = logger
        // A stream that ended is settled by an attempt of its item (a completed one is the
        // commit's upload: nothing else queues it, since its copy says it is uploading).
        streams?.whenEnded { [weak self] inode in
            Task { await self?.enqueue(inode) }
        }
    }

    /// Queues every committed change left from before a restart (or a crash).
    public func resumePending() throws(FSError) {
        let pending = try catalog.itemsPendingUpload()
        if !pending.isEmpty {
            logger.info("resuming unsynced changes", metadata: ["count": "\(pending.count)"])
        }
        for item in pending { enqueue(item.inode) }
    }

    /// Queues an upload of `inode`'s copy.
    public func enqueue(_ inode: Inode) {
        guard !stopped else { return }
        if retryTasks[inode] != nil, let until = notBefore[inode], ContinuousClock.now < until { return }
        retryTasks.removeValue(forKey: inode)?.cancel()
        refused[inode] = nil
        if !queued.contains(inode) {
            queued.insert(inode)
            queue.append(inode)
        }
        startWork()
    }

    /// Uploads `inode` now, with every write made so far, and waits until the store has it (fsync).
    public func sync(_ inode: Inode) async throws(FSError) {
        guard !stopped else { throw Self.stoppedBeforeUpload }
        retryTasks.removeValue(forKey: inode)?.cancel()
        failures[inode] = nil
        notBefore[inode] = nil
        forced[inode, default: 0] += 1
        defer {
            let waiting = (forced[inode] ?? 1) - 1
            forced[inode] = waiting > 0 ? waiting : nil
        }
        enqueue(inode)
        while queued.contains(inode) || inFlight[inode] != nil {
            await withCheckedContinuation { itemWaiters[inode, default: []].append($0) }
            if retryTasks[inode] != nil {
                // It failed and waits for a retry: fsync reports the failure.
                let item = try catalog.item(inode)
                throw .io(item?.uploadError ?? "upload failed")
            }
        }
        if let reason = refused[inode] { throw .io(reason) }
        // Woken by the unmount (`stop`), which dropped the queue: the store may not have it.
        if stopped, try catalog.item(inode)?.hasUnsyncedChanges ?? false { throw Self.stoppedBeforeUpload }
    }

    /// Whether `inode` waits in the queue for a free upload slot.
    func isQueued(_ inode: Inode) -> Bool { queued.contains(inode) }

    /// What an fsync gets when the mount goes away before its upload ended: the change is in
    /// the journal, and the next mount sends it.
    static let stoppedBeforeUpload = FSError.io("unmounted before the upload ended; the next mount sends it")

    /// Waits until nothing is queued or uploading (or until every pending item is waiting
    /// for a retry, when `untilStalled` is true), or until the uploader stops.
    public func waitUntilIdle(untilStalled: Bool = false) async {
        while !stopped && !(queue.isEmpty && inFlight.isEmpty && (untilStalled || retryTasks.isEmpty) && streams?.hasCompletedUnsettled != true) {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
    }

    /// Forgets a pending upload (the item was removed).
    public func cancel(_ inode: Inode) {
        retryTasks.removeValue(forKey: inode)?.cancel()
        if queued.remove(inode) != nil { queue.removeAll { $0 == inode } }
        failures[inode] = nil
        notBefore[inode] = nil
        folderRemakes[inode] = nil
        refused[inode] = nil
        wakeItemWaiters(inode)
        wakeIdleWaitersIfIdle()
    }

    /// Stops retrying, starts nothing new and cancels the uploads under way (the mount is
    /// going away); pending changes stay in the journal. Returns once the cancelled uploads
    /// have ended: an attempt notices its cancellation at its next wait, and only then gives up
    /// its snapshot and records why it stopped, which nothing of this mount may still do once
    /// the next mount of the same cache has begun. An attempt that ignores its cancellation
    /// (a hung call) holds the unmount at most `patience` longer.
    public func stop(patience: Duration = .seconds(1)) async {
        stopped = true
        streams?.stop()
        // Those under way are cancelled: a cancelled upload leaves its change committed in the
        // journal, and the next mount sends it (one that reached the store meanwhile is found
        // there as its own version, not as a conflict).
        for upload in inFlight.values { upload.task.cancel() }
        for task in retryTasks.values { task.cancel() }
        retryTasks.removeAll()
        queue.removeAll()
        queued.removeAll()
        // An fsync waiting on an upload that will not run now is answered.
        for waiters in itemWaiters.values { for waiter in waiters { waiter.resume() } }
        itemWaiters.removeAll()
        wakeIdleWaitersIfIdle()
        guard !inFlight.isEmpty else { return }
        let deadline = ContinuousClock.now + patience
        let timer = Task { [weak self] in
            try? await Task.sleep(for: patience)
            await self?.wakeIdleWaiters()
        }
        defer { timer.cancel() }
        // Each ended upload wakes the idle waiters (`startWork`), stopped as the uploader is.
        while !inFlight.isEmpty && ContinuousClock.now < deadline {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
        if !inFlight.isEmpty {
            logger.warning("uploads cancelled by the unmount have not ended", metadata: ["count": "\(inFlight.count)"])
        }
    }

    // MARK: The work

    /// Whether `path` is one of `paths`, or above or below one of them.
    static func overlaps(_ path: StorePath, _ paths: [StorePath]) -> Bool {
        paths.contains { other in
            let (a, b) = path.components.count <= other.components.count ? (path, other) : (other, path)
            return zip(a.components, b.components).allSatisfy { $0.utf8.elementsEqual($1.utf8) }
        }
    }

    func startWork() {
        var index = 0
        while inFlight.count < maximumConcurrentUploads && index < queue.count {
            let inode = queue[index]
            guard inFlight[inode] == nil else { index += 1; continue }
            let path: StorePath
            do {
                guard let item = try catalog.item(inode) else {
                    queue.remove(at: index)
                    queued.remove(inode)
                    wakeItemWaiters(inode)
                    continue
                }
                path = item.path
            } catch {
                index += 1
                continue
            }
            let blocked = exclusiveHolders.values.contains { Uploader.overlaps(path, $0) }
            guard !blocked else { index += 1; continue }
            queue.remove(at: index)
            queued.remove(inode)
            inFlight[inode] = (path, Task { await self.upload(inode) })
        }
        wakeIdleWaitersIfIdle()
    }

    private func upload(_ inode: Inode) async {
        let outcome = await attempt(inode)
        inFlight[inode] = nil
        switch outcome {
        case .done:
            failures[inode] = nil
            folderRemakes[inode] = nil
        case .retryLater(let retryAfter):
            // A change saved during the attempt queued the item again: the retry sends it,
            // after the wait (an fsync's own attempt stays queued: it asked for one now).
            if forced[inode] == nil, queued.remove(inode) != nil { queue.removeAll { $0 == inode } }
            scheduleRetry(inode, retryAfter: retryAfter)
        case .refused:
            failures[inode] = nil
            folderRemakes[inode] = nil
        }
        for waiter in exclusiveWaiters { waiter.resume() }
        exclusiveWaiters.removeAll()
        wakeItemWaiters(inode)
        startWork()
    }

    /// A close handed over writes into a sparse copy whose holes could not be fetched then
    /// (`CopyLife.awaitingFill`): they are fetched now, from the version the copy started from,
    /// and the writes committed. If the store has another version now (or none there), the
    /// holes stay zeros and the upload may only create the file (`CopyLife.versionLost`): a
    /// conflict copy next to whatever stands there, which it never replaces. Every byte the
    /// user wrote is kept. Nil when the upload goes on.
    private func commitAfterFill(_ item: Item, _ copy: LocalCopy) async -> Outcome? {
        do {
            try await copy.fetchRemaining()
        } catch .stale, .notFound {
            do {
                let lost = try await copy.giveUpFetching()
                try copy.update { $0.versionLost() }
                logger.warning("the version a file was written into is gone from the store: what was not fetched of it stays zeros, in a new file or a conflict copy",
                               metadata: ["path": "\(item.path)", "bytes": "\(lost)"])
            } catch {
                return .retryLater(retryAfter: nil)
            }
        } catch {
            logger.info("cannot fetch the rest of a written file yet", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return .retryLater(retryAfter: nil)
        }
        do { try copy.commit() } catch { return await failed(item, copy, error) }
        return nil
    }

    /// `retryLater` carries the wait the store asked for (`Retry-After`), if it did.
    enum Outcome { case done, retryLater(retryAfter: Duration?), refused }

    private func attempt(_ inode: Inode) async -> Outcome {
        var item: Item
        do {
            guard let found = try catalog.item(inode) else { return .done }
            item = found
        } catch {
            logger.error("catalog unreadable for upload", metadata: ["inode": "\(inode)", "error": "\(error)"])
            return .retryLater(retryAfter: nil)
        }
        guard item.kind == .file else { return .done }
        guard let copy = await provider.copyForUpload(of: item) else {
            if item.hasUnsyncedChanges && !item.hasUncommittedWrites {
                logger.error("unsynced item has no local copy", metadata: ["path": "\(item.path)"])
            }
            return .done
        }
        if let stream = copy.takeStream() {
            // Sent while it was written: that may be all there is to do.
            await settle(stream, of: copy)
            guard copy.life.isDirty else { return .done }
            do {
                guard let found = try catalog.item(inode) else { return .done }
                item = found
            } catch {
                return .retryLater(retryAfter: nil)
            }
        }
        if copy.life.awaitingFill, let outcome = await commitAfterFill(item, copy) { return outcome }
        let snapshot = provider.snapshotPath(for: item)
        defer {
            UploadMeter.unwatch(snapshot)
            unlink(snapshot)
            copy.snapshotReleased()
        }
        let commit: UInt64
        do {
            let committingPending = forced[inode] != nil
            guard let started = try await Blocking.run({ () throws(FSError) -> UInt64? in
                try copy.startUpload(snapshotTo: snapshot, committingPending: committingPending)
            }) else {
                // Nothing committed to send: writes still open are sent after their close.
                await provider.uploadNotNeeded(copy)
                return .done
            }
            commit = started
            // `user.docfs.progress` follows the bytes the store reads from the snapshot.
            UploadMeter.watch(snapshot, total: copy.length)
        } catch {
            return await failed(item, copy, error)
        }
        let life = copy.life
        // An item the store does not have, and a new file (also once the store shows someone
        // else's file under its name: a conflict kept earlier), are only created; the rest is
        // conditional on the version the copy started from (a store without ETags gives none).
        let condition: WriteCondition = if !item.onStore || life.startedFromNothing { .mustNotExist }
            else if let base = life.base { .ifMatch(base) }
            else { .always }
        logger.debug("uploading", metadata: ["path": "\(item.path)", "commit": "\(commit)", "condition": "\(condition)"])
        do {
            // Mode and times go with the content to stores that carry them.
            guard let entry = try await writeUnlessFolderGone(item, from: snapshot, condition: condition) else {
                // A folder above it was deleted (or became a file) on the store meanwhile.
                return await keepWhereFoldersWent(item, copy, commit: commit, snapshot: snapshot)
            }
            let (confirmed, given) = await withAttributesChangedDuringUpload(of: item, copy, commit: commit, uploaded: entry,
                                                                             snapshot: snapshot)
            logger.debug("upload confirmed", metadata: ["path": "\(item.path)", "commit": "\(commit)", "etag": "\(confirmed.etag?.value ?? "-")"])
            sent.forget(inode)
            if try await provider.uploaded(copy, commit: commit, as: confirmed) {
                logger.info("uploaded", metadata: ["path": "\(item.path)", "bytes": "\(confirmed.size)"])
                await pushAttributesChanged(since: given)
            } else {
                // Committed again while uploading: the newer content goes next.
                enqueue(inode)
            }
            return .done
        } catch let error as StoreError {
            switch error {
            case .versionMismatch, .alreadyExists, .isADirectory:
                // Changed, created, or made a folder elsewhere meanwhile: ours goes next to it.
                return await keepBoth(item, copy, commit: commit, snapshot: snapshot)
            default:
                folderRemakes[item.inode] = nil  // "in a row": another failure breaks the run
                await rememberSent(snapshot, of: inode, ifItMayHaveArrived: error)
                return await failed(item, copy, error, commit: commit)
            }
        } catch {
            folderRemakes[item.inode] = nil
            return await failed(item, copy, error, commit: commit)
        }
    }

    /// Applies what a streamed upload did (see `StreamedUpload`) once it ended (cancelling it
    /// now, unless the commit it sends completed it): that commit is confirmed as an upload's
    /// would be, with the item's mode and times as an upload sends them; a stream cancelled or
    /// failed left nothing on the store, and the upload of the commit does it all.
    func settle(_ stream: StreamedUpload, of copy: LocalCopy) async {
        stream.abandon()
        let outcome = await stream.outcome()
        streams?.settled(stream)
        do throws(FSError) {
            switch outcome {
            case .stored(let entry, let commit):
                let (confirmed, given) = await withStoredAttributes(of: copy.inode, entry)
                do {
                    if try await provider.uploaded(copy, commit: commit, as: confirmed), let given {
                        await pushAttributesChanged(since: given)
                    }
                } catch {
                    // As an upload whose end the journal cannot take: the next attempt finds
                    // its own version on the store and settles with no conflict copy.
                    _ = copy.updateLettingTheJournalLag { if $0.uploading == commit { $0.uploadFailed() } }
                    enqueue(copy.inode)
                    throw error
                }
                sent.forget(copy.inode)
                logger.info("uploaded while written", metadata: ["path": "\(stream.path)", "bytes": "\(confirmed.size)"])
            case .failed(let error):
                logger.debug("a streamed upload did not complete: the file goes up from its copy",
                             metadata: ["path": "\(stream.path)", "error": "\(error)"])
                if let commit = stream.sealedCommit {
                    // The commit it was to complete goes up from the copy (a rename or unlink
                    // settling it has no attempt of its own to do that).
                    _ = copy.updateLettingTheJournalLag { if $0.uploading == commit { $0.uploadFailed() } }
                    enqueue(copy.inode)
                }
            }
        } catch {
            logger.warning("cannot record a streamed upload", metadata: ["path": "\(stream.path)", "error": "\(error)"])
        }
    }

    /// The item's mode and times, given to what a stream stored as an upload gives them
    /// (`Store.write(_:fromLocalFile:condition:attributes:)`), unless the store sent them with
    /// the content and they did not change since; the entry as the store has it then.
    private func withStoredAttributes(of inode: Inode, _ entry: RemoteEntry) async -> (RemoteEntry, given: Item?) {
        guard let item = try? catalog.item(inode) else { return (entry, nil) }
        if entry.mode != nil, entry.mode == item.mode, entry.owner == item.owner, entry.group == item.group { return (entry, item) }
        do {
            guard try await store.setAttributes(entry.path, item.storeAttributes) else { return (entry, nil) }
            return (entry.versionAfterAttributes(try await store.stat(entry.path)), item)
        } catch {
            logger.info("cannot give a streamed upload its attributes", metadata: ["path": "\(entry.path)", "error": "\(error)"])
            return (entry, nil)
        }
    }

    /// A chmod or utimensat while the upload was on its way changed the catalog only (the item
    /// was not on the store in its new form yet): the store gets them now, before the upload is
    /// recorded, so the version the copy is based on from then on is the one that carries them
    /// (on a store whose ETag follows the mtime, a later push would make the next upload a false
    /// conflict). A commit made meanwhile carries them with its own upload instead.
    ///
    /// The version read back after them is taken only when it is still the content this upload
    /// sent (`sameContent`): the attributes and the look are two requests after the write, and
    /// another client's version stored in between, taken as ours, would be the base the next
    /// upload overwrites unconditionally (model seed 600517).
    /// Returns the entry to record, and the item whose attributes the store was given.
    private func withAttributesChangedDuringUpload(of uploaded: Item, _ copy: LocalCopy, commit: UInt64,
                                                   uploaded entry: RemoteEntry, snapshot: String) async -> (RemoteEntry, given: Item) {
        guard copy.life.committed == commit, let now = try? catalog.item(uploaded.inode), !now.sameAttributes(as: uploaded)
        else { return (entry, uploaded) }
        do {
            // A store that carries no attributes has nothing more to be given.
            guard try await store.setAttributes(uploaded.path, now.storeAttributes) else { return (entry, now) }
            let after = try await store.stat(uploaded.path)
            guard await sameContent(after, as: entry, snapshot: snapshot) else {
                logger.info("the store took another version right after this upload: it is met as a conflict",
                            metadata: ["path": "\(uploaded.path)", "etag": "\(after.etag?.value ?? "-")"])
                return (entry, now)
            }
            return (after, now)
        } catch {
            logger.info("store did not take attributes", metadata: ["path": "\(uploaded.path)", "error": "\(error)"])
            return (entry, uploaded)
        }
    }

    /// A chmod or utimensat that came after the look above and before the upload was recorded
    /// saw the upload under way and left its attributes to it (`recordAttributes`): once the
    /// item is recorded clean, they go as any change of a clean item's attributes goes. (Its
    /// catalog write comes before this read, or its own look comes after the record and finds
    /// the item clean: one of the two sends them.)
    private func pushAttributesChanged(since given: Item) async {
        guard let now = try? catalog.item(given.inode), !now.hasUnsyncedChanges, !now.sameAttributes(as: given) else { return }
        await AttributeSync.push(now.storeAttributes, of: now, to: store, catalog: catalog, provider: provider, logger: logger)
    }

    /// Whether `after`, what the store showed of the item after this upload (`written`) and a
    /// change of its attributes, still holds the bytes of `snapshot`: the same version, or one of
    /// the same size whose bytes one GET finds identical (a store whose ETag follows the mtime
    /// names the attributes' change a new version).
    private func sameContent(_ after: RemoteEntry, as written: RemoteEntry, snapshot: String) async -> Bool {
        if after.etag != nil, after.etag == written.etag { return true }
        guard after.kind == .file, after.size == written.size, let comparison = try? SnapshotComparison(snapshot: snapshot),
              let read = try? await store.read(after.path, range: nil, ifMatch: after.etag, into: comparison) else { return false }
        return comparison.result(size: read.size).identical
    }

    /// A close while commit `commit` was on its way found an upload under way and queued
    /// nothing: whatever became of that attempt (kept as a conflict, kept where its folder went,
    /// refused), a newer commit goes next. Returns whether one was queued. (A successful upload
    /// learns the same from `Provider.uploaded`.)
    @discardableResult
    func queueCommitMadeMeanwhile(_ inode: Inode, _ copy: LocalCopy, after commit: UInt64) -> Bool {
        let life = copy.life
        guard life.isDirty, life.committed > commit, life.openCount == 0 else { return false }
        enqueue(inode)
        return true
    }

    /// `commit`: the commit the failed attempt sent, when it got that far.
    func failed(_ item: Item, _ copy: LocalCopy, _ error: any Error, commit: UInt64? = nil) async -> Outcome {
        if let error = error as? StoreError, Self.isPermanent(error) {
            let reason = Self.refusedPrefix + error.description
            logger.error("the store refused the upload; the change is kept, not sent again",
                         metadata: ["path": "\(item.path)", "error": "\(error)"])
            await provider.uploadFailed(copy)
            recordUploadError(of: item, reason, .refused)
            // A newer commit is other content than the one refused: it gets a try of its own.
            if let commit, queueCommitMadeMeanwhile(item.inode, copy, after: commit) { return .refused }
            refused[item.inode] = reason
            return .refused
        }
        let retryAfter = (error as? StoreError)?.retryAfter
        let trouble = UploadTrouble(retried: error)
        let error = (error as? FSError) ?? ((error as? StoreError).map(FSError.init) ?? .io("\(error)"))
        logger.warning("upload failed, will retry", metadata: ["path": "\(item.path)", "error": "\(error)"])
        await provider.uploadFailed(copy)
        recordUploadError(of: item, "\(error)", trouble)
        return .retryLater(retryAfter: retryAfter)
    }

    /// Keeps why `item`'s upload failed where `docfs status`, `user.docfs.error` and `docfs
    /// unmount` read it; a catalog that cannot take it is logged (the upload is retried anyway).
    private func recordUploadError(of item: Item, _ message: String, _ trouble: UploadTrouble) {
        do {
            try catalog.recordUploadError(of: item.inode, message, trouble: trouble)
        } catch {
            logger.error("cannot record an upload's failure", metadata: ["path": "\(item.path)", "error": "\(error)"])
        }
    }

    /// Whether the same upload can never succeed: the store said no to it (400, 403, 405, 409,
    /// 413, 414, a name it will not take: `StoreError.isPermanent`), rather than failing to
    /// answer (timeouts, 5xx, a connection that broke) or the local disk failing.
    static func isPermanent(_ error: StoreError) -> Bool {
        error.isPermanent
    }

    /// Tries `inode` again after the next wait of `retryDelays` (at least `retryAfter`).
    private func scheduleRetry(_ inode: Inode, retryAfter: Duration?) {
        guard !stopped else { return }
        let failed = (failures[inode] ?? 0) + 1
        failures[inode] = failed
        let delay = retryDelays.delay(afterFailures: failed, retryAfter: retryAfter, using: &jitter)
        notBefore[inode] = retryAfter == nil ? nil : ContinuousClock.now + delay
        logger.debug("upload retry scheduled", metadata: ["inode": "\(inode)", "after": "\(delay)",
                                                         "retry-after": "\(retryAfter.map { "\($0)" } ?? "-")"])
        // One retry per item: a retry still waiting would clear this one's wait when it ran.
        retryTasks.removeValue(forKey: inode)?.cancel()
        retryTasks[inode] = Task {
            try? await Task.sleep(for: delay)
            guard !Task.isCancelled else { return }
            self.retryDue(inode)
        }
    }

    private func retryDue(_ inode: Inode) {
        retryTasks[inode] = nil
        notBefore[inode] = nil
        enqueue(inode)
    }

    private func wakeItemWaiters(_ inode: Inode) {
        for waiter in itemWaiters.removeValue(forKey: inode) ?? [] { waiter.resume() }
    }

    private func wakeIdleWaitersIfIdle() {
        guard stopped || (queue.isEmpty && inFlight.isEmpty) else { return }
        wakeIdleWaiters()
    }

    private func wakeIdleWaiters() {
        for waiter in idleWaiters { waiter.resume() }
        idleWaiters.removeAll()
    }
}
