import DocFSStore
import Foundation

/// A new file sent to the store while it is written (`StreamedUpload`): the copy decides when a
/// stream may start, seals it with the commit it carries, and gives it up to the uploader.
extension LocalCopy {
    /// Whether the copy could start a stream now (see `beginStream`): a cheap look, on every write.
    func mayStream(_ policy: StreamedUpload.Policy) -> Bool {
        state.withLock { $0.mayStream(policy) }
    }

    /// Starts sending the copy to `path` as it is written (see `StreamedUpload`): when it is a
    /// new file nothing of which was uploaded yet (`dd` commits it empty when it closes the
    /// descriptor it dup'ed to its output, before the first write), of at least `policy.minimumLength` bytes, all written here
    /// and none fetched, and it never streamed before. Nil otherwise.
    func beginStream(to path: StorePath, policy: StreamedUpload.Policy,
                     send: @escaping @Sendable (StreamedUpload) async throws(StoreError) -> RemoteEntry) -> StreamedUpload? {
        state.withLock { state -> StreamedUpload? in
            guard state.mayStream(policy), state.streamed == nil, !state.discarded, state.fetcher == nil,
                  !state.sharedWithSnapshot, !state.sharedWithStream, state.writesInFlight == 0,
                  state.life.uploading == nil, !state.life.removed
            else { return nil }
            // Not written in order from its start: it never streams, and later writes need not
            // ask again (each ask reads the catalog, on the path of a write).
            guard state.held.contains(0..<state.length) else {
                state.streamTried = true
                return nil
            }
            let descriptor = fcntl(state.descriptor, F_DUPFD_CLOEXEC, 0)
            guard descriptor >= 0 else { return nil }
            state.streamTried = true
            let stream = StreamedUpload(inode: inode, path: path, descriptor: descriptor, written: state.length, policy: policy, send: send)
            state.streamed = stream
            return stream
        }
    }

    /// The last writer let go, or an fsync asks for the store to have it all: a stream that
    /// sent exactly the committed content completes that commit, and the journal says it is
    /// uploading. Any other stream is cancelled (writes since the commit, or out of order).
    /// Not at every commit: a flush also comes when a dup of the writer's descriptor closes
    /// (a forked child exiting), and that must not end an upload the writer goes on with.
    /// Returns whether a commit is now being uploaded by the stream.
    @discardableResult
    func completeStream() throws(FSError) -> Bool {
        try state.withLock { (state) throws(FSError) -> Bool in
            guard let stream = state.streamed, stream.sealedCommit == nil else { return false }
            var life = state.life
            guard life.uploadStarted(), stream.seal(length: state.length, commit: life.committed) else {
                stream.abandon()
                return false
            }
            do throws(FSError) {
                try catalog.recordCopy(inode, life)
            } catch {
                // Not in the journal as uploading: the stream must not be confirmed either.
                stream.revoke()
                throw error
            }
            state.life = life
            // The next change gets a file of its own: the stream never sends a byte written after it.
            state.sharedWithStream = true
            return true
        }
    }

    /// Whether a stream of the copy is under way and not completed (a cheap look).
    var isStreaming: Bool {
        state.withLock { $0.streamed.map { $0.sealedCommit == nil } ?? false }
    }

    /// Takes the copy's stream away, if it is `stream` (or any, when nil): the one who takes
    /// it applies what it left on the store.
    func takeStream(_ stream: StreamedUpload? = nil) -> StreamedUpload? {
        state.withLock { state -> StreamedUpload? in
            guard let current = state.streamed, stream == nil || stream === current else { return nil }
            state.streamed = nil
            return current
        }
    }
}
