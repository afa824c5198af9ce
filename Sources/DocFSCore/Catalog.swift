import DocFSStore
import Foundation
import GRDB
import Synchronization

/// Placeholders and unsynced changes survive a crash here. Inodes are `AUTOINCREMENT` row ids,
/// never reused, so a remembered inode never names another item.
public final class Catalog: Sendable {
    let db: DatabasePool
    let cache = CatalogCache()
    private let writeTransactions = Atomic<Int>(0)
    private let databaseLookups = Atomic<Int>(0)
    /// Names removed locally of late, which an older listing must not bring back.
    let removedNames = RemovedNames()
    /// Items a local rename is moving, which no listing may drop meanwhile.
    let moving = MovingItems()

    public init(path: String) throws(FSError) {
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(10)
            // SQLite's default page cache is 2 MiB per connection, and the pool holds up to six
            // (a writer, five readers): 12 MiB of copies of pages the kernel's page cache already
            // holds, filled in whatever order a big listing happened to use the readers. 256 KiB
            // each keeps a reader's hot B-tree pages; a miss is a pread from the kernel's cache.
            // The writer keeps 4 MiB: a page of a listing (1,000 rows, each in four B-trees, one
            // keyed by a random identifier) dirties more pages than 256 KiB holds, and SQLite
            // then spills them to the WAL mid-transaction and writes them again at commit.
            configuration.prepareDatabase { db in
                try db.execute(sql: db.configuration.readonly ? "PRAGMA cache_size = -256" : "PRAGMA cache_size = -4096")
            }
            db = try DatabasePool(path: path, configuration: configuration)
            try Catalog.migrator.migrate(db)
        } catch {
            throw Catalog.failure(error, "cannot open the catalog at \(path)")
        }
    }

    // MARK: Reading

    public func item(_ inode: Inode) throws(FSError) -> Item? {
        if let cached = cache.item(inode) { return cached }
        // Cached statements: compiling one costs more than running it.
        let ticket = cache.ticket()
        let item = try quickRead { db in try Catalog.item(inode, in: db) }
        cache.fill(item, ticket: ticket)
        return item
    }

    public func child(of parent: Inode, named name: String) throws(FSError) -> Item? {
        if let cached = cache.child(of: parent, named: name) { return cached }
        let ticket = cache.ticket()
        let child = try quickRead { db in try Catalog.child(of: parent, named: name, in: db) }
        cache.fill(child, ticket: ticket)
        return child
    }

    /// One hop: each separate read is a queue hop and a pooled connection.
    public func directoryAndChild(_ parent: Inode, named name: String) throws(FSError) -> (directory: Item?, child: Item?) {
        if let directory = cache.item(parent) { return (directory, try child(of: parent, named: name)) }
        let ticket = cache.ticket()
        let found = try quickRead { db -> (directory: Item?, child: Item?) in
            guard let directory = try Catalog.item(parent, in: db) else { return (nil, nil) }
            return (directory, try Catalog.child(of: parent, named: name, in: db))
        }
        cache.fill([found.directory, found.child].compactMap { $0 }, ticket: ticket)
        return found
    }

    private static func item(_ inode: Inode, in db: Database) throws -> Item? {
        try firstItem(db.cachedStatement(sql: "SELECT \(itemColumns) FROM item WHERE inode = ?"),
                      arguments: [Int64(bitPattern: inode)])
    }

    private static func child(of parent: Inode, named name: String, in db: Database) throws -> Item? {
        try firstItem(db.cachedStatement(sql: "SELECT \(itemColumns) FROM item WHERE parent = ? AND name = ?"),
                      arguments: [Int64(bitPattern: parent), name])
    }

    /// Decoded off the statement, not from a copied row (whose columns each decode through a
    /// generic conversion): the lookups of a listing under way each read one.
    private static func firstItem(_ statement: Statement, arguments: StatementArguments) throws -> Item? {
        let cursor = try Row.fetchCursor(statement, arguments: arguments)
        guard let row = try cursor.next() else { return nil }
        // The row reads the statement's current step: the cursor must not end (and reset it) first.
        return withExtendedLifetime(cursor) { item(from: row) }
    }

    /// Ordered by name (a stable order for readdir offsets).
    public func children(of parent: Inode) throws(FSError) -> [Item] {
        var children: [Item] = []
        try forEachChild(of: parent) { children.append($0) }
        return children
    }

    /// A listing also fills the cache, so the lookups that follow hit memory.
    public func forEachChild(of parent: Inode, _ body: (Item) -> Void) throws(FSError) {
        let ticket = cache.ticket()
        // In batches, so the listing's peak holds no second copy.
        var seen: [Item] = []
        seen.reserveCapacity(Self.fillChunk)
        try read { db in
            let rows = try Row.fetchCursor(db.cachedStatement(sql: "SELECT \(Catalog.itemColumns) FROM item WHERE parent = ? ORDER BY name"),
                                           arguments: [Int64(bitPattern: parent)])
            while let row = try rows.next() {
                let item = Catalog.item(from: row)
                seen.append(item)
                if seen.count == Self.fillChunk {
                    cache.fill(seen, ticket: ticket)
                    seen.removeAll(keepingCapacity: true)
                }
                body(item)
            }
        }
        cache.fill(seen, ticket: ticket)
    }

    private static let fillChunk = 256

    /// For tests.
    public var transactionsWritten: Int { writeTransactions.load(ordering: .relaxed) }

    /// For tests.
    public var itemReadsFromDatabase: Int { databaseLookups.load(ordering: .relaxed) }

    /// For tests and the bench.
    public func rowsWritten() throws(FSError) -> Int {
        try write(invalidating: .nothing) { db in db.totalChangesCount }
    }

    public func itemCount() throws(FSError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM item") ?? 0 }
    }

    public func items(in states: [ItemState]) throws(FSError) -> [Item] {
        let list = states.map { "'\($0.rawValue)'" }.joined(separator: ",")
        return try read { db in try Row.fetchAll(db, sql: "SELECT \(Catalog.itemColumns) FROM item WHERE state IN (\(list))") }
            .map(Catalog.item(from:))
    }

    // MARK: Writing

    public func files(withVersion etag: ETag) throws(FSError) -> [Item] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT \(Catalog.itemColumns) FROM item WHERE etag = ? AND kind = ? LIMIT 1000",
                             arguments: [etag.value, Item.Kind.file.rawValue]).map(Catalog.item(from:))
        }
    }

    public func recordLinks(of inode: Inode, _ links: Int) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: "UPDATE item SET links = ? WHERE inode = ?", arguments: [links, Int64(bitPattern: inode)])
        }
    }

    /// `askedAt`: not if docfs learned a version of the item since.
    public func updateMetadata(of inode: Inode, from entry: RemoteEntry, askedAt: Double? = nil) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: """
                UPDATE item SET size = ?, modifiedNs = CASE WHEN etag IS NOT NULL AND etag = ? THEN modifiedNs ELSE ? END,
                    etag = COALESCE(?, etag), mode = COALESCE(?, mode), owner = COALESCE(?, owner), "group" = COALESCE(?, "group")
                WHERE inode = ? AND (versionAt IS NULL OR versionAt < ?)
                """, arguments: [entry.size, entry.etag?.value, Timestamp(seconds: entry.modified).nanoseconds, entry.etag?.value,
                                 entry.mode.map { Int64($0) }, Catalog.storeOwner(of: entry), Catalog.storeGroup(of: entry),
                                 Int64(bitPattern: inode), askedAt ?? .infinity])
        }
    }

    /// `folderChanged`: the parent's mtime and ctime follow; nil leaves them.
    public func createItem(in parent: Inode, name: String, kind: Item.Kind, size: Int64 = 0, modified: Timestamp,
                           etag: ETag? = nil, mode: UInt32?, owner: UInt32? = nil, group: UInt32? = nil,
                           state: ItemState, onStore: Bool, listedAt: Double? = nil, symlinkTarget: String? = nil,
                           rdev: UInt64 = 0, folderChanged: Timestamp? = nil) throws(FSError) -> Item {
        let inode: Int64 = try write { db in
            guard let parentRow = try Row.fetchOne(db.cachedStatement(sql: "SELECT path FROM item WHERE inode = ?"), arguments: [Int64(bitPattern: parent)]) else {
                throw FSError.notFound
            }
            if let folderChanged { try Catalog.touchFolder(db, parent, at: folderChanged) }
            try db.cachedExecute(sql: """
                INSERT INTO item (id, parent, name, path, kind, size, modifiedNs, etag, mode, owner, "group", state, onStore, listedAt,
                                  changedNs, accessedNs, symlinkTarget, kindKnownFor, versionAt, rdev)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [ItemIdentifier.make(), Int64(bitPattern: parent), name, Catalog.join(parentRow["path"], name),
                                 kind.rawValue, size, modified.nanoseconds, etag?.value, mode.map { Int64($0) }, owner.map { Int64($0) },
                                 group.map { Int64($0) }, state.rawValue, onStore, listedAt, modified.nanoseconds, modified.nanoseconds, symlinkTarget,
                                 etag?.value, Date().timeIntervalSince1970, Int64(bitPattern: rdev)])
            return db.lastInsertedRowID
        }
        guard let item = try item(Inode(bitPattern: inode)) else { throw .io("catalog: created item vanished") }
        return item
    }

    /// Removes the subtree too.
    public func removeItem(_ inode: Inode, folderChanged: Timestamp? = nil) throws(FSError) {
        try write { db in
            if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT parent, name FROM item WHERE inode = ?"), arguments: [Int64(bitPattern: inode)]),
               let parent = row["parent"] as Int64? {
                removedNames.note(row["name"], in: Inode(bitPattern: parent))
                if let folderChanged { try Catalog.touchFolder(db, Inode(bitPattern: parent), at: folderChanged) }
            }
            try db.cachedExecute(sql: "DELETE FROM item WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
        }
    }

    /// Replaces what was there; inode and identifier stay.
    public func moveItem(_ inode: Inode, to parent: Inode, name: String, changed: Timestamp) throws(FSError) {
        try write { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT path, parent, name FROM item WHERE inode = ?"), arguments: [Int64(bitPattern: inode)]),
                  let parentRow = try Row.fetchOne(db.cachedStatement(sql: "SELECT path FROM item WHERE inode = ?"), arguments: [Int64(bitPattern: parent)])
            else { throw FSError.notFound }
            let oldPath: String = row["path"]
            let newPath = Catalog.join(parentRow["path"], name)
            if let oldParent = row["parent"] as Int64? {
                removedNames.note(row["name"], in: Inode(bitPattern: oldParent))
                try Catalog.touchFolder(db, Inode(bitPattern: oldParent), at: changed)
            }
            try Catalog.touchFolder(db, parent, at: changed)
            try db.cachedExecute(sql: "DELETE FROM item WHERE parent = ? AND name = ? AND inode != ?",
                           arguments: [Int64(bitPattern: parent), name, Int64(bitPattern: inode)])
            try db.cachedExecute(sql: "DELETE FROM changeUnderWay WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
            try db.cachedExecute(sql: "UPDATE item SET parent = ?, name = ?, path = ?, changedNs = ?, versionAt = ? WHERE inode = ?",
                           arguments: [Int64(bitPattern: parent), name, newPath, changed.nanoseconds, Date().timeIntervalSince1970,
                                       Int64(bitPattern: inode)])
            // substr counts code points. The subtree is the path range "old/" to "old0" ('0' follows '/'),
            // which the index finds without a scan.
            try db.cachedExecute(sql: """
                UPDATE item SET path = ? || substr(path, ?) WHERE path > ? AND path < ?
                """, arguments: [newPath, oldPath.unicodeScalars.count + 1, oldPath + "/", oldPath + "0"])
        }
    }

    private static func touchFolder(_ db: Database, _ folder: Inode, at time: Timestamp) throws {
        // An unset atime follows the mtime: keep the old one.
        try db.cachedExecute(sql: """
            UPDATE item SET accessedNs = COALESCE(accessedNs, modifiedNs), modifiedNs = ?, changedNs = ? WHERE inode = ?
            """, arguments: [time.nanoseconds, time.nanoseconds, Int64(bitPattern: folder)])
    }

    /// The store's new version after docfs's own change of its attributes. A copy's base is not
    /// the listing's to move: `Provider.storeVersionChanged` moves it.
    public func recordVersion(of inode: Inode, etag: ETag?) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: """
                UPDATE item SET kindKnownFor = CASE WHEN kindKnownFor = etag THEN COALESCE(?, etag) ELSE kindKnownFor END,
                    etag = COALESCE(?, etag), versionAt = ? WHERE inode = ?
                """, arguments: [etag?.value, etag?.value, Date().timeIntervalSince1970, Int64(bitPattern: inode)])
        }
    }

    public func recordUploadError(of inode: Inode, _ message: String?, trouble: UploadTrouble = .failed) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: "UPDATE item SET uploadError = ?, uploadTrouble = ? WHERE inode = ?",
                                 arguments: [message, message == nil ? nil : trouble.rawValue, Int64(bitPattern: inode)])
        }
    }

    /// Nil leaves a value. They are news (`versionAt`): an older store answer does not undo them.
    public func setAttributes(of inode: Inode, mode: UInt32? = nil, owner: UInt32? = nil, group: UInt32? = nil,
                              modified: Timestamp? = nil, accessed: Timestamp? = nil, changed: Timestamp) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            // An unset atime follows the mtime: pin it first (UTIME_OMIT must keep it).
            try db.cachedExecute(sql: """
                UPDATE item SET mode = COALESCE(?, mode), owner = COALESCE(?, owner), "group" = COALESCE(?, "group"),
                    accessedNs = COALESCE(?, accessedNs, modifiedNs), modifiedNs = COALESCE(?, modifiedNs), changedNs = ?,
                    versionAt = ? WHERE inode = ?
                """, arguments: [mode.map { Int64($0) }, owner.map { Int64($0) }, group.map { Int64($0) },
                                 accessed?.nanoseconds, modified?.nanoseconds, changed.nanoseconds, Date().timeIntervalSince1970,
                                 Int64(bitPattern: inode)])
        }
    }

    // MARK: Plumbing

    /// No transaction: BEGIN/COMMIT would cost as much as the reads, and each statement sees a commit.
    func quickRead<T>(_ body: (Database) throws -> T) throws(FSError) -> T {
        databaseLookups.add(1, ordering: .relaxed)
        do { return try db.unsafeRead(body) } catch { throw Catalog.failure(error) }
    }

    func read<T>(_ body: (Database) throws -> T) throws(FSError) -> T {
        do { return try db.read(body) } catch { throw Catalog.failure(error) }
    }

    enum Invalidation {
        case all
        /// Columns of this one row, not its name nor its folder (nor whether it exists).
        case item(Inode)
        case nothing
    }

    /// After commit or rollback the cache forgets what it may have changed (see `CatalogCache`).
    func write<T>(invalidating scope: Invalidation = .all, _ body: (Database) throws -> T) throws(FSError) -> T {
        defer {
            writeTransactions.add(1, ordering: .relaxed)
            switch scope {
            case .all: cache.invalidateAll()
            case .item(let inode): cache.invalidate(inode)
            case .nothing: cache.invalidateNothing()
            }
        }
        do {
            return try db.write(body)
        } catch let error as FSError {
            throw error  // what the body found (an item gone), not a failure of the database
        } catch {
            throw Catalog.failure(error)
        }
    }

    /// A full disk is ENOSPC and a read-only one EROFS, which the user can act on.
    static func failure(_ error: any Error, _ what: String = "catalog") -> FSError {
        if let error = error as? DatabaseError {
            switch error.resultCode {
            case .SQLITE_FULL: return .local(errno: ENOSPC, "\(what): the disk is full (\(error))")
            case .SQLITE_READONLY: return .local(errno: EROFS, "\(what): read-only (\(error))")
            case .SQLITE_NOMEM: return .local(errno: ENOMEM, "\(what): out of memory (\(error))")
            default: break
            }
        }
        return .io("\(what): \(error)")
    }

    static func learnedSince(_ row: Row, _ time: Double) -> Bool {
        guard let learned = row["versionAt"] as Double? else { return false }
        return learned >= time
    }

    static func hasLocalChanges(_ row: Row) -> Bool {
        let state: String = row["state"]
        return state == ItemState.modified.rawValue || state == ItemState.uploading.rawValue || (row["uncommitted"] as Bool? ?? false)
    }

    static func hasLocalCopy(_ row: Row) -> Bool {
        let state: String = row["state"]
        return hasLocalChanges(row) || state == ItemState.local.rawValue || state == ItemState.downloading.rawValue
    }

    static func holdsLocalCopies(_ db: Database, _ row: Row) throws -> Bool {
        if hasLocalCopy(row) { return true }
        guard (row["kind"] as Int) == Item.Kind.directory.rawValue else { return false }
        // A folder made ahead, its MKCOL not answered yet (`Catalog+FoldersAhead`), is a change of its own.
        if (row["onStore"] as Int64) == 0 { return true }
        let path: String = row["path"]
        return try Bool.fetchOne(db.cachedStatement(sql: """
            SELECT EXISTS(SELECT 1 FROM item WHERE (state IN ('modified', 'uploading', 'local', 'downloading') OR uncommitted != 0
                                                    OR (kind = \(Item.Kind.directory.rawValue) AND onStore = 0))
                          AND path > ? AND path < ?)
            """), arguments: [path + "/", path + "0"]) ?? false
    }

    static func join(_ dir: String, _ name: String) -> String {
        dir == "/" ? "/" + name : dir + "/" + name
    }

    static func kind(of entry: RemoteEntry) -> Item.Kind {
        switch entry.kind {
        case .file: return .file
        case .directory: return .directory
        case .symlink: return .symlink
        case .special(let special): return Item.Kind(special.type)
        }
    }

    static func rdev(of entry: RemoteEntry) -> Int64 {
        if case .special(let special) = entry.kind { return Int64(bitPattern: special.rdev) }
        return 0
    }

    /// Only a root daemon takes owners from the store: another could not chown, and a listing would
    /// undo a chown. It shows the mounting user.
    static let takesOwnersFromStore = geteuid() == 0

    static func storeOwner(of entry: RemoteEntry) -> Int64? {
        takesOwnersFromStore ? entry.owner.map { Int64($0) } : nil
    }

    static func storeGroup(of entry: RemoteEntry) -> Int64? {
        takesOwnersFromStore ? entry.group.map { Int64($0) } : nil
    }

    static func target(of entry: RemoteEntry) -> String? {
        if case .symlink(let target) = entry.kind { return target }
        return nil
    }

    static func matches(_ row: Row, _ entry: RemoteEntry) -> Bool {
        let etag = entry.etag?.value
        guard (row["size"] as Int64) == entry.size, (row["etag"] as String?) == etag,
              (row["kindKnownFor"] as String?) == etag, (row["onStore"] as Int64) == 1,
              (row["symlinkTarget"] as String?) == target(of: entry), (row["rdev"] as Int64) == rdev(of: entry),
              (row["links"] as Int64) == Int64(entry.links) else { return false }
        if let mode = entry.mode, (row["mode"] as Int64?) != Int64(mode) { return false }
        if let owner = storeOwner(of: entry), (row["owner"] as Int64?) != owner { return false }
        if let group = storeGroup(of: entry), (row["group"] as Int64?) != group { return false }
        // The time is kept while the version is the same (a time set here); else it follows.
        return etag != nil || (row["modifiedNs"] as Int64) == Timestamp(seconds: entry.modified).nanoseconds
    }

    /// Decoded by index: GRDB's by-name lookup was most of a lookup's cost.
    static let itemColumns = """
        inode, id, parent, name, path, kind, size, modifiedNs, etag, symlinkTarget, mode, state, listedAt, onStore, \
        owner, "group", accessedNs, changedNs, uploadError, conflictCopy, baseEtag, uncommitted, rdev, \
        kindKnownFor IS NOT NULL AND kindKnownFor = etag, uploadTrouble, links, pinned
        """

    static func item(from row: Row) -> Item {
        let pathString: String = row[4]
        let components = pathString.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        let parent: Int64? = row[2]
        let mode: Int64? = row[10]
        let etag: String? = row[8]
        return Item(
            inode: Inode(bitPattern: row[0]),
            id: row[1],
            parent: parent.map { Inode(bitPattern: $0) },
            name: row[3],
            path: StorePath(validated: components),
            kind: Item.Kind(rawValue: row[5]) ?? .file,
            size: row[6],
            modified: Timestamp(nanoseconds: row[7]),
            etag: etag.map(ETag.init),
            symlinkTarget: row[9],
            mode: mode.map { UInt32(truncatingIfNeeded: $0) },
            state: ItemState(rawValue: row[11]) ?? .placeholder,
            listedAt: row[12],
            onStore: row[13],
            owner: (row[14] as Int64?).map { UInt32(truncatingIfNeeded: $0) },
            group: (row[15] as Int64?).map { UInt32(truncatingIfNeeded: $0) },
            accessed: (row[16] as Int64?).map(Timestamp.init(nanoseconds:)),
            changed: (row[17] as Int64?).map(Timestamp.init(nanoseconds:)),
            uploadError: row[18],
            conflictCopy: row[19],
            baseEtag: (row[20] as String?).map(ETag.init),
            hasUncommittedWrites: row[21],
            rdev: UInt64(bitPattern: row[22]),
            kindConfirmed: (row[23] as Bool?) ?? false,
            uploadTrouble: (row[24] as String?).flatMap(UploadTrouble.init(rawValue:)),
            links: Int(row[25] as Int64),
            pinned: row[26]
        )
    }
}
