import DocFSStore
import Synchronization

/// An open file: which item, the local copy it reads and writes, and how it was opened.
struct OpenFile: Sendable {
    var inode: Inode
    var copy: LocalCopy
    var writable: Bool
    /// The item as it was opened: what `fstat` shows once it is unlinked (POSIX keeps an
    /// open file alive without a name).
    var opened: Item
    /// False for a caller that gets only what is local (`OpenMode.mayFetch`): its reads
    /// of bytes a sparse copy lacks fail instead of fetching them.
    var mayFetch = true
    /// Opened with O_APPEND: its writes land at the copy's end (`OpenMode.append`).
    var appends = false
    /// How far its reads reached: whether it read the file whole (`Prefetcher`).
    let reads = ReadExtent()
}

/// The end of the furthest read through one handle (reads of several threads race to raise it).
final class ReadExtent: Sendable {
    private let end = Atomic<Int64>(0)

    func reached(_ offset: Int64) { end.max(offset, ordering: .relaxed) }
    var furthest: Int64 { end.load(ordering: .relaxed) }
}

/// The open handles, by the number the kernel knows each by. A handle names a copy, not a
/// path: it outlives an unlink or a rename of its item (POSIX), so the table also answers for
/// items that have no name any more.
final class OpenFiles: Sendable {
    private struct Table {
        var next: UInt64 = 1
        var open: [UInt64: OpenFile] = [:]
    }

    private let table = Mutex(Table())

    /// The file open as `handle`, if it still is.
    subscript(handle: UInt64) -> OpenFile? {
        table.withLock { $0.open[handle] }
    }

    /// A new handle for `file`.
    func register(_ file: OpenFile) -> UInt64 {
        table.withLock { table in
            let handle = table.next
            table.next += 1
            table.open[handle] = file
            return handle
        }
    }

    /// Closes `handle`: the file it was, or nil if it was not open.
    func remove(_ handle: UInt64) -> OpenFile? {
        table.withLock { $0.open.removeValue(forKey: handle) }
    }

    /// Closes every handle (the mount is going away): the files they were.
    func removeAll() -> [OpenFile] {
        table.withLock { table in
            defer { table.open.removeAll() }
            return Array(table.open.values)
        }
    }

    /// Whether some handle still writes to `inode`.
    func hasWriter(of inode: Inode) -> Bool {
        table.withLock { $0.open.values.contains { $0.inode == inode && $0.writable } }
    }

    /// The open handles of `inode` lost its name (unlink, or a rename over it): their item
    /// shows no link and the status change time of the unlink, as a local file system's does.
    func markUnlinked(_ inode: Inode, at time: Timestamp) {
        table.withLock { table in
            for (handle, file) in table.open where file.inode == inode {
                table.open[handle]?.opened.unlinked = true
                table.open[handle]?.opened.changed = time
            }
        }
    }

    /// An item unlinked while a handle still has it open, as that handle knows it.
    func unlinkedButOpen(_ inode: Inode) -> Item? {
        table.withLock { table in table.open.values.first { $0.inode == inode }?.opened }
    }
}
