// DocFileSystem+Lifecycle: start (taking over what the last mount left) and shutdown
// (uploads within a grace, then every clean copy evicted), and the waits that mounting and
// `docfs unmount` use.

import DocFSStore
import Foundation
import Logging

extension DocFileSystem {
    /// Takes over what an earlier mount left (see `CrashRecovery`): clean copies go, committed
    /// changes are uploaded, writes never closed are kept as `NAME (unsaved …)` (a sparse
    /// one's holes fetched first: `UnfilledCopies`). Call before
    /// the filesystem serves anything.
    public func start() async throws(FSError) {
        let bootID = SessionMarker.currentBootID()
        await UnfilledCopies(catalog: catalog, cacheDirectory: cacheDirectory, store: store, logger: logger).fill()
        var recovery = CrashRecovery(catalog: catalog, cacheDirectory: cacheDirectory, logger: logger)
        recovery.machineRestarted = sessionMarker?.machineRestartedUnderAMount(bootID: bootID) ?? false
        let reverted = try recovery.run()
        // Before anything is committed: from now on a machine crash is told from a daemon's.
        try sessionMarker?.markRunning(bootID: bootID)
        try await settleChangesCutShort()
        try await uploader.resumePending()
        // Items whose unsaved writes were set aside show the store's version: ask for its size
        // now, so stat is right at once (a store that is down leaves them to the next listing).
        for item in reverted {
            if let entry = try? await store.stat(item.path), try catalog.item(item.inode)?.state == .placeholder {
                try? catalog.updateMetadata(of: item.inode, from: entry)
            }
        }
    }

    /// Removals and renames the last mount left under way (see `InterruptedChanges`): settled
    /// in the background, asking the store once per change and again every few seconds while
    /// it does not answer; the uploads of the paths they touch wait until then.
    private func settleChangesCutShort() async throws(FSError) {
        let notes = try catalog.changesUnderWay()
        guard !notes.isEmpty else { return }
        let settler = InterruptedChanges(store: store, catalog: catalog, provider: provider, uploader: uploader, logger: logger)
        let holder = await uploader.hold(settler.paths(of: notes))
        let task = Task { [uploader, logger] in
            var open = notes
            var delay = Duration.milliseconds(500)
            while !Task.isCancelled {
                open = await settler.settle(open)
                if open.isEmpty { break }
                logger.info("the store cannot say yet whether changes cut short by the last mount were made",
                            metadata: ["count": "\(open.count)"])
                try? await Task.sleep(for: delay)
                delay = min(delay * 2, .seconds(15))
            }
            await uploader.release(holder)
        }
        settlingChangesCutShort.withLock { $0 = task }
    }

    /// Starts listing the top folder while the mount comes up, when it was never listed and the
    /// first lookup of any name would have to list it anyway (a store that cannot look up one
    /// name alone: WebDAV, a local directory). The first command run on the mount then joins
    /// the listing or finds it done, instead of paying a whole round trip and its parsing
    /// before its first answer. An S3 store, whose lookups need no listing, is left alone: a
    /// bucket's top may hold millions of keys nobody asked for.
    /// Returns the listing's task (nil when none was started).
    @discardableResult
    public func startListingTheTop() -> Task<Void, Never>? {
        guard !store.capabilities.looksUpByStat, let root = try? item(Item.rootInode), root.listedAt == nil else { return nil }
        return Task { [enumerator, logger] in
            do {
                try await enumerator.ensureListed(root)
            } catch {
                // The first lookup lists it again and says what failed.
                logger.debug("listing the top folder at mount failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Waits until every queued upload has been tried (`untilStalled`: or waits for a retry).
    public func waitForUploads(untilStalled: Bool = false) async {
        await uploader.waitUntilIdle(untilStalled: untilStalled)
    }

    /// How many items the catalog holds (`statfs`'s file count).
    public func itemCount() throws(FSError) -> Int {
        try catalog.itemCount()
    }

    /// The mount is going away: wait (at most `uploadGrace`) for pending uploads, then evict
    /// every clean local copy. Unsynced copies stay in the cache and the journal for the next mount.
    public func shutdown(uploadGrace: Duration = .seconds(10)) async {
        pinnedRefresher.stop()
        await prefetcher.stop()
        settlingChangesCutShort.withLock { $0 }?.cancel()
        let handlesLeft = openFiles.removeAll()
        // The holes of changed sparse copies, side by side, for at most the grace in all: else
        // their writes stay uncommitted, and the next mount keeps them as unsaved copies
        // (`UnfilledCopies`).
        let unfilled = handlesLeft.filter { $0.copy.needsFillBeforeCommit }
        if !unfilled.isEmpty {
            await withTaskGroup(of: Bool.self) { group in
                for file in unfilled {
                    group.addTask {
                        do { try await self.completeForCommit(file) } catch {
                            self.logger.info("a changed copy's holes were not filled before the unmount",
                                             metadata: ["path": "\(file.opened.path)", "error": "\(error)"])
                        }
                        return true
                    }
                }
                group.addTask { try? await Task.sleep(for: uploadGrace); return false }
                var filled = 0
                while let done = await group.next(), done {
                    filled += 1
                    if filled == unfilled.count { break }
                }
                group.cancelAll()
            }
        }
        for file in handlesLeft {
            do { _ = try file.copy.commit() } catch {
                logger.warning("cannot commit a copy still open at unmount; the next mount keeps it",
                               metadata: ["path": "\(file.opened.path)", "error": "\(error)"])
            }
        }
        for file in handlesLeft {
            await provider.release(file.inode)
        }
        let uploader = self.uploader
        let drained = await withTaskGroup(of: Bool.self) { group in
            group.addTask { await uploader.waitUntilIdle(untilStalled: true); return true }
            group.addTask { try? await Task.sleep(for: uploadGrace); return false }
            let first = await group.next() ?? false
            // The grace is over: uploads still under way are cancelled, which also ends the
            // wait above (a group waits for all its tasks: an upload that hangs held it forever).
            await uploader.stop()
            group.cancelAll()
            return first
        }
        if !drained { logger.warning("unmounting with uploads still pending; the next mount resumes them") }
        await provider.shutdown()
        // What stays for the next mount is flushed, so that one may trust it after any crash.
        do {
            try catalog.makeDurable()
            try sessionMarker?.markClean()
        } catch {
            logger.warning("cannot flush the local copies kept for the next mount", metadata: ["error": "\(error)"])
        }
    }
}
