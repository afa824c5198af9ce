import DocFSStore

/// The inode number the kernel sees. Stable for an item for the catalog's whole life.
public typealias Inode = UInt64

/// One file, directory or symlink of the store, as the catalog knows it: the placeholder's
/// metadata plus the state of its local copy. Identity (`id`, `inode`) is separate from the
/// path, so a rename keeps both.
public struct Item: Sendable, Equatable {
    public static let rootInode: Inode = 1

    public enum Kind: Int, Sendable, Equatable {
        case file = 0
        case directory = 1
        case symlink = 2
        /// Special files (see `SpecialFile`): metadata only, never content.
        case fifo = 3
        case characterDevice = 4
        case blockDevice = 5
        case socket = 6

        /// The kind of a special file of `type`.
        public init(_ type: SpecialFile.FileType) {
            switch type {
            case .fifo: self = .fifo
            case .characterDevice: self = .characterDevice
            case .blockDevice: self = .blockDevice
            case .socket: self = .socket
            }
        }

        /// The special file type of this kind, nil for files, directories and links.
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
    /// A stable identifier (UUID), the `NSFileProviderItemIdentifier` of docfs.
    public var id: String
    /// The parent directory's inode; nil only for the root.
    public var parent: Inode?
    public var name: String
    /// Where the item lives in the store.
    public var path: StorePath
    public var kind: Kind
    public var size: Int64
    public var modified: Timestamp
    public var etag: ETag?
    public var symlinkTarget: String?
    /// Permission bits the store carries, if any.
    public var mode: UInt32?
    public var state: ItemState
    /// Directories: when the children were last listed from the store (nil: never).
    public var listedAt: Double?
    /// Whether the store has this item (false for a file created here and not uploaded yet).
    public var onStore: Bool = true
    /// Owner and group set with chown (nil: the mounting user's).
    public var owner: UInt32?
    public var group: UInt32?
    /// Last access and last status change (nil: the modification time).
    public var accessed: Timestamp?
    public var changed: Timestamp?
    /// Why the last upload failed, while it is retried.
    public var uploadError: String?
    /// The name of the copy kept when the last upload met a newer version on the store.
    public var conflictCopy: String?
    /// The store version the local copy started from (nil without a copy). See `CopyLife`.
    public var baseEtag: ETag?
    /// Writes no close or fsync has handed over yet may be in the local copy.
    public var hasUncommittedWrites = false
    /// The device number of a character or block device (`st_rdev`); 0 otherwise.
    public var rdev: UInt64 = 0
    /// Whether the store confirmed the kind for this version (`kindKnownFor == etag`): false
    /// for a small S3 object a listing could not tell from a link (see `SymlinkProbe`).
    public var kindConfirmed = true
    /// Whether the item lost its name while a handle still had it open: `stat` then shows a
    /// link count of 0, as POSIX keeps such a file alive without a name.
    public var unlinked = false
    /// What kind of failure `uploadError` is (nil with no error, or one recorded before docfs kept it).
    public var uploadTrouble: UploadTrouble?
    /// How many names the store gives this file (hard links on the local store; 1 elsewhere).
    public var links = 1

    public var isDirectory: Bool { kind == .directory }

    /// Whether the item has local changes the store does not have yet.
    public var hasUnsyncedChanges: Bool { state == .modified || state == .uploading || hasUncommittedWrites }
}

/// Where an item's content is. Persisted in the catalog, shown as `user.docfs.state`.
///
/// `placeholder -> downloading -> local -> placeholder` is the provide/evict cycle;
/// `local -> modified -> uploading -> local` is a change going back to the store. A copy is
/// never evicted while `modified` or `uploading`: those states are the upload journal.
/// Directories are always `.directory`: their content is the catalog itself.
public enum ItemState: String, Sendable, Equatable, CaseIterable {
    /// Metadata only: no byte of content on local disk.
    case placeholder
    /// A fetch into the local copy is under way.
    case downloading
    /// The whole content is in the local copy and matches the store.
    case local
    /// The local copy has changes the store does not have yet (committed before close returns).
    case modified
    /// The local copy is being uploaded.
    case uploading
    /// Not a file.
    case directory
}

extension Item {
    /// Whether `other` shows the same content as this: size, time and version. When a fetch
    /// changes one of them, what the kernel cached of the item's attributes is stale.
    public func showsSameContent(as other: Item) -> Bool {
        size == other.size && modified == other.modified && etag == other.etag
    }
}

extension Item {
    /// The mode, time and owner an upload gives the store, where the store carries them.
    public var storeAttributes: StoreAttributes {
        StoreAttributes(mode: mode, modified: modified, owner: owner, group: group)
    }

    /// Whether `other` has the attributes `storeAttributes` gives the store.
    public func sameAttributes(as other: Item) -> Bool {
        mode == other.mode && modified == other.modified && owner == other.owner && group == other.group
    }
}
