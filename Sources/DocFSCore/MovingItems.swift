import Synchronization

/// Items a local rename is moving right now, between the store's move and the catalog's.
///
/// A listing of the old folder asked before the store moved an item, and answered after,
/// no longer shows it there. Applied before the catalog moves the row, it would take the row
/// as deleted elsewhere and drop it, and the rename, done on the store, would fail. While an
/// item is in here no listing drops its row; once the rename moved the row, listings asked
/// before the move leave it alone anyway (`versionAt` is the move's time).
final class MovingItems: Sendable {
    private let moving = Mutex<[Inode: Int]>([:])

    /// Runs `body` with `inode` held as moving. Counted: two renames of one item may overlap
    /// (`Uploader.exclusively` keeps uploads out of a rename, not another rename).
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
