import DocFSStore
import Logging
import Synchronization

/// Small files are fetched whole at open; larger ones by ranges as reads ask, read-ahead never
/// past half of what a reader has read (a sniffer that stops wastes little) until it has read
/// `streamingAfter` in order, then twice that, the window growing four times as fast (it grows
/// once a round trip: growing slower, it would take a distant store many more to reach full
/// size) and topped up a request at a time, up to 8 requests of 16 MiB on the wire.
public struct StreamingPolicy: Sendable, Equatable {
    public var wholeFileLimit: Int64
    public var head: Int64
    public var minimumRequest: Int64
    public var maximumRequest: Int64
    public var initialWindow: Int64
    public var maximumWindow: Int64
    public var requestsInFlight: Int
    public var streamingAfter: Int64

    public init(wholeFileLimit: Int64 = 1 << 20, head: Int64 = 128 << 10, minimumRequest: Int64 = 128 << 10,
                maximumRequest: Int64 = 16 << 20, initialWindow: Int64 = 1 << 20, maximumWindow: Int64 = 128 << 20,
                requestsInFlight: Int = 8, streamingAfter: Int64 = 256 << 10) {
        self.wholeFileLimit = max(0, wholeFileLimit)
        self.head = max(1, head)
        self.minimumRequest = max(1, minimumRequest)
        self.maximumRequest = max(self.minimumRequest, maximumRequest)
        self.initialWindow = max(1, initialWindow)
        self.maximumWindow = max(self.initialWindow, maximumWindow)
        self.requestsInFlight = max(1, requestsInFlight)
        self.streamingAfter = max(0, streamingAfter)
    }

    public static let `default` = StreamingPolicy()

    public static let wholeFiles = StreamingPolicy(wholeFileLimit: .max)
}

/// Fills a sparse copy by ranges on demand, each `If-Match` the head's version, so versions
/// never mix. Lock order: the fetcher's lock, then the copy's (the copy never calls back).
public final class RangeFetcher: Sendable {
    public let size: Int64
    private let store: any Store
    private let location: Mutex<StorePath>
    private var path: StorePath { location.withLock { $0 } }
    private let copy: LocalCopy
    private let policy: StreamingPolicy
    private let retry: RetryPolicy
    private let logger: Logger
    private let state: Mutex<State>
    /// Returns once this mount's attribute changes of the item have reached the store and moved
    /// `version` along (`VersionsBeingMade`).
    private let ownVersionMoves: @Sendable () async -> Void

    private struct Waiter {
        var range: ByteRange
        var continuation: CheckedContinuation<FSError?, Never>
    }

    private struct State {
        var inFlight: [UInt64: (range: ByteRange, task: Task<Void, Never>)] = [:]
        var queued: [ByteRange] = []
        var nextRequest: UInt64 = 0
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
        var failure: FSError?
        /// Moves only when docfs itself gave the same content a new version (`rebase`).
        var version: ETag
        /// Per handle: two readers in different places each keep their own read-ahead.
        var streams: [UInt64: ReadStream] = [:]
        var reads: UInt64 = 0
        var headEnd: Int64
        /// Also the count at the last stall.
        var arrivedBytes: Int64 = 0
        var stall: (at: ContinuousClock.Instant, arrivedBytes: Int64)?
        /// The next overlapping wait gets the error once; a later one asks again.
        var unreported: [(range: ByteRange, failure: FSError)] = []
    }

    private static let maximumUnreported = 16

    public var isFetching: Bool {
        state.withLock { !$0.inFlight.isEmpty || !$0.queued.isEmpty }
    }

    /// The store's version moved on while this fetcher filled the copy: no byte it lacks can be
    /// had any more (a reader's next read of one fails with ESTALE).
    public var metNewerVersion: Bool {
        state.withLock { $0.failure == .stale }
    }

    private struct ReadStream {
        var start: Int64 = 0
        var consumed: Int64 = 0
        var frontier: Int64
        var window: Int64 = 0
        var lastRead: UInt64 = 0
    }

    private static let maximumStreams = 16

