import DocFSStore
import Logging

/// Gives every entry of a listing its true kind, on stores whose listings cannot show links.
///
/// An S3 listing carries no metadata, so a link object (a small object whose `x-amz-meta-mode`
/// says S_IFLNK, as s3fs writes it) looks like a file of a few bytes. Applied as it is, a
/// listing would turn every link into a file. So before a listing reaches the catalog, each
/// file small enough to be a link is looked at once with `stat`, and what that says is kept
/// in the catalog for the entry's version (`kindKnownFor`): the next listing of the same
/// version asks nothing. Links docfs made itself, and files it uploaded, are known from the
/// start. Files larger than any link target are never asked about. Empty objects are asked
/// about too: on S3 a FIFO, socket or device node is an empty object whose mode says so (see
/// S3Store+SpecialFiles.swift).
struct SymlinkProbe {
    let store: any Store
    let catalog: Catalog
    let retry: RetryPolicy
    let logger: Logger
    /// Stats in flight at once for one listing.
    var concurrency = 16

    /// `entries` of `directory` with each small file's true kind, and the names whose kind could
    /// not be learnt (the catalog keeps what it has for those).
    func resolve(_ entries: [RemoteEntry], in directory: Item) async throws(FSError) -> (entries: [RemoteEntry], unknown: Set<FileName>) {
        guard case .byStat(let maximumTargetBytes) = store.capabilities.symlinkDiscovery else { return (entries, []) }
        let candidates = entries.filter { $0.kind == .file && $0.size >= 0 && $0.size <= maximumTargetBytes && $0.etag != nil }
        let known = try catalog.knownKinds(in: directory.inode, named: candidates.map(\.name))
        var resolved = entries
        var unknown: [Int] = []
        for (index, entry) in entries.enumerated() {
            guard entry.kind == .file, entry.size >= 0, entry.size <= maximumTargetBytes else { continue }
            if let etag = entry.etag, let kind = known[entry.name.fileName], kind.version == etag {
                resolved[index].kind = kind.kind
            } else {
                unknown.append(index)
            }
        }
        guard !unknown.isEmpty else { return (resolved, []) }
        logger.debug("asking the store which small files are links or special files", metadata: ["path": "\(directory.path)", "count": "\(unknown.count)"])
        var unresolved = Set(unknown.map { entries[$0].name.fileName })
        for (index, stated) in await stat(unknown.map { ($0, entries[$0]) }) {
            // The stat's answer is as new as the listing's or newer: take all of it.
            resolved[index] = stated
            unresolved.remove(stated.name.fileName)
        }
        return (resolved, unresolved)
    }

    /// What `stat` says of each entry, `concurrency` at a time. An entry that cannot be asked
    /// about (gone since the listing, a failing store) is left out: the caller keeps the
    /// catalog's kind for it, and it is asked about again with the next listing.
    private func stat(_ entries: [(index: Int, entry: RemoteEntry)]) async -> [(Int, RemoteEntry)] {
        await withTaskGroup(of: (Int, RemoteEntry)?.self) { group in
            var results: [(Int, RemoteEntry)] = []
            var pending = entries.makeIterator()
            func startNext() {
                guard let (index, entry) = pending.next() else { return }
                group.addTask { [store, retry, logger] in
                    do {
                        let stated = try await retry.run { () async throws(StoreError) -> RemoteEntry in try await store.stat(entry.path) }
                        return stated.path == entry.path ? (index, stated) : nil
                    } catch {
                        logger.debug("could not tell whether an entry is a link", metadata: ["path": "\(entry.path)", "error": "\(error)"])
                        return nil
                    }
                }
            }
            for _ in 0..<concurrency { startNext() }
            while let result = await group.next() {
                if let result { results.append(result) }
                startNext()
            }
            return results
        }
    }
}
