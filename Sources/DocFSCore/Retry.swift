import DocFSStore

/// How often and how patiently a store call is tried again after a transient failure
/// (`StoreError.isTransient`: unreachable, timed out, 5xx, 429, SlowDown). Other failures are
/// never retried; permanent ones (`isPermanent`) should not be retried by the caller either.
///
/// Waits grow exponentially with full jitter (a random wait between zero and
/// `initialDelay × 2^n`, capped at `maximumDelay`), so that many clients that failed together
/// do not come back together. A store that says when to come back (`Retry-After`, carried as
/// `StoreError.retryAfter`, capped by the store) is waited for that long at least.
///
/// What callers can rely on: `run` starts no attempt and begins no wait that would end after
/// `deadline` (counted from its start); it then throws the last error. An attempt already
/// running at the deadline is bounded by the store's own timeouts (HTTPTimeouts), not cut, so
/// that a slow but healthy transfer is not lost; a caller that must answer sooner (a process
/// in `read()`) bounds its own wait (`CallerWait`). Cancellation ends the retrying at once.
public struct RetryPolicy: Sendable {
    /// At most this many attempts (a safety net; the deadline usually decides).
    public var attempts: Int
    public var initialDelay: Duration
    public var maximumDelay: Duration
    /// Retrying ends this long after the first attempt began; nil: only `attempts` bounds it.
    public var deadline: Duration?

    public init(attempts: Int, initialDelay: Duration, maximumDelay: Duration, deadline: Duration? = nil) {
        self.attempts = max(1, attempts)
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.deadline = deadline
    }

    /// For a user waiting in `open()` or `ls`: keeps trying for up to 20 s (a restarting
    /// server, a short outage, a rate limit), with waits of at most 4 s between tries.
    public static let interactive = RetryPolicy(attempts: 64, initialDelay: .milliseconds(250), maximumDelay: .seconds(4),
                                                deadline: .seconds(20))

    /// The same policy, retrying within `deadline` instead (the mount's `--io-timeout`).
    public func within(_ deadline: Duration) -> RetryPolicy {
        var policy = self
        policy.deadline = deadline
        return policy
    }

    /// The wait after `failures` failed attempts (1 after the first): full jitter over the
    /// exponential backoff, and at least what the store asked for (`retryAfter`).
    public func delay(afterFailures failures: Int, retryAfter: Duration?,
                      using generator: inout some RandomNumberGenerator) -> Duration {
        let exponent = min(max(0, failures - 1), 30)
        let ceiling = min(initialDelay * (1 << exponent), maximumDelay)
        let ceilingNanoseconds = max(0, Self.nanoseconds(ceiling))
        let jittered = Duration.nanoseconds(ceilingNanoseconds == 0 ? 0 : Int64.random(in: 0...ceilingNanoseconds, using: &generator))
        guard let retryAfter else { return jittered }
        return max(retryAfter, jittered)
    }

    /// Runs `operation`, trying again while it fails transiently, within `attempts` and
    /// `deadline`. `beforeRetry` runs before each new attempt (to reset partial state).
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
                    // A drawn wait that would pass the deadline is cut short: one last try just
                    // before it rather than giving up seconds early (a 500 that cleared at 2.5 s
                    // failed a read whose --io-timeout was 6 s when the draw was 4 s). A wait the
                    // store asked for (`Retry-After`) is never cut: then it is given up.
                    if left <= .zero || (failure.retryAfter.map { $0 > left } ?? false) { throw failure }
                    wait = min(wait, left)
                }
                beforeRetry(failure)
                // Cancelled while waiting: the caller has gone; it gets the last failure.
                do { try await Task.sleep(for: wait) } catch { throw failure }
                // A wait that overran (a busy machine) does not buy an attempt past the deadline.
                if let deadline, clock.now >= start + deadline { throw failure }
            }
        }
    }

    /// How long before the deadline the last try begins, so that it can still answer in time.
    static let lastTryMargin: Duration = .milliseconds(100)

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
