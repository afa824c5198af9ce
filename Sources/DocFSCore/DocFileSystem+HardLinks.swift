// link(2), where the store has hard links (the local store; elsewhere EPERM, as s3fs and
// rclone). The new name is its own item for the same store file, showing the store's link
// count. Unsent changes go up first, or the second name would start from the old bytes.

import DocFSStore

extension DocFileSystem {
    public func makeHardLink(to inode: Inode, in parent: Inode, name: String) async throws(FSError) -> Item {
        let source = try item(inode)
        // As on ext4: a folder gets no second name.
        guard source.kind == .file else { throw .notPermitted }
        let path = try await pathForNewEntry(named: name, in: parent)
        if source.hasUnsyncedChanges { try await uploader.sync(inode) }
        let entry = try await makeOnStore(touching: [path, source.path]) { () async throws(StoreError) in
            try await store.makeHardLink(path, to: source.path)
        }
        let created = try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.recordLinks(of: inode, entry.links)
            let created = try catalog.createItem(in: parent, name: name, kind: .file, size: entry.size,
                                                 modified: Timestamp(seconds: entry.modified), etag: entry.etag,
                                                 mode: entry.mode ?? source.mode, owner: source.owner, group: source.group,
                                                 state: .placeholder, onStore: true, folderChanged: .now)
            try catalog.recordLinks(of: created.inode, entry.links)
            return created
        }
        return try item(created.inode)
    }

    /// The names left count one less (found by the version, which names the store's file).
    func forgetOneLink(of removed: Item) throws(FSError) {
        guard let etag = removed.etag else { return }
        for other in try catalog.files(withVersion: etag) where other.inode != removed.inode {
            try catalog.recordLinks(of: other.inode, max(1, other.links - 1))
        }
    }
}
