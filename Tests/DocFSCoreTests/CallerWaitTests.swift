@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Glibc
import Synchronization
import Testing

/// A caller waits for shared work at most its deadline, and only while it is not cancelled;
/// the work itself goes on (issue 10: callers never hang).
@Suite("A caller's wait is bounded and interruptible, the work it waits for is not cut")
struct CallerWaitTests {
    @Test func aWaitEndsAtItsDeadlineWhileTheWorkGoesOn() async throws {
        let finished = Mutex(false)
        let started = ContinuousClock.now
        await #expect(throws: FSError.timedOut("late")) {
            try await CallerWait.run(limit: .milliseconds(200), timeout: { .timedOut("late") }) { () throws(FSError) in
                // Work that is not cancellable, as a shared download's `Task.value` is not.
                try? await Task.detached { try await Task.sleep(for: .seconds(120)) }.value
                finished.withLock { $0 = true }
            }
        }
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(200), "waited \(waited)")
        #expect(!finished.withLock { $0 }, "the wait ended before the work (\(waited))")
    }

    @Test func aCancelledWaitEndsAtOnceWithEINTR() async throws {
        // Not timed against a clock (a full `swift test` under load oversleeps by 20 s): the
        // wait must end while the work, far longer than any oversleep, still runs.
        let finished = Mutex(false)
        let waiter = Task {
            try await CallerWait.run(limit: nil) { () throws(FSError) -> Int in
                try? await Task.detached { try await Task.sleep(for: .seconds(600)) }.value
                finished.withLock { $0 = true }
                return 1
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        waiter.cancel()
        await #expect(throws: CallerWait.interrupted) { _ = try await waiter.value }
        #expect(!finished.withLock { $0 }, "the wait ended long before the work")
        #expect(CallerWait.interrupted == .local(errno: EINTR, "interrupted"))
    }

    @Test func aResultNobodyTookIsHandedBack() async throws {
        let handedBack = Mutex<Int?>(nil)
        let waiter = Task {
            try await CallerWait.run(limit: nil, { () throws(FSError) -> Int in
                try? await Task.detached { try await Task.sleep(for: .milliseconds(300)) }.value
                return 42
            }, abandoned: { value in handedBack.withLock { $0 = value } })
        }
        try await Task.sleep(for: .milliseconds(50))
        waiter.cancel()
        _ = try? await waiter.value
        try await eventually("the value handed back") { handedBack.withLock { $0 } != nil }
        #expect(handedBack.withLock { $0 } == 42, "a late result (an open handle) is given back, not leaked")
    }

    @Test func aResultInTimeIsReturned() async throws {
        let value = try await CallerWait.run(limit: .seconds(5)) { () throws(FSError) -> Int in 7 }
        #expect(value == 7)
    }
}
