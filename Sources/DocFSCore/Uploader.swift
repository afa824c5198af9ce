import DocFSStore
import Foundation
import Logging

/// Sends changed local copies back to the store: File Provider's `itemChangedAtURL:`.
///
/// The journal is the catalog itself: an item in state `modified` has changes the store does
/// not have, committed before `close()`/`fsync()` returned, and its local copy stays in the
/// cache until an upload of its latest generation is confirmed. After a crash the next mount
/// finds those rows and calls `resumePending()`.
///
/// Uploads are conditional on the version the edit started from (`If-Match`), and new files
/// on nothing being there yet (`If-None-Match: *`). When the store has moved on, both versions
/// survive: the local one is uploaded next to it as `NAME (conflict YYYY-MM-DD HHMMSS).EXT`.
/// Transient failures (store down, timeouts, 5xx) are retried with backoff for as long as the
/// mount lives. Metadata operations run `exclusively`, so a rename never races an upload to
/// the old name.
public actor Uploader {
    private let store: any Store
    private let catalog: Catalog
    private let provider: Provider
    private let logger: Logger
    private let maximumConcurrentUploads = 4
    private let maximumBackoff: Duration

    private var queue: [Inode] = []
    private var queued: Set<Inode> = []
    private var inFlight: Set<Inode> = []
    private var backoff: [Inode: Duration] = [:]
    private var exclusiveHolders = 0
    private var exclusiveWaiters: [CheckedContinuation<Void, Never>] = []
    private var idleWaiters: [CheckedContinuation<Void, Never>] = []
    private var itemWaiters: [Inode: [CheckedContinuation<Void, Never>]] = [:]
    private var retryTasks: [Inode: Task<Void, Never>] = [:]

    public init(store: any Store, catalog: Catalog, provider: Provider, maximumBackoff: Duration = .seconds(15), logger: Logger) {
        self.store = store
        self.catalog = catalog
        self.provider = provider
        self.maximumBackoff = maximumBackoff
        self.logger = logger
    }

    /// Queues every change left from before a restart (or a crash).
    public func resumePending() throws(FSError) {
        let pending = try catalog.items(in: [.modified, .uploading])
        if !pending.isEmpty {
            logger.info("resuming unsynced changes", metadata: ["count": "\(pending.count)"])
        }
        for item in pending { enqueue(item.inode) }
    }

    /// Queues an upload of `inode`'s copy.
    public func enqueue(_ inode: Inode) {
        retryTasks.removeValue(forKey: inode)?.cancel()
        if !queued.contains(inode) {
            queued.insert(inode)
            queue.append(inode)
        }
        startWork()
    }

    /// Uploads `inode` now and waits until the store has its current content (fsync).
    public func sync(_ inode: Inode) async throws(FSError) {
        retryTasks.removeValue(forKey: inode)?.cancel()
        backoff[inode] = nil
        enqueue(inode)
        while queued.contains(inode) || inFlight.contains(inode) {
            await withCheckedContinuation { itemWaiters[inode, default: []].append($0) }
            if retryTasks[inode] != nil {
                // It failed and waits for a retry: fsync reports the failure.
                let item = try catalog.item(inode)
                throw .io(item?.uploadError ?? "upload failed")
            }
        }
    }

    /// Waits until nothing is queued or uploading (or until every pending item is waiting
    /// for a retry, when `untilStalled` is true).
    public func waitUntilIdle(untilStalled: Bool = false) async {
        while !(queue.isEmpty && inFlight.isEmpty && (untilStalled || retryTasks.isEmpty)) {
            await withCheckedContinuation { idleWaiters.append($0) }
        }
    }

    /// Runs a metadata operation with no upload in flight and none starting meanwhile.
    public func exclusively<T: Sendable>(_ body: @Sendable () async throws(FSError) -> T) async throws(FSError) -> T {
        exclusiveHolders += 1
        while !inFlight.isEmpty {
            await withCheckedContinuation { exclusiveWaiters.append($0) }
        }
        defer {
            exclusiveHolders -= 1
            startWork()
        }
        return try await body()
    }

    /// Forgets a pending upload (the item was removed).
    public func cancel(_ inode: Inode) {
        retryTasks.removeValue(forKey: inode)?.cancel()
        if queued.remove(inode) != nil { queue.removeAll { $0 == inode } }
        backoff[inode] = nil
        wakeItemWaiters(inode)
        wakeIdleWaitersIfIdle()
    }

    /// Stops retrying (the mount is going away); pending changes stay in the journal.
    public func stop() {
        for task in retryTasks.values { task.cancel() }
        retryTasks.removeAll()
        wakeIdleWaitersIfIdle()
    }

    // MARK: The work

    private func startWork() {
        while exclusiveHolders == 0 && inFlight.count < maximumConcurrentUploads, let index = queue.firstIndex(where: { !inFlight.contains($0) }) {
            let inode = queue.remove(at: index)
            queued.remove(inode)
            inFlight.insert(inode)
            Task { await self.upload(inode) }
        }
        wakeIdleWaitersIfIdle()
    }

    private func upload(_ inode: Inode) async {
        let outcome = await attempt(inode)
        inFlight.remove(inode)
        switch outcome {
        case .done:
            backoff[inode] = nil
        case .retryLater:
            scheduleRetry(inode)
        }
        if inFlight.isEmpty {
            for waiter in exclusiveWaiters { waiter.resume() }
            exclusiveWaiters.removeAll()
        }
        wakeItemWaiters(inode)
        startWork()
    }

    private enum Outcome { case done, retryLater }

    private func attempt(_ inode: Inode) async -> Outcome {
        let item: Item
        do {
            guard let found = try catalog.item(inode) else { return .done }
            item = found
        } catch {
            logger.error("catalog unreadable for upload", metadata: ["inode": "\(inode)", "error": "\(error)"])
            return .retryLater
        }
        guard item.kind == .file else { return .done }
        guard let (path, generation) = await provider.beginUpload(of: item) else {
            if item.hasUnsyncedChanges {
                logger.error("unsynced item has no local copy", metadata: ["path": "\(item.path)"])
            }
            return .done
        }
        let condition: WriteCondition = item.onStore ? (item.etag.map(WriteCondition.ifMatch) ?? .always) : .mustNotExist
        do {
            try catalog.setState(of: inode, to: .uploading)
            // Mode and times go with the content to stores that carry them.
            let entry = try await store.write(item.path, fromLocalFile: path, condition: condition,
                                              attributes: StoreAttributes(mode: item.mode, modified: item.modified))
            try catalog.recordUpload(of: inode, etag: entry.etag, state: .local)
            if await provider.uploadFinished(item, generation: generation) {
                logger.info("uploaded", metadata: ["path": "\(item.path)", "bytes": "\(entry.size)"])
                await pushAttributesChangedDuringUpload(of: item)
            } else {
                // Written to again while uploading: the newer content goes next.
                try catalog.setState(of: inode, to: .modified)
                enqueue(inode)
            }
            return .done
        } catch let error as StoreError {
            switch error {
            case .versionMismatch, .alreadyExists:
                return await keepBoth(item, localFile: path, generation: generation)
            default:
                return await failed(item, FSError(error))
            }
        } catch let error as FSError {
            return await failed(item, error)
        } catch {
            return await failed(item, .io("\(error)"))
        }
    }

    /// A chmod or utimensat while the upload was on its way changed the catalog only (the item
    /// was not on the store in its new form yet): the store gets them now.
    private func pushAttributesChangedDuringUpload(of uploaded: Item) async {
        guard let now = try? catalog.item(uploaded.inode), now.mode != uploaded.mode || now.modified != uploaded.modified else { return }
        await AttributeSync.push(StoreAttributes(mode: now.mode, modified: now.modified), of: now, to: store, catalog: catalog, logger: logger)
    }

    private func failed(_ item: Item, _ error: FSError) async -> Outcome {
        logger.warning("upload failed, will retry", metadata: ["path": "\(item.path)", "error": "\(error)"])
        try? catalog.setState(of: item.inode, to: .modified)
        try? catalog.recordUploadError(of: item.inode, "\(error)")
        await provider.uploadPaused(item.inode)
        return .retryLater
    }

    /// The store changed since the edit began: upload ours as a conflict copy, show theirs.
    private func keepBoth(_ item: Item, localFile: String, generation: UInt64) async -> Outcome {
        guard let parentPath = item.path.parent, let parent = item.parent else {
            return await failed(item, .invalidArgument)
        }
        do {
            let (conflictName, kept) = try await uploadConflictCopy(of: item, in: parentPath, from: localFile)
            _ = try? catalog.createItem(in: parent, name: conflictName, kind: .file, size: kept.size, modified: Timestamp(seconds: kept.modified),
                                        etag: kept.etag, mode: item.mode, state: .placeholder, onStore: true)
            if await provider.isOpen(item.inode) {
                try catalog.recordConflictWhileOpen(of: item.inode, conflictCopy: conflictName)
            } else {
                let theirs: RemoteEntry?
                do { theirs = try await store.stat(item.path) } catch .notFound { theirs = nil }
                try catalog.recordConflict(of: item.inode, storeVersion: theirs, conflictCopy: conflictName)
            }
            await provider.uploadFinished(item, generation: generation, discardLocalCopy: true)
            logger.warning("conflict: the store changed while this file was edited; both versions kept",
                           metadata: ["path": "\(item.path)", "conflict copy": "\(conflictName)"])
            return .done
        } catch let error as StoreError {
            return await failed(item, FSError(error))
        } catch let error as FSError {
            return await failed(item, error)
        } catch {
            return await failed(item, .io("\(error)"))
        }
    }

    /// Uploads `localFile` next to `item` under the first free conflict name: two conflicts in
    /// the same second get "… 2", "… 3", so a kept copy is never replaced.
    private func uploadConflictCopy(of item: Item, in directory: StorePath, from localFile: String) async throws(StoreError) -> (String, RemoteEntry) {
        let now = Date()
        for attempt in 1...100 {
            let name = ConflictName.make(for: item.name, at: now, attempt: attempt)
            do throws(StoreError) {
                return (name, try await store.write(try directory.appending(name), fromLocalFile: localFile, condition: .mustNotExist))
            } catch .alreadyExists {
                continue
            }
        }
        throw .alreadyExists(item.path)
    }

    private func scheduleRetry(_ inode: Inode) {
        let delay = min((backoff[inode] ?? .milliseconds(250)) * 2, maximumBackoff)
        backoff[inode] = delay
        retryTasks[inode] = Task {
            try? await Task.sleep(for: delay)
            guard !Task.isCancelled else { return }
            self.retryDue(inode)
        }
    }

    private func retryDue(_ inode: Inode) {
        retryTasks[inode] = nil
        enqueue(inode)
    }

    private func wakeItemWaiters(_ inode: Inode) {
        for waiter in itemWaiters.removeValue(forKey: inode) ?? [] { waiter.resume() }
    }

    private func wakeIdleWaitersIfIdle() {
        guard queue.isEmpty && inFlight.isEmpty else { return }
        for waiter in idleWaiters { waiter.resume() }
        idleWaiters.removeAll()
    }
}

/// `report (conflict 2026-11-22 061530).pdf`: the name a local version is kept under when the
/// store changed meanwhile. Dot files and names without an extension get the suffix at the end.
public enum ConflictName {
    public static func make(for name: String, at date: Date, attempt: Int = 1) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone.current
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        var stamp = String(format: "%04d-%02d-%02d %02d%02d%02d", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
        if attempt > 1 { stamp += " \(attempt)" }
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            return "\(name[..<dot]) (conflict \(stamp))\(name[dot...])"
        }
        return "\(name) (conflict \(stamp))"
    }
}
