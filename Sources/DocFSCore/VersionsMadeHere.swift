import DocFSStore

/// The store versions this mount made of an item itself, each from the one before: an upload
/// over its base, or a change of attributes whose answer named the same content's new version.
/// A writer decides its version before its open reaches the provider; if this mount made newer
/// versions since (`mark`), its change belongs to the newest of them, as on a local disk, where
/// programs on one machine share one file. A version another client made is never followed, nor
/// a step older than the writer's decision (an old ETag that came back, as S3's MD5 does).
/// In memory: after a restart such a writer's change becomes a conflict copy at worst.
struct VersionsMadeHere {
    private enum Made {
        case content(RemoteEntry)
        case sameContent(ETag)
    }

    private var steps: [Inode: [(number: UInt64, from: ETag, to: Made)]] = [:]
    /// The number of the last step.
    private(set) var mark: UInt64 = 0
    private static let keptPerItem = 8
    /// Past it all is forgotten: at worst a conflict copy.
    private static let keptItems = 1024

    mutating func uploaded(_ inode: Inode, over base: ETag, as stored: RemoteEntry) {
        guard let new = stored.etag, new != base else { return }
        add(inode, from: base, to: .content(stored))
    }

    mutating func moved(_ inode: Inode, from old: ETag, to new: ETag) {
        guard new != old else { return }
        add(inode, from: old, to: .sameContent(new))
    }

    /// `opened`, or the newest version this mount made from it after `since` (a `mark`).
    func newest(of inode: Inode, after opened: RemoteEntry, since: UInt64) -> RemoteEntry {
        guard let made = steps[inode] else { return opened }
        var entry = opened
        // Each step is taken once at most, so versions that repeat cannot loop.
        for step in made where step.number > since && step.from == entry.etag {
            switch step.to {
            case .content(let stored): entry = RemoteEntry(path: opened.path, kind: .file, size: stored.size, modified: stored.modified, etag: stored.etag)
            case .sameContent(let new): entry.etag = new
            }
        }
        return entry
    }

    private mutating func add(_ inode: Inode, from old: ETag, to made: Made) {
        if steps[inode] == nil, steps.count >= Self.keptItems { steps.removeAll() }
        mark += 1
        steps[inode] = (steps[inode] ?? []).suffix(Self.keptPerItem - 1) + [(mark, old, made)]
    }
}
