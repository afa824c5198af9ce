// PendingUnlocks: the UNLOCK after an upload's PUT is sent after the upload has returned, so a
// burst of new files costs LOCK and PUT each in turn, not LOCK, PUT and UNLOCK (a third of the
// round trips at a distance). Until it is answered, docfs's own next request that the lock would
// refuse (423) on that path or a folder above it waits for it instead; the store's shutdown
// waits for all of them, so no lock of docfs's outlives the mount but by a failed UNLOCK (and
// then only until the lock's timeout).

import DocFSStore
import Synchronization

final class PendingUnlocks: Sendable {
    private struct Pending {
        var path: StorePath
        var task: Task<Void, Never>
    }

    private let pending = Mutex<[Int: Pending]>([:])
    private let next = Atomic<Int>(0)

    /// Runs `unlock` in the background, remembered under `path` until it has been answered.
    func start(_ path: StorePath, _ unlock: @escaping @Sendable () async -> Void) {
        let id = next.wrappingAdd(1, ordering: .relaxed).oldValue
        pending.withLock { pending in
            // Inside the lock: the task cannot take itself out before it was put in.
            pending[id] = Pending(path: path, task: Task { [weak self] in
                await unlock()
                _ = self?.pending.withLock { $0.removeValue(forKey: id) }
            })
        }
    }

    /// Waits for the UNLOCKs of any of `paths` or of anything below them.
    func settle(_ paths: StorePath...) async {
        let tasks = pending.withLock { pending in
            pending.values.filter { entry in paths.contains { entry.path.isSame(orInside: $0) } }.map(\.task)
        }
        for task in tasks { await task.value }
    }

    /// Waits for every UNLOCK under way.
    func settleAll() async {
        let tasks = pending.withLock { $0.values.map(\.task) }
        for task in tasks { await task.value }
    }
}
