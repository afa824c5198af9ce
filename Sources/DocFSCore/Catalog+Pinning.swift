import GRDB

/// What the catalog keeps about pinning ("keep downloaded", `docfs pin`) and what it tells
/// about a folder's children at a glance (`user.docfs.state` of a directory).
///
/// The `pinned` column is read on its own rather than decoded with every item: only opens,
/// pins and evictions ask for it, and lookups stay as cheap as they were.
extension Catalog {
    /// Whether `inode` is pinned.
    public func isPinned(_ inode: Inode) throws(FSError) -> Bool {
        try read { db in
            try Bool.fetchOne(db.cachedStatement(sql: "SELECT pinned FROM item WHERE inode = ?"),
                              arguments: [Int64(bitPattern: inode)]) ?? false
        }
    }

    /// Pins or unpins `item`, and for a folder everything below it (what is added to a pinned
    /// folder later is pinned by the `item_inherits_pin` trigger).
    public func setPinned(_ item: Item, _ pinned: Bool) throws(FSError) {
        let path = item.path.description
        try write { db in
            try db.execute(sql: "UPDATE item SET pinned = ? WHERE inode = ?", arguments: [pinned, Int64(bitPattern: item.inode)])
            guard item.isDirectory else { return }
            let prefix = path == "/" ? "/" : path + "/"
            let end = path == "/" ? "0" : path + "0"
            try db.execute(sql: "UPDATE item SET pinned = ? WHERE path > ? AND path < ?", arguments: [pinned, prefix, end])
        }
    }

    /// Files at or below `item` that have a local copy (or hold changes).
    public func filesWithCopies(under item: Item) throws(FSError) -> [Inode] {
        let path = item.path.description
        let prefix = path == "/" ? "/" : path + "/"
        let end = path == "/" ? "0" : path + "0"
        return try read { db in
            try Int64.fetchAll(db, sql: """
                SELECT inode FROM item WHERE (inode = ? OR (path > ? AND path < ?)) AND kind = ?
                    AND (state IN ('downloading', 'local', 'modified', 'uploading') OR uncommitted != 0)
                """, arguments: [Int64(bitPattern: item.inode), prefix, end, Item.Kind.file.rawValue])
        }.map { Inode(bitPattern: $0) }
    }

    /// The pinned items whose copy is complete and clean: the copies a restart keeps.
    public func pinnedLocalItems() throws(FSError) -> [(inode: Inode, id: String)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT inode, id FROM item WHERE pinned = 1 AND state = 'local' AND uncommitted = 0 AND partial = 0")
                .map { (Inode(bitPattern: $0[0]), $0[1]) }
        }
    }

    /// Identifiers of pinned files that have a local copy or are getting one: which files of
    /// the cache directory are pinned (`docfs status` splits the cache's size by them).
    public func pinnedCopyIDs() throws(FSError) -> Set<String> {
        try read { db in
            Set(try String.fetchAll(db, sql: "SELECT id FROM item WHERE pinned = 1 AND state != 'placeholder' AND kind = ?",
                                    arguments: [Item.Kind.file.rawValue]))
        }
    }

    /// The pinned children of `directory` that may need fetching after a listing of it: files
    /// with no copy and folders never listed (`PinnedRefresher` decides which it fetches).
    public func pinnedToRefresh(in directory: Inode) throws(FSError) -> (files: [Inode], folders: [Inode]) {
        try read { db in
            let files = try Int64.fetchAll(db, sql: """
                SELECT inode FROM item WHERE parent = ? AND pinned = 1 AND kind = ? AND state = 'placeholder'
                ORDER BY name
                """, arguments: [Int64(bitPattern: directory), Item.Kind.file.rawValue])
            let folders = try Int64.fetchAll(db, sql: """
                SELECT inode FROM item WHERE parent = ? AND pinned = 1 AND kind = ? AND listedAt IS NULL ORDER BY name
                """, arguments: [Int64(bitPattern: directory), Item.Kind.directory.rawValue])
            return (files.map { Inode(bitPattern: $0) }, folders.map { Inode(bitPattern: $0) })
        }
    }

    /// How many children of `directory` are in each state, in one query: what a folder's
    /// `user.docfs.state` shows (`local=3 modified=1`). Pinned complete copies count as
    /// `pinned`, not `local`; an upload that keeps failing counts as `error`; subfolders are
    /// not counted.
    public func childStateCounts(of directory: Inode) throws(FSError) -> [(state: String, count: Int)] {
        try stateCounts(parent: directory)
    }

    /// Counts per state (as `childStateCounts`) of the children of `parent`, or of every file
    /// and special file in the catalog when nil (`docfs status`).
    public func stateCounts(parent: Inode? = nil) throws(FSError) -> [(state: String, count: Int)] {
        let rows = try read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT CASE WHEN uploadError IS NOT NULL THEN 'error'
                            WHEN state = 'local' AND pinned = 1 THEN 'pinned'
                            ELSE state END, COUNT(*)
                FROM item WHERE (? IS NULL OR parent = ?) AND kind != ? GROUP BY 1
                """), arguments: [parent.map { Int64(bitPattern: $0) }, parent.map { Int64(bitPattern: $0) }, Item.Kind.directory.rawValue])
        }
        var counts: [String: Int] = [:]
        for row in rows { counts[row[0]] = row[1] }
        let order = ["placeholder", "downloading", "local", "pinned", "modified", "uploading", "error"]
        return order.compactMap { state in counts[state].map { (state, $0) } }
            + counts.filter { !order.contains($0.key) }.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// Items whose latest upload failed, with why (`docfs status`).
    public func uploadErrors(limit: Int = 20) throws(FSError) -> [(path: String, error: String)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT path, uploadError FROM item WHERE uploadError IS NOT NULL ORDER BY path LIMIT ?",
                             arguments: [limit]).map { ($0[0], $0[1]) }
        }
    }

    /// Paths of files being downloaded or uploaded now (`docfs status`).
    public func transferringPaths(limit: Int = 50) throws(FSError) -> [(path: String, state: String)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT path, state FROM item WHERE state IN ('downloading', 'uploading') ORDER BY path LIMIT ?",
                             arguments: [limit]).map { ($0[0], $0[1]) }
        }
    }
}