    init(store: any Store, path: StorePath, version: ETag, size: Int64, fetched: Int64, copy: LocalCopy,
         policy: StreamingPolicy, retry: RetryPolicy, logger: Logger, ownVersionMoves: @escaping @Sendable () async -> Void = {}) {
        self.store = store
        self.ownVersionMoves = ownVersionMoves
        self.location = Mutex(path)
        self.size = size
        self.copy = copy
        self.policy = policy
        self.retry = retry
        self.logger = logger
        self.state = Mutex(State(version: version, headEnd: fetched))
    }

    // MARK: Reading

    /// Never waits. Returns whether the read's bytes are local now.
    public func prepare(_ wanted: ByteRange, stream id: UInt64 = 0) -> Bool {
        let range = clamped(wanted)
        if range.isEmpty { return true }
        return state.withLock { state in
            guard state.failure == nil else { return copy.held.contains(range) }
            var stream = state.streams.removeValue(forKey: id) ?? ReadStream(frontier: state.headEnd)
            let sequential = range.lowerBound >= stream.start
                && range.lowerBound <= max(stream.frontier, stream.consumed) + policy.minimumRequest
            if !sequential {
                // A jump: this stream's read-ahead not on the wire yet is not wanted any more.
                dropReadAhead(stream.consumed..<stream.frontier, of: id, in: &state)
                stream = ReadStream(start: alignedDown(range.lowerBound), consumed: range.lowerBound,
                                    frontier: alignedDown(range.lowerBound))
            }
            stream.consumed = max(stream.consumed, range.upperBound)
            // Its pages were cached, so no fetch at open: the first read fetches it all.
            let ownEnd = size <= policy.wholeFileLimit ? size : min(size, alignedUp(range.upperBound))
            // Topped up once a request's worth of the window was read (half a small one): a
            // window refilled by halves runs dry every round trip at a distance.
            let refill = min(stream.window / 2, policy.maximumRequest)
            if sequential && (range.upperBound > stream.frontier || (stream.window > 0 && stream.consumed + stream.window - refill >= stream.frontier)) {
                // At most half what the stream has read (a reader stopping after N bytes wastes about
                // N/2), twice once it streams; never more than the maximum window.
                let consumed = stream.consumed - stream.start
                let streaming = consumed >= policy.streamingAfter
                let read = max(streaming ? consumed * 2 : consumed / 2, policy.minimumRequest)
                stream.window = min(max(stream.window * (streaming ? 4 : 2), policy.initialWindow), policy.maximumWindow, read)
                let ahead = min(size, max(stream.frontier, stream.consumed) + stream.window, max(stream.frontier, stream.consumed + read))
                request(max(stream.frontier, ownEnd)..<max(ahead, ownEnd), urgent: false, in: &state)
                stream.frontier = max(ahead, ownEnd)
            } else {
                stream.frontier = max(stream.frontier, ownEnd)
            }
            if state.streams.count >= Self.maximumStreams,
               let oldest = state.streams.min(by: { $0.value.lastRead < $1.value.lastRead })?.key {
                state.streams[oldest] = nil
            }
            state.reads += 1
            stream.lastRead = state.reads
            state.streams[id] = stream
            let local = copy.held.contains(range)
            if !local { request(alignedDown(range.lowerBound)..<ownEnd, urgent: true, in: &state) }
            launch(&state)
            return local
        }
    }

    /// Further reads fail at once until `stalled` says otherwise (the kernel asks once per page).
    public func noteStall() {
        state.withLock { $0.stall = (ContinuousClock.now, $0.arrivedBytes) }
    }

    /// A trickle (under 64 KiB since the stall) counts as stalled.
    public func stalled(within window: Duration) -> Bool {
        state.withLock { state in
            guard let stall = state.stall else { return false }
            return ContinuousClock.now - stall.at < window && state.arrivedBytes - stall.arrivedBytes < 64 << 10
        }
    }

    public func endStream(_ id: UInt64) {
        state.withLock { _ = $0.streams.removeValue(forKey: id) }
    }

