import Synchronization

/// Recently read items by inode and by name, so lookup and getattr of a listed folder are
/// answered from memory (a database read is ~100 µs).
/// Coherence: every write invalidates after its commit (one row or all). A database read takes
/// a `ticket` first and may fill only if no write finished since, so a row read before a
/// commit is never stored after its invalidation. Negative answers are not kept, and at most
/// `capacity` items are (about 5 MiB per 8,192), so memory does not grow with a folder.
final class CatalogCache: Sendable {
    /// Byte for byte, as SQLite compares `name` (Swift's `==` would merge "é" and "e\u{301}").
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
        /// Bumped by every invalidation: an older ticket must not fill the cache.
        var generation: UInt64 = 0
        var items: [Inode: Item] = [:]
        /// An entry whose inode is no longer in `items` is a miss.
        var names: [NameKey: Inode] = [:]
    }

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

    /// Dropped if a write finished since `ticket`: they may be older than the database.
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

    /// One row changed, not its name or folder.
    func invalidate(_ inode: Inode) {
        state.withLock { state in
            state.generation &+= 1
            state.items[inode] = nil
        }
    }

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
