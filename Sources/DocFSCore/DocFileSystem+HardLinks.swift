// DocFileSystem+HardLinks: link(2), where the store has hard links (the local directory store;
// WebDAV and S3 have no second name for one content, and answer EPERM as s3fs and rclone do).
//
// The new name is an item of its own in the catalog (its own inode number in the mount) for the
// same file on the store; every name shows the store's link count, from the link on and after a
// remount (listings carry it). Content with changes not yet on the store goes up first: the
// second name would otherwise start from the old bytes. The local store writes a file with
// several names in place, so an edit through one name reaches all of them.

import DocFSStore

extension DocFileSystem {
    /// Gives the file `inode` the name `name` in `parent` as well.
    public func makeHardLink(to inode: Inode, in parent: Inode, name: String) async throws(FSError) -> Item {
        let source = try item(inode)
        // As on ext4: a folder gets no second name.
        guard source.kind == .file else { throw .notPermitted }
        let path = try await pathForNewEntry(named: name, in: parent)
        if source.hasUnsyncedChanges { try await uploader.sync(inode) }
        let store = self.store
        let entry = try await uploader.exclusively(touching: [path, source.path]) { () async throws(FSError) -> RemoteEntry in
            do throws(StoreError) {
                return try await store.makeHardLink(path, to: source.path)
            } catch .notSupported {
                throw FSError.notPermitted
            } catch {
                throw FSError(error)
            }
        }
        try catalog.recordLinks(of: inode, entry.links)
        let created = try catalog.createItem(in: parent, name: name, kind: .file, size: entry.size,
                                             modified: Timestamp(seconds: entry.modified), etag: entry.etag,
                                             mode: entry.mode ?? source.mode, owner: source.owner, group: source.group,
                                             state: .placeholder, onStore: true, folderChanged: .now)
        try catalog.recordLinks(of: created.inode, entry.links)
        return try item(created.inode)
    }

    /// One name of a file with several went: the names left count one less (found by the
    /// version, which names the store's file: its inode on the local store).
    func forgetOneLink(of removed: Item) throws(FSError) {
        guard let etag = removed.etag else { return }
        for other in try catalog.files(withVersion: etag) where other.inode != removed.inode {
            try catalog.recordLinks(of: other.inode, max(1, other.links - 1))
        }
    }
}
