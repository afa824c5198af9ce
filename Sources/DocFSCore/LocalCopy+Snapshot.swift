import DocFSStore
import Foundation

/// An upload reads a snapshot of one commit, never the live file.
extension LocalCopy {
    /// Returns the commit the snapshot holds, or nil when there is nothing to upload or uncommitted
    /// writes are in the copy (their close uploads them); `committingPending` (fsync) commits them.
    public func startUpload(snapshotTo snapshotPath: String, committingPending: Bool) throws(FSError) -> UInt64? {
        if committingPending && life.uncommitted { try sync() }
        return try state.withLock { (state) throws(FSError) -> UInt64? in
            // A discarded copy has no descriptor: its number may be another file's now.
            guard !state.discarded else { throw .stale }
            guard state.writesInFlight == 0 else { return nil }
            var life = state.life
            if life.uncommitted && committingPending { life.committedChanges() }
            guard life.uploadStarted(), let commit = life.uploading else { return nil }
            try snapshot(to: snapshotPath, &state)
            try record(life, in: &state)
            return commit
        }
    }

    /// A complete copy gets a hard link (no byte copied) and its next change gets its own file
    /// (`unshare`); a copy still being filled is copied.
    private func snapshot(to snapshotPath: String, _ state: inout State) throws(FSError) {
        unlink(snapshotPath)
        var info = stat()
        if state.fetcher == nil, state.held.contains(0..<state.length), fstat(state.descriptor, &info) == 0,
           Int64(info.st_size) == state.length, link(path, snapshotPath) == 0 {
            state.sharedWithSnapshot = true
            return
        }
        try Snapshot.copy(from: state.descriptor, length: state.length, to: snapshotPath)
    }

    public func snapshotReleased() {
        state.withLock { $0.sharedWithSnapshot = false }
    }

    /// The copy moves to a copy of the file under its name; the snapshot keeps the old one. Calls
    /// on the old descriptor finish on it (closed after the last of them).
    func unshare(_ state: inout State) throws(FSError) {
        guard state.sharedWithSnapshot || state.sharedWithStream else { return }
        let moving = path + ".unshared"
        try Snapshot.copy(from: state.descriptor, length: state.length, to: moving)
        let fd = open(moving, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            unlink(moving)
            throw .local(errno: code, "cannot reopen local copy \(moving): \(String(cString: strerror(code)))")
        }
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
