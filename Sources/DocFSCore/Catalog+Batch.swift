import GRDB

extension Catalog {
    /// One query for a readdirplus reply's worth of children.
    public func items(_ inodes: [Inode]) throws(FSError) -> [Inode: Item] {
        guard !inodes.isEmpty else { return [:] }
        return try quickRead { db in
            // Cached statements, padded to a power of two with the last inode (a repeat changes nothing in
            // `IN`), so a few statements serve every batch size.
            let values = inodes.map { Int64(bitPattern: $0) }
            let padded = values + Array(repeating: values[values.count - 1], count: values.count.nextPowerOfTwo - values.count)
            let marks = Array(repeating: "?", count: padded.count).joined(separator: ",")
            let rows = try Row.fetchCursor(db.cachedStatement(sql: "SELECT \(Catalog.itemColumns) FROM item WHERE inode IN (\(marks))"),
                                           arguments: StatementArguments(padded))
            return try Dictionary(uniqueKeysWithValues: rows.map(Catalog.item(from:)).map { ($0.inode, $0) })
        }
    }
}

private extension Int {
    /// 1 for 0 or less.
    var nextPowerOfTwo: Int {
        self <= 1 ? 1 : 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount)
    }
}
