@testable import DocFSStore
import DocFSTesting
import Foundation
import Synchronization
import Testing

/// `Blocking` runs the core's SQLite and file calls. Some of them wait (for the catalog's
/// writer, a slow disk): those that don't must not wait in line behind them. Driven from
/// plain threads, so that what is measured is the blocking threads, not the cooperative pool.
@Suite("Blocking work does not wait behind work that waits")
struct BlockingTests {
    @Test func everyJobStartsAtOnceWhileOthersWait() {
        let waiting = 3 * ProcessInfo.processInfo.activeProcessorCount
        let release = DispatchSemaphore(value: 0)
        let startedAt = Mutex<[ContinuousClock.Instant]>([])
        let asked = ContinuousClock.now
        for _ in 0..<waiting {
            Blocking.submit {
                startedAt.withLock { $0.append(.now) }
                _ = release.wait(timeout: .now() + 10)  // the deadline frees them should the test be stuck
            }
        }
        let quick = DispatchSemaphore(value: 0)
        Blocking.submit { quick.signal() }
        let answered = quick.wait(timeout: .now() + 10)
        let waited = ContinuousClock.now - asked
        let deadline = ContinuousClock.now + testPatience
        while startedAt.withLock({ $0.count }) < waiting, ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
        let started = startedAt.withLock { $0 }
        for _ in 0..<waiting { release.signal() }

        #expect(answered == .success)
        #expect(waited < .seconds(2), "a job that does not wait waited \(waited) behind \(waiting) that do")
        #expect(started.count == waiting)
        let last = started.max() ?? asked
        #expect(last - asked < .seconds(2), "\(waiting) jobs that wait took \(last - asked) to start")
    }
}
