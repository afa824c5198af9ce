import Foundation

extension LocalCopy {
    /// Nil when there is nothing to upload or uncommitted writes are in the copy (unless
    /// `committingPending`, for fsync).
    public func startUpload(snapshotTo snapshotPath: String, committingPending: Bool) throws(FSError) -> UInt64? {
        if committingPending && life.uncommitted { try sync() }
        return try changeLife { (state) throws(FSError) -> (next: CopyLife?, result: UInt64?) in
            // A discarded copy has no descriptor: its number may be another file's now.
            guard !state.discarded else { throw .stale }
            guard state.writesInFlight == 0 else { return (nil, nil) }
            var life = state.life
            if life.uncommitted && committingPending { life.committedChanges() }
            guard life.uploadStarted(), let commit = life.uploading else { return (nil, nil) }
            // A complete copy gets a hard link (no byte copied); a copy still being filled is copied.
            unlink(snapshotPath)
            var info = stat()
            if state.fetcher == nil, state.held.contains(0..<state.length), fstat(state.descriptor, &info) == 0,
               Int64(info.st_size) == state.length, link(path, snapshotPath) == 0 {
                state.sharedWithSnapshot = true
            } else {
                try Snapshot.copy(from: state.descriptor, length: state.length, to: snapshotPath)
            }
            return (life, commit)
        }
    }

    public func snapshotReleased() {
        state.withLock { $0.sharedWithSnapshot = false }
    }

    /// Before the copy's file changes while an upload's snapshot shares it: the copy moves to
    /// a copy of the file, which takes the copy's name; the snapshot keeps the old file as it
    /// was. Calls that still use the old descriptor finish on it (it is closed after the last of them).
    /// Callers run `unshareAhead` first, so the copying is seldom done here, under the lock.
    func unshare(_ state: inout State) throws(FSError) {
        guard state.sharedWithSnapshot || state.sharedWithStream else { return }
        let (moving, fd) = try copyOfTheFile(from: state.descriptor, length: state.length)
        try takeCopy(moving, fd, &state)
    }

    /// `unshare`, with the file copied outside the copy's lock, so that readers are not held
    /// up for the copy of a large file (ext4 has no reflink). The copy is taken only when the
    /// file is still the one copied, at the same length: a change needs its descriptor from
    /// the lock, and one that came meanwhile unshared there first (this copy is then dropped).
    func unshareAhead() throws(FSError) {
        let borrowed = state.withLock { state -> (descriptor: Int32, length: Int64)? in
            guard !state.discarded, state.sharedWithSnapshot || state.sharedWithStream else { return nil }
            state.users += 1
            return (state.descriptor, state.length)
        }
        guard let borrowed else { return }
        do throws(FSError) {
            let (moving, fd) = try copyOfTheFile(from: borrowed.descriptor, length: borrowed.length)
            let unused = try state.withLock { (state) throws(FSError) -> [Int32] in
                if !state.discarded, state.sharedWithSnapshot || state.sharedWithStream, state.descriptor == borrowed.descriptor,
                   state.length == borrowed.length {
                    try takeCopy(moving, fd, &state)
                } else {
                    Glibc.close(fd)
                    unlink(moving)
                }
                return state.releaseDescriptor(borrowed.descriptor)
            }
            for descriptor in unused { Glibc.close(descriptor) }
        } catch {
            releaseDescriptor(borrowed.descriptor)
            throw error
        }
    }

    /// A copy of the file's first `length` bytes beside it, opened.
    private func copyOfTheFile(from descriptor: Int32, length: Int64) throws(FSError) -> (path: String, descriptor: Int32) {
        let moving = path + ".unshared-\(UInt64.random(in: 0...UInt64.max))"  // two changes may copy at once
        try Snapshot.copy(from: descriptor, length: length, to: moving)
        let fd = open(moving, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            unlink(moving)
            throw .local(errno: code, "cannot reopen local copy \(moving): \(String(cString: strerror(code)))")
        }
        return (moving, fd)
    }

    /// The copy `moving` (open as `fd`) takes the copy's name and becomes its file.
    private func takeCopy(_ moving: String, _ fd: Int32, _ state: inout State) throws(FSError) {
        guard rename(moving, path) == 0 else {
            let code = errno
            Glibc.close(fd)
            unlink(moving)
            throw .local(errno: code, "cannot move local copy \(path): \(String(cString: strerror(code)))")
        }
        if state.users > 0 {
            state.retired[state.descriptor] = state.users
        } else {
            Glibc.close(state.descriptor)  // nobody uses it: the snapshot's name keeps its file
        }
        state.users = 0
        state.descriptor = fd
        state.sharedWithSnapshot = false
        state.sharedWithStream = false
    }
}
