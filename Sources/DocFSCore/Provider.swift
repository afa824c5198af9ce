import DocFSStore
import Foundation
import Logging
import Synchronization

/// Provides and evicts local copies: File Provider's `startProvidingItemAtURL:` and
/// `stopProvidingItemAtURL:`.
///
/// The first `open()` of a file creates its local copy and fetches the content; concurrent
/// opens of the same item share that one copy and that one fetch. Each successful open is
/// matched by one `release()`; the last release evicts the copy and the item is a placeholder
/// again. The provider is an actor: its bookkeeping is touched only on its executor, and
/// the network work happens in a task it awaits, never on a caller's thread.
public actor Provider {
    private let store: any Store
    private let catalog: Catalog
    private let cacheDirectory: String
    private let retry: RetryPolicy
    private let logger: Logger
    private var providing: [Inode: Providing] = [:]

    /// Copies by inode, readable without hopping onto the actor (for `st_blocks`).
    public nonisolated let presentCopies = Mutex<[Inode: LocalCopy]>([:])

    private struct Providing {
        var copy: LocalCopy
        var openCount: Int
        var fetch: Task<RemoteEntry, any Error>
    }

    public init(store: any Store, catalog: Catalog, cacheDirectory: String, retry: RetryPolicy = .interactive, logger: Logger) {
        self.store = store
        self.catalog = catalog
        self.cacheDirectory = cacheDirectory
        self.retry = retry
        self.logger = logger
    }

    /// Makes `item`'s content local (or joins the fetch already under way) and counts one
    /// more user of the copy. Returns the copy and the item's size as fetched.
    public func open(_ item: Item) async throws(FSError) -> (copy: LocalCopy, size: Int64) {
        guard item.kind == .file else { throw item.isDirectory ? .isADirectory : .invalidArgument }
        let entry: Providing
        if var existing = providing[item.inode] {
            existing.openCount += 1
            providing[item.inode] = existing
            entry = existing
        } else {
            entry = try startProviding(item)
        }
        do {
            let fetched = try await entry.fetch.value
            return (entry.copy, fetched.size)
        } catch {
            // This opener never got a handle: give its count back.
            _ = release(item.inode)
            throw (error as? FSError) ?? .io("\(error)")
        }
    }

    /// One user let go. The last one evicts the copy (stopProviding).
    @discardableResult
    public func release(_ inode: Inode) -> EvictionOutcome {
        guard var entry = providing[inode] else { return .notPresent }
        entry.openCount -= 1
        guard entry.openCount <= 0 else {
            providing[inode] = entry
            return .skippedInUse
        }
        providing[inode] = nil
        entry.fetch.cancel()
        evict(inode, copy: entry.copy)
        return .removed
    }

    /// Evicts every local copy, in use or not: the mount is going away.
    public func evictAll() {
        for (inode, entry) in providing {
            entry.fetch.cancel()
            evict(inode, copy: entry.copy)
        }
        providing.removeAll()
    }

    // MARK: Private

    private func startProviding(_ item: Item) throws(FSError) -> Providing {
        let copy = try LocalCopy(path: cacheDirectory + "/" + item.id)
        try catalog.setState(of: item.inode, to: .downloading)
        presentCopies.withLock { $0[item.inode] = copy }
        // Detached: the download must not run on (and hold up) the provider's executor.
        let fetch = Task.detached { [store, catalog, retry, logger] () async throws -> RemoteEntry in
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
                return entry
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
        let entry = Providing(copy: copy, openCount: 1, fetch: fetch)
        providing[item.inode] = entry
        return entry
    }

    private func evict(_ inode: Inode, copy: LocalCopy) {
        copy.discard()
        presentCopies.withLock { copies in
            if copies[inode] === copy { copies[inode] = nil }
        }
        do {
            try catalog.setState(of: inode, to: .placeholder)
        } catch {
            logger.warning("cannot record eviction", metadata: ["inode": "\(inode)", "error": "\(error)"])
        }
    }
}

/// What an eviction request did: callers (and logs) can tell "kept because in use" from "gone".
public enum EvictionOutcome: Sendable, Equatable {
    case removed
    case skippedInUse
    case notPresent
}
