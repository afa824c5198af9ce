import DocFSStore

/// Namespace changes and uploads of the same paths never overlap: a rename or an unlink runs
/// `exclusively` on the paths it touches, with no upload of them in flight and none starting
/// until it ends, so an upload never writes a name the namespace just moved away. Uploads
/// elsewhere go on meanwhile.
extension Uploader {
    /// Runs a namespace operation that touches `paths` (and everything below them) with no
    /// upload of those paths in flight and none starting meanwhile. Uploads elsewhere go on:
    /// one large upload never stalls the rest of the namespace.
    public func exclusively<T: Sendable>(touching paths: [StorePath], _ body: @Sendable () async throws(FSError) -> T) async throws(FSError) -> T {
        let holder = nextHolder
        nextHolder += 1
        exclusiveHolders[holder] = paths
        defer {
            streams?.release(holder)
            exclusiveHolders[holder] = nil
            startWork()
        }
        // A stream to one of the paths ends here (a commit it completed is recorded first: a
        // rename then moves the file on the store, an unlink deletes it there).
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

    /// Keeps uploads of `paths` (and of everything below them) from starting until `release`:
    /// while the store cannot say where a change cut short by a kill left them
    /// (`InterruptedChanges`).
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
