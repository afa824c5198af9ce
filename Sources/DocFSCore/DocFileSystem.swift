import DocFSStore
import Foundation
import Logging
import Synchronization

/// The filesystem as the FUSE adapter sees it, in FUSE-free terms: items by inode, open
/// handles, reads and writes, attributes and namespace changes. It ties the catalog
/// (metadata), the enumerator (listings), the provider (local copies) and the uploader
/// (changes going back) together. Everything that may touch the network is `async`; what only
/// touches the catalog or a local copy is synchronous and cheap.
///
/// This file holds the wiring; each concern is an extension in a file of its own:
/// `+Lookup`, `+Opening`, `+Content` (read, write, flush, fsync, release), `+Attributes`,
/// `+Namespace`, `+HardLinks`, `+Lifecycle` (start, shutdown), `+ExtendedAttributes` and
/// `+Steering` (pin, evict); the open handles are `OpenFiles`.
public final class DocFileSystem: Sendable {
    let catalog: Catalog
    let provider: Provider
    let enumerator: DirectoryEnumerator
    let uploader: Uploader
    /// New files uploaded while they are written (nil: the store cannot, or it is off).
    let uploadStreams: UploadStreams?
    /// Downloads pinned files a listing shows new or changed on the store.
    let pinnedRefresher: PinnedRefresher
    /// The settling of changes a killed daemon left under way, while it runs.
    let settlingChangesCutShort = Mutex<Task<Void, Never>?>(nil)
    public let readOnly: Bool
    let store: any Store
    let cacheDirectory: String
    /// Tells a machine crash from a daemon's at the next start (none: no state directory, as in
    /// tests that never restart).
    let sessionMarker: SessionMarker?
    let logger: Logger
    let openFiles = OpenFiles()
    /// Reads the next small files of a folder a reader walks (off unless asked for).
    let prefetcher: Prefetcher
    let prefetching: Bool
    /// Changes of shown state, for the daemon's events socket (`followStates`).
    let stateFeed = StateFeed()
    /// Thumbnails from the store's previews, and failure markers removed (`startThumbnails`; nil: off).
    let thumbnails = Mutex<Thumbnails?>(nil)
    /// How long a caller blocked in `open()` or `read()` waits for content (`--io-timeout`);
    /// nil: as long as the store's own deadlines allow.
    let ioTimeout: Duration?
    /// How store calls that a caller waits for are retried (listings, lookups, fetches).
    let retry: RetryPolicy


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

    public init(store: any Store, catalog: Catalog, cacheDirectory: String, directoryTTL: Double, readOnly: Bool,
                uploadBackoff: Duration = .seconds(15), streaming: StreamingPolicy = .default, ioTimeout: Duration? = nil,
                retry: RetryPolicy? = nil, retention: RetentionPolicy = .onLastRelease,
                listAhead: DirectoryEnumerator.ListAhead = .default, prefetch: Prefetcher.Policy = .off, conflictClock: @escaping @Sendable () -> Date = { Date() }, stateDirectory: String? = nil,
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
        // Files held ahead could not be evicted while held, and would push `--cache-max` over its
        // bound: a mount with one reads nothing ahead (for now).
        let prefetch = retention.cacheMax == nil ? prefetch : .off
        self.prefetcher = Prefetcher(catalog: catalog, provider: provider, policy: prefetch, logger: logger)
        self.prefetching = prefetch.files > 0
        self.enumerator = DirectoryEnumerator(store: store, catalog: catalog, ttl: directoryTTL, retry: retry, listAhead: listAhead,
                                              logger: logger)
        let streams = streamedUploads.flatMap { policy in
            store.capabilities.streamsUploads && !readOnly ? UploadStreams(store: store, catalog: catalog, policy: policy) : nil
        }
        self.uploadStreams = streams
        self.uploader = Uploader(store: store, catalog: catalog, provider: provider, maximumBackoff: uploadBackoff,
                                 clock: conflictClock, streams: streams, logger: logger)
        provider.writeback.attach(uploader)
        let pinnedRefresher = PinnedRefresher(catalog: catalog, provider: provider, enumerator: enumerator, logger: logger)
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
}
