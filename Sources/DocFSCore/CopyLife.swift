import DocFSStore

/// The life of one item's local copy, from first open to eviction: the one place that decides
/// what happens to it. Events return an `Action`; `LocalCopy` holds and records it, `Provider`
/// acts. Rules:
/// - uploads are conditional on `base`, which listings never move, so a change elsewhere
///   meets ours as a conflict and both are kept;
/// - only committed content is uploaded; uncommitted writes survive a crash as an unsaved copy;
/// - a copy is never evicted while open, dirty or uploading, nor on last release when pinned;
/// - an upload confirms the commit it sent, not whatever the copy holds by then.
public struct CopyLife: Sendable, Equatable {
    public enum Content: Sendable, Equatable {
        case fetching
        /// Every byte is local, or a streamed copy's reads fetch what it lacks.
        case present
    }

    public private(set) var content: Content
    public private(set) var openCount = 0
    /// The store version the copy started from; nil for a new file. (Whether the store has the
    /// item is the catalog's `onStore`.)
    public private(set) var base: ETag?
    /// A new file: until an upload is confirmed, uploads may only create the item (`If-None-Match: *`).
    /// Not the same as a nil `base`, which a store without ETags also gives.
    public private(set) var startedFromNothing = false
    public private(set) var uncommitted = false
    /// A close handed writes over but the sparse copy's other bytes could not be fetched: the
    /// uploader fetches, commits and uploads. In memory only (after a restart: unsaved writes).
    public private(set) var awaitingFill = false
    /// Bumped by every close/fsync that handed over changes.
    public private(set) var committed: UInt64 = 0
    /// Also when it was kept as a conflict copy.
    public private(set) var uploaded: UInt64 = 0
    public private(set) var uploading: UInt64?
    /// Unlinked while open: nothing to upload, evict on the last release.
    public private(set) var removed = false
    /// `docfs pin`, `user.docfs.pinned`: a release keeps it.
    public private(set) var pinned = false

    public init(content: Content, base: ETag?, startedFromNothing: Bool = false, pinned: Bool = false) {
        self.content = content
        self.base = base
        self.startedFromNothing = startedFromNothing
        self.pinned = pinned
    }

    /// Taken up by a new mount: the copy on disk is present; nothing holds it open yet.
    public init(recorded base: ETag?, startedFromNothing: Bool, committed: UInt64, uploaded: UInt64, uncommitted: Bool,
                pinned: Bool = false) {
        self.init(content: .present, base: base, startedFromNothing: startedFromNothing, pinned: pinned)
        self.committed = committed
        self.uploaded = uploaded
        self.uncommitted = uncommitted
    }

    /// Content the store does not have: never evict.
    public var isDirty: Bool { !removed && (uncommitted || committed != uploaded) }

    /// The first condition of every eviction.
    public var isUnused: Bool { openCount == 0 && !isDirty && uploading == nil }

    /// What retention keeps after the last release, and what a store-side change may take away.
    public var isIdle: Bool { isUnused && !removed && content == .present }

    /// What a delay running out or `--cache-max` evicts.
    public var mayExpire: Bool { isIdle && !pinned }

    public var state: ItemState {
        if content == .fetching { return .downloading }
        if uploading != nil { return .uploading }
        return isDirty ? .modified : .local
    }

    /// What the catalog keeps (what a restart needs). `openCount`, `pinned` and `removed` live in
    /// memory only, so an open or release that leaves the copy in use records nothing.
    public struct Recorded: Equatable, Sendable {
        var state: ItemState
        var base: ETag?
        var startedFromNothing: Bool
        var committed: UInt64
        var uploaded: UInt64
        var uncommitted: Bool
    }

    public var recorded: Recorded {
        Recorded(state: state, base: base, startedFromNothing: startedFromNothing, committed: committed, uploaded: uploaded,
                 uncommitted: uncommitted)
    }

    public enum Action: Sendable, Equatable {
        case none
        case upload
        /// Delete the copy; the item is a placeholder again.
        case evict
    }

    // MARK: Events

    public mutating func opened() { openCount += 1 }

    /// Its fetch failed, or it stopped waiting.
    public mutating func openAbandoned() { openCount = max(openCount - 1, 0) }

    public mutating func fetched(etag: ETag?) {
        content = .present
        base = etag
        startedFromNothing = false
    }

    public mutating func released() -> Action {
        openCount = max(openCount - 1, 0)
        return settle()
    }

    /// Recorded before the bytes land.
    public mutating func changed() { uncommitted = true }

    public mutating func committedChanges() {
        guard uncommitted else { return }
        uncommitted = false
        awaitingFill = false
        committed += 1
    }

    public mutating func commitAwaitsFill() {
        guard uncommitted else { return }
        awaitingFill = true
    }

    /// The lacking bytes of the base version could not be fetched (the store has another version
    /// or none there) and stay zeros: the copy may only create the item, never replace what stands
    /// there (it may be the very bytes lost).
    public mutating func versionLost() {
        startedFromNothing = true
    }

    /// Returns false when there is nothing to send.
    public mutating func uploadStarted() -> Bool {
        guard isDirty, !uncommitted, uploading == nil else { return false }
        uploading = committed
        return true
    }

    public mutating func uploaded(_ sent: UInt64, etag: ETag?) -> Action {
        uploading = nil
        uploaded = max(uploaded, sent)
        base = etag
        startedFromNothing = false
        return settle()
    }

    /// The base stays the old version, so later uploads become conflict copies too.
    public mutating func conflictKept(_ sent: UInt64) -> Action {
        uploading = nil
        uploaded = max(uploaded, sent)
        return settle()
    }

    /// Attributes set gave a new version: rebase, or the next upload meets itself as a conflict.
    public mutating func rebased(from old: ETag, to new: ETag) {
        if base == old { base = new }
    }

    public mutating func uploadFailed() {
        uploading = nil
    }

    /// An open copy lives on for its handles (POSIX); nothing is uploaded.
    public mutating func removedLocally() -> Action {
        removed = true
        uncommitted = false
        awaitingFill = false
        return settle()
    }

    /// Unpinned and unused, it goes as on a last release.
    public mutating func pinChanged(_ pinned: Bool) -> Action {
        self.pinned = pinned
        return settle()
    }

    /// `docfs evict`: nil if it may go ahead, else why not.
    public var evictionRefusal: String? {
        if removed { return nil }
        if isDirty || uploading != nil { return "it has changes the store does not have yet" }
        if openCount > 0 { return "it is open" }
        if content == .fetching { return "it is being downloaded" }
        return nil
    }

    private func settle() -> Action {
        guard openCount == 0, uploading == nil, content == .present || removed else { return .none }
        if removed { return .evict }
        if uncommitted { return awaitingFill ? .upload : .none }  // a failed commit: kept, the next mount saves it
        if isDirty { return .upload }
        return pinned ? .none : .evict
    }
}
