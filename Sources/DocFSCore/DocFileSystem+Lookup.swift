import DocFSStore
import Foundation

extension DocFileSystem {
    /// A file with a copy shows the copy's size (what reads return), except while it downloads; its
    /// mtime once it was changed here.
    public func item(_ inode: Inode) throws(FSError) -> Item {
        guard let item = try catalog.item(inode) ?? openFiles.unlinkedButOpen(inode) else { throw .notFound }
        return shownWithLocalCopy(item)
    }

    private func shownWithLocalCopy(_ item: Item) -> Item {
        var item = item
        guard item.kind == .file, item.state != .downloading, item.state != .placeholder,
              let copy = provider.presentCopies.withLock({ $0[item.inode] }) else { return item }
        item.size = copy.length
        if item.hasUnsyncedChanges || copy.wasWritten, let time = copy.modificationTime {
            item.modified = time
            // A write changes the status time too (POSIX), here as the close's commit will record
            // it: git stats a file it checks out before closing it, and a later ctime makes
            // `git status` read the file again.
            if let changed = item.changed, changed < time { item.changed = time }
        }
        return item
    }

    public func lookup(parent: Inode, name: String) async throws(FSError) -> Item {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let directory = try item(parent)
        if directory.isDirectory, directory.listedAt == nil, store.capabilities.looksUpByStat {
            return try await lookUpByStat(name, in: directory)
        }
        try await enumerator.ensureListed(directory, holding: name)
        guard var child = try catalog.child(of: parent, named: name) else { throw .notFound }
        if let unconfirmed = enumerator.kindToConfirm(child) {
            // A small object the listing could not tell from a link (see SymlinkProbe).
            await enumerator.confirmations.confirm(unconfirmed)
            guard let confirmed = try catalog.child(of: parent, named: name) else { throw .notFound }
            child = confirmed
        }
        return try item(child.inode)
    }

    /// The entry joins the catalog as a one-entry page; the folder stays unlisted.
    private func lookUpByStat(_ name: String, in directory: Item) async throws(FSError) -> Item {
        if let child = try catalog.child(of: directory.inode, named: name),
           !child.onStore || child.hasUnsyncedChanges || child.state == .local || child.state == .downloading {
            return try item(child.inode)  // made, changed or open here: the catalog knows better
        }
        await enumerator.noteLookupByName(in: directory)
        let path = try storePath(directory.path, name)
        let askedAt = Date().timeIntervalSince1970
        let entry: RemoteEntry
        do {
            entry = try await retry.run { () async throws(StoreError) -> RemoteEntry in try await store.stat(path) }
        } catch {
            throw FSError(error)
        }
        // The item's own time replaces a stored-at time a listing gave meanwhile.
        try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.applyListingPage([entry], of: directory.inode, askedAt: askedAt, progress: ListingProgress(startedAt: askedAt))
        }
        guard let child = try catalog.child(of: directory.inode, named: name) else { throw .notFound }
        return try item(child.inode)
    }

    /// Nil when a listing must come first. Never touches the network: most lookups end here.
    public func lookupIfListed(parent: Inode, name: String) throws(FSError) -> Item? {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let (row, child) = try catalog.directoryAndChild(parent, named: name)
        let directory: Item
        if let row { directory = row } else { directory = try item(parent) }
        guard directory.isDirectory else { throw .notADirectory }
        // A folder listed for the first time answers the names of the pages it has.
        guard enumerator.canAnswerNow(for: directory) || child.map({ enumerator.firstListingHolds($0, in: directory) }) == true
        else { return nil }
        guard let child else { throw .notFound }
        if kindUnconfirmed(child) { return nil }  // `lookup` asks the store first
        return shownWithLocalCopy(child)
    }

    public func items(_ inodes: [Inode]) throws(FSError) -> [Inode: Item] {
        try catalog.items(inodes).mapValues(shownWithLocalCopy)
    }

    /// Whether `child`'s kind is still to be confirmed: readdir gives it no type and no
    /// attributes, so `stat` looks it up.
    public func kindUnconfirmed(_ child: Item) -> Bool {
        enumerator.kindToConfirm(child) != nil
    }

    public func children(of inode: Inode) async throws(FSError) -> [Item] {
        let directory = try item(inode)
        try await enumerator.ensureListed(directory)
        return try catalog.children(of: inode)
    }

    /// Streamed: a huge folder is never decoded whole.
    public func forEachChild(of inode: Inode, _ body: (Item) -> Void) async throws(FSError) {
        let directory = try item(inode)
        try await enumerator.ensureListed(directory)
        try catalog.forEachChild(of: inode) { body(shownWithLocalCopy($0)) }
    }

    /// 0 for a placeholder, so `du` tells what is local.
    public func localBlocks(of item: Item) -> Int64 {
        if let copy = provider.presentCopies.withLock({ $0[item.inode] }) { return copy.allocatedBlocks }
        // A pinned copy kept from before this mount is local before anything opens it.
        guard item.kind == .file, item.state == .local else { return 0 }
        var info = stat()
        return lstat(provider.copyPath(for: item), &info) == 0 ? Int64(info.st_blocks) : 0
    }
}
