// Thumbnails of placeholders from the store's previews, written where file managers look before
// running a thumbnailer; and failure markers removed once a copy becomes local (GNOME never
// retries a thumbnailer `--no-fetch-for` refused).

import DocFSCore
import DocFSStore
import Foundation
import Logging
import Synchronization

public actor Thumbnails {
    public struct Settings: Sendable, Equatable {
        /// A thumbnail is named after the file's URI beneath it.
        public var mountPoint: String
        public var cacheHome: String
        public var concurrency: Int
        /// Per listing at most; the rest get theirs later.
        public var perListing: Int
        public var queued: Int
        public var listingWait: Duration

        public init(mountPoint: String, cacheHome: String, concurrency: Int = 4, perListing: Int = 500, queued: Int = 2000,
                    listingWait: Duration = .seconds(3)) {
            self.mountPoint = mountPoint.count > 1 && mountPoint.hasSuffix("/") ? String(mountPoint.dropLast()) : mountPoint
            self.cacheHome = cacheHome
            self.concurrency = max(1, concurrency)
            self.perListing = max(0, perListing)
            self.queued = max(0, queued)
            self.listingWait = listingWait
        }
    }

    /// Images and videos (documents are left to the file manager).
    static let previewedExtensions: Set<String> = [
        "png", "jpg", "jpeg", "jpe", "gif", "bmp", "tif", "tiff", "webp", "heic", "heif", "avif", "ico", "tga", "svg", "xpm", "pnm", "ppm",
        "mp4", "m4v", "mov", "mkv", "webm", "avi", "mpg", "mpeg", "ogv", "wmv", "flv", "3gp",
    ]

    public nonisolated let settings: Settings
    private let store: any Store
    private let catalog: Catalog
    private let logger: Logger
    private var waiting: [Inode] = []
    private var pending: Set<Inode> = []
    private var running = 0
    private nonisolated let counts = Mutex((considered: 0, written: 0, failed: 0))
    public nonisolated var considered: Int { counts.withLock { $0.considered } }
    public nonisolated var written: Int { counts.withLock { $0.written } }
    public nonisolated var failed: Int { counts.withLock { $0.failed } }
    private nonisolated let becameLocalFeed = StateFeed()

    public init(store: any Store, catalog: Catalog, settings: Settings, logger: Logger) {
        self.store = store
        self.catalog = catalog
        self.settings = settings
        self.logger = logger
    }

    /// Call once, before `filesystem` serves requests. The caller keeps what it returns for the
    /// mount's life: the file system holds it only weakly.
    public static func start(for filesystem: DocFileSystem, store: any Store, catalog: Catalog, settings: Settings,
                             logger: Logger) -> Thumbnails {
        let thumbnails = Thumbnails(store: store, catalog: catalog, settings: settings, logger: logger)
        if store.capabilities.previews {
            filesystem.whenPreviewsListed { [weak thumbnails] directory, paths, started in
                await thumbnails?.listed(directory, withPreviews: paths, listingStarted: started)
            }
        }
        thumbnails.startWatchingCopies()
        return thumbnails
    }

    static func isPreviewed(_ name: String) -> Bool {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return false }
        return previewedExtensions.contains(name[name.index(after: dot)...].lowercased())
    }

    nonisolated static func uri(of item: Item, settings: Settings) -> String {
        ThumbnailFile.uri(ofPath: item.path.isRoot ? settings.mountPoint : settings.mountPoint + item.path.description)
    }

    /// Call once. Costs nothing while no `thumbnails/fail` folder exists.
    nonisolated func startWatchingCopies() {
        let fail = settings.cacheHome + "/thumbnails/fail"
        becameLocalFeed.start(watching: catalog, isWanted: { access(fail, F_OK) == 0 }) { [weak self] inodes in
            await self?.removeFailureMarkers(of: inodes)
        }
    }

    private nonisolated func removeFailureMarkers(of inodes: Set<Inode>) async {
        let catalog = self.catalog
        let settings = self.settings
        let removed = await Blocking.run { () -> Int in
            // One read for the batch.
            guard let items = try? catalog.items(Array(inodes)) else { return 0 }
            return items.values.reduce(0) { count, item in
                guard item.kind == .file, [.local, .modified, .uploading].contains(item.state) else { return count }
                return count + ThumbnailFile.removeFailureMarkers(forURI: Self.uri(of: item, settings: settings), cacheHome: settings.cacheHome)
            }
        }
        if removed > 0 { logger.debug("thumbnail failure markers removed", metadata: ["count": "\(removed)"]) }
    }

    /// Returns once written or `listingWait` after the listing started: a file manager that finds
    /// none after `readdir` may download the file. Nil `listingStarted`: returns at once.
    nonisolated func listed(_ directory: Item, withPreviews paths: [StorePath], listingStarted: ContinuousClock.Instant?) async {
        let wanted = paths.filter { Self.isPreviewed($0.name) }
        guard !wanted.isEmpty else { return }
        let queued = await consider(Array(wanted.prefix(settings.perListing)), in: directory.inode)
        guard let listingStarted else { return }
        let deadline = listingStarted + settings.listingWait
        while await isPending(any: queued), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    private func isPending(any inodes: [Inode]) -> Bool {
        inodes.contains { pending.contains($0) }
    }

    private func consider(_ paths: [StorePath], in directory: Inode) async -> [Inode] {
        let catalog = self.catalog
        let settings = self.settings
        let skip = pending
        let candidates = await Blocking.run { () -> [Inode] in
            paths.compactMap { path -> Inode? in
                guard let item = try? catalog.child(of: directory, named: path.name), !skip.contains(item.inode),
                      Self.needsThumbnail(item, settings: settings) else { return nil }
                return item.inode
            }
        }
        var queued: [Inode] = []
        for inode in candidates where waiting.count < settings.queued && pending.insert(inode).inserted {
            waiting.append(inode)
            queued.append(inode)
        }
        let path = (try? catalog.item(directory))?.path.description ?? "?"
        logger.debug("thumbnails considered", metadata: ["directory": "\(path)", "previews": "\(paths.count)", "queued": "\(queued.count)"])
        counts.withLock { $0.considered += 1 }
        startMore()
        return queued
    }

    nonisolated static func needsThumbnail(_ item: Item, settings: Settings) -> Bool {
        guard item.kind == .file, item.state == .placeholder, item.size > 0 else { return false }
        let uri = Self.uri(of: item, settings: settings)
        let path = ThumbnailFile.path(forURI: uri, size: .large, cacheHome: settings.cacheHome)
        return !ThumbnailFile.isValid(at: path, uri: uri, mtime: ThumbnailFile.mtime(item.modified))
    }

    private func startMore() {
        while running < settings.concurrency, !waiting.isEmpty {
            let inode = waiting.removeFirst()
            running += 1
            Task { await self.finished(inode, await self.makeThumbnail(of: inode)) }
        }
    }

    private func finished(_ inode: Inode, _ made: Bool) {
        running -= 1
        pending.remove(inode)
        counts.withLock { if made { $0.written += 1 } else { $0.failed += 1 } }
        startMore()
    }

    private nonisolated func makeThumbnail(of inode: Inode) async -> Bool {
        let (catalog, settings) = (self.catalog, self.settings)
        // Read off the cooperative pool.
        guard let item = await Blocking.run({ () -> Item? in
            guard let item = try? catalog.item(inode), Self.needsThumbnail(item, settings: settings) else { return nil }
            return item
        }) else { return false }
        let preview: Data
        do {
            preview = try await store.preview(of: item.path, side: ThumbnailFile.Size.large.pixels)
        } catch {
            logger.debug("no preview", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return false
        }
        // The listing may have been refreshed while the preview came.
        guard let now = try? catalog.item(inode), now.etag == item.etag, now.modified == item.modified,
              now.state == .placeholder else { return false }
        let uri = Self.uri(of: now, settings: settings)
        let path = ThumbnailFile.path(forURI: uri, size: .large, cacheHome: settings.cacheHome)
        do {
            let png = try ThumbnailFile.tagged(Array(preview), uri: uri, mtime: ThumbnailFile.mtime(now.modified), size: now.size)
            let cacheHome = settings.cacheHome
            try await Blocking.run { () throws(FSError) in
                try ThumbnailFile.write(png, to: path)
                // A thumbnailer refused before the preview came left a stale marker.
                ThumbnailFile.removeFailureMarkers(forURI: uri, cacheHome: cacheHome)
            }
        } catch {
            logger.debug("thumbnail not written", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return false
        }
        return true
    }

    public func waitUntilIdle() async {
        while running > 0 || !waiting.isEmpty {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}
