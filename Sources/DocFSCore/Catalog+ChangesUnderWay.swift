import DocFSStore
import GRDB

/// A removal or rename the store made but the catalog not yet: a kill in between would resend
/// or misplace changes, so it is noted first; the completing catalog change removes the note in
/// its transaction, and a note found at start is settled by asking the store.
public struct ChangeUnderWay: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case removal
        case move
    }

    public var inode: Inode
    public var kind: Kind
    /// Whose absence shows the change made: the item's path, or the one it replaces.
    public var gonePath: StorePath
    public var toParent: Inode?
    public var toName: String?
    /// A removal found made after a restart drops no commit made since.
    public var committed: UInt64 = 0

    public static func removal(of item: Item) -> ChangeUnderWay {
        ChangeUnderWay(inode: item.inode, kind: .removal, gonePath: item.path)
    }

    public static func move(of item: Item, to parent: Inode, name: String, gone: StorePath) -> ChangeUnderWay {
        ChangeUnderWay(inode: item.inode, kind: .move, gonePath: gone, toParent: parent, toName: name)
    }
}

extension Catalog {
    /// False, noting nothing, if a killed daemon's note is there: it stays until settled or completed.
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

    /// A failed request removes only its own note.
    public func noting(_ change: ChangeUnderWay?, whileTheStoreDoes request: () async throws(StoreError) -> Void) async throws(FSError) {
        // Off the cooperative pool: SQLite's writer may be busy.
        var noted = false
        if let change { noted = try await Blocking.run { () throws(FSError) in try self.recordChangeUnderWay(change) } }
        do throws(StoreError) {
            try await request()
        } catch {
            if noted, let change {
                // A note left behind is settled at the next start, which asks the store.
                try? await Blocking.run { () throws(FSError) in try self.forgetChangeUnderWay(of: change.inode) }
            }
            throw FSError(error)
        }
    }

    public func forgetChangeUnderWay(of inode: Inode) throws(FSError) {
        try write(invalidating: .nothing) { db in
            try db.cachedExecute(sql: "DELETE FROM changeUnderWay WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
        }
    }

    public func changesUnderWay() throws(FSError) -> [ChangeUnderWay] {
        try read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM changeUnderWay ORDER BY inode").compactMap(Self.changeUnderWay)
        }
    }

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

    /// The item is on the store before the catalog moves it.
    public func recordOnStore(_ inode: Inode) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: "UPDATE item SET onStore = 1 WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
        }
    }

    /// A clean item needs no note: its next listing shows the truth.
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
