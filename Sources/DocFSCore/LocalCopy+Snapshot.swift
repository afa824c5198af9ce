import DocFSStore
import Foundation

extension LocalCopy {
    /// Nil when there is nothing to upload or uncommitted writes are in the copy (unless
    /// `committingPending`, for fsync).
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

    /// A complete copy gets a hard link (no byte copied); a copy still being filled is copied.
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

    /// The snapshot keeps the old file; calls on the old descriptor finish on it.
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
