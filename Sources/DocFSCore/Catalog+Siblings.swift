import DocFSStore
import GRDB

extension Catalog {
    /// The files of `parent` after `name` in name order (the order of readdir and of a sorted
    /// glob), the first `limit` of them; from the first file with a nil `name`. For reading
    /// ahead (`Prefetcher`).
    func files(in parent: Inode, after name: String?, limit: Int) throws(FSError) -> [Item] {
        try read { db in
            try Row.fetchAll(db.cachedStatement(sql: """
                SELECT \(Catalog.itemColumns) FROM item WHERE parent = ? AND kind = ? AND name > ? ORDER BY name LIMIT ?
                """), arguments: [Int64(bitPattern: parent), Item.Kind.file.rawValue, name ?? "", limit])
        }.map(Catalog.item(from:))
    }
}
