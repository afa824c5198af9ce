import GRDB

/// A listing keeps the row of an item with a local copy; a copy kept past its release would
/// then show a deleted file or hide what took its name. The provider drops these copies.
extension Catalog {
    /// One indexed read; usually none.
    public func cleanCopiesGoneFromStore(in directory: Inode) throws(FSError) -> [Inode] {
        try read { db in
            try Int64.fetchAll(db.cachedStatement(sql: """
                SELECT inode FROM item WHERE parent = ? AND onStore = 0 AND state = 'local' AND uncommitted = 0 AND kind != ?
                """), arguments: [Int64(bitPattern: directory), Item.Kind.directory.rawValue]).map { Inode(bitPattern: $0) }
        }
    }
}
