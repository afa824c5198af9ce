import DocFSStore
import Logging

/// When the store moved on, both versions are kept, unless the store holds our own lost upload.
extension Uploader {
    func keepBoth(_ item: Item, _ copy: LocalCopy, commit: UInt64, snapshot: String) async -> Outcome {
        guard !handedOver else { return .done }
        guard let parentPath = item.path.parent, let parent = item.parent else {
            return await failed(item, copy, FSError.invalidArgument, commit: commit)
        }
        if let settled = await ownVersionOnStore(item, copy, commit: commit, snapshot: snapshot) { return settled }
        do {
            let (conflictName, kept) = try await uploadConflictCopy(of: item, in: parentPath, from: snapshot)
            // On the store all the same: the next mount's listing shows it.
            guard !handedOver else { return .done }
            do {
                _ = try catalog.createItem(in: parent, name: conflictName, kind: .file, size: kept.size, modified: Timestamp(seconds: kept.modified),
                                           etag: kept.etag, mode: item.mode, state: .placeholder, onStore: true)
            } catch {
                // On the store all the same: the next listing shows it.
                logger.info("the conflict copy waits for the next listing to show", metadata: ["name": "\(conflictName)", "error": "\(error)"])
            }
            let theirs = try await storeVersion(of: item.path)
            try await ended(copy, .keptAsConflict(commit: commit, conflictCopy: conflictName, storeVersion: theirs))
            logger.warning("conflict: the store changed while this file was edited; both versions kept",
                           metadata: ["path": "\(item.path)", "conflict copy": "\(conflictName)"])
            return .done
        } catch {
            return await failed(item, copy, error, commit: commit)
        }
    }

    /// The snapshot's hash is kept, so finding that version later is not taken for another's change.
    func rememberSent(_ snapshot: String, of inode: Inode, ifItMayHaveArrived error: any Error) async {
        guard let error = error as? StoreError, SentVersions.mayHaveReachedTheStore(error) else { return }
        do {
            let digest = try await Blocking.run { () throws(FSError) in try SentVersions.digest(ofFile: snapshot) }
            sent.remember(digest, for: inode)
        } catch {
            logger.info("cannot hash an upload whose answer was lost", metadata: ["inode": "\(inode)", "error": "\(error)"])
        }
    }

    /// One GET tells whether the store's version is ours: the bytes being sent, or an earlier
    /// try's (replaced conditionally). Nil: someone else's, or unknown (both are kept).
    private func ownVersionOnStore(_ item: Item, _ copy: LocalCopy, commit: UInt64, snapshot: String) async -> Outcome? {
        let inode = item.inode
        guard let comparison = try? SnapshotComparison(snapshot: snapshot),
              let current = try? await store.stat(item.path), current.kind == .file else { return nil }
        // Only a version of the snapshot's size can be it, unless an earlier try's bytes may be there.
        guard current.size == comparison.length || sent.sentAny(inode) else { return nil }
        guard let read = try? await store.read(item.path, range: nil, ifMatch: nil, into: comparison) else { return nil }
        let (identical, digest) = comparison.result(size: read.size)
        // With no ETag the next upload would be unconditional.
        if identical, read.etag != nil {
            sent.forget(inode)
            logger.info("the store already holds this version (an answer was lost on the way): no conflict",
                        metadata: ["path": "\(item.path)", "etag": "\(read.etag?.value ?? "-")"])
            do {
                try await ended(copy, .stored(commit: commit, version: read))
            } catch {
                return await failed(item, copy, error, commit: commit)
            }
            return .done
        }
        guard let digest, sent.sent(digest, for: inode), let version = read.etag else { return nil }
        logger.info("the store holds what an earlier upload of this file sent (its answer was lost): replaced",
                    metadata: ["path": "\(item.path)", "etag": "\(version.value)"])
        do {
            guard let entry = try await writeUnlessFolderGone(item, from: snapshot, condition: .ifMatch(version)) else { return nil }
            sent.forget(inode)
            try await ended(copy, .stored(commit: commit, version: entry))
            return .done
        } catch StoreError.versionMismatch {
            return nil  // changed again meanwhile: someone else's
        } catch {
            await rememberSent(snapshot, of: inode, ifItMayHaveArrived: error)
            return await failed(item, copy, error, commit: commit)
        }
    }

