import DocFSStore

/// Retries transient failures with jittered exponential backoff, honoring `Retry-After`. No
/// attempt or wait starts that would end after `deadline`; a running attempt is not cut.
public struct RetryPolicy: Sendable {
    public var attempts: Int
    public var initialDelay: Duration
    public var maximumDelay: Duration
    /// Nil: only `attempts` bounds it.
    public var deadline: Duration?

    public init(attempts: Int, initialDelay: Duration, maximumDelay: Duration, deadline: Duration? = nil) {
        self.attempts = max(1, attempts)
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.deadline = deadline
    }

    /// For a user waiting in `open()` or `ls`: up to 20 s.
    public static let interactive = RetryPolicy(attempts: 64, initialDelay: .milliseconds(250), maximumDelay: .seconds(4),
                                                deadline: .seconds(20))

    public func within(_ deadline: Duration) -> RetryPolicy {
        var policy = self
        policy.deadline = deadline
        return policy
    }

    public func delay(afterFailures failures: Int, retryAfter: Duration?,
                      using generator: inout some RandomNumberGenerator) -> Duration {
        let exponent = min(max(0, failures - 1), 30)
        let ceiling = min(initialDelay * (1 << exponent), maximumDelay)
        let (seconds, attoseconds) = ceiling.components
        let ceilingNanoseconds = max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        let jittered = Duration.nanoseconds(Int64.random(in: 0...ceilingNanoseconds, using: &generator))
        return retryAfter.map { max($0, jittered) } ?? jittered
    }

    /// `beforeRetry` resets partial state before each new attempt.
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
                    // A drawn wait past the deadline is cut short for one last try; one the store asked for is not.
                    if left <= .zero || (failure.retryAfter.map { $0 > left } ?? false) { throw failure }
                    wait = min(wait, left)
                }
                beforeRetry(failure)
                // The caller has gone: it gets the last failure.
                do { try await Task.sleep(for: wait) } catch { throw failure }
                // A wait that overran buys no attempt past the deadline.
                if let deadline, clock.now >= start + deadline { throw failure }
            }
        }
    }

    static let lastTryMargin: Duration = .milliseconds(100)
}
