// PathLocks: one lock per request path, so a precondition (`If-Match`, `If-None-Match`,
// `Overwrite`) and the change it guards (the rename of a PUT, an unlink, a MOVE) happen as one
// step. Without it two PUTs carrying the same ETag both pass the check before either renames,
// and both "win". The lock is held only around the final check and the change, never while a
// body streams in.
//
// Lock order: several paths are always taken in one order (by their bytes), so two requests
// locking the same pair cannot deadlock.

actor PathLocks {
    /// The paths held now, each with the callers waiting for it, first come first served.
    private var waiters: [DAVPath: [CheckedContinuation<Void, Never>]] = [:]

    /// Runs `body` while holding the locks of all `paths`.
    nonisolated func withLocks<T: Sendable>(_ paths: [DAVPath], _ body: () async throws -> T) async throws -> T {
        let ordered = Array(Set(paths)).sorted { $0.components.joined(separator: "/").utf8.lexicographicallyPrecedes($1.components.joined(separator: "/").utf8) }
        for path in ordered { await acquire(path) }
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        await release(ordered)
        return try result.get()
    }

    private func acquire(_ path: DAVPath) async {
        if waiters[path] == nil {
            waiters[path] = []
            return
        }
        await withCheckedContinuation { continuation in
            waiters[path, default: []].append(continuation)
        }
    }

    private func release(_ paths: [DAVPath]) {
        for path in paths {
            guard var queue = waiters[path] else { continue }
            if queue.isEmpty {
                waiters[path] = nil
            } else {
                // Hand the lock straight to the next waiter: the entry stays, so nobody barges in.
                let next = queue.removeFirst()
                waiters[path] = queue
                next.resume()
            }
        }
    }

    /// The number of paths held now (tests: the table empties after use).
    var heldCount: Int { waiters.count }
}
