// InFlightRequests: the Swift tasks that are answering kernel requests right now.
// Owns their start (`FuseAdapter.respond`) and, at unmount, their end: no new one starts,
// the running ones get a bounded time to finish, then are cancelled, and whatever still runs
// after that is abandoned (its reply is dropped by the `ReplyGate`, never written into a
// destroyed session).
import Synchronization

final class InFlightRequests: Sendable {
    private struct State {
        var accepting = true
        var next: UInt64 = 0
        var running: [UInt64: Task<Void, Never>] = [:]
    }

    private let state = Mutex(State())

    /// Runs `work` in a new task, tracked until it returns. Returns false (and runs nothing)
    /// once `close` was called.
    func start(_ work: @escaping @Sendable () async -> Void) -> Bool {
        state.withLock { state in
            guard state.accepting else { return false }
            let id = state.next
            state.next += 1
            // The task removes itself; it cannot do so before it is added, as that waits for this lock.
            state.running[id] = Task {
                await work()
                self.state.withLock { _ = $0.running.removeValue(forKey: id) }
            }
            return true
        }
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
