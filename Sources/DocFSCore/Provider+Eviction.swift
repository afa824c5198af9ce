/// When copies go: last release, `--evict-delay`, `--cache-max`, pin changes, `docfs evict`.
extension Provider {
    public func pinsChanged(_ inodes: Set<Inode>? = nil) async {
        var needUpload: [Inode] = []
        for (inode, entry) in providing where inodes?.contains(inode) ?? true {
            do {
                let pinned = try catalog.isPinned(inode)
                guard pinned != entry.copy.life.pinned else { continue }
                let action = try entry.copy.pinChanged(pinned)
                if perform(action, on: entry.copy) { needUpload.append(inode) }
            } catch {
                logger.warning("cannot record a pin", metadata: ["inode": "\(inode)", "error": "\(error)"])
            }
        }
        for inode in needUpload { await writeback.uploader?.enqueueUnlessHeld(inode) }
    }

    /// Refuses (`.busy`, saying why) a copy open, being fetched, or holding changes.
    public func evictNow(_ item: Item) throws(FSError) {
        if let entry = providing[item.inode] {
            if let refusal = entry.copy.life.evictionRefusal { throw .busy("\(item.path): \(refusal)") }
            // Evicted whatever the unpin's own action: the user asked for it now.
            _ = try entry.copy.pinChanged(false)
            evict(entry.copy)
            return
        }
        if item.hasUnsyncedChanges { throw .busy("\(item.path): it has changes the store does not have yet") }
        // A pinned copy kept from an earlier mount, never opened since.
        if item.state == .local { try LocalCopy.evict(at: copyPath(for: item), of: item.inode, in: catalog) }
    }

    func keepIdle(_ copy: LocalCopy) {
        let released = ContinuousClock.now
        idle[copy.inode] = released
        if let delay = retention.evictDelay, delay > .zero {
            Task { [weak self] in
                try? await Task.sleep(for: delay)
                await self?.expire(copy, releasedAt: released)
            }
        }
        makeRoom(for: 0)
    }

    private func expire(_ copy: LocalCopy, releasedAt released: ContinuousClock.Instant) {
        guard idle[copy.inode] == released, providing[copy.inode]?.copy === copy else { return }
        guard copy.life.mayExpire else { return }
        evict(copy)
    }

    func makeRoom(for incoming: Int64) {
        guard let limit = retention.cacheMax else { return }
        var used = providing.values.reduce(Int64(0)) { sum, entry in
            entry.copy.life.pinned ? sum : sum + entry.copy.allocatedBlocks * 512
        }
        for (inode, _) in idle.sorted(by: { $0.value < $1.value }) {
            guard used + incoming > limit else { return }
            guard let copy = providing[inode]?.copy, copy.life.mayExpire else { idle[inode] = nil; continue }
            used -= copy.allocatedBlocks * 512
            evict(copy)
        }
    }

    func evict(_ copy: LocalCopy) {
        let inode = copy.inode
        if providing[inode]?.copy === copy {
            providing[inode]?.fetch?.cancel()
            providing[inode] = nil
            idle[inode] = nil
        }
        presentCopies.withLock { copies in
            if copies[inode] === copy { copies[inode] = nil }
        }
        do {
            try copy.evict()
        } catch {
            logger.warning("cannot record eviction; trying again", metadata: ["inode": "\(inode)", "error": "\(error)"])
            recordEvictionLater(inode, after: .seconds(1))
        }
    }

    /// An unrecorded eviction (full disk) is retried later, unless the item has a copy again by then.
    private func recordEvictionLater(_ inode: Inode, after delay: Duration) {
        Task { [weak self] in
            try? await Task.sleep(for: delay)
            await self?.recordEvictionAgain(inode, delay: delay)
        }
    }

    private func recordEvictionAgain(_ inode: Inode, delay: Duration) {
        guard !isShutDown, providing[inode] == nil else { return }
        do {
            try LocalCopy.recordEvicted(inode, in: catalog)
        } catch {
            recordEvictionLater(inode, after: min(delay * 2, .seconds(30)))
        }
    }
}
