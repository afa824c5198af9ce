import DocFSStore
import Foundation

/// Folders made ahead of their files. `tar x`, `cp -r` and `git clone` make a folder and then
/// write into it, one folder after another: far from the store each `mkdir` that waits for its
/// MKCOL is a round trip in series (42 of them, 3.4 s of a `tar x` at 80 ms). A folder made in a
/// folder this mount itself made a moment ago is made ahead: `mkdir` returns once the catalog
/// has it (a directory row with `onStore = 0`, which nothing else writes), and its MKCOL goes in
/// the background, after its parent's. The first `mkdir` of a tree still waits for the store,
/// so permission and the name are proven before anything goes ahead, and a name never used in
/// a folder just made is free unless another client races for it.
///
/// What the store must see in order stays in order: uploads below a folder being made wait for
/// it (`startWork`), as do a rename, removal or creation touching it (`exclusively`) and a
/// listing of it (`DirectoryEnumerator`); a listing of its parent keeps its row
/// (`Catalog+Listing`). A kill leaves the row; the next mount makes it before any upload
/// (`remakeFoldersAhead`). A folder that exists already is taken as made; one the store refuses
/// is logged and marked (`user.docfs.error`), and the uploads below it meet the missing folder
/// as they would any folder gone meanwhile.
extension Uploader {
    /// How long after this mount made a folder the folders made in it go ahead.
    static let aheadWindow: Duration = .seconds(10)

    /// A folder this mount made (ahead or not): folders made in it soon after may go ahead.
    func noteFolderMade(_ inode: Inode) {
        let now = ContinuousClock.now
        if foldersMade.count > 4096 { foldersMade = foldersMade.filter { now - $0.value < Self.aheadWindow } }
        foldersMade[inode] = now
    }

    /// Makes a folder at `path` in `parent` ahead when the parent is one this mount made a moment
    /// ago and no rename or removal is changing the path: `create` adds its row (`onStore = 0`),
    /// in the same turn of the actor, so no such change starts in between. Nil: the folder must
    /// be made on the store first.
    func makeAhead(_ path: StorePath, in parent: Inode, create: @Sendable () throws(FSError) -> Item) throws(FSError) -> Item? {
        guard !stopped, let made = foldersMade[parent], ContinuousClock.now - made < Self.aheadWindow,
              !exclusiveHolders.values.contains(where: { Uploader.overlaps(path, $0) }) else { return nil }
        let folder = try create()
        startMaking(folder)
        return folder
    }

    /// Starts making `folder` on the store (its row is in the catalog with `onStore = 0`).
    private func startMaking(_ folder: Item) {
        guard foldersAhead[folder.inode] == nil else { return }
        noteFolderMade(folder.inode)
        // Every folder above it that is being made (the nearest is made after the others).
        let above = aheadPaths.withLock { $0 }.compactMap { inode, path in
            path.components.count < folder.path.components.count && Uploader.overlaps(path, [folder.path]) ? foldersAhead[inode] : nil
        }
        let task = Task { [store, catalog, logger] in
            for parent in above { await parent.value }
            var failures = 0
            var outcome: FolderOutcome
            while true {
                do throws(StoreError) {
                    _ = try await store.makeDirectory(folder.path)
                    outcome = .made(existed: false)
                } catch .alreadyExists {
                    // Another client made it (its content shows at the next listing), or an
                    // earlier attempt whose answer was lost did.
                    let there = try? await store.stat(folder.path)
                    outcome = there?.kind == .directory ? .made(existed: true) : .refused("a file of that name is on the store")
                } catch {
                    guard !self.stopped else {
                        outcome = .leftToTheNextMount
                        break
                    }
                    if error.isTransient {
                        failures += 1
                        try? await Task.sleep(for: self.retryDelays.delay(afterFailures: failures, retryAfter: error.retryAfter,
                                                                          using: &self.jitter))
                        continue
                    }
                    outcome = .refused("\(error)")
                }
                break
            }
            do {
                switch outcome {
                case .made(let existed):
                    try catalog.recordFolderMade(folder.inode, listAgain: existed)
                case .refused(let why):
                    logger.error("cannot make a folder on the store; files written in it are kept as conflicts elsewhere",
                                 metadata: ["path": "\(folder.path)", "error": "\(why)"])
                    try catalog.recordUploadError(of: folder.inode, Uploader.refusedPrefix + why, trouble: .refused)
                case .leftToTheNextMount:
                    break  // its row stays as it is: the next mount makes it
                }
            } catch {
                logger.warning("cannot record a folder made on the store", metadata: ["path": "\(folder.path)", "error": "\(error)"])
            }
            if case .made = outcome {
                await self.folderAheadEnded(folder.inode, made: true)
            } else {
                await self.folderAheadEnded(folder.inode, made: false)
            }
        }
        foldersAhead[folder.inode] = task
        aheadPaths.withLock { $0[folder.inode] = folder.path }
    }

