import DocFSStore
import Logging
import Synchronization

/// "Keep downloaded" for what is added on the store meanwhile. After a listing of a pinned
/// folder, its pinned files that have no copy (added on the store, by another client: they
/// are pinned by the catalog's `item_inherits_pin` trigger) are downloaded in the background
/// and kept, and its pinned subfolders never listed are listed (their files then follow the
/// same way). Without it such files were fetched only at their next open.
///
/// A kept copy of an older version than the store's (changed there) stays as it is until the
/// file is next opened, which fetches the new version: replacing it here would drop the copy
/// before the new version had arrived, and a download that failed (the store gone, a large
/// file over a slow link) would leave a pinned file with no copy at all.
///
/// One at a time, in the order the listings named them: a listing of a big pinned folder never
/// starts a download per file at once. A file open here, holding changes, or with a kind still
/// to be confirmed (see `SymlinkProbe`) is left alone: the provider never moves an open copy,
/// and a change goes up through the uploader (which keeps a conflict copy if need be). Nothing
/// polls the store: what a listing of the folder (at a lookup or `ls` after `--dir-cache-ttl`)
/// shows is what is refreshed.
final class PinnedRefresher: Sendable {
    private enum Work: Hashable {
        case file(Inode)
        case folder(Inode)
    }

    private struct Queue {
        var waiting: [Work] = []
        var queued: Set<Work> = []
        var working = false
        var stopped = false
        /// Those waiting for the queue to drain (`waitUntilIdle`).
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let catalog: Catalog
    private let provider: Provider
    private let enumerator: DirectoryEnumerator
    private let logger: Logger
    private let queue = Mutex(Queue())
    /// Told about each file whose copy was replaced (`DocFileSystem.whenPinnedCopyRefreshed`).
    let refreshed = Mutex<(@Sendable (Inode) -> Void)?>(nil)

    init(catalog: Catalog, provider: Provider, enumerator: DirectoryEnumerator, logger: Logger) {
        self.catalog = catalog
        self.provider = provider
        self.enumerator = enumerator
        self.logger = logger
    }

    /// A listing of `directory` reached the catalog: queue what of it is pinned and not as
    /// the store has it. Cheap for a folder that is not pinned (one indexed read).
    func listed(_ directory: Item) {
        guard (try? catalog.isPinned(directory.inode)) == true,
              let due = try? catalog.pinnedToRefresh(in: directory.inode) else { return }
        enqueue(due.files.map(Work.file) + due.folders.map(Work.folder))
    }

    /// No new work after this; the download running (if any) ends with the provider's shutdown.
    func stop() {
        queue.withLock { $0.stopped = true; $0.waiting.removeAll(); $0.queued.removeAll() }
    }

    /// Returns once no download or listing of this queue runs and none waits: what a test
    /// checking the cache after everything settled needs, since a listing's refresh creates a
    /// copy moments after the listing itself is done.
    func waitUntilIdle() async {
        await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
            let idle = queue.withLock { queue -> Bool in
                guard queue.working else { return true }
                queue.idleWaiters.append(waiter)
                return false
            }
            if idle { waiter.resume() }
        }
    }

    private func enqueue(_ work: [Work]) {
        guard !work.isEmpty else { return }
        let start = queue.withLock { queue -> Bool in
            guard !queue.stopped else { return false }
            for item in work where queue.queued.insert(item).inserted { queue.waiting.append(item) }
            defer { queue.working = true }
            return !queue.working && !queue.waiting.isEmpty
        }
        if start { Task { await self.drain() } }
    }

    private func drain() async {
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        defer { for waiter in idleWaiters { waiter.resume() } }
        while let work = queue.withLock({ queue -> Work? in
            guard !queue.stopped, !queue.waiting.isEmpty else {
                queue.working = false
                swap(&idleWaiters, &queue.idleWaiters)
                return nil
            }
            let next = queue.waiting.removeFirst()
            queue.queued.remove(next)
            return next
        }) {
            switch work {
            case .folder(let inode):
                guard let folder = try? catalog.item(inode), folder.isDirectory, folder.listedAt == nil else { continue }
                try? await enumerator.refresh(folder)  // its listing queues its files in turn
            case .file(let inode):
                guard let file = try? catalog.item(inode), Self.needsDownload(file),
                      provider.presentCopies.withLock({ $0[inode] }) == nil,  // open here: its handles decide
                      (try? catalog.isPinned(inode)) == true else { continue }
                do {
                    _ = try await provider.open(file, intent: .content)
                    // A process that opened the file meanwhile shares the copy, and may close first.
                    await provider.release(inode)
                    logger.info("pinned file refreshed from the store", metadata: ["path": "\(file.path)"])
                    refreshed.withLock { $0 }?(inode)
                } catch {
                    logger.warning("cannot download a pinned file", metadata: ["path": "\(file.path)", "error": "\(error)"])
                }
            }
        }
    }

    /// A pinned file with no copy, that nobody here is changing.
    static func needsDownload(_ item: Item) -> Bool {
        item.kind == .file && item.kindConfirmed && !item.hasUnsyncedChanges && item.onStore && item.state == .placeholder
    }
}
