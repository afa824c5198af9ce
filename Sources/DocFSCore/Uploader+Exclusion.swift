import DocFSStore

/// A rename or unlink runs `exclusively` on its paths, so an upload never writes a name the
/// namespace just moved away; uploads elsewhere go on.
extension Uploader {
    /// No upload of `paths` (or below) is in flight or starts meanwhile.
    /// A folder being made at, above or below `paths` is made first (`Uploader+FoldersAhead`).
    public func exclusively<T: Sendable>(touching paths: [StorePath], _ body: @Sendable () async throws(FSError) -> T) async throws(FSError) -> T {
        await waitForFoldersBeingMade(overlapping: paths)
        let holder = hold(paths)
        defer {
            streams?.release(holder)
            release(holder)
        }
        // A stream to the paths ends here (a completed commit is recorded first, so the rename or
        // unlink then acts on the store's file).
        for stream in streams?.hold(holder, paths) ?? [] {
            if let copy = provider.presentCopies.withLock({ $0[stream.inode] }), copy.takeStream(stream) != nil {
                await settle(stream, of: copy)
            }
        }
        while inFlight.values.contains(where: { Uploader.overlaps($0.path, paths) }) {
            await withCheckedContinuation { exclusiveWaiters.append($0) }
        }
        return try await body()
    }

    /// While the store cannot say where a change cut short by a kill left them (`InterruptedChanges`).
    public func hold(_ paths: [StorePath]) -> Int {
        let holder = nextHolder
        nextHolder += 1
        exclusiveHolders[holder] = paths
        return holder
    }

    public func release(_ holder: Int) {
        exclusiveHolders[holder] = nil
        startWork()
    }
}
