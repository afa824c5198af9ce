// InFlightRequests: the Swift tasks that are answering kernel requests right now.
// Owns their start (`FuseAdapter.respond`) and, at unmount, their end: no new one starts,
// the running ones get a bounded time to finish, then are cancelled, and whatever still runs
// after that is abandoned (its reply is dropped by the `ReplyGate`, never written into a
// destroyed session).
import Synchronization

final class InFlightRequests: Sendable {
    private struct State {
        var accepting = true
        /// Ids start at 1: an id travels to the interrupt callback as a pointer's bit pattern.
        var next: UInt64 = 1
        var running: [UInt64: Task<Void, Never>] = [:]
        /// Ids handed out by `reserve` whose task has not started yet, and those of them the
        /// kernel already interrupted (libfuse may call the interrupt callback from inside
        /// `fuse_req_interrupt_func`, before the task exists).
        var reserved: Set<UInt64> = []
        var interruptedEarly: Set<UInt64> = []
    }

    private let state = Mutex(State())

    /// Runs `work` in a new task, tracked until it returns. Returns false (and runs nothing)
    /// once `close` was called.
    func start(_ work: @escaping @Sendable () async -> Void) -> Bool {
        guard let id = reserve() else { return false }
        return start(id, work)
    }

    /// An id for a request's task before it starts (so that its interrupt can be registered
    /// first, while the request cannot yet be answered and freed); nil once `close` was called.
    func reserve() -> UInt64? {
        state.withLock { state in
            guard state.accepting else { return nil }
            let id = state.next
            state.next += 1
            state.reserved.insert(id)
            return id
        }
    }

    /// Runs `work` as the task of the reserved `id`; cancelled at once if it was interrupted
    /// already. Returns false (and runs nothing) once `close` was called.
    func start(_ id: UInt64, _ work: @escaping @Sendable () async -> Void) -> Bool {
        state.withLock { state in
            state.reserved.remove(id)
            let interrupted = state.interruptedEarly.remove(id) != nil
            guard state.accepting else { return false }
            // The task removes itself; it cannot do so before it is added, as that waits for this lock.
            let task = Task {
                await work()
                self.state.withLock { _ = $0.running.removeValue(forKey: id) }
            }
            state.running[id] = task
            if interrupted { task.cancel() }
            return true
        }
    }

    /// The kernel interrupted the request behind `id` (the caller got a signal): its task is
    /// cancelled, and answers `EINTR` from the wait it is in. Called on a libfuse thread,
    /// possibly before the task started or after it ended (then there is nothing to do).
    func interrupt(_ id: UInt64) {
        let task = state.withLock { state -> Task<Void, Never>? in
            if let task = state.running[id] { return task }
            if state.reserved.contains(id) { state.interruptedEarly.insert(id) }
            return nil
        }
        task?.cancel()
    }

    var count: Int { state.withLock { $0.running.count } }

    /// Stops accepting; waits up to `grace` for the running tasks, then cancels those left and
    /// waits up to `cancelGrace` more. Returns how many still run (abandoned).
    func close(grace: Duration, cancelGrace: Duration) async -> Int {
        state.withLock { $0.accepting = false }
        if await waitUntilEmpty(for: grace) { return 0 }
        for task in state.withLock({ Array($0.running.values) }) { task.cancel() }
        if await waitUntilEmpty(for: cancelGrace) { return 0 }
        return count
    }

    private func waitUntilEmpty(for limit: Duration) async -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + limit
        while count > 0 {
            if clock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return true
    }
}
