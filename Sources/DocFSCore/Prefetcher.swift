import DocFSStore
import Foundation
import Logging
import Synchronization

/// Reads the next small files of a folder before they are asked for, when a reader walks it in
/// name order (`cat *`, `grep -r`, `cp -r` out of the mount, a thumbnailer allowed to fetch): at
/// a distance, each file costs a round trip, and a reader that opens them one after another
/// waits for every one in turn.
///
/// A walk is an open for reading of the file right after one just read whole (closed after a
/// read to its end), in name order among the files of its kind (its extension); or of a
/// folder's first file of that kind right after its previous folder's last (a tree walked in
/// order). A file manager that sniffs the heads of files whose names do not tell their type
/// walks those only, and gets only those ahead. Then the next files of that kind of the folder (small ones only: a large file is streamed, never
/// fetched whole ahead) are opened here, several at once, within `Policy` (files and bytes held
/// ahead). An open here is a hold like a reader's: when the reader opens the file it joins the
/// copy (or the fetch under way) and the hold is let go; a hold the reader never takes is let go
/// after `Policy.hold`, or as soon as the reader opens something out of order, and the copy goes
/// as any released copy does. Only opens that may fetch count (never `--no-fetch-for`).
public actor Prefetcher {
    public struct Policy: Sendable, Equatable {
        /// Files held ahead of the reader at most (0: no prefetch).
        public var files: Int
        /// Bytes held ahead of the reader at most.
        public var bytes: Int64
        /// How long a file fetched ahead waits for its reader.
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
    /// The last file a reader read whole (told at its close, from any thread).
    private nonisolated let lastReadWhole = Mutex<(parent: Inode, name: String)?>(nil)
    private var serial = 0
    private var stopped = false
    /// Files fetched ahead, and how many of them a reader opened (for the log and `docfs status`).
    private(set) var fetchedAhead = 0
    private(set) var used = 0
    /// The files being fetched ahead now, readable from any thread (`user.docfs.transfers`).
    nonisolated let underWay = Mutex<Set<Inode>>([])

    init(catalog: Catalog, provider: Provider, policy: Policy, logger: Logger) {
        self.catalog = catalog
        self.provider = provider
        self.policy = policy
        self.logger = logger
    }

    /// A reader closed `name` of `parent` after reading it to its end.
    nonisolated func readWhole(_ name: String, in parent: Inode) {
        lastReadWhole.withLock { $0 = (parent, name) }
    }

    /// A reader is opening `item` (before its own fetch starts, so the next ones go alongside).
    func readerOpening(_ item: Item) {
        guard policy.files > 0, !stopped, item.kind == .file, let parent = item.parent else { return }
        // What the reader left behind in other folders is not coming back; files ahead in this
        // one wait for it (a file read again is no step elsewhere) until their hold ends.
        letGo(where: { [catalog] inode in (try? catalog.item(inode))??.parent != parent }, except: item.inode)
        guard isWalk(to: item, in: parent) else { return }
        fetchAhead(after: item, in: parent)
    }

    /// A reader's open of `inode` has its copy: a hold of ours on it is let go (the reader's
    /// keeps the copy now).
    func readerOpened(_ inode: Inode) {
        guard let hold = held.removeValue(forKey: inode) else { return }
        used += 1
        release(inode, hold)
    }

    /// Lets every hold go (the mount is going away).
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
        // Into the next folder of a tree walked in order: from the last such file of one folder
        // to the first of another.
        guard let first = try? next(after: nil, in: parent, like: item.name, limit: 1).first, first.inode == item.inode,
              let after = try? next(after: last.name, in: last.parent, like: item.name, limit: 1) else { return false }
        return after.isEmpty
    }

    /// The files of `parent` after `name` (from the first with nil) whose names end as `like`'s
    /// does: a walk reads files of one kind (`cat *.txt`, `grep -r` over text, a folder of photos);
    /// a file manager sniffing the heads of files whose names do not say their type reads those
    /// and skips the rest.
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

    /// What a name says of its type: its extension, lowercased ("" without one).
    private static func kind(of name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "" }
        return name[name.index(after: dot)...].lowercased()
    }

    private func fetchAhead(after item: Item, in parent: Inode) {
        guard let next = try? next(after: item.name, in: parent, like: item.name, limit: policy.files) else { return }
        var count = held.count
        var bytes = held.values.reduce(Int64(0)) { $0 + $1.size }
        for file in next {
            guard count < policy.files, bytes + file.size <= policy.bytes else { break }
            guard held[file.inode] == nil, file.state == .placeholder, file.onStore, file.size <= provider.wholeFileLimit,
                  !file.hasUnsyncedChanges else { continue }
            serial += 1
            let hold = Hold(fetch: fetch(file), size: file.size, serial: serial)
            held[file.inode] = hold
            count += 1
            bytes += file.size
            fetchedAhead += 1
            let (inode, mine, wait) = (file.inode, serial, policy.hold)
            Task { [weak self] in
                try? await Task.sleep(for: wait)
                await self?.expire(inode, serial: mine)
            }
        }
    }

    /// Opens `file` as a reader would; true when that open holds the copy now.
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

    private func letGo(where shouldGo: (Inode) -> Bool, except kept: Inode) {
        for (inode, hold) in held where inode != kept && shouldGo(inode) {
            held[inode] = nil
            hold.fetch.cancel()
            release(inode, hold)
        }
    }

    /// Lets a hold go once its open ended (a cancelled one ends at once).
    private func release(_ inode: Inode, _ hold: Hold) {
        Task { [provider] in
            if await hold.fetch.value { await provider.release(inode) }
        }
    }
}
