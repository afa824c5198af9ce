import DocFSStore
import Foundation

extension LocalCopy {
    /// A cheap look, on every write.
    func mayStream(_ policy: StreamedUpload.Policy) -> Bool {
        state.withLock { $0.mayStream(policy) }
    }

    /// Only for a new file nothing of which was uploaded, of at least `minimumLength` bytes, all
    /// written here, never streamed before.
    func beginStream(to path: StorePath, policy: StreamedUpload.Policy,
                     send: @escaping @Sendable (StreamedUpload) async throws(StoreError) -> RemoteEntry) -> StreamedUpload? {
        state.withLock { state -> StreamedUpload? in
            guard state.mayStream(policy), state.streamed == nil, !state.discarded, state.fetcher == nil,
                  !state.sharedWithSnapshot, !state.sharedWithStream, state.writesInFlight == 0,
                  state.life.uploading == nil, !state.life.removed
            else { return nil }
            // Not written in order: it never streams, and later writes need not ask again.
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

    /// A stream that sent exactly the committed content completes the commit; any other is
    /// cancelled. Not at every flush: a dup'ed descriptor closing must not end it.
    @discardableResult
    func completeStream() throws(FSError) -> Bool {
        var sealed: StreamedUpload?
        do {
            return try changeLife({ (state) -> (next: CopyLife?, result: Bool) in
                guard let stream = state.streamed, stream.sealedCommit == nil else { return (nil, false) }
                var life = state.life
                guard life.uploadStarted(), stream.seal(length: state.length, commit: life.committed) else {
                    stream.abandon()
                    return (nil, false)
                }
                sealed = stream
                return (life, true)
            }, recording: { (life) throws(FSError) in
                try self.catalog.recordCopy(self.inode, life)
            }, applied: { state in
                // The next change gets its own file: the stream never sends a byte written after it.
                state.sharedWithStream = true
            })
        } catch {
            // Not in the journal as uploading: the stream must not be confirmed either.
            sealed?.revoke()
            throw error
        }
    }

    var isStreaming: Bool {
        state.withLock { $0.streamed.map { $0.sealedCommit == nil } ?? false }
    }

    /// Nil `stream`: any. The taker applies what it left on the store.
    func takeStream(_ stream: StreamedUpload? = nil) -> StreamedUpload? {
        state.withLock { state -> StreamedUpload? in
            guard let current = state.streamed, stream == nil || stream === current else { return nil }
            state.streamed = nil
            return current
        }
    }
}
