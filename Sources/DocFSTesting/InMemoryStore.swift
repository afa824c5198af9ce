import DocFSStore
import Foundation
import Synchronization

/// A store held in memory, for testing the core without a server. It counts the calls the
/// core makes (so tests can say "no download on stat", "one download for two opens") and
/// can be told to fail, stall or cut a download short, like a bad network would. Paths are
/// keyed by their bytes (`StorePath` compares names as `FileName`s), as on a real store.
public final class InMemoryStore: Store, Sendable {
    public let identity = StoreIdentity(kind: "memory", location: "test")
    public let capabilities: StoreCapabilities

    private let state = Mutex(State())

    /// What the next `read` calls do instead of succeeding.
    public enum ReadFault: Sendable {
        /// Throw this error.
        case fail(StoreError)
        /// Deliver only this many bytes, then report success (a server that lies about the length).
        case truncate(after: Int)
        /// Deliver the file as it is, while another client saves `savedMeanwhile` over it, and
        /// name the new version in the answer: the old bytes under the new ETag, as a server
        /// that writes files in place (`rclone serve webdav`) can answer a GET sent during a PUT.
        case oldBytesUnderTheNewVersion(savedMeanwhile: [UInt8])
    }

    private struct File {
        var content: [UInt8]
        var version: Int
        var modified: Double
        /// Set for a symbolic link, whose content is its target (as on S3).
        var isSymlink = false
    }

    private struct State {
        var files: [StorePath: File] = [:]
        /// The last version given out. Versions are never reused, also not after a delete and a
        /// new file under the same name: a real store's ETag never names two contents.
        var lastVersion = 0
        mutating func nextVersion() -> Int {
            lastVersion += 1
            return lastVersion
        }
        var directories: Set<StorePath> = [.root]
        var reads: [StorePath: Int] = [:]
        /// The range each read asked for (nil: the whole file), and the bytes delivered.
        var readRanges: [StorePath: [ByteRange?]] = [:]
        var bytesDelivered: [StorePath: Int64] = [:]
        var lists: [StorePath: Int] = [:]
        var pageSize = Int.max
        var listingsAsked = 0
        var stats = 0
        var readFaults: [ReadFault] = []
        var listFault: StoreError?
        var readGate: (@Sendable () async -> Void)?
        var pageGate: (@Sendable () async -> Void)?
        var statGate: (@Sendable () async -> Void)?
        var statFault: StoreError?
        /// How long each `stat` takes to answer (a store far away), and how many were asked at once.
        var statLatency: Duration?
        var statsInFlight = 0
        var peakStatsInFlight = 0
        var writes: [StorePath: Int] = [:]
        /// Uploads of growing content begun (`write(_:growing:condition:)`), by path.
        var streamedWritesBegun: [StorePath: Int] = [:]
        var writeFault: StoreError?
        var attributesFault: StoreError?
        var afterAttributes: (@Sendable (StorePath) -> Void)?
        var attributeAnswerGate: (@Sendable () async -> Void)?
        var readsOfAnotherVersion = 0
        var writeGate: (@Sendable () async -> Void)?
        var directoryGate: (@Sendable () async -> Void)?
        var requiresParents = false
        var uploadReading: UploadReading?
        /// The content of every write that succeeded, in order (what the store ever held).
        var written: [(path: StorePath, content: [UInt8])] = []
        var attributes: [StorePath: StoreAttributes] = [:]
        var log: [String] = []
        /// Previews the store "makes" (`previews: true`), by path, and how many were asked for.
        var previews: [StorePath: [UInt8]] = [:]
        var previewsAsked = 0
    }

    /// Whether a listing shows when each version was stored rather than the file's own time.
    private let listsStoredTimes: Bool

