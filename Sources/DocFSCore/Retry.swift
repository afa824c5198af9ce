import DocFSStore

/// How often and how patiently a store call is tried again after a transient failure
/// (unreachable, timed out, 5xx). Permanent failures (not found, access denied) are never
/// retried. Every store call is bounded in time by the store's own deadlines, so a retried
/// call is bounded too: `attempts` × (deadline + backoff).
public struct RetryPolicy: Sendable {
    public var attempts: Int
    public var initialDelay: Duration
    public var maximumDelay: Duration

    public init(attempts: Int, initialDelay: Duration, maximumDelay: Duration) {
        self.attempts = max(1, attempts)
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
    }

    /// For a user waiting in `open()` or `ls`: a few quick tries, about 2 s of backoff in all.
    public static let interactive = RetryPolicy(attempts: 3, initialDelay: .milliseconds(250), maximumDelay: .seconds(2))

    /// Runs `operation`, trying again with exponential backoff while it fails transiently.
    /// `beforeRetry` runs before each new attempt (to reset partial state).
    public func run<T>(
        _ operation: () async throws(StoreError) -> T,
        beforeRetry: (StoreError) -> Void = { _ in }
    ) async throws(StoreError) -> T {
        var delay = initialDelay
        var attempt = 1
        while true {
            do {
                return try await operation()
            } catch {
                guard error.isTransient, attempt < attempts, !Task.isCancelled else { throw error }
                beforeRetry(error)
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, maximumDelay)
                attempt += 1
            }
        }
    }
}
