/// A FIFO, a Unix socket or a device node: an entry with a type, permission bits and, for a
/// device, its device number, and never any content. Build tools, package managers,
/// `tar -x` of a system tree and `rsync -a` make them; s3fs keeps them on S3 (an empty object
/// whose `x-amz-meta-mode` carries the type bits, `x-amz-meta-rdev` the device number), so a
/// store shared with it shows them as what they are. The kernel itself serves opens of such
/// an inode (a pipe, the host's device): docfs only keeps its metadata.
public struct SpecialFile: Sendable, Hashable {
    /// The `st_mode` type bits of each kind (S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK).
    public enum FileType: UInt32, Sendable, CaseIterable {
        case fifo = 0o010000
        case characterDevice = 0o020000
        case blockDevice = 0o060000
        case socket = 0o140000

        public static let mask: UInt32 = 0o170000

        /// The type `mode`'s type bits name, if they name a special file.
        public init?(mode: UInt32) {
            self.init(rawValue: mode & Self.mask)
        }

        public var isDevice: Bool { self == .characterDevice || self == .blockDevice }
    }

    public var type: FileType
    /// The device number (`st_rdev`, Linux's encoding); 0 for FIFOs and sockets.
    public var rdev: UInt64

    public init(type: FileType, rdev: UInt64 = 0) {
        self.type = type
        self.rdev = type.isDevice ? rdev : 0
    }
}
