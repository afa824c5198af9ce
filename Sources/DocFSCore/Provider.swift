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
/// by one `release()`; the last release evicts the copy and the item is a placeholder again —
/// unless the copy has changes the store does not have yet: then the uploader gets it, and
/// the copy is evicted only once the store confirmed the upload (`uploadFinished`).
///
/// The provider is an actor: its bookkeeping is touched only on its executor, and the network
/// work happens in a detached task it awaits, never on a caller's thread.
public actor Provider {
    private let store: any Store
    private let catalog: Catalog
    private let cacheDirectory: String
    private let retry: RetryPolicy
    private let logger: Logger
    private var providing: [Inode: Providing] = [:]

    /// Copies by inode, readable without hopping onto the actor (for `st_blocks`, `stat` sizes).
    public nonisolated let presentCopies = Mutex<[Inode: LocalCopy]>([:])

    private struct Providing {
        var copy: LocalCopy
        var openCount: Int
        var fetch: Task<Void, any Error>
        /// The generation the store has (after a download or a confirmed upload).
        var syncedGeneration: UInt64
        /// Whether an upload of this copy is queued or under way.
        var uploadPending = false
        /// The item was unlinked while open: nothing to upload, evict on last release.
        var removed = false
    }

    /// How an open wants the content.
    public enum OpenIntent: Sendable {
        /// The current content, fetched if it is not local.
        case content
        /// Empty (O_TRUNC, a new file): no download.
        case empty
    }

    public init(store: any Store, catalog: Catalog, cacheDirectory: String, retry: RetryPolicy = .interactive, logger: Logger) {
        self.store = store
        self.catalog = catalog
        self.cacheDirectory = cacheDirectory
        self.retry = retry
        self.logger = logger
    }

    /// The path of an item's local copy in the cache directory.
    public nonisolated func copyPath(for item: Item) -> String {
        cacheDirectory + "/" + item.id
    }

    /// Makes `item`'s content local (or joins the fetch already under way) and counts one
    /// more user of the copy.
    public func open(_ item: Item, intent: OpenIntent = .content) async throws(FSError) -> LocalCopy {
        guard item.kind == .file else { throw item.isDirectory ? .isADirectory : .invalidArgument }
        let entry: Providing
        if var existing = providing[item.inode] {
            existing.openCount += 1
            providing[item.inode] = existing
            entry = existing
        } else {
            entry = try startProviding(item, intent: intent)
        }
        do {
            try await entry.fetch.value
        } catch {
            // This opener never got a handle: give its count back.
            _ = release(item.inode)
            throw (error as? FSError) ?? .io("\(error)")
        }
        if case .empty = intent, entry.copy.length != 0 {
            try entry.copy.makeEmpty()
        }
        return entry.copy
    }

    /// One user let go. The last one evicts the copy — or, if it holds changes, hands it to
    /// the uploader and keeps it until the upload is confirmed. Returns what happened.
    public func release(_ inode: Inode) -> ReleaseOutcome {
        guard var entry = providing[inode] else { return .notPresent }
        entry.openCount -= 1
        providing[inode] = entry
        guard entry.openCount <= 0 else { return .stillOpen }
        if !entry.removed && entry.copy.generation != entry.syncedGeneration {
            entry.uploadPending = true
            providing[inode] = entry
            return .needsUpload
        }
        if entry.uploadPending { return .uploadInFlight }
        providing[inode] = nil
        entry.fetch.cancel()
        evict(inode, copy: entry.copy, removed: entry.removed)
        return .evicted
    }

    /// Whether someone has `inode` open.
    public func isOpen(_ inode: Inode) -> Bool {
        (providing[inode]?.openCount ?? 0) > 0
    }

    /// Whether the open copy of `inode` has changes the store does not have.
    public func hasUnsyncedChanges(_ inode: Inode) -> Bool {
        guard let entry = providing[inode] else { return false }
        return !entry.removed && entry.copy.generation != entry.syncedGeneration
    }

    /// The uploader is about to send `inode`'s copy: which file, at which generation.
    /// A copy that is not open (after a restart) is read from its file in the cache.
    public func beginUpload(of item: Item) -> (path: String, generation: UInt64)? {
        if var entry = providing[item.inode] {
            guard !entry.removed else { return nil }
            entry.uploadPending = true
            providing[item.inode] = entry
            return (entry.copy.path, entry.copy.generation)
        }
        let path = copyPath(for: item)
        return FileManager.default.fileExists(atPath: path) ? (path, 0) : nil
    }

    /// The store has `generation` of the copy (or, after a conflict, no longer needs it).
    /// Evicts the copy if nobody has it open and nothing changed since. Returns whether the
    /// item is clean now.
    @discardableResult
    public func uploadFinished(_ item: Item, generation: UInt64, discardLocalCopy: Bool = false) -> Bool {
        guard var entry = providing[item.inode] else {
            // Not open (a restart's pending upload): the file is done with.
            unlink(copyPath(for: item))
            return true
        }
        if discardLocalCopy {
            // A conflict: the local content now lives in the conflict copy on the store.
            entry.syncedGeneration = entry.copy.generation
        } else if entry.copy.generation == generation {
            entry.syncedGeneration = generation
        }
        entry.uploadPending = false
        providing[item.inode] = entry
        let clean = entry.copy.generation == entry.syncedGeneration
        if clean && entry.openCount <= 0 {
            providing[item.inode] = nil
            evict(item.inode, copy: entry.copy, removed: false)
        } else if !clean && entry.openCount <= 0 {
            entry.uploadPending = true
            providing[item.inode] = entry
        }
        return clean
    }

    /// The upload could not finish (it will be retried): keep the copy.
    public func uploadPaused(_ inode: Inode) {
        guard var entry = providing[inode] else { return }
        entry.uploadPending = entry.openCount <= 0
        providing[inode] = entry
    }

    /// The item was unlinked. An open copy lives on for its handles (POSIX), nothing is uploaded.
    public func itemRemoved(_ inode: Inode, item: Item) {
        if var entry = providing[inode] {
            entry.removed = true
            providing[inode] = entry
            if entry.openCount <= 0 {
                providing[inode] = nil
                evict(inode, copy: entry.copy, removed: true)
            }
        } else {
            unlink(copyPath(for: item))
        }
    }

    /// Evicts every clean local copy and closes the others, whose files stay for the next
    /// mount to upload: the mount is going away.
    public func shutdown() {
        for (inode, entry) in providing {
            entry.fetch.cancel()
            if entry.removed || entry.copy.generation == entry.syncedGeneration {
                evict(inode, copy: entry.copy, removed: entry.removed)
            } else {
                entry.copy.close()
            }
        }
        providing.removeAll()
        presentCopies.withLock { $0.removeAll() }
    }

    // MARK: Private

    private func startProviding(_ item: Item, intent: OpenIntent) throws(FSError) -> Providing {
        let path = copyPath(for: item)
        // Unsynced changes from before a restart: the copy on disk is the truth.
        if item.hasUnsyncedChanges, FileManager.default.fileExists(atPath: path) {
            let copy = try LocalCopy(adopting: path)
            presentCopies.withLock { $0[item.inode] = copy }
            let entry = Providing(copy: copy, openCount: 1, fetch: Task {}, syncedGeneration: UInt64.max, uploadPending: true)
            providing[item.inode] = entry
            return entry
        }
        let copy = try LocalCopy(path: path)
        presentCopies.withLock { $0[item.inode] = copy }
        if case .empty = intent {
            // No download. The caller records the change (state `modified`) itself: setting
            // `local` here would hide a new file's changes from the journal and from a relisting.
            let entry = Providing(copy: copy, openCount: 1, fetch: Task {}, syncedGeneration: item.onStore && item.size == 0 ? 0 : UInt64.max)
            providing[item.inode] = entry
            return entry
        }
        guard item.onStore else {
            // Created here, never uploaded, and its copy is gone: nothing to fetch.
            let entry = Providing(copy: copy, openCount: 1, fetch: Task {}, syncedGeneration: UInt64.max)
            providing[item.inode] = entry
            return entry
        }
        try catalog.setState(of: item.inode, to: .downloading)
        // Detached: the download must not run on (and hold up) the provider's executor.
        let fetch = Task.detached { [store, catalog, retry, logger] () async throws -> Void in
            do {
                let entry = try await retry.run({ () async throws(StoreError) -> RemoteEntry in
                    try await store.read(item.path, range: nil, ifMatch: nil, into: copy)
                }, beforeRetry: { error in
                    logger.info("retrying download", metadata: ["path": "\(item.path)", "error": "\(error)"])
                    copy.reset()
                })
                try Task.checkCancellation()
                // A partial download is never presented as the file.
                guard copy.held.contains(0..<entry.size) else {
                    throw FSError.io("incomplete download of \(item.path): \(copy.held.count) of \(entry.size) bytes")
                }
                try copy.setLength(entry.size)
                try catalog.updateMetadata(of: item.inode, from: entry)
                try catalog.setState(of: item.inode, to: .local)
                if entry.etag != item.etag, item.etag != nil {
                    logger.info("content changed on the store since listing", metadata: ["path": "\(item.path)"])
                }
                logger.debug("provided", metadata: ["path": "\(item.path)", "bytes": "\(entry.size)"])
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
        let entry = Providing(copy: copy, openCount: 1, fetch: fetch, syncedGeneration: copy.generation)
        providing[item.inode] = entry
        return entry
    }

    private func evict(_ inode: Inode, copy: LocalCopy, removed: Bool) {
        copy.discard()
        presentCopies.withLock { copies in
            if copies[inode] === copy { copies[inode] = nil }
        }
        guard !removed else { return }
        do {
            try catalog.setState(of: inode, to: .placeholder)
        } catch {
            logger.warning("cannot record eviction", metadata: ["inode": "\(inode)", "error": "\(error)"])
        }
    }
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
    /// There was no copy.
    case notPresent
}
