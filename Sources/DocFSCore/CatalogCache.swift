import DocFSStore
import Synchronization

/// A name in a folder, byte for byte, as SQLite compares `name`.
struct ChildName: Hashable {
    var parent: Inode
    var name: FileName
}

/// Recent items by inode and name, so lookups of a listed folder skip the database. A read takes
/// a `ticket` and fills only if no write finished since, so a row read before a commit is never
/// stored after its invalidation. At most `capacity` items; no negative answers.
final class CatalogCache: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var items: [Inode: Item] = [:]
        var names: [ChildName: Inode] = [:]
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
            guard let inode = state.names[ChildName(parent: parent, name: name.fileName)], let item = state.items[inode],
                  item.parent == parent, item.name.utf8.elementsEqual(name.utf8) else { return nil }
            return item
        }
    }

    func fill<S: Sequence>(_ items: S, ticket: Ticket) where S.Element == Item {
        state.withLock { state in
            guard state.generation == ticket.generation else { return }
            // Names of rows forgotten one by one stay behind; a bound keeps them few.
            if state.names.count > 2 * capacity { state.names.removeAll(keepingCapacity: true) }
            for item in items {
                guard state.items.count < capacity || state.items[item.inode] != nil else { return }
                state.items[item.inode] = item
                if let parent = item.parent {
                    state.names[ChildName(parent: parent, name: item.name.fileName)] = item.inode
                }
            }
        }
    }

    func fill(_ item: Item?, ticket: Ticket) {
        guard let item else { return }
        fill(CollectionOfOne(item), ticket: ticket)
    }

    /// Not its name or folder.
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

    /// Only readers racing it are refused.
    func invalidateNothing() {
        state.withLock { $0.generation &+= 1 }
    }

    var count: Int { state.withLock { $0.items.count } }
}
