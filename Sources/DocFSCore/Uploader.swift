import DocFSStore
import Foundation
import Logging
import Synchronization

/// Sends changed copies back. The catalog is the journal: an unconfirmed commit keeps its copy,
/// and the next mount resumes it. Uploads are conditional on the base version, so a change
/// elsewhere yields a conflict copy; each sends a snapshot of one commit, never the live file.
public actor Uploader {
    /// Off the cooperative pool: its methods call the catalog and the file system synchronously.
    private nonisolated let executor = QueueExecutor(label: "docfs.uploader")
    public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

    let store: any Store
    let catalog: Catalog
    let provider: Provider
    let logger: Logger
    let streams: UploadStreams?
    /// Thirty-two small uploads at once (they cost round trips, not bandwidth: a new file on a
    /// WebDAV server with locks is a LOCK, a PROPFIND and a PUT one after the other, and with
    /// sixteen, the store had a `cp -r` of 1,000 small files at 20 ms about two seconds after
    /// cp returned; with thirty-two, under a tenth of a second), of which at most four large
    /// ones (they share the bandwidth however many there are).
    static let maximumConcurrentUploads = 32
    static let maximumConcurrentLargeUploads = 4
    static let largeUpload: Int64 = 1 << 20
    /// Only `delay` is used: a background upload has no caller whose patience ends.
    let retryDelays: RetryPolicy
    var jitter = SystemRandomNumberGenerator()

    private var queue: [Inode] = []
    private var queued: Set<Inode> = []
    var inFlight: [Inode: (path: StorePath, large: Bool, task: Task<Void, Never>)] = [:]
    /// Items fsyncs wait for: an attempt then commits pending writes first. Otherwise writes no
    /// close or fsync handed over are never committed (the user may not mean to keep them).
    private var forced: [Inode: Int] = [:]
    var sent = SentVersions()
    private var failures: [Inode: Int] = [:]
    /// `Retry-After` per item: a new change waits for the retry already due.
    private var notBefore: [Inode: ContinuousClock.Instant] = [:]
    var exclusiveHolders: [Int: [StorePath]] = [:]
    var nextHolder = 0
    var exclusiveWaiters: [CheckedContinuation<Void, Never>] = []
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    private var itemWaiters: [Inode: [CheckedContinuation<Void, Never>]] = [:]
    private var retryTasks: [Inode: Task<Void, Never>] = [:]
    var folderRemakes: [Inode: Int] = [:]
    /// After this many such rounds the upload counts as refused.
    public static let maximumFolderRemakes = 3
    private var refused: [Inode: String] = [:]
    var stopped = false
    /// Folders this mount made, and when (`Uploader+FoldersAhead.swift`).
    var foldersMade: [Inode: ContinuousClock.Instant] = [:]
    /// Attributes set on folders being made, pushed once they are made.
    var attributesWhenMade: [Inode: StoreAttributes] = [:]
    /// Folders made ahead whose MKCOL has not ended.
    var foldersAhead: [Inode: Task<Void, Never>] = [:]
    /// Their paths, also for a look without entering the actor (a listing asks before each folder).
    nonisolated let aheadPaths = Mutex<[Inode: StorePath]>([:])
    /// `stop` returned: the catalog and the snapshots' paths may be the next mount's. An upload
    /// that hung past the unmount's patience and ends after all records nothing and removes
    /// nothing; its change is still committed, and the next mount sends it (and knows its own
    /// bytes should the old attempt have reached the store).
    private(set) var handedOver = false

    /// How the error shown for a refused upload begins (`user.docfs.error`, `docfs status`);
    /// `docfs unmount` tells refused files by their `uploadTrouble`, not by this text.
    static let refusedPrefix = "refused by the store: "

    let clock: @Sendable () -> Date

    public init(store: any Store, catalog: Catalog, provider: Provider, maximumBackoff: Duration = .seconds(15),
                clock: @escaping @Sendable () -> Date = { Date() }, streams: UploadStreams? = nil, logger: Logger) {
        self.store = store
        self.streams = streams
        self.catalog = catalog
        self.provider = provider
        self.retryDelays = RetryPolicy(attempts: .max, initialDelay: .milliseconds(500), maximumDelay: maximumBackoff)
        self.clock = clock
        self.logger = logger
        // An ended stream is settled by an attempt of its item (nothing else queues a completed one).
        streams?.whenEnded { [weak self] inode in
            Task { await self?.enqueue(inode) }
        }
    }

    public func resumePending() throws(FSError) {
        let pending = try catalog.itemsPendingUpload()
        if !pending.isEmpty {
            logger.info("resuming unsynced changes", metadata: ["count": "\(pending.count)"])
        }
        for item in pending { enqueue(item.inode) }
    }

    /// A change at rest the uploader already holds (waiting to retry, or refused) stays so.
    func enqueueUnlessHeld(_ inode: Inode) {
        guard retryTasks[inode] == nil, refused[inode] == nil else { return }
        enqueue(inode)
    }

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

    /// fsync: uploads now and waits until the store has it.
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
                let item = try catalog.item(inode)
                throw .io(item?.uploadError ?? "upload failed")
            }
        }
        if let reason = refused[inode] { throw .io(reason) }
        // Woken by `stop`, which dropped the queue: the store may not have it.
        if stopped, try catalog.item(inode)?.hasUnsyncedChanges ?? false { throw Self.stoppedBeforeUpload }
    }

    func isQueued(_ inode: Inode) -> Bool { queued.contains(inode) }

    static let stoppedBeforeUpload = FSError.io("unmounted before the upload ended; the next mount sends it")

    /// `untilStalled`: until all pending items wait for a retry.
    public func waitUntilIdle(untilStalled: Bool = false) async {
        while !stopped && !(queue.isEmpty && inFlight.isEmpty && foldersAhead.isEmpty && (untilStalled || retryTasks.isEmpty)
                            && streams?.hasCompletedUnsettled != true) {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
    }

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

    /// Returns once cancelled uploads have ended: nothing of this mount may touch their snapshots
    /// once the next mount began. A hung call holds it at most `patience` longer.
    public func stop(patience: Duration = .seconds(1)) async {
        stopped = true
        streams?.stop()
        // A cancelled upload's change stays committed for the next mount.
        for upload in inFlight.values { upload.task.cancel() }
        for task in retryTasks.values { task.cancel() }
        retryTasks.removeAll()
        queue.removeAll()
        queued.removeAll()
        for waiters in itemWaiters.values { for waiter in waiters { waiter.resume() } }
        itemWaiters.removeAll()
        wakeIdleWaitersIfIdle()
        let deadline = ContinuousClock.now + patience
        let timer = Task { [weak self] in
            try? await Task.sleep(for: patience)
            await self?.wakeIdleWaiters()
        }
        defer { timer.cancel() }
        while !inFlight.isEmpty && ContinuousClock.now < deadline {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
        if !inFlight.isEmpty {
            logger.warning("uploads cancelled by the unmount have not ended", metadata: ["count": "\(inFlight.count)"])
        }
        handedOver = true
    }

    // MARK: The work

    static func overlaps(_ path: StorePath, _ paths: [StorePath]) -> Bool {
        paths.contains { other in
            let (a, b) = path.components.count <= other.components.count ? (path, other) : (other, path)
            return zip(a.components, b.components).allSatisfy { $0.utf8.elementsEqual($1.utf8) }
        }
    }

    func startWork() {
        var index = 0
        while inFlight.count < Self.maximumConcurrentUploads && index < queue.count {
            let inode = queue[index]
            guard inFlight[inode] == nil else { index += 1; continue }
            let found: Item?
            do { found = try catalog.item(inode) } catch {
                index += 1
                continue
            }
            guard let item = found else {
                queue.remove(at: index)
                queued.remove(inode)
                wakeItemWaiters(inode)
                continue
            }
            let (path, large) = (item.path, item.size >= Self.largeUpload)
            guard !exclusiveHolders.values.contains(where: { Uploader.overlaps(path, $0) }), !isBeingMade(atOrAbove: path),
                  !large || inFlight.values.count(where: \.large) < Self.maximumConcurrentLargeUploads else { index += 1; continue }
            queue.remove(at: index)
            queued.remove(inode)
            inFlight[inode] = (path, large, Task { await self.upload(inode) })
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
            // A change saved during the attempt queued the item again: the retry sends it.
            if forced[inode] == nil, queued.remove(inode) != nil { queue.removeAll { $0 == inode } }
            scheduleRetry(inode, retryAfter: retryAfter)
        }
        for waiter in exclusiveWaiters { waiter.resume() }
        exclusiveWaiters.removeAll()
        wakeItemWaiters(inode)
        startWork()
    }

    /// Fetches a sparse copy's holes from its base and commits; if the version is gone, holes stay
    /// zeros and only a conflict copy may be made. Nil when the upload goes on.
    private func commitAfterFill(_ item: Item, _ copy: LocalCopy) async -> Outcome? {
        do {
            try await copy.fetchRemaining()
        } catch .stale, .notFound {
            guard !handedOver else { return .done }
            do {
                let lost = try await copy.giveUpFetching()
                try copy.versionLost()
                logger.warning("the version a file was written into is gone from the store: what was not fetched of it stays zeros, in a new file or a conflict copy",
                               metadata: ["path": "\(item.path)", "bytes": "\(lost)"])
            } catch {
                return .retryLater(retryAfter: nil)
            }
        } catch {
            logger.info("cannot fetch the rest of a written file yet", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return .retryLater(retryAfter: nil)
        }
        // Opened again since: the copy may hold another writer's unfinished writes, never a
        // version to send. The last release commits it (and sends it); an fsync or a hard link
        // asks for what is there now.
        let waitForClose = forced[item.inode] == nil
        guard !handedOver else { return .done }
        do {
            if try !copy.commit(unlessOpen: waitForClose), waitForClose, copy.life.openCount > 0 {
                _ = try await ended(copy, .notNeeded)
                return .done
            }
        } catch {
            return await failed(item, copy, error)
        }
        return nil
    }

    enum Outcome { case done, retryLater(retryAfter: Duration?) }

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
            store.uploadMeter?.unwatch(snapshot)
            if !handedOver {
                unlink(snapshot)
                copy.snapshotReleased()
            }
        }
        let commit: UInt64
        do {
            // The snapshot's path is the next mount's once this one let go.
            guard !handedOver else { return .done }
            let committingPending = forced[inode] != nil
            guard let started = try await Blocking.run({ () throws(FSError) -> UInt64? in
                try copy.startUpload(snapshotTo: snapshot, committingPending: committingPending)
            }) else {
                // Nothing committed: writes still open are sent after their close.
                try await ended(copy, .notNeeded)
                return .done
            }
            commit = started
            store.uploadMeter?.watch(snapshot, total: copy.length)
        } catch {
            return await failed(item, copy, error)
        }
        let life = copy.life
        // Items the store lacks and new files are only created; the rest is conditional on the base.
        let condition: WriteCondition = if !item.onStore || life.startedFromNothing { .mustNotExist }
            else if let base = life.base { .ifMatch(base) }
            else { .always }
        logger.debug("uploading", metadata: ["path": "\(item.path)", "commit": "\(commit)", "condition": "\(condition)"])
        do {
            guard let entry = try await writeUnlessFolderGone(item, from: snapshot, condition: condition) else {
                return await keepWhereFoldersWent(item, copy, commit: commit, snapshot: snapshot)
            }
            let (confirmed, given) = await withAttributesChangedDuringUpload(of: item, copy, commit: commit, uploaded: entry,
                                                                             snapshot: snapshot)
            logger.debug("upload confirmed", metadata: ["path": "\(item.path)", "commit": "\(commit)", "etag": "\(confirmed.etag?.value ?? "-")"])
            sent.forget(inode)
            if try await !ended(copy, .stored(commit: commit, version: confirmed)) {
                logger.info("uploaded", metadata: ["path": "\(item.path)", "bytes": "\(confirmed.size)"])
                await pushAttributesChanged(since: given)
            }
            return .done
        } catch StoreError.versionMismatch, StoreError.alreadyExists, StoreError.isADirectory {
            // Changed elsewhere meanwhile: ours goes next to it.
            return await keepBoth(item, copy, commit: commit, snapshot: snapshot)
        } catch {
            folderRemakes[item.inode] = nil  // "in a row": another failure breaks the run
            await rememberSent(snapshot, of: inode, ifItMayHaveArrived: error)
            return await failed(item, copy, error, commit: commit)
        }
    }

    /// A completed stream's commit is confirmed as an upload's; a failed one left nothing, and the
    /// commit's upload does it all.
    func settle(_ stream: StreamedUpload, of copy: LocalCopy) async {
        stream.abandon()
        let outcome = await stream.outcome()
        streams?.settled(stream)
        do throws(FSError) {
            switch outcome {
            case .stored(let entry, let commit):
                let (confirmed, given) = await withStoredAttributes(of: copy.inode, entry)
                do {
                    if try await !ended(copy, .stored(commit: commit, version: confirmed)), let given {
                        await pushAttributesChanged(since: given)
                    }
                } catch {
                    // As an upload whose end the journal cannot take: the next attempt finds its own version.
                    await ended(copy, failing: commit)
                    enqueue(copy.inode)
                    throw error
                }
                sent.forget(copy.inode)
                logger.info("uploaded while written", metadata: ["path": "\(stream.path)", "bytes": "\(confirmed.size)"])
            case .failed(let error):
                logger.debug("a streamed upload did not complete: the file goes up from its copy",
                             metadata: ["path": "\(stream.path)", "error": "\(error)"])
                if let commit = stream.sealedCommit {
                    // A rename or unlink settling it has no attempt of its own: the copy's upload sends the commit.
                    await ended(copy, failing: commit)
                    enqueue(copy.inode)
                }
            }
        } catch {
            logger.warning("cannot record a streamed upload", metadata: ["path": "\(stream.path)", "error": "\(error)"])
        }
    }

    private func withStoredAttributes(of inode: Inode, _ entry: RemoteEntry) async -> (RemoteEntry, given: Item?) {
        guard let item = try? catalog.item(inode) else { return (entry, nil) }
        if entry.mode != nil, entry.mode == item.mode, entry.owner == item.owner, entry.group == item.group { return (entry, item) }
        do {
            guard let version = entry.etag else {
                guard try await store.setAttributes(entry.path, item.storeAttributes) else { return (entry, nil) }
                return (entry.versionAfterAttributes(try await store.stat(entry.path)), item)
            }
            // Only on the version just streamed, and only the version that change made is ours.
            guard case .kept(let made) = try await store.setAttributes(entry.path, item.storeAttributes, onVersion: version)
            else { return (entry, nil) }
            let now = try await store.stat(entry.path)
            guard let made else { return (entry.versionAfterAttributes(now), item) }
            var ours = now.etag == made ? entry.versionAfterAttributes(now) : entry
            ours.etag = made
            return (ours, item)
        } catch {
            logger.info("cannot give a streamed upload its attributes", metadata: ["path": "\(entry.path)", "error": "\(error)"])
            return (entry, nil)
        }
    }

    /// A chmod or utimensat during the upload reaches the store before the upload is recorded, so
    /// the base carries them (else mtime-based ETags make a false conflict). The version read back
    /// is taken only if it holds our content: another client's must not become the base.
    private func withAttributesChangedDuringUpload(of uploaded: Item, _ copy: LocalCopy, commit: UInt64,
                                                   uploaded entry: RemoteEntry, snapshot: String) async -> (RemoteEntry, given: Item) {
        guard copy.life.committed == commit, let now = try? catalog.item(uploaded.inode), !now.sameAttributes(as: uploaded)
        else { return (entry, uploaded) }
        do {
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

    /// A chmod between the look above and the record: one of the two sends its attributes.
    private func pushAttributesChanged(since given: Item) async {
        guard let now = try? catalog.item(given.inode), !now.hasUnsyncedChanges, !now.sameAttributes(as: given) else { return }
        await AttributeSync.push(now.storeAttributes, of: now, to: store, provider: provider, logger: logger)
    }

    /// The same version, or identical bytes (an mtime-based ETag renames an attribute change).
    private func sameContent(_ after: RemoteEntry, as written: RemoteEntry, snapshot: String) async -> Bool {
        if after.etag != nil, after.etag == written.etag { return true }
        guard after.kind == .file, after.size == written.size, let comparison = try? SnapshotComparison(snapshot: snapshot),
              let read = try? await store.read(after.path, range: nil, ifMatch: after.etag, into: comparison) else { return false }
        return comparison.result(size: read.size).identical
    }

    /// Tells the provider how the attempt ended, and queues the newer commit it says waits.
    /// Returns whether one was queued. Throws when the journal cannot take the end.
    @discardableResult
    func ended(_ copy: LocalCopy, _ end: Provider.UploadEnd) async throws(FSError) -> Bool {
        guard !handedOver else { return false }
        guard try await provider.uploadEnded(copy, end) else { return false }
        enqueue(copy.inode)
        return true
    }

    /// `refused`: the store said no, and the commit is not sent again. Returns whether a newer
    /// commit was queued.
    @discardableResult
    func ended(_ copy: LocalCopy, failing commit: UInt64?, refused: Bool = false) async -> Bool {
        do {
            return try await ended(copy, refused ? .refused(commit: commit) : .failed(commit: commit))
        } catch {
            logger.error("cannot record the end of an upload", metadata: ["inode": "\(copy.inode)", "error": "\(error)"])
            return false
        }
    }

    func failed(_ item: Item, _ copy: LocalCopy, _ error: any Error, commit: UInt64? = nil) async -> Outcome {
        guard !handedOver else { return .done }
        if let error = error as? StoreError, error.isPermanent {
            let reason = Self.refusedPrefix + error.description
            logger.error("the store refused the upload; the change is kept, not sent again",
                         metadata: ["path": "\(item.path)", "error": "\(error)"])
            recordUploadError(of: item, reason, .refused)
            // A newer commit is other content than the one refused: it gets a try of its own.
            if await !ended(copy, failing: commit, refused: true) { refused[item.inode] = reason }
            return .done
        }
        let retryAfter = (error as? StoreError)?.retryAfter
        let trouble = UploadTrouble(retried: error)
        let error = (error as? FSError) ?? ((error as? StoreError).map(FSError.init) ?? .io("\(error)"))
        logger.warning("upload failed, will retry", metadata: ["path": "\(item.path)", "error": "\(error)"])
        await ended(copy, failing: commit)
        recordUploadError(of: item, "\(error)", trouble)
        return .retryLater(retryAfter: retryAfter)
    }

    private func recordUploadError(of item: Item, _ message: String, _ trouble: UploadTrouble) {
        do {
            try catalog.recordUploadError(of: item.inode, message, trouble: trouble)
        } catch {
            logger.error("cannot record an upload's failure", metadata: ["path": "\(item.path)", "error": "\(error)"])
        }
    }

    private func scheduleRetry(_ inode: Inode, retryAfter: Duration?) {
        guard !stopped else { return }
        let failed = (failures[inode] ?? 0) + 1
        failures[inode] = failed
        let delay = retryDelays.delay(afterFailures: failed, retryAfter: retryAfter, using: &jitter)
        notBefore[inode] = retryAfter == nil ? nil : ContinuousClock.now + delay
        logger.debug("upload retry scheduled", metadata: ["inode": "\(inode)", "after": "\(delay)",
                                                         "retry-after": "\(retryAfter.map { "\($0)" } ?? "-")"])
        // One retry per item: a waiting retry would clear this one's wait when it ran.
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
        guard stopped || (queue.isEmpty && inFlight.isEmpty && foldersAhead.isEmpty) else { return }
        wakeIdleWaiters()
    }

    private func wakeIdleWaiters() {
        for waiter in idleWaiters { waiter.resume() }
        idleWaiters.removeAll()
    }
}
