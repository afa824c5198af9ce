import Foundation

/// The one protocol every remote side of docfs speaks.
///
/// It is deliberately small (list, stat, read, write, mkdir, delete, move) so that a local
/// directory, a WebDAV server and an S3 bucket can all map their own protocol onto it, and so
/// that the core can be tested against an in-memory or failure-injecting store. A store knows
/// nothing of the catalog, of local copies or of FUSE.
///
/// Every call may be slow or fail: implementations bound each call in time (their own
/// timeouts) and report failures as `StoreError`, whose cases say whether a retry can help.
public protocol Store: Sendable {
    /// A short, credential-free description of the store, for logs and for naming its catalog.
    var identity: StoreIdentity { get }

    /// What this store can do; the core refuses what it cannot.
    var capabilities: StoreCapabilities { get }

    /// Where the store counts the bytes of a local file it sends (`user.docfs.progress`); nil
    /// when it does not count (see Store+Optional.swift).
    var uploadMeter: UploadMeter? { get }

    /// One page of a directory's children. Pass the previous page's `next` to continue;
    /// a page with `next == nil` is the last. Throws `.notFound` / `.notADirectory`.
    func list(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> ListPage

    /// Metadata of one entry, without its content.
    func stat(_ path: StorePath) async throws(StoreError) -> RemoteEntry

    /// Streams content into `sink`, whole or only `range`, in order, as it arrives.
    ///
    /// When `ifMatch` is given and the entry's version differs, throws `.versionMismatch`
    /// before any byte is delivered (or as soon as the store can tell). Returns the entry's
    /// metadata as the store reported it with the content.
    @discardableResult
    func read(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry

    /// Uploads the whole content of the local file at `localFile` to `path`, if `condition` holds
    /// (else `.versionMismatch` for a changed version, `.alreadyExists` for `.mustNotExist`).
    /// Returns the new entry, with its new version when the store tells it.
    func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry

    /// Uploads `content` while it is still being written, as `write(_:fromLocalFile:condition:)`
    /// does a finished file: the body goes out as the content grows. Nothing shows at `path`
    /// before the content is whole and arrived whole (no torn file, whatever ends the transfer);
    /// `.mustNotExist` and `.always` only. A store that sends `attributes` with the content (S3's
    /// metadata, at the upload's start) reports them in the entry it returns; one that does not
    /// leaves them to `setAttributes`. A store that cannot stream at all: `capabilities.streamsUploads`
    /// is false and the default throws `.notSupported`.
    func write(_ path: StorePath, growing content: any GrowingContent, condition: WriteCondition,
               attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry

    /// Creates one directory; its parent must exist. `.alreadyExists` if it does.
    func makeDirectory(_ path: StorePath) async throws(StoreError) -> RemoteEntry

    /// Removes a file, or an empty directory (`.notEmpty` otherwise).
    func delete(_ path: StorePath, isDirectory: Bool) async throws(StoreError)

    /// Moves a file or directory. With `replace` false an existing target gives `.alreadyExists`.
    func move(_ source: StorePath, to target: StorePath, replace: Bool) async throws(StoreError) -> RemoteEntry

    /// `move`, told whether the source is a directory, as the caller knows (a WebDAV server
    /// wants a folder's URLs to end in `/`). Default: `move(_:to:replace:)`.
    func move(_ source: StorePath, to target: StorePath, replace: Bool, isDirectory: Bool) async throws(StoreError) -> RemoteEntry

    /// Creates a symbolic link (default: `.notSupported`, see Store+Optional.swift).
    func makeSymlink(_ path: StorePath, target: String) async throws(StoreError) -> RemoteEntry

    /// Gives the file at `source` a second name, `path` (a hard link; default: `.notSupported`,
    /// see Store+Optional.swift). Returns the entry at `path`, whose `links` counts both.
    func makeHardLink(_ path: StorePath, to source: StorePath) async throws(StoreError) -> RemoteEntry

    /// Creates a FIFO, socket or device node with permission bits `mode` (default:
    /// `.notSupported`, see Store+Optional.swift; the core then keeps it in its catalog only).
    func makeSpecial(_ path: StorePath, _ special: SpecialFile, mode: UInt32) async throws(StoreError) -> RemoteEntry

    /// Applies mode and times where the store can carry them (default: returns false).
    func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool

    /// `setAttributes` on the file's version `version` only (`.versionMismatch` when another is
    /// there), saying which version the change made where the store knows it for certain; a
    /// stat after the change may find another client's. Default: a stat, then `setAttributes`,
    /// the new version unknown.
    func setAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag) async throws(StoreError) -> AttributesSet

    /// Uploads like `write(_:fromLocalFile:condition:)` and gives the new content `attributes`
    /// where the store can carry them. The default writes, then calls `setAttributes`; a store
    /// that can send them with the content (S3 metadata) overrides it and saves a round trip.
    func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition,
               attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry

    /// Records, in `directory` (the mount's own), work the store leaves on the server while it
    /// runs and must finish or undo even after a crash (S3: multipart uploads under way), and
    /// undoes what an earlier run recorded there and never finished. Default: nothing.
    func keepUnfinishedWork(in directory: String) async

    /// A small picture of the file at `path` (an image or a video), made by the store, fitting in
    /// `side` × `side` pixels, as PNG bytes: so a file manager shows a thumbnail of a placeholder
    /// without its content being downloaded. Only for entries whose listing said `hasPreview`.
    /// Default (and `capabilities.previews` false): `.notSupported`, see Store+Optional.swift.
    func preview(of path: StorePath, side: Int) async throws(StoreError) -> Data
}

/// When an upload may go ahead.
public enum WriteCondition: Sendable, Equatable {
    /// Unconditionally.
    case always
    /// Only while the store still has this version (WebDAV `If-Match`, S3 conditional write).
    case ifMatch(ETag)
    /// Only if nothing exists at the path yet (`If-None-Match: *`).
    case mustNotExist
}

/// Where downloaded bytes go. Implemented by the core's local copy; a store calls `write`
/// with consecutive chunks, each at its absolute offset in the file.
public protocol ContentSink: Sendable {
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError)
}

/// What a store supports beyond reading.
public struct StoreCapabilities: Sendable, Equatable {
    public var canWrite: Bool
    public var canRename: Bool
    public var hasRangeReads: Bool
    /// How the core learns that an entry is a symbolic link.
    public var symlinkDiscovery: SymlinkDiscovery
    /// Whether a lookup in a folder never listed asks `stat` of the one name instead of listing
    /// the folder first: where a listing costs a request per 1,000 names and `stat` a request
    /// or two whatever the folder's size (S3: HEAD of the key, then a 1-key listing of `name/`,
    /// as mountpoint-s3 does).
    public var looksUpByStat: Bool
    /// Whether an upload can start before its length is known (`write(_:growing:condition:)`):
    /// WebDAV (a chunked PUT to a temporary name, then a MOVE), S3 (a multipart upload fed part by part).
    public var streamsUploads: Bool
    /// Whether `move` of a file is two requests, a copy to the new name and then a deletion of
    /// the old one (S3: CopyObject, DeleteObject), so that a client killed between them leaves
    /// the file under both names.
    public var renamesByCopying: Bool
    /// Whether the store makes previews of images and videos (`preview(of:side:)`) for the
    /// entries its listings mark `hasPreview` (WebDAV: Nextcloud, ownCloud, `docfs serve`).
    public var previews: Bool
    /// Whether `setAttributes` of a folder can keep anything (S3: a folder is a prefix, or a
    /// marker written once, with no metadata to change): where not, none is asked for.
    public var keepsFolderAttributes: Bool

