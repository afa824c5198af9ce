import DocFSStore
import Foundation
import Logging

/// When the store moved on: both versions are kept. Ours goes up next to theirs as a conflict
/// copy (`ConflictName`), unless what the store holds is our own upload whose answer was lost
/// (`ownVersionOnStore`); where the item's folder went meanwhile, ours is kept in a folder made
/// again, or beside where the folder was (`keepWhereFoldersWent`).
extension Uploader {
    /// The store changed since the edit began: upload ours as a conflict copy, show theirs.
    func keepBoth(_ item: Item, _ copy: LocalCopy, commit: UInt64, snapshot: String) async -> Outcome {
        guard let parentPath = item.path.parent, let parent = item.parent else {
            return await failed(item, copy, FSError.invalidArgument)
        }
        if let settled = await ownVersionOnStore(item, copy, commit: commit, snapshot: snapshot) { return settled }
        do {
            let (conflictName, kept) = try await uploadConflictCopy(of: item, in: parentPath, from: snapshot)
            do {
                _ = try catalog.createItem(in: parent, name: conflictName, kind: .file, size: kept.size, modified: Timestamp(seconds: kept.modified),
                                           etag: kept.etag, mode: item.mode, state: .placeholder, onStore: true)
            } catch {
                // On the store all the same: the next listing shows it.
                logger.info("the conflict copy waits for the next listing to show", metadata: ["name": "\(conflictName)", "error": "\(error)"])
            }
            let theirs = try await storeVersion(of: item.path)
            try await provider.conflictKept(copy, commit: commit, conflictCopy: conflictName, storeVersion: theirs)
            logger.warning("conflict: the store changed while this file was edited; both versions kept",
                           metadata: ["path": "\(item.path)", "conflict copy": "\(conflictName)"])
            queueCommitMadeMeanwhile(item.inode, copy, after: commit)
            return .done
        } catch {
            return await failed(item, copy, error, commit: commit)
        }
    }

    /// An upload failed in a way that leaves open whether the store took it (its answer was
    /// lost): the snapshot's hash is kept, so that finding that version on the store later is
    /// not taken for someone else's change.
    func rememberSent(_ snapshot: String, of inode: Inode, ifItMayHaveArrived error: StoreError) async {
        guard SentVersions.mayHaveReachedTheStore(error) else { return }
        do {
            let digest = try await Blocking.run { () throws(FSError) in try SentVersions.digest(ofFile: snapshot) }
            sent.remember(digest, for: inode)
        } catch {
            logger.info("cannot hash an upload whose answer was lost", metadata: ["inode": "\(inode)", "error": "\(error)"])
        }
    }

    /// The store holds a version of `item` that this upload did not start from. Before keeping
    /// both, one GET of it tells whether it is ours after all:
    /// - the very bytes being sent (an earlier try of this commit went through and its answer was
    ///   lost): nothing to send, the upload is confirmed as that version;
    /// - the bytes of an earlier try whose answer was lost (`SentVersions`): our own older
    ///   content, which this commit replaces (conditionally on that version, so a change made
    ///   meanwhile is still kept as a conflict).
    /// Nil: someone else's, or it could not be told (then both are kept, as before).
    private func ownVersionOnStore(_ item: Item, _ copy: LocalCopy, commit: UInt64, snapshot: String) async -> Outcome? {
        let inode = item.inode
        guard let comparison = try? SnapshotComparison(snapshot: snapshot),
              let current = try? await store.stat(item.path), current.kind == .file else { return nil }
        // Only a version of the snapshot's size can be it, unless an earlier try's bytes may be there.
        guard current.size == comparison.length || sent.sentAny(inode) else { return nil }
        guard let read = try? await store.read(item.path, range: nil, ifMatch: nil, into: comparison) else { return nil }
        let (identical, digest) = comparison.result(size: read.size)
        // Confirmed only as a version the store names: with no ETag the next upload would be
        // unconditional.
        if identical, read.etag != nil {
            sent.forget(inode)
            logger.info("the store already holds this version (an answer was lost on the way): no conflict",
                        metadata: ["path": "\(item.path)", "etag": "\(read.etag?.value ?? "-")"])
            do {
                if try await !provider.uploaded(copy, commit: commit, as: read) { enqueue(inode) }
            } catch {
                return await failed(item, copy, error)
            }
            return .done
        }
        guard let digest, sent.sent(digest, for: inode), let version = read.etag else { return nil }
        logger.info("the store holds what an earlier upload of this file sent (its answer was lost): replaced",
                    metadata: ["path": "\(item.path)", "etag": "\(version.value)"])
        do {
            guard let entry = try await writeUnlessFolderGone(item, from: snapshot, condition: .ifMatch(version)) else { return nil }
            sent.forget(inode)
            if try await !provider.uploaded(copy, commit: commit, as: entry) { enqueue(inode) }
            return .done
        } catch let error as StoreError {
            if case .versionMismatch = error { return nil }   // changed again meanwhile: someone else's
            await rememberSent(snapshot, of: inode, ifItMayHaveArrived: error)
            return await failed(item, copy, error)
        } catch {
            return await failed(item, copy, error)
        }
    }

