import DocFSStore
import GRDB
import Synchronization

/// Applied page by page, each in its own transaction, so a huge folder is never whole in memory.
/// A listing never moves a copy's `baseEtag`, so its upload meets a newer version as a conflict;
/// a row holding a local copy stays until the copy is resolved. Names compare by bytes.
public final class ListingProgress: Sendable {
    /// Where a name is both file and folder (S3 `a`, `a/`), the folder wins. A `NameSet` for memory.
    fileprivate let seen = Mutex(SeenNames())
    /// Rows docfs learned of after this are newer than the listing.
    public let startedAt: Double

    public init(startedAt: Double) {
        self.startedAt = startedAt
    }

    public var count: Int { seen.withLock { $0.names.count } }

    /// Whether a page applied so far (or the one being applied) listed `name`.
    public func hasSeen(_ name: String) -> Bool { seen.withLock { $0.shownAsFolder(name) != nil } }

    /// Pages committed to the catalog, and who waits for the next one: a lookup in a folder
    /// listed for the first time is answered by the page that holds its name.
    private let pages = Mutex(Pages())

    private struct Pages {
        var applied = 0
        var ended = false
        /// Each is resumed with the count of pages applied, or nil once the listing ended.
        var waiting: [CheckedContinuation<Int?, Never>] = []

        var answer: Int? { ended ? nil : applied }
    }

    func pageApplied() { wake { $0.applied += 1 } }

    /// Also when the listing failed: who waits then asks the listing itself.
    func ended() { wake { $0.ended = true } }

    private func wake(_ change: (inout Pages) -> Void) {
        let (waiting, answer) = pages.withLock { pages in
            change(&pages)
            defer { pages.waiting = [] }
            return (pages.waiting, pages.answer)
        }
        for waiter in waiting { waiter.resume(returning: answer) }
    }

    /// The count of pages applied once it is above `seen`; nil once the listing ended.
    func pageApplied(after seen: Int) async -> Int? {
        await withCheckedContinuation { waiter in
            let now: Int?? = pages.withLock { pages in
                guard pages.ended || pages.applied > seen else {
                    pages.waiting.append(waiter)
                    return .none
                }
                return .some(pages.answer)
            }
            if let now { waiter.resume(returning: now) }
        }
    }
}

struct SeenNames {
    var names = NameSet()
    var isFolder: [Bool] = []

    func shownAsFolder(_ name: String) -> Bool? {
        names.index(of: name).map { isFolder[$0] }
    }

    mutating func record(_ name: String, asFolder: Bool) {
        let (inserted, index) = names.insert(name)
        if inserted { isFolder.append(asFolder) } else { isFolder[index] = asFolder }
    }
}

extension Catalog {
    /// One page, then `finishListing`, in one transaction.
    public func applyListing(of directory: Inode, entries: [RemoteEntry], kindUnknown: Set<FileName> = [],
                             listedAt: Double, askedAt: Double? = nil) throws(FSError) {
        let progress = ListingProgress(startedAt: askedAt ?? listedAt)
        try write { db in
            var changes = PageChanges()
            try Catalog.apply(page: entries, kindUnknown: kindUnknown, of: directory, askedAt: progress.startedAt,
                              progress: progress, removedNames: removedNames, changes: &changes, in: db)
            try Catalog.finish(listing: progress, of: directory, listedAt: listedAt, moving: moving, changes: &changes, in: db)
        }
    }

    /// `rememberNew`: lookups follow (a first listing someone waits for), so the rows the page
    /// adds are read into the cache at once. The cache forgets only the rows the page changed:
    /// the lookups answered meanwhile from earlier pages stay in memory.
    public func applyListingPage(_ entries: [RemoteEntry], kindUnknown: Set<FileName> = [], of directory: Inode,
                                 askedAt: Double, progress: ListingProgress, rememberNew: Bool = false) throws(FSError) {
        var changes = PageChanges()
        do {
            try write(invalidating: .nothing) { db in
                try Catalog.apply(page: entries, kindUnknown: kindUnknown, of: directory, askedAt: askedAt,
                                  progress: progress, removedNames: removedNames, changes: &changes, in: db)
            }
        } catch {
            cache.invalidateAll()  // a rollback leaves nothing changed; a failed commit may not
            throw error
        }
        if changes.removedRows {
            cache.invalidateAll()  // a folder's rows take its subtree with them
        } else {
            for inode in changes.updated { cache.invalidate(Inode(bitPattern: inode)) }
        }
        if rememberNew, let added = changes.added { try remember(added, in: directory) }
    }

    /// What applying one page did to the catalog's rows.
    struct PageChanges {
        /// Rows written in place (their inode and name stay).
        var updated: [Int64] = []
        var removedRows = false
        /// Rows inserted: consecutive inodes (`AUTOINCREMENT` in one transaction).
        var added: ClosedRange<Int64>?

