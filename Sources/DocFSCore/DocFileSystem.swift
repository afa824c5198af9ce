import DocFSStore
import Foundation
import Logging
import Synchronization

/// The filesystem as the FUSE adapter sees it, in FUSE-free terms, tying catalog, enumerator,
/// provider and uploader together. What may touch the network is `async`; the rest is cheap.
/// Each concern is an extension in a file of its own (`+Lookup`, `+Opening`, `+Content`, ...).
public final class DocFileSystem: Sendable {
    let catalog: Catalog
    let provider: Provider
    let enumerator: DirectoryEnumerator
    let uploader: Uploader
    let uploadStreams: UploadStreams?
    /// Downloads pinned files a listing shows new or changed on the store.
    let pinnedRefresher: PinnedRefresher
    /// Settling of changes a killed daemon left under way, while it runs.
    let settlingChangesCutShort = Mutex<Task<Void, Never>?>(nil)
    public let readOnly: Bool
    let store: any Store
    let cacheDirectory: String
    /// Tells a machine crash from a daemon's at the next start (nil without a state directory).
    let sessionMarker: SessionMarker?
    let logger: Logger
    let openFiles = OpenFiles()
    /// Off unless asked for.
    let prefetcher: Prefetcher
    let prefetching: Bool
    /// For the daemon's events socket (`followStates`).
    let stateFeed = StateFeed()
    /// Nil: off.
    let thumbnails = Mutex<Thumbnails?>(nil)
    /// `--io-timeout` for callers blocked in `open()` or `read()`; nil: the store's own deadlines.
    let ioTimeout: Duration?
    /// For store calls a caller waits for.
    let retry: RetryPolicy


    public struct OpenMode: Sendable, Equatable {
        public var writable: Bool
        public var truncate: Bool
        /// False for processes that should see only what is local (thumbnailers, indexers): they get
        /// `fetchRefused` and cost the store nothing.
        public var mayFetch: Bool
        /// The version the kernel still caches pages of (`keep_cache`): if the store still has it, a
        /// reader's open fetches no content (file managers open an image 2-3 times).
        public var cachedVersion: ETag?
        /// A writer's open (not truncating) of a large file fetches nothing at open, only ranges of
        /// the version it opened as needed (`touch` would otherwise download it all). FUSE opens only.
        public var fetchOnFirstUse: Bool
        /// O_APPEND: writes land at the copy's end, whatever offset the kernel computed from its
        /// cached size (the fetched version may be longer).
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

    /// Nil leaves a value alone.
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
        // Files held ahead cannot be evicted, so would break `--cache-max`: such a mount reads nothing ahead.
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

    /// Called for each pinned file whose copy a refresh replaced with a newer version (its size
    /// and times may have changed under the kernel's cache).
    public func whenPinnedCopyRefreshed(_ handler: @escaping @Sendable (Inode) -> Void) {
        pinnedRefresher.refreshed.withLock { $0 = handler }
    }
}