    public init(canWrite: Bool, canRename: Bool, hasRangeReads: Bool, symlinkDiscovery: SymlinkDiscovery = .inListings,
                looksUpByStat: Bool = false, streamsUploads: Bool = false, renamesByCopying: Bool = false, previews: Bool = false,
                keepsFolderAttributes: Bool = true) {
        self.canWrite = canWrite
        self.canRename = canRename
        self.hasRangeReads = hasRangeReads
        self.symlinkDiscovery = symlinkDiscovery
        self.looksUpByStat = looksUpByStat
        self.streamsUploads = streamsUploads
        self.renamesByCopying = renamesByCopying
        self.previews = previews
        self.keepsFolderAttributes = keepsFolderAttributes
    }
}

/// Where a store shows that an entry is a symbolic link.
public enum SymlinkDiscovery: Sendable, Equatable {
    /// Listings give every entry its true kind (a local directory; a store without links).
    case inListings
    /// Listings show links as small files; only `stat` tells (S3, whose ListObjectsV2 carries
    /// no metadata: a link is an object whose `x-amz-meta-mode` says S_IFLNK). A listed file of
    /// 1 to `maximumTargetBytes` bytes may be a link.
    case byStat(maximumTargetBytes: Int64)
}

/// A credential-free name for a store: its scheme and location, e.g. `webdav http://127.0.0.1:8080/docs`.
public struct StoreIdentity: Sendable, Hashable, CustomStringConvertible {
    public var kind: String
    public var location: String
    public init(kind: String, location: String) {
        self.kind = kind
        self.location = location
    }
    public var description: String { "\(kind) \(location)" }
}
