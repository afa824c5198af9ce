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
    public func applyListing(of directory: Inode, entries: [RemoteEntry], listedAt: Double) throws(FSError) {
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
                if let row = existing[name], (row["kind"] as Int) == kind.rawValue {
                    try db.execute(sql: """
                        UPDATE item SET size = ?, modified = ?, etag = ?, symlinkTarget = ?, mode = COALESCE(?, mode)
                        WHERE inode = ?
                        """, arguments: [entry.size, entry.modified, entry.etag?.value, Catalog.target(of: entry),
                                         entry.mode.map { Int64($0) }, row["inode"] as Int64])
                } else {
                    if let row = existing[name] {
                        try db.execute(sql: "DELETE FROM item WHERE inode = ?", arguments: [row["inode"] as Int64])
                    }
                    try db.execute(sql: """
                        INSERT INTO item (id, parent, name, path, kind, size, modified, etag, symlinkTarget, mode, state)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """, arguments: [UUID().uuidString, Int64(bitPattern: directory), name,
                                         Catalog.join(dirPath, name), kind.rawValue, entry.size, entry.modified,
                                         entry.etag?.value, Catalog.target(of: entry), entry.mode.map { Int64($0) },
                                         kind == .directory ? ItemState.directory.rawValue : ItemState.placeholder.rawValue])
                }
            }
            for (name, row) in existing where !seen.contains(name) {
                try db.execute(sql: "DELETE FROM item WHERE inode = ?", arguments: [row["inode"] as Int64])
            }
            try db.execute(sql: "UPDATE item SET listedAt = ? WHERE inode = ?", arguments: [listedAt, Int64(bitPattern: directory)])
        }
    }

    /// Records what the store said about an item's content (after a fetch: the ETag may be new).
    public func updateMetadata(of inode: Inode, from entry: RemoteEntry) throws(FSError) {
        try write { db in
            try db.execute(sql: "UPDATE item SET size = ?, modified = ?, etag = COALESCE(?, etag) WHERE inode = ?",
                           arguments: [entry.size, entry.modified, entry.etag?.value, Int64(bitPattern: inode)])
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
        }
    }

    // MARK: Plumbing

    private func read<T>(_ body: (Database) throws -> T) throws(FSError) -> T {
        do { return try db.read(body) } catch { throw .io("catalog: \(error)") }
    }

    private func write<T>(_ body: (Database) throws -> T) throws(FSError) -> T {
        do { return try db.write(body) } catch { throw .io("catalog: \(error)") }
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
            modified: row["modified"],
            etag: etag.map(ETag.init),
            symlinkTarget: row["symlinkTarget"],
            mode: mode.map { UInt32(truncatingIfNeeded: $0) },
            state: ItemState(rawValue: row["state"]) ?? .placeholder,
            listedAt: row["listedAt"]
        )
    }
}