    /// A deleted folder above the item is made again (a remote delete never costs a local change);
    /// a file in its place sends the item under `FOLDER (conflict DATE)/…`. After
    /// `maximumFolderRemakes` rounds the upload counts as refused and the change is kept.
    func keepWhereFoldersWent(_ item: Item, _ copy: LocalCopy, commit: UInt64, snapshot: String) async -> Outcome {
        guard !handedOver else { return .done }
        do {
            var target = StorePath.root
            let folders = item.path.components.dropLast()
            for (index, name) in folders.enumerated() {
                var folder = try target.appending(name)
                if try await !ensureFolder(folder) {
                    folder = try await conflictFolder(for: name, in: target)
                    logger.warning("a folder became a file on the store; changes below it kept in a conflict folder",
                                   metadata: ["path": "\(item.path)", "kept under": "\(folder)", "depth": "\(index)"])
                }
                target = folder
            }
            let destination = try target.appending(item.name)
            guard destination != item.path else {
                let entry = try await store.write(destination, fromLocalFile: snapshot, condition: .mustNotExist,
                                                  attributes: item.storeAttributes)
                try await ended(copy, .stored(commit: commit, version: entry))
                return .done
            }
            let (keptAs, kept) = try await keep(item, at: destination, in: target, from: snapshot)
            try await ended(copy, .keptAsConflict(commit: commit, conflictCopy: "\(keptAs)", storeVersion: nil))
            logger.warning("kept where its folder went", metadata: ["path": "\(item.path)", "kept as": "\(keptAs)", "bytes": "\(kept.size)"])
            return .done
        } catch {
            switch error {
            case StoreError.versionMismatch, StoreError.alreadyExists:
                return await keepBoth(item, copy, commit: commit, snapshot: snapshot)
            case StoreError.notFound, StoreError.notADirectory:
                let remakes = (folderRemakes[item.inode] ?? 0) + 1
                folderRemakes[item.inode] = remakes
                guard remakes >= Self.maximumFolderRemakes else { return await failed(item, copy, error, commit: commit) }
                return await failed(item, copy, StoreError.refused(
                    status: 404, message: "PUT \(item.path): the store found no folder for it \(remakes) times, "
                        + "each time after it was made again (\(error))"), commit: commit)
            default:
                folderRemakes[item.inode] = nil  // "in a row": another failure breaks the run
                return await failed(item, copy, error, commit: commit)
            }
        }
    }

    private func keep(_ item: Item, at destination: StorePath, in folder: StorePath, from snapshot: String) async throws(StoreError) -> (StorePath, RemoteEntry) {
        do {
            return (destination, try await store.write(destination, fromLocalFile: snapshot, condition: .mustNotExist))
        } catch .alreadyExists {
            let kept = try await uploadConflictCopy(of: item, in: folder, from: snapshot)
            return (try folder.appending(kept.0), kept.1)
        }
    }

    func writeUnlessFolderGone(_ item: Item, from snapshot: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry? {
        do {
            return try await store.write(item.path, fromLocalFile: snapshot, condition: condition,
                                         attributes: item.storeAttributes)
        } catch .notFound, .notADirectory {
            return nil
        }
    }

    /// A file may hold the name (a conflict copy of the same second): then "… 2", "… 3".
    private func conflictFolder(for name: String, in parent: StorePath) async throws(StoreError) -> StorePath {
        let now = clock()
        for attempt in 1...100 {
            let folder = try parent.appending(ConflictName.make(for: name, at: now, attempt: attempt))
            if try await ensureFolder(folder) { return folder }
        }
        throw .alreadyExists(try parent.appending(name))
    }

    private func ensureFolder(_ folder: StorePath) async throws(StoreError) -> Bool {
        do {
            _ = try await store.makeDirectory(folder)
            return true
        } catch .alreadyExists {
            return try await store.stat(folder).isDirectory
        }
    }

    /// A folder is no version of the file: nil, so the next upload only creates.
    private func storeVersion(of path: StorePath) async throws(StoreError) -> RemoteEntry? {
        do {
            let entry = try await store.stat(path)
            return entry.isDirectory ? nil : entry
        } catch .notFound {
            return nil
        }
    }

    /// "… 2", "… 3" for the same second: a kept copy is never replaced.
    private func uploadConflictCopy(of item: Item, in directory: StorePath, from localFile: String) async throws(StoreError) -> (String, RemoteEntry) {
        let now = clock()
        for attempt in 1...100 {
            let name = ConflictName.make(for: item.name, at: now, attempt: attempt)
            do throws(StoreError) {
                return (name, try await store.write(try directory.appending(name), fromLocalFile: localFile, condition: .mustNotExist))
            } catch .alreadyExists {
                continue
            }
        }
        throw .alreadyExists(item.path)
    }
}
