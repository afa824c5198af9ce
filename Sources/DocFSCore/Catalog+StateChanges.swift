import GRDB

/// Items whose shown state may have changed, told after each commit. A transaction observer on
/// the state's columns, so no writer can forget to tell. (New items need no word.)
final class StateChangeObserver: TransactionObserver, @unchecked Sendable {
    static let columns: Set<String> = ["state", "pinned", "uploadError", "conflictCopy", "partial"]

    /// Touched on the writer's queue only.
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
    /// On the writer's queue (keep it short), while the returned observer lives.
    func observeStateChanges(_ handler: @escaping @Sendable (Set<Inode>) -> Void) -> StateChangeObserver {
        let observer = StateChangeObserver(handler)
        db.add(transactionObserver: observer, extent: .observerLifetime)
        return observer
    }
}
