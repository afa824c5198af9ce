import DocFSStore
import Synchronization

/// A store as one client process sees it: every call goes through to `inner` until the test
/// says the client was killed (`crash()`) or the server went down (`outage`).
///
/// - `crash()` simulates `kill -9` of the client in process: from then on every call of this
///   proxy parks forever and never reaches the store, and a call that was answered after the
///   crash never gets its answer back (the store may have done it; the dead client cannot know).
///   A restarted client gets a new proxy on the same inner store.
/// - `outage` makes every call fail at once with that error (a transient one for "server down").
/// - The calls that change the store run one at a time, and `asAnotherClient` runs a test's
///   own change of the inner store between them, never in the middle of one (an upload's
///   conditional check and its write are one step, as on a real server).
/// - Writes, moves and new directories need their parent to be a directory, as on a local
///   directory or WebDAV (`.notFound` otherwise); `InMemoryStore` alone would keep a file
///   under a file, where no listing shows it.
/// - A directory is never moved onto an existing entry, nor a file onto a directory
///   (`InMemoryStore` would trap on the first and keep both on the second).
/// - With `renamesByCopying` (over an `InMemoryStore`), a file moves as on S3: a copy to the new
///   name ("COPY /a /b", the same version there), then a deletion of the old one ("DELETE /a"),
///   two changes a kill can fall between.
/// - ETags are the inner store's, whichever call reports them: `InMemoryStore` never gives two
///   contents one version, also not after a delete and a new file under the same name. (They
///   once had the entry's time appended, and a listing that shows stored times, as S3's does,
///   then named one version with two ETags: its upload met a false conflict after a restart.)
public final class CrashableStore: Store, Sendable {
    public let inner: any Store
    /// The inner store, when a file's rename is a copy and a deletion.
    private let copiesOn: InMemoryStore?
    public var identity: StoreIdentity { inner.identity }
    public var uploadMeter: UploadMeter? { inner.uploadMeter }

    public var capabilities: StoreCapabilities {
        var capabilities = inner.capabilities
        if copiesOn != nil { capabilities.renamesByCopying = true }
        return capabilities
    }

    private struct State {
        var crashed = false
        var outage: StoreError?
        /// Calls of the dead client, kept so they stay parked (and no continuation leaks).
        var parked: [CheckedContinuation<Void, Never>] = []
        /// The change whose completion kills the client (`crash(rightAfter:)`).
        var killingChange: (@Sendable (String) -> Bool)?
    }

    private let state = Mutex(State())
    private let changes = AsyncLock()

    public init(wrapping inner: any Store) {
        self.inner = inner
        copiesOn = nil
    }

    /// A proxy of `inner` whose renames of files are a copy and a deletion, as on S3.
    public init(wrapping inner: InMemoryStore, renamesByCopying: Bool) {
        self.inner = inner
        copiesOn = renamesByCopying ? inner : nil
    }

    /// The client is killed: nothing it asks from now on reaches the store.
    public func crash() {
        state.withLock { $0.crashed = true }
    }

    /// The client is killed the moment the store has made the first change `matching` its
    /// description (`DELETE /a.txt`, `MOVE /a.txt /b.txt`, `PUT /a.txt`): the store did it, and
    /// the client never learns so, as with a `kill -9` while the answer was on its way.
    public func crash(rightAfter matching: @escaping @Sendable (String) -> Bool) {
        state.withLock { $0.killingChange = matching }
    }

    /// The change `crash(rightAfter:)` waited for is no longer awaited.
    public func disarm() {
        state.withLock { $0.killingChange = nil }
    }

    public var isCrashed: Bool { state.withLock { $0.crashed } }

    /// While set, every call fails with this error (nil: the server answers again).
    public var outage: StoreError? {
        get { state.withLock { $0.outage } }
        set { state.withLock { $0.outage = newValue } }
    }

    /// Runs `body` (a change another client makes, on `inner` directly) with no change of this
    /// client's under way.
    public func asAnotherClient<T>(_ body: () throws -> T) async rethrows -> T {
        await changes.lock()
        defer { changes.unlock() }
        return try body()
    }

    // MARK: Store

