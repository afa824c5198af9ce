import DocFSStore
import GRDB

/// A removal or a rename sent to the store whose catalog change has not followed yet.
///
/// `DocFileSystem.remove` and `rename` change the store first and the catalog after, so that a
/// store that refuses leaves the catalog as it was. A daemon killed between the two (the store
/// made the change; its answer never arrived) would wake up with the catalog of before: a
/// removed file with unsent changes is sent again, and a renamed one goes up under its old
/// name next to its stale new one. So when the catalog holds anything the store does not have
/// under what changes, or a file moves on a store that renames by copying (S3: a kill between
/// the copy and the deletion leaves both names, which a listing would show), the change is
/// noted first, in its own transaction; the catalog change that completes it removes the note
/// in the same transaction (`moveItem`, or the row's removal, which cascades). A note found at
/// the next start is settled by asking the store (`InterruptedChanges`).
public struct ChangeUnderWay: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case removal
        case move
    }

    public var inode: Inode
    public var kind: Kind
    /// The store path whose absence shows the store made the change: the item's own path, or,
    /// for a new file renamed over a stored one, the path of the one it replaces.
    public var gonePath: StorePath
    /// Where a move goes.
    public var toParent: Inode?
    public var toName: String?
    /// The item's last commit when the change was sent: a removal found made after a restart
    /// drops no commit made since (one the user made after the restart showed the file).
    public var committed: UInt64 = 0

    public static func removal(of item: Item) -> ChangeUnderWay {
        ChangeUnderWay(inode: item.inode, kind: .removal, gonePath: item.path)
    }

    public static func move(of item: Item, to parent: Inode, name: String, gone: StorePath) -> ChangeUnderWay {
        ChangeUnderWay(inode: item.inode, kind: .move, gonePath: gone, toParent: parent, toName: name)
    }
}

extension Catalog {
    /// Notes `change` before its request goes to the store (`committed` is read from the row).
    /// Returns false, noting nothing, when the item already has a note: one a killed daemon
    /// left, which the store has not answered about yet. That one stays until it is settled,
    /// or until this change completes (the catalog change removes it): a change that fails
    /// must not take it away with its own.
    @discardableResult
    public func recordChangeUnderWay(_ change: ChangeUnderWay) throws(FSError) -> Bool {
        try write(invalidating: .nothing) { db in
            try db.cachedExecute(sql: """
                INSERT OR IGNORE INTO changeUnderWay (inode, kind, gonePath, toParent, toName, committedSeq)
                SELECT inode, ?, ?, ?, ?, committedSeq FROM item WHERE inode = ?
                """, arguments: [change.kind.rawValue, change.gonePath.description, change.toParent.map { Int64(bitPattern: $0) },
                                 change.toName, Int64(bitPattern: change.inode)])
            return db.changesCount > 0
        }
    }

    /// Runs `request`, the store's half of `change` (nil: nothing worth noting), with the change
    /// noted until the caller's catalog change removes the note. A request that fails removes
    /// the note it made, never one a killed daemon left (see `recordChangeUnderWay`).
    public func noting(_ change: ChangeUnderWay?, whileTheStoreDoes request: () async throws(StoreError) -> Void) async throws(FSError) {
        let noted = try change.map { (change: ChangeUnderWay) throws(FSError) -> Bool in try recordChangeUnderWay(change) } ?? false
        do throws(StoreError) {
            try await request()
        } catch {
            if noted, let change { try? forgetChangeUnderWay(of: change.inode) }
            throw FSError(error)
        }
    }

    /// The store refused the change, or was found not to have made it: the note goes.
    public func forgetChangeUnderWay(of inode: Inode) throws(FSError) {
        try write(invalidating: .nothing) { db in
            try db.cachedExecute(sql: "DELETE FROM changeUnderWay WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
        }
    }

    /// The notes a killed daemon left (usually none).
    public func changesUnderWay() throws(FSError) -> [ChangeUnderWay] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM changeUnderWay ORDER BY inode").compactMap(Self.changeUnderWay)
        }
    }

    /// The note of `inode`, if it has one.
    public func changeUnderWay(of inode: Inode) throws(FSError) -> ChangeUnderWay? {
        try read { db in
            try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM changeUnderWay WHERE inode = ?"),
                             arguments: [Int64(bitPattern: inode)]).flatMap(Self.changeUnderWay)
        }
    }

    private static func changeUnderWay(_ row: Row) -> ChangeUnderWay? {
        guard let kind = ChangeUnderWay.Kind(rawValue: row["kind"]), let gone = try? StorePath(row["gonePath"] as String) else { return nil }
        return ChangeUnderWay(inode: Inode(bitPattern: row["inode"]), kind: kind, gonePath: gone,
                              toParent: (row["toParent"] as Int64?).map { Inode(bitPattern: $0) }, toName: row["toName"],
                              committed: UInt64(bitPattern: row["committedSeq"]))
    }

    /// A move cut short was made by the store: what it held under the item's name is under
    /// the new one, so the item is on the store (before the catalog moves it there).
    public func recordOnStore(_ inode: Inode) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: "UPDATE item SET onStore = 1 WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
        }
    }

    /// Whether `item`, or anything below it, holds what the store does not have: what makes
    /// its removal or rename worth noting (a clean item's next listing shows the store's truth).
    public func holdsUnsentChanges(_ item: Item) throws(FSError) -> Bool {
        if item.hasUnsyncedChanges || !item.onStore { return true }
        guard item.isDirectory else { return false }
        let path = item.path.description
        return try read { db in
            try Bool.fetchOne(db.cachedStatement(sql: """
                SELECT EXISTS (SELECT 1 FROM item WHERE path > ? AND path < ?
                               AND (state IN ('modified', 'uploading') OR uncommitted = 1 OR onStore = 0))
                """), arguments: [path + "/", path + "0"]) ?? false
        }
    }
}
