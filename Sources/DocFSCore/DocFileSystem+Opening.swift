// A handle's version is decided once, at open: a reader's is the store's now, a writer's the
// one its change belongs to.

import DocFSStore
import Foundation

extension DocFileSystem {
    /// Large files and writers get sparse copies; uncovered bytes are fetched before commit.
    public func open(_ inode: Inode, mode: OpenMode) async throws(FSError) -> UInt64 {
        if mode.writable && readOnly { throw .readOnly }
        let item = try item(inode)
        let truncating = mode.truncate && mode.writable
        // A writer that may not fetch needs every byte local already.
        var intent: Provider.OpenIntent = truncating ? .empty : mode.writable && !mode.mayFetch ? .content : .streamed
        if intent == .streamed, mode.writable, mode.fetchOnFirstUse, item.kind == .file, item.onStore {
            let since = provider.versionsMadeMark
            intent = .writer(opened: try await versionToEdit(item), since: since)
        }
        if intent == .streamed, mode.mayFetch, let cached = mode.cachedVersion, let entry = try await storeStillHas(cached, of: item) {
            intent = .cached(entry)
        }
        let reading = prefetching && !mode.writable && mode.mayFetch && item.kind == .file
        if reading { await prefetcher.readerOpening(item) }
        let copy = try await provider.open(item, intent: intent, mayFetch: mode.mayFetch)
        if reading { await prefetcher.readerOpened(inode) }
        if truncating {
            do { try await Blocking.run { () throws(FSError) in try copy.truncate(to: 0) } } catch {
                await provider.release(inode)
                throw error
            }
        }
        return openFiles.register(OpenFile(inode: inode, copy: copy, writable: mode.writable, opened: item, mayFetch: mode.mayFetch,
                                 appends: mode.writable && mode.append))
    }

    /// The store's version now (a stat for a large file: the catalog's may be a listing behind).
    /// If the store does not answer, the catalog's, and a newer one meets the edit as a conflict.
    private func versionToEdit(_ shown: Item) async throws(FSError) -> RemoteEntry {
        let item = try catalog.item(shown.inode) ?? shown
        let listed = RemoteEntry(path: item.path, kind: .file, size: item.size, modified: item.modified.seconds, etag: item.etag)
        let joined = provider.presentCopies.withLock { $0[item.inode] }.map { !$0.life.isUnused } ?? false
        guard item.size > provider.wholeFileLimit, item.etag != nil, store.capabilities.hasRangeReads, !item.hasUnsyncedChanges,
              !joined else { return listed }
        let entry: RemoteEntry
        let askedAt = Date().timeIntervalSince1970
        do {
            entry = try await askStore(about: item.path)
        } catch .storeUnreachable, .timedOut {
            return listed
        }
        guard entry.kind == .file else { throw entry.kind == .directory ? .isADirectory : .stale }
        if entry.etag != item.etag || entry.size != item.size {
            // Unless this mount made a version meanwhile: the answer is older than what it knows.
            try await Blocking.run { [catalog] () throws(FSError) in try catalog.updateMetadata(of: item.inode, from: entry, askedAt: askedAt) }
        }
        return entry
    }

    private func askStore(about path: StorePath) async throws(FSError) -> RemoteEntry {
        let (store, retry) = (store, retry)
        let timedOut = FSError.timedOut("no answer about \(path) within \(ioTimeout.map { "\($0)" } ?? "the limit")")
        return try await CallerWait.run(limit: ioTimeout, timeout: { timedOut }) { () throws(FSError) -> RemoteEntry in
            do throws(StoreError) {
                return try await retry.run { () async throws(StoreError) -> RemoteEntry in try await store.stat(path) }
            } catch {
                throw FSError(error)
            }
        }
    }

    /// Nil if the store moved on. Asked even with a copy there: a close just before may evict it;
    /// not asked again within `--attr-timeout` of the store's last word (`ConfirmedVersions`).
    private func storeStillHas(_ version: ETag, of item: Item) async throws(FSError) -> RemoteEntry? {
        guard item.kind == .file, item.onStore, item.etag == version, !item.hasUnsyncedChanges,
              store.capabilities.hasRangeReads else { return nil }
        if let recent = confirmedVersions.recent(item.inode, version: version, path: item.path), recent.size == item.size {
            return recent
        }
        do {
            let asked = ContinuousClock.now
            let entry = try await askStore(about: item.path)
            guard entry.kind == .file, entry.etag == version, entry.size == item.size else { return nil }
            confirmedVersions.confirmed(item.inode, entry, asked: asked)
            return entry
        } catch .notFound {
            return nil  // the open finds out and says so
        }
    }

    public func hasCompleteLocalCopy(_ inode: Inode) -> Bool {
        guard let copy = provider.presentCopies.withLock({ $0[inode] }) else { return false }
        return copy.life.content == .present && !copy.isSparse && copy.isComplete
    }

    /// Nothing reaches the store until the last close or fsync uploads it.
    public func create(in parent: Inode, name: String, mode: UInt32, owner: UInt32, group: UInt32,
                       exclusive: Bool, truncate: Bool) async throws(FSError) -> (item: Item, handle: UInt64) {
        if readOnly { throw .readOnly }
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        guard try item(parent).isDirectory else { throw .notADirectory }
        let found: Item?
        do { found = try await lookup(parent: parent, name: name) } catch .notFound { found = nil }
        if let existing = found {
            if exclusive { throw .exists }
            if existing.isDirectory { throw .isADirectory }
            let handle = try await open(existing.inode, mode: OpenMode(writable: true, truncate: truncate))
            return (try item(existing.inode), handle)
        }
        let now = Timestamp.now
        let (group, mode) = try inheriting(group: group, mode: mode, from: parent, directory: false)
        // `modified` from the start: a listing never drops a row that holds changes.
        let (created, copy) = try await provider.openNew { [catalog] () throws(FSError) -> Item in
            try catalog.createItem(in: parent, name: name, kind: .file, modified: now, mode: mode & 0o7777,
                                   owner: owner, group: group, state: .modified, onStore: false, folderChanged: now)
        }
        let handle = openFiles.register(OpenFile(inode: created.inode, copy: copy, writable: true, opened: created))
        return (try item(created.inode), handle)
    }
}
