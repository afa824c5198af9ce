import DocFSStore
import Foundation
import Logging

/// Settles the removals and renames a killed daemon left under way (see
/// `Catalog+ChangesUnderWay.swift`): the store is asked whether it made each one, and the
/// catalog follows it.
///
/// - Made (the path it frees is gone): a removal removes the item and its copy, unless a
///   commit was made since (after the restart, on the file the mount showed again: that edit
///   is kept and sent); a move moves the item, replacing what its new name held. A move that a
///   store without rename (S3) left half-way, copied to the new name and still at the old one,
///   is finished first by deleting the old name (`finishedMovingACopy`).
/// - Not made (the path is still there): the note goes, and the item is as the catalog had
///   it, its changes sent as usual.
/// - A store that does not answer: the items stay as they are and unsent (the uploader holds
///   their paths), and the store is asked again later. Sending them first would put them back
///   under a name the store may have dropped.
struct InterruptedChanges {
    let store: any Store
    let catalog: Catalog
    let provider: Provider
    let uploader: Uploader
    let logger: Logger

    /// Every path a note's settling may touch, for the uploader to hold meanwhile.
    func paths(of notes: [ChangeUnderWay]) -> [StorePath] {
        notes.flatMap { note -> [StorePath] in
            var paths = [note.gonePath]
            if let item = try? catalog.item(note.inode) { paths.append(item.path) }
            if let target = destination(of: note) { paths.append(target) }
            return paths
        }
    }

    /// Where a move goes on the store (nil for a removal, or a folder gone since).
    private func destination(of note: ChangeUnderWay) -> StorePath? {
        guard let parent = note.toParent, let name = note.toName, let folder = try? catalog.item(parent) else { return nil }
        return try? folder.path.appending(name)
    }

    /// Settles what it can of `notes`; returns those the store could not answer about.
    func settle(_ notes: [ChangeUnderWay]) async -> [ChangeUnderWay] {
        var open: [ChangeUnderWay] = []
        for note in notes {
            do throws(FSError) {
                if try await !settle(note) { open.append(note) }
            } catch {
                logger.error("cannot settle a change cut short by the last mount", metadata: ["inode": "\(note.inode)", "error": "\(error)"])
                try? catalog.forgetChangeUnderWay(of: note.inode)
            }
        }
        return open
    }

    /// Whether a move the store makes as a copy and a deletion (S3 has no rename: CopyObject to
    /// the new key, then DeleteObject of the old one) was cut between the two, and is now
    /// finished by that deletion. Then both names hold the same version: the new one has the
    /// ETag of the one still at the old name (a copy keeps it), and the move is what the user
    /// asked for. Anything else (no copy at the new name, another version there, a store that
    /// gives no ETag) says nothing of a copy made whole: the move counts as never made.
    private func finishedMovingACopy(of note: ChangeUnderWay, item: Item, from still: RemoteEntry) async throws(StoreError) -> Bool {
        guard note.kind == .move, note.gonePath == item.path, !still.isDirectory, let version = still.etag,
              let target = destination(of: note) else { return false }
        let copied: RemoteEntry
        do throws(StoreError) { copied = try await store.stat(target) } catch .notFound { return false }
        guard !copied.isDirectory, copied.etag == version, copied.size == still.size else { return false }
        try await store.delete(note.gonePath, isDirectory: false)
        logger.info("a rename the last mount left half-way on the store (copied, the old name not yet deleted) is finished",
                    metadata: ["from": "\(note.gonePath)", "to": "\(target)"])
        return true
    }

    /// Returns false when the store could not say.
    private func settle(_ note: ChangeUnderWay) async throws(FSError) -> Bool {
        // A removal or rename made since (while the store did not answer) replaced the note, or
        // completed and dropped it: this one no longer says where the item is.
        guard try catalog.changeUnderWay(of: note.inode) == note, let item = try catalog.item(note.inode) else { return true }
        let made: Bool
        do throws(StoreError) {
            let still = try await store.stat(note.gonePath)
            made = try await finishedMovingACopy(of: note, item: item, from: still)
        } catch .notFound {
            made = true
        } catch {
            guard error.isPermanent else { return false }
            made = false  // a store that will not say: the catalog stays as it was
        }
        guard made else {
            logger.info("a change cut short by the last mount never reached the store", metadata: ["path": "\(item.path)"])
            try catalog.forgetChangeUnderWay(of: item.inode)
            return true
        }
        switch note.kind {
        case .removal:
            guard try catalog.recordedLife(of: item.inode)?.committed ?? 0 == note.committed else {
                logger.info("a file removed just before the last mount ended was changed since: it is kept", metadata: ["path": "\(item.path)"])
                try catalog.forgetChangeUnderWay(of: item.inode)
                return true
            }
            await uploader.cancel(item.inode)
            await provider.itemRemoved(item.inode, item: item)
            try catalog.removeItem(item.inode, folderChanged: .now)
            logger.info("a removal cut short by the last mount is completed", metadata: ["path": "\(item.path)"])
        case .move:
            guard let parent = note.toParent, let name = note.toName, try catalog.item(parent) != nil else {
                try catalog.forgetChangeUnderWay(of: item.inode)
                return true
            }
            if let replaced = try catalog.child(of: parent, named: name), replaced.inode != item.inode {
                await uploader.cancel(replaced.inode)
                await provider.itemRemoved(replaced.inode, item: replaced)
            }
            // The store moved what it held under the old name: the item stands on the store
            // again, under the new one (a listing of the old folder meanwhile found it gone),
            // and its upload replaces that version, not a file someone else made there.
            if note.gonePath == item.path { try catalog.recordOnStore(item.inode) }
            try catalog.moveItem(item.inode, to: parent, name: name, changed: .now)
            logger.info("a rename cut short by the last mount is completed", metadata: ["from": "\(item.path)", "to": "\(name)"])
        }
        return true
    }
}
