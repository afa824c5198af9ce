import DocFSStore
import Foundation

/// The catalog's copy columns (state, base, commits, on the store, partial) are written here,
/// nowhere else in `LocalCopy`: each event of a copy's life is one method, which applies the
/// `CopyLife` event and records the columns it changes (`changeLife`: in order, under the copy's
/// `journal`, never under its `state`), and returns the action that follows for `Provider` to
/// carry out. No one changes a copy's life another way.
/// A copy that has no `LocalCopy` in memory (kept pinned from an earlier mount, left by a
/// crash) is recorded through the static functions.
extension LocalCopy {
    // MARK: Events

    /// A handle opened it (the count is not recorded: a restart has no handles).
    func opened() throws(FSError) { try update { $0.opened() } }

    func released() throws(FSError) -> CopyLife.Action { try update { $0.released() } }

    func pinChanged(_ pinned: Bool) throws(FSError) -> CopyLife.Action { try update { $0.pinChanged(pinned) } }

    /// Unlinked: nothing to upload, gone on the last release.
    func removedLocally() throws(FSError) -> CopyLife.Action { try update { $0.removedLocally() } }

    /// The holes of a closed copy could not be fetched: the uploader fetches them and commits.
    func commitAwaitsFill() throws(FSError) { try update { $0.commitAwaitsFill() } }

    /// The version a sparse copy was written into is gone: its upload may only create the item.
    func versionLost() throws(FSError) { try update { $0.versionLost() } }

    /// The store's version moved by docfs's own change of attributes: ranges still to fetch and
    /// the next upload's condition follow it.
    func rebase(from old: ETag, to new: ETag) throws(FSError) {
        state.withLock { $0.fetcher }?.rebase(from: old, to: new)
        try update { $0.rebased(from: old, to: new) }
    }

    /// An attempt found nothing committed to send.
    func nothingToUpload() throws(FSError) -> CopyLife.Action { try update { $0.nothingToUpload() } }

    /// Commit `commit` did not get through. The copy takes it even when the journal cannot
    /// (a full disk), or no next attempt could start; the error is returned to be shown.
    func uploadFailed(_ commit: UInt64?) -> FSError? {
        updateLettingTheJournalLag { $0.uploadFailed(commit) }.unrecorded
    }

    /// The store refused commit `commit`; kept as `uploadFailed` is.
    func uploadRefused(_ commit: UInt64?) -> (action: CopyLife.Action, unrecorded: FSError?) {
        updateLettingTheJournalLag { $0.uploadRefused(commit) }
    }

    // MARK: Recording

    /// The copy begins: its life is recorded. Fails with `notFound` when the row is gone (a
    /// listing dropped the item meanwhile), and the copy is discarded.
    func begin() throws(FSError) {
        do {
            try catalog.beginCopy(inode, life)
        } catch {
            discard()
            throw error
        }
    }

    /// A download of `entry` finished (the whole file, or its head for a streamed one), or the
    /// copy is `entry`'s version, its bytes fetched as they are read. `learned`: the store
    /// answered `entry` just now and the item takes it; otherwise the row's metadata stays.
    func fetched(_ entry: RemoteEntry, askedAt: Double? = nil, learned: Bool = true) throws(FSError) {
        let partial = isSparse
        try update({ $0.fetched(etag: entry.etag) }, recording: { (life) throws(FSError) in
            if learned {
                try self.catalog.recordFetched(self.inode, life, entry: entry, askedAt: askedAt, partial: partial)
            } else {
                try self.catalog.recordCopy(self.inode, life, partial: partial)
            }
        })
    }

    /// The store confirmed commit `commit` as version `etag`; returns the action that follows.
    func uploaded(_ commit: UInt64, etag: ETag?) throws(FSError) -> CopyLife.Action {
        try update({ $0.uploaded(commit, etag: etag) }, recording: { (life) throws(FSError) in
            try self.catalog.recordUploaded(self.inode, life, etag: etag)
        })
    }

    /// Commit `commit` went to the store as `conflictCopy`; the item shows `storeVersion`.
    func conflictKept(_ commit: UInt64, as conflictCopy: String, storeVersion: RemoteEntry?) throws(FSError) -> CopyLife.Action {
        try update({ $0.conflictKept(commit) }, recording: { (life) throws(FSError) in
            try self.catalog.recordConflictKept(self.inode, life, conflictCopy: conflictCopy, storeVersion: storeVersion)
        })
    }

    /// Records its item a placeholder again (an item the store no longer has goes with it),
    /// unless the item was removed, then deletes the copy: whoever sees the file gone sees the
    /// placeholder too (a copy left by a crash in between is a file no item claims, emptied by
    /// the next open and cleared at unmount). The file goes even when the record fails (a full
    /// disk): the caller records it again later (`recordEvicted`).
    func evict() throws(FSError) {
        defer { discard() }
        guard !life.removed else { return }
        try journal.withLock { _ throws(FSError) in try catalog.recordEvicted(inode) }
    }

