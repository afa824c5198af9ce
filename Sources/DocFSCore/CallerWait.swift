// How a caller blocked in open() or read() waits for shared work: until --io-timeout or a FUSE
// interrupt. The work goes on for other waiters.
import Glibc
import Synchronization

public enum CallerWait {
    public static let interrupted = FSError.local(errno: EINTR, "interrupted")

    /// The task running `work` is cancelled when the wait ends early; shared work it awaits keeps
    /// running. `abandoned` gets a late result, to give back what it holds.
    public static func run<T: Sendable>(limit: Duration?, timeout: @escaping @Sendable () -> FSError = { .timedOut("no answer in time") },
                                        _ work: @escaping @Sendable () async throws(FSError) -> T,
                                        abandoned: (@Sendable (T) -> Void)? = nil) async throws(FSError) -> T {
        if Task.isCancelled { throw interrupted }
        let outcome = Outcome<T>()
        let result: Result<T, FSError> = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, FSError>, Never>) in
                outcome.arm(continuation)
                let worker = Task {
                    let result: Result<T, FSError>
                    do throws(FSError) { result = .success(try await work()) } catch { result = .failure(error) }
                    if !outcome.resolve(result), case .success(let value) = result { abandoned?(value) }
                }
                let timer: Task<Void, Never>? = limit.map { limit in
                    Task {
                        try? await Task.sleep(for: limit)
                        if !Task.isCancelled { outcome.resolve(.failure(timeout())) }
                    }
                }
                outcome.whenResolved {
                    worker.cancel()
                    timer?.cancel()
                }
            }
        } onCancel: {
            outcome.resolve(.failure(interrupted))
        }
        return try result.get()
    }

    private final class Outcome<T: Sendable>: Sendable {
        private struct State {
            var continuation: CheckedContinuation<Result<T, FSError>, Never>?
            var result: Result<T, FSError>?
            var cleanup: (@Sendable () -> Void)?
        }

        private let state = Mutex(State())

        /// Called once. Of it and the first `resolve`, the later resumes the continuation.
        func arm(_ continuation: CheckedContinuation<Result<T, FSError>, Never>) {
            let ready = state.withLock { state -> Result<T, FSError>? in
                state.continuation = continuation
                return state.result
            }
            if let ready { continuation.resume(returning: ready) }
        }

        @discardableResult
        func resolve(_ result: Result<T, FSError>) -> Bool {
            let (won, continuation, cleanup) = state.withLock { state -> (Bool, CheckedContinuation<Result<T, FSError>, Never>?, (@Sendable () -> Void)?) in
                guard state.result == nil else { return (false, nil, nil) }
                state.result = result
                guard let continuation = state.continuation else { return (true, nil, nil) }
                let cleanup = state.cleanup
                state.cleanup = nil
                return (true, continuation, cleanup)
            }
            continuation?.resume(returning: result)
            cleanup?()
            return won
        }

        func whenResolved(_ cleanup: @escaping @Sendable () -> Void) {
            let now = state.withLock { state -> Bool in
                guard state.result == nil else { return true }
                state.cleanup = cleanup
                return false
            }
            if now { cleanup() }
        }
    }
}
