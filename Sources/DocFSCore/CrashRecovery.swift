import DocFSStore
import Foundation
import Logging

/// What a mount does first with what an earlier one left behind (a clean unmount, a crash, a
/// `kill -9`): no handle survives a restart, so
/// - a clean copy goes (the store has its content) and its item is a placeholder again,
///   unless it is pinned: a pinned copy is kept for the next open (`Catalog+Pinning.swift`);
/// - committed changes the store does not have stay in the cache: the uploader sends them;
/// - writes no close or fsync handed over (a file open when the daemon died: an `O_TRUNC`
///   that was never refilled, a copy half overwritten) may never replace the store's version.
///   They are kept, visibly and separately, as a new file `NAME (unsaved DATE).EXT` next to
///   the item, which the uploader then creates on the store; the item itself shows the store's
///   version again;
/// - after the machine restarted under a mount that never ended (`SessionMarker`), committed
///   changes not uploaded are treated the same way: a close does not flush its copy to disk,
///   so the copy may be torn, and only a separate new file may carry it to the store.
struct CrashRecovery {
    let catalog: Catalog
    let cacheDirectory: String
    let logger: Logger
    /// Whether the machine restarted since the mount before stopped without ending.
    var machineRestarted = false

    /// Runs the recovery. Returns the items whose unsaved writes were set aside (their store
    /// version should be looked up again: the catalog's size may be a local one).
    func run(now: Date = Date()) throws(FSError) -> [Item] {
        var reverted: [Item] = []
        var suspect = try catalog.itemsWithUncommittedWrites()
        if machineRestarted {
            // Only an empty file that the journal says is empty can be trusted as it is: the
            // copy a power loss tears most often is one left empty (delayed allocation) or
            // missing, which must not go to the store as the file either.
            let unflushed = try catalog.itemsPendingUpload().filter { item in
                var info = stat()
                let empty = stat(cacheDirectory + "/" + item.id, &info) == 0 && info.st_size == 0
                return !(empty && item.size == 0)
            }
            if !unflushed.isEmpty {
                logger.warning("the machine restarted under the last mount: changes not uploaded are kept as separate files",
                               metadata: ["count": "\(unflushed.count)"])
            }
            suspect += unflushed
        }
        for item in suspect {
            let copyPath = cacheDirectory + "/" + item.id
            var info = stat()
            if stat(copyPath, &info) == 0, info.st_size > 0, let parent = item.parent {
                let unsaved = try keepUnsaved(item, parent: parent, copyPath: copyPath, size: Int64(info.st_size),
                                              modified: Timestamp(seconds: Int64(info.st_mtim.tv_sec), nanoseconds: Int64(info.st_mtim.tv_nsec)),
                                              now: now)
                logger.warning("changes the last mount could not be trusted with are kept separately",
                               metadata: ["path": "\(item.path)", "kept as": "\(unsaved.name)"])
            } else {
                unlink(copyPath)
            }
            if item.onStore {
                try LocalCopy.recordEvicted(item.inode, in: catalog)
                reverted.append(item)
            } else {
                // Never on the store: the unsaved copy is all there is of it.
                try catalog.removeItem(item.inode)
            }
        }
        try LocalCopy.resetAfterRestart(catalog)
        // Pinned copies stay (`docfs pin`); one whose file is gone is a placeholder again, and
        // after a machine crash every one is (no download is flushed to disk: it may be torn;
        // the pinned folder's refresh downloads them again).
        var pinned = Set<String>()
        for (inode, id) in try catalog.pinnedLocalItems() {
            if !machineRestarted, access(cacheDirectory + "/" + id, F_OK) == 0 {
                pinned.insert(id)
            } else {
                try LocalCopy.recordEvicted(inode, in: catalog)
            }
        }
        let keep = Set(try catalog.itemsPendingUpload().map(\.id)).union(pinned)
        MountLayout.clear(directory: cacheDirectory, keeping: keep)
        return reverted
    }

    /// Creates `NAME (unsaved …).EXT` as a new file with committed content (the journal then
    /// uploads it with `If-None-Match: *`), and moves the copy's file to it.
    private func keepUnsaved(_ item: Item, parent: Inode, copyPath: String, size: Int64, modified: Timestamp, now: Date) throws(FSError) -> Item {
        var attempt = 1
        while true {
            let name = ConflictName.make(for: item.name, at: now, attempt: attempt, kind: .unsaved)
            if try catalog.child(of: parent, named: name) == nil {
                let created = try catalog.createItem(in: parent, name: name, kind: .file, size: size, modified: modified,
                                                     mode: item.mode, owner: item.owner, group: item.group,
                                                     state: .modified, onStore: false)
                // A new file whose one commit is the unsaved writes: uploaded as a creation.
                var life = CopyLife(content: .present, base: nil, startedFromNothing: true)
                life.changed()
                life.committedChanges()
                try LocalCopy.record(life, of: created.inode, in: catalog)
                guard rename(copyPath, cacheDirectory + "/" + created.id) == 0 else {
                    throw .local(errno: errno, "cannot keep the unsaved copy of \(item.path): \(String(cString: strerror(errno)))")
                }
                return created
            }
            attempt += 1
        }
    }
}
