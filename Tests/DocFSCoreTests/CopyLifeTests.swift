@testable import DocFSCore
import DocFSStore
import Testing

/// The state machine of a local copy, event by event: the rules hold without a store or a disk.
@Suite("A local copy's life")
struct CopyLifeTests {
    private func present(base: String? = "v1") -> CopyLife {
        var life = CopyLife(content: .present, base: base.map(ETag.init))
        life.opened()
        return life
    }

    @Test func aCleanCopyIsEvictedOnItsLastRelease() {
        var life = present()
        life.opened()
        let result1 = life.released()
        #expect(result1 == .none)
        let result2 = life.released()
        #expect(result2 == .evict)
        #expect(life.state == .local)
    }

    @Test func aFetchingCopyIsNeverEvictedByARelease() {
        var life = CopyLife(content: .fetching, base: ETag("v1"))
        life.opened()
        #expect(life.state == .downloading)
        let result3 = life.released()
        #expect(result3 == .none)
    }

    @Test func committedChangesAreUploadedAndOnlyThenEvicted() {
        var life = present()
        life.changed()
        #expect(life.state == .modified)
        let started = life.uploadStarted()
        #expect(!started, "writes no close handed over are never sent")
        life.committedChanges()
        let result4 = life.released()
        #expect(result4 == .upload)
        let result5 = life.uploadStarted()
        #expect(result5)
        #expect(life.state == .uploading)
        let result6 = life.uploaded(1, etag: ETag("v2"))
        #expect(result6 == .evict)
        #expect(life.base == ETag("v2"))
    }

    @Test func anUploadConfirmsTheCommitItSentNotALaterOne() {
        var life = present()
        life.changed()
        life.committedChanges()
        let result7 = life.uploadStarted()
        #expect(result7)
        life.changed()
        life.committedChanges()  // a close while the upload runs: commit 2
        let result8 = life.released()
        #expect(result8 == .none, "kept while uploading")
        let result9 = life.uploaded(1, etag: ETag("v2"))
        #expect(result9 == .upload, "commit 2 goes next")
        #expect(life.state == .modified)
        #expect(life.isDirty)
    }

    @Test func aConflictKeepsTheBaseSoLaterWritesConflictToo() {
        var life = present()
        life.changed()
        life.committedChanges()
        let result10 = life.uploadStarted()
        #expect(result10)
        life.changed()  // written again while the conflict copy uploads
        let result11 = life.conflictKept(1)
        #expect(result11 == .none)
        #expect(life.base == ETag("v1"))
        #expect(life.isDirty, "the later writes are not marked synced")
        life.committedChanges()
        let result12 = life.released()
        #expect(result12 == .upload)
    }

    @Test func anUnlinkedCopyIsEvictedWithoutUpload() {
        var life = present()
        life.changed()
        let result13 = life.removedLocally()
        #expect(result13 == .none, "still open")
        let result14 = life.released()
        #expect(result14 == .evict)
        #expect(!life.isDirty)
    }

    @Test func aFailedUploadKeepsTheCopyDirty() {
        var life = present()
        life.changed()
        life.committedChanges()
        let result15 = life.released()
        #expect(result15 == .upload)
        let result16 = life.uploadStarted()
        #expect(result16)
        life.uploadFailed()
        #expect(life.state == .modified)
        let result17 = life.uploadStarted()
        #expect(result17, "tried again")
    }

    @Test func aFailureReportedForAnOlderCommitLeavesTheRunningUploadAlone() {
        var life = present()
        life.changed()
        life.committedChanges()
        let started1 = life.uploadStarted()
        #expect(started1)
        life.uploadFailed(0)  // a stream of an earlier commit that did not complete
        #expect(life.state == .uploading, "commit 1 is still on its way")
        life.uploadFailed(1)
        #expect(life.state == .modified)
    }

    @Test func aRefusedCommitIsNotSentAgainButANewerOneIs() {
        var life = present()
        life.changed()
        life.committedChanges()
        _ = life.released()
        let started2 = life.uploadStarted()
        #expect(started2)
        let refused = life.uploadRefused(1)
        #expect(refused == .none, "the store said no to this content")
        #expect(life.isDirty, "the change is kept")

        life.opened()
        life.changed()
        life.committedChanges()
        let started3 = life.uploadStarted()
        #expect(started3)
        life.changed()
        life.committedChanges()  // commit 3, saved while commit 2 went up
        let whileOpen = life.uploadRefused(2)
        #expect(whileOpen == .none, "open: commit 3 goes at the last release")
        let released = life.released()
        #expect(released == .upload)
        let started4 = life.uploadStarted()
        #expect(started4)
        #expect(life.uploading == 3)
    }

    @Test func anAttemptWithNothingCommittedEvictsACleanCopyAndKeepsADirtyOne() {
        var clean = present()
        _ = clean.released()
        let cleanAction = clean.nothingToUpload()
        #expect(cleanAction == .evict)

        var written = present()
        written.changed()
        _ = written.released()
        let writtenAction = written.nothingToUpload()
        #expect(writtenAction == .none, "uncommitted writes stay for the next mount")

        var pinned = CopyLife(content: .present, base: ETag("v1"), pinned: true)
        let pinnedAction = pinned.nothingToUpload()
        #expect(pinnedAction == .none)
    }
}