    /// `.byStat` makes it list links as small files, as S3 does; `looksUpByStat` makes the
    /// core look names of unlisted folders up one by one, as on S3. `listsStoredTimes` makes a
    /// listing show the time each version was stored (`storedTime(ofVersion:)`), as an S3
    /// listing shows `LastModified`: the file's own time (S3's `x-amz-meta-mtime`) only shows
    /// in `stat` and `read`.
    /// `streamsUploads` makes it take uploads of content still being written, as a WebDAV server does.
    /// `previews` makes it a store that makes previews (of the files given one with `addPreview`).
    /// `tellsVersionAfterAttributes`: `setAttributes(_:_:onVersion:)` checks the version and names
    /// the one its change made in one step, as S3's conditional copy does; else, as a WebDAV
    /// server, it leaves the caller to stat. `attributesMakeVersions`: a change of attributes gives
    /// the same content a new version, as S3's copy onto itself does to a multipart object, or a
    /// `touch` to a file of a local directory.
    public init(symlinkDiscovery: SymlinkDiscovery = .inListings, looksUpByStat: Bool = false, listsStoredTimes: Bool = false,
                streamsUploads: Bool = false, previews: Bool = false, tellsVersionAfterAttributes: Bool = false,
                attributesMakeVersions: Bool = false) {
        capabilities = StoreCapabilities(canWrite: true, canRename: true, hasRangeReads: true, symlinkDiscovery: symlinkDiscovery,
                                         looksUpByStat: looksUpByStat, streamsUploads: streamsUploads, previews: previews)
        self.listsStoredTimes = listsStoredTimes
        self.tellsVersionAfterAttributes = tellsVersionAfterAttributes
        self.attributesMakeVersions = attributesMakeVersions
    }
    private let tellsVersionAfterAttributes: Bool
    private let attributesMakeVersions: Bool

    /// The time a listing shows for version `version` of a file when `listsStoredTimes`.
    public static func storedTime(ofVersion version: Int) -> Double { 1_800_000_000 + Double(version) }

    /// What `stat` and `read` tell of a file: where listings show stored times, the file's own
    /// time, said to be one (as S3's HEAD and GET carry `x-amz-meta-mtime`).
    private func ownTimed(_ entry: RemoteEntry) -> RemoteEntry {
        var entry = entry
        entry.carriesOwnTime = listsStoredTimes
        return entry
    }

    // MARK: Arranging

    public func addFile(_ path: String, _ content: [UInt8], modified: Double = 1_700_000_000) {
        let path = try! StorePath(path)
        state.withLock { state in _ = Self.put(content, at: path, modified: modified, in: &state) }
    }

    /// Stores a file as another client does, its folders made as needed; returns what it replaced.
    private static func put(_ content: [UInt8], at path: StorePath, modified: Double, in state: inout State) -> [UInt8]? {
        var parent = path.parent
        while let directory = parent, !directory.isRoot {
            state.directories.insert(directory)
            parent = directory.parent
        }
        let replaced = state.files[path]?.content
        state.files[path] = File(content: content, version: state.nextVersion(), modified: modified)
        return replaced
    }

    /// Another client's write of a file, as a disk or a WebDAV server takes it: refused (false)
    /// where a folder stands at `path` or a file at one of its parents. The check and the write
    /// are one step, so an upload of the client under test cannot land between them (a check
    /// made first, then `addFile`, once kept a file under a file the upload had just made).
    /// `replaced` is the content the write replaced, if any.
    public func addFileWhereAClientCould(_ path: String, _ content: [UInt8], modified: Double) -> (added: Bool, replaced: [UInt8]?) {
        let path = try! StorePath(path)
        return state.withLock { state in
            var parent = path.parent
            while let directory = parent, !directory.isRoot {
                if state.files[directory] != nil { return (false, nil) }
                parent = directory.parent
            }
            if state.directories.contains(path) { return (false, nil) }
            return (true, Self.put(content, at: path, modified: modified, in: &state))
        }
    }

