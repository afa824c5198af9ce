/// The waits of the tests: every poll has a deadline, and a wait that runs out fails the test
/// with what it waited for (instead of hanging it, or passing it by a sleep's luck).

/// A wait that ran out of time: the test fails with what it waited for.
public struct TimedOut: Error, CustomStringConvertible {
    public var what: String
    public init(what: String) { self.what = what }
    public var description: String { "timed out waiting for \(what)" }
}

/// How long a test waits for what should come at once: a deadline, never a sleep, so it costs
/// nothing when the test passes. Generous, because `swift test` runs the tests side by side: a CI
/// run saw a wait of well under a second here alone take over 10 s while the model and fuzz
/// tests filled both threads of the cooperative pool.
public let testPatience = Duration.seconds(60)

/// Polls `condition` every 10 ms until it holds; throws `TimedOut` after `timeout`.
public func eventually(_ what: String, timeout: Duration = testPatience, _ condition: () throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw TimedOut(what: what) }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// `body`'s value, or `TimedOut` once `timeout` passes (a body that hangs is left running: the
/// test fails instead of hanging with it).
public func withDeadline<T: Sendable>(_ timeout: Duration, _ what: String, _ body: @escaping @Sendable () async -> T) async throws -> T {
    let (answers, answer) = AsyncStream<T?>.makeStream()
    let work = Task { answer.yield(await body()) }
    let timer = Task { try? await Task.sleep(for: timeout); answer.yield(nil) }
    defer { timer.cancel() }
    for await first in answers {
        if let first { return first }
        work.cancel()
        break
    }
    throw TimedOut(what: what)
}
