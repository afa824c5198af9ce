import DocFSCore
import Glibc

/// The children of an open directory as opendir saw them: names, inodes and file types, so
/// that successive readdir calls see one consistent listing with stable offsets.
///
/// Compact on purpose: one byte buffer of NUL-terminated names and three flat arrays, about
/// 14 bytes plus the name per entry, with no Swift `String` or `stat` per entry. (A snapshot of
/// `String`, inode and `stat` took about 180 bytes per entry: 18 MiB for a 100,000-entry folder,
/// held as long as `ls` kept the folder open.) readdirplus reads each entry's attributes from the
/// catalog when it hands the entry out, so they are as new as the reply.
struct DirectorySnapshot: Sendable {
    /// What readdir may tell of an entry's type.
    enum EntryType: UInt8, Sendable {
        /// `.` and `..`.
        case directoryLink = 0
        /// A child; its type comes from its attributes.
        case child = 1
        /// A child whose kind is still to be confirmed (see `SymlinkProbe`): DT_UNKNOWN and no
        /// attributes, so that `stat` looks it up.
        case unconfirmed = 2
    }

    private var names: [UInt8] = []
    private var starts: [UInt32] = []
    private var inodes: [Inode] = []
    private var types: [EntryType] = []
    /// The `S_IFMT` bits of each child, as opendir saw it (DT_* for plain readdir).
    private var formats: [UInt16] = []

    var count: Int { inodes.count }

    mutating func append(name: String, inode: Inode, type: EntryType, format: mode_t) {
        starts.append(UInt32(names.count))
        names.append(contentsOf: name.utf8)
        names.append(0)
        inodes.append(inode)
        types.append(type)
        // An unconfirmed kind is no type to tell: DT_UNKNOWN, so that `stat` looks it up.
        formats.append(type == .unconfirmed ? 0 : UInt16(truncatingIfNeeded: format & S_IFMT))
    }

    func inode(at index: Int) -> Inode { inodes[index] }
    func type(at index: Int) -> EntryType { types[index] }
    func format(at index: Int) -> mode_t { mode_t(formats[index]) }

    /// Calls `body` with entry `index`'s name as a C string.
    func withName<T>(at index: Int, _ body: (UnsafePointer<CChar>) -> T) -> T {
        names.withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.advanced(by: Int(starts[index])).withMemoryRebound(to: CChar.self, capacity: 1, body)
        }
    }
}
