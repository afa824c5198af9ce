import DocFSStore
import GRDB

extension Catalog {
    /// In name order (readdir's and a sorted glob's), from the first with a nil `name`; for `Prefetcher`.
    func files(in parent: Inode, after name: String?, limit: Int) throws(FSError) -> [Item] {
        try read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item WHERE parent = ? AND kind = ? AND name > ? ORDER BY name LIMIT ?
                """), arguments: [Int64(bitPattern: parent), Item.Kind.file.rawValue, name ?? "", limit])
        }.map(Catalog.item(from:))
    }

    /// The folder after `name` in name order, where a reader walking folders goes next.
    func folder(in parent: Inode, after name: String) throws(FSError) -> Item? {
        try read { db in
            try Row.fetchOne(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item WHERE parent = ? AND kind = ? AND name > ? ORDER BY name LIMIT 1
                """), arguments: [Int64(bitPattern: parent), Item.Kind.directory.rawValue, name])
        }.map(Catalog.item(from:))
    }
}