    /// A cancelled wait ends at once; its requests go on for other readers.
    public func wait(for wanted: ByteRange) async throws(FSError) {
        let range = clamped(wanted)
        if range.isEmpty { return }
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        let failure: FSError? = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let answer: FSError?? = state.withLock { state in
                    if copy.held.contains(range) { return .some(nil) }
                    if let failure = state.failure { return .some(failure) }
                    if Task.isCancelled { return .some(CallerWait.interrupted) }
                    if let index = state.unreported.firstIndex(where: { $0.range.overlaps(range) }) {
                        return .some(state.unreported.remove(at: index).failure)
                    }
                    request(range, urgent: true, in: &state)
                    launch(&state)
                    state.waiters[id] = Waiter(range: range, continuation: continuation)
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.continuation.resume(returning: CallerWait.interrupted)
        }
        if let failure { throw failure }
    }

    /// Returns once no request can write into the copy.
    public func stop(_ reason: FSError) async {
        for task in cancel(reason) { await task.value }
    }

    @discardableResult
    public func cancel(_ reason: FSError) -> [Task<Void, Never>] {
        let (tasks, waiters) = state.withLock { state in
            if state.failure == nil { state.failure = reason }
            state.queued.removeAll()
            let waiters = Array(state.waiters.values)
            state.waiters.removeAll()
            return (state.inFlight.values.map { $0.task }, waiters)
        }
        for task in tasks { task.cancel() }
        for waiter in waiters { waiter.continuation.resume(returning: reason) }
        return tasks
    }

    public func retarget(to newPath: StorePath) {
        location.withLock { $0 = newPath }
    }

    /// Same content, new version: a request that met the change is asked again.
    public func rebase(from old: ETag, to new: ETag) {
        state.withLock { state in
            if state.version == old { state.version = new }
        }
    }

    // MARK: Requests

    /// Unless another stream or a waiting reader wants it. Requests on the wire go on.
    private func dropReadAhead(_ range: ByteRange, of id: UInt64, in state: inout State) {
        guard !range.isEmpty, !state.queued.isEmpty else { return }
        var kept = ByteRangeSet()
        for (other, stream) in state.streams where other != id { kept.insert(stream.start..<stream.frontier) }
        for waiter in state.waiters.values { kept.insert(waiter.range) }
        let dropped = ByteRangeSet(kept.missing(in: range))
        guard !dropped.isEmpty else { return }
        state.queued = state.queued.flatMap { dropped.missing(in: $0) }
    }

    /// Urgent ranges go first.
    private func request(_ range: ByteRange, urgent: Bool, in state: inout State) {
        let range = clamped(range)
        guard !range.isEmpty else { return }
        var covered = copy.held
        for busy in state.inFlight.values { covered.insert(busy.range) }
        if !urgent { for queued in state.queued { covered.insert(queued) } }
        let gaps = covered.missing(in: range)
        guard !gaps.isEmpty else { return }
        let pieceLimit = size <= policy.wholeFileLimit ? max(size, 1) : policy.maximumRequest
        let pieces = gaps.flatMap { gap in
            stride(from: gap.lowerBound, to: gap.upperBound, by: Int(pieceLimit)).map { $0..<min($0 + pieceLimit, gap.upperBound) }
        }
        if urgent {
            let taken = ByteRangeSet(gaps)
            state.queued = state.queued.flatMap { taken.missing(in: $0) }
            state.queued.insert(contentsOf: pieces, at: 0)
        } else {
            state.queued.append(contentsOf: pieces)
        }
    }

    private func launch(_ state: inout State) {
        while state.inFlight.count < policy.requestsInFlight, !state.queued.isEmpty, state.failure == nil {
            let range = state.queued.removeFirst()
            if copy.held.contains(range) { continue }
            let id = state.nextRequest
            state.nextRequest += 1
            // Created under the lock, so `finished` finds it registered.
            state.inFlight[id] = (range, Task.detached { [self] in
                let failure = await fetch(range)
                finished(id, range: range, failure: failure)
            })
        }
    }

