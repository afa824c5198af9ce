import DocFSStore
import Foundation
import Logging
import Synchronization

/// The filesystem as the FUSE adapter sees it, in FUSE-free terms. What may touch the network is
/// `async`; the rest is cheap. Each concern is an extension in a file of its own.
public final class DocFileSystem: Sendable {
    let catalog: Catalog
    let provider: Provider
    let enumerator: DirectoryEnumerator
    let uploader: Uploader
    let uploadStreams: UploadStreams?
    let pinnedRefresher: PinnedRefresher
    let settlingChangesCutShort = Mutex<Task<Void, Never>?>(nil)
    public let readOnly: Bool
    let store: any Store
    let cacheDirectory: String
    /// Tells a machine crash from a daemon's at the next start.
    let sessionMarker: SessionMarker?
    let logger: Logger
    let openFiles = OpenFiles()
    let prefetcher: Prefetcher
    let prefetching: Bool
    let stateFeed = StateFeed()
    /// `--io-timeout`; nil: the store's own deadlines.
    let ioTimeout: Duration?
    let retry: RetryPolicy
    /// The store's recent answers about versions the kernel caches pages of.
    let confirmedVersions: ConfirmedVersions

    public struct OpenMode: Sendable, Equatable {
        public var writable: Bool
        public var truncate: Bool
        /// False for processes that should see only what is local (thumbnailers, indexers).
        public var mayFetch: Bool
        /// The version the kernel caches pages of (`keep_cache`): if still current, no content is fetched.
        public var cachedVersion: ETag?
        /// A large file's writer fetches nothing at open, only ranges of its version as needed (else
        /// `touch` downloads it all). For opens from outside (FUSE) only.
        public var fetchOnFirstUse: Bool
        /// O_APPEND: writes land at the copy's end, whatever offset the kernel computed.
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
                streamedUploads: StreamedUpload.Policy? = .default, versionTrust: Duration = .zero, logger: Logger) {
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
        self.confirmedVersions = ConfirmedVersions(trust: versionTrust)
        self.provider = Provider(store: store, catalog: catalog, cacheDirectory: cacheDirectory, retry: retry, streaming: streaming,
                                 ioTimeout: ioTimeout, retention: retention, logger: logger)
        // Files held ahead cannot be evicted, so a mount with `--cache-max` reads nothing ahead.
        let prefetch = retention.cacheMax == nil ? prefetch : .off
        let enumerator = DirectoryEnumerator(store: store, catalog: catalog, ttl: directoryTTL, retry: retry, listAhead: listAhead,
                                             logger: logger)
        self.enumerator = enumerator
        let prefetcher = Prefetcher(catalog: catalog, provider: provider, policy: prefetch,
                                    listInBackground: { [weak enumerator] folder in await enumerator?.listIfNeverListed(folder) },
                                    logger: logger)
        self.prefetcher = prefetcher
        self.prefetching = prefetch.files > 0
        let streams = streamedUploads.flatMap { policy in
            store.capabilities.streamsUploads && !readOnly ? UploadStreams(store: store, catalog: catalog, policy: policy) : nil
        }
        self.uploadStreams = streams
        self.uploader = Uploader(store: store, catalog: catalog, provider: provider, maximumBackoff: uploadBackoff,
                                 clock: conflictClock, streams: streams, logger: logger)
        provider.writeback.attach(uploader)
        let pinnedRefresher = PinnedRefresher(catalog: catalog, provider: provider, enumerator: enumerator, logger: logger)
        self.pinnedRefresher = pinnedRefresher
        // Weakly: a cycle would keep the catalog open.
        enumerator.whenListed { [weak pinnedRefresher, weak prefetcher] directory in
            pinnedRefresher?.listed(directory)
            if let prefetcher { Task { await prefetcher.folderListed(directory.inode) } }
        }
        enumerator.whenCopiesGoneFromStore { [provider] gone in await provider.dropCopiesGoneFromStore(gone) }
        enumerator.whenFoldersBeingMade { [weak uploader] path in
            // Its own and those above it: a folder made ahead below it is kept by the listing (Catalog.holdsLocalCopies).
            guard let uploader, uploader.isBeingMade(atOrAbove: path) else { return }
            await uploader.waitForFoldersBeingMade(overlapping: [path], orBelow: false)
        }
        streams?.whenFoldersBeingMade { [weak uploader] path in uploader?.isBeingMade(atOrAbove: path) ?? false }
    }

    /// Its size and times may have changed under the kernel's cache.
    public func whenPinnedCopyRefreshed(_ handler: @escaping @Sendable (Inode) -> Void) {
        pinnedRefresher.refreshed.withLock { $0 = handler }
    }

    /// Each listing's paths the store has previews of (Sources/DocFSThumbnails); a first
    /// `readdir` waits for the handler, which bounds its own wait.
    public func whenPreviewsListed(_ handler: @escaping DirectoryEnumerator.PreviewsHandler) {
        enumerator.whenPreviewsListed(handler)
    }
}
