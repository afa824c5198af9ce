import DocFSStore
import Foundation
import GRDB

/// The catalog's side of folders made ahead (`Uploader+FoldersAhead.swift`): a directory row with
/// `onStore = 0` is a folder whose MKCOL has not been answered. Nothing else writes such a row
/// (listings insert folders with `onStore = 1`, and never mark one gone: `Catalog+Listing`).
extension Catalog {
    /// The store has the folder now; `listAgain`: it was there already (another client's), and
    /// what it holds shows at the next look. Learned now (`versionAt`): a listing of its parent
    /// asked before the MKCOL, and applied after, does not take its absence for a removal.
    func recordFolderMade(_ inode: Inode, listAgain: Bool) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: """
                UPDATE item SET onStore = 1, uploadError = NULL, uploadTrouble = NULL, versionAt = ?,
                    listedAt = CASE WHEN ? THEN NULL ELSE listedAt END WHERE inode = ?
                """, arguments: [Date().timeIntervalSince1970, listAgain, Int64(bitPattern: inode)])
        }
    }

    /// The folders made ahead that the store never confirmed (a kill cut their MKCOL).
    func foldersNotOnStore() throws(FSError) -> [Item] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT \(Catalog.itemColumns) FROM item WHERE kind = ? AND onStore = 0",
                             arguments: [Item.Kind.directory.rawValue])
        }.map(Catalog.item(from:))
    }
}