    private func fetch(_ range: ByteRange) async -> FSError? {
        let sink = Sink(copy: copy, fetcher: self)
        do throws(StoreError) {
            var rebased = 0
            while true {
                let version = state.withLock { $0.version }
                do {
                    try await retry.run({ () async throws(StoreError) -> Void in
                        // A retry asks only for what did not arrive.
                        let missing = copy.held.missing(in: range)
                        guard let first = missing.first, let last = missing.last else { return }
                        _ = try await store.read(path, range: first.lowerBound..<last.upperBound, ifMatch: version, into: sink)
                    }, beforeRetry: { [logger, path] error in
                        logger.info("retrying a ranged read", metadata: ["path": "\(path)", "range": "\(range)", "error": "\(error)"])
                    })
                    break
                } catch .versionMismatch where rebased < 3 {
                    // docfs itself may have moved the version meanwhile (see rebase).
                    rebased += 1
                    if state.withLock({ $0.version }) == version { await ownVersionMoves() }
                    if state.withLock({ $0.version }) == version { throw .versionMismatch(path) }
                }
            }
        } catch .versionMismatch {
            logger.warning("the store's version changed while the file was open", metadata: ["path": "\(path)"])
            return .stale
        } catch {
            if Task.isCancelled { return .io("fetch of \(path) cancelled") }
            logger.error("ranged read failed", metadata: ["path": "\(path)", "range": "\(range)", "error": "\(error)"])
            return FSError(error)
        }
        if copy.held.contains(range) { return nil }
        return .io("short read of \(path) bytes \(range.lowerBound)..<\(range.upperBound): \(copy.held)")
    }

    fileprivate func arrived(_ count: Int) {
        let ready = state.withLock { state -> [Waiter] in
            state.arrivedBytes += Int64(count)
            guard !state.waiters.isEmpty else { return [] }
            let held = copy.held
            let ready = state.waiters.filter { held.contains($0.value.range) }
            for id in ready.keys { state.waiters[id] = nil }
            return Array(ready.values)
        }
        for waiter in ready { waiter.continuation.resume(returning: nil) }
    }

    private func finished(_ id: UInt64, range: ByteRange, failure: FSError?) {
        let answers = state.withLock { state -> [(Waiter, FSError?)] in
            state.inFlight[id] = nil
            if failure == .stale, state.failure == nil {
                state.failure = .stale
                state.queued.removeAll()
            }
            launch(&state)
            let held = copy.held
            var coming = held
            for busy in state.inFlight.values { coming.insert(busy.range) }
            for queued in state.queued { coming.insert(queued) }
            var answers: [(Waiter, FSError?)] = []
            if let failure, failure != .stale, !state.waiters.values.contains(where: { $0.range.overlaps(range) }) {
                state.unreported.append((range, failure))
                if state.unreported.count > Self.maximumUnreported { state.unreported.removeFirst() }
            }
            for (waiterID, waiter) in state.waiters {
                if held.contains(waiter.range) {
                    answers.append((waiter, nil))
                } else if let failure, waiter.range.overlaps(range) {
                    answers.append((waiter, failure))
                } else if !coming.contains(waiter.range) {
                    answers.append((waiter, failure ?? state.failure ?? .io("bytes of \(path) did not arrive")))
                } else {
                    continue
                }
                state.waiters[waiterID] = nil
            }
            return answers
        }
        for (waiter, failure) in answers { waiter.continuation.resume(returning: failure) }
    }

    // MARK: Arithmetic

    private func clamped(_ range: ByteRange) -> ByteRange {
        let lower = min(max(0, range.lowerBound), size)
        return lower..<min(max(lower, range.upperBound), size)
    }

    private func alignedDown(_ offset: Int64) -> Int64 {
        offset - offset % policy.minimumRequest
    }

    private func alignedUp(_ offset: Int64) -> Int64 {
        let remainder = offset % policy.minimumRequest
        return remainder == 0 ? offset : offset + (policy.minimumRequest - remainder)
    }

    private struct Sink: ContentSink {
        let copy: LocalCopy
        let fetcher: RangeFetcher

        func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
            try copy.write(bytes, at: offset)
            fetcher.arrived(bytes.count)
        }
    }
}
