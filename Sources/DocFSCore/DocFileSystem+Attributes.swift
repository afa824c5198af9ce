// setattr: a new size is a content change; the rest lives in the catalog and goes to the store.

import DocFSStore
import Logging

extension DocFileSystem {
    /// A truncate by path closes its handle only once all is recorded: reading the item after that
    /// close (which may upload and move the row) would report ENOENT.
    public func setAttributes(of inode: Inode, _ changes: AttributeChanges, handle: UInt64?) async throws(FSError) -> Item {
        if readOnly { throw .readOnly }
        let item = try item(inode)
        var temporary: UInt64?
        if let size = changes.size {
            guard item.kind == .file else { throw item.isDirectory ? .isADirectory : .invalidArgument }
            if let handle, size != 0 { try await provideForChange(handle) }
            if let handle, let file = openFiles[handle] {
                // A sparse copy's fetch stops first, so no fetched byte lands after the truncate.
                if size == 0 { await file.copy.stopFetching() }
                try await Blocking.run { () throws(FSError) in try file.copy.truncate(to: size) }
            } else {
                temporary = try await open(inode, mode: OpenMode(writable: true, truncate: size == 0))
                if let temporary, size != 0 { try await provideForChange(temporary) }
            }
        }
        do {
            if let temporary, let size = changes.size, size != 0, let file = openFiles[temporary] {
                try await Blocking.run { () throws(FSError) in try file.copy.truncate(to: size) }
            }
            let changed = try await recordAttributes(of: inode, changes, item: changes.size == nil ? item : try self.item(inode))
            if let temporary { await release(handle: temporary) }
            return changed
        } catch {
            if let temporary { await release(handle: temporary) }
            throw error
        }
    }

    private func recordAttributes(of inode: Inode, _ changes: AttributeChanges, item: Item) async throws(FSError) -> Item {
        let now = Timestamp.now
        if let modified = changes.modified, item.hasUnsyncedChanges, let copy = provider.presentCopies.withLock({ $0[inode] }) {
            copy.setModificationTime(modified)
        }
        try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.setAttributes(of: inode, mode: changes.mode.map { $0 & 0o7777 }, owner: changes.owner, group: changes.group,
                                      modified: changes.modified, accessed: changes.accessed, changed: now)
        }
        // Read after the catalog write, so an upload ending meanwhile is seen.
        let current = try self.item(inode)
        if !current.hasUnsyncedChanges {
            let carried = StoreAttributes(mode: changes.mode.map { $0 & 0o7777 }, modified: changes.modified, accessed: changes.accessed,
                                          owner: changes.owner, group: changes.group)
            if current.isDirectory && !current.onStore {
                await uploader.pushWhenMade(inode, carried)  // a folder made ahead, not on the store yet
            } else {
                await AttributeSync.push(carried, of: current, to: store, provider: provider, logger: logger)
            }
        }
        return try self.item(inode)
    }
}
