import DocFSStore
import Foundation
import GRDB

/// The local database of items: every placeholder's metadata and every item's state,
/// persisted in SQLite so that placeholders (and, later, unsynced changes) survive an
/// unmount, a crash and a restart. One catalog per store, under `$XDG_STATE_HOME/docfs/`.
///
/// Inode numbers are SQLite `AUTOINCREMENT` row ids: never reused for the catalog's life,
/// so an inode the kernel still remembers can never name a different item.
public final class Catalog: Sendable {
    private let db: DatabasePool

    public init(path: String) throws(FSError) {
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(10)
            db = try DatabasePool(path: path, configuration: configuration)
            try Catalog.migrator.migrate(db)
        } catch {
            throw .io("cannot open the catalog at \(path): \(error)")
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE item (
                    inode INTEGER PRIMARY KEY AUTOINCREMENT,
                    id TEXT NOT NULL UNIQUE,
                    parent INTEGER REFERENCES item(inode) ON DELETE CASCADE,
                    name TEXT NOT NULL,
                    path TEXT NOT NULL UNIQUE,
                    kind INTEGER NOT NULL,
                    size INTEGER NOT NULL DEFAULT 0,
                    modified REAL NOT NULL DEFAULT 0,
                    etag TEXT,
                    symlinkTarget TEXT,
                    mode INTEGER,
                    state TEXT NOT NULL,
                    listedAt REAL
                );
                CREATE UNIQUE INDEX item_by_parent_and_name ON item(parent, name);
                INSERT INTO item (inode, id, parent, name, path, kind, state)
                    VALUES (1, 'root', NULL, '', '/', 1, 'directory');
                """)
        }
        migrator.registerMigration("v2-changes") { db in
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN onStore INTEGER NOT NULL DEFAULT 1;
                ALTER TABLE item ADD COLUMN owner INTEGER;
                ALTER TABLE item ADD COLUMN "group" INTEGER;
                ALTER TABLE item ADD COLUMN accessed REAL;
                ALTER TABLE item ADD COLUMN changed REAL;
                ALTER TABLE item ADD COLUMN uploadError TEXT;
                ALTER TABLE item ADD COLUMN conflictCopy TEXT;
                CREATE INDEX item_by_state ON item(state);
                """)
        }
        migrator.registerMigration("v3-nanosecond-times") { db in
            // REAL seconds cannot hold nanoseconds; these integer columns replace them.
            try db.execute(sql: """
                ALTER TABLE item ADD COLUMN modifiedNs INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE item ADD COLUMN accessedNs INTEGER;
                ALTER TABLE item ADD COLUMN changedNs INTEGER;
                UPDATE item SET modifiedNs = CAST(ROUND(modified * 1000000000) AS INTEGER),
                    accessedNs = CAST(ROUND(accessed * 1000000000) AS INTEGER),
                    changedNs = CAST(ROUND(changed * 1000000000) AS INTEGER);
                """)
        }
        migrator.registerMigration("v4-kind-known-for") { db in
            // The version (ETag) at which the item's kind was last confirmed. A store whose
            // listings cannot show links (S3) is asked once per version, not once per listing.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN kindKnownFor TEXT")
        }
        return migrator
    }

    // MARK: Reading

    public func item(_ inode: Inode) throws(FSError) -> Item? {
        try read { db in try Row.fetchOne(db, sql: "SELECT * FROM item WHERE inode = ?", arguments: [Int64(bitPattern: inode)]) }
            .map(Catalog.item(from:))
    }

    public func child(of parent: Inode, named name: String) throws(FSError) -> Item? {
        try read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM item WHERE parent = ? AND name = ?",
                             arguments: [Int64(bitPattern: parent), name])
        }.map(Catalog.item(from:))
    }

    /// The kinds the catalog knows for `directory`'s children, by name, each with the version
    /// (ETag) it was confirmed for; an entry listed again with the same version needs no new look.
    public func knownKinds(in directory: Inode) throws(FSError) -> [String: (version: ETag, kind: RemoteEntry.Kind)] {
        try read { db in
            var known: [String: (version: ETag, kind: RemoteEntry.Kind)] = [:]
            for row in try Row.fetchAll(db, sql: """
                SELECT name, kind, symlinkTarget, kindKnownFor FROM item WHERE parent = ? AND kindKnownFor IS NOT NULL
                """, arguments: [Int64(bitPattern: directory)]) {
                let kind: RemoteEntry.Kind
                switch Item.Kind(rawValue: row["kind"]) {
                case .symlink?: kind = .symlink(target: row["symlinkTarget"] ?? "")
                case .directory?: kind = .directory
                default: kind = .file
                }
                known[row["name"]] = (ETag(row["kindKnownFor"]), kind)
            }
            return known
        }
    }

    /// The children of a directory, ordered by name (a stable order for readdir offsets).
    public func children(of parent: Inode) throws(FSError) -> [Item] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM item WHERE parent = ? ORDER BY name", arguments: [Int64(bitPattern: parent)])
        }.map(Catalog.item(from:))
    }

    public func itemCount() throws(FSError) -> Int {
        try read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM item") ?? 0 }
    }

    /// Items whose state is one of `states`.
    public func items(in states: [ItemState]) throws(FSError) -> [Item] {
        let list = states.map { "'\($0.rawValue)'" }.joined(separator: ",")
        return try read { db in try Row.fetchAll(db, sql: "SELECT * FROM item WHERE state IN (\(list))") }
            .map(Catalog.item(from:))
    }

    // MARK: Writing

    /// Makes the catalog's children of `directory` match a complete listing from the store:
    /// new entries become placeholders, changed ones are updated (keeping inode and id),
    /// vanished ones are removed with their subtree. Entries whose kind changed are replaced.
    /// Items with a local copy in use are left to the provider, which holds its own handle.
    /// Every entry's kind is recorded as known for the entry's version, except for the names in
    /// `kindUnknown` (see `SymlinkProbe`): an item already there keeps its row, a new one is
    /// added with its kind still to be confirmed.
    public func applyListing(of directory: Inode, entries: [RemoteEntry], kindUnknown: Set<String> = [],
                             listedAt: Double) throws(FSError) {
        try write { db in
            guard let dirRow = try Row.fetchOne(db, sql: "SELECT path FROM item WHERE inode = ?", arguments: [Int64(bitPattern: directory)]) else {
                return
            }
            let dirPath: String = dirRow["path"]
            var existing: [String: Row] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT * FROM item WHERE parent = ?", arguments: [Int64(bitPattern: directory)]) {
                existing[row["name"]] = row
            }
            var seen = Set<String>()
            for entry in entries {
                let name = entry.name
                guard !seen.contains(name) else { continue }
                seen.insert(name)
                let kind = Catalog.kind(of: entry)
                if let row = existing[name], Catalog.hasLocalChanges(row) || kindUnknown.contains(name) {
                    // A local change wins until it is uploaded; the upload detects any conflict.
                    // A kind the store could not confirm keeps what the catalog knows.
                    continue
                }
                if let row = existing[name], (row["kind"] as Int) == kind.rawValue {
                    // A time set here (utimensat) stays until the content itself changes.
                    try db.execute(sql: """
                        UPDATE item SET size = ?, modifiedNs = CASE WHEN etag IS NOT NULL AND etag = ? THEN modifiedNs ELSE ? END,
                            etag = ?, symlinkTarget = ?, mode = COALESCE(?, mode), onStore = 1, kindKnownFor = ?
                        WHERE inode = ?
                        """, arguments: [entry.size, entry.etag?.value, Timestamp(seconds: entry.modified).nanoseconds, entry.etag?.value, Catalog.target(of: entry),
                                         entry.mode.map { Int64($0) }, entry.etag?.value, row["inode"] as Int64])
                } else {
                    if let row = existing[name] {
                        try db.execute(sql: "DELETE FROM item WHERE inode = ?", arguments: [row["inode"] as Int64])
                    }
                    try db.execute(sql: """
                        INSERT INTO item (id, parent, name, path, kind, size, modifiedNs, etag, symlinkTarget, mode, state, kindKnownFor)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """, arguments: [UUID().uuidString, Int64(bitPattern: directory), name,
                                         Catalog.join(dirPath, name), kind.rawValue, entry.size, Timestamp(seconds: entry.modified).nanoseconds,
                                         entry.etag?.value, Catalog.target(of: entry), entry.mode.map { Int64($0) },
                                         kind == .directory ? ItemState.directory.rawValue : ItemState.placeholder.rawValue,
                                         kindUnknown.contains(name) ? nil : entry.etag?.value])
                }
            }
            for (name, row) in existing where !seen.contains(name) {
                // Never drop what holds unsynced changes (a new file, an edit, or a folder with one).
                if try Catalog.holdsLocalChanges(db, row) { continue }
                try db.execute(sql: "DELETE FROM item WHERE inode = ?", arguments: [row["inode"] as Int64])
            }
            try db.execute(sql: "UPDATE item SET listedAt = ? WHERE inode = ?", arguments: [listedAt, Int64(bitPattern: directory)])
        }
    }

    /// Records what the store said about an item's content (after a fetch: the ETag may be new).
    public func updateMetadata(of inode: Inode, from entry: RemoteEntry) throws(FSError) {
        try write { db in
            try db.execute(sql: """
                UPDATE item SET size = ?, modifiedNs = CASE WHEN etag IS NOT NULL AND etag = ? THEN modifiedNs ELSE ? END,
                    etag = COALESCE(?, etag), mode = COALESCE(?, mode) WHERE inode = ?
                """, arguments: [entry.size, entry.etag?.value, Timestamp(seconds: entry.modified).nanoseconds, entry.etag?.value,
                                 entry.mode.map { Int64($0) }, Int64(bitPattern: inode)])
        }
    }

    /// Adds an item created here (mkdir, create). A file not uploaded yet has `onStore` false.
    public func createItem(in parent: Inode, name: String, kind: Item.Kind, size: Int64 = 0, modified: Timestamp,
                           etag: ETag? = nil, mode: UInt32?, owner: UInt32? = nil, group: UInt32? = nil,
                           state: ItemState, onStore: Bool, listedAt: Double? = nil, symlinkTarget: String? = nil) throws(FSError) -> Item {
        let inode: Int64 = try write { db in
            guard let parentRow = try Row.fetchOne(db, sql: "SELECT path FROM item WHERE inode = ?", arguments: [Int64(bitPattern: parent)]) else {
                throw FSError.notFound
            }
            try db.execute(sql: """
                INSERT INTO item (id, parent, name, path, kind, size, modifiedNs, etag, mode, owner, "group", state, onStore, listedAt,
                                  changedNs, accessedNs, symlinkTarget, kindKnownFor)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [UUID().uuidString, Int64(bitPattern: parent), name, Catalog.join(parentRow["path"], name),
                                 kind.rawValue, size, modified.nanoseconds, etag?.value, mode.map { Int64($0) }, owner.map { Int64($0) },
                                 group.map { Int64($0) }, state.rawValue, onStore, listedAt, modified.nanoseconds, modified.nanoseconds, symlinkTarget,
                                 etag?.value])
            return db.lastInsertedRowID
        }
        guard let item = try item(Inode(bitPattern: inode)) else { throw .io("catalog: created item vanished") }
        return item
    }

    /// Removes an item and its subtree.
    public func removeItem(_ inode: Inode) throws(FSError) {
        try write { db in try db.execute(sql: "DELETE FROM item WHERE inode = ?", arguments: [Int64(bitPattern: inode)]) }
    }

    /// Moves an item (and, for a directory, every path below it) to `name` in `parent`,
    /// replacing whatever was there. Inode and identifier stay: a rename keeps identity.
    public func moveItem(_ inode: Inode, to parent: Inode, name: String, changed: Timestamp) throws(FSError) {
        try write { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT path FROM item WHERE inode = ?", arguments: [Int64(bitPattern: inode)]),
                  let parentRow = try Row.fetchOne(db, sql: "SELECT path FROM item WHERE inode = ?", arguments: [Int64(bitPattern: parent)])
            else { throw FSError.notFound }
            let oldPath: String = row["path"]
            let newPath = Catalog.join(parentRow["path"], name)
            try db.execute(sql: "DELETE FROM item WHERE parent = ? AND name = ? AND inode != ?",
                           arguments: [Int64(bitPattern: parent), name, Int64(bitPattern: inode)])
            try db.execute(sql: "UPDATE item SET parent = ?, name = ?, path = ?, changedNs = ? WHERE inode = ?",
                           arguments: [Int64(bitPattern: parent), name, newPath, changed.nanoseconds, Int64(bitPattern: inode)])
            // SQLite's substr counts characters (code points), hence unicodeScalars below.
            try db.execute(sql: """
                UPDATE item SET path = ? || substr(path, ?) WHERE substr(path, 1, ?) = ?
                """, arguments: [newPath, oldPath.unicodeScalars.count + 1, oldPath.unicodeScalars.count + 1, oldPath + "/"])
        }
    }

    /// Records the local copy's size and times after a change (before close/fsync returns).
    public func recordLocalChange(of inode: Inode, size: Int64, modified: Timestamp) throws(FSError) {
        try write { db in
            try db.execute(sql: """
                UPDATE item SET size = ?, modifiedNs = ?, changedNs = ?, state = 'modified' WHERE inode = ?
                """, arguments: [size, modified.nanoseconds, modified.nanoseconds, Int64(bitPattern: inode)])
        }
    }

    /// The store confirmed an upload: the item now matches `entry`'s version.
    public func recordUpload(of inode: Inode, etag: ETag?, state: ItemState) throws(FSError) {
        try write { db in
            try db.execute(sql: """
                UPDATE item SET etag = ?, kindKnownFor = ?, onStore = 1, state = ?, uploadError = NULL WHERE inode = ?
                """, arguments: [etag?.value, etag?.value, state.rawValue, Int64(bitPattern: inode)])
        }
    }

    /// The store's version of an item changed without a content change (attributes pushed).
    public func recordVersion(of inode: Inode, etag: ETag?) throws(FSError) {
        try write { db in
            // Attributes do not change an item's kind: a kind known for the old version stays known.
            try db.execute(sql: """
                UPDATE item SET kindKnownFor = CASE WHEN kindKnownFor = etag THEN COALESCE(?, etag) ELSE kindKnownFor END,
                    etag = COALESCE(?, etag) WHERE inode = ?
                """, arguments: [etag?.value, etag?.value, Int64(bitPattern: inode)])
        }
    }

    public func recordUploadError(of inode: Inode, _ message: String?) throws(FSError) {
        try write { db in
            try db.execute(sql: "UPDATE item SET uploadError = ? WHERE inode = ?", arguments: [message, Int64(bitPattern: inode)])
        }
    }

    /// After a conflict: the item shows the store's version again, and names the kept copy.
    public func recordConflict(of inode: Inode, storeVersion entry: RemoteEntry?, conflictCopy: String) throws(FSError) {
        try write { db in
            if let entry {
                try db.execute(sql: """
                    UPDATE item SET size = ?, modifiedNs = ?, etag = ?, onStore = 1, state = 'placeholder', uploadError = NULL, conflictCopy = ?
                    WHERE inode = ?
                    """, arguments: [entry.size, Timestamp(seconds: entry.modified).nanoseconds, entry.etag?.value, conflictCopy, Int64(bitPattern: inode)])
            } else {
                try db.execute(sql: """
                    UPDATE item SET state = 'placeholder', uploadError = NULL, conflictCopy = ?, onStore = 0 WHERE inode = ?
                    """, arguments: [conflictCopy, Int64(bitPattern: inode)])
            }
        }
    }

    /// A conflict met while the file is still open: name the kept copy, but keep the version the
    /// edit started from, so anything the open copy uploads later conflicts again (and is kept
    /// as another copy) instead of overwriting the store's version.
    public func recordConflictWhileOpen(of inode: Inode, conflictCopy: String) throws(FSError) {
        try write { db in
            try db.execute(sql: "UPDATE item SET state = 'local', uploadError = NULL, conflictCopy = ? WHERE inode = ?",
                           arguments: [conflictCopy, Int64(bitPattern: inode)])
        }
    }

    /// chmod/chown/utimensat results; nil leaves a value as it is. `changed` is the new ctime.
    public func setAttributes(of inode: Inode, mode: UInt32? = nil, owner: UInt32? = nil, group: UInt32? = nil,
                              modified: Timestamp? = nil, accessed: Timestamp? = nil, changed: Timestamp) throws(FSError) {
        try write { db in
            // An access time never set follows the modification time; pin it before that moves
            // (utimensat with UTIME_OMIT for atime must leave atime as it was).
            try db.execute(sql: """
                UPDATE item SET mode = COALESCE(?, mode), owner = COALESCE(?, owner), "group" = COALESCE(?, "group"),
                    accessedNs = COALESCE(?, accessedNs, modifiedNs), modifiedNs = COALESCE(?, modifiedNs), changedNs = ? WHERE inode = ?
                """, arguments: [mode.map { Int64($0) }, owner.map { Int64($0) }, group.map { Int64($0) },
                                 accessed?.nanoseconds, modified?.nanoseconds, changed.nanoseconds, Int64(bitPattern: inode)])
        }
    }

    /// Sets a directory's listing time (a directory made here is complete: it is empty).
    public func markListed(_ inode: Inode, at time: Double) throws(FSError) {
        try write { db in
            try db.execute(sql: "UPDATE item SET listedAt = ? WHERE inode = ?", arguments: [time, Int64(bitPattern: inode)])
        }
    }

    public func setState(of inode: Inode, to state: ItemState) throws(FSError) {
        try write { db in
            try db.execute(sql: "UPDATE item SET state = ? WHERE inode = ?", arguments: [state.rawValue, Int64(bitPattern: inode)])
        }
    }

    /// After a restart no local copy is open: every file is a placeholder again
    /// (clean copies are evicted by the caller; their content is on the store).
    public func resetTransientStates() throws(FSError) {
        try write { db in
            try db.execute(sql: "UPDATE item SET state = 'placeholder' WHERE state IN ('downloading', 'local')")
            // An upload cut short by the crash is simply pending again.
            try db.execute(sql: "UPDATE item SET state = 'modified' WHERE state = 'uploading'")
        }
    }

    // MARK: Plumbing

    private func read<T>(_ body: (Database) throws -> T) throws(FSError) -> T {
        do { return try db.read(body) } catch { throw .io("catalog: \(error)") }
    }

    private func write<T>(_ body: (Database) throws -> T) throws(FSError) -> T {
        do { return try db.write(body) } catch { throw .io("catalog: \(error)") }
    }

    private static func hasLocalChanges(_ row: Row) -> Bool {
        let state: String = row["state"]
        return state == ItemState.modified.rawValue || state == ItemState.uploading.rawValue
    }

    /// Whether `row`, or anything below it, holds unsynced changes.
    private static func holdsLocalChanges(_ db: Database, _ row: Row) throws -> Bool {
        if hasLocalChanges(row) { return true }
        guard (row["kind"] as Int) == Item.Kind.directory.rawValue else { return false }
        let path: String = row["path"]
        return try Bool.fetchOne(db, sql: """
            SELECT EXISTS(SELECT 1 FROM item WHERE state IN ('modified', 'uploading') AND substr(path, 1, ?) = ?)
            """, arguments: [path.unicodeScalars.count + 1, path + "/"]) ?? false
    }

    private static func join(_ dir: String, _ name: String) -> String {
        dir == "/" ? "/" + name : dir + "/" + name
    }

    private static func kind(of entry: RemoteEntry) -> Item.Kind {
        switch entry.kind {
        case .file: return .file
        case .directory: return .directory
        case .symlink: return .symlink
        }
    }

    private static func target(of entry: RemoteEntry) -> String? {
        if case .symlink(let target) = entry.kind { return target }
        return nil
    }

    private static func item(from row: Row) -> Item {
        let pathString: String = row["path"]
        let components = pathString.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        let parent: Int64? = row["parent"]
        let mode: Int64? = row["mode"]
        let etag: String? = row["etag"]
        return Item(
            inode: Inode(bitPattern: row["inode"]),
            id: row["id"],
            parent: parent.map { Inode(bitPattern: $0) },
            name: row["name"],
            path: StorePath(validated: components),
            kind: Item.Kind(rawValue: row["kind"]) ?? .file,
            size: row["size"],
            modified: Timestamp(nanoseconds: row["modifiedNs"]),
            etag: etag.map(ETag.init),
            symlinkTarget: row["symlinkTarget"],
            mode: mode.map { UInt32(truncatingIfNeeded: $0) },
            state: ItemState(rawValue: row["state"]) ?? .placeholder,
            listedAt: row["listedAt"],
            onStore: row["onStore"],
            owner: (row["owner"] as Int64?).map { UInt32(truncatingIfNeeded: $0) },
            group: (row["group"] as Int64?).map { UInt32(truncatingIfNeeded: $0) },
            accessed: (row["accessedNs"] as Int64?).map(Timestamp.init(nanoseconds:)),
            changed: (row["changedNs"] as Int64?).map(Timestamp.init(nanoseconds:)),
            uploadError: row["uploadError"],
            conflictCopy: row["conflictCopy"]
        )
    }
}
