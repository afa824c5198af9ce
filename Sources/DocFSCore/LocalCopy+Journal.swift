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

    /// An open that gave up before it got the copy.
    func openAbandoned() throws(FSError) -> CopyLife.Action { try update { $0.openAbandoned() } }

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

    /// A download of `entry` finished (the whole file, or its head for a streamed one).
    func fetched(_ entry: RemoteEntry, askedAt: Double) throws(FSError) {
        let partial = isSparse
        try update({ $0.fetched(etag: entry.etag) }, recording: { (life) throws(FSError) in
            try catalog.recordFetched(inode, life, entry: entry, askedAt: askedAt, partial: partial)
        })
    }

    /// The copy is version `version`, its bytes fetched as they are read. `learned`: the store
    /// answered `entry` just now and the item takes it; otherwise the row's metadata stays.
    func fetchedOnDemand(_ version: ETag, entry: RemoteEntry, learned: Bool) throws(FSError) {
        let partial = isSparse
        try update({ $0.fetched(etag: version) }, recording: { (life) throws(FSError) in
            if learned {
                try catalog.recordFetched(inode, life, entry: entry, partial: partial)
            } else {
                try catalog.recordCopy(inode, life, partial: partial)
            }
        })
    }

    /// The store confirmed commit `commit` as version `etag`; returns the action that follows.
    func uploaded(_ commit: UInt64, etag: ETag?) throws(FSError) -> CopyLife.Action {
        try update({ $0.uploaded(commit, etag: etag) }, recording: { (life) throws(FSError) in
            try catalog.recordUploaded(inode, life, etag: etag)
        })
    }

    /// Commit `commit` went to the store as `conflictCopy`; the item shows `storeVersion`.
    func conflictKept(_ commit: UInt64, as conflictCopy: String, storeVersion: RemoteEntry?) throws(FSError) -> CopyLife.Action {
        try update({ $0.conflictKept(commit) }, recording: { (life) throws(FSError) in
            try catalog.recordConflictKept(inode, life, conflictCopy: conflictCopy, storeVersion: storeVersion)
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

    /// Applies `event`, and records the life when what the catalog keeps of it changed (a
    /// change of the handle count writes nothing).
    @discardableResult
    private func update<Result>(_ event: (inout CopyLife) -> Result) throws(FSError) -> Result {
        try changeLife { (state) -> (next: CopyLife?, result: Result) in
            var life = state.life
            let result = event(&life)
            return (life, result)
        }
    }

    /// `update`, keeping the new life even when it cannot be recorded. Only for events a restart
    /// reads the same either way.
    private func updateLettingTheJournalLag<Result>(_ event: (inout CopyLife) -> Result) -> (Result, unrecorded: FSError?) {
        // The decision throws nothing; a failed record is returned, not thrown.
        try! changeLife(keepingItUnrecorded: true) { (state) -> (next: CopyLife?, result: Result) in
            var life = state.life
            let result = event(&life)
            return (life, result)
        }
    }

    /// Applies `event` and records it with `record` (a catalog write that persists the life
    /// together with other columns; always made).
    private func update<Result>(_ event: (inout CopyLife) -> Result,
                                recording record: (CopyLife) throws(FSError) -> Void) throws(FSError) -> Result {
        try changeLife({ (state) -> (next: CopyLife?, result: Result) in
            var life = state.life
            let result = event(&life)
            return (life, result)
        }, recording: record)
    }

    // MARK: The journal's order

    /// Every change of the copy's life goes through here. `decide` looks at the copy under
    /// `state` and returns the life it moves to (nil: none). That life is written to the
    /// catalog after `state` is let go, so readers, fetched chunks and `docfs status` never wait
    /// for SQLite, and it becomes the copy's only once the catalog holds it (or, with
    /// `keepingItUnrecorded`, once the write was tried): the journal never lags the copy.
    /// `journal`, taken before `state`, keeps the writes in the order of the changes, and no
    /// other change of the life can come between a decision and its record.
    ///
    /// Unless `always`, a life whose `recorded` part is unchanged is taken at once, unwritten.
    /// `record` gets the size and time of the copy as they were decided when the life makes a
    /// new commit. `applied` runs under `state` when the life is taken.
    private func changeLife<Result>(keepingItUnrecorded: Bool, always: Bool,
                                    _ decide: (inout State) throws(FSError) -> (next: CopyLife?, result: Result),
                                    recording record: (CopyLife, _ commit: (size: Int64, modified: Timestamp)?) throws(FSError) -> Void,
                                    applied: (inout State) -> Void) throws(FSError) -> (Result, unrecorded: FSError?) {
        try journal.withLock { _ throws(FSError) -> (Result, unrecorded: FSError?) in
            var commit: (size: Int64, modified: Timestamp)?
            let (next, result) = try state.withLock { (state) throws(FSError) -> (next: CopyLife?, result: Result) in
                let (next, result) = try decide(&state)
                guard let next else { return (nil, result) }
                if !always, next.recorded == state.life.recorded {
                    state.life = next
                    applied(&state)
                    return (nil, result)
                }
                if next.committed != state.life.committed { commit = (state.length, modificationTime(state)) }
                return (next, result)
            }
            guard let next else { return (result, nil) }
            var failure: FSError?
            do throws(FSError) { try record(next, commit) } catch { failure = error }
            if failure == nil || keepingItUnrecorded {
                state.withLock { state in
                    state.life = next
                    applied(&state)
                }
            }
            if let failure, !keepingItUnrecorded { throw failure }
            return (result, failure)
        }
    }

    /// `changeLife` recording the life alone (with the size and time of a new commit).
    /// `keepingItUnrecorded`: the copy takes the life even when the record fails, which is
    /// returned; otherwise it is thrown and the life stays as it was.
    func changeLife<Result>(keepingItUnrecorded: Bool = false,
                            _ decide: (inout State) throws(FSError) -> (next: CopyLife?, result: Result),
                            applied: (inout State) -> Void = { _ in }) throws(FSError) -> (Result, unrecorded: FSError?) {
        try changeLife(keepingItUnrecorded: keepingItUnrecorded, always: false, decide, recording: { (life, commit) throws(FSError) in
            if let commit {
                try catalog.recordCommit(inode, life, size: commit.size, modified: commit.modified)
            } else {
                try catalog.recordCopy(inode, life)
            }
        }, applied: applied)
    }

    /// `changeLife` for a change that must be recorded to happen.
    func changeLife<Result>(_ decide: (inout State) throws(FSError) -> (next: CopyLife?, result: Result)) throws(FSError) -> Result {
        try changeLife(keepingItUnrecorded: false, decide).0
    }

    /// `changeLife` with a record of its own (the life with other columns), always written.
    func changeLife<Result>(_ decide: (inout State) throws(FSError) -> (next: CopyLife?, result: Result),
                            recording record: (CopyLife) throws(FSError) -> Void,
                            applied: (inout State) -> Void = { _ in }) throws(FSError) -> Result {
        try changeLife(keepingItUnrecorded: false, always: true, decide, recording: { (life, _) throws(FSError) in
            try record(life)
        }, applied: applied).0
    }
}
