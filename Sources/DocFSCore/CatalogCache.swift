import Synchronization

/// Items the catalog read recently, by inode and by name in their folder, so that `lookup` and
/// `getattr` of a listed folder's children are answered from memory, on the FUSE thread,
/// without a database round trip (a reader connection taken from the pool, a queue hop and a
/// statement: ~100 µs, which made `stat` of 5,000 names ten times slower than local disk).
///
/// Coherence: every catalog write goes through `Catalog.write`, which invalidates after its
/// commit — the one row it touched (the copy journal, attributes) or everything (listings,
/// renames, removals, creates). A read that went to the database takes a `ticket` first and
/// may fill the cache only if no write finished since: a row read before a commit can never
/// be stored after that commit's invalidation. A hit in the short window between a commit and
/// its invalidation sees the row as it was a moment earlier, as an uncached read racing the
/// same write could (see `Catalog.quickRead`).
///
/// Negative answers are not kept (the kernel keeps those for the entry timeout), and the cache
/// holds at most `capacity` items: a 100,000-entry folder is served from the database beyond
/// that, and the daemon's memory does not grow with the folder. An item takes ~300 bytes with
/// its strings, and a Swift dictionary keeps room for a third more than it holds: 8,192 items
/// (a folder of 5,000 and then some) cost ~5 MiB; 16,384 cost ~11 MiB, a sixth of the daemon's
/// peak on a 100,000-entry folder.
final class CatalogCache: Sendable {
    /// A folder and a name in it, compared byte for byte as SQLite compares `name` (Swift's
    /// `String ==` would take "é" and "e\u{301}" as one name; the catalog does not).
    struct NameKey: Hashable {
        var parent: Inode
        var name: String

        static func == (a: NameKey, b: NameKey) -> Bool {
            a.parent == b.parent && a.name.utf8.elementsEqual(b.name.utf8)
        }

        func hash(into hasher: inout Hasher) {
            hasher.combine(parent)
            for byte in name.utf8 { hasher.combine(byte) }
        }
    }

    private struct State {
        /// Bumped by every invalidation: a ticket older than this must not fill the cache.
        var generation: UInt64 = 0
        var items: [Inode: Item] = [:]
        /// Name to inode; an entry whose inode is no longer in `items` is simply a miss.
        var names: [NameKey: Inode] = [:]
    }

    /// What a database read took before it began; see `fill`.
    struct Ticket { fileprivate let generation: UInt64 }

    private let state = Mutex(State())
    let capacity: Int

    init(capacity: Int = 8_192) {
        self.capacity = capacity
    }

    func ticket() -> Ticket {
        Ticket(generation: state.withLock { $0.generation })
    }

    func item(_ inode: Inode) -> Item? {
        state.withLock { $0.items[inode] }
    }

    func child(of parent: Inode, named name: String) -> Item? {
        state.withLock { state in
            guard let inode = state.names[NameKey(parent: parent, name: name)], let item = state.items[inode],
                  item.parent == parent, item.name.utf8.elementsEqual(name.utf8) else { return nil }
            return item
        }
    }

    /// Keeps `items`, read from the database after `ticket` was taken, unless a write finished
    /// since (then they may be older than the database, and are dropped).
    func fill<S: Sequence>(_ items: S, ticket: Ticket) where S.Element == Item {
        state.withLock { state in
            guard state.generation == ticket.generation else { return }
            // Names of rows forgotten one by one stay behind; a bound keeps them few.
            if state.names.count > 2 * capacity { state.names.removeAll(keepingCapacity: true) }
            for item in items {
                guard state.items.count < capacity || state.items[item.inode] != nil else { return }
                state.items[item.inode] = item
                if let parent = item.parent {
                    state.names[NameKey(parent: parent, name: item.name)] = item.inode
                }
            }
        }
    }

    func fill(_ item: Item?, ticket: Ticket) {
        guard let item else { return }
        fill(CollectionOfOne(item), ticket: ticket)
    }

    /// One row changed (its name and folder did not): forget it.
    func invalidate(_ inode: Inode) {
        state.withLock { state in
            state.generation &+= 1
            state.items[inode] = nil
        }
    }

    /// Anything may have changed: forget everything.
    func invalidateAll() {
        state.withLock { state in
            state.generation &+= 1
            state.items.removeAll(keepingCapacity: true)
            state.names.removeAll(keepingCapacity: true)
        }
    }

    /// A write that changed no row: only readers racing it are refused.
    func invalidateNothing() {
        state.withLock { $0.generation &+= 1 }
    }

    var count: Int { state.withLock { $0.items.count } }
}
