import DocFSStore

/// Retries after transient failures (`StoreError.isTransient`) only. Waits grow exponentially
/// with full jitter, so clients that failed together do not return together, and honor a
/// store's `Retry-After`. `run` starts no attempt and no wait ending after `deadline`; an
/// attempt running at the deadline is bounded by the store's timeouts, not cut (a caller that
/// must answer sooner uses `CallerWait`). Cancellation ends the retrying at once.
public struct RetryPolicy: Sendable {
    /// A safety net; the deadline usually decides.
    public var attempts: Int
    public var initialDelay: Duration
    public var maximumDelay: Duration
    /// From the first attempt's start; nil: only `attempts` bounds it.
    public var deadline: Duration?

    public init(attempts: Int, initialDelay: Duration, maximumDelay: Duration, deadline: Duration? = nil) {
        self.attempts = max(1, attempts)
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.deadline = deadline
    }

    /// For a user waiting in `open()` or `ls`: up to 20 s, waits of at most 4 s.
    public static let interactive = RetryPolicy(attempts: 64, initialDelay: .milliseconds(250), maximumDelay: .seconds(4),
                                                deadline: .seconds(20))

    /// `--io-timeout`.
    public func within(_ deadline: Duration) -> RetryPolicy {
        var policy = self
        policy.deadline = deadline
        return policy
    }

    /// After `failures` failed attempts (1 after the first).
    public func delay(afterFailures failures: Int, retryAfter: Duration?,
                      using generator: inout some RandomNumberGenerator) -> Duration {
        let exponent = min(max(0, failures - 1), 30)
        let ceiling = min(initialDelay * (1 << exponent), maximumDelay)
        let ceilingNanoseconds = max(0, Self.nanoseconds(ceiling))
        let jittered = Duration.nanoseconds(ceilingNanoseconds == 0 ? 0 : Int64.random(in: 0...ceilingNanoseconds, using: &generator))
        guard let retryAfter else { return jittered }
        return max(retryAfter, jittered)
    }

    /// `beforeRetry` runs before each new attempt (to reset partial state).
    public func run<T>(
        _ operation: () async throws(StoreError) -> T,
        beforeRetry: (StoreError) -> Void = { _ in }
    ) async throws(StoreError) -> T {
        var generator = SystemRandomNumberGenerator()
        let clock = ContinuousClock()
        let start = clock.now
        var failures = 0
        while true {
            do {
                return try await operation()
            } catch let failure {
                failures += 1
                guard failure.isTransient, failures < attempts, !Task.isCancelled else { throw failure }
                var wait = delay(afterFailures: failures, retryAfter: failure.retryAfter, using: &generator)
                if let deadline {
                    let left = start + deadline - clock.now - Self.lastTryMargin
                    // A wait past the deadline is cut short for one last try rather than giving up early; a
                    // wait the store asked for is never cut: then it is given up.
                    if left <= .zero || (failure.retryAfter.map { $0 > left } ?? false) { throw failure }
                    wait = min(wait, left)
                }
                beforeRetry(failure)
                // Cancelled while waiting: the caller has gone; it gets the last failure.
                do { try await Task.sleep(for: wait) } catch { throw failure }
                // A wait that overran (a busy machine) buys no attempt past the deadline.
                if let deadline, clock.now >= start + deadline { throw failure }
            }
        }
    }

    /// So the last try can still answer in time.
    static let lastTryMargin: Duration = .milliseconds(100)

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