        mutating func inserted(_ inode: Int64) {
            added = added.map { $0.lowerBound...max($0.upperBound, inode) } ?? inode...inode
        }
    }

    /// Not once the cache is full: a huge folder's later pages would be read for nothing.
    private func remember(_ added: ClosedRange<Int64>, in directory: Inode) throws(FSError) {
        guard cache.count < cache.capacity else { return }
        let ticket = cache.ticket()
        let items = try read { db in
            try Array(Row.fetchCursor(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item WHERE inode BETWEEN ? AND ? AND parent = ? LIMIT ?
                """), arguments: [added.lowerBound, added.upperBound, Int64(bitPattern: directory), cache.capacity])
                .map(Catalog.item(from:)))
        }
        cache.fill(items, ticket: ticket)
    }

    public func foldersNeverListed(in directory: Inode, after name: String, limit: Int) throws(FSError) -> [Item] {
        try read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item
                WHERE parent = ? AND name > ? AND kind = ? AND listedAt IS NULL ORDER BY name LIMIT ?
                """), arguments: [Int64(bitPattern: directory), name, Item.Kind.directory.rawValue, limit])
        }.map(Catalog.item(from:))
    }

    /// `lookupsFollow`: a caller waits, so the folder's rows are read into the cache at once
    /// if the end of the listing dropped the cache (rows went); otherwise its pages put them there.
    public func finishListing(_ progress: ListingProgress, of directory: Inode, listedAt: Double,
                              lookupsFollow: Bool = false) throws(FSError) {
        var changes = PageChanges()
        do {
            try write(invalidating: .item(directory)) { db in
                try Catalog.finish(listing: progress, of: directory, listedAt: listedAt, moving: moving, changes: &changes, in: db)
            }
        } catch {
            cache.invalidateAll()
            throw error
        }
        for inode in changes.updated { cache.invalidate(Inode(bitPattern: inode)) }
        guard changes.removedRows else { return }  // the pages' rows are in the cache still
        cache.invalidateAll()
        if lookupsFollow { try rememberChildren(of: directory) }
    }

