import Foundation

/// Runs blocking work (POSIX file calls, SQLite, `fdatasync`, copying a file) on threads of its
/// own, so that it never holds a thread of Swift's cooperative pool: that pool has one thread
/// per core, and a slow disk or a big directory must not stall every other task (the lookups
/// of the mount among them) while it waits.
///
/// Not a concurrent dispatch queue: on Linux, libdispatch gives one about a thread per core and
/// adds more only about once a second while they are blocked, so a job that waits for the
/// catalog's writer held every job behind it (six waiting jobs took four seconds to start).
/// Here each job starts at once on an idle thread or a new one, up to `BlockingThreads.limit`.
public enum Blocking {
    private static let threads = BlockingThreads(name: "docfs.blocking")

    public static func run<T: Sendable, Failure: Error>(_ body: @escaping @Sendable () throws(Failure) -> T) async throws(Failure) -> T {
        let result: Result<T, Failure> = await withCheckedContinuation { continuation in
            threads.submit {
                do throws(Failure) {
                    continuation.resume(returning: .success(try body()))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
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
