import DocFSStore
import Foundation
import Logging
import Synchronization

/// The filesystem as the FUSE adapter sees it, in FUSE-free terms: items by inode, open
/// handles, reads and writes, attributes and namespace changes. It ties the catalog
/// (metadata), the enumerator (listings), the provider (local copies) and the uploader
/// (changes going back) together. Everything that may touch the network is `async`; what only
/// touches the catalog or a local copy is synchronous and cheap.
public final class DocFileSystem: Sendable {
    let catalog: Catalog
    let provider: Provider
    private let enumerator: DirectoryEnumerator
    let uploader: Uploader
    /// New files uploaded while they are written (nil: the store cannot, or it is off).
    private let uploadStreams: UploadStreams?
    /// Downloads pinned files a listing shows new or changed on the store.
    private let pinnedRefresher: PinnedRefresher
    /// The settling of changes a killed daemon left under way, while it runs.
    private let settlingChangesCutShort = Mutex<Task<Void, Never>?>(nil)
    public let readOnly: Bool
    let store: any Store
    private let cacheDirectory: String
    /// Tells a machine crash from a daemon's at the next start (none: no state directory, as in
    /// tests that never restart).
    private let sessionMarker: SessionMarker?
    private let logger: Logger
    private let handles = Mutex(HandleTable())
    /// How long a caller blocked in `open()` or `read()` waits for content (`--io-timeout`);
    /// nil: as long as the store's own deadlines allow.
    private let ioTimeout: Duration?
    /// How store calls that a caller waits for are retried (listings, lookups, fetches).
    private let retry: RetryPolicy

    /// An open file: which item, the local copy it reads and writes, and how it was opened.
    public struct OpenFile: Sendable {
        public var inode: Inode
        public var copy: LocalCopy
        public var writable: Bool
        /// The item as it was opened: what `fstat` shows once it is unlinked (POSIX keeps an
        /// open file alive without a name).
        public var opened: Item
        /// False for a caller that gets only what is local (`OpenMode.mayFetch`): its reads
        /// of bytes a sparse copy lacks fail instead of fetching them.
        public var mayFetch = true
        /// Opened with O_APPEND: its writes land at the copy's end (`OpenMode.append`).
        public var appends = false
    }

    /// How a file is opened.
    public struct OpenMode: Sendable, Equatable {
        public var writable: Bool
        public var truncate: Bool
        /// Whether this open (and reads through its handle) may download content. False for
        /// processes that should see only what is local (thumbnailers, indexers: the FUSE
        /// layer's `FetchPolicy` decides): they get `fetchRefused` and cost the store nothing.
        public var mayFetch: Bool
        /// The version of which the kernel still caches pages, and keeps them for this open
        /// if the store still has it (the FUSE layer's `keep_cache`). A reader's open then
        /// only asks the store for the version (no content): a close-then-reopen whose reads
        /// the page cache answers costs no download (file managers open an image 2-3 times).
        public var cachedVersion: ETag?
        /// A writer's open (not truncating) of a large file fetches nothing at open: its reads
        /// fetch ranges, its commit what its writes did not cover, all of the version it opened
        /// (`Provider.OpenIntent.writer`). `touch`, which opens a file for writing and only sets
        /// its times, downloaded all of it. Only for opens from outside (FUSE): a caller inside
        /// docfs that opens to write at once has nothing to gain.
        public var fetchOnFirstUse: Bool
        /// O_APPEND: every write lands at the end of the copy, whatever offset it carries. The
        /// kernel computes an append's offset from the size it cached, which is the catalog's
        /// at the last lookup: the version the open fetched may be longer.
        public var append: Bool
        public init(writable: Bool, truncate: Bool, mayFetch: Bool = true, cachedVersion: ETag? = nil, fetchOnFirstUse: Bool = false,
                    append: Bool = false) {
            self.writable = writable
            self.truncate = truncate
            self.append = append
            self.mayFetch = mayFetch
            self.cachedVersion = cachedVersion
            self.fetchOnFirstUse = fetchOnFirstUse
        }
        public static let read = OpenMode(writable: false, truncate: false)
    }

    /// What a setattr changes; nil leaves a value alone.
    public struct AttributeChanges: Sendable {
        public var mode: UInt32?
        public var owner: UInt32?
        public var group: UInt32?
        public var size: Int64?
        public var accessed: Timestamp?
        public var modified: Timestamp?
        public init(mode: UInt32? = nil, owner: UInt32? = nil, group: UInt32? = nil, size: Int64? = nil,
                    accessed: Timestamp? = nil, modified: Timestamp? = nil) {
            self.mode = mode
            self.owner = owner
            self.group = group
            self.size = size
            self.accessed = accessed
            self.modified = modified
        }
    }

    private struct HandleTable {
        var next: UInt64 = 1
        var open: [UInt64: OpenFile] = [:]
    }

    public init(store: any Store, catalog: Catalog, cacheDirectory: String, directoryTTL: Double, readOnly: Bool,
                uploadBackoff: Duration = .seconds(15), streaming: StreamingPolicy = .default, ioTimeout: Duration? = nil,
                retry: RetryPolicy? = nil, retention: RetentionPolicy = .onLastRelease,
                listAhead: DirectoryEnumerator.ListAhead = .default, conflictClock: @escaping @Sendable () -> Date = { Date() }, stateDirectory: String? = nil,
                streamedUploads: StreamedUpload.Policy? = .default, logger: Logger) {
        // Store calls a caller waits for are retried within the caller's patience.
        let retry = retry ?? ioTimeout.map { RetryPolicy.interactive.within($0) } ?? .interactive
        self.store = store
        self.catalog = catalog
        self.cacheDirectory = cacheDirectory
        self.sessionMarker = stateDirectory.map { SessionMarker(directory: $0, cacheDirectory: cacheDirectory) }
        self.readOnly = readOnly
        self.logger = logger
        self.ioTimeout = ioTimeout
        self.retry = retry
        self.provider = Provider(store: store, catalog: catalog, cacheDirectory: cacheDirectory, retry: retry, streaming: streaming,
                                 ioTimeout: ioTimeout, retention: retention, logger: logger)
        self.enumerator = DirectoryEnumerator(store: store, catalog: catalog, ttl: directoryTTL, retry: retry, listAhead: listAhead,
                                              logger: logger)
        let streams = streamedUploads.flatMap { policy in
            store.capabilities.streamsUploads && !readOnly ? UploadStreams(store: store, catalog: catalog, policy: policy) : nil
        }
        self.uploadStreams = streams
        self.uploader = Uploader(store: store, catalog: catalog, provider: provider, maximumBackoff: uploadBackoff,
                                 clock: conflictClock, streams: streams, logger: logger)
        let pinnedRefresher = PinnedRefresher(catalog: catalog, provider: provider, uploader: uploader, enumerator: enumerator, logger: logger)
        self.pinnedRefresher = pinnedRefresher
        // Weakly: the refresher holds the enumerator, and a cycle would keep the catalog open.
        enumerator.whenListed { [weak pinnedRefresher] directory in pinnedRefresher?.listed(directory) }
        enumerator.whenCopiesGoneFromStore { [provider] gone in await provider.dropCopiesGoneFromStore(gone) }
    }

    /// Calls `handler` with each pinned file whose copy a listing's refresh replaced with the
    /// store's newer version (its size and times may have changed under the kernel's cache).
    public func whenPinnedCopyRefreshed(_ handler: @escaping @Sendable (Inode) -> Void) {
        pinnedRefresher.refreshed.withLock { $0 = handler }
    }

    // MARK: Metadata

