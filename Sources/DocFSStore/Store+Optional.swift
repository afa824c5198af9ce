import Foundation

/// What a store may carry beyond content: symlinks and POSIX attributes. The defaults say
/// "not supported", so a store that cannot represent them needs no code; the core then keeps
/// attributes in its catalog only and refuses symlinks with `EPERM`.
public struct StoreAttributes: Sendable, Equatable {
    public var mode: UInt32?
    public var modified: Timestamp?
    public var accessed: Timestamp?
    /// Owner and group (`chown`), where the store keeps them: a local directory for real (when
    /// the daemon may chown), S3 as s3fs does (`x-amz-meta-uid`, `x-amz-meta-gid`).
    public var owner: UInt32?
    public var group: UInt32?

    public init(mode: UInt32? = nil, modified: Timestamp? = nil, accessed: Timestamp? = nil, owner: UInt32? = nil, group: UInt32? = nil) {
        self.mode = mode
        self.modified = modified
        self.accessed = accessed
        self.owner = owner
        self.group = group
    }

    public var isEmpty: Bool { mode == nil && modified == nil && accessed == nil && owner == nil && group == nil }

    /// The same without owner and group, for a store that keeps only mode and times.
    public var withoutOwner: StoreAttributes { StoreAttributes(mode: mode, modified: modified, accessed: accessed) }
}

extension Store {
    /// A store that does not count what it sends: an upload shows no progress until it ends.
    public var uploadMeter: UploadMeter? { nil }

    /// A store that needs not know what it moves moves it alike.
    public func move(_ source: StorePath, to target: StorePath, replace: Bool, isDirectory: Bool) async throws(StoreError) -> RemoteEntry {
        try await move(source, to: target, replace: replace)
    }

    /// Creates a symbolic link at `path` pointing to `target` (a string, not resolved).
    public func makeSymlink(_ path: StorePath, target: String) async throws(StoreError) -> RemoteEntry {
        throw .notSupported("symbolic links")
    }

    /// Hard links: only a store on a file system has them (WebDAV and S3 have no second name
    /// for one content, as s3fs and rclone say too).
    public func makeHardLink(_ path: StorePath, to source: StorePath) async throws(StoreError) -> RemoteEntry {
        throw .notSupported("hard links")
    }

    /// Creates a FIFO, socket or device node at `path` (see `SpecialFile`).
    public func makeSpecial(_ path: StorePath, _ special: SpecialFile, mode: UInt32) async throws(StoreError) -> RemoteEntry {
        throw .notSupported("special files")
    }

    /// Uploads content still being written: only a store that can send a body of unknown length.
    public func write(_ path: StorePath, growing content: any GrowingContent, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        throw .notSupported("uploads of unknown length")
    }

    /// Applies permission bits and times to an entry. Returns false when the store cannot
    /// carry them (the caller keeps them locally).
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool {
        false
    }

    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag) async throws(StoreError) -> AttributesSet {
        guard try await stat(path).etag == version else { throw .versionMismatch(path) }
        return try await setAttributes(path, attributes) ? .kept(newVersion: nil) : .notKept
    }

    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        let entry = try await write(path, fromLocalFile: localFile, condition: condition)
        guard !attributes.isEmpty, try await setAttributes(path, attributes) else { return entry }
        // Setting attributes may have given the entry a new version (a local file's ETag
        // follows its mtime): report the version the store has now, if it can be the one written.
        return entry.versionAfterAttributes(try await stat(path))
    }
}

extension Store {
    /// A store that leaves nothing unfinished on the server after a crash records nothing.
    public func keepUnfinishedWork(in directory: String) async {}

    /// Previews: only a store whose server makes them (S3 and a local directory have none).
    public func preview(of path: StorePath, side: Int) async throws(StoreError) -> Data {
        throw .notSupported("previews")
    }
}

extension RemoteEntry {
    /// What a store reports as the version a write (`self`) made, once its attributes were set
    /// in a request of their own: `now`, the version the store shows then (setting attributes
    /// may have named it anew), unless it cannot be the written content. Another size means
    /// another client stored a version in between, and taking that as the write's own would
    /// make it the base the next upload replaces; then `self`, so that the next upload meets
    /// theirs as a conflict. (A version of the same size stored in that moment is not told
    /// apart here.)
    public func versionAfterAttributes(_ now: RemoteEntry) -> RemoteEntry {
        guard now.kind == kind, now.size == size else { return self }
        return now
    }
}
