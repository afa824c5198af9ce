import DocFSStore
import Logging

/// Settles changes a killed daemon left under way by asking the store: made, the catalog
/// follows; not made, the note goes. Without an answer the items stay unsent and are asked
/// about later: sending them could restore a name the store dropped.
struct InterruptedChanges {
    let store: any Store
    let catalog: Catalog
    let provider: Provider
    let uploader: Uploader
    let logger: Logger

    func paths(of notes: [ChangeUnderWay]) -> [StorePath] {
        notes.flatMap { note -> [StorePath] in
            var paths = [note.gonePath]
            if let item = try? catalog.item(note.inode) { paths.append(item.path) }
            if let target = destination(of: note) { paths.append(target) }
            return paths
        }
    }

    private func destination(of note: ChangeUnderWay) -> StorePath? {
        guard let parent = note.toParent, let name = note.toName, let folder = try? catalog.item(parent) else { return nil }
        return try? folder.path.appending(name)
    }

    func settle(_ notes: [ChangeUnderWay]) async -> [ChangeUnderWay] {
        var open: [ChangeUnderWay] = []
        for note in notes {
            do throws(FSError) {
                if try await !settle(note) { open.append(note) }
            } catch {
                logger.error("cannot settle a change cut short by the last mount", metadata: ["inode": "\(note.inode)", "error": "\(error)"])
                do {
                    try catalog.forgetChangeUnderWay(of: note.inode)
                } catch {
                    logger.error("cannot forget a change cut short: the next mount tries it again", metadata: ["inode": "\(note.inode)", "error": "\(error)"])
                }
            }
        }
        return open
    }

    /// An S3 move cut between copy and delete is finished when both names hold the same ETag.
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

    private func settle(_ note: ChangeUnderWay) async throws(FSError) -> Bool {
        // A change made since replaced or completed the note.
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
            // The row goes before the copy is told: an open meanwhile either joined a copy that
            // `itemRemoved` then marks removed, or finds no row to begin one on. The other order
            // would let an open begin a copy in between whose row then goes: it would stay in the cache.
            try await Blocking.run { [catalog] () throws(FSError) in try catalog.removeItem(item.inode, folderChanged: .now) }
            await provider.itemRemoved(item.inode, item: item)
            logger.info("a removal cut short by the last mount is completed", metadata: ["path": "\(item.path)"])
        case .move:
            guard let parent = note.toParent, let name = note.toName, try catalog.item(parent) != nil else {
                try catalog.forgetChangeUnderWay(of: item.inode)
                return true
            }
            let replaced = try catalog.child(of: parent, named: name).flatMap { $0.inode != item.inode ? $0 : nil }
            if let replaced { await uploader.cancel(replaced.inode) }
            // The store moved it: its upload replaces that version, not someone else's file.
            let onStore = note.gonePath == item.path
            try await Blocking.run { [catalog] () throws(FSError) in
                if onStore { try catalog.recordOnStore(item.inode) }
                try catalog.moveItem(item.inode, to: parent, name: name, changed: .now)
            }
            // As for a removal: the replaced row goes first.
            if let replaced { await provider.itemRemoved(replaced.inode, item: replaced) }
            logger.info("a rename cut short by the last mount is completed", metadata: ["from": "\(item.path)", "to": "\(name)"])
        }
        return true
    }
}