    /// An item as `stat` should show it: a file with a local copy shows the copy's size, since
    /// the copy is what reads return. The catalog's size is only as new as the last commit:
    /// after an fsync's upload the item is `local` again while its handles go on writing and
    /// truncating. A copy still downloading (or just created, before that starts) holds only a
    /// prefix, so then the catalog answers. The copy's modification time counts once the copy
    /// was changed here: a fresh download's file time is the download's.
    public func item(_ inode: Inode) throws(FSError) -> Item {
        guard let item = try catalog.item(inode) ?? unlinkedButOpen(inode) else { throw .notFound }
        return shownWithLocalCopy(item)
    }

    /// `item` as `stat` shows it, given its local copy (see `item(_:)`).
    private func shownWithLocalCopy(_ item: Item) -> Item {
        var item = item
        guard item.kind == .file, item.state != .downloading, item.state != .placeholder,
              let copy = provider.presentCopies.withLock({ $0[item.inode] }) else { return item }
        item.size = copy.length
        if item.hasUnsyncedChanges || copy.wasWritten, let time = copy.modificationTime {
            item.modified = time
        }
        return item
    }

    /// Finds `name` in `parent`, listing the parent first if it never was.
    public func lookup(parent: Inode, name: String) async throws(FSError) -> Item {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let directory = try item(parent)
        if directory.isDirectory, directory.listedAt == nil, store.capabilities.looksUpByStat {
            return try await lookUpByStat(name, in: directory)
        }
        try await enumerator.ensureListed(directory)
        guard var child = try catalog.child(of: parent, named: name) else { throw .notFound }
        if let unconfirmed = enumerator.kindToConfirm(child) {
            // A small object the listing could not tell from a link (see SymlinkProbe).
            await enumerator.confirmKind(unconfirmed)
            guard let confirmed = try catalog.child(of: parent, named: name) else { throw .notFound }
            child = confirmed
        }
        return try item(child.inode)
    }

