import DocFSStore
import Foundation
import Logging

/// True kinds where listings cannot show links (an S3 link object looks like a small file),
/// without a HEAD per object in the listing: small objects with no kind known for their version
/// are confirmed at their first lookup (readdir gives DT_UNKNOWN, so `ls -l` stats them).
enum SymlinkProbe {
    static func maximumSize(of store: any Store) -> Int64? {
        guard case .byStat(let maximumTargetBytes) = store.capabilities.symlinkDiscovery else { return nil }
        return maximumTargetBytes
    }

    static func resolve(_ entries: [RemoteEntry], in directory: Item, store: any Store,
                        catalog: Catalog) throws(FSError) -> (entries: [RemoteEntry], unknown: Set<FileName>) {
        guard let maximumTargetBytes = maximumSize(of: store) else { return (entries, []) }
        func candidate(_ entry: RemoteEntry) -> Bool {
            entry.kind == .file && entry.size >= 0 && entry.size <= maximumTargetBytes
        }
        let candidates = entries.filter { candidate($0) && $0.etag != nil }
        let known = candidates.isEmpty ? [:] : try catalog.knownKinds(in: directory.inode, named: candidates.map(\.name))
        var resolved = entries
        var unknown = Set<FileName>()
        for (index, entry) in entries.enumerated() where candidate(entry) {
            if let etag = entry.etag, let kind = known[entry.name.fileName], kind.version == etag {
                resolved[index].kind = kind.kind
            } else {
                unknown.insert(entry.name.fileName)
            }
        }
        return (resolved, unknown)
    }
}

