import DocFSStore
import Foundation
import Synchronization

/// The upload of a new file that goes out while the file is still being written: a large file
/// copied into the mount in order (`cp`, `dd`, a download saved there) is on the store about
/// when its `close()` returns, instead of an upload's time after it. rclone and davfs2 upload
/// after the close; mountpoint-s3 streams every write this way and so refuses writes out of order.
///
/// docfs keeps its journal as it is (the local copy is written, committed at close and
/// uploaded from there, whatever happens to the stream), and sends the bytes the copy gains at
/// its end as they land, in one body of unknown length (`Store.write(_:growing:condition:)`),
/// with the new file's condition (nothing may be at the name). The store shows nothing at the
/// name before the body is whole (WebDAV: it goes to a temporary name, then one MOVE). How it ends:
/// - the close (or an fsync) commits exactly the bytes sent in order: the body ends there and
///   the store's answer confirms that commit as an upload's would; nothing more is sent;
/// - anything else — a write out of order, a truncate, a rename or unlink of the file, a
///   writer that pauses or trickles — cancels it, and the upload at close sends the file as
///   before; the store never held a part of it (the model test checks that no torn content
///   ever reaches the store);
/// - a failure of the transfer also leaves the upload at close to do everything.
///
/// It reads the copy through a descriptor of its own, of the file the copy had when the stream
/// began; at the commit that completes it, the copy gives the next write a file of its own
/// (as for an upload's snapshot), so bytes written after the close are never sent as part of it.
public final class StreamedUpload: GrowingContent, Sendable {
    /// What the store holds once the stream ended.
    public enum Outcome: Sendable {
        /// The store holds `entry`, the whole of commit `commit`.
        case stored(RemoteEntry, commit: UInt64)
        /// Cancelled, or the transfer failed: the store holds nothing of it.
        case failed(StoreError)
    }

    /// When a stream starts and when it gives up on a slow writer.
    public struct Policy: Sendable, Equatable {
        /// A new file streams once it has this many bytes, written in order from its start:
        /// smaller files go up in one request at close, as before.
        public var minimumLength: Int64
        /// A writer that adds nothing for this long ends the stream (a server would time it out).
        public var idleLimit: Duration
        /// A writer slower than this, after its first second, ends the stream: a slow stream
        /// saves nothing and holds a request open.
        public var minimumRate: Int64
        /// Streams under way at most; the files beyond are uploaded at close.
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
    /// Where it is being sent.
    public let path: StorePath
    private let descriptor: Int32
    private let policy: Policy
    private let started = ContinuousClock.now
    private let state: Mutex<State>

    private struct State {
        /// The bytes from 0 that were written in order, and may be sent.
        var written: Int64
        /// Where the body ends: set by the commit that completes it.
        var end: Int64?
        /// The commit it completes.
        var commit: UInt64?
        /// Ended early: the body ends where it is.
        var abandoned = false
        /// The body waiting for more bytes.
        var waiter: CheckedContinuation<Void, Never>?
        var task: Task<Outcome, Never>?
        /// Bytes read for sending so far (`user.docfs.progress`).
        var sent: Int64 = 0
        /// The store answered (or the transfer failed).
        var ended = false
    }

    /// A stream of the copy's file (`descriptor`, which it now owns) from its start, of which
    /// `written` bytes are there already, sent at once with `send` (the store's upload of it):
    /// whoever gets hold of it finds it sending.
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

    /// The store's answer, once the stream ended.
    public func outcome() async -> Outcome {
        guard let task = state.withLock({ $0.task }) else { return .failed(.notSupported("stream never started")) }
        return await task.value
    }

    /// How far it got while it is sending: bytes sent, of those written (or of the whole, once
    /// a commit completed it); whether a commit completed it. Nil once the store answered.
    public var progress: (sent: Int64, total: Int64, complete: Bool)? {
        state.withLock { state in
            state.ended || state.abandoned ? nil : (state.sent, state.end ?? state.written, state.end != nil)
        }
    }

    /// Stops sending (the mount is going away): the body ends where it is.
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

    /// `range` of the copy was written (its bytes have landed): the next bytes in order go
    /// out; any other write ends the stream.
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

    /// The commit that completed it, if one did.
    public var sealedCommit: UInt64? { state.withLock { $0.commit } }

    /// The copy committed `length` bytes as commit `commit`: the body ends there. Returns
    /// whether that is the stream's whole content (else it ends early, as `abandon`).
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

    /// A completed stream whose commit the journal could not record: it is cancelled after
    /// all (its outcome is a failure, whatever the store answers).
    func revoke() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.abandoned = true
            state.commit = nil
            return state.waiter.take()
        }
        waiter?.resume()
    }

    /// Cancels it, unless a commit completed it: the file goes up at close, as any other.
    public func abandon() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.end == nil { state.abandoned = true }
            return state.waiter.take()
        }
        waiter?.resume()
    }

    // MARK: GrowingContent

    public func next(after offset: Int64) async -> GrowingExtent {
        while true {
            let answer = state.withLock { state -> GrowingExtent? in
                if state.abandoned { return .cancelled }
                if offset < state.written { return .written(upTo: state.end.map { min($0, state.written) } ?? state.written) }
                if let end = state.end, offset >= end { return .end }
                // A writer slower than the policy's rate is not worth a stream.
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

    /// Waits until something changes, or `idleLimit` passed with no byte written (which ends
    /// the stream).
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
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.abandoned || offset < state.written || state.end != nil { return true }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
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

