import GRDB

extension Catalog {
    /// The items of `inodes` that exist, read in one query: readdirplus hands out a reply's
    /// worth of children at a time, and one query per child was most of a 100,000-entry `ls -l`
    /// beyond what the row cache holds.
    public func items(_ inodes: [Inode]) throws(FSError) -> [Inode: Item] {
        guard !inodes.isEmpty else { return [:] }
        return try quickRead { db in
            // Cached per batch size: a reply holds at most a few dozen children, so there are
            // few sizes, and compiling the statement (GRDB authorizes each of its columns) cost
            // about as much as running it.
            let marks = Array(repeating: "?", count: inodes.count).joined(separator: ",")
            let rows = try Row.fetchCursor(db.cachedStatement(sql: "SELECT \(Catalog.itemColumns) FROM item WHERE inode IN (\(marks))"),
                                           arguments: StatementArguments(inodes.map { Int64(bitPattern: $0) }))
            var found: [Inode: Item] = [:]
            while let row = try rows.next() {
                let item = Catalog.item(from: row)
                found[item.inode] = item
            }
            return found
        }
    }
}