    public func list(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> ListPage {
        try await gate()
        let result = try await inner.list(directory, page: page)
        try await answer()
        return result
    }

    public func stat(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        try await gate()
        let entry = try await inner.stat(path)
        try await answer()
        return entry
    }

    public func read(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry {
        try await gate()
        let entry = try await inner.read(path, range: range, ifMatch: ifMatch, into: sink)
        try await answer()
        return entry
    }

    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry {
        try await change("PUT \(path)") { () async throws(StoreError) -> RemoteEntry in
            try await self.requireParentDirectory(path)
            return try await self.inner.write(path, fromLocalFile: localFile, condition: condition)
        }
    }

    public func write(_ path: StorePath, growing content: any GrowingContent, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        try await change("PUT \(path)") { () async throws(StoreError) -> RemoteEntry in
            try await self.requireParentDirectory(path)
            return try await self.inner.write(path, growing: content, condition: condition, attributes: attributes)
        }
    }

    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        try await change("PUT \(path)") { () async throws(StoreError) -> RemoteEntry in
            try await self.requireParentDirectory(path)
            return try await self.inner.write(path, fromLocalFile: localFile, condition: condition, attributes: attributes)
        }
    }

    public func makeDirectory(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        try await change("MKCOL \(path)") { () async throws(StoreError) -> RemoteEntry in
            try await self.requireParentDirectory(path)
            return try await self.inner.makeDirectory(path)
        }
    }

    public func delete(_ path: StorePath, isDirectory: Bool) async throws(StoreError) {
        try await change("DELETE \(path)") { () async throws(StoreError) in try await self.inner.delete(path, isDirectory: isDirectory) }
    }

    public func move(_ source: StorePath, to target: StorePath, replace: Bool) async throws(StoreError) -> RemoteEntry {
        if let copiesOn, try await { () async throws(StoreError) -> Bool in
            try await self.gate()
            return try await self.inner.stat(source).isDirectory == false
        }() {
            try await change("COPY \(source) \(target)") { () async throws(StoreError) in
                try await self.requireParentDirectory(target)
                if !replace, (try? await self.inner.stat(target)) != nil { throw .alreadyExists(target) }
                try copiesOn.copyFile(source, to: target)
            }
            try await change("DELETE \(source)") { () async throws(StoreError) in try await self.inner.delete(source, isDirectory: false) }
            return try await stat(target)
        }
        return try await change("MOVE \(source) \(target)") { () async throws(StoreError) -> RemoteEntry in
            try await self.requireParentDirectory(target)
            let moving = try? await self.inner.stat(source)
            let replacing = try? await self.inner.stat(target)
            if moving?.isDirectory == true, replacing != nil { throw .alreadyExists(target) }
            if replacing?.isDirectory == true, moving?.isDirectory != true { throw .isADirectory(target) }
            return try await self.inner.move(source, to: target, replace: replace)
        }
    }

    public func makeSymlink(_ path: StorePath, target: String) async throws(StoreError) -> RemoteEntry {
        try await change("SYMLINK \(path)") { () async throws(StoreError) -> RemoteEntry in try await self.inner.makeSymlink(path, target: target) }
    }

    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool {
        try await change("PROPPATCH \(path)") { () async throws(StoreError) -> Bool in try await self.inner.setAttributes(path, attributes) }
    }

    // MARK: Private

    /// Before a call: a dead client parks here, a down server fails it.
    private func gate() async throws(StoreError) {
        let (crashed, outage) = state.withLock { ($0.crashed, $0.outage) }
        if crashed { await park() }
        if let outage { throw outage }
    }

    /// After a call: a client killed meanwhile never sees the answer.
    private func answer() async throws(StoreError) {
        if isCrashed { await park() }
    }

    private func park() async {
        await withCheckedContinuation { continuation in
            state.withLock { $0.parked.append(continuation) }
        }
    }

    private func change<T>(_ what: String, _ body: () async throws(StoreError) -> T) async throws(StoreError) -> T {
        try await gate()
        await changes.lock()
        if isCrashed {
            changes.unlock()
            await park()
        }
        let result: Result<T, StoreError>
        do throws(StoreError) { result = .success(try await body()) } catch { result = .failure(error) }
        if case .success = result {
            state.withLock { state in
                if let killing = state.killingChange, killing(what) {
                    state.crashed = true
                    state.killingChange = nil
                }
            }
        }
        changes.unlock()
        try await answer()
        return try result.get()
    }

    private func requireParentDirectory(_ path: StorePath) async throws(StoreError) {
        guard let parent = path.parent, !parent.isRoot else { return }
        let entry: RemoteEntry
        do throws(StoreError) { entry = try await inner.stat(parent) } catch { throw .notFound(parent) }
        guard entry.isDirectory else { throw .notFound(parent) }
    }
}

/// A lock that waits without blocking a thread.
final class AsyncLock: Sendable {
    private let state = Mutex<(locked: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func lock() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state -> Bool in
                if !state.locked {
                    state.locked = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    func unlock() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiters.isEmpty {
                state.locked = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
