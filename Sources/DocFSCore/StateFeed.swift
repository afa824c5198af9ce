import Synchronization

/// Shown-state changes in batches: told within `delay`, each item once, in its state by then.
public final class StateFeed: Sendable {
    private struct Pending {
        var inodes: Set<Inode> = []
        var scheduled = false
    }

    private let pending = Mutex(Pending())
    private let observer = Mutex<StateChangeObserver?>(nil)
    /// Nil: no one is told of changes.
    let socketPath = Mutex<String?>(nil)
    private let delay: Duration

    public init(delay: Duration = .milliseconds(100)) {
        self.delay = delay
    }

    /// Changes made while `isWanted` says no one listens are not kept.
    public func start(watching catalog: Catalog, isWanted: @escaping @Sendable () -> Bool, flush: @escaping @Sendable (Set<Inode>) async -> Void) {
        let watcher = catalog.observeStateChanges { [weak self] inodes in
            guard isWanted() else { return }
            self?.note(inodes, flush: flush)
        }
        observer.withLock { $0 = watcher }
    }

    private func note(_ inodes: Set<Inode>, flush: @escaping @Sendable (Set<Inode>) async -> Void) {
        let startBatch = pending.withLock { pending -> Bool in
            pending.inodes.formUnion(inodes)
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        guard startBatch else { return }
        Task { [weak self, delay] in
            try? await Task.sleep(for: delay)
            guard let batch = self?.takeBatch() else { return }
            await flush(batch)
        }
    }

    private func takeBatch() -> Set<Inode> {
        pending.withLock { pending in
            pending.scheduled = false
            defer { pending.inodes.removeAll() }
            return pending.inodes
        }
    }
}
