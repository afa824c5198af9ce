import DocFSStore
import Logging

extension DocFileSystem {
    /// See `CrashRecovery`. Call before serving anything.
    public func start() async throws(FSError) {
        let bootID = SessionMarker.currentBootID()
        await UnfilledCopies(catalog: catalog, cacheDirectory: cacheDirectory, store: store, logger: logger).fill()
        var recovery = CrashRecovery(catalog: catalog, cacheDirectory: cacheDirectory, logger: logger)
        recovery.machineRestarted = sessionMarker?.machineRestartedUnderAMount(bootID: bootID) ?? false
        let reverted = try recovery.run()
        // Before anything is committed: from now on a machine crash is told from a daemon's.
        try sessionMarker?.markRunning(bootID: bootID)
        try await settleChangesCutShort()
        // Before the uploads below them (which wait for them).
        try await uploader.remakeFoldersAhead()
        try await uploader.resumePending()
        // Set-aside items show the store's version: ask its size now, so stat is right at once.
        for item in reverted {
            if let entry = try? await store.stat(item.path), try catalog.item(item.inode)?.state == .placeholder {
                do {
                    try catalog.updateMetadata(of: item.inode, from: entry)
                } catch {
                    logger.warning("cannot record the store's size of a set-aside file", metadata: ["path": "\(item.path)", "error": "\(error)"])
                }
            }
        }
    }

    /// In the background; uploads of the paths they touch wait until then.
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

    /// On stores whose first lookup lists the top folder anyway (not S3: millions of keys), so the
    /// first command joins the listing. Nil when none was started.
    @discardableResult
    public func startListingTheTop() -> Task<Void, Never>? {
        guard !store.capabilities.looksUpByStat, let root = try? item(Item.rootInode), root.listedAt == nil else { return nil }
        return Task { [enumerator, logger] in
            do {
                try await enumerator.ensureListed(root)
            } catch {
                logger.debug("listing the top folder at mount failed", metadata: ["error": "\(error)"])
            }
        }
    }

    public func waitForUploads(untilStalled: Bool = false) async {
        await uploader.waitUntilIdle(untilStalled: untilStalled)
    }

    public func itemCount() throws(FSError) -> Int {
        try catalog.itemCount()
    }

    /// Unsynced copies stay in the cache and journal for the next mount.
    public func shutdown(uploadGrace: Duration = .seconds(10)) async {
        pinnedRefresher.stop()
        await prefetcher.stop()
        settlingChangesCutShort.withLock { $0 }?.cancel()
        let handlesLeft = openFiles.removeAll()
        // Within the grace; else the next mount keeps their writes as unsaved copies.
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
            // Cancelling uploads also ends the wait above (a hung upload would hold it forever).
            await uploader.stop()
            group.cancelAll()
            return first
        }
        if !drained { logger.warning("unmounting with uploads still pending; the next mount resumes them") }
        await provider.shutdown()
        // Flushed, so the next mount may trust what stays after any crash.
        do {
            try catalog.makeDurable()
            try sessionMarker?.markClean()
        } catch {
            logger.warning("cannot flush the local copies kept for the next mount", metadata: ["error": "\(error)"])
        }
    }
}