    /// A symbolic link made by another client of the store.
    /// Gives the file at `path` a preview: listings say `hasPreview`, `preview(of:side:)` answers `png`.
    public func addPreview(_ path: String, _ png: [UInt8]) {
        let path = try! StorePath(path)
        state.withLock { $0.previews[path] = png }
    }

    /// How many previews were asked for.
    public var previewsAsked: Int { state.withLock { $0.previewsAsked } }

    public func preview(of path: StorePath, side: Int) async throws(StoreError) -> Data {
        try state.withLock { state throws(StoreError) -> Data in
            state.previewsAsked += 1
            guard let png = state.previews[path] else { throw .notFound(path) }
            return Data(png)
        }
    }

    public func addSymlink(_ path: String, target: String) {
        addFile(path, Array(target.utf8))
        state.withLock { $0.files[try! StorePath(path)]?.isSymlink = true }
    }

    /// `stat` calls so far.
    public var statCount: Int { state.withLock { $0.stats } }
    /// The most `stat`s that were waiting for their answer at once.
    public var peakStatsInFlight: Int { state.withLock { $0.peakStatsInFlight } }

    /// Every `stat` answers `latency` after it is asked (nil: at once).
    public func delayStats(by latency: Duration?) {
        state.withLock { $0.statLatency = latency }
    }

    public func addDirectory(_ path: String) {
        let path = try! StorePath(path)
        _ = state.withLock { $0.directories.insert(path) }
    }

    public func remove(_ path: String) {
        let path = try! StorePath(path)
        state.withLock { state in
            state.files[path] = nil
            state.directories.remove(path)
        }
    }

    /// Removes a directory with everything below it, as another client deleting a folder
    /// does; returns the contents of the files it held.
    @discardableResult
    public func removeTree(_ path: String) -> [[UInt8]] {
        let path = try! StorePath(path)
        return state.withLock { state in
            let inside = { (candidate: StorePath) in candidate.isSame(orInside: path) }
            let removed = state.files.filter { inside($0.key) }
            for key in removed.keys { state.files[key] = nil }
            state.directories = state.directories.filter { !inside($0) || $0.isRoot }
            return removed.values.map(\.content)
        }
    }

    /// The next reads fail or misbehave, one fault per read, in order.
    public func injectReadFaults(_ faults: [ReadFault]) {
        state.withLock { $0.readFaults = faults }
    }

    /// Listings come in pages of `size` entries (as S3's come in pages of 1,000).
    public func pageListings(by size: Int) {
        state.withLock { $0.pageSize = max(1, size) }
    }

    /// Every listing fails with `error` (nil: listings work again).
    public func failListings(with error: StoreError?) {
        state.withLock { $0.listFault = error }
    }

    /// Every page of a listing after its first waits on `gate` (nil: none waits).
    public func holdListingPagesAfterTheFirst(until gate: (@Sendable () async -> Void)?) {
        state.withLock { $0.pageGate = gate }
    }

    /// Every read waits on `gate` before delivering anything.
    public func holdReads(until gate: (@Sendable () async -> Void)?) {
        state.withLock { $0.readGate = gate }
    }

    /// Every `setAttributes` fails with `error` (nil: it works again).
    public func failAttributes(with error: StoreError?) {
        state.withLock { $0.attributesFault = error }
    }

    /// Every `stat` fails with `error` (nil: it works again).
    public func failStats(with error: StoreError?) {
        state.withLock { $0.statFault = error }
    }

    /// The next `stat` is answered with what the store holds when it is asked, but only once
    /// `gate` opens: a reply slow to arrive, overtaken by what happens meanwhile.
    public func holdNextStat(until gate: @escaping @Sendable () async -> Void) {
        state.withLock { $0.statGate = gate }
    }

    public func readCount(_ path: String) -> Int {
        let path = try! StorePath(path)
        return state.withLock { $0.reads[path] ?? 0 }
    }

    public var totalReads: Int { state.withLock { $0.reads.values.reduce(0, +) } }

