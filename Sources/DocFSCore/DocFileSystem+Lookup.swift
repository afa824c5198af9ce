// DocFileSystem+Lookup: names to items, and items as `stat` shows them. A lookup of a folder
// listed within its time to live is answered from the catalog on the caller's thread; one never
// listed waits for its listing (or, on S3, asks the store about that one name).

import DocFSStore
import Foundation
import Logging

extension DocFileSystem {
    /// An item as `stat` should show it: a file with a local copy shows the copy's size, since
    /// the copy is what reads return. The catalog's size is only as new as the last commit:
    /// after an fsync's upload the item is `local` again while its handles go on writing and
    /// truncating. A copy still downloading (or just created, before that starts) holds only a
    /// prefix, so then the catalog answers. The copy's modification time counts once the copy
    /// was changed here: a fresh download's file time is the download's.
    public func item(_ inode: Inode) throws(FSError) -> Item {
        guard let item = try catalog.item(inode) ?? openFiles.unlinkedButOpen(inode) else { throw .notFound }
        return shownWithLocalCopy(item)
    }

    /// `item` as `stat` shows it, given its local copy (see `item(_:)`).
    private func shownWithLocalCopy(_ item: Item) -> Item {
        var item = item
        guard item.kind == .file, item.state != .downloading, item.state != .placeholder,
              let copy = provider.presentCopies.withLock({ $0[item.inode] }) else { return item }
        item.size = copy.length
        if item.hasUnsyncedChanges || copy.wasWritten, let time = copy.modificationTime {
            item.modified = time
        }
        return item
    }

    /// Finds `name` in `parent`, listing the parent first if it never was.
    public func lookup(parent: Inode, name: String) async throws(FSError) -> Item {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let directory = try item(parent)
        if directory.isDirectory, directory.listedAt == nil, store.capabilities.looksUpByStat {
            return try await lookUpByStat(name, in: directory)
        }
        try await enumerator.ensureListed(directory)
        guard var child = try catalog.child(of: parent, named: name) else { throw .notFound }
        if let unconfirmed = enumerator.kindToConfirm(child) {
            // A small object the listing could not tell from a link (see SymlinkProbe).
            await enumerator.confirmKind(unconfirmed)
            guard let confirmed = try catalog.child(of: parent, named: name) else { throw .notFound }
            child = confirmed
        }
        return try item(child.inode)
    }

    /// Looks up one name of a folder never listed by asking the store about that name only
    /// (see `StoreCapabilities.looksUpByStat`). The entry found joins the catalog as a listing
    /// page of one; the folder stays unlisted, so `ls` still lists it whole.
    private func lookUpByStat(_ name: String, in directory: Item) async throws(FSError) -> Item {
        if let child = try catalog.child(of: directory.inode, named: name),
           !child.onStore || child.hasUnsyncedChanges || child.state == .local || child.state == .downloading {
            return try item(child.inode)  // made, changed or open here: the catalog knows better
        }
        // From the second name, a small folder is listed for the lookups that follow.
        await enumerator.noteLookupByName(in: directory)
        let path: StorePath
        do { path = try directory.path.appending(name) } catch { throw .invalidArgument }
        let askedAt = Date().timeIntervalSince1970
        let entry: RemoteEntry
        do {
            entry = try await retry.run { () async throws(StoreError) -> RemoteEntry in try await store.stat(path) }
        } catch .notFound {
            throw .notFound
        } catch {
            throw FSError(error)
        }
        // An answer carrying the item's own time (S3's `x-amz-meta-mtime`) replaces the time of
        // storing a listing that landed meanwhile gave the row (`RemoteEntry.carriesOwnTime`).
        try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.applyListingPage([entry], of: directory.inode, askedAt: askedAt, progress: ListingProgress(startedAt: askedAt))
        }
        guard let child = try catalog.child(of: directory.inode, named: name) else { throw .notFound }
        return try item(child.inode)
    }

    /// Finds `name` in `parent` when the catalog can answer at once (the parent was listed);
    /// nil when a listing must come first (call `lookup`). Never touches the network: this is
    /// how the FUSE layer answers most lookups on its own thread, without a task per call.
    public func lookupIfListed(parent: Inode, name: String) throws(FSError) -> Item? {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let (row, child) = try catalog.directoryAndChild(parent, named: name)
        let directory: Item
        if let row { directory = row } else { directory = try item(parent) }
        guard directory.isDirectory else { throw .notADirectory }
        guard enumerator.canAnswerNow(for: directory) else { return nil }
        guard let child else { throw .notFound }
        if enumerator.kindToConfirm(child) != nil { return nil }  // `lookup` asks the store first
        return shownWithLocalCopy(child)
    }

    /// The items of `inodes` that exist, as `stat` shows them (see `item(_:)`), read at once.
    public func items(_ inodes: [Inode]) throws(FSError) -> [Inode: Item] {
        try catalog.items(inodes).mapValues(shownWithLocalCopy)
    }

    /// The children of `directory` whose kind is still to be confirmed (see `SymlinkProbe`):
    /// readdir gives the kernel no attributes for them, so `stat` looks them up.
    public func childrenToConfirm(of directory: Inode) -> Set<Inode> {
        enumerator.inodesToConfirm(in: directory)
    }

    /// The children of a directory, listing it first if it never was.
    public func children(of inode: Inode) async throws(FSError) -> [Item] {
        let directory = try item(inode)
        try await enumerator.ensureListed(directory)
        return try catalog.children(of: inode)
    }

    /// Each child of a directory, in name order, listing it first if it never was. The
    /// children stream from the catalog: a huge folder is never decoded whole at once.
    public func forEachChild(of inode: Inode, _ body: (Item) -> Void) async throws(FSError) {
        let directory = try item(inode)
        try await enumerator.ensureListed(directory)
        try catalog.forEachChild(of: inode) { body(shownWithLocalCopy($0)) }
    }

    /// 512-byte blocks the item's local copy uses: 0 for a placeholder, so `du` tells what is local.
    public func localBlocks(of item: Item) -> Int64 {
        if let copy = provider.presentCopies.withLock({ $0[item.inode] }) { return copy.allocatedBlocks }
        // A copy kept from before this mount (a pinned file) is local before anything opens it.
        guard item.kind == .file, item.state == .local else { return 0 }
        var info = stat()
        return lstat(provider.copyPath(for: item), &info) == 0 ? Int64(info.st_blocks) : 0
    }
}