    /// The store lost a folder above `item` (deleted elsewhere, or replaced by a file) while
    /// the item had changes here. A deleted folder is made again and the item uploaded into it
    /// (a remote delete never costs a local change). Where a file now stands in a folder's place,
    /// the item goes under `FOLDER (conflict DATE)/…` next to it, with the rest of its path.
    /// A store that still answers "no such folder" after the folders were made again (a path it
    /// will not create, a proxy that answers 404 to every PUT) is not tried forever: after
    /// `maximumFolderRemakes` rounds the upload counts as refused, and the change is kept.
    func keepWhereFoldersWent(_ item: Item, _ copy: LocalCopy, commit: UInt64, snapshot: String) async -> Outcome {
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
                // Folders made again: upload under the item's own path, creating it.
                let entry = try await store.write(destination, fromLocalFile: snapshot, condition: .mustNotExist,
                                                  attributes: item.storeAttributes)
                if try await !provider.uploaded(copy, commit: commit, as: entry) { enqueue(item.inode) }
                return .done
            }
            let (keptAs, kept) = try await keep(item, at: destination, in: target, from: snapshot)
            try await provider.conflictKept(copy, commit: commit, conflictCopy: "\(keptAs)", storeVersion: nil)
            logger.warning("kept where its folder went", metadata: ["path": "\(item.path)", "kept as": "\(keptAs)", "bytes": "\(kept.size)"])
            queueCommitMadeMeanwhile(item.inode, copy, after: commit)
            return .done
        } catch let error as StoreError {
            switch error {
            case .versionMismatch, .alreadyExists:
                return await keepBoth(item, copy, commit: commit, snapshot: snapshot)
            case .notFound, .notADirectory:
                let remakes = (folderRemakes[item.inode] ?? 0) + 1
                folderRemakes[item.inode] = remakes
                guard remakes >= Self.maximumFolderRemakes else { return await failed(item, copy, error) }
                return await failed(item, copy, StoreError.refused(
                    status: 404, message: "PUT \(item.path): the store found no folder for it \(remakes) times, "
                        + "each time after it was made again (\(error))"))
            default:
                folderRemakes[item.inode] = nil  // "in a row": another failure breaks the run
                return await failed(item, copy, error)
            }
        } catch {
            folderRemakes[item.inode] = nil
            return await failed(item, copy, error)
        }
    }

    /// Puts a snapshot at `destination` in a conflict folder, or next to it under a conflict
    /// name when an earlier commit of the item was kept there (`keepBoth` would try the item's
    /// own folder, which is a file on the store).
    private func keep(_ item: Item, at destination: StorePath, in folder: StorePath, from snapshot: String) async throws(StoreError) -> (StorePath, RemoteEntry) {
        do {
            return (destination, try await store.write(destination, fromLocalFile: snapshot, condition: .mustNotExist))
        } catch .alreadyExists {
            let kept = try await uploadConflictCopy(of: item, in: folder, from: snapshot)
            return (try folder.appending(kept.0), kept.1)
        }
    }

    /// The upload itself; nil when the store has no folder to put it in.
    func writeUnlessFolderGone(_ item: Item, from snapshot: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry? {
        do {
            return try await store.write(item.path, fromLocalFile: snapshot, condition: condition,
                                         attributes: item.storeAttributes)
        } catch .notFound, .notADirectory {
            return nil
        }
    }

    /// `FOLDER (conflict DATE)` in `parent`, made unless a folder of that name is there already
    /// (kept there by another item of the same folder). A *file* may hold the name: the conflict
    /// copy of a file named like the folder, kept in the same second (the name was a file here
    /// and a folder on the store, then a folder here and a file on the store). Then "… 2", "… 3":
    /// never a name below which no PUT can succeed.
    private func conflictFolder(for name: String, in parent: StorePath) async throws(StoreError) -> StorePath {
        let now = clock()
        for attempt in 1...100 {
            let folder = try parent.appending(ConflictName.make(for: name, at: now, attempt: attempt))
            if try await ensureFolder(folder) { return folder }
        }
        throw .alreadyExists(try parent.appending(name))
    }

    /// Makes `folder` on the store unless it is there. Returns false when a file stands there.
    private func ensureFolder(_ folder: StorePath) async throws(StoreError) -> Bool {
        do {
            _ = try await store.makeDirectory(folder)
            return true
        } catch .alreadyExists {
            return try await store.stat(folder).isDirectory
        }
    }

    /// The version of the file the store has at `path` now; nil when it has none there. A
    /// folder under the name is no version of the file: taken for one, its missing ETag made
    /// the file's next upload unconditional, and that replaced whatever file another client
    /// put there later (model seed 800018). With nil the item is not on the store, and its
    /// next upload only creates.
    private func storeVersion(of path: StorePath) async throws(StoreError) -> RemoteEntry? {
        do {
            let entry = try await store.stat(path)
            return entry.isDirectory ? nil : entry
        } catch .notFound {
            return nil
        }
    }

    /// Uploads `localFile` next to `item` under the first free conflict name: two conflicts in
    /// the same second get "… 2", "… 3", so a kept copy is never replaced.
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
