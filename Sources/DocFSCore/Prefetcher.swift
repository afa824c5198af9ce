import Logging
import Synchronization

/// Reads the next small files ahead of a reader walking a folder in name order (`cat *`): at a
/// distance each file is a round trip. A hold ahead goes if its reader does not come in time.
public actor Prefetcher {
    public struct Policy: Sendable, Equatable {
        public var files: Int
        public var bytes: Int64
        public var hold: Duration

        public init(files: Int, bytes: Int64 = 8 << 20, hold: Duration = .seconds(5)) {
            self.files = files
            self.bytes = bytes
            self.hold = hold
        }

        public static let `default` = Policy(files: 8)
        public static let off = Policy(files: 0)
    }

    private struct Hold {
        var fetch: Task<Bool, Never>
        var size: Int64
        var serial: Int
    }

    private let catalog: Catalog
    private let provider: Provider
    private let policy: Policy
    private let logger: Logger
    private var held: [Inode: Hold] = [:]
    private nonisolated let lastReadWhole = Mutex<(parent: Inode, name: String)?>(nil)
    /// Where a walking reader is: the folder and the last file it opened there.
    private var walk: (parent: Inode, at: Item)?
    /// Lists a folder in the background; `folderListed` follows when it is.
    private let listInBackground: @Sendable (Item) async -> Void
    private var serial = 0
    private var stopped = false
    private(set) var fetchedAhead = 0
    private(set) var used = 0
    nonisolated let underWay = Mutex<Set<Inode>>([])

    init(catalog: Catalog, provider: Provider, policy: Policy, listInBackground: @escaping @Sendable (Item) async -> Void = { _ in },
         logger: Logger) {
        self.listInBackground = listInBackground
        self.catalog = catalog
        self.provider = provider
        self.policy = policy
        self.logger = logger
    }

    nonisolated func readWhole(_ name: String, in parent: Inode) {
        lastReadWhole.withLock { $0 = (parent, name) }
    }

    /// Before its own fetch starts, so the next ones go alongside.
    func readerOpening(_ item: Item) {
        guard policy.files > 0, !stopped, item.kind == .file, let parent = item.parent else { return }
        // Files ahead in other folders are not coming back.
        for (inode, hold) in held where inode != item.inode && (try? catalog.item(inode))??.parent != parent {
            held[inode] = nil
            hold.fetch.cancel()
            release(inode, hold)
        }
        guard isWalk(to: item, in: parent) else {
            walk = nil
            return
        }
        let entering = walk?.parent != parent
        walk = (parent, item)
        fetchAhead(after: item, in: parent)
        guard entering, let folder = try? catalog.item(parent) else { return }
        // A folder no one listed (S3 looks names up one by one) shows no next files: listed now,
        // its next files are fetched when the listing is in (`folderListed`). The folder after
        // it, where the walk goes next, is listed too, so its files need no lookup of their own.
        var toList = [folder]
        if let above = folder.parent, let next = try? catalog.folder(in: above, after: folder.name) { toList.append(next) }
        for folder in toList where folder.listedAt == nil {
            logger.debug("a reader walks folders never listed: listed now", metadata: ["path": "\(folder.path)"])
            Task { [listInBackground] in await listInBackground(folder) }
        }
    }

    /// A folder's listing came in: a reader walking it gets its next files fetched ahead.
    func folderListed(_ folder: Inode) {
        guard policy.files > 0, !stopped, let walk, walk.parent == folder else { return }
        fetchAhead(after: walk.at, in: folder)
    }

    func readerOpened(_ inode: Inode) {
        guard let hold = held.removeValue(forKey: inode) else { return }
        used += 1
        release(inode, hold)
    }

    func stop() async {
        stopped = true
        for (inode, hold) in held {
            hold.fetch.cancel()
            if await hold.fetch.value { await provider.release(inode) }
        }
        held.removeAll()
        if fetchedAhead > 0 {
            logger.info("files fetched ahead of their reader", metadata: ["fetched": "\(fetchedAhead)", "read": "\(used)"])
        }
    }

    private func isWalk(to item: Item, in parent: Inode) -> Bool {
        guard let last = lastReadWhole.withLock({ $0 }), Self.kind(of: last.name) == Self.kind(of: item.name) else { return false }
        if last.parent == parent { return (try? next(after: last.name, in: parent, like: item.name, limit: 1).first?.inode) == item.inode }
        guard let first = try? next(after: nil, in: parent, like: item.name, limit: 1).first, first.inode == item.inode,
              let after = try? next(after: last.name, in: last.parent, like: item.name, limit: 1) else { return false }
        return after.isEmpty
    }

    /// Same extension only: a walk reads one kind.
    private func next(after name: String?, in parent: Inode, like: String, limit: Int) throws(FSError) -> [Item] {
        let kind = Self.kind(of: like)
        var found: [Item] = []
        var cursor = name
        while found.count < limit {
            let page = try catalog.files(in: parent, after: cursor, limit: 64)
            found += page.filter { Self.kind(of: $0.name) == kind }.prefix(limit - found.count)
            guard page.count == 64, let last = page.last else { break }
            cursor = last.name
        }
        return found
    }

    private static func kind(of name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return name[name.index(after: dot)...].lowercased()
    }

    private func fetchAhead(after item: Item, in parent: Inode) {
        guard let next = try? next(after: item.name, in: parent, like: item.name, limit: policy.files) else { return }
        var bytes = held.values.reduce(Int64(0)) { $0 + $1.size }
        for file in next {
            guard held.count < policy.files, bytes + file.size <= policy.bytes else { break }
            guard held[file.inode] == nil, file.state == .placeholder, file.onStore, file.size <= provider.wholeFileLimit,
                  !file.hasUnsyncedChanges else { continue }
            serial += 1
            let hold = Hold(fetch: fetch(file), size: file.size, serial: serial)
            held[file.inode] = hold
            bytes += file.size
            fetchedAhead += 1
            let (inode, mine, wait) = (file.inode, serial, policy.hold)
            Task { [weak self] in
                try? await Task.sleep(for: wait)
                await self?.expire(inode, serial: mine)
            }
        }
    }

    private func fetch(_ file: Item) -> Task<Bool, Never> {
        underWay.withLock { _ = $0.insert(file.inode) }
        return Task { [provider, logger] in
            defer { self.underWay.withLock { _ = $0.remove(file.inode) } }
            do {
                _ = try await provider.open(file, intent: .streamed)
                return true
            } catch {
                // The reader's own open fetches it, and says what failed.
                logger.debug("a file fetched ahead was not", metadata: ["path": "\(file.path)", "error": "\(error)"])
                return false
            }
        }
    }

    private func expire(_ inode: Inode, serial: Int) {
        guard let hold = held[inode], hold.serial == serial else { return }
        held[inode] = nil
        release(inode, hold)
    }

    private func release(_ inode: Inode, _ hold: Hold) {
        Task { [provider] in
            if await hold.fetch.value { await provider.release(inode) }
        }
    }
}
