import Dispatch

/// The executor of an actor whose methods call SQLite or the file system synchronously: its
/// jobs run one at a time on a serial dispatch queue of its own, not on Swift's cooperative
/// pool. That pool has one thread per core and runs every other task of the mount; an actor
/// there that waits for a busy catalog or a slow disk holds one of its threads, and a few such
/// actors at once stall every lookup, listing and transfer. A dispatch queue's thread may
/// block: dispatch starts another for the rest of the process.
///
/// An actor adopts it with
/// `public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }`,
/// so its isolation (one job at a time, no reentrancy between awaits) is exactly an actor's.
public final class QueueExecutor: SerialExecutor, @unchecked Sendable {
    // Sendable: a dispatch queue is safe to use from any thread; nothing else is stored.
    private let queue: DispatchQueue

    public init(label: String) {
        queue = DispatchQueue(label: label)
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    public func checkIsolated() {
        dispatchPrecondition(condition: .onQueue(queue))
    }
}
