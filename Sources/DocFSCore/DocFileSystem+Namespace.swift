// Namespace changes: the store first, under the uploader's exclusion of the paths, then the
// catalog; a change a kill could split is noted first.

import DocFSStore
import Foundation
import Logging

extension DocFileSystem {
    /// `EPERM` on stores that cannot represent links.
    public func makeSymlink(in parent: Inode, name: String, target: String, owner: UInt32, group: UInt32) async throws(FSError) -> Item {
        let path = try await pathForNewEntry(named: name, in: parent)
        let (group, _) = try inheriting(group: group, mode: 0o777, from: parent, directory: false)
        let entry = try await makeOnStore(touching: [path]) { () async throws(StoreError) in
            try await store.makeSymlink(path, target: target)
        }
        let created = try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.createItem(in: parent, name: name, kind: .symlink, size: Int64(target.utf8.count),
                                   modified: Timestamp(seconds: entry.modified), etag: entry.etag, mode: nil, owner: owner, group: group,
                                   state: .placeholder, onStore: true, symlinkTarget: target, folderChanged: .now)
        }
        return await withOwnerOnStore(created)
    }

    /// mknod/mkfifo/bind; `EPERM` where the store cannot represent them. Metadata only.
    public func makeSpecial(in parent: Inode, name: String, _ special: SpecialFile, mode: UInt32, owner: UInt32,
                            group: UInt32) async throws(FSError) -> Item {
        let path = try await pathForNewEntry(named: name, in: parent)
        let (group, mode) = try inheriting(group: group, mode: mode, from: parent, directory: false)
        let entry = try await makeOnStore(touching: [path]) { () async throws(StoreError) in
            try await store.makeSpecial(path, special, mode: mode & 0o7777)
        }
        let created = try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.createItem(in: parent, name: name, kind: Item.Kind(special.type), modified: Timestamp(seconds: entry.modified),
                                   etag: entry.etag, mode: mode & 0o7777, owner: owner, group: group, state: .placeholder,
                                   onStore: true, rdev: special.rdev, folderChanged: .now)
        }
        return await withOwnerOnStore(created)
    }

    public func makeDirectory(in parent: Inode, name: String, mode: UInt32, owner: UInt32, group: UInt32) async throws(FSError) -> Item {
        let path = try await pathForNewEntry(named: name, in: parent)
        let (group, mode) = try inheriting(group: group, mode: mode, from: parent, directory: true)
        // In a folder this mount just made, the store gets it in the background (Uploader+FoldersAhead).
        if let ahead = try await uploader.makeAhead(path, in: parent, create: { [catalog] () throws(FSError) -> Item in
            try catalog.createItem(in: parent, name: name, kind: .directory, modified: .now, mode: mode & 0o7777,
                                   owner: owner, group: group, state: .directory, onStore: false,
                                   listedAt: Date().timeIntervalSince1970, folderChanged: .now)
        }) {
            return ahead
        }
        let entry = try await uploader.exclusively(touching: [path]) { () async throws(FSError) -> RemoteEntry in
            do throws(StoreError) { return try await store.makeDirectory(path) } catch { throw FSError(error) }
        }
        let created = try await Blocking.run { [catalog] () throws(FSError) in
            try catalog.createItem(in: parent, name: name, kind: .directory,
                                   modified: entry.modified > 0 ? Timestamp(seconds: entry.modified) : .now,
                                   mode: mode & 0o7777, owner: owner, group: group, state: .directory, onStore: true,
                                   listedAt: Date().timeIntervalSince1970, folderChanged: .now)
        }
        await uploader.noteFolderMade(created.inode)
        return await withOwnerOnStore(created)
    }

    /// Under the uploader's exclusion of `paths`; `EPERM` where the store cannot represent the entry.
    func makeOnStore(touching paths: [StorePath],
                     _ make: @Sendable () async throws(StoreError) -> RemoteEntry) async throws(FSError) -> RemoteEntry {
        try await uploader.exclusively(touching: paths) { () async throws(FSError) -> RemoteEntry in
            do throws(StoreError) {
                return try await make()
            } catch .notSupported {
                throw FSError.notPermitted
            } catch {
                throw FSError(error)
            }
        }
    }

    /// Setgid folders pass on their group (and setgid to folders): the kernel leaves it to FUSE.
    func inheriting(group: UInt32, mode: UInt32, from parent: Inode, directory: Bool) throws(FSError) -> (group: UInt32, mode: UInt32) {
        let folder = try item(parent)
        guard let folderMode = folder.mode, folderMode & UInt32(S_ISGID) != 0 else { return (group, mode) }
        return (folder.group ?? UInt32(getegid()), directory ? mode | UInt32(S_ISGID) : mode)
    }

    /// A store that keeps owners gets a non-mounting caller's, so a fresh catalog sees the same owner.
    private func withOwnerOnStore(_ created: Item) async -> Item {
        let owner = created.owner.flatMap { $0 == geteuid() ? nil : $0 }
        let group = created.group.flatMap { $0 == getegid() ? nil : $0 }
        guard owner != nil || group != nil else { return created }
        await AttributeSync.push(StoreAttributes(owner: created.owner, group: created.group), of: created, to: store,
                                 provider: provider, logger: logger)
        return (try? catalog.item(created.inode)) ?? created
    }

    /// The store first (unless the item never got there), then the catalog.
    public func remove(from parent: Inode, name: String, directory: Bool) async throws(FSError) {
        if readOnly { throw .readOnly }
        let target = try await lookup(parent: parent, name: name)
        if directory {
            guard target.isDirectory else { throw .notADirectory }
            if try !(await children(of: target.inode)).isEmpty { throw .notEmpty }
        } else if target.isDirectory {
            throw .isADirectory
        }
        // An open streamed copy gets the rest of its bytes while the store still has them.
        await completeOpenFiles(under: [target.path])
        try await uploader.exclusively(touching: [target.path]) { () async throws(FSError) in
            // Re-read: an upload in flight until now may have put it on the store.
            let target = try catalog.item(target.inode) ?? target
            if target.onStore {
                // Noted first where a kill between store and catalog would bring the item back.
                let change = try catalog.holdsUnsentChanges(target) ? ChangeUnderWay.removal(of: target) : nil
                try await catalog.noting(change) { () async throws(StoreError) in
                    do throws(StoreError) {
                        try await store.delete(target.path, isDirectory: directory)
                    } catch .notFound {
                    }
                }
            }
            // Still exclusive: no upload may start for it in between.
            await uploader.cancel(target.inode)
            await provider.itemRemoved(target.inode, item: target)
            let now = Timestamp.now
            try await Blocking.run { [catalog] () throws(FSError) in try catalog.removeItem(target.inode, folderChanged: now) }
            openFiles.markUnlinked(target.inode, at: now)
            if target.links > 1 { try await Blocking.run { [self] () throws(FSError) in try forgetOneLink(of: target) } }
        }
    }

    /// Inodes stay.
    public func rename(from parent: Inode, name: String, to newParent: Inode, newName: String, noReplace: Bool) async throws(FSError) {
        if readOnly { throw .readOnly }
        guard newName.utf8.count <= 255 else { throw .nameTooLong }
        let source = try await lookup(parent: parent, name: name)
        let destinationDirectory = try item(newParent)
        try await enumerator.ensureListed(destinationDirectory)
        let existing = try catalog.child(of: newParent, named: newName)
        if let existing {
            if existing.inode == source.inode { return }
            if noReplace { throw .exists }
            if source.isDirectory && !existing.isDirectory { throw .notADirectory }
            if !source.isDirectory && existing.isDirectory { throw .isADirectory }
            if existing.isDirectory, try !(await children(of: existing.inode)).isEmpty { throw .notEmpty }
        }
        if source.isDirectory {
            var cursor: Inode? = newParent
            while let current = cursor {
                if current == source.inode { throw .invalidArgument }
                cursor = try catalog.item(current)?.parent
            }
        }
        let targetPath = try storePath(destinationDirectory.path, newName)
        // Open streamed copies read ranges by name and version: they get the rest first.
        await completeOpenFiles(under: [source.path] + (existing.map { [$0.path] } ?? []))
        try await uploader.exclusively(touching: [source.path, targetPath]) { () async throws(FSError) in
            // Re-read both. A source whose row went is gone: moving it could delete the target on the store.
            guard let source = try catalog.item(source.inode) else { throw .notFound }
            // A file the store lost (another client deleted it) with nothing to send, kept only
            // while open or until the listing's drop: taken for a new file, it deleted the target.
            if !source.onStore, !source.hasUnsyncedChanges, !source.hasUncommittedWrites { throw .notFound }
            let existing = try existing.map { (old: Item) throws(FSError) -> Item in try catalog.item(old.inode) ?? old }
            // From the store's move to the catalog's, no listing asked before may drop the row.
            try await catalog.moving.whileMoving(source.inode) { () async throws(FSError) in
                // Noted first where a kill between store and catalog would upload under the old name or
                // leave both names; the catalog's move removes the note.
                var change: ChangeUnderWay?
                if source.onStore {
                    var noted = store.capabilities.renamesByCopying && !source.isDirectory
                    if !noted { noted = try catalog.holdsUnsentChanges(source) }
                    if !noted, let existing { noted = try catalog.holdsUnsentChanges(existing) }
                    if noted { change = .move(of: source, to: newParent, name: newName, gone: source.path) }
                } else if let existing, existing.onStore {
                    change = .move(of: source, to: newParent, name: newName, gone: existing.path)
                }
                try await catalog.noting(change) { () async throws(StoreError) in
                    if source.onStore {
                        _ = try await store.move(source.path, to: targetPath, replace: existing != nil, isDirectory: source.isDirectory)
                    } else if let existing, existing.onStore {
                        // A new file replaces a stored one: its upload will recreate the name.
                        try await store.delete(existing.path, isDirectory: existing.isDirectory)
                    }
                }
                // Still exclusive: a queued upload of the source must only ever see the new path.
                if let existing {
                    await uploader.cancel(existing.inode)
                    await provider.itemRemoved(existing.inode, item: existing)
                }
                let now = Timestamp.now
                let catalog = self.catalog
                try await Blocking.run { () throws(FSError) in try catalog.moveItem(source.inode, to: newParent, name: newName, changed: now) }
                await provider.followRenames { (try? catalog.item($0))??.path }
                if let existing { openFiles.markUnlinked(existing.inode, at: now) }
            }
        }
    }

    /// POSIX: an open file stays usable whatever happens to its name.
    private func completeOpenFiles(under paths: [StorePath]) async {
        let catalog = self.catalog
        let isAffected = { @Sendable (inode: Inode) -> Bool in
            guard let path = (try? catalog.item(inode))??.path else { return false }
            return paths.contains { path.isSame(orInside: $0) }
        }
        await provider.completeStreams(where: isAffected)
    }

    func pathForNewEntry(named name: String, in parent: Inode) async throws(FSError) -> StorePath {
        if readOnly { throw .readOnly }
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        let directory = try item(parent)
        try await enumerator.ensureListed(directory)
        if try catalog.child(of: parent, named: name) != nil { throw .exists }
        return try storePath(directory.path, name)
    }

    func storePath(_ directory: StorePath, _ name: String) throws(FSError) -> StorePath {
        do { return try directory.appending(name) } catch { throw .invalidArgument }
    }
}
