import Synchronization

/// Items between the store's move and the catalog's: a listing asked before the move would drop
/// the row as deleted elsewhere, failing the rename. No listing drops a row while it is here.
final class MovingItems: Sendable {
    private let moving = Mutex<[Inode: Int]>([:])

    /// Counted: two renames of one item may overlap.
    func whileMoving<T, E: Error>(_ inode: Inode, _ body: () async throws(E) -> T) async throws(E) -> T {
        moving.withLock { $0[inode, default: 0] += 1 }
        defer {
            moving.withLock { moving in
                if let count = moving[inode], count > 1 { moving[inode] = count - 1 } else { moving[inode] = nil }
            }
        }
        return try await body()
    }

    func contains(_ inode: Inode) -> Bool {
        moving.withLock { $0[inode] != nil }
    }
}
