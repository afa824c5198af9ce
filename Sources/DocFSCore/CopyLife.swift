import DocFSStore

/// The life of one item's local copy, from the first open to the eviction: the one place that
/// decides what happens to a copy. A plain value: every event changes it and returns what the
/// caller must do (`Action`); `LocalCopy` holds it and persists it in the catalog before it takes
/// the new life of every event that changes what the catalog keeps of it (`recorded`,
/// `LocalCopy.changeLife`), and `Provider` performs the actions.
///
///     placeholder ─open─▶ fetching ─fetched─▶ present(base) ─write─▶ dirty ─commit─▶ committed(n)
///        ▲                                        ▲                                     │
///        └──────────── evict (last release, ◀─────┴──── uploaded(n, etag) / conflictKept(n) ◀─ uploading(n)
///                      clean, no upload)
///
/// The rules it makes hold:
/// - uploads are conditional on `base`, the store version the copy started from; a listing
///   never moves it (it moves the catalog's `etag`), so a change made elsewhere meets ours as a
///   conflict and both are kept;
/// - only committed content (what a close or fsync handed over) is ever uploaded; writes since
///   the last commit (`uncommitted`) survive a crash as an unsaved copy, never over the store's
///   version;
/// - a copy is never evicted while open, dirty or uploading;
/// - a pinned copy ("keep downloaded") is never evicted by its last release: only an explicit
///   eviction (`docfs evict`) or an unpin lets it go;
/// - an upload confirms the commit it sent (`n`), not whatever the copy holds by then.
public struct CopyLife: Sendable, Equatable {
    public enum Content: Sendable, Equatable {
        case fetching
        /// Every byte is local, or a streamed copy's reads fetch what it lacks.
        case present
    }

    public private(set) var content: Content
    public private(set) var openCount = 0
    /// Nil for a new file.
    public private(set) var base: ETag?
    /// Until an upload is confirmed, uploads may only create the item. A nil `base` is not enough:
    /// a store without ETags gives one too.
    public private(set) var startedFromNothing = false
    public private(set) var uncommitted = false
    /// Holes could not be fetched at close: the uploader fetches and commits. In memory only.
    public private(set) var awaitingFill = false
    public private(set) var committed: UInt64 = 0
    /// Also when it was kept as a conflict copy.
    public private(set) var uploaded: UInt64 = 0
    public private(set) var uploading: UInt64?
    /// Unlinked while open: nothing to upload, evict on the last release.
    public private(set) var removed = false
    public private(set) var pinned = false

    public init(content: Content, base: ETag?, startedFromNothing: Bool = false, pinned: Bool = false) {
        self.content = content
        self.base = base
        self.startedFromNothing = startedFromNothing
        self.pinned = pinned
    }

    /// Taken up by a new mount; nothing holds it open yet.
    public init(recorded base: ETag?, startedFromNothing: Bool, committed: UInt64, uploaded: UInt64, uncommitted: Bool,
                pinned: Bool = false) {
        self.init(content: .present, base: base, startedFromNothing: startedFromNothing, pinned: pinned)
        self.committed = committed
        self.uploaded = uploaded
        self.uncommitted = uncommitted
    }

    /// Content the store does not have: never evict.
    public var isDirty: Bool { !removed && (uncommitted || committed != uploaded) }

    public var isUnused: Bool { openCount == 0 && !isDirty && uploading == nil }

    /// What retention keeps, and what a store-side change may take away.
    public var isIdle: Bool { isUnused && !removed && content == .present }

    public var mayExpire: Bool { isIdle && !pinned }

    public var state: ItemState {
        if content == .fetching { return .downloading }
        if uploading != nil { return .uploading }
        return isDirty ? .modified : .local
    }

    /// What a restart needs. Open count, pin and removal live in memory, so most opens record nothing.
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
        case evict
    }

    // MARK: Events

    public mutating func opened() { openCount += 1 }

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

    /// The base's lacking bytes stay zeros: the copy may only create the item, never replace what
    /// stands there (it may be the very bytes lost).
    public mutating func versionLost() {
        startedFromNothing = true
    }

    public mutating func uploadStarted() -> Bool {
        guard isDirty, !uncommitted, uploading == nil else { return false }
        uploading = committed
        return true
    }

    /// As `conflictKept`, but the version stored becomes the base.
    public mutating func uploaded(_ sent: UInt64, etag: ETag?) -> Action {
        base = etag
        startedFromNothing = false
        return conflictKept(sent)
    }

    /// The base stays the old version, so later uploads become conflict copies too.
    public mutating func conflictKept(_ sent: UInt64) -> Action {
        uploading = nil
        uploaded = max(uploaded, sent)
        return settle()
    }

    /// Or the next upload meets itself as a conflict.
    public mutating func rebased(from old: ETag, to new: ETag) {
        if base == old { base = new }
    }

    /// Commit `sent` did not get through (nil: the attempt failed before it took one). The
    /// uploader tries again; nothing else follows.
    public mutating func uploadFailed(_ sent: UInt64? = nil) {
        if sent == nil || uploading == sent { uploading = nil }
    }

    /// The store said no to commit `sent`: it is not tried again, but a newer commit is other
    /// content and gets a try of its own.
    public mutating func uploadRefused(_ sent: UInt64?) -> Action {
        uploadFailed(sent)
        guard let sent, committed > sent else { return .none }
        return settle()
    }

    /// An attempt found nothing committed to send (writes still open go after their close).
    public mutating func nothingToUpload() -> Action {
        settle()
    }

    /// POSIX: an open copy lives on for its handles.
    public mutating func removedLocally() -> Action {
        removed = true
        uncommitted = false
        awaitingFill = false
        return settle()
    }

    public mutating func pinChanged(_ pinned: Bool) -> Action {
        self.pinned = pinned
        return settle()
    }

    /// Whether the copy stays on disk when the mount ends: one with changes stays for the next
    /// mount to upload, a complete pinned one stays pinned; the rest go. `complete`: every byte
    /// is local (a streamed copy is `present` with holes).
    public func staysAfterUnmount(complete: Bool) -> Bool {
        isDirty || (pinned && content == .present && complete && !removed)
    }

    /// Nil if it may go ahead, else why not.
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
