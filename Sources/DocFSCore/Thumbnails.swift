// Thumbnails: a placeholder of a photo or a video shows a thumbnail in a file manager without
// its content being downloaded, where the store makes previews (`Store.preview(of:side:)`:
// Nextcloud, ownCloud, `docfs serve`). This file owns that, and the one thing docfs does for
// thumbnails of local files.
//
// - When a folder's listing reaches the catalog (readdir of a folder never listed, or a
//   listing refreshed), each file the store said it has a preview of (`RemoteEntry.hasPreview`)
//   that is still a placeholder and has no valid thumbnail in the cache gets one: the store's
//   256 px preview, tagged as the freedesktop standard says and written to
//   `$XDG_CACHE_HOME/thumbnails/large/` (ThumbnailFile.swift). That is before a file manager
//   would run a thumbnailer, which it then does not: GIO, GNOME's thumbnail factory, KDE and
//   tumbler all look there first. Only `large` is written: one request a file, and the size GIO
//   and Nautilus look for first; the standard forbids a 256 px picture in `normal`.
// - Off FUSE's threads, `concurrency` at a time, at most `perListing` files of one listing and
//   `queued` in all; never for a file whose copy is local (the file manager makes that one
//   itself, from the local bytes), never twice at once for one file. A listing a caller waits
//   for (a folder's first `readdir`) waits for them up to `listingWait` after it started, so
//   it answers once the thumbnails are there: a file manager looks for them right after, and
//   makes (or, in its own process, downloads for) those it does not find. The rest, and those
//   of listings no one waits for (a walk's listings ahead, refreshes), go on in the background.
// - When a copy becomes local (a fetch done, a pin, a change written here), the failure
//   markers file managers left for it (`thumbnails/fail/APP/MD5(uri).png`: GNOME records a
//   thumbnailer refused by `--no-fetch-for` as failed, and never tries that file again) are
//   removed, so the file manager makes its thumbnail. Watched in the catalog itself, as the
//   state events are (StateFeed.swift), so no code path that makes a copy local can forget it.
//
// The mount point and the cache folder come from the daemon: the core knows no FUSE.

import DocFSStore
import Foundation
import Logging
import Synchronization

public actor Thumbnails {
    public struct Settings: Sendable, Equatable {
        /// The mount point, absolute: a thumbnail is named after the file's URI beneath it.
        public var mountPoint: String
        /// `$XDG_CACHE_HOME` of the user whose file managers look (`~/.cache` without it).
        public var cacheHome: String
        /// Previews fetched at once.
        public var concurrency: Int
        /// Files of one listing taken at most (a folder of 10,000 photos costs no more than this
        /// per listing; the rest get theirs at a later listing, or from the file manager once local).
        public var perListing: Int
        /// Files waiting at most, over all listings.
        public var queued: Int
        /// How long after its start a listing waits for its files' thumbnails (see `listed`).
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

    /// Names whose type is an image or a video: the kinds a preview stands for. (A store's
    /// `has-preview` also covers documents; their thumbnails are left to the file manager.)
    static let previewedExtensions: Set<String> = [
        "png", "jpg", "jpeg", "jpe", "gif", "bmp", "tif", "tiff", "webp", "heic", "heif", "avif", "ico", "tga", "svg", "xpm", "pnm", "ppm",
        "mp4", "m4v", "mov", "mkv", "webm", "avi", "mpg", "mpeg", "ogv", "wmv", "flv", "3gp",
    ]

    public nonisolated let settings: Settings
    private let store: any Store
    private let catalog: Catalog
    private let logger: Logger
    /// Files waiting for a preview, in listing order.
    private var waiting: [Inode] = []
    /// Files waiting or being fetched: each once.
    private var pending: Set<Inode> = []
    private var running = 0
    /// Counts, for tests: listing pages considered, thumbnails written, previews that failed.
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

    /// Whether `name` is of an image or a video.
    static func isPreviewed(_ name: String) -> Bool {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return false }
        return previewedExtensions.contains(name[name.index(after: dot)...].lowercased())
    }

    /// The file's URI beneath the mount point.
    nonisolated static func uri(of item: Item, settings: Settings) -> String {
        ThumbnailFile.uri(ofPath: item.path.isRoot ? settings.mountPoint : settings.mountPoint + item.path.description)
    }

    /// Starts removing failure markers of files whose copies become local. Call once. Costs
    /// nothing while no file manager ever recorded a failure (no `thumbnails/fail` folder).
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
            // One read for the batch: a pin of a big folder makes one of every file.
            guard let items = try? catalog.items(Array(inodes)) else { return 0 }
            return items.values.reduce(0) { count, item in
                guard item.kind == .file, [.local, .modified, .uploading].contains(item.state) else { return count }
                return count + ThumbnailFile.removeFailureMarkers(forURI: Self.uri(of: item, settings: settings), cacheHome: settings.cacheHome)
            }
        }
        if removed > 0 { logger.debug("thumbnail failure markers removed", metadata: ["count": "\(removed)"]) }
    }

    /// A page of `directory`'s listing reached the catalog; `paths` are its files the store has
    /// previews of. Queues those that need a thumbnail, and returns once they are written, or
    /// `listingWait` after the listing started (the rest are written in the background). A file
    /// manager asks for thumbnails right after `readdir`: one it finds none for it makes itself,
    /// and one that thumbnails in its own process (Nemo's and Caja's for small images, PCManFM)
    /// would download the file for it. `listingStarted` is nil when no caller waits for the
    /// listing (a walk's listings ahead, a background refresh): then it returns at once.
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

    /// Queues the files among `paths` that need a thumbnail; returns those queued.
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

    /// A placeholder file without a valid `large` thumbnail.
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

    /// Fetches the preview of `inode` and writes its thumbnail; false when none was written.
    private nonisolated func makeThumbnail(of inode: Inode) async -> Bool {
        let (catalog, settings) = (self.catalog, self.settings)
        // The catalog and the thumbnail already there are read off the cooperative pool.
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
        // What the mount shows now: the listing may have been refreshed while the preview came.
        guard let now = try? catalog.item(inode), now.etag == item.etag, now.modified == item.modified,
              now.state == .placeholder else { return false }
        let uri = Self.uri(of: now, settings: settings)
        let path = ThumbnailFile.path(forURI: uri, size: .large, cacheHome: settings.cacheHome)
        do {
            let png = try ThumbnailFile.tagged(Array(preview), uri: uri, mtime: ThumbnailFile.mtime(now.modified), size: now.size)
            let cacheHome = settings.cacheHome
            try await Blocking.run { () throws(FSError) in
                try ThumbnailFile.write(png, to: path)
                // A file manager that asked before the preview came ran its thumbnailer, which
                // `--no-fetch-for` refused: its failure marker is stale now (GIO prefers the
                // thumbnail anyway, other readers may not).
                ThumbnailFile.removeFailureMarkers(forURI: uri, cacheHome: cacheHome)
            }
        } catch {
            logger.debug("thumbnail not written", metadata: ["path": "\(item.path)", "error": "\(error)"])
            return false
        }
        return true
    }

    /// Waits until no preview is waiting or being fetched (tests).
    public func waitUntilIdle() async {
        while running > 0 || !waiting.isEmpty {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }
}