    private func folderAheadEnded(_ inode: Inode, made: Bool) async {
        foldersAhead[inode] = nil
        aheadPaths.withLock { $0[inode] = nil }
        var attributes = attributesWhenMade.removeValue(forKey: inode) ?? StoreAttributes()
        if made, let folder = try? catalog.item(inode) {
            // As a folder made on the store at once: a non-mounting caller's owner goes with it.
            if let owner = folder.owner, owner != geteuid(), attributes.owner == nil { attributes.owner = owner }
            if let group = folder.group, group != getegid(), attributes.group == nil { attributes.group = group }
            if !attributes.isEmpty {
                await AttributeSync.push(attributes, of: folder, to: store, provider: provider, logger: logger)
            }
        }
        startWork()
    }

    /// A `chmod`, `chown` or `touch` of a folder: pushed once the store has it (`tar` sets a
    /// folder's mode and times after its files), at once if it has it already.
    public func pushWhenMade(_ inode: Inode, _ attributes: StoreAttributes) async {
        guard foldersAhead[inode] != nil else {
            if let folder = try? catalog.item(inode) {
                await AttributeSync.push(attributes, of: folder, to: store, provider: provider, logger: logger)
            }
            return
        }
        var merged = attributesWhenMade[inode] ?? StoreAttributes()
        if let mode = attributes.mode { merged.mode = mode }
        if let modified = attributes.modified { merged.modified = modified }
        if let accessed = attributes.accessed { merged.accessed = accessed }
        if let owner = attributes.owner { merged.owner = owner }
        if let group = attributes.group { merged.group = group }
        attributesWhenMade[inode] = merged
    }

    /// Waits until no folder at or above any of `paths` (and, unless `orBelow` is false, below
    /// them) is being made.
    func waitForFoldersBeingMade(overlapping paths: [StorePath], orBelow: Bool = true) async {
        while let pending = aheadPaths.withLock({ folders in
            folders.first { _, folder in paths.contains { Self.waitsFor(folder, $0, orBelow: orBelow) } }?.key
        }).flatMap({ foldersAhead[$0] }) {
            await pending.value
        }
    }

    /// Without entering the actor: whether a folder at or above `path` is being made (an upload,
    /// a stream or a listing of `path` waits for it).
    nonisolated func isBeingMade(atOrAbove path: StorePath) -> Bool {
        aheadPaths.withLock { folders in folders.values.contains { Self.waitsFor($0, path, orBelow: false) } }
    }

    /// Whether what touches `path` waits for `folder` being made: it is at or above `path`, or below it.
    private static func waitsFor(_ folder: StorePath, _ path: StorePath, orBelow: Bool) -> Bool {
        Uploader.overlaps(folder, [path]) && (orBelow || folder.components.count <= path.components.count)
    }

    /// After a kill: the folders a mount made ahead and never saw made, parents first.
    public func remakeFoldersAhead() throws(FSError) {
        let folders = try catalog.foldersNotOnStore().sorted { $0.path.components.count < $1.path.components.count }
        if !folders.isEmpty {
            logger.info("making the folders the last mount made ahead", metadata: ["count": "\(folders.count)"])
        }
        for folder in folders { startMaking(folder) }
    }
}

/// How making a folder ahead ended.
enum FolderOutcome {
    case made(existed: Bool)
    case refused(String)
    /// The mount stopped while the store did not answer.
    case leftToTheNextMount
}
