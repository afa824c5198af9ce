import DocFSStore
import Foundation
import Synchronization

/// Uploads a new file while it is written in order, so it is on the store about when `close()`
/// returns. The journal is unchanged: the copy is still committed and uploaded at close. A
/// commit of exactly the bytes sent completes the body; anything else cancels it, leaving
/// nothing on the store. Bytes written after the completing commit are never sent in it.
public final class StreamedUpload: GrowingContent, Sendable {
    public enum Outcome: Sendable {
        case stored(RemoteEntry, commit: UInt64)
        /// The store holds nothing of it.
        case failed(StoreError)
    }

    public struct Policy: Sendable, Equatable {
        /// Bytes written in order before a file streams; smaller files go up at close.
        public var minimumLength: Int64
        /// A writer idle this long ends the stream (a server would time it out).
        public var idleLimit: Duration
        /// A slower writer, after its first second, ends the stream: it saves nothing and holds a request.
        public var minimumRate: Int64
        public var maximumStreams: Int

        public init(minimumLength: Int64 = 4 << 20, idleLimit: Duration = .seconds(2), minimumRate: Int64 = 2 << 20,
                    maximumStreams: Int = 4) {
            self.minimumLength = minimumLength
            self.idleLimit = idleLimit
            self.minimumRate = minimumRate
            self.maximumStreams = maximumStreams
        }

        public static let `default` = Policy()
    }

    public let inode: Inode
    public let path: StorePath
    private let descriptor: Int32
    private let policy: Policy
    private let started = ContinuousClock.now
    private let state: Mutex<State>

    private struct State {
        var written: Int64
        var end: Int64?
        var commit: UInt64?
        var abandoned = false
        var waiter: CheckedContinuation<Void, Never>?
        var task: Task<Outcome, Never>?
        var sent: Int64 = 0
        var ended = false
    }

    /// Owns `descriptor`; sending starts at once.
    init(inode: Inode, path: StorePath, descriptor: Int32, written: Int64, policy: Policy,
         send: @escaping @Sendable (StreamedUpload) async throws(StoreError) -> RemoteEntry) {
        self.inode = inode
        self.path = path
        self.descriptor = descriptor
        self.policy = policy
        self.state = Mutex(State(written: written))
        let task = Task { () -> Outcome in
            let sent: Result<RemoteEntry, StoreError> = await withTaskCancellationHandler {
                do throws(StoreError) {
                    return .success(try await send(self))
                } catch {
                    return .failure(error)
                }
            } onCancel: {
                self.abandon()
            }
            self.state.withLock { $0.ended = true }
            switch sent {
            case .success(let entry): return self.outcome(storing: entry)
            case .failure(let error): return .failed(error)
            }
        }
        state.withLock { $0.task = task }
    }

    deinit { close(descriptor) }

    public func outcome() async -> Outcome {
        guard let task = state.withLock({ $0.task }) else { return .failed(.notSupported("stream never started")) }
        return await task.value
    }

    /// Nil once the store answered.
    public var progress: (sent: Int64, total: Int64, complete: Bool)? {
        state.withLock { state in
            state.ended || state.abandoned ? nil : (state.sent, state.end ?? state.written, state.end != nil)
        }
    }

    public func cancel() {
        state.withLock { $0.task }?.cancel()
    }

    private func outcome(storing entry: RemoteEntry) -> Outcome {
        state.withLock { state in
            guard !state.abandoned, let end = state.end, let commit = state.commit, entry.size == end else {
                return .failed(.protocolError("\(path): the store holds \(entry.size) bytes of a streamed upload of \(state.end ?? -1)"))
            }
            return .stored(entry, commit: commit)
        }
    }

    // MARK: What the copy tells it

    /// Any write but the next bytes in order ends the stream.
    func wrote(_ range: Range<Int64>) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.abandoned, state.end == nil, !range.isEmpty else { return nil }
            if range.lowerBound == state.written {
                state.written = range.upperBound
            } else {
                state.abandoned = true
            }
            return state.waiter.take()
        }
        waiter?.resume()
    }

    public var sealedCommit: UInt64? { state.withLock { $0.commit } }

    /// Returns whether `length` is the whole content (else it ends early).
    func seal(length: Int64, commit: UInt64) -> Bool {
        let (complete, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard !state.abandoned, state.end == nil else { return (false, nil) }
            if state.written == length {
                state.end = length
                state.commit = commit
            } else {
                state.abandoned = true
            }
            return (!state.abandoned, state.waiter.take())
        }
        waiter?.resume()
        return complete
    }

    /// Its completing commit went unrecorded: it fails, whatever the store answers.
    func revoke() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.abandoned = true
            state.commit = nil
            return state.waiter.take()
        }
        waiter?.resume()
    }

    /// Unless a commit completed it.
    public func abandon() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.end == nil { state.abandoned = true }
            return state.waiter.take()
        }
        waiter?.resume()
    }

    // MARK: GrowingContent

    /// `.cancelled` also to a caller whose task was cancelled (the store gave up on this body: a
    /// question asked alongside it found the name taken); the stream itself goes on.
    public func next(after offset: Int64) async -> GrowingExtent {
        while true {
            let answer = state.withLock { state -> GrowingExtent? in
                if state.abandoned || Task.isCancelled { return .cancelled }
                if offset < state.written { return .written(upTo: state.end.map { min($0, state.written) } ?? state.written) }
                if let end = state.end, offset >= end { return .end }
                let elapsed = ContinuousClock.now - started
                if elapsed > .seconds(1), .seconds(Double(state.written) / Double(policy.minimumRate)) < elapsed {
                    state.abandoned = true
                    return .cancelled
                }
                return nil
            }
            if let answer { return answer }
            await waitForWrites(beyond: offset)
        }
    }

    /// `idleLimit` with no byte written ends the stream.
    private func waitForWrites(beyond offset: Int64) async {
        let timer = Task { [policy] in
            try? await Task.sleep(for: policy.idleLimit)
            guard !Task.isCancelled else { return }
            let waiter = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard state.written <= offset, state.end == nil else { return nil }
                state.abandoned = true
                return state.waiter.take()
            }
            waiter?.resume()
        }
        defer { timer.cancel() }
        // The cancellation is looked at under the lock the handler takes: either the wait sees it,
        // or the handler finds the waiter.
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.abandoned || offset < state.written || state.end != nil || Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiter.take() }?.resume()
        }
    }

    public func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(StoreError) -> Int {
        while true {
            let count = pread(descriptor, buffer.baseAddress, buffer.count, off_t(offset))
            if count >= 0 {
                state.withLock { $0.sent = max($0.sent, offset + Int64(count)) }
                return count
            }
            if errno == EINTR { continue }
            let code = errno
            throw .localIO(errno: code, message: "reading the file being uploaded: \(String(cString: strerror(code)))")
        }
    }
}

