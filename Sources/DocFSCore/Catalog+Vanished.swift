import GRDB

/// Clean local copies of items the store no longer has.
///
/// A listing never drops the row of an item with a local copy (`Catalog+Listing.swift`): it
/// marks it not on the store, and the row goes with the copy. A copy kept past its release (a
/// pinned file, or one the retention policy keeps idle) would then show a file deleted on the
/// store, or hide the folder that took its name, until the mount ended. These are the copies
/// the provider drops after a listing (`Provider.dropCopiesGoneFromStore`).
extension Catalog {
    /// The files of `directory` whose clean copy is of an item the store no longer has (one
    /// indexed read; usually none).
    public func cleanCopiesGoneFromStore(in directory: Inode) throws(FSError) -> [Inode] {
        try read { db in
            try Int64.fetchAll(db.cachedStatement(sql: """
                SELECT inode FROM item WHERE parent = ? AND onStore = 0 AND state = 'local' AND uncommitted = 0 AND kind != ?
                """), arguments: [Int64(bitPattern: directory), Item.Kind.directory.rawValue]).map { Inode(bitPattern: $0) }
        }
    }
}
