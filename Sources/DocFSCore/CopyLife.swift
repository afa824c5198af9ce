import DocFSStore

/// The life of one item's local copy, from the first open to the eviction: the one place that
/// decides what happens to a copy. A plain value: every event changes it and returns what the
/// caller must do (`Action`); `LocalCopy` holds it under its lock and persists it in the catalog
/// after every event that changes what the catalog keeps of it (`recorded`, `Catalog.recordCopy`),
/// and `Provider` performs the actions.
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
    /// Whether the content is all there.
    public enum Content: Sendable, Equatable {
        /// A download is filling the copy; reads wait for it.
        case fetching
        /// Readable: every byte is local, or, for a streamed copy, its reads fetch the ranges it
        /// lacks (`LocalCopy`'s held ranges say which are there).
        case present
    }

    public private(set) var content: Content
    /// Handles open on the copy.
    public private(set) var openCount = 0
    /// The store version the copy started from; nil for a new file. (Whether the store has the
    /// item at all is the catalog's `onStore`, which listings keep: an upload of an item the
    /// store does not have must create it, never replace something.)
    public private(set) var base: ETag?
    /// The copy started from no store version at all (a new file): until the store confirms
    /// an upload, anything it uploads may only create the item, never replace what another
    /// client put there meanwhile (`If-None-Match: *`; a conflict copy if taken). Not the same
    /// as a nil `base` alone, which is also what a store without ETags gives.
    public private(set) var startedFromNothing = false
    /// Writes since the last commit may be in the copy.
    public private(set) var uncommitted = false
    /// A close handed those writes over, but the bytes of the sparse copy they did not cover
    /// could not be fetched then (the store was down, or has another version now): the
    /// uploader fetches them, commits and uploads (`Uploader`). In memory only: after a
    /// restart they are unsaved writes like any (`CrashRecovery`).
    public private(set) var awaitingFill = false
    /// The latest commit: bumped by every close/fsync that handed over changes.
    public private(set) var committed: UInt64 = 0
    /// The latest commit the store confirmed (or that was kept as a conflict copy).
    public private(set) var uploaded: UInt64 = 0
    /// The commit being uploaded now.
    public private(set) var uploading: UInt64?
    /// The item was unlinked while open: nothing to upload, evict on the last release.
    public private(set) var removed = false
    /// The user asked to keep the copy (`docfs pin`, `user.docfs.pinned`): a release keeps it.
    public private(set) var pinned = false

    public init(content: Content, base: ETag?, startedFromNothing: Bool = false, pinned: Bool = false) {
        self.content = content
        self.base = base
        self.startedFromNothing = startedFromNothing
        self.pinned = pinned
    }

    /// The life the catalog recorded (`Recorded`), taken up again by a new mount: the copy on
    /// disk is present; nothing holds it open yet.
    public init(recorded base: ETag?, startedFromNothing: Bool, committed: UInt64, uploaded: UInt64, uncommitted: Bool,
                pinned: Bool = false) {
        self.init(content: .present, base: base, startedFromNothing: startedFromNothing, pinned: pinned)
        self.committed = committed
        self.uploaded = uploaded
        self.uncommitted = uncommitted
    }

    /// Content the store does not have: never evict.
    public var isDirty: Bool { !removed && (uncommitted || committed != uploaded) }

    /// No handle holds the copy and it owes the store nothing (no change, no upload under way):
    /// the first condition of every eviction.
    public var isUnused: Bool { openCount == 0 && !isDirty && uploading == nil }

    /// A whole copy nobody uses and that owes the store nothing: what the retention policy
    /// keeps after its last release, and what a change on the store's side may take away.
    public var isIdle: Bool { isUnused && !removed && content == .present }

    /// An idle copy the user did not pin: what a delay running out or `--cache-max` evicts.
    public var mayExpire: Bool { isIdle && !pinned }

    /// What `user.docfs.state` shows and the catalog keeps.
    public var state: ItemState {
        if content == .fetching { return .downloading }
        if uploading != nil { return .uploading }
        return isDirty ? .modified : .local
    }

    /// The part of a life the catalog keeps (`Catalog.recordCopy`): what a restart needs and
    /// what others read of a copy. The rest (`openCount`, `pinned`, `removed`) lives in memory
    /// only, so an event that changes only those (an open or a release that leaves the copy
    /// in use) has nothing to record: every open and close of a clean file used to cost two
    /// catalog transactions that rewrote the same values.
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

    /// What the holder of a copy must do after an event.
    public enum Action: Sendable, Equatable {
        case none
        /// Hand the copy to the uploader.
        case upload
        /// Delete the copy; the item is a placeholder again.
        case evict
    }

    // MARK: Events

    public mutating func opened() { openCount += 1 }

    /// An opener gave up before it had the copy (its fetch failed, or it stopped waiting).
    public mutating func openAbandoned() { openCount = max(openCount - 1, 0) }

    /// The download finished: the copy is the store's version `etag`.
    public mutating func fetched(etag: ETag?) {
        content = .present
        base = etag
        startedFromNothing = false
    }

    /// One handle let go.
    public mutating func released() -> Action {
        openCount = max(openCount - 1, 0)
        return settle()
    }

    /// The first write (or truncate) since the last commit; recorded before the bytes land.
    public mutating func changed() { uncommitted = true }

    /// A close or fsync handed the changes over: they are commit `committed` now.
    public mutating func committedChanges() {
        guard uncommitted else { return }
        uncommitted = false
        awaitingFill = false
        committed += 1
    }

    /// A close handed the changes over, and their commit waits for the copy's holes to be
    /// fetched (`awaitingFill`).
    public mutating func commitAwaitsFill() {
        guard uncommitted else { return }
        awaitingFill = true
    }

    /// The bytes of the version the copy started from that it lacked could not be fetched: the
    /// store has another version now, or none at that path (a rename elsewhere may have taken
    /// it), and they stay zeros. Such a copy may only ever create the item (a conflict copy if
    /// the name is taken), never replace what stands there: that may be the very bytes lost.
    public mutating func versionLost() {
        startedFromNothing = true
    }

    /// The uploader took a snapshot of commit `committed`. Returns false when there is nothing
    /// to send (clean, removed, or already uploading).
    public mutating func uploadStarted() -> Bool {
        guard isDirty, !uncommitted, uploading == nil else { return false }
        uploading = committed
        return true
    }

    /// The store has commit `sent` as version `etag`.
    public mutating func uploaded(_ sent: UInt64, etag: ETag?) -> Action {
        uploading = nil
        uploaded = max(uploaded, sent)
        base = etag
        startedFromNothing = false
        return settle()
    }

    /// The store had moved on: commit `sent` was kept as a conflict copy next to it. The copy's
    /// base stays the old version, so anything it uploads later is kept as another copy too.
    public mutating func conflictKept(_ sent: UInt64) -> Action {
        uploading = nil
        uploaded = max(uploaded, sent)
        return settle()
    }

    /// The store gave the item a new version without new content (attributes set): a copy based
    /// on the old one is based on the new one, or its next upload would meet itself as a conflict.
    public mutating func rebased(from old: ETag, to new: ETag) {
        if base == old { base = new }
    }

    /// The upload failed; it will be tried again.
    public mutating func uploadFailed() {
        uploading = nil
    }

    /// The item was unlinked. An open copy lives on for its handles (POSIX); nothing is uploaded.
    public mutating func removedLocally() -> Action {
        removed = true
        uncommitted = false
        awaitingFill = false
        return settle()
    }

    /// The copy was pinned or unpinned. Unpinned and unused, it goes as on a last release.
    public mutating func pinChanged(_ pinned: Bool) -> Action {
        self.pinned = pinned
        return settle()
    }

    /// Whether an eviction asked for now (`docfs evict`) may go ahead; if not, why.
    public var evictionRefusal: String? {
        if removed { return nil }
        if isDirty || uploading != nil { return "it has changes the store does not have yet" }
        if openCount > 0 { return "it is open" }
        if content == .fetching { return "it is being downloaded" }
        return nil
    }

    /// After any event: what a copy with nobody using it needs.
    private func settle() -> Action {
        guard openCount == 0, uploading == nil, content == .present || removed else { return .none }
        if removed { return .evict }
        if uncommitted { return awaitingFill ? .upload : .none }  // a failed commit: kept, the next mount saves it
        if isDirty { return .upload }
        return pinned ? .none : .evict
    }
}
