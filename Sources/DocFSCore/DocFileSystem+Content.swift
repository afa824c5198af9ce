// DocFileSystem+Content: reads, writes, flush, fsync and the last close of a handle. Reads
// never touch the network on the caller's thread: `lendForRead` answers from the copy, or says
// to wait (`waitForContent`). A close commits what its handle wrote and hands the copy to the
// uploader.

import DocFSStore
import Foundation
import Logging

extension DocFileSystem {
    /// Lends the local copy's descriptor for a read of `count` bytes at `offset` whose bytes
    /// are local (a zero-copy reply); the loan's `count` stops at the end of the file.
    public func lendLocalBytes(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        if prefetching { file.reads.reached(offset + Int64(count)) }  // only the prefetcher asks
        return try file.copy.lend(at: offset, count: count)
    }

    /// A read's loan of the local copy's descriptor when its bytes are local; nil when they
    /// are being fetched (see `LocalCopy.lendForRead`): wait with `waitForContent`, then
    /// `lendLocalBytes`. One handle lookup, and for a complete copy one lock, per read.
    public func lendForRead(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan? {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        if prefetching { file.reads.reached(offset + Int64(count)) }  // only the prefetcher asks
        guard file.mayFetch else {
            try requireHeld(file, offset: offset, count: count)
            return try file.copy.lend(at: offset, count: count)
        }
        return try file.copy.lendForRead(at: offset, count: count, stream: handle)
    }

    /// A read through a handle that may not fetch gets the bytes a sparse copy holds already,
    /// or `fetchRefused` (nothing is asked of the store).
    private func requireHeld(_ file: OpenFile, offset: Int64, count: Int) throws(FSError) {
        guard !file.mayFetch else { return }
        let end = min(offset + Int64(count), file.copy.length)
        if end > offset, !file.copy.held.contains(offset..<end) {
            throw .fetchRefused("bytes \(offset)..<\(end) of \(file.opened.path)")
        }
    }

    /// The store version an open handle's copy holds, unchanged: nil when the copy has local
    /// changes (or is a new file). What the kernel's page cache of it can be labelled with.
    public func cleanVersion(handle: UInt64) -> ETag? {
        guard let file = openFiles[handle] else { return nil }
        let life = file.copy.life
        return life.isDirty || file.copy.wasWritten ? nil : life.base
    }

    /// Waits until `count` bytes at `offset` of an open file are local: at most `ioTimeout`
    /// (`ETIMEDOUT`), and only while the calling task is not cancelled (`EINTR`).
    public func waitForContent(handle: UInt64, offset: Int64, count: Int) async throws(FSError) {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        let copy = file.copy
        let timedOut = FSError.timedOut("bytes \(offset)..<\(offset + Int64(count)) of \(file.opened.path) did not arrive within \(ioTimeout.map { "\($0)" } ?? "")")
        // A stall a reader just waited out fails the next read at once: the kernel retries
        // each page of a failed read-ahead, and one caller must not wait the timeout per page.
        if let ioTimeout, copy.stalled(within: ioTimeout), !copy.prepareRead(at: offset, count: count) { throw timedOut }
        do {
            try await CallerWait.run(limit: ioTimeout, timeout: { timedOut }) { () throws(FSError) in
                try await copy.waitForBytes(at: offset, count: count)
            }
        } catch .timedOut(let message) {
            copy.noteStall()
            throw .timedOut(message)
        }
    }

    /// Writes into an open handle's local copy. The first write since a commit is recorded in
    /// the journal before its bytes land; flush/fsync/close commit them. A sparse copy is
    /// written at once (see `LocalCopy.writeLocal`).
    public func write(handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) throws(FSError) -> Int {
        try writeLanding(handle: handle, offset: offset, bytes: bytes).count
    }

    /// `write`, saying where the bytes landed: at `offset`, or at the copy's end for a handle
    /// opened with O_APPEND (`OpenMode.append`). Where that is not `offset`, the kernel's size
    /// and pages of the file are wrong (it computed the offset from the size it cached).
    public func writeLanding(handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) throws(FSError) -> (count: Int, offset: Int64, inode: Inode) {
        guard let file = openFiles[handle], file.writable else { throw .invalidArgument }
        let landed = file.appends ? try file.copy.appendLocal(bytes) : (try file.copy.writeLocal(bytes, at: offset), offset)
        uploadStreams?.consider(file.copy)
        return (landed.0, landed.1, file.inode)
    }

    /// Commits the copy's changes to the journal: the catalog row with its size and a new
    /// commit (not flushed to disk: see `SessionMarker`). Runs before every close() returns.
    /// Only committed content is ever uploaded over the store's version.
    public func flush(handle: UInt64) async throws(FSError) {
        guard let file = openFiles[handle] else { return }
        noteRead(file)
        try await completeForCommit(file)
        try file.copy.commit()
    }

    /// `flush` on the calling thread, or false (nothing done) when the copy's holes must be
    /// fetched first: call `flush` then. What every close() costs, without a task for most.
    public func flushIfComplete(handle: UInt64) throws(FSError) -> Bool {
        guard let file = openFiles[handle] else { return true }
        noteRead(file)
        if file.copy.needsFillBeforeCommit { return false }
        try file.copy.commit()
        return true
    }

    /// A reader's close (its flush, which close() waits for, unlike the release after it): the
    /// prefetcher learns of a file read whole.
    private func noteRead(_ file: OpenFile) {
        guard prefetching, !file.writable, file.reads.furthest >= file.copy.length, let parent = file.opened.parent else { return }
        prefetcher.readWhole(file.opened.name, in: parent)
    }

    /// Fetches what a changed sparse copy lacks, none of the bytes written into it, before its
    /// changes are committed: only a complete copy is committed and uploaded. The caller waits
    /// as a writer does (`Provider.complete`); a version changed on the store meanwhile fails
    /// with `ESTALE`. The changes stay uncommitted then; a last close hands them to the
    /// uploader all the same (`CopyLife.awaitingFill`).
    func completeForCommit(_ file: OpenFile) async throws(FSError) {
        guard file.copy.needsFillBeforeCommit else { return }
        try await provider.complete(file.copy, of: file.opened)
    }

    /// fsync: commit (flushed to local disk), then upload now and wait for the store to confirm.
    public func fsync(handle: UInt64) async throws(FSError) {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        if file.copy.life.uncommitted {
            try await completeForCommit(file)
            try await Blocking.run { () throws(FSError) in _ = try file.copy.commit(durably: true) }
        }
        // What was sent while it was written completes the commit, if it is all of it.
        if file.copy.isStreaming {
            try await Blocking.run { () throws(FSError) in _ = try file.copy.completeStream() }
        }
        if file.copy.life.isDirty {
            try await uploader.sync(file.inode)
        }
    }

    /// Closes a handle. The last close evicts the local copy, or hands it to the uploader.
    public func release(handle: UInt64) async {
        guard let file = openFiles.remove(handle) else { return }
        file.copy.endReadStream(handle)
        // Most closes have nothing to commit (a reader, or a writer that already flushed): no
        // hop to the blocking queue for them.
        if file.copy.life.uncommitted {
            do {
                do { try await completeForCommit(file) } catch {
                    // Handed over all the same: the uploader fetches the rest and commits.
                    do { try file.copy.update { $0.commitAwaitsFill() } } catch let recording {
                        logger.error("cannot note that a copy's commit awaits its fill",
                                     metadata: ["inode": "\(file.inode)", "error": "\(recording)"])
                    }
                    throw error
                }
                try await Blocking.run { () throws(FSError) in _ = try file.copy.commit() }
            } catch {
                logger.error("cannot commit changes", metadata: ["inode": "\(file.inode)", "error": "\(error)"])
            }
        }
        // The last writer let go: a stream of what it wrote completes its commit.
        if file.writable, file.copy.isStreaming, !openFiles.hasWriter(of: file.inode) {
            do { try await Blocking.run { () throws(FSError) in _ = try file.copy.completeStream() } } catch {
                logger.warning("cannot record a streamed upload's commit", metadata: ["inode": "\(file.inode)", "error": "\(error)"])
            }
        }
        let outcome = await provider.release(file.inode)
        logger.trace("released", metadata: ["inode": "\(file.inode)", "outcome": "\(outcome)"])
    }

    /// Readies a writer's handle for a truncate: where its copy is sparse, every byte it lacks
    /// is fetched first, of the version it opened (writes need none: see `LocalCopy.writeLocal`).
    public func provideForChange(_ handle: UInt64) async throws(FSError) {
        if let file = openFiles[handle], file.writable {
            try await provider.complete(file.copy, of: file.opened)
        }
    }
}
