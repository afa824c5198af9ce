import Foundation
import Synchronization

/// Runs blocking work (POSIX file calls, SQLite, `fdatasync`, copying a file) off Swift's
/// cooperative pool: that pool has one thread per core, and a slow disk or a big directory must
/// not stall every other task (the lookups of the mount among them) while it waits.
///
/// A concurrent dispatch queue starts a job fastest (two microseconds, where a thread of its own
/// takes fifty): on Linux it runs on the threads of Swift's global executor, the cooperative pool
/// itself. So it may hold only one job less than there are cores, and a blocked job never takes
/// the pool's last thread. There it also runs about one job per core at once and adds a thread
/// only about once a second while they are blocked (six jobs waiting for the catalog's writer
/// took four seconds to start): a job beyond the queue's share goes to threads of its own
/// (`BlockingThreads`), started at once.
public enum Blocking {
    private static let queue = DispatchQueue(label: "docfs.blocking", attributes: .concurrent)
    private static let overflow = BlockingThreads(name: "docfs.blocking")
    private static let queueWidth = max(1, ProcessInfo.processInfo.activeProcessorCount - 1)
    /// Jobs given to `queue` and not yet finished.
    private static let onQueue = Atomic<Int>(0)

    public static func run<T: Sendable, Failure: Error>(_ body: @escaping @Sendable () throws(Failure) -> T) async throws(Failure) -> T {
        let result: Result<T, Failure> = await withCheckedContinuation { continuation in
            submit {
                do throws(Failure) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    static func submit(_ job: @escaping @Sendable () -> Void) {
        if onQueue.wrappingAdd(1, ordering: .relaxed).newValue <= queueWidth {
            queue.async {
                job()
                onQueue.wrappingSubtract(1, ordering: .relaxed)
            }
        } else {
            onQueue.wrappingSubtract(1, ordering: .relaxed)
            overflow.submit(job)
        }
    }
}

/// Threads that grow with the jobs waiting for one and end after a while idle.
final class BlockingThreads: @unchecked Sendable {
    /// Beyond this many, jobs wait for a thread: a runaway of blocked work must not exhaust the process.
    static let limit = 64
    private static let idleLifetime: TimeInterval = 10

    private let name: String
    // Everything below is read and written with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var next = 0
    private var idle = 0
    private var running = 0

    init(name: String) {
        self.name = name
    }

    func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        defer { condition.unlock() }
        jobs.append(job)
        // Each idle thread takes one waiting job; a job none will take gets a thread of its own.
        if jobs.count - next > idle, running < Self.limit {
            running += 1
            let thread = Thread { [self] in work() }
            thread.name = name
            thread.start()
        } else {
            condition.signal()
        }
    }

    private func work() {
        condition.lock()
        while true {
            while next == jobs.count {
                idle += 1
                let woken = condition.wait(until: Date(timeIntervalSinceNow: Self.idleLifetime))
                idle -= 1
                if !woken, next == jobs.count {
                    running -= 1
                    condition.unlock()
                    return
                }
            }
            let job = jobs[next]
            next += 1
            if next == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                next = 0
            } else if next >= 1024, next * 2 >= jobs.count {
                jobs.removeFirst(next)  // a queue that never empties does not grow without end
                next = 0
            }
            condition.unlock()
            job()
            condition.lock()
        }
    }
}
