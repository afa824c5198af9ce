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

    /// Nil for most items, decided without a query: lookups and getattr of small objects run this
    /// from the cache.
    public func kindToConfirm(_ item: Item, maximumSize: Int64) throws(FSError) -> KindToConfirm? {
        guard item.kind != .directory, item.state == .placeholder, item.onStore, item.etag != nil,
              item.size <= maximumSize, !item.kindConfirmed, let parent = item.parent else { return nil }
        return KindToConfirm(inode: item.inode, parent: parent, path: item.path)
    }

    /// In name order.
    public func kindsToConfirm(in directory: Inode, maximumSize: Int64) throws(FSError) -> [KindToConfirm] {
        try read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item WHERE parent = ? AND \(Catalog.toConfirm) ORDER BY name
                """), arguments: [Int64(bitPattern: directory), maximumSize])
        }.map(Catalog.item(from:)).map { KindToConfirm(inode: $0.inode, parent: directory, path: $0.path) }
    }
}
