/// What a store says about one entry: the metadata a placeholder shows.
public struct RemoteEntry: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case file
        case directory
        case symlink(target: String)
        /// A FIFO, socket or device node (see `SpecialFile`): no content, size 0.
        case special(SpecialFile)
    }

    public var path: StorePath
    public var kind: Kind
    /// Size in bytes (0 for directories).
    public var size: Int64
    /// Modification time, seconds since 1970.
    public var modified: Double
    /// The store's version of the content (WebDAV/S3 ETag, or a local fingerprint).
    public var etag: ETag?
    /// POSIX mode bits the store carries, if any (permission bits only).
    public var mode: UInt32?
    /// Owner and group the store carries, if any (see `StoreAttributes`).
    public var owner: UInt32?
    public var group: UInt32?
    /// `modified` is a time a client gave the item (S3's `x-amz-meta-mtime`, in a HEAD or a
    /// GET), not the store's record of when this version was stored (S3's `LastModified`, all
    /// an S3 listing shows). Such a time replaces the one the catalog holds for the same version.
    public var carriesOwnTime: Bool
    /// How many names the store gives this file (hard links, where the store has them: the
    /// local directory store); 1 elsewhere.
    public var links: Int
    /// The store says it can make a preview of this file (`Store.preview(of:side:)`): Nextcloud's
    /// and ownCloud's `has-preview` property, which `docfs serve` answers too. Asked for only
    /// where this is true, so a server that would ignore a preview request and send the whole
    /// file is never asked.
    public var hasPreview: Bool

    public init(path: StorePath, kind: Kind, size: Int64, modified: Double, etag: ETag? = nil, mode: UInt32? = nil,
                owner: UInt32? = nil, group: UInt32? = nil, carriesOwnTime: Bool = false, links: Int = 1, hasPreview: Bool = false) {
        self.path = path
        self.kind = kind
        self.size = size
        self.modified = modified
        self.etag = etag
        self.mode = mode
        self.owner = owner
        self.group = group
        self.carriesOwnTime = carriesOwnTime
        self.links = links
        self.hasPreview = hasPreview
    }

    public var name: String { path.name }
    public var isDirectory: Bool { kind == .directory }
}

/// An opaque content version, compared byte for byte (quotes included, as the server sent it).
public struct ETag: Sendable, Hashable, CustomStringConvertible {
    public var value: String
    public init(_ value: String) { self.value = value }
    public var description: String { value }

    /// Two ETags name the same version, the weak marker (`W/`) aside: a server may mark a tag
    /// weak in one answer and not in the next (Apache, for a second after a change).
    public static func sameVersion(_ a: ETag, _ b: ETag) -> Bool {
        func strong(_ e: ETag) -> Substring { e.value.hasPrefix("W/") ? e.value.dropFirst(2) : Substring(e.value) }
        return strong(a) == strong(b)
    }
}

/// A half-open byte range `[lowerBound, upperBound)`.
public typealias ByteRange = Range<Int64>

/// Continues a listing where the previous page stopped. Opaque to the core.
public struct PageToken: Sendable, Hashable {
    public var value: String
    public init(_ value: String) { self.value = value }
}

/// One page of a listing.
public struct ListPage: Sendable {
    public var entries: [RemoteEntry]
    public var next: PageToken?
    public init(entries: [RemoteEntry], next: PageToken?) {
        self.entries = entries
        self.next = next
    }
}
