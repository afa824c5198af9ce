import DocFSStore

/// Never reused for the catalog's life.
public typealias Inode = UInt64

/// Metadata plus its copy's state. Identity is separate from the path, so a rename keeps it.
public struct Item: Sendable, Equatable {
    public static let rootInode: Inode = 1

    public enum Kind: Int, Sendable, Equatable {
        case file = 0
        case directory = 1
        case symlink = 2
        case fifo = 3
        case characterDevice = 4
        case blockDevice = 5
        case socket = 6

        public init(_ type: SpecialFile.FileType) {
            switch type {
            case .fifo: self = .fifo
            case .characterDevice: self = .characterDevice
            case .blockDevice: self = .blockDevice
            case .socket: self = .socket
            }
        }

        public var specialType: SpecialFile.FileType? {
            switch self {
            case .fifo: return .fifo
            case .characterDevice: return .characterDevice
            case .blockDevice: return .blockDevice
            case .socket: return .socket
            case .file, .directory, .symlink: return nil
            }
        }
    }

    public var inode: Inode
    /// A stable UUID, the `NSFileProviderItemIdentifier` of docfs.
    public var id: String
    public var parent: Inode?
    public var name: String
    public var path: StorePath
    public var kind: Kind
    public var size: Int64
    public var modified: Timestamp
    public var etag: ETag?
    public var symlinkTarget: String?
    public var mode: UInt32?
    public var state: ItemState
    /// Nil: never listed.
    public var listedAt: Double?
    /// False for a file created here and not uploaded yet.
    public var onStore: Bool = true
    /// Nil: the mounting user's.
    public var owner: UInt32?
    public var group: UInt32?
    /// Nil: the modification time.
    public var accessed: Timestamp?
    public var changed: Timestamp?
    public var uploadError: String?
    public var conflictCopy: String?
    /// Nil without a copy.
    public var baseEtag: ETag?
    public var hasUncommittedWrites = false
    public var rdev: UInt64 = 0
    /// False for a small S3 object not yet told from a link.
    public var kindConfirmed = true
    /// Lost its name while open: `stat` shows 0 links.
    public var unlinked = false
    public var uploadTrouble: UploadTrouble?
    public var links = 1
    /// Kept local (`docfs pin`); what is added to a pinned folder is pinned too.
    public var pinned = false

    public var isDirectory: Bool { kind == .directory }

    public var hasUnsyncedChanges: Bool { state == .modified || state == .uploading || hasUncommittedWrites }
}

/// `placeholder -> downloading -> local` is provide/evict; `local -> modified -> uploading ->
/// local` a change going back. `modified` and `uploading` are the journal: never evicted.
public enum ItemState: String, Sendable, Equatable, CaseIterable {
    case placeholder
    case downloading
    case local
    case modified
    case uploading
    case directory
}

extension Item {
    /// A fetch that changes size, time or version makes the kernel's cached attributes stale.
    public func showsSameContent(as other: Item) -> Bool {
        size == other.size && modified == other.modified && etag == other.etag
    }

    public var storeAttributes: StoreAttributes {
        StoreAttributes(mode: mode, modified: modified, owner: owner, group: group)
    }

    public func sameAttributes(as other: Item) -> Bool {
        mode == other.mode && modified == other.modified && owner == other.owner && group == other.group
    }
}