    /// The range each read of `path` asked for, in order (nil: the whole file).
    public func readRanges(_ path: String) -> [ByteRange?] {
        let path = try! StorePath(path)
        return state.withLock { $0.readRanges[path] ?? [] }
    }

    /// Content bytes delivered for `path` by all reads so far.
    public func bytesDelivered(_ path: String) -> Int64 {
        let path = try! StorePath(path)
        return state.withLock { $0.bytesDelivered[path] ?? 0 }
    }

    public func writeCount(_ path: String) -> Int {
        let path = try! StorePath(path)
        return state.withLock { $0.writes[path] ?? 0 }
    }

    /// `body` runs after every change of attributes (`setAttributes`), with the path: a test's
    /// way to place another client's change between a client's two requests.
    public func afterSettingAttributes(_ body: (@Sendable (StorePath) -> Void)?) {
        state.withLock { $0.afterAttributes = body }
    }

    /// Every write (upload) fails with `error` (nil: writes work again).
    /// Uploads wait for `gate` before they store anything (nil: they go ahead at once).
    public func holdWrites(until gate: (@Sendable () async -> Void)?) {
        state.withLock { $0.writeGate = gate }
    }

    /// Folders are made only once `gate` returns (nil: at once).
    public func holdDirectoryMakes(until gate: (@Sendable () async -> Void)?) {
        state.withLock { $0.directoryGate = gate }
    }

    /// As a real server: a file or folder is made only in a folder that exists (`.notFound` of
    /// the parent otherwise). Off by default: many tests write below folders they never made.
    public func requireParents(_ required: Bool = true) {
        state.withLock { $0.requiresParents = required }
    }

    private static func checkParent(of path: StorePath, in state: State) throws(StoreError) {
        guard state.requiresParents, let parent = path.parent, !state.directories.contains(parent) else { return }
        throw .notFound(parent)
    }

    /// How a write reads the local file it uploads: `chunk` bytes at a time from one open
    /// descriptor, with `pause` between chunks, as a client streaming a request body does.
    /// Other work runs meanwhile, so a test can change the local copy while an upload is still
    /// reading its snapshot (the default reads the whole file at once).
    public struct UploadReading: Sendable {
        public var chunk: Int
        public var pause: @Sendable () async -> Void

        public init(chunk: Int, pause: @escaping @Sendable () async -> Void = { await Task.yield() }) {
            self.chunk = max(1, chunk)
            self.pause = pause
        }
    }

    /// Reads the files of later uploads as `reading` says (nil: in one go).
    public func readUploads(_ reading: UploadReading?) {
        state.withLock { $0.uploadReading = reading }
    }

    /// Every content a write put on the store so far, with its path, in order: also those a
    /// later write replaced, which `content(_:)` no longer shows.
    public var writtenContents: [(path: String, content: [UInt8])] {
        state.withLock { $0.written.map { ($0.path.description, $0.content) } }
    }

    /// The mode and times the store carries for `path` (this store keeps them, like S3's metadata).
    public func attributes(of path: String) -> StoreAttributes? {
        state.withLock { $0.attributes[try! StorePath(path)] }
    }

    public func failWrites(with error: StoreError?) {
        state.withLock { $0.writeFault = error }
    }

    /// The content the store holds at `path`, if it is a file.
    public func content(_ path: String) -> [UInt8]? {
        let path = try! StorePath(path)
        return state.withLock { $0.files[path]?.content }
    }

    /// How many files hold exactly `content`.
    public func filesHolding(_ content: [UInt8]) -> Int {
        state.withLock { $0.files.values.count { $0.content == content } }
    }

    /// The names of files in a directory (for conflict copies).
    public func fileNames(in directory: String) -> [String] {
        let directory = try! StorePath(directory)
        return state.withLock { $0.files.keys.filter { $0.parent == directory }.map(\.name).sorted { FileName($0) < FileName($1) } }
    }