/// One HEAD per entry, one sweep per folder. The catalog's kind is almost always right, so a
/// store found down makes lookups use it at once for `downFor`.
actor KindConfirmations {
    private let store: any Store
    private let catalog: Catalog
    private let retry: RetryPolicy
    private let logger: Logger
    private let concurrency: Int
    private let downFor: Duration
    private var pending: [Inode: Task<Void, Never>] = [:]
    private var sweeping: Set<Inode> = []
    /// Folders listed ahead of a walk, waiting for their sweep: at most `sweepsAtOnce` run, at
    /// half the reader's width each, so a walk that lists many folders ahead never has more than
    /// `2 * concurrency` HEADs out. The folder a reader is in is swept at once, never behind them.
    private var sweepsWaiting: [Inode] = []
    private var sweepsAheadRunning = 0
    static let sweepsAtOnce = 2
    private var foundDownAt: ContinuousClock.Instant?
    /// When a lookup last needed a kind: a reader stats what it walks (`ls -lR`, `find`), and
    /// folders listed ahead of it are swept ahead too.
    private var lookupNeededKindAt: ContinuousClock.Instant?
    /// How long after a lookup needed a kind the walk counts as one that stats.
    private let statsFollowFor: Duration

    init(store: any Store, catalog: Catalog, retry: RetryPolicy, logger: Logger, concurrency: Int = 64,
         patience: Duration = .seconds(2), downFor: Duration = .seconds(10), statsFollowFor: Duration = .seconds(10)) {
        self.store = store
        self.catalog = catalog
        self.retry = retry.within(min(retry.deadline ?? patience, patience))
        self.logger = logger
        self.concurrency = concurrency
        self.downFor = downFor
        self.statsFollowFor = statsFollowFor
    }

    private var storeSeemsDown: Bool {
        guard let foundDownAt else { return false }
        return ContinuousClock.now - foundDownAt < downFor
    }

    /// If the store cannot be asked, the catalog's kind stands and the next lookup asks again.
    func confirm(_ item: Catalog.KindToConfirm) async {
        if storeSeemsDown { return }
        lookupNeededKindAt = .now
        startSweep(item.parent)
        if let task = pending[item.inode] ?? (stillToConfirm(item) ? startProbe([item], in: item.parent, concurrency: 1) : nil) {
            await task.value
        }
    }

    /// A folder listed ahead of a reader that stats what it walks is swept before the reader
    /// comes; a plain listing (`ls`, a file manager's names) never is.
    func sweepAhead(_ directory: Inode) {
        guard walkStats else { return }
        startSweep(directory, ahead: true)
    }

    /// `ahead`: a folder listed ahead of a walk, swept when a place is free.
    private func startSweep(_ directory: Inode, ahead: Bool = false) {
        if !ahead, let waiting = sweepsWaiting.firstIndex(of: directory) {
            sweepsWaiting.remove(at: waiting)  // the reader got there before its sweep began
        } else {
            guard sweeping.insert(directory).inserted else { return }
            if ahead {
                sweepsWaiting.append(directory)
                startWaitingSweeps()
                return
            }
        }
        Task { await self.sweep(directory, concurrency: self.concurrency) }
    }

    private func startWaitingSweeps() {
        // A walk that stopped stats nothing more: what it listed ahead is not asked about.
        if !walkStats {
            for directory in sweepsWaiting { sweeping.remove(directory) }
            sweepsWaiting.removeAll()
        }
        while sweepsAheadRunning < Self.sweepsAtOnce, !sweepsWaiting.isEmpty {
            let directory = sweepsWaiting.removeFirst()
            sweepsAheadRunning += 1
            Task {
                await self.sweep(directory, concurrency: max(1, self.concurrency / 2))
                self.sweepAheadEnded()
            }
        }
    }

    /// Sweeps ahead running or waiting.
    var sweepsAheadUnderWay: Bool { sweepsAheadRunning > 0 || !sweepsWaiting.isEmpty }

    private func sweepAheadEnded() {
        sweepsAheadRunning -= 1
        startWaitingSweeps()
    }

    /// A lookup needed a kind a moment ago: the reader stats what it walks.
    private var walkStats: Bool {
        guard let lookupNeededKindAt else { return false }
        return ContinuousClock.now - lookupNeededKindAt < statsFollowFor && !storeSeemsDown
    }

    /// Another confirmation may have ended since the caller read the catalog.
    private func stillToConfirm(_ item: Catalog.KindToConfirm) -> Bool {
        guard let maximumSize = SymlinkProbe.maximumSize(of: store),
              let current = try? catalog.item(item.inode) else { return false }
        return (try? catalog.kindToConfirm(current, maximumSize: maximumSize)) != nil
    }

    private func startProbe(_ batch: [Catalog.KindToConfirm], in directory: Inode, concurrency: Int) -> Task<Void, Never> {
        let task = Task {
            let storeDown = await self.probe(batch, in: directory, concurrency: concurrency)
            self.finished(batch.map(\.inode), storeDown: storeDown)
        }
        for item in batch { pending[item.inode] = task }
        return task
    }

    /// In name order: the order `ls -l` stats them in. Batches of `batchSize` applied in one
    /// transaction each, two in flight, each asked half of `concurrency` at a time. The reader's
    /// folder at 64 (was 32: 5,000 objects 20 ms away from 4.4 to 2.7 s; four batches of 16 in
    /// flight were no better, 3.0 s).
    private func sweep(_ directory: Inode, concurrency: Int) async {
        defer { sweeping.remove(directory) }
        guard let maximumSize = SymlinkProbe.maximumSize(of: store),
              let candidates = try? catalog.kindsToConfirm(in: directory, maximumSize: maximumSize) else { return }
        var running: [Task<Void, Never>] = []
        var start = candidates.startIndex
        while start < candidates.endIndex, !storeSeemsDown {
            let end = min(start + Self.batchSize, candidates.endIndex)
            let batch = candidates[start..<end].filter { pending[$0.inode] == nil && stillToConfirm($0) }
            start = end
            guard !batch.isEmpty else { continue }
            running.append(startProbe(batch, in: directory, concurrency: max(1, concurrency / 2)))
            if running.count >= 2 { await running.removeFirst().value }
        }
        for task in running { await task.value }
    }

    private static let batchSize = 64

    private func finished(_ inodes: [Inode], storeDown: Bool) {
        for inode in inodes { pending[inode] = nil }
        // A probe that reached the store ends the outage at once.
        foundDownAt = storeDown ? .now : nil
    }

    private enum Answer {
        case entry(RemoteEntry)
        /// Gone since the listing, or refused: nothing to record.
        case nothing
        case storeDown
    }

    /// Returns whether the store was found down (no more HEADs then).
    private nonisolated func probe(_ items: [Catalog.KindToConfirm], in directory: Inode, concurrency: Int) async -> Bool {
        let askedAt = Date().timeIntervalSince1970
        let (stated, storeDown) = await withTaskGroup(of: Answer.self) { group in
            var results: [RemoteEntry] = []
            var storeDown = false
            var next = items.makeIterator()
            func startNext() {
                guard !storeDown, let item = next.next() else { return }
                group.addTask { await self.stat(item) }
            }
            for _ in 0..<concurrency { startNext() }
            while let answer = await group.next() {
                switch answer {
                case .entry(let entry): results.append(entry)
                case .nothing: break
                case .storeDown: storeDown = true
                }
                startNext()
            }
            return (results, storeDown)
        }
        guard !stated.isEmpty else { return storeDown }
        do {
            try await Blocking.run { [catalog] () throws(FSError) in
                try catalog.applyListingPage(stated, of: directory, askedAt: askedAt, progress: ListingProgress(startedAt: askedAt))
            }
        } catch {
            logger.debug("could not record the kinds of entries", metadata: ["count": "\(stated.count)", "error": "\(error)"])
        }
        return storeDown
    }

    private nonisolated func stat(_ item: Catalog.KindToConfirm) async -> Answer {
        do {
            let stated = try await retry.run { () async throws(StoreError) -> RemoteEntry in try await store.stat(item.path) }
            return stated.path == item.path ? .entry(stated) : .nothing
        } catch {
            logger.debug("could not tell whether an entry is a link", metadata: ["path": "\(item.path)", "error": "\(error)"])
            switch error {
            case .unreachable, .timedOut: return .storeDown
            default: return .nothing
            }
        }
    }
}
