import DocFSStore
import GRDB
import Synchronization

/// Which items' shown state (`user.docfs.state`) may have changed, told after each committed
/// write of the catalog: a copy's state, a pin, an upload's error or conflict, a streamed copy
/// completed. (A new item needs no word: a file manager sees it appear, and asks.) Watched in SQLite itself (a transaction observer on the columns that
/// make a state), so no writer of the catalog can forget to tell.
final class StateChangeObserver: TransactionObserver, @unchecked Sendable {
    /// The columns a shown state is made of.
    static let columns: Set<String> = ["state", "pinned", "uploadError", "conflictCopy", "partial"]

    /// Rows changed by the transaction under way (touched on the writer's queue only).
    private var changed: Set<Inode> = []
    private let committed: @Sendable (Set<Inode>) -> Void

    init(_ committed: @escaping @Sendable (Set<Inode>) -> Void) {
        self.committed = committed
    }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
        switch eventKind {
        case .update(let table, let columns): return table == "item" && !columns.isDisjoint(with: Self.columns)
        case .insert, .delete: return false
        }
    }

    func databaseDidChange(with event: DatabaseEvent) {
        changed.insert(Inode(bitPattern: event.rowID))
    }

    func databaseDidCommit(_ db: Database) {
        guard !changed.isEmpty else { return }
        let inodes = changed
        changed.removeAll()
        committed(inodes)
    }

    func databaseDidRollback(_ db: Database) {
        changed.removeAll()
    }
}

extension Catalog {
    /// Calls `handler` after each committed write with the items whose shown state may have
    /// changed, on the writer's queue (keep it short), for as long as the returned observer lives.
    func observeStateChanges(_ handler: @escaping @Sendable (Set<Inode>) -> Void) -> StateChangeObserver {
        let observer = StateChangeObserver(handler)
        db.add(transactionObserver: observer, extent: .observerLifetime)
        return observer
    }
}
