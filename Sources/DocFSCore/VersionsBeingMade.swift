import DocFSStore

/// Attribute changes of this mount on their way to the store, which may give an item's content a
/// new version. A ranged read that meets a version it did not ask for waits for them: once the
/// change is recorded, its copy has followed the new version (`LocalCopy.rebase`) and the range
/// is asked again, instead of the file being called changed by another client.
struct VersionsBeingMade {
    private var underWay: [Inode: Int] = [:]
    private var waiters: [UInt64: (inode: Inode, continuation: CheckedContinuation<Void, Never>)] = [:]
    private var lastWaiter: UInt64 = 0

    func isUnderWay(_ inode: Inode) -> Bool { underWay[inode] != nil }

    mutating func began(_ inode: Inode) { underWay[inode, default: 0] += 1 }

    /// The waiters to resume.
    mutating func ended(_ inode: Inode) -> [CheckedContinuation<Void, Never>] {
        underWay[inode] = underWay[inode].flatMap { $0 > 1 ? $0 - 1 : nil }
        guard underWay[inode] == nil else { return [] }
        let done = waiters.filter { $0.value.inode == inode }
        for id in done.keys { waiters[id] = nil }
        return done.values.map(\.continuation)
    }

    mutating func newWaiter() -> UInt64 {
        lastWaiter += 1
        return lastWaiter
    }

    mutating func wait(_ id: UInt64, for inode: Inode, _ continuation: CheckedContinuation<Void, Never>) {
        waiters[id] = (inode, continuation)
    }

    /// A waiter whose task was cancelled, to resume now.
    mutating func withdraw(_ id: UInt64) -> CheckedContinuation<Void, Never>? {
        waiters.removeValue(forKey: id)?.continuation
    }
}