    /// One query refills the cache the listing's write dropped, for the lookups that follow.
    private func rememberChildren(of directory: Inode) throws(FSError) {
        let ticket = cache.ticket()
        // Decoded off the statement as it steps: a row copied out first decodes each column
        // through a generic conversion, the larger part of this read for a big folder.
        let items = try read { db in
            try Array(Row.fetchCursor(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item WHERE inode = ?1
                UNION ALL SELECT * FROM (SELECT \(Catalog.itemColumns) FROM item WHERE parent = ?1 LIMIT ?2)
                """), arguments: [Int64(bitPattern: directory), cache.capacity - 1]).map(Catalog.item(from:)))
        }
        cache.fill(items, ticket: ticket)
    }

    private static func apply(page entries: [RemoteEntry], kindUnknown: Set<FileName>, of directory: Inode,
                              askedAt: Double, progress: ListingProgress, removedNames: RemovedNames,
                              changes: inout PageChanges, in db: Database) throws {
        guard let dirPath = try String.fetchOne(db.cachedStatement(sql: "SELECT path FROM item WHERE inode = ?"),
                                                arguments: [Int64(bitPattern: directory)]) else { return }
        // Looked up once a page, not once an entry: the cache of statements hashes their text.
        let existing = try db.cachedStatement(sql: "SELECT inode FROM item WHERE parent = ? AND name = ?")
        let wholeRow = try db.cachedStatement(sql: "SELECT * FROM item WHERE parent = ? AND name = ?")
        let insert = try db.cachedStatement(sql: """
            INSERT INTO item (id, parent, name, path, kind, size, modifiedNs, etag, symlinkTarget, mode, state, kindKnownFor, rdev,
                              owner, "group", links)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """)
        for entry in foldersFirst(entries) {
            let key = entry.name.fileName
            let kind = kind(of: entry)
            let first = progress.seen.withLock { seen in
                switch seen.shownAsFolder(entry.name) {
                case true?: return false  // the folder of that name won already
                case false? where kind != .directory: return false  // a second file entry of the name
                default:
                    seen.record(entry.name, asFolder: kind == .directory)
                    return true
                }
            }
            guard first else { continue }
            // Most names of a first listing are new: an existence check is cheaper than a row.
            let arguments: StatementArguments = [Int64(bitPattern: directory), entry.name]
            let exists = try Int64.fetchOne(existing, arguments: arguments) != nil
            let row = exists ? try Row.fetchOne(wholeRow, arguments: arguments) : nil
            if row == nil, removedNames.removed(key, from: directory, since: askedAt) {
                // A local unlink or rename took the name away after the page was asked for.
                continue
            }
            if let row, learnedSince(row, askedAt) {
                // docfs learned this item's version after the page was asked for.
                continue
            }
            if let row, kindUnknown.contains(key) {
                // An unconfirmed kind keeps what the catalog knows until the next lookup.
                try updateKeepingKind(row, to: entry, in: db)
                changes.updated.append(row["inode"])
                continue
            }
            if let row, keepsSpecialKind(row, entry) { continue }
            if let row, (row["kind"] as Int) == kind.rawValue {
                try update(row, to: entry, in: db)
                changes.updated.append(row["inode"])
                continue
            }
            if let row {
                // What holds a local copy stays (its upload becomes a conflict copy); the rest is replaced.
                if try holdsLocalCopies(db, row) {
                    try db.cachedExecute(sql: "UPDATE item SET onStore = 0 WHERE inode = ? AND kind != ?",
                                   arguments: [row["inode"] as Int64, Item.Kind.directory.rawValue])
                    changes.updated.append(row["inode"])
                    continue
                }
                try db.cachedExecute(sql: "DELETE FROM item WHERE inode = ?", arguments: [row["inode"] as Int64])
                changes.removedRows = true
            }
            try insert.execute(arguments: [ItemIdentifier.make(), Int64(bitPattern: directory), entry.name,
                                 join(dirPath, entry.name), kind.rawValue, entry.size, Timestamp(seconds: entry.modified).nanoseconds,
                                 entry.etag?.value, target(of: entry), entry.mode.map { Int64($0) },
                                 kind == .directory ? ItemState.directory.rawValue : ItemState.placeholder.rawValue,
                                 kindUnknown.contains(key) ? nil : entry.etag?.value, rdev(of: entry),
                                 storeOwner(of: entry), storeGroup(of: entry), entry.links])
            changes.inserted(db.lastInsertedRowID)
        }
    }

    /// A special file made here on a store that cannot mark one lists as an empty file.
    private static func keepsSpecialKind(_ row: Row, _ entry: RemoteEntry) -> Bool {
        guard case .file = entry.kind, entry.size == 0, let etag = entry.etag?.value,
              let kind = Item.Kind(rawValue: row["kind"]), kind.specialType != nil else { return false }
        return (row["kindKnownFor"] as String?) == etag
    }

    private static func foldersFirst(_ entries: [RemoteEntry]) -> [RemoteEntry] {
        var byName: [FileName: Int] = [:]
        var unique: [RemoteEntry] = []
        unique.reserveCapacity(entries.count)
        for entry in entries {
            let key = entry.name.fileName
            if let earlier = byName[key] {
                if kind(of: entry) == .directory && kind(of: unique[earlier]) != .directory { unique[earlier] = entry }
            } else {
                byName[key] = unique.count
                unique.append(entry)
            }
        }
        return unique
    }

    /// Keeps the kind and the version it was confirmed for (a changed version is one to confirm).
    private static func updateKeepingKind(_ row: Row, to entry: RemoteEntry, in db: Database) throws {
        guard (row["kind"] as Int) != Item.Kind.directory.rawValue else { return }
        if hasLocalCopy(row) {
            try updateUnderLocalCopy(row, to: entry, confirmingKind: false, in: db)
            return
        }
        let etag = entry.etag?.value
        if (row["etag"] as String?) == etag, (row["size"] as Int64) == entry.size, (row["onStore"] as Int64) == 1,
           (row["links"] as Int64) == Int64(entry.links) { return }
        try db.cachedExecute(sql: """
            UPDATE item SET size = ?, modifiedNs = CASE WHEN etag IS NOT NULL AND etag = ? THEN modifiedNs ELSE ? END,
                etag = ?, onStore = 1, links = ?
            WHERE inode = ?
            """, arguments: [entry.size, etag, Timestamp(seconds: entry.modified).nanoseconds, etag, entry.links, row["inode"] as Int64])
    }

    private static func update(_ row: Row, to entry: RemoteEntry, in db: Database) throws {
        if hasLocalCopy(row) {
            try updateUnderLocalCopy(row, to: entry, confirmingKind: true, in: db)
            return
        }
        let time = Timestamp(seconds: entry.modified).nanoseconds
        // A refresh of an unchanged folder writes nothing.
        if matches(row, entry), !entry.carriesOwnTime || (row["modifiedNs"] as Int64) == time { return }
        // A time set here stays until the content changes, unless the store sends the item's own time.
        try db.cachedExecute(sql: """
            UPDATE item SET size = ?, modifiedNs = CASE WHEN NOT ? AND etag IS NOT NULL AND etag = ? THEN modifiedNs ELSE ? END,
                etag = ?, symlinkTarget = ?, mode = COALESCE(?, mode), onStore = 1, kindKnownFor = ?, rdev = ?,
                owner = COALESCE(?, owner), "group" = COALESCE(?, "group"), links = ?
            WHERE inode = ?
            """, arguments: [entry.size, entry.carriesOwnTime, entry.etag?.value, time, entry.etag?.value,
                             target(of: entry), entry.mode.map { Int64($0) }, entry.etag?.value, rdev(of: entry),
                             storeOwner(of: entry), storeGroup(of: entry), entry.links, row["inode"] as Int64])
    }

    /// The copy's base does not move. A file not uploaded yet stays "not on the store": the
    /// listed entry is someone else's, which its upload must not replace.
    private static func updateUnderLocalCopy(_ row: Row, to entry: RemoteEntry, confirmingKind: Bool, in db: Database) throws {
        let dirty = hasLocalChanges(row)
        try db.cachedExecute(sql: """
            UPDATE item SET etag = ?, onStore = CASE WHEN baseEtag IS NULL AND onStore = 0 THEN 0 ELSE 1 END,
                kindKnownFor = CASE WHEN ? THEN ? ELSE kindKnownFor END,
                size = CASE WHEN ? THEN size ELSE ? END,
                modifiedNs = CASE WHEN ? OR (etag IS NOT NULL AND etag = ?) THEN modifiedNs ELSE ? END,
                links = ?
            WHERE inode = ?
            """, arguments: [entry.etag?.value, confirmingKind, entry.etag?.value, dirty, entry.size, dirty, entry.etag?.value,
                             Timestamp(seconds: entry.modified).nanoseconds, entry.links, row["inode"] as Int64])
    }

    private static func finish(listing progress: ListingProgress, of directory: Inode, listedAt: Double, moving: MovingItems,
                               changes: inout PageChanges, in db: Database) throws {
        // Three columns of every child, whole rows only of those gone: most of a big folder stays.
        // Read before the names seen are looked at: lookups asking them never wait for SQLite.
        var children: [(inode: Int64, name: String)] = []
        let rows = try Row.fetchCursor(db.cachedStatement(sql: "SELECT inode, name, versionAt FROM item WHERE parent = ?"),
                                       arguments: [Int64(bitPattern: directory)])
        while let row = try rows.next() {
            if !learnedSince(row, progress.startedAt) && !moving.contains(Inode(bitPattern: row[0] as Int64)) {
                children.append((row[0], row[1]))
            }
        }
        let gone: [Int64] = progress.seen.withLock { seen in
            children.compactMap { seen.shownAsFolder($0.name) == nil ? $0.inode : nil }
        }
        for inode in gone {
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM item WHERE inode = ?"), arguments: [inode]) else { continue }
            // A removal or rename cut short by a kill: its absence here says nothing yet.
            if try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM changeUnderWay WHERE inode = ?)"),
                                 arguments: [inode]) == true {
                continue
            }
            // Never drop what holds a local copy: its upload recreates it; a clean copy's row goes at eviction.
            if try holdsLocalCopies(db, row) {
                if (row["kind"] as Int) != Item.Kind.directory.rawValue {
                    try db.cachedExecute(sql: "UPDATE item SET onStore = 0 WHERE inode = ?", arguments: [inode])
                    changes.updated.append(inode)
                }
                continue
            }
            try db.cachedExecute(sql: "DELETE FROM item WHERE inode = ?", arguments: [inode])
            changes.removedRows = true
        }
        try db.cachedExecute(sql: "UPDATE item SET listedAt = ? WHERE inode = ?", arguments: [listedAt, Int64(bitPattern: directory)])
    }

    /// The same version needs no new look. Per page.
    public func knownKinds(in directory: Inode, named names: [String]) throws(FSError) -> [FileName: (version: ETag, kind: RemoteEntry.Kind)] {
        try read { db in
            var known: [FileName: (version: ETag, kind: RemoteEntry.Kind)] = [:]
            let statement = try db.cachedStatement(sql: """
                SELECT kind, symlinkTarget, kindKnownFor, rdev FROM item WHERE parent = ? AND name = ? AND kindKnownFor IS NOT NULL
                """)
            for name in names {
                guard let row = try Row.fetchOne(statement, arguments: [Int64(bitPattern: directory), name]) else { continue }
                let kind: RemoteEntry.Kind
                switch Item.Kind(rawValue: row[0]) {
                case .symlink?: kind = .symlink(target: row[1] ?? "")
                case .directory?: kind = .directory
                case let special? where special.specialType != nil:
                    kind = .special(SpecialFile(type: special.specialType!, rdev: UInt64(bitPattern: row[3])))
                default: kind = .file
                }
                known[name.fileName] = (ETag(row[2]), kind)
            }
            return known
        }
    }
}
