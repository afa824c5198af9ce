// Reads never touch the network on the caller's thread; a close commits and hands over the copy.

import DocFSStore
import Logging

extension DocFileSystem {
    /// A zero-copy reply.
    public func lendLocalBytes(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        if prefetching { file.reads.reached(offset + Int64(count)) }  // only the prefetcher asks
        return try file.copy.lend(at: offset, count: count)
    }

    /// Nil while the bytes are fetched: wait with `waitForContent`. One lock per read.
    public func lendForRead(handle: UInt64, offset: Int64, count: Int) throws(FSError) -> DescriptorLoan? {
        guard let file = openFiles[handle] else { throw .invalidArgument }
        if prefetching { file.reads.reached(offset + Int64(count)) }  // only the prefetcher asks
        guard file.mayFetch else {
            // A handle that may not fetch gets only bytes already held, else `fetchRefused`.
            let end = min(offset + Int64(count), file.copy.length)
            if end > offset, !file.copy.held.contains(offset..<end) {
                throw .fetchRefused("bytes \(offset)..<\(end) of \(file.opened.path)")
            }
            return try file.copy.lend(at: offset, count: count)
        }
        return try file.copy.lendForRead(at: offset, count: count, stream: handle)
    }

    /// Nil when the copy has local changes.
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
        // A fresh stall fails the next read at once: the kernel retries each page of a read-ahead.
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

    /// For O_APPEND the bytes land at the copy's end, and the kernel's size and pages are wrong.
    public func writeLanding(handle: UInt64, offset: Int64, bytes: UnsafeRawBufferPointer) throws(FSError) -> (count: Int, offset: Int64, inode: Inode) {
        guard let file = openFiles[handle], file.writable else { throw .invalidArgument }
        let landed = file.appends ? try file.copy.appendLocal(bytes) : (try file.copy.writeLocal(bytes, at: offset), offset)
        uploadStreams?.consider(file.copy)
        return (landed.0, landed.1, file.inode)
    }

    /// Commits to the journal before every close() returns (not flushed to disk: see `SessionMarker`).
    public func flush(handle: UInt64) async throws(FSError) {
        guard let file = openFiles[handle] else { return }
        noteRead(file)
        try await completeForCommit(file)
        // A catalog write: off the cooperative pool (the FUSE thread's `flushIfComplete` may block).
        try await Blocking.run { () throws(FSError) in _ = try file.copy.commit() }
    }

    /// False when holes must be fetched first (then call `flush`).
    public func flushIfComplete(handle: UInt64) throws(FSError) -> Bool {
        guard let file = openFiles[handle] else { return true }
        noteRead(file)
        if file.copy.needsFillBeforeCommit { return false }
        try file.copy.commit()
        return true
    }

    private func noteRead(_ file: OpenFile) {
        guard prefetching, !file.writable, file.reads.furthest >= file.copy.length, let parent = file.opened.parent else { return }
        prefetcher.readWhole(file.opened.name, in: parent)
    }

    /// Only a complete copy is committed. If the version changed, `ESTALE`, and a last close hands
    /// the changes to the uploader all the same.
    func completeForCommit(_ file: OpenFile) async throws(FSError) {
        guard file.copy.needsFillBeforeCommit else { return }
        try await provider.complete(file.copy, of: file.opened)
    }

    /// Commit, flushed, then upload now and wait for the store to confirm.
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
                    do { try file.copy.commitAwaitsFill() } catch let recording {
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
        let needsUpload = await provider.release(file.inode)
        logger.trace("released", metadata: ["inode": "\(file.inode)", "needsUpload": "\(needsUpload)"])
    }

    /// Before a truncate, a sparse copy fetches every byte it lacks.
    public func provideForChange(_ handle: UInt64) async throws(FSError) {
        if let file = openFiles[handle], file.writable {
            try await provider.complete(file.copy, of: file.opened)
        }
    }
}
