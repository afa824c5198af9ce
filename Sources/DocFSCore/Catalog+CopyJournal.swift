import DocFSStore
import Foundation
import GRDB

/// The copy journal, written after each `CopyLife` event and read back by a new mount.
extension Catalog {
    /// The row's metadata stays as the last listing left it. `partial`: nil leaves it.
    public func recordCopy(_ inode: Inode, _ life: CopyLife, partial: Bool? = nil) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try Catalog.persist(db, inode, life)
            if let partial {
                try db.cachedExecute(sql: "UPDATE item SET partial = ? WHERE inode = ?", arguments: [partial, Int64(bitPattern: inode)])
            }
        }
    }

    /// A copy on disk that no `LocalCopy` holds (kept pinned from an earlier mount, or changes
    /// waiting for the next upload) follows the store's version from `old` to `new`. Only the
    /// provider calls it, on its actor, where no `LocalCopy` of the item can begin meanwhile.
    func rebaseUnheldCopy(_ inode: Inode, from old: ETag, to new: ETag) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: "UPDATE item SET baseEtag = ? WHERE inode = ? AND baseEtag = ?",
                                 arguments: [new.value, Int64(bitPattern: inode), old.value])
        }
    }

    /// `notFound` if a listing dropped the row: a copy without a row could never be uploaded nor evicted.
    public func beginCopy(_ inode: Inode, _ life: CopyLife) throws(FSError) {
        let changed: Int = try write(invalidating: .item(inode)) { db in
            try Catalog.persist(db, inode, life)
            return db.changesCount
        }
        if changed == 0 { throw .notFound }
    }

    public func recordCommit(_ inode: Inode, _ life: CopyLife, size: Int64, modified: Timestamp) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try Catalog.persist(db, inode, life)
            try db.cachedExecute(sql: "UPDATE item SET size = ?, modifiedNs = ?, changedNs = ? WHERE inode = ?",
                           arguments: [size, modified.nanoseconds, modified.nanoseconds, Int64(bitPattern: inode)])
        }
    }

    /// The time stays the catalog's for the same version, unless the answer carries the item's own
    /// and nothing was learnt since `askedAt`. `partial`: a streamed copy.
    public func recordFetched(_ inode: Inode, _ life: CopyLife, entry: RemoteEntry, askedAt: Double? = nil,
                              partial: Bool = false) throws(FSError) {
        let takesOwnTime = entry.carriesOwnTime && askedAt != nil
        try write(invalidating: .item(inode)) { db in
            try Catalog.persist(db, inode, life)
            try db.cachedExecute(sql: """
                UPDATE item SET size = ?,
                    modifiedNs = CASE WHEN etag IS NOT NULL AND etag = ? AND NOT (? AND (versionAt IS NULL OR versionAt < ?))
                                      THEN modifiedNs ELSE ? END,
                    etag = COALESCE(?, etag), mode = COALESCE(?, mode), versionAt = ?, partial = ? WHERE inode = ?
                """, arguments: [entry.size, entry.etag?.value, takesOwnTime, askedAt ?? 0, Timestamp(seconds: entry.modified).nanoseconds,
                                 entry.etag?.value, entry.mode.map { Int64($0) }, Date().timeIntervalSince1970, partial,
                                 Int64(bitPattern: inode)])
        }
    }

    public func recordComplete(_ inode: Inode) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: "UPDATE item SET partial = 0 WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
        }
    }

    public func recordUploaded(_ inode: Inode, _ life: CopyLife, etag: ETag?) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try Catalog.persist(db, inode, life)
            // What was uploaded is a whole file: the copy is not partial.
            try db.cachedExecute(sql: "UPDATE item SET etag = ?, kindKnownFor = ?, onStore = 1, uploadError = NULL, uploadTrouble = NULL, versionAt = ?, partial = 0 WHERE inode = ?",
                           arguments: [etag?.value, etag?.value, Date().timeIntervalSince1970, Int64(bitPattern: inode)])
        }
    }

    /// Nil `storeVersion`: gone from the store.
    public func recordConflictKept(_ inode: Inode, _ life: CopyLife, conflictCopy: String, storeVersion: RemoteEntry?) throws(FSError) {
        try write(invalidating: .item(inode)) { db in
            try Catalog.persist(db, inode, life)
            try db.cachedExecute(sql: "UPDATE item SET uploadError = NULL, uploadTrouble = NULL, conflictCopy = ? WHERE inode = ?",
                           arguments: [conflictCopy, Int64(bitPattern: inode)])
            if let entry = storeVersion {
                try db.cachedExecute(sql: "UPDATE item SET size = ?, modifiedNs = ?, etag = ?, onStore = 1, versionAt = ? WHERE inode = ?",
                               arguments: [entry.size, Timestamp(seconds: entry.modified).nanoseconds, entry.etag?.value,
                                           Date().timeIntervalSince1970, Int64(bitPattern: inode)])
            } else {
                try db.cachedExecute(sql: "UPDATE item SET onStore = 0 WHERE inode = ?", arguments: [Int64(bitPattern: inode)])
            }
        }
    }

    /// One the store no longer has goes with its row.
    public func recordEvicted(_ inode: Inode) throws(FSError) {
        let deleted: Bool = try write(invalidating: .item(inode)) { db in
            try db.cachedExecute(sql: "DELETE FROM item WHERE inode = ? AND onStore = 0", arguments: [Int64(bitPattern: inode)])
            let deleted = db.changesCount > 0
            try db.cachedExecute(sql: """
                UPDATE item SET state = 'placeholder', baseEtag = NULL, baseIsNothing = 0, uncommitted = 0, committedSeq = 0, uploadedSeq = 0,
                    partial = 0
                WHERE inode = ? AND kind != ?
                """, arguments: [Int64(bitPattern: inode), Item.Kind.directory.rawValue])
            return deleted
        }
        // A deleted row takes its name (and any subtree) with it.
        if deleted { cache.invalidateAll() }
    }

    public func recordedLife(of inode: Inode, pinned: Bool = false) throws(FSError) -> CopyLife? {
        try read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM item WHERE inode = ?", arguments: [Int64(bitPattern: inode)]) else { return nil }
            let base: String? = row["baseEtag"]
            return CopyLife(recorded: base.map(ETag.init), startedFromNothing: row["baseIsNothing"],
                            committed: UInt64(max(row["committedSeq"] as Int64, 0)), uploaded: UInt64(max(row["uploadedSeq"] as Int64, 0)),
                            uncommitted: row["uncommitted"], pinned: pinned)
        }
    }

    /// A full WAL checkpoint, so the next mount reads the latest journal after any crash.
    public func makeDurable() throws(FSError) {
        do {
            _ = try db.writeWithoutTransaction { db in try db.checkpoint(.full) }
        } catch {
            throw Catalog.failure(error, "cannot flush the catalog")
        }
    }

    public func itemsWithUncommittedWrites() throws(FSError) -> [Item] {
        try read { db in try Row.fetchAll(db, sql: "SELECT \(Catalog.itemColumns) FROM item WHERE uncommitted != 0") }.map(Catalog.item(from:))
    }

    public func itemsPendingUpload() throws(FSError) -> [Item] {
        try read { db in try Row.fetchAll(db, sql: "SELECT \(Catalog.itemColumns) FROM item WHERE state IN ('modified', 'uploading') AND uncommitted = 0") }
            .map(Catalog.item(from:))
    }

    /// After a restart no copy is open: clean copies become placeholders unless pinned and whole,
    /// and a clean copy of an item gone from the store goes with its row (it would open as an empty file).
    public func resetTransientStates() throws(FSError) {
        let clean = "state IN ('downloading', 'local') AND uncommitted = 0 AND NOT (state = 'local' AND pinned = 1 AND partial = 0)"
        let gone = "state IN ('downloading', 'local') AND uncommitted = 0 AND onStore = 0 AND kind != ?"
        try write { db in
            try db.execute(sql: "UPDATE item SET listedAt = NULL WHERE inode IN (SELECT parent FROM item WHERE \(gone))",
                           arguments: [Item.Kind.directory.rawValue])
            try db.execute(sql: "DELETE FROM item WHERE \(gone)", arguments: [Item.Kind.directory.rawValue])
            try db.cachedExecute(sql: """
                UPDATE item SET state = 'placeholder', baseEtag = NULL, baseIsNothing = 0, committedSeq = 0, uploadedSeq = 0, partial = 0
                WHERE \(clean)
                """)
            try db.cachedExecute(sql: "UPDATE item SET state = 'modified' WHERE state = 'uploading'")
        }
    }

    static func persist(_ db: Database, _ inode: Inode, _ life: CopyLife) throws {
        try db.cachedExecute(sql: """
            UPDATE item SET state = ?, baseEtag = ?, baseIsNothing = ?, committedSeq = ?, uploadedSeq = ?, uncommitted = ? WHERE inode = ?
            """, arguments: [life.state.rawValue, life.base?.value, life.startedFromNothing, Int64(life.committed), Int64(life.uploaded),
                             life.uncommitted, Int64(bitPattern: inode)])
    }
}
