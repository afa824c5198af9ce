import GRDB

extension Catalog {
    /// The items of `inodes` that exist, read in one query: readdirplus hands out a reply's
    /// worth of children at a time, and one query per child was most of a 100,000-entry `ls -l`
    /// beyond what the row cache holds.
    public func items(_ inodes: [Inode]) throws(FSError) -> [Inode: Item] {
        guard !inodes.isEmpty else { return [:] }
        return try quickRead { db in
            // A cached statement: compiling one (GRDB authorizes each of its columns) cost about
            // as much as running it. The list is padded to a power of two with its last inode
            // (a repeat changes nothing in `IN`), so a few statements serve every batch size
            // the kernel's readdir buffers make, and the cache does not grow with them.
            let values = inodes.map { Int64(bitPattern: $0) }
            let padded = values + Array(repeating: values[values.count - 1], count: values.count.nextPowerOfTwo - values.count)
            let marks = Array(repeating: "?", count: padded.count).joined(separator: ",")
            let rows = try Row.fetchCursor(db.cachedStatement(sql: "SELECT \(Catalog.itemColumns) FROM item WHERE inode IN (\(marks))"),
                                           arguments: StatementArguments(padded))
            var found: [Inode: Item] = [:]
            while let row = try rows.next() {
                let item = Catalog.item(from: row)
                found[item.inode] = item
            }
            return found
        }
    }
}

private extension Int {
    /// The least power of two at or above `self` (1 for 0 or less).
    var nextPowerOfTwo: Int {
        self <= 1 ? 1 : 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount)
    }
}
