import DocFSStore
import Synchronization

struct OpenFile: Sendable {
    var inode: Inode
    var copy: LocalCopy
    var writable: Bool
    /// What `fstat` shows once it is unlinked (POSIX keeps it alive without a name).
    var opened: Item
    /// False: reads of bytes a sparse copy lacks fail instead of fetching.
    var mayFetch = true
    var appends = false
    /// Whether it read the file whole (`Prefetcher`).
    let reads = ReadExtent()
}

/// Reads of several threads race to raise it.
final class ReadExtent: Sendable {
    private let end = Atomic<Int64>(0)

    func reached(_ offset: Int64) { end.max(offset, ordering: .relaxed) }
    var furthest: Int64 { end.load(ordering: .relaxed) }
}

/// Handles by kernel number. A handle names a copy, not a path: it outlives unlink or rename.
final class OpenFiles: Sendable {
    private struct Table {
        var next: UInt64 = 1
        var open: [UInt64: OpenFile] = [:]
    }

    private let table = Mutex(Table())

    subscript(handle: UInt64) -> OpenFile? {
        table.withLock { $0.open[handle] }
    }

    func register(_ file: OpenFile) -> UInt64 {
        table.withLock { table in
            let handle = table.next
            table.next += 1
            table.open[handle] = file
            return handle
        }
    }

    /// Nil if it was not open.
    func remove(_ handle: UInt64) -> OpenFile? {
        table.withLock { $0.open.removeValue(forKey: handle) }
    }

    /// The mount is going away.
    func removeAll() -> [OpenFile] {
        table.withLock { table in
            defer { table.open.removeAll() }
            return Array(table.open.values)
        }
    }

    func hasWriter(of inode: Inode) -> Bool {
        table.withLock { $0.open.values.contains { $0.inode == inode && $0.writable } }
    }

    /// Their item shows no link and the unlink's ctime, as a local file system's does.
    func markUnlinked(_ inode: Inode, at time: Timestamp) {
        table.withLock { table in
            for (handle, file) in table.open where file.inode == inode {
                table.open[handle]?.opened.unlinked = true
                table.open[handle]?.opened.changed = time
            }
        }
    }

    func unlinkedButOpen(_ inode: Inode) -> Item? {
        table.withLock { table in table.open.values.first { $0.inode == inode }?.opened }
    }
}
