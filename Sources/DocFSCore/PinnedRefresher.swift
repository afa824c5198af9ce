import Logging
import Synchronization

/// "Keep downloaded" for what the store adds: after a pinned folder's listing, its pinned files
/// with no copy are downloaded, one at a time. A kept older copy stays until the next open, so
/// a failed download never leaves a pinned file with no copy. Open, changed or unconfirmed
/// files are left alone; nothing polls the store.
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
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let catalog: Catalog
    private let provider: Provider
    private let enumerator: DirectoryEnumerator
    private let logger: Logger
    private let queue = Mutex(Queue())
    let refreshed = Mutex<(@Sendable (Inode) -> Void)?>(nil)

    init(catalog: Catalog, provider: Provider, enumerator: DirectoryEnumerator, logger: Logger) {
        self.catalog = catalog
        self.provider = provider
        self.enumerator = enumerator
        self.logger = logger
    }

    /// Cheap for a folder that is not pinned (one indexed read).
    func listed(_ directory: Item) {
        guard (try? catalog.isPinned(directory.inode)) == true,
              let due = try? catalog.pinnedToRefresh(in: directory.inode) else { return }
        enqueue(due.files.map(Work.file) + due.folders.map(Work.folder))
    }

    func stop() {
        queue.withLock { $0.stopped = true; $0.waiting.removeAll(); $0.queued.removeAll() }
    }

    /// For tests: a refresh creates a copy moments after the listing is done.
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
                guard let file = try? catalog.item(inode), file.kind == .file, file.kindConfirmed, !file.hasUnsyncedChanges,
                      file.onStore, file.state == .placeholder,
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
}