    /// The mutating calls in order, e.g. `PUT /a`, `MOVE /a /b`.
    public var mutations: [String] { state.withLock { $0.log } }
    public var totalListings: Int { state.withLock { $0.lists.values.reduce(0, +) } }
    /// Listings asked for, those that failed included (`totalListings` counts those answered).
    public var listingsAsked: Int { state.withLock { $0.listingsAsked } }
    /// How many times `directory` was listed (its first page asked for, or a later one).
    public func listings(of directory: String) -> Int {
        let directory = try! StorePath(directory)
        return state.withLock { $0.lists[directory] ?? 0 }
    }

    // MARK: Store

    public func list(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> ListPage {
        if page != nil, let gate = state.withLock({ $0.pageGate }) { await gate() }
        return try state.withLock { state throws(StoreError) -> ListPage in
            state.listingsAsked += 1
            if let fault = state.listFault { throw fault }
            state.lists[directory, default: 0] += 1
            guard state.directories.contains(directory) else {
                throw state.files[directory] == nil ? .notFound(directory) : .notADirectory(directory)
            }
            var entries: [RemoteEntry] = []
            for (path, file) in state.files where path.parent == directory {
                var entry = Self.entry(path, file)
                if file.isSymlink, capabilities.symlinkDiscovery != .inListings { entry.kind = .file }
                if listsStoredTimes { entry.modified = Self.storedTime(ofVersion: file.version) }
                entry.hasPreview = capabilities.previews && state.previews[path] != nil
                entries.append(entry)
            }
            for path in state.directories where path.parent == directory {
                entries.append(RemoteEntry(path: path, kind: .directory, size: 0, modified: 1_700_000_000))
            }
            entries.sort { $0.path < $1.path }
            // A page goes on after the last name of the one before, as S3's continuation does:
            // a name there all along is never skipped, whatever changed between the pages.
            if let after = page?.value { entries.removeAll { $0.name <= after } }
            guard entries.count > state.pageSize else { return ListPage(entries: entries, next: nil) }
            let shown = Array(entries.prefix(state.pageSize))
            return ListPage(entries: shown, next: PageToken(shown[shown.count - 1].name))
        }
    }

    public func stat(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        let latency = state.withLock { state -> Duration? in
            state.statsInFlight += 1
            state.peakStatsInFlight = max(state.peakStatsInFlight, state.statsInFlight)
            return state.statLatency
        }
        defer { state.withLock { $0.statsInFlight -= 1 } }
        if let latency { try? await Task.sleep(for: latency) }
        let (answer, gate) = state.withLock { state -> (Result<RemoteEntry, StoreError>, (@Sendable () async -> Void)?) in
            state.stats += 1
            if let fault = state.statFault { return (.failure(fault), nil) }
            let gate = state.statGate
            state.statGate = nil
            if let file = state.files[path] { return (.success(ownTimed(Self.entry(path, file))), gate) }
            if state.directories.contains(path) { return (.success(RemoteEntry(path: path, kind: .directory, size: 0, modified: 0)), gate) }
            return (.failure(.notFound(path)), gate)
        }
        if let gate { await gate() }
        return try answer.get()
    }

    public func read(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry {
        let gate = state.withLock { state -> (@Sendable () async -> Void)? in
            state.reads[path, default: 0] += 1
            state.readRanges[path, default: []].append(range)
            return state.readGate
        }
        if let gate { await gate() }
        let (file, fault) = try state.withLock { state throws(StoreError) -> (File, ReadFault?) in
            guard let file = state.files[path] else { throw .notFound(path) }
            let fault = state.readFaults.isEmpty ? nil : state.readFaults.removeFirst()
            return (file, fault)
        }
        var entry = ownTimed(Self.entry(path, file))
        if let etag = ifMatch, etag != entry.etag {
            state.withLock { $0.readsOfAnotherVersion += 1 }
            throw .versionMismatch(path)
        }
        let lower = Int(range?.lowerBound ?? 0)
        var upper = min(Int(range?.upperBound ?? Int64(file.content.count)), file.content.count)
        switch fault {
        case .fail(let error)?: throw error
        case .truncate(let count)?: upper = min(upper, lower + count)
        case .oldBytesUnderTheNewVersion(let saved)?:
            _ = addFileWhereAClientCould(path.description, saved, modified: file.modified + 1)
            entry.etag = state.withLock { state in state.files[path].map { Self.entry(path, $0).etag } } ?? nil
        case nil: break
        }
        // Deliver in chunks, as a network would.
        var offset = lower
        while offset < upper {
            let end = min(offset + 4096, upper)
            let chunk = Array(file.content[offset..<end])
            let failure = chunk.withUnsafeBytes { bytes -> StoreError? in
                do throws(StoreError) { try sink.write(bytes, at: Int64(offset)) } catch { return error }
                return nil
            }
            if let failure { throw failure }
            state.withLock { $0.bytesDelivered[path, default: 0] += Int64(chunk.count) }
            offset = end
        }
        return entry
    }

    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry {
        if let gate = state.withLock({ $0.writeGate }) { await gate() }
        let data: [UInt8]
        if let reading = state.withLock({ $0.uploadReading }) {
            data = try await Self.contents(of: localFile, reading)
        } else {
            guard let whole = FileManager.default.contents(atPath: localFile) else { throw .localIO(errno: ENOENT, message: localFile) }
            data = Array(whole)
        }
        return try store(data, at: path, condition, log: "PUT \(path)")
    }

    /// Stores `data` at `path` if `condition` holds: how every write that got its bytes ends.
    private func store(_ data: [UInt8], at path: StorePath, _ condition: WriteCondition, log line: String) throws(StoreError) -> RemoteEntry {
        try state.withLock { state throws(StoreError) -> RemoteEntry in
            if let fault = state.writeFault { throw fault }
            try Self.checkParent(of: path, in: state)
            // As on a disk or a WebDAV server: a file never stands where a folder is.
            if state.directories.contains(path) { throw .isADirectory(path) }
            try Self.check(condition, path, state.files[path])
            let file = File(content: data, version: state.nextVersion(), modified: Date().timeIntervalSince1970)
            state.files[path] = file
            state.written.append((path, data))
            state.writes[path, default: 0] += 1
            state.log.append(line)
            return Self.entry(path, file)
        }
    }

    /// Takes the content as it grows, and stores it once it ends whole (a cancelled one leaves
    /// nothing), as docfs's WebDAV store does with a temporary name and a MOVE. The condition
    /// is checked before and after.
    public func write(_ path: StorePath, growing content: any GrowingContent, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        guard capabilities.streamsUploads else { throw .notSupported("uploads of unknown length") }
        try state.withLock { state throws(StoreError) in
            if state.directories.contains(path) { throw .isADirectory(path) }
            try Self.check(condition, path, state.files[path])
            state.streamedWritesBegun[path, default: 0] += 1
            state.log.append("PUT (streamed) \(path)")
        }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        reading: while true {
            let upTo: Int64
            switch await content.next(after: Int64(data.count)) {
            case .end: break reading
            case .cancelled: throw .timedOut("the upload was cancelled")
            case .written(let end): upTo = end
            }
            while Int64(data.count) < upTo {
                let want = min(buffer.count, Int(upTo - Int64(data.count)))
                let offset = Int64(data.count)
                let n = try buffer.withUnsafeMutableBytes { bytes in
                    Result { () throws(StoreError) -> Int in
                        try content.read(into: UnsafeMutableRawBufferPointer(rebasing: bytes[0..<want]), at: offset)
                    }
                }.get()
                guard n > 0 else { throw .localIO(errno: EIO, message: "growing content ended early") }
                data += buffer[0..<n]
            }
        }
        if let gate = state.withLock({ $0.writeGate }) { await gate() }
        return try store(data, at: path, condition, log: "PUT (streamed, ended) \(path)")
    }

    private static func check(_ condition: WriteCondition, _ path: StorePath, _ existing: File?) throws(StoreError) {
        switch condition {
        case .always: break
        case .mustNotExist: if existing != nil { throw .alreadyExists(path) }
        case .ifMatch(let etag): if existing.map({ Self.entry(path, $0).etag }) != etag { throw .versionMismatch(path) }
        }
    }

    /// How many uploads of growing content began at `path`.
    public func streamedWritesBegun(_ path: String) -> Int {
        let path = try! StorePath(path)
        return state.withLock { $0.streamedWritesBegun[path] ?? 0 }
    }

    /// Reads `localFile` chunk by chunk through one descriptor opened first (as a client sending
    /// it does: a file replaced under the name meanwhile is not what it reads).
    private static func contents(of localFile: String, _ reading: UploadReading) async throws(StoreError) -> [UInt8] {
        let fd = open(localFile, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .localIO(errno: errno, message: localFile) }
        defer { close(fd) }
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: reading.chunk)
        while true {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(data.count)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .localIO(errno: errno, message: "reading \(localFile)")
            }
            if n == 0 { return data }
            data += buffer[0..<n]
            await reading.pause()
        }
    }

    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool {
        defer { if let body = state.withLock({ $0.afterAttributes }) { body(path) } }
        try state.withLock { state throws(StoreError) in try Self.apply(attributes, at: path, newVersion: attributesMakeVersions, in: &state) }
        return true
    }

    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag) async throws(StoreError) -> AttributesSet {
        defer { if let body = state.withLock({ $0.afterAttributes }) { body(path) } }
        let (answer, gate) = try state.withLock { state throws(StoreError) -> (AttributesSet, (@Sendable () async -> Void)?) in
            guard let file = state.files[path] else { throw .notFound(path) }
            guard Self.entry(path, file).etag == version else { throw .versionMismatch(path) }
            try Self.apply(attributes, at: path, newVersion: attributesMakeVersions, in: &state)
            let gate = state.attributeAnswerGate
            state.attributeAnswerGate = nil
            guard tellsVersionAfterAttributes else { return (.kept(newVersion: nil), gate) }
            return (.kept(newVersion: state.files[path].flatMap { Self.entry(path, $0).etag }), gate)
        }
        if let gate { await gate() }
        return answer
    }

    /// The next conditional change of attributes is made at once, but answered only once `gate`
    /// opens: the new version is on the store before the client knows it.
    public func holdNextAttributeAnswer(until gate: @escaping @Sendable () async -> Void) {
        state.withLock { $0.attributeAnswerGate = gate }
    }

    /// Ranged or whole reads refused because the version asked for is not the store's.
    public var readsOfAnotherVersion: Int { state.withLock { $0.readsOfAnotherVersion } }

    private static func apply(_ attributes: StoreAttributes, at path: StorePath, newVersion: Bool, in state: inout State) throws(StoreError) {
        if let fault = state.attributesFault { throw fault }
        guard state.files[path] != nil || state.directories.contains(path) else { throw .notFound(path) }
        if newVersion, state.files[path] != nil {
            let version = state.nextVersion()
            state.files[path]?.version = version
        }
        var kept = state.attributes[path] ?? StoreAttributes()
        kept.mode = attributes.mode ?? kept.mode
        kept.modified = attributes.modified ?? kept.modified
        // The time is the file's own from now on, as S3's `x-amz-meta-mtime` is.
        if let modified = attributes.modified { state.files[path]?.modified = modified.seconds }
        kept.accessed = attributes.accessed ?? kept.accessed
        kept.owner = attributes.owner ?? kept.owner
        kept.group = attributes.group ?? kept.group
        state.attributes[path] = kept
    }

    public func makeSymlink(_ path: StorePath, target: String) async throws(StoreError) -> RemoteEntry {
        try state.withLock { state throws(StoreError) -> RemoteEntry in
            if state.directories.contains(path) || state.files[path] != nil { throw .alreadyExists(path) }
            let file = File(content: Array(target.utf8), version: state.nextVersion(), modified: Date().timeIntervalSince1970, isSymlink: true)
            state.files[path] = file
            state.log.append("SYMLINK \(path)")
            return Self.entry(path, file)
        }
    }

    public func makeDirectory(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        if let gate = state.withLock({ $0.directoryGate }) { await gate() }
        return try state.withLock { state throws(StoreError) -> RemoteEntry in
            try Self.checkParent(of: path, in: state)
            if state.directories.contains(path) || state.files[path] != nil { throw .alreadyExists(path) }
            state.directories.insert(path)
            state.log.append("MKDIR \(path)")
            return RemoteEntry(path: path, kind: .directory, size: 0, modified: Date().timeIntervalSince1970)
        }
    }

    public func delete(_ path: StorePath, isDirectory: Bool) async throws(StoreError) {
        try state.withLock { state throws(StoreError) in
            if isDirectory {
                guard state.directories.contains(path) else { throw .notFound(path) }
                if state.files.keys.contains(where: { $0.parent == path }) || state.directories.contains(where: { $0.parent == path }) {
                    throw .notEmpty(path)
                }
                state.directories.remove(path)
            } else {
                guard state.files.removeValue(forKey: path) != nil else { throw .notFound(path) }
            }
            state.log.append("DELETE \(path)")
        }
    }

    public func move(_ source: StorePath, to target: StorePath, replace: Bool) async throws(StoreError) -> RemoteEntry {
        try state.withLock { state throws(StoreError) -> RemoteEntry in
            try Self.checkParent(of: target, in: state)
            if state.directories.contains(source) {
                if !replace && state.directories.contains(target) { throw .alreadyExists(target) }
                let prefix = source.components
                func moved(_ path: StorePath) -> StorePath {
                    StorePath(validated: target.components + path.components.dropFirst(prefix.count))
                }
                let underneath = { (path: StorePath) in path.isSame(orInside: source) }
                state.directories = Set(state.directories.map { underneath($0) ? moved($0) : $0 })
                state.files = Dictionary(uniqueKeysWithValues: state.files.map { (underneath($0.key) ? moved($0.key) : $0.key, $0.value) })
                state.log.append("MOVE \(source) \(target)")
                return RemoteEntry(path: target, kind: .directory, size: 0, modified: 0)
            }
            guard let file = state.files[source] else { throw .notFound(source) }
            if !replace && state.files[target] != nil { throw .alreadyExists(target) }
            state.files[source] = nil
            state.files[target] = file
            state.log.append("MOVE \(source) \(target)")
            return Self.entry(target, file)
        }
    }

    /// Copies the file at `source` to `target` as S3's CopyObject does: the copy is the same
    /// version (same ETag and time), and `source` stays. Not part of `Store`: `CrashableStore`
    /// makes a rename of two requests out of it (`renamesByCopying`).
    public func copyFile(_ source: StorePath, to target: StorePath) throws(StoreError) {
        try state.withLock { state throws(StoreError) in
            guard let file = state.files[source] else { throw .notFound(source) }
            guard !state.directories.contains(target) else { throw .isADirectory(target) }
            state.files[target] = file
            state.log.append("COPY \(source) \(target)")
        }
    }

    private static func entry(_ path: StorePath, _ file: File) -> RemoteEntry {
        RemoteEntry(path: path, kind: file.isSymlink ? .symlink(target: String(decoding: file.content, as: UTF8.self)) : .file,
                    size: Int64(file.content.count), modified: file.modified, etag: ETag("\"v\(file.version)\""))
    }
}