    /// Looks up one name of a folder never listed by asking the store about that name only
    /// (see `StoreCapabilities.looksUpByStat`). The entry found joins the catalog as a listing
    /// page of one; the folder stays unlisted, so `ls` still lists it whole.
    private func lookUpByStat(_ name: String, in directory: Item) async throws(FSError) -> Item {
        if let child = try catalog.child(of: directory.inode, named: name),
           !child.onStore || child.hasUnsyncedChanges || child.state == .local || child.state == .downloading {
            return try item(child.inode)  // made, changed or open here: the catalog knows better
        }
        // From the second name, a small folder is listed for the lookups that follow.
        await enumerator.noteLookupByName(in: directory)
        let path: StorePath
        do { path = try directory.path.appending(name) } catch { throw .invalidArgument }
        let askedAt = Date().timeIntervalSince1970
        let entry: RemoteEntry
        do {
            entry = try await retry.run { () async throws(StoreError) -> RemoteEntry in try await store.stat(path) }
        } catch .notFound {
            throw .notFound
        } catch {
            throw FSError(error)
        }
        // An answer carrying the item's own time (S3's `x-amz-meta-mtime`) replaces the time of
        // storing a listing that landed meanwhile gave the row (`RemoteEntry.carriesOwnTime`).
        try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.applyListingPage([entry], of: directory.inode, askedAt: askedAt, progress: ListingProgress(startedAt: askedAt))
        }
        guard let child = try catalog.child(of: directory.inode, named: name) else { throw .notFound }
        return try item(child.inode)
    }

    /// Finds `name` in `parent` when the catalog can answer at once (the parent was listed);
    /// nil when a listing must come first (call `lookup`). Never touches the network: this is
    /// how the FUSE layer answers most lookups on its own thread, without a task per call.
    public func lookupIfListed(parent: Inode, name: String) throws(FSError) -> Item? {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let (row, child) = try catalog.directoryAndChild(parent, named: name)
        let directory: Item
        if let row { directory = row } else { directory = try item(parent) }
        guard directory.isDirectory else { throw .notADirectory }
        guard enumerator.canAnswerNow(for: directory) else { return nil }
        guard let child else { throw .notFound }
        if enumerator.kindToConfirm(child) != nil { return nil }  // `lookup` asks the store first
        return shownWithLocalCopy(child)
    }

    /// The items of `inodes` that exist, as `stat` shows them (see `item(_:)`), read at once.
    public func items(_ inodes: [Inode]) throws(FSError) -> [Inode: Item] {
        try catalog.items(inodes).mapValues(shownWithLocalCopy)
    }

    /// The children of `directory` whose kind is still to be confirmed (see `SymlinkProbe`):
    /// readdir gives the kernel no attributes for them, so `stat` looks them up.
    public func childrenToConfirm(of directory: Inode) -> Set<Inode> {
        enumerator.inodesToConfirm(in: directory)
    }

    /// The children of a directory, listing it first if it never was.
    public func children(of inode: Inode) async throws(FSError) -> [Item] {
        let directory = try item(inode)
        try await enumerator.ensureListed(directory)
        return try catalog.children(of: inode)
    }

    /// Each child of a directory, in name order, listing it first if it never was. The
    /// children stream from the catalog: a huge folder is never decoded whole at once.
    public func forEachChild(of inode: Inode, _ body: (Item) -> Void) async throws(FSError) {
        let directory = try item(inode)
        try await enumerator.ensureListed(directory)
        try catalog.forEachChild(of: inode) { body(shownWithLocalCopy($0)) }
    }

    /// 512-byte blocks the item's local copy uses: 0 for a placeholder, so `du` tells what is local.
    public func localBlocks(of item: Item) -> Int64 {
        if let blocks = provider.presentCopies.withLock({ $0[item.inode]?.allocatedBlocks }) { return blocks }
        // A copy kept from before this mount (a pinned file) is local before anything opens it.
        guard item.kind == .file, item.state == .local else { return 0 }
        var info = stat()
        return lstat(provider.copyPath(for: item), &info) == 0 ? Int64(info.st_blocks) : 0
    }

    // MARK: Content

    /// Opens a file: provides its local copy (without a download when truncating). A large
    /// file gets a sparse copy that reads fill (see `StreamingPolicy`), a writer's too: its
    /// writes land at once, and the bytes they do not cover are fetched before its changes are
    /// committed (`completeForCommit`), since only a complete copy is ever uploaded. With
    /// `fetchOnFirstUse` a writer's open waits for nothing.
    public func open(_ inode: Inode, mode: OpenMode) async throws(FSError) -> UInt64 {
        if mode.writable && readOnly { throw .readOnly }
        let item = try item(inode)
        let truncating = mode.truncate && mode.writable
        // A writer that may not fetch needs every byte local already (its commit would fetch them).
        var intent: Provider.OpenIntent = truncating ? .empty : mode.writable && !mode.mayFetch ? .content : .streamed
        if intent == .streamed, mode.writable, mode.fetchOnFirstUse, item.kind == .file, item.onStore {
            intent = .writer(opened: try await versionToEdit(item))
        }
        if intent == .streamed, mode.mayFetch, let cached = mode.cachedVersion, let entry = try await storeStillHas(cached, of: item) {
            intent = .cached(entry)
        }
        let copy = try await provider.open(item, intent: intent, mayFetch: mode.mayFetch)
        if truncating {
            do { try copy.truncate(to: 0) } catch {
                await uploader.releaseCopy(of: inode)
                throw error
            }
        }
        return register(OpenFile(inode: inode, copy: copy, writable: mode.writable, opened: item, mayFetch: mode.mayFetch,
                                 appends: mode.writable && mode.append))
    }

    /// The version a writer's open of `item` edits (`Provider.OpenIntent.writer`): the store's
    /// now. A small file's is what the open's fetch gets; a large one's, of which nothing is
    /// fetched at open, is asked of the store (a stat, no content), since the catalog's may be a
    /// listing behind another client's change, and the edit would then be checked against a
    /// version the program never saw. A newer one than the catalog's is recorded, and the FUSE
    /// layer drops the size the kernel cached. Where the store does not answer, the edit is of
    /// the catalog's version, whose size the kernel was given: a newer one on the store then
    /// meets it as a conflict. A copy in use or holding changes is what the open joins: nothing
    /// to ask. (The catalog's row, not the item as `stat` shows it: a copy kept from an earlier
    /// open shows its own size, which a newer version does not have.)
    private func versionToEdit(_ shown: Item) async throws(FSError) -> RemoteEntry {
        let item = try catalog.item(shown.inode) ?? shown
        let listed = RemoteEntry(path: item.path, kind: .file, size: item.size, modified: item.modified.seconds, etag: item.etag)
        let joined = provider.presentCopies.withLock { $0[item.inode] }.map { !$0.life.isUnused } ?? false
        guard item.size > provider.wholeFileLimit, item.etag != nil, store.capabilities.hasRangeReads, !item.hasUnsyncedChanges,
              !joined else { return listed }
        let entry: RemoteEntry
        do {
            entry = try await askStore(about: item.path)
        } catch .storeUnreachable, .timedOut {
            return listed
        }
        guard entry.kind == .file else { throw entry.kind == .directory ? .isADirectory : .stale }
        if entry.etag != item.etag || entry.size != item.size {
            try catalog.updateMetadata(of: item.inode, from: entry)
        }
        return entry
    }

    /// The store's entry at `path` (a stat), retried and waited for as an open waits.
    private func askStore(about path: StorePath) async throws(FSError) -> RemoteEntry {
        let (store, retry) = (store, retry)
        let timedOut = FSError.timedOut("no answer about \(path) within \(ioTimeout.map { "\($0)" } ?? "the limit")")
        return try await CallerWait.run(limit: ioTimeout, timeout: { timedOut }) { () throws(FSError) -> RemoteEntry in
            do throws(StoreError) {
                return try await retry.run { () async throws(StoreError) -> RemoteEntry in try await store.stat(path) }
            } catch {
                throw FSError(error)
            }
        }
    }

    /// The store's entry for `item` if it is still `version`, the one the kernel caches pages
    /// of (asked of the store: a stat, no content); nil if it moved on (the open fetches the new
    /// one). Asked even when a copy is there now: a close just before this open may evict it
    /// before the provider sees the open (the kernel sends a release without waiting), and
    /// then the open must not download what the kernel holds.
    private func storeStillHas(_ version: ETag, of item: Item) async throws(FSError) -> RemoteEntry? {
        guard item.kind == .file, item.onStore, item.etag == version, !item.hasUnsyncedChanges,
              store.capabilities.hasRangeReads else { return nil }
        do {
            let entry = try await askStore(about: item.path)
            guard entry.kind == .file, entry.etag == version, entry.size == item.size else { return nil }
            return entry
        } catch .notFound {
            return nil  // the open finds out and says so
        }
    }

    /// Whether `inode` has a complete local copy: an open of it downloads nothing, whoever asks.
    public func hasCompleteLocalCopy(_ inode: Inode) -> Bool {
        guard let copy = provider.presentCopies.withLock({ $0[inode] }) else { return false }
        return copy.life.content == .present && !copy.isSparse && copy.isComplete
    }

    /// Creates a new file in `parent` and opens it. No download, nothing on the store until
    /// the last close (or fsync) uploads it with `If-None-Match: *`.
    public func create(in parent: Inode, name: String, mode: UInt32, owner: UInt32, group: UInt32,
                       exclusive: Bool, truncate: Bool) async throws(FSError) -> (item: Item, handle: UInt64) {
        if readOnly { throw .readOnly }
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        guard try item(parent).isDirectory else { throw .notADirectory }
        let found: Item?
        do { found = try await lookup(parent: parent, name: name) } catch .notFound { found = nil }
        if let existing = found {
            if exclusive { throw .exists }
            if existing.isDirectory { throw .isADirectory }
            let handle = try await open(existing.inode, mode: OpenMode(writable: true, truncate: truncate))
            return (try item(existing.inode), handle)
        }
        let now = Timestamp.now
        let (group, mode) = try inheriting(group: group, mode: mode, from: parent, directory: false)
        // `modified` from the start: a listing never drops a row that holds changes.
        let created = try catalog.createItem(in: parent, name: name, kind: .file, modified: now, mode: mode & 0o7777,
                                             owner: owner, group: group, state: .modified, onStore: false, folderChanged: now)
        let copy = try await provider.open(created, intent: .empty)
        do { try copy.markChanged() } catch {
            await uploader.releaseCopy(of: created.inode)
            throw error
        }
        let handle = register(OpenFile(inode: created.inode, copy: copy, writable: true, opened: created))
        return (try item(created.inode), handle)
    }

    /// Reads from an open handle's local copy. Never touches the network: the bytes must be
    /// local (`prepareRead`, `waitForContent`).
    public func read(handle: UInt64, offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws(FSError) -> Int {
        guard let file = handles.withLock({ $0.open[handle] }) else { throw .invalidArgument }
        try requireHeld(file, offset: offset, count: buffer.count)
        return try file.copy.read(into: buffer, at: offset)
    }

    /// Lends the local copy's descriptor for a read of `count` bytes at `offset` whose bytes
    /// are local (a zero-copy reply); the loan's `count` stops at the end of the file.
    public func lendLocalBytes(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan {
        guard let file = handles.withLock({ $0.open[handle] }) else { throw .invalidArgument }
        return try file.copy.lend(at: offset, count: count)
    }

    /// A read's loan of the local copy's descriptor when its bytes are local; nil when they
    /// are being fetched (see `LocalCopy.lendForRead`): wait with `waitForContent`, then
    /// `lendLocalBytes`. One handle lookup, and for a complete copy one lock, per read.
    public func lendForRead(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan? {
        guard let file = handles.withLock({ $0.open[handle] }) else { throw .invalidArgument }
        guard file.mayFetch else {
            try requireHeld(file, offset: offset, count: count)
            return try file.copy.lend(at: offset, count: count)
        }
        return try file.copy.lendForRead(at: offset, count: count, stream: handle)
    }

    /// A read through a handle that may not fetch gets the bytes a sparse copy holds already,
    /// or `fetchRefused` (nothing is asked of the store).
    private func requireHeld(_ file: OpenFile, offset: Int64, count: Int) throws(FSError) {
        guard !file.mayFetch else { return }
        let end = min(offset + Int64(count), file.copy.length)
        if end > offset, !file.copy.held.contains(offset..<end) {
            throw .fetchRefused("bytes \(offset)..<\(end) of \(file.opened.path)")
        }
    }

    /// The store version an open handle's copy holds, unchanged: nil when the copy has local
    /// changes (or is a new file). What the kernel's page cache of it can be labelled with.
    public func cleanVersion(handle: UInt64) -> ETag? {
        guard let file = handles.withLock({ $0.open[handle] }) else { return nil }
        let life = file.copy.life
        return life.isDirty || file.copy.wasWritten ? nil : life.base
    }

    /// Whether a read of `count` bytes at `offset` can be answered from the local copy now.
    /// Starts fetching what a sparse copy lacks, and reading ahead for a sequential reader;
    /// never waits. (An unknown handle answers true: the read itself reports it.)
    public func prepareRead(handle: UInt64, offset: Int64, count: Int) -> Bool {
        guard let file = handles.withLock({ $0.open[handle] }), file.mayFetch else { return true }
        return file.copy.prepareRead(at: offset, count: count, stream: handle)
    }

    /// Waits until `count` bytes at `offset` of an open file are local: at most `ioTimeout`
    /// (`ETIMEDOUT`), and only while the calling task is not cancelled (`EINTR`).
    public func waitForContent(handle: UInt64, offset: Int64, count: Int) async throws(FSError) {
        guard let file = handles.withLock({ $0.open[handle] }) else { throw .invalidArgument }
        let copy = file.copy
        let timedOut = FSError.timedOut("bytes \(offset)..<\(offset + Int64(count)) of \(file.opened.path) did not arrive within \(ioTimeout.map { "\($0)" } ?? "")")
        // A stall a reader just waited out fails the next read at once: the kernel retries
        // each page of a failed read-ahead, and one caller must not wait the timeout per page.
        if let ioTimeout, copy.stalled(within: ioTimeout), !copy.prepareRead(at: offset, count: count) { throw timedOut }
        do {
            try await CallerWait.run(limit: ioTimeout, timeout: { timedOut }) { () throws(FSError) in
                try await copy.waitForBytes(at: offset, count: count)
            }
        } catch .timedOut(let message) {
            copy.noteStall()
            throw .timedOut(message)
        }
    }

    /// Reads `count` bytes at `offset`, waiting for them to be fetched if they are not local.
    public func read(handle: UInt64, offset: Int64, count: Int) async throws(FSError) -> [UInt8] {
        if !prepareRead(handle: handle, offset: offset, count: count) {
            try await waitForContent(handle: handle, offset: offset, count: count)
        }
        var bytes = [UInt8](repeating: 0, count: count)
        let got = bytes.withUnsafeMutableBytes { buffer in
            Result { () throws(FSError) -> Int in try read(handle: handle, offset: offset, into: buffer) }
        }
        return Array(bytes[0..<(try got.get())])
    }

    /// Writes into an open handle's local copy. The first write since a commit is recorded in
    /// the journal before its bytes land; flush/fsync/close commit them. A sparse copy is
    /// written at once (see `LocalCopy.writeLocal`).
    public func write(handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) throws(FSError) -> Int {
        try writeLanding(handle: handle, offset: offset, bytes: bytes).count
    }

    /// `write`, saying where the bytes landed: at `offset`, or at the copy's end for a handle
    /// opened with O_APPEND (`OpenMode.append`). Where that is not `offset`, the kernel's size
    /// and pages of the file are wrong (it computed the offset from the size it cached).
    public func writeLanding(handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) throws(FSError) -> (count: Int, offset: Int64, inode: Inode) {
        guard let file = handles.withLock({ $0.open[handle] }), file.writable else { throw .invalidArgument }
        let landed = file.appends ? try file.copy.appendLocal(bytes) : (try file.copy.writeLocal(bytes, at: offset), offset)
        uploadStreams?.consider(file.copy)
        return (landed.0, landed.1, file.inode)
    }

    /// Commits the copy's changes to the journal: the catalog row with its size and a new
    /// commit (not flushed to disk: see `SessionMarker`). Runs before every close() returns.
    /// Only committed content is ever uploaded over the store's version.
    public func flush(handle: UInt64) async throws(FSError) {
        guard let file = handles.withLock({ $0.open[handle] }) else { return }
        try await completeForCommit(file)
        try file.copy.commit()
    }

    /// `flush` on the calling thread, or false (nothing done) when the copy's holes must be
    /// fetched first: call `flush` then. What every close() costs, without a task for most.
    public func flushIfComplete(handle: UInt64) throws(FSError) -> Bool {
        guard let file = handles.withLock({ $0.open[handle] }) else { return true }
        if file.copy.needsFillBeforeCommit { return false }
        try file.copy.commit()
        return true
    }

    /// Fetches what a changed sparse copy lacks, none of the bytes written into it, before its
    /// changes are committed: only a complete copy is committed and uploaded. The caller waits
    /// as a writer does (`Provider.complete`); a version changed on the store meanwhile fails
    /// with `ESTALE`. The changes stay uncommitted then; a last close hands them to the
    /// uploader all the same (`CopyLife.awaitingFill`).
    private func completeForCommit(_ file: OpenFile) async throws(FSError) {
        guard file.copy.needsFillBeforeCommit else { return }
        try await provider.complete(file.copy, of: file.opened)
    }

    /// fsync: commit (flushed to local disk), then upload now and wait for the store to confirm.
    public func fsync(handle: UInt64) async throws(FSError) {
        guard let file = handles.withLock({ $0.open[handle] }) else { throw .invalidArgument }
        if file.copy.life.uncommitted {
            try await completeForCommit(file)
            try await Blocking.run { () throws(FSError) in _ = try file.copy.commit(durably: true) }
        }
        // What was sent while it was written completes the commit, if it is all of it.
        if file.copy.isStreaming {
            try await Blocking.run { () throws(FSError) in _ = try file.copy.completeStream() }
        }
        if file.copy.life.isDirty {
            try await uploader.sync(file.inode)
        }
    }

    /// Closes a handle. The last close evicts the local copy, or hands it to the uploader.
    public func release(handle: UInt64) async {
        guard let file = handles.withLock({ $0.open.removeValue(forKey: handle) }) else { return }
        file.copy.endReadStream(handle)
        // Most closes have nothing to commit (a reader, or a writer that already flushed): no
        // hop to the blocking queue for them.
        if file.copy.life.uncommitted {
            do {
                do { try await completeForCommit(file) } catch {
                    // Handed over all the same: the uploader fetches the rest and commits.
                    do { try file.copy.update { $0.commitAwaitsFill() } } catch let recording {
                        logger.error("cannot note that a copy's commit awaits its fill",
                                     metadata: ["inode": "\(file.inode)", "error": "\(recording)"])
                    }
                    throw error
                }
                try await Blocking.run { () throws(FSError) in _ = try file.copy.commit() }
            } catch {
                logger.error("cannot commit changes", metadata: ["inode": "\(file.inode)", "error": "\(error)"])
            }
        }
        // The last writer let go: a stream of what it wrote completes its commit.
        if file.writable, file.copy.isStreaming, !handles.withLock({ $0.open.values.contains { $0.inode == file.inode && $0.writable } }) {
            do { try await Blocking.run { () throws(FSError) in _ = try file.copy.completeStream() } } catch {
                logger.warning("cannot record a streamed upload's commit", metadata: ["inode": "\(file.inode)", "error": "\(error)"])
            }
        }
        let outcome = await uploader.releaseCopy(of: file.inode)
        logger.trace("released", metadata: ["inode": "\(file.inode)", "outcome": "\(outcome)"])
    }

    /// Readies a writer's handle for a truncate: where its copy is sparse, every byte it lacks
    /// is fetched first, of the version it opened (writes need none: see `LocalCopy.writeLocal`).
    public func provideForChange(_ handle: UInt64) async throws(FSError) {
        if let file = handles.withLock({ $0.open[handle] }), file.writable {
            try await provider.complete(file.copy, of: file.opened)
        }
    }

    /// Changes attributes: size (truncate, never downloading for a size of 0), times, mode,
    /// owner. Kept in the catalog, so they survive eviction and remount.
    ///
    /// A truncate by path opens the file for the call, and closes it only once everything is
    /// recorded: that close hands the truncated content to the uploader, and an upload that
    /// finds the item's folder gone from the store keeps it elsewhere and removes its row. Had
    /// the call read the item after that close, a truncate that took effect would report ENOENT.
    public func setAttributes(of inode: Inode, _ changes: AttributeChanges, handle: UInt64?) async throws(FSError) -> Item {
        if readOnly { throw .readOnly }
        let item = try item(inode)
        var temporary: UInt64?
        if let size = changes.size {
            guard item.kind == .file else { throw item.isDirectory ? .isADirectory : .invalidArgument }
            // A size of 0 needs no content (the handle stays as it is; a truncating open does it).
            if let handle, size != 0 { try await provideForChange(handle) }
            if let handle, let file = handles.withLock({ $0.open[handle] }) {
                // A copy its reads left sparse needs none of its content for a size of 0: its
                // fetch stops first, so no fetched byte lands after the truncate (as for O_TRUNC).
                if size == 0 { await file.copy.stopFetching() }
                // Like a write: handed over by the handle's close or fsync.
                try file.copy.truncate(to: size)
            } else {
                temporary = try await open(inode, mode: OpenMode(writable: true, truncate: size == 0))
                if let temporary, size != 0 { try await provideForChange(temporary) }
            }
        }
        do {
            if let temporary, let size = changes.size, size != 0, let file = handles.withLock({ $0.open[temporary] }) {
                try file.copy.truncate(to: size)
            }
            // A new size shows in the item (its copy's size); otherwise the item read above is current.
            let changed = try await recordAttributes(of: inode, changes, item: changes.size == nil ? item : try self.item(inode))
            if let temporary { await release(handle: temporary) }
            return changed
        } catch {
            if let temporary { await release(handle: temporary) }
            throw error
        }
    }

    /// The rest of `setAttributes`, once a new size is in the local copy (`item` shows it).
    private func recordAttributes(of inode: Inode, _ changes: AttributeChanges, item: Item) async throws(FSError) -> Item {
        let now = Timestamp.now
        if let modified = changes.modified, item.hasUnsyncedChanges, let copy = provider.presentCopies.withLock({ $0[inode] }) {
            copy.setModificationTime(modified)
        }
        try catalog.setAttributes(of: inode, mode: changes.mode.map { $0 & 0o7777 }, owner: changes.owner, group: changes.group,
                                  modified: changes.modified, accessed: changes.accessed, changed: now)
        // Where the store can carry them too, it gets them; a file not uploaded yet gets them
        // with its upload, or just after it (the state is read after the catalog was written,
        // so an upload finishing meanwhile is seen: see Uploader.pushAttributesChangedDuringUpload).
        let current = try self.item(inode)
        if !current.hasUnsyncedChanges {
            let carried = StoreAttributes(mode: changes.mode.map { $0 & 0o7777 }, modified: changes.modified, accessed: changes.accessed,
                                          owner: changes.owner, group: changes.group)
            await AttributeSync.push(carried, of: current, to: store, catalog: catalog, provider: provider, logger: logger)
        }
        return try self.item(inode)
    }

    /// symlink: on stores that can represent links (a local directory: a real link; S3: a link
    /// object, as s3fs writes it); `EPERM` elsewhere.
    public func makeSymlink(in parent: Inode, name: String, target: String, owner: UInt32, group: UInt32) async throws(FSError) -> Item {
        let path = try await pathForNewEntry(named: name, in: parent)
        let (group, _) = try inheriting(group: group, mode: 0o777, from: parent, directory: false)
        let entry = try await uploader.exclusively(touching: [path]) { () async throws(FSError) -> RemoteEntry in
            do throws(StoreError) {
                return try await store.makeSymlink(path, target: target)
            } catch .notSupported {
                throw FSError.notPermitted
            } catch {
                throw FSError(error)
            }
        }
        let created = try catalog.createItem(in: parent, name: name, kind: .symlink, size: Int64(target.utf8.count),
                                             modified: Timestamp(seconds: entry.modified), etag: entry.etag, mode: nil, owner: owner, group: group,
                                             state: .placeholder, onStore: true, symlinkTarget: target, folderChanged: .now)
        return await withOwnerOnStore(created)
    }

    /// mknod/mkfifo/bind: a FIFO, socket or device node, on stores that can represent one (a
    /// local directory: the real thing; S3: an empty object whose mode carries the type, as
    /// s3fs writes it); `EPERM` elsewhere. Only metadata: the kernel serves opens of such an
    /// inode itself, so no content is ever read or written for it.
    public func makeSpecial(in parent: Inode, name: String, _ special: SpecialFile, mode: UInt32, owner: UInt32,
                            group: UInt32) async throws(FSError) -> Item {
        if readOnly { throw .readOnly }
        let path = try await pathForNewEntry(named: name, in: parent)
        let (group, mode) = try inheriting(group: group, mode: mode, from: parent, directory: false)
        let entry = try await uploader.exclusively(touching: [path]) { () async throws(FSError) -> RemoteEntry in
            do throws(StoreError) {
                return try await store.makeSpecial(path, special, mode: mode & 0o7777)
            } catch .notSupported {
                throw FSError.notPermitted
            } catch {
                throw FSError(error)
            }
        }
        let created = try catalog.createItem(in: parent, name: name, kind: Item.Kind(special.type), modified: Timestamp(seconds: entry.modified),
                                             etag: entry.etag, mode: mode & 0o7777, owner: owner, group: group, state: .placeholder,
                                             onStore: true, rdev: special.rdev, folderChanged: .now)
        return await withOwnerOnStore(created)
    }

    // MARK: Namespace

    /// mkdir: on the store first, then in the catalog.
    public func makeDirectory(in parent: Inode, name: String, mode: UInt32, owner: UInt32, group: UInt32) async throws(FSError) -> Item {
        let path = try await pathForNewEntry(named: name, in: parent)
        let (group, mode) = try inheriting(group: group, mode: mode, from: parent, directory: true)
        let entry = try await uploader.exclusively(touching: [path]) { () async throws(FSError) -> RemoteEntry in
            do throws(StoreError) { return try await store.makeDirectory(path) } catch { throw FSError(error) }
        }
        let created = try catalog.createItem(in: parent, name: name, kind: .directory,
                                             modified: entry.modified > 0 ? Timestamp(seconds: entry.modified) : .now,
                                             mode: mode & 0o7777, owner: owner, group: group, state: .directory, onStore: true,
                                             listedAt: Date().timeIntervalSince1970, folderChanged: .now)
        return await withOwnerOnStore(created)
    }

    /// The group and mode of an entry made in `parent` by a caller of group `group`: in a
    /// setgid folder (mode 02000), the folder's group, and a folder made there is setgid too,
    /// as on every local file system (the kernel leaves this to a FUSE file system).
    func inheriting(group: UInt32, mode: UInt32, from parent: Inode, directory: Bool) throws(FSError) -> (group: UInt32, mode: UInt32) {
        let folder = try item(parent)
        guard let folderMode = folder.mode, folderMode & UInt32(S_ISGID) != 0 else { return (group, mode) }
        return (folder.group ?? UInt32(getegid()), directory ? mode | UInt32(S_ISGID) : mode)
    }

    /// An entry made on the store belongs to the daemon's user there (a local directory) or to
    /// no one (S3 without `x-amz-meta-uid`, read as the mounting user). When the caller is
    /// someone else, the store that can keep owners gets the caller's, so a fresh catalog (another
    /// machine, or s3fs) sees the same owner; in the usual case (the mounting user makes it) this
    /// costs no request.
    private func withOwnerOnStore(_ created: Item) async -> Item {
        let owner = created.owner.flatMap { $0 == geteuid() ? nil : $0 }
        let group = created.group.flatMap { $0 == getegid() ? nil : $0 }
        guard owner != nil || group != nil else { return created }
        await AttributeSync.push(StoreAttributes(owner: created.owner, group: created.group), of: created, to: store, catalog: catalog,
                                 provider: provider, logger: logger)
        return (try? catalog.item(created.inode)) ?? created
    }

    /// unlink / rmdir: on the store first (unless the item never got there), then the catalog.
    public func remove(from parent: Inode, name: String, directory: Bool) async throws(FSError) {
        if readOnly { throw .readOnly }
        let target = try await lookup(parent: parent, name: name)
        if directory {
            guard target.isDirectory else { throw .notADirectory }
            if try !(await children(of: target.inode)).isEmpty { throw .notEmpty }
        } else if target.isDirectory {
            throw .isADirectory
        }
        // An open streamed copy gets the rest of its bytes while the store still has them.
        await completeOpenFiles(under: [target.path])
        try await uploader.exclusively(touching: [target.path]) { () async throws(FSError) in
            // Re-read: an upload that was in flight until now may have put it on the store.
            let target = try catalog.item(target.inode) ?? target
            if target.onStore {
                // Noted first when a kill between the store's change and the catalog's would
                // bring the item back with its changes (Catalog+ChangesUnderWay.swift). A
                // failure leaves the file, and its pending upload (not cancelled yet).
                let change = try catalog.holdsUnsentChanges(target) ? ChangeUnderWay.removal(of: target) : nil
                try await catalog.noting(change) { () async throws(StoreError) in
                    do throws(StoreError) {
                        try await store.delete(target.path, isDirectory: directory)
                    } catch .notFound {
                        // Already gone on the store: the catalog follows.
                    }
                }
            }
            // Still exclusive: no upload may start for it in between.
            await uploader.cancel(target.inode)
            await provider.itemRemoved(target.inode, item: target)
            let now = Timestamp.now
            try catalog.removeItem(target.inode, folderChanged: now)
            markUnlinked(target.inode, at: now)
            if target.links > 1 { try forgetOneLink(of: target) }
        }
    }

    /// rename, including over an existing target and across directories. A directory moves
    /// with everything below it; identities (inodes) stay.
    public func rename(from parent: Inode, name: String, to newParent: Inode, newName: String, noReplace: Bool) async throws(FSError) {
        if readOnly { throw .readOnly }
        guard newName.utf8.count <= 255 else { throw .nameTooLong }
        let source = try await lookup(parent: parent, name: name)
        let destinationDirectory = try item(newParent)
        try await enumerator.ensureListed(destinationDirectory)
        let existing = try catalog.child(of: newParent, named: newName)
        if let existing {
            if existing.inode == source.inode { return }
            if noReplace { throw .exists }
            if source.isDirectory && !existing.isDirectory { throw .notADirectory }
            if !source.isDirectory && existing.isDirectory { throw .isADirectory }
            if existing.isDirectory, try !(await children(of: existing.inode)).isEmpty { throw .notEmpty }
        }
        if source.isDirectory {
            // A directory cannot move into itself.
            var cursor: Inode? = newParent
            while let current = cursor {
                if current == source.inode { throw .invalidArgument }
                cursor = try catalog.item(current)?.parent
            }
        }
        let targetPath = try storePath(destinationDirectory.path, newName)
        // Open streamed copies of what moves (and of what it replaces) get the rest of their
        // bytes first: their ranges are read by name and version, which a move changes.
        await completeOpenFiles(under: [source.path] + (existing.map { [$0.path] } ?? []))
        try await uploader.exclusively(touching: [source.path, targetPath]) { () async throws(FSError) in
            // Re-read both: an upload that was in flight until now may have put them on the store.
            // A source whose row went meanwhile (a copy the store no longer had, evicted) is
            // gone: moving the old row's idea of it could delete the target on the store.
            guard let source = try catalog.item(source.inode) else { throw .notFound }
            let existing = try existing.map { (old: Item) throws(FSError) -> Item in try catalog.item(old.inode) ?? old }
            // From the store's move to the catalog's, no listing asked before may drop the row.
            try await catalog.moving.whileMoving(source.inode) { () async throws(FSError) in
                // Noted first when a kill between the store's change and the catalog's would
                // send the changes under the old name, or (a store that renames by copying)
                // leave the file under both names (Catalog+ChangesUnderWay.swift); the
                // catalog's move removes the note.
                var change: ChangeUnderWay?
                if source.onStore {
                    var noted = store.capabilities.renamesByCopying && !source.isDirectory
                    if !noted { noted = try catalog.holdsUnsentChanges(source) }
                    if !noted, let existing { noted = try catalog.holdsUnsentChanges(existing) }
                    if noted { change = .move(of: source, to: newParent, name: newName, gone: source.path) }
                } else if let existing, existing.onStore {
                    change = .move(of: source, to: newParent, name: newName, gone: existing.path)
                }
                try await catalog.noting(change) { () async throws(StoreError) in
                    if source.onStore {
                        _ = try await store.move(source.path, to: targetPath, replace: existing != nil, isDirectory: source.isDirectory)
                    } else if let existing, existing.onStore {
                        // A new file replaces a stored one: its upload will recreate the name.
                        try await store.delete(existing.path, isDirectory: existing.isDirectory)
                    }
                }
                // Still exclusive: a queued upload of the source must only ever see the new path.
                if let existing {
                    await uploader.cancel(existing.inode)
                    await provider.itemRemoved(existing.inode, item: existing)
                }
                let now = Timestamp.now
                try catalog.moveItem(source.inode, to: newParent, name: newName, changed: now)
                let catalog = self.catalog
                await provider.followRenames { (try? catalog.item($0))??.path }
                if let existing { markUnlinked(existing.inode, at: now) }
            }
        }
    }

    // MARK: Lifecycle

    /// Takes over what an earlier mount left (see `CrashRecovery`): clean copies go, committed
    /// changes are uploaded, writes never closed are kept as `NAME (unsaved …)` (a sparse
    /// one's holes fetched first: `UnfilledCopies`). Call before
    /// the filesystem serves anything.
    public func start() async throws(FSError) {
        let bootID = SessionMarker.currentBootID()
        await UnfilledCopies(catalog: catalog, cacheDirectory: cacheDirectory, store: store, logger: logger).fill()
        var recovery = CrashRecovery(catalog: catalog, cacheDirectory: cacheDirectory, logger: logger)
        recovery.machineRestarted = sessionMarker?.machineRestartedUnderAMount(bootID: bootID) ?? false
        let reverted = try recovery.run()
        // Before anything is committed: from now on a machine crash is told from a daemon's.
        try sessionMarker?.markRunning(bootID: bootID)
        try await settleChangesCutShort()
        try await uploader.resumePending()
        // Items whose unsaved writes were set aside show the store's version: ask for its size
        // now, so stat is right at once (a store that is down leaves them to the next listing).
        for item in reverted {
            if let entry = try? await store.stat(item.path), try catalog.item(item.inode)?.state == .placeholder {
                try? catalog.updateMetadata(of: item.inode, from: entry)
            }
        }
    }

    /// Removals and renames the last mount left under way (see `InterruptedChanges`): settled
    /// in the background, asking the store once per change and again every few seconds while
    /// it does not answer; the uploads of the paths they touch wait until then.
    private func settleChangesCutShort() async throws(FSError) {
        let notes = try catalog.changesUnderWay()
        guard !notes.isEmpty else { return }
        let settler = InterruptedChanges(store: store, catalog: catalog, provider: provider, uploader: uploader, logger: logger)
        let holder = await uploader.hold(settler.paths(of: notes))
        let task = Task { [uploader, logger] in
            var open = notes
            var delay = Duration.milliseconds(500)
            while !Task.isCancelled {
                open = await settler.settle(open)
                if open.isEmpty { break }
                logger.info("the store cannot say yet whether changes cut short by the last mount were made",
                            metadata: ["count": "\(open.count)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(15))
            }
            await uploader.release(holder)
        }
        settlingChangesCutShort.withLock { $0 = task }
    }

    /// Starts listing the top folder while the mount comes up, when it was never listed and the
    /// first lookup of any name would have to list it anyway (a store that cannot look up one
    /// name alone: WebDAV, a local directory). The first command run on the mount then joins
    /// the listing or finds it done, instead of paying a whole round trip and its parsing
    /// before its first answer. An S3 store, whose lookups need no listing, is left alone: a
    /// bucket's top may hold millions of keys nobody asked for.
    /// Returns the listing's task (nil when none was started).
    @discardableResult
    public func startListingTheTop() -> Task<Void, Never>? {
        guard !store.capabilities.looksUpByStat, let root = try? item(Item.rootInode), root.listedAt == nil else { return nil }
        return Task { [enumerator, logger] in
            do {
                try await enumerator.ensureListed(root)
            } catch {
                // The first lookup lists it again and says what failed.
                logger.debug("listing the top folder at mount failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Waits until every queued upload has been tried (`untilStalled`: or waits for a retry).
    public func waitForUploads(untilStalled: Bool = false) async {
        await uploader.waitUntilIdle(untilStalled: untilStalled)
    }

    /// Uploads `inode`'s pending changes now and waits until the store has them.
    public func uploadNow(_ inode: Inode) async throws(FSError) {
        try await uploader.sync(inode)
    }

    /// Waits until no directory listing is in flight (background refreshes included).
    public func waitForListings() async {
        await enumerator.waitUntilIdle()
    }

    /// Waits until the background downloads and listings of pinned folders are done.
    public func waitForPinnedRefresh() async {
        await pinnedRefresher.waitUntilIdle()
    }

    /// Lists `directory` from the store now and waits for it.
    public func refresh(directory inode: Inode) async throws(FSError) {
        try await enumerator.refresh(try item(inode))
    }

    /// How many items the catalog holds (`statfs`'s file count).
    public func itemCount() throws(FSError) -> Int {
        try catalog.itemCount()
    }

    /// Items with changes the store does not have yet.
    public func unsyncedItems() throws(FSError) -> [Item] {
        try catalog.items(in: [.modified, .uploading])
    }

    /// The mount is going away: wait (at most `uploadGrace`) for pending uploads, then evict
    /// every clean local copy. Unsynced copies stay in the cache and the journal for the next mount.
    public func shutdown(uploadGrace: Duration = .seconds(10)) async {
        pinnedRefresher.stop()
        settlingChangesCutShort.withLock { $0 }?.cancel()
        let handlesLeft = handles.withLock { table in
            defer {
                table.open.removeAll()
            }
            return Array(table.open.values)
        }
        // The holes of changed sparse copies, side by side, for at most the grace in all: else
        // their writes stay uncommitted, and the next mount keeps them as unsaved copies
        // (`UnfilledCopies`).
        let unfilled = handlesLeft.filter { $0.copy.needsFillBeforeCommit }
        if !unfilled.isEmpty {
            await withTaskGroup(of: Bool.self) { group in
                for file in unfilled {
                    group.addTask {
                        do { try await self.completeForCommit(file) } catch {
                            self.logger.info("a changed copy's holes were not filled before the unmount",
                                             metadata: ["path": "\(file.opened.path)", "error": "\(error)"])
                        }
                        return true
                    }
                }
                group.addTask { try? await Task.sleep(for: uploadGrace); return false }
                var filled = 0
                while let done = await group.next(), done {
                    filled += 1
                    if filled == unfilled.count { break }
                }
                group.cancelAll()
            }
        }
        for file in handlesLeft {
            do { _ = try file.copy.commit() } catch {
                logger.warning("cannot commit a copy still open at unmount; the next mount keeps it",
                               metadata: ["path": "\(file.opened.path)", "error": "\(error)"])
            }
        }
        for file in handlesLeft {
            await uploader.releaseCopy(of: file.inode)
        }
        let uploader = self.uploader
        let drained = await withTaskGroup(of: Bool.self) { group in
            group.addTask { await uploader.waitUntilIdle(untilStalled: true); return true }
            group.addTask { try? await Task.sleep(for: uploadGrace); return false }
            let first = await group.next() ?? false
            // The grace is over: uploads still under way are cancelled, which also ends the
            // wait above (a group waits for all its tasks: an upload that hangs held it forever).
            await uploader.stop()
            group.cancelAll()
            return first
        }
        if !drained { logger.warning("unmounting with uploads still pending; the next mount resumes them") }
        await provider.shutdown()
        // What stays for the next mount is flushed, so that one may trust it after any crash.
        do {
            try catalog.makeDurable()
            try sessionMarker?.markClean()
        } catch {
            logger.warning("cannot flush the local copies kept for the next mount", metadata: ["error": "\(error)"])
        }
    }

    // MARK: Private

    /// Completes the open streamed copies of items at or below `paths`: an open file stays
    /// usable whatever happens to its name (POSIX).
    private func completeOpenFiles(under paths: [StorePath]) async {
        let catalog = self.catalog
        let isAffected = { @Sendable (inode: Inode) -> Bool in
            guard let path = (try? catalog.item(inode))??.path else { return false }
            return paths.contains { path.isSame(orInside: $0) }
        }
        await provider.completeStreams(where: isAffected)
    }

    /// The open handles of `inode` lost its name (unlink, or a rename over it): their item
    /// shows no link and the status change time of the unlink, as a local file system's does.
    private func markUnlinked(_ inode: Inode, at time: Timestamp) {
        handles.withLock { table in
            for (handle, file) in table.open where file.inode == inode {
                table.open[handle]?.opened.unlinked = true
                table.open[handle]?.opened.changed = time
            }
        }
    }

    /// An item unlinked while a handle still has it open, as that handle knows it.
    private func unlinkedButOpen(_ inode: Inode) -> Item? {
        handles.withLock { table in table.open.values.first { $0.inode == inode }?.opened }
    }

    private func register(_ file: OpenFile) -> UInt64 {
        handles.withLock { table in
            let handle = table.next
            table.next += 1
            table.open[handle] = file
            return handle
        }
    }

    /// Where a new entry `name` in `parent` goes on the store; refuses a read-only mount, a
    /// name too long and a name already taken.
    func pathForNewEntry(named name: String, in parent: Inode) async throws(FSError) -> StorePath {
        if readOnly { throw .readOnly }
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let directory = try item(parent)
        try await enumerator.ensureListed(directory)
        if try catalog.child(of: parent, named: name) != nil { throw .exists }
        return try storePath(directory.path, name)
    }

    private func storePath(_ directory: StorePath, _ name: String) throws(FSError) -> StorePath {
        do { return try directory.appending(name) } catch { throw .invalidArgument }
    }

    // MARK: Extended attributes

    public static let stateAttribute = "user.docfs.state"
    public static let identifierAttribute = "user.docfs.id"
    public static let etagAttribute = "user.docfs.etag"
    public static let errorAttribute = "user.docfs.error"
    public static let conflictAttribute = "user.docfs.conflict"
    /// `DONE/TOTAL` bytes of the download or upload under way (absent otherwise).
    public static let progressAttribute = "user.docfs.progress"
    /// `1` on a pinned item; set to `1`/`0` (or removed) to pin or unpin.
    public static let pinnedAttribute = "user.docfs.pinned"
    /// Set (any value) to make the item, or every file below a folder, a placeholder now.
    public static let evictAttribute = "user.docfs.evict"
    /// On the mount's root: the downloads under way, one `downloading<TAB>path` line each
    /// (streamed ones too, which the catalog shows as local), for `docfs status`.
    public static let transfersAttribute = "user.docfs.transfers"

    public func extendedAttributeNames(of inode: Inode) throws(FSError) -> [String] {
        let item = try item(inode)
        var names = [Self.stateAttribute, Self.identifierAttribute]
        if transferProgress(of: item) != nil { names.append(Self.progressAttribute) }
        if try catalog.isPinned(inode) { names.append(Self.pinnedAttribute) }
        if item.etag != nil { names.append(Self.etagAttribute) }
        if item.uploadError != nil { names.append(Self.errorAttribute) }
        if item.conflictCopy != nil { names.append(Self.conflictAttribute) }
        return names
    }

    public func extendedAttribute(_ name: String, of inode: Inode) throws(FSError) -> [UInt8] {
        // Only docfs's own attributes exist (setxattr of any other name is refused as not
        // supported): for every other name "not supported", not "no such attribute", answered
        // without the catalog. `ls -l` asks each file for its SELinux label and its ACL; told
        // once that the file system supports neither, it stops asking for the rest of the
        // device (coreutils caches ENOTSUP per st_dev), where "no such attribute" cost two
        // round trips through the kernel for every file listed.
        guard name.hasPrefix("user.docfs.") else { throw .notSupported }
        let item = try item(inode)
        let value: String?
        switch name {
        case Self.stateAttribute: value = try shownState(of: item)
        case Self.progressAttribute: value = transferProgress(of: item).map { "\($0.done)/\($0.total)" }
        case Self.pinnedAttribute: value = try catalog.isPinned(inode) ? "1" : nil
        case Self.identifierAttribute: value = item.id
        case Self.etagAttribute: value = item.etag?.value
        case Self.errorAttribute: value = item.uploadError
        case Self.conflictAttribute: value = item.conflictCopy
        case Self.transfersAttribute where inode == Item.rootInode:
            var paths: [String] = []
            for inode in provider.downloadsUnderWay() {
                if let path = try catalog.item(inode)?.path.description { paths.append(path) }
            }
            value = paths.map { "\(ItemState.downloading.rawValue)\t\($0)\n" }.joined()
        default: value = nil
        }
        guard let value else { throw .noAttribute }
        return Array(value.utf8)
    }

    /// What `user.docfs.state` shows: a file's state (`pinned` for a pinned complete copy); for
    /// a folder, `pinned` if it is, and how many of its files are in each state, from one query
    /// (`local=3 modified=1`; `empty`, or `unlisted` before its first listing).
    private func shownState(of item: Item) throws(FSError) -> String {
        let pinned = try catalog.isPinned(item.inode)
        guard item.isDirectory else {
            // A streamed copy is `local` in the catalog from its first bytes on; while ranges
            // still come down, it shows as the download it is.
            if item.state == .local, provider.downloadProgress(of: item.inode) != nil { return ItemState.downloading.rawValue }
            return item.state == .local && pinned ? "pinned" : item.state.rawValue
        }
        let counts = try catalog.childStateCounts(of: item.inode).map { "\($0.state)=\($0.count)" }
        let summary = counts.isEmpty ? (item.listedAt == nil ? "unlisted" : "empty") : counts.joined(separator: " ")
        return pinned ? "pinned " + summary : summary
    }

    /// Bytes done and total of the transfer under way for `item`: its download (the whole file
    /// at open, or ranges a reader is waiting for) or its upload.
    public func transferProgress(of item: Item) -> (done: Int64, total: Int64)? {
        guard item.kind == .file else { return nil }
        if let download = provider.downloadProgress(of: item.inode) {
            return (download.done, max(download.total, item.size))
        }
        if let streamed = uploadStreams?.progress(of: item.inode) {
            return (streamed.sent, streamed.total)
        }
        if item.state == .uploading, let upload = UploadMeter.progress(provider.snapshotPath(for: item)) {
            return (upload.sent, upload.total)
        }
        return nil
    }

    /// Sets one of docfs's own attributes: the way `docfs pin`, `unpin` and `evict` (and any
    /// tool, `setfattr -n user.docfs.pinned -v 1 FILE`) steer what is local.
    public func setExtendedAttribute(_ name: String, value: [UInt8], of inode: Inode) async throws(FSError) {
        let text = String(decoding: value, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines.union(CharacterSet(charactersIn: "\0")))
        switch name {
        case Self.pinnedAttribute:
            switch text.lowercased() {
            case "1", "true", "yes", "on": try await pin(inode)
            case "0", "false", "no", "off", "": try await unpin(inode)
            default: throw .invalidArgument
            }
        case Self.evictAttribute:
            try await evict(inode)
        default:
            throw name.hasPrefix("user.docfs.") ? .notPermitted : .notSupported
        }
    }

    /// Removes one of docfs's own attributes: `user.docfs.pinned` unpins.
    public func removeExtendedAttribute(_ name: String, of inode: Inode) async throws(FSError) {
        guard name == Self.pinnedAttribute else { throw name.hasPrefix("user.docfs.") ? .notPermitted : .notSupported }
        try await unpin(inode)
    }

    /// Pins `inode` ("keep downloaded") and downloads it now; a folder with everything below
    /// it (listing what was never listed). What is added to a pinned folder later is pinned too.
    /// The first failure is thrown once every other file was tried.
    public func pin(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        try catalog.setPinned(item, true)
        await provider.pinsChanged(item.isDirectory ? nil : [inode])
        var failure: FSError?
        try await download(item, failure: &failure)
        if let failure { throw failure }
    }

    private func download(_ item: Item, failure: inout FSError?) async throws(FSError) {
        switch item.kind {
        case .file:
            do {
                _ = try await provider.open(item, intent: .content)
                await uploader.releaseCopy(of: item.inode)
            } catch {
                logger.warning("cannot download a pinned file", metadata: ["path": "\(item.path)", "error": "\(error)"])
                if failure == nil { failure = error }
            }
        case .directory:
            for child in try await children(of: item.inode) {
                try await download(child, failure: &failure)
            }
        default:
            return
        }
    }

    /// Returns `inode` (and everything below a folder) to the default policy: copies nobody
    /// uses go now, as on their last release.
    public func unpin(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        try catalog.setPinned(item, false)
        await provider.pinsChanged(item.isDirectory ? nil : [inode])
        for file in try catalog.filesWithCopies(under: item) {
            guard let held = try catalog.item(file), held.state == .local else { continue }
            // A pinned copy kept from an earlier mount and not opened since.
            if provider.downloadProgress(of: file) == nil, provider.presentCopies.withLock({ $0[file] == nil }) {
                try await provider.evictNow(held)
            }
        }
    }

    /// Makes `inode` (every file below a folder) a placeholder now, and unpins it. Refuses
    /// (`.busy`, naming each) files that are open or hold changes the store does not have;
    /// the others are evicted all the same.
    public func evict(_ inode: Inode) async throws(FSError) {
        let item = try item(inode)
        var refused: [String] = []
        for file in try catalog.filesWithCopies(under: item) {
            guard let held = try catalog.item(file) else { continue }
            do { try await provider.evictNow(held) } catch {
                if case .busy(let why) = error { refused.append(why) } else { throw error }
            }
        }
        if refused.isEmpty || item.isDirectory {
            try catalog.setPinned(item, false)
            await provider.pinsChanged(item.isDirectory ? nil : [inode])
        }
        guard refused.isEmpty else {
            logger.notice("eviction refused", metadata: ["refused": "\(refused.joined(separator: "; "))"])
            throw .busy(refused.joined(separator: "; "))
        }
    }
}
