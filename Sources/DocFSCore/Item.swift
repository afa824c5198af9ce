import DocFSStore

/// Stable for an item for the catalog's whole life.
public typealias Inode = UInt64

/// One item as the catalog knows it: metadata plus its copy's state. Identity (`id`, `inode`)
/// is separate from the path, so a rename keeps both.
public struct Item: Sendable, Equatable {
    public static let rootInode: Inode = 1

    public enum Kind: Int, Sendable, Equatable {
        case file = 0
        case directory = 1
        case symlink = 2
        /// Special files: metadata only, never content.
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
    /// Nil only for the root.
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
    /// Directories: when last listed from the store (nil: never).
    public var listedAt: Double?
    /// False for a file created here and not uploaded yet.
    public var onStore: Bool = true
    /// Set with chown (nil: the mounting user's).
    public var owner: UInt32?
    public var group: UInt32?
    /// Nil: the modification time.
    public var accessed: Timestamp?
    public var changed: Timestamp?
    public var uploadError: String?
    /// The copy kept when the last upload met a newer version on the store.
    public var conflictCopy: String?
    /// The version the local copy started from (nil without a copy).
    public var baseEtag: ETag?
    /// Writes no close or fsync has handed over yet may be in the copy.
    public var hasUncommittedWrites = false
    public var rdev: UInt64 = 0
    /// `kindKnownFor == etag`: false for a small S3 object not yet told from a link.
    public var kindConfirmed = true
    /// Lost its name while open: `stat` shows a link count of 0, as POSIX keeps it alive.
    public var unlinked = false
    /// Nil with no error, or one recorded before docfs kept it.
    public var uploadTrouble: UploadTrouble?
    /// Hard links on the local store; 1 elsewhere.
    public var links = 1

    public var isDirectory: Bool { kind == .directory }

    public var hasUnsyncedChanges: Bool { state == .modified || state == .uploading || hasUncommittedWrites }
}

/// Shown as `user.docfs.state`. `placeholder -> downloading -> local -> placeholder` is
/// provide/evict; `local -> modified -> uploading -> local` is a change going back. A copy is
/// never evicted while `modified` or `uploading`: those states are the upload journal.
public enum ItemState: String, Sendable, Equatable, CaseIterable {
    /// No byte of content on local disk.
    case placeholder
    case downloading
    case local
    /// Committed before close returns; the store does not have it yet.
    case modified
    case uploading
    case directory
}

extension Item {
    /// Size, time and version: a fetch that changes one makes the kernel's cached attributes stale.
    public func showsSameContent(as other: Item) -> Bool {
        size == other.size && modified == other.modified && etag == other.etag
    }
}

extension Item {
    /// What an upload gives the store, where the store carries them.
    public var storeAttributes: StoreAttributes {
        StoreAttributes(mode: mode, modified: modified, owner: owner, group: group)
    }

    public func sameAttributes(as other: Item) -> Bool {
        mode == other.mode && modified == other.modified && owner == other.owner && group == other.group
    }
}
