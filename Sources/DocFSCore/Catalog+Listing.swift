import DocFSStore
import Foundation
import GRDB
import Synchronization

/// Applying a directory listing to the catalog, page by page.
///
/// A listing arrives in pages (1,000 entries from S3 and the local store, a streamed
/// multistatus from WebDAV). Each page is applied as it arrives, in a transaction of its own,
/// so a 100,000-entry folder is never held whole in memory: what a listing remembers between
/// pages is one `ListingProgress`, the names it has seen and their kinds. When the last page
/// is in, `finishListing` removes what the store no longer has and records the time.
///
/// A listing describes the *store*; it never moves a local copy. For an item with a local
/// copy (open, or holding changes) it updates only what the store has (`etag`, and size and
/// time while the copy is clean), never `baseEtag`, the version the copy started from: so
/// an upload made from that copy still meets the store's newer version as a conflict.
/// An item with a local copy, or a folder with one below it, that vanished from the store or
/// changed kind there keeps its row (marked not on the store, so a later upload recreates it
/// instead of overwriting something else) until the copy is resolved.
/// Names are compared by their bytes: `café` precomposed and decomposed are two entries.
/// Every entry's kind is recorded as known for the entry's version, except for the names in
/// `kindUnknown` (see `SymlinkProbe`): an item already there keeps its row, a new one is
/// added with its kind still to be confirmed. A refresh of an unchanged folder writes no row
/// but the folder's own listing time.
public final class ListingProgress: Sendable {
    /// Each name seen so far, by its bytes, and whether it was a folder: where a store shows a
    /// name as both a file and a folder (S3: object `a` and prefix `a/`), the folder wins,
    /// whatever page each came on. (A reference, so pages applied on the blocking queue add to
    /// it without copying it.) Names by their bytes, in a `NameSet`: a dictionary of 100,000
    /// names was 7 MiB at a huge folder's peak.
    fileprivate let seen = Mutex(SeenNames())
    /// When the first page was asked for: rows whose version docfs learned after it are newer
    /// than anything this listing says, and a vanished row only goes if it is older.
    public let startedAt: Double

    public init(startedAt: Double) {
        self.startedAt = startedAt
    }

    public var count: Int { seen.withLock { $0.names.count } }
}

/// The names a listing has shown, and which of them it showed as a folder.
struct SeenNames {
    var names = NameSet()
    var isFolder: [Bool] = []

    /// Whether `name` was shown as a folder; nil if it was not shown.
    func shownAsFolder(_ name: String) -> Bool? {
        names.index(of: name).map { isFolder[$0] }
    }

    mutating func record(_ name: String, asFolder: Bool) {
        let (inserted, index) = names.insert(name)
        if inserted { isFolder.append(asFolder) } else { isFolder[index] = asFolder }
    }
}

extension Catalog {
    /// Makes the catalog's children of `directory` match a complete listing from the store
    /// given at once: new entries become placeholders, changed ones are updated (keeping inode
    /// and id), vanished ones are removed with their subtree. Entries whose kind changed are
    /// replaced. (One page, then `finishListing`, in one transaction.)
    public func applyListing(of directory: Inode, entries: [RemoteEntry], kindUnknown: Set<FileName> = [],
                             listedAt: Double, askedAt: Double? = nil) throws(FSError) {
        let progress = ListingProgress(startedAt: askedAt ?? listedAt)
        try write { db in
            try Catalog.apply(page: entries, kindUnknown: kindUnknown, of: directory, askedAt: progress.startedAt,
                              progress: progress, removedNames: removedNames, in: db)
            try Catalog.finish(listing: progress, of: directory, listedAt: listedAt, moving: moving, in: db)
        }
    }

    /// Applies one page of a listing of `directory`, asked for at `askedAt`.
    public func applyListingPage(_ entries: [RemoteEntry], kindUnknown: Set<FileName> = [], of directory: Inode,
                                 askedAt: Double, progress: ListingProgress) throws(FSError) {
        try write { db in
            try Catalog.apply(page: entries, kindUnknown: kindUnknown, of: directory, askedAt: askedAt,
                              progress: progress, removedNames: removedNames, in: db)
        }
    }

