import DocFSStore
import Foundation

/// When copies go: on their last release (`perform`'s `.evict`), after `--evict-delay` or to
/// make room under `--cache-max` (a released clean copy waits in `idle`), when pins change, and
/// when the user asks (`docfs evict`). An eviction deletes the copy and records the item as a
/// placeholder again.
extension Provider {
    /// The copies' lives follow the catalog's pins (after `Catalog.setPinned` on `inodes`, or
    /// on everything held when nil): a pinned copy is kept; an unpinned one nobody uses goes
    /// as on its last release.
    public func pinsChanged(_ inodes: Set<Inode>? = nil) {
        for (inode, entry) in providing where inodes?.contains(inode) ?? true {
            guard let pinned = try? catalog.isPinned(inode), pinned != entry.copy.life.pinned else { continue }
            do {
                let action = try entry.copy.update { $0.pinChanged(pinned) }
                _ = perform(action, on: entry.copy)
            } catch {
                logger.warning("cannot record a pin", metadata: ["inode": "\(inode)", "error": "\(error)"])
            }
        }
    }

    /// Makes `item` a placeholder now (`docfs evict`), unpinned. Refuses (`.busy`, saying
    /// why) a copy that is open, being fetched, or holds changes the store does not have.
    public func evictNow(_ item: Item) throws(FSError) {
        if let entry = providing[item.inode] {
            if let refusal = entry.copy.life.evictionRefusal { throw .busy("\(item.path): \(refusal)") }
            // Unpinned, and evicted whatever the unpin's own action: the user asked for it now.
            _ = try entry.copy.update { $0.pinChanged(false) }
            idle[item.inode] = nil
            evict(entry.copy)
            return
        }
        if item.hasUnsyncedChanges { throw .busy("\(item.path): it has changes the store does not have yet") }
        // A pinned copy kept from an earlier mount, never opened since.
        if item.state == .local { try LocalCopy.evict(at: copyPath(for: item), of: item.inode, in: catalog) }
    }

    /// A released clean copy stays for the retention policy: until `evictDelay` has passed
    /// without a new open, or until `cacheMax` needs its space.
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

    /// The delay of a kept copy ran out: it goes unless it was opened (or released) since.
    private func expire(_ copy: LocalCopy, releasedAt released: ContinuousClock.Instant) {
        guard idle[copy.inode] == released, providing[copy.inode]?.copy === copy else { return }
        guard copy.life.mayExpire else { return }
        idle[copy.inode] = nil
        evict(copy)
    }

    /// Evicts kept copies, least recently released first, until unpinned copies and `incoming`
    /// more bytes fit in `cacheMax`.
    func makeRoom(for incoming: Int64) {
        guard let limit = retention.cacheMax else { return }
        var used = providing.values.reduce(Int64(0)) { sum, entry in
            entry.copy.life.pinned ? sum : sum + entry.copy.allocatedBlocks * 512
        }
        for (inode, _) in idle.sorted(by: { $0.value < $1.value }) {
            guard used + incoming > limit else { return }
            guard let copy = providing[inode]?.copy else { idle[inode] = nil; continue }
            guard copy.life.mayExpire else { idle[inode] = nil; continue }
            used -= copy.allocatedBlocks * 512
            idle[inode] = nil
            evict(copy)
        }
    }

    func evict(_ copy: LocalCopy) {
        let inode = copy.inode
        if providing[inode]?.copy === copy {
            providing[inode]?.fetch.cancel()
            providing[inode] = nil
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

    /// An eviction the catalog could not record (its disk is full) leaves the item shown as
    /// `local` with no copy on disk: it is recorded again a little later, and later still,
    /// until it is, unless the item has a copy again by then (whose life the catalog records).
    /// A restart would reset it anyway.
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
