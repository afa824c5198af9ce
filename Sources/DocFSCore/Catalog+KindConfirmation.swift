import DocFSStore
import GRDB

/// Small placeholders whose kind is known for no version or an older one (see `SymlinkProbe`).
extension Catalog {
    public struct KindToConfirm: Sendable {
        public var inode: Inode
        public var parent: Inode
        public var path: StorePath
    }

    private static let toConfirm = """
        kind != \(Item.Kind.directory.rawValue) AND state = '\(ItemState.placeholder.rawValue)' AND onStore = 1
        AND etag IS NOT NULL AND size <= ? AND (kindKnownFor IS NULL OR kindKnownFor != etag)
        """

    /// Nil for most items, decided without a query.
    public func kindToConfirm(_ item: Item, maximumSize: Int64) throws(FSError) -> KindToConfirm? {
        // Without a query: lookups and getattr of small objects run this from the cache.
        guard item.kind != .directory, item.state == .placeholder, item.onStore, item.etag != nil,
              item.size <= maximumSize, !item.kindConfirmed, let parent = item.parent else { return nil }
        return KindToConfirm(inode: item.inode, parent: parent, path: item.path)
    }

    /// In name order.
    public func kindsToConfirm(in directory: Inode, maximumSize: Int64) throws(FSError) -> [KindToConfirm] {
        try read { db in
            let rows = try Row.fetchCursor(db.cachedStatement(sql: """
                SELECT inode, path FROM item WHERE parent = ? AND \(Catalog.toConfirm) ORDER BY name
                """), arguments: [Int64(bitPattern: directory), maximumSize])
            var found: [KindToConfirm] = []
            while let row = try rows.next() {
                let path: String = row[1]
                let components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
                found.append(KindToConfirm(inode: Inode(bitPattern: row[0]), parent: directory,
                                           path: StorePath(validated: components)))
            }
            return found
        }
    }

    /// readdir gives the kernel no attributes for them, so a `stat` confirms first.
    public func inodesToConfirm(in directory: Inode, maximumSize: Int64) throws(FSError) -> Set<Inode> {
        try quickRead { db in
            let inodes = try Int64.fetchCursor(db.cachedStatement(sql: "SELECT inode FROM item WHERE parent = ? AND \(Catalog.toConfirm)"),
                                               arguments: [Int64(bitPattern: directory), maximumSize])
            var found = Set<Inode>()
            while let inode = try inodes.next() { found.insert(Inode(bitPattern: inode)) }
            return found
        }
    }
}