    /// Records that `inode` has no copy any more: a placeholder, or no row when the store does
    /// not have it. For a copy deleted earlier, or one with no `LocalCopy` in memory.
    static func recordEvicted(_ inode: Inode, in catalog: Catalog) throws(FSError) {
        try catalog.recordEvicted(inode)
    }

    /// Deletes the copy at `path` that no `LocalCopy` holds (kept pinned from an earlier mount,
    /// or left by a crash) and records its item as `recordEvicted` does.
    static func evict(at path: String, of inode: Inode, in catalog: Catalog) throws(FSError) {
        defer {
            unlink(path)
            HeldLog.remove(copyPath: path)
        }
        try catalog.recordEvicted(inode)
    }

    /// After a restart no copy is open: see `Catalog.resetTransientStates`.
    static func resetAfterRestart(_ catalog: Catalog) throws(FSError) {
        try catalog.resetTransientStates()
    }

    /// Records `life` for the copy of a file made by crash recovery (its unsaved writes).
    static func record(_ life: CopyLife, of inode: Inode, in catalog: Catalog) throws(FSError) {
        try catalog.recordCopy(inode, life)
    }

    /// Applies `event` and records it: with `record` when given (a catalog write that persists
    /// the life together with other columns, always made), else as `changeLife` does.
    @discardableResult
    private func update<Result>(_ event: (inout CopyLife) -> Result,
                                recording record: ((CopyLife) throws(FSError) -> Void)? = nil) throws(FSError) -> Result {
        try changeLife({ Self.decision(event, from: $0.life) }, recording: record)
    }

    /// `update`, keeping the new life even when it cannot be recorded. Only for events a restart
    /// reads the same either way.
    private func updateLettingTheJournalLag<Result>(_ event: (inout CopyLife) -> Result) -> (Result, unrecorded: FSError?) {
        // The decision throws nothing; a failed record is returned, not thrown.
        try! changeLife(keepingItUnrecorded: true, { Self.decision(event, from: $0.life) }, recording: nil, applied: { _ in })
    }

    private static func decision<Result>(_ event: (inout CopyLife) -> Result, from life: CopyLife) -> (next: CopyLife?, result: Result) {
        var next = life
        let result = event(&next)
        return (next, result)
    }

    // MARK: The journal's order

    /// Every change of the copy's life goes through here. `decide` looks at the copy under
    /// `state` and returns the life it moves to (nil: none). That life is written to the
    /// catalog after `state` is let go, so readers, fetched chunks and `docfs status` never wait
    /// for SQLite, and it becomes the copy's only once the catalog holds it: the journal never
    /// lags the copy. A failed record is thrown and the life stays as it was. `journal`, taken
    /// before `state`, keeps the writes in the order of the changes, and no other change of the
    /// life can come between a decision and its record.
    ///
    /// `record`: the life written with other columns, always. Without it, a life whose
    /// `recorded` part is unchanged is taken at once, unwritten; a new commit is recorded with
    /// the copy's size and time as they were decided, anything else with `recordCopy`.
    /// `applied` runs under `state` when the life is taken.
    func changeLife<Result>(_ decide: (inout State) throws(FSError) -> (next: CopyLife?, result: Result),
                            recording record: ((CopyLife) throws(FSError) -> Void)? = nil,
                            applied: (inout State) -> Void = { _ in }) throws(FSError) -> Result {
        try changeLife(keepingItUnrecorded: false, decide, recording: record, applied: applied).0
    }

    /// `keepingItUnrecorded`: the copy takes the life even when the record fails, and the
    /// failure is returned, not thrown.
    private func changeLife<Result>(keepingItUnrecorded: Bool,
                                    _ decide: (inout State) throws(FSError) -> (next: CopyLife?, result: Result),
                                    recording record: ((CopyLife) throws(FSError) -> Void)?,
                                    applied: (inout State) -> Void) throws(FSError) -> (Result, unrecorded: FSError?) {
        try journal.withLock { _ throws(FSError) -> (Result, unrecorded: FSError?) in
            var commit: (size: Int64, modified: Timestamp)?
            let (next, result) = try state.withLock { (state) throws(FSError) -> (next: CopyLife?, result: Result) in
                let (next, result) = try decide(&state)
                guard let next else { return (nil, result) }
                if record == nil {
                    if next.recorded == state.life.recorded {
                        state.life = next
                        applied(&state)
                        return (nil, result)
                    }
                    if next.committed != state.life.committed { commit = (state.length, modificationTime(state)) }
                }
                return (next, result)
            }
            guard let next else { return (result, nil) }
            var failure: FSError?
            do throws(FSError) {
                if let record {
                    try record(next)
                } else if let commit {
                    try catalog.recordCommit(inode, next, size: commit.size, modified: commit.modified)
                } else {
                    try catalog.recordCopy(inode, next)
                }
            } catch {
                guard keepingItUnrecorded else { throw error }
                failure = error
            }
            state.withLock { state in
                state.life = next
                applied(&state)
            }
            return (result, failure)
        }
    }
}