    /// The first `limit` child folders of `directory` named after `name`, in name order, that
    /// were never listed (what `DirectoryEnumerator` lists ahead of a tree walk).
    public func foldersNeverListed(in directory: Inode, after name: String, limit: Int) throws(FSError) -> [Item] {
        try read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item
                WHERE parent = ? AND name > ? AND kind = ? AND listedAt IS NULL ORDER BY name LIMIT ?
                """), arguments: [Int64(bitPattern: directory), name, Item.Kind.directory.rawValue, limit])
        }.map(Catalog.item(from:))
    }

    /// Ends a listing whose pages were all applied: removes the children it did not show and
    /// records `listedAt` as the folder's listing time.
    /// `lookupsFollow`: a caller waits for this listing (a lookup, a readdir), and the folder's
    /// rows are read into the cache of rows at once (`rememberChildren`); a listing ahead of a
    /// walk or a refresh in the background leaves them to the reads that come.
    public func finishListing(_ progress: ListingProgress, of directory: Inode, listedAt: Double,
                              lookupsFollow: Bool = false) throws(FSError) {
        let moving = self.moving
        try write { db in try Catalog.finish(listing: progress, of: directory, listedAt: listedAt, moving: moving, in: db) }
        if lookupsFollow { try rememberChildren(of: directory) }
    }

    /// Reads the folder and its children (as many as the cache of rows holds) into that cache in
    /// one query: a listing's write dropped the cache, and the lookups that follow a listing
    /// (a `stat` of every name) would each read the folder's row and the name's on a reader
    /// connection — two statements and a row set-up each, most of the CPU of a cold `stat` of
    /// 5,000 names.
    private func rememberChildren(of directory: Inode) throws(FSError) {
        let ticket = cache.ticket()
        let rows = try read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item WHERE inode = ?1
                UNION ALL SELECT * FROM (SELECT \(Catalog.itemColumns) FROM item WHERE parent = ?1 LIMIT ?2)
                """), arguments: [Int64(bitPattern: directory), cache.capacity - 1])
        }
        cache.fill(rows.lazy.map(Catalog.item(from:)), ticket: ticket)
    }

    private static func apply(page entries: [RemoteEntry], kindUnknown: Set<FileName>, of directory: Inode,
                              askedAt: Double, progress: ListingProgress, removedNames: RemovedNames, in db: Database) throws {
        guard let dirPath = try String.fetchOne(db.cachedStatement(sql: "SELECT path FROM item WHERE inode = ?"),
                                                arguments: [Int64(bitPattern: directory)]) else { return }
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
            // Most names of a first listing are new: a bare existence check costs a fraction of
            // building a whole row (GRDB's row setup dominated a 100,000-entry listing).
            let arguments: StatementArguments = [Int64(bitPattern: directory), entry.name]
            let exists = try Int64.fetchOne(db.cachedStatement(sql: "SELECT inode FROM item WHERE parent = ? AND name = ?"),
                                            arguments: arguments) != nil
            let row = exists ? try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM item WHERE parent = ? AND name = ?"),
                                                arguments: arguments) : nil
            if row == nil, removedNames.removed(key, from: directory, since: askedAt) {
                // A local unlink or rename took the name away after the page was asked for.
                continue
            }
            if let row, learnedSince(row, askedAt) {
                // docfs learned this item's version after the page was asked for.
                continue
            }
            if let row, kindUnknown.contains(key) {
                // A kind not confirmed for this version keeps what the catalog knows; the rest
                // of the row follows the store, and the kind is confirmed at the next lookup.
                try updateKeepingKind(row, to: entry, in: db)
                continue
            }
            if let row, keepsSpecialKind(row, entry) { continue }
            if let row, (row["kind"] as Int) == kind.rawValue {
                try update(row, to: entry, in: db)
                continue
            }
            if let row {
                // The kind changed on the store. What holds a local copy stays as it is (its
                // upload meets the new kind and is kept as a conflict copy); the rest is replaced.
                if try holdsLocalCopies(db, row) {
                    try db.cachedExecute(sql: "UPDATE item SET onStore = 0 WHERE inode = ? AND kind != ?",
                                   arguments: [row["inode"] as Int64, Item.Kind.directory.rawValue])
                    continue
                }
                try db.cachedExecute(sql: "DELETE FROM item WHERE inode = ?", arguments: [row["inode"] as Int64])
            }
            try db.cachedExecute(sql: """
                INSERT INTO item (id, parent, name, path, kind, size, modifiedNs, etag, symlinkTarget, mode, state, kindKnownFor, rdev,
                                  owner, "group", links)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [ItemIdentifier.make(), Int64(bitPattern: directory), entry.name,
                                 join(dirPath, entry.name), kind.rawValue, entry.size, Timestamp(seconds: entry.modified).nanoseconds,
                                 entry.etag?.value, target(of: entry), entry.mode.map { Int64($0) },
                                 kind == .directory ? ItemState.directory.rawValue : ItemState.placeholder.rawValue,
                                 kindUnknown.contains(key) ? nil : entry.etag?.value, rdev(of: entry),
                                 storeOwner(of: entry), storeGroup(of: entry), entry.links])
        }
    }

    /// Whether `row`, a special file made here on a store that cannot mark one (a WebDAV server
    /// without dead properties: see WebDAVStore+SpecialFiles.swift), is still the empty
    /// version docfs made: the store lists it as an empty file, the catalog knows better.
    private static func keepsSpecialKind(_ row: Row, _ entry: RemoteEntry) -> Bool {
        guard case .file = entry.kind, entry.size == 0, let etag = entry.etag?.value,
              let kind = Item.Kind(rawValue: row["kind"]), kind.specialType != nil else { return false }
        return (row["kindKnownFor"] as String?) == etag
    }

    /// `entries` with one entry per name: the folder where a name is both, else the first.
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

    /// Brings a placeholder whose kind is still to be confirmed (see `SymlinkProbe`) up to the
    /// store's size, time and version, keeping its kind and the version that kind was confirmed
    /// for: a changed version is then one to confirm. A row with a local copy learns the
    /// store's version as `update` teaches it (so its upload meets a newer one as a conflict).
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

    /// Brings a row of the same kind up to what the store says of it.
    private static func update(_ row: Row, to entry: RemoteEntry, in db: Database) throws {
        if hasLocalCopy(row) {
            try updateUnderLocalCopy(row, to: entry, confirmingKind: true, in: db)
            return
        }
        let time = Timestamp(seconds: entry.modified).nanoseconds
        // A refresh of an unchanged folder writes nothing.
        if matches(row, entry), !entry.carriesOwnTime || (row["modifiedNs"] as Int64) == time { return }
        // A time set here (utimensat) stays until the content itself changes; a time of when the
        // version was stored (S3's LastModified) never replaces it, the item's own one does (a
        // HEAD's `x-amz-meta-mtime`: what a `touch` here also sent the store).
        try db.cachedExecute(sql: """
            UPDATE item SET size = ?, modifiedNs = CASE WHEN NOT ? AND etag IS NOT NULL AND etag = ? THEN modifiedNs ELSE ? END,
                etag = ?, symlinkTarget = ?, mode = COALESCE(?, mode), onStore = 1, kindKnownFor = ?, rdev = ?,
                owner = COALESCE(?, owner), "group" = COALESCE(?, "group"), links = ?
            WHERE inode = ?
            """, arguments: [entry.size, entry.carriesOwnTime, entry.etag?.value, time, entry.etag?.value,
                             target(of: entry), entry.mode.map { Int64($0) }, entry.etag?.value, rdev(of: entry),
                             storeOwner(of: entry), storeGroup(of: entry), entry.links, row["inode"] as Int64])
    }

    /// The store's version moves; the copy's base does not. A clean copy shows its own size
    /// while open (DocFileSystem.item), the store's once evicted. A file made here and not
    /// uploaded yet stays "not on the store": the entry listed under its name is someone
    /// else's, and its upload must not replace it (If-None-Match: *, a conflict copy if taken).
    /// `confirmingKind`: the listing vouches for the entry's kind in this version.
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
                               in db: Database) throws {
        // Rows are read one at a time (a cursor), not as a whole folder in memory.
        var vanished: [Row] = []
        let rows = try Row.fetchCursor(db.cachedStatement(sql: "SELECT * FROM item WHERE parent = ?"), arguments: [Int64(bitPattern: directory)])
        try progress.seen.withLock { seen in
            while let row = try rows.next() {
                let name: String = row["name"]
                if seen.shownAsFolder(name) == nil && !learnedSince(row, progress.startedAt)
                    && !moving.contains(Inode(bitPattern: row["inode"] as Int64)) {
                    vanished.append(row.copy())
                }
            }
        }
        for row in vanished {
            // A removal or rename cut short by a kill is under way for it: the store may have
            // made it or not (`InterruptedChanges` asks), so where the item stands is not known
            // from its absence here; taken for a file the store never had, a rename of it would
            // skip the store and a note would go unsettled.
            if try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM changeUnderWay WHERE inode = ?)"),
                                 arguments: [row["inode"] as Int64]) == true {
                continue
            }
            // Never drop a local copy or what holds one (an open file, a change, a new file, a
            // folder with one of those below): the store no longer has it, so its upload (if
            // any) recreates it, and a clean copy's row goes when the copy is evicted.
            if try holdsLocalCopies(db, row) {
                if (row["kind"] as Int) != Item.Kind.directory.rawValue {
                    try db.cachedExecute(sql: "UPDATE item SET onStore = 0 WHERE inode = ?", arguments: [row["inode"] as Int64])
                }
                continue
            }
            try db.cachedExecute(sql: "DELETE FROM item WHERE inode = ?", arguments: [row["inode"] as Int64])
        }
        try db.cachedExecute(sql: "UPDATE item SET listedAt = ? WHERE inode = ?", arguments: [listedAt, Int64(bitPattern: directory)])
    }

    /// The kinds the catalog knows for the children of `directory` named `names`, each with the
    /// version (ETag) it was confirmed for; an entry listed again with the same version needs no
    /// new look. Asked per page, for the names of that page only.
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
