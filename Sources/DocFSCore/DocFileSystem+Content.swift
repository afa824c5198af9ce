// Reads, writes, flush, fsync and the last close. Reads never touch the network on the
// caller's thread; a close commits what its handle wrote and hands the copy to the uploader.

import DocFSStore
import Foundation
import Logging

extension DocFileSystem {
    /// A zero-copy reply; the loan's `count` stops at the end of the file.
    public func lendLocalBytes(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        if prefetching { file.reads.reached(offset + Int64(count)) }  // only the prefetcher asks
        return try file.copy.lend(at: offset, count: count)
    }

    /// Nil while the bytes are fetched: wait with `waitForContent`, then `lendLocalBytes`. One
    /// handle lookup, and for a complete copy one lock, per read.
    public func lendForRead(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan? {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        if prefetching { file.reads.reached(offset + Int64(count)) }  // only the prefetcher asks
        guard file.mayFetch else {
            try requireHeld(file, offset: offset, count: count)
            return try file.copy.lend(at: offset, count: count)
        }
        return try file.copy.lendForRead(at: offset, count: count, stream: handle)
    }

    /// A handle that may not fetch gets only bytes already held, else `fetchRefused`.
    private func requireHeld(_ file: OpenFile, offset: Int64, count: Int) throws(FSError) {
        guard !file.mayFetch else { return }
        let end = min(offset + Int64(count), file.copy.length)
        if end > offset, !file.copy.held.contains(offset..<end) {
            throw .fetchRefused("bytes \(offset)..<\(end) of \(file.opened.path)")
        }
    }

    /// Nil when the copy has local changes: what the kernel's page cache can be labelled with.
    public func cleanVersion(handle: UInt64) -> ETag? {
        guard let file = openFiles[handle] else { return nil }
        let life = file.copy.life
        return life.isDirty || file.copy.wasWritten ? nil : life.base
    }

    /// At most `ioTimeout` (`ETIMEDOUT`), and only while not cancelled (`EINTR`).
    public func waitForContent(handle: UInt64, offset: Int64, count: Int) async throws(FSError) {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        let copy = file.copy
        let timedOut = FSError.timedOut("bytes \(offset)..<\(offset + Int64(count)) of \(file.opened.path) did not arrive within \(ioTimeout.map { "\($0)" } ?? "")")
        // A stall just waited out fails the next read at once: the kernel retries each page of a
        // failed read-ahead, and one caller must not wait the timeout per page.
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

    /// The first write since a commit is journaled before its bytes land; flush/fsync/close commit.
    public func write(handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) throws(FSError) -> Int {
        try writeLanding(handle: handle, offset: offset, bytes: bytes).count
    }

    /// Also says where the bytes landed: for O_APPEND, at the copy's end (then the kernel's size
    /// and pages of the file are wrong).
    public func writeLanding(handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) throws(FSError) -> (count: Int, offset: Int64, inode: Inode) {
        guard let file = openFiles[handle], file.writable else { throw .invalidArgument }
        let landed = file.appends ? try file.copy.appendLocal(bytes) : (try file.copy.writeLocal(bytes, at: offset), offset)
        uploadStreams?.consider(file.copy)
        return (landed.0, landed.1, file.inode)
    }

    /// Commits the changes to the journal (not flushed to disk: see `SessionMarker`) before every
    /// close() returns. Only committed content is ever uploaded.
    public func flush(handle: UInt64) async throws(FSError) {
        guard let file = openFiles[handle] else { return }
        noteRead(file)
        try await completeForCommit(file)
        try file.copy.commit()
    }

    /// On the calling thread, or false when holes must be fetched first (then call `flush`).
    public func flushIfComplete(handle: UInt64) throws(FSError) -> Bool {
        guard let file = openFiles[handle] else { return true }
        noteRead(file)
        if file.copy.needsFillBeforeCommit { return false }
        try file.copy.commit()
        return true
    }

    /// The prefetcher learns of a file read whole (at flush, which close() waits for).
    private func noteRead(_ file: OpenFile) {
        guard prefetching, !file.writable, file.reads.furthest >= file.copy.length, let parent = file.opened.parent else { return }
        prefetcher.readWhole(file.opened.name, in: parent)
    }

    /// Only a complete copy is committed: fetches what a changed sparse copy lacks, waiting as a
    /// writer does. If the version changed, `ESTALE`; the changes stay uncommitted, and a last
    /// close hands them to the uploader all the same (`CopyLife.awaitingFill`).
    func completeForCommit(_ file: OpenFile) async throws(FSError) {
        guard file.copy.needsFillBeforeCommit else { return }
        try await provider.complete(file.copy, of: file.opened)
    }

    /// Commit (flushed to local disk), then upload now and wait for the store to confirm.
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

    /// The last close evicts the copy, or hands it to the uploader.
    public func release(handle: UInt64) async {
        guard let file = openFiles.remove(handle) else { return }
        file.copy.endReadStream(handle)
        // Most closes have nothing to commit: no hop to the blocking queue for them.
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

    /// Before a truncate, a sparse copy fetches every byte it lacks, of the version it opened.
    public func provideForChange(_ handle: UInt64) async throws(FSError) {
        if let file = openFiles[handle], file.writable {
            try await provider.complete(file.copy, of: file.opened)
        }
    }
}
