import GRDB

extension Catalog {
    /// From the item cache: `getxattr` of a file's state asks this for every file a file manager shows.
    public func isPinned(_ inode: Inode) throws(FSError) -> Bool {
        try item(inode)?.pinned ?? false
    }

    /// Also everything below a folder.
    public func setPinned(_ item: Item, _ pinned: Bool) throws(FSError) {
        let path = item.path.description
        try write { db in
            try db.execute(sql: "UPDATE item SET pinned = ? WHERE inode = ?", arguments: [pinned, Int64(bitPattern: item.inode)])
            guard item.isDirectory else { return }
            let (prefix, end) = path == "/" ? ("/", "0") : (path + "/", path + "0")
            try db.execute(sql: "UPDATE item SET pinned = ? WHERE path > ? AND path < ?", arguments: [pinned, prefix, end])
        }
    }

    public func filesWithCopies(under item: Item) throws(FSError) -> [Inode] {
        let path = item.path.description
        let (prefix, end) = path == "/" ? ("/", "0") : (path + "/", path + "0")
        return try read { db in
            try Int64.fetchAll(db, sql: """
                SELECT inode FROM item WHERE (inode = ? OR (path > ? AND path < ?)) AND kind = ?
                    AND (state IN ('downloading', 'local', 'modified', 'uploading') OR uncommitted != 0)
                """, arguments: [Int64(bitPattern: item.inode), prefix, end, Item.Kind.file.rawValue])
        }.map { Inode(bitPattern: $0) }
    }

    /// The copies a restart keeps.
    public func pinnedLocalItems() throws(FSError) -> [(inode: Inode, id: String)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT inode, id FROM item WHERE pinned = 1 AND state = 'local' AND uncommitted = 0 AND partial = 0")
                .map { (Inode(bitPattern: $0[0]), $0[1]) }
        }
    }

    public func pinnedCopyIDs() throws(FSError) -> Set<String> {
        try read { db in
            Set(try String.fetchAll(db, sql: "SELECT id FROM item WHERE pinned = 1 AND state != 'placeholder' AND kind = ?",
                                    arguments: [Item.Kind.file.rawValue]))
        }
    }

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

    /// Pinned complete copies count as `pinned`, failing uploads as `error`; no folders. Nil: all items.
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

    public func uploadErrors(limit: Int = 20) throws(FSError) -> [(path: String, error: String)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT path, uploadError FROM item WHERE uploadError IS NOT NULL ORDER BY path LIMIT ?",
                             arguments: [limit]).map { ($0[0], $0[1]) }
        }
    }

    public func transferringPaths(limit: Int = 50) throws(FSError) -> [(path: String, state: String)] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT path, state FROM item WHERE state IN ('downloading', 'uploading') ORDER BY path LIMIT ?",
                             arguments: [limit]).map { ($0[0], $0[1]) }
        }
    }
}
