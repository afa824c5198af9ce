@testable import DocFSCore
import DocFSStore
import DocFSTesting
import Foundation
import Synchronization
import Testing

/// A model-based test of the core, in the style of mountpoint-s3's reference-model property
/// tests: seeded random sequences of local operations (open, read, write, flush, fsync, close,
/// truncate, create, rename, unlink, mkdir — folders made ahead of their files —, pin, unpin),
/// changes another client makes on the store
/// (change, delete, rename, file <-> directory), background listings, server outages and
/// `kill -9` with a restart, run against `DocFileSystem` on an in-memory store and checked against a
/// small reference model.
///
/// The model is a ledger of *versions*: the content another client put on the store, the
/// content a local close/flush/fsync committed, and the content a crash found written but not
/// committed ("unsaved"). Each version must be kept — as some file's content on the store
/// (its path, a conflict copy, an unsaved copy) or in a recovery folder — unless it was
/// legitimately given up:
/// - a later commit of the same file (same inode, the "lineage") supersedes the lineage's
///   earlier commits, and the store versions the lineage had *seen* (the content its open
///   read, or for O_TRUNC/create/truncate the store's content at that moment);
/// - at a crash, a lineage's commits are superseded by its uncommitted writes (which are then
///   an unsaved version to keep, unless empty or equal to what the lineage already had);
/// - a local unlink, or a rename over it, gives up the file's lineage and the store's content
///   at that path; another client's change, delete or rename over a path gives up the store's
///   content there (whoever made it);
/// - an unlink or rename during which the daemon is killed right after the store made its
///   change counts as done (the restart must finish it: `ModelOp.killedDuring`).
/// A version someone else made is never superseded by a local write that did not see it.
/// After every sequence (server up, handles closed, uploads settled) the test checks: every
/// version to keep is on the store or in a recovery folder; every file on the store holds the
/// content of some version (nothing torn); nothing but pinned copies is left in the cache, and
/// nothing in the journal; and
/// along the way, every read returned what the model says. Every content an upload ever put
/// on the store, also one a later upload replaced, must be some version too.
///
/// Uploads read their snapshot a few bytes at a time, pausing between chunks (`uploadReading`,
/// drawn from the seed): a close hands its commit to the uploader and returns, so the
/// operations that follow (an open of the same file and a write, a truncate) run while the
/// upload is still reading, and a write that reached the bytes on their way would show as a
/// torn upload.
///
/// Environment: `DOCFS_MODEL_SEED=N` replays one seed (printing its run), `DOCFS_MODEL_SEEDS=N`
/// runs seeds 1...N (`DOCFS_MODEL_FIRST_SEED=F`: F...F+N-1, for a campaign beyond the seeds CI
/// runs), `DOCFS_MODEL_OPS=N` operations per seed, `DOCFS_MODEL_JOBS=N` seeds at
/// once, `DOCFS_MODEL_REPEAT=N` each seed N times (a failure that needs a busy machine's timing),
/// `DOCFS_MODEL_LOG=1` the cores' debug log with a failing seed's report (kept in memory, so
/// the timing moves little). Every finding fails the test. The seed being run is written to
/// `$TMPDIR/docfs-model-seeds` so a seed that traps the process can be found.
@Suite("Model: random operation sequences keep every version")
struct ModelTests {

    @Test func randomSequencesKeepEveryVersion() async throws {
        await runSeeds(defaultCount: 120, streaming: .default)
    }

    /// The same sequences with every file streamed (a policy of a few bytes: the head at open,
    /// then ranged reads, read-ahead and version pinning for every read), so that sparse copies
    /// meet remote changes, writers, truncation, crashes and outages. `DOCFS_MODEL_STREAMING_SEEDS`
    /// sets how many seeds.
    @Test func randomSequencesKeepEveryVersionWhileStreaming() async throws {
        let count = ProcessInfo.processInfo.environment["DOCFS_MODEL_STREAMING_SEEDS"].flatMap { UInt64($0) } ?? 60
        await runSeeds(defaultCount: count, streaming: Self.tinyStreaming)
    }

    static let tinyStreaming = StreamingPolicy(wholeFileLimit: 8, head: 4, minimumRequest: 4, maximumRequest: 8,
                                               initialWindow: 8, maximumWindow: 16, requestsInFlight: 2, streamingAfter: 32)

    private func runSeeds(defaultCount: UInt64, streaming: StreamingPolicy) async {
        let environment = ProcessInfo.processInfo.environment
        let single = environment["DOCFS_MODEL_SEED"].flatMap { UInt64($0) }
        let seedCount = environment["DOCFS_MODEL_SEEDS"].flatMap { UInt64($0) } ?? defaultCount
        let first = environment["DOCFS_MODEL_FIRST_SEED"].flatMap { UInt64($0) } ?? 1
        let repeats = environment["DOCFS_MODEL_REPEAT"].flatMap { Int($0) } ?? 1
        let seeds: [UInt64] = (single.map { [$0] } ?? Array(first..<first + max(1, seedCount))).flatMap { Array(repeating: $0, count: max(1, repeats)) }
        let operations = environment["DOCFS_MODEL_OPS"].flatMap { Int($0) } ?? 40
        let jobs = environment["DOCFS_MODEL_JOBS"].flatMap { Int($0) } ?? 6

        let started = ContinuousClock.now
        var reports: [ModelReport] = []
        // A seed that never ends would hang the run silently: one running for a minute is named.
        let running = RunningSeeds()
        let label = "model test" + (streaming == .default ? "" : " (streaming)")
        let watchdog = Task.detached { await running.watch(label: label) }
        defer { watchdog.cancel() }
        let run: @Sendable (UInt64) async -> ModelReport = { seed in
            running.started(seed)
            defer { running.ended(seed) }
            return await ModelRun.run(seed: seed, operations: operations, streaming: streaming)
        }
        await withTaskGroup(of: ModelReport.self) { group in
            var next = seeds.makeIterator()
            for _ in 0..<jobs {
                guard let seed = next.next() else { break }
                group.addTask { await run(seed) }
            }
            for await report in group {
                reports.append(report)
                if let seed = next.next() {
                    group.addTask { await run(seed) }
                }
            }
        }
        reports.sort { $0.seed < $1.seed }
        let failing = reports.filter { !$0.problems.isEmpty }
        let total = reports.map(\.operations).reduce(0, +)
        print("model test\(streaming == .default ? "" : " (streaming)"): \(reports.count) seeds, \(total) operations, "
              + "\(failing.count) failing seeds in \(ContinuousClock.now - started)"
              + (failing.isEmpty ? "" : ": " + failing.map { "\($0.seed)" }.joined(separator: " ")))
        if single != nil, let report = failing.first ?? reports.first { print(report.text) }

        for report in failing { Issue.record(Comment(rawValue: report.text)) }
    }

    /// Sequences the random test found, minimised by hand: each shows one bug of issue 8.
    @Test(arguments: ModelScenario.all)
    func minimisedSequence(_ scenario: ModelScenario) async throws {
        let report = await ModelRun.run(seed: 0, script: scenario.operations)
        for problem in report.problems { Issue.record(Comment(rawValue: "\(scenario.name): \(problem)\n" + report.text)) }
    }
}

/// A sequence found by the random test, minimised, with the bug it shows.
struct ModelScenario: Sendable, CustomTestStringConvertible {
    var name: String
    var operations: [ModelOp]
    var testDescription: String { name }

    static let all: [ModelScenario] = [
        ModelScenario(name: "seed 93: an unlink that the store refused (down) cancelled the file's pending upload; the change never reached the store", operations: [
            .open("a.txt", .readWrite),
            .serverDown,
            .write(handle: 0, offset: 0, count: 4),
            .close(handle: 0),
            .unlink("a.txt"),
            .serverUp,
        ]),
        ModelScenario(name: "seed 283: a new file kept as a conflict copy then replaced whatever the store had, unconditionally", operations: [
            .refresh("d"),
            .remoteChange("d/y.txt", size: 20),
            .create("d/y.txt"),
            .write(handle: 0, offset: 0, count: 4),
            .fsync(handle: 0),
            .remoteChange("d/y.txt", size: 30),
            .write(handle: 0, offset: 0, count: 5),
            .close(handle: 0),
        ]),
        ModelScenario(name: "1: a refresh moves the base version of an open clean copy; the other client's version is overwritten", operations: [
            .open("a.txt", .readWrite),
            .remoteChange("a.txt", size: 20),
            .refresh("/"),
            .write(handle: 0, offset: 0, count: 4),
            .close(handle: 0),
        ]),
        ModelScenario(name: "3: a refresh that finds an open clean file deleted on the store drops its row; the edit is lost", operations: [
            .open("a.txt", .readWrite),
            .remoteDelete("a.txt"),
            .refresh("/"),
            .write(handle: 0, offset: 0, count: 4),
            .close(handle: 0),
        ]),
        ModelScenario(name: "3: the same with a rename on the store", operations: [
            .open("a.txt", .readWrite),
            .remoteRename("a.txt", "c.txt"),
            .refresh("/"),
            .write(handle: 0, offset: 0, count: 4),
            .close(handle: 0),
        ]),
        ModelScenario(name: "5: a directory replaced by a file on the store takes an open edited child with it", operations: [
            .open("d/x.txt", .readWrite),
            .write(handle: 0, offset: 0, count: 4),
            .flush(handle: 0),
            .remoteKindChange("d"),
            .refresh("/"),
            .close(handle: 0),
        ]),
        ModelScenario(name: "create under a file succeeds (no ENOTDIR); its upload fails forever and its copy stays", operations: [
            .create("a.txt/inner.txt"),
            .write(handle: 0, offset: 0, count: 4),
            .close(handle: 0),
        ]),
        ModelScenario(name: "12: kill -9 after O_TRUNC and a write: the next mount uploads the unclosed copy over the store's version", operations: [
            .open("a.txt", .truncate),
            .write(handle: 0, offset: 0, count: 5),
            .crashAndRestart,
        ]),
        ModelScenario(name: "seed 139: the retry of an fsync that failed (server down) committed the file as it was then, an O_TRUNC no close had handed over, and kept it as a 0-byte conflict copy", operations: [
            .open("a.txt", .readWrite),
            .write(handle: 0, offset: 0, count: 4),
            .serverDown,
            .fsync(handle: 0),
            .open("a.txt", .truncate),
            .remoteChange("a.txt", size: 20),
            .serverUp,
            .waitForRetries,
            .write(handle: 1, offset: 0, count: 6),
            .close(handle: 1),
            .close(handle: 0),
        ]),
        ModelScenario(name: "seed 991: a folder that became a file is kept as FOLDER (conflict DATE); a file's conflict copy of that second had the name, and the upload below it failed until refused", operations: [
            .open("a.txt", .truncate),
            .remoteKindChange("a.txt"),
            .fsync(handle: 0),
            .close(handle: 0),
            .refresh("/"),
            .create("a.txt/inner.txt"),
            .write(handle: 1, offset: 0, count: 5),
            .remoteKindChange("a.txt"),
            .close(handle: 1),
        ]),
        ModelScenario(name: "seed 991 with uploads read in chunks: a commit made while the upload before it was kept in a conflict folder (its folder became a file) was never uploaded; its last close had found that upload under way", operations: [
            .open("d/x.txt", .readWrite),
            .write(handle: 0, offset: 0, count: 4),
            .serverDown,
            .fsync(handle: 0),
            .remoteKindChange("d"),
            .holdUploads,
            .serverUp,
            .waitForHeldUpload,
            .write(handle: 0, offset: 0, count: 6),
            .close(handle: 0),
            .releaseUploads,
        ]),
        ModelScenario(name: "seed 800018: a conflict kept while the store had a folder under the file's name recorded that folder as the file's version (no ETag); the next upload was unconditional and replaced the file another client put there", operations: [
            .open("a.txt", .truncate),
            .remoteKindChange("a.txt"),
            .write(handle: 0, offset: 0, count: 4),
            .close(handle: 0),
            .settle,
            .create("a.txt"),
            .remoteKindChange("a.txt"),
            .write(handle: 1, offset: 0, count: 5),
            .close(handle: 1),
        ]),
        ModelScenario(name: "issue 30: an append (O_APPEND, never read) after another client's change wrote into their version and replaced it", operations: [
            .open("a.txt", .blindAppend),
            .remoteChange("a.txt", size: 20),
            .write(handle: 0, offset: 3, count: 4),
            .close(handle: 0),
        ]),
        ModelScenario(name: "issue 30: a write never preceded by a read, after another client's change and a listing, went over their version", operations: [
            .open("a.txt", .blindWrite),
            .remoteChange("a.txt", size: 20),
            .refresh("/"),
            .write(handle: 0, offset: 0, count: 2),
            .close(handle: 0),
        ]),
        ModelScenario(name: "issue 30: a truncate never preceded by a read cut another client's version and uploaded it over theirs", operations: [
            .open("a.txt", .blindWrite),
            .remoteChange("a.txt", size: 20),
            .truncateHandle(handle: 0, size: 5),
            .close(handle: 0),
        ]),
        ModelScenario(name: "seed 500407: a file open when it became a folder on the store came back after kill -9 as an empty file made here, hiding the folder", operations: [
            .open("a.txt", .read),
            .remoteKindChange("a.txt"),
            .refresh("/"),
            .crashAndRestart,
            .open("a.txt", .read),
        ]),
    ]
}

/// What one sequence did and found.
struct ModelReport: Sendable {
    var seed: UInt64
    var operations: Int
    var problems: [String]
    var trace: [String]

    var text: String {
        "model seed \(seed) (replay: DOCFS_MODEL_SEED=\(seed) swift test --skip-build --filter ModelTests):\n"
            + problems.map { "  - " + $0 }.joined(separator: "\n")
            + "\n  operations:\n" + trace.map { "    " + $0 }.joined(separator: "\n")
    }
}

/// One sequence: the core under test, the reference model, and the generator.
final class ModelRun {
    // MARK: The model

    struct Version {
        enum Kind: String { case remote, local, unsaved }
        var kind: Kind
        var bytes: [UInt8]
        var origin: String
        var path: String
        var mustKeep = true
        /// Nil: exactly `bytes`. Else which bytes are certain: a write into a sparse copy whose
        /// version went from the store before the rest was fetched keeps the others as zeros
        /// (`Uploader.commitAfterFill`, `UnfilledCopies`), so each of those is its byte or 0.
        var certain: [Bool]? = nil

        func matches(_ content: [UInt8]) -> Bool {
            guard let certain else { return content == bytes }
            guard content.count == bytes.count else { return false }
            return content.indices.allSatisfy { content[$0] == bytes[$0] || (!certain[$0] && content[$0] == 0) }
        }
    }

    /// One file as the core identifies it (an inode): its content while a copy is open, what
    /// it committed, and which store contents it saw (and so may replace).
    struct Lineage {
        var path: String
        var content: [UInt8] = []
        /// Written since the last commit.
        var dirty = false
        var committed: [Int] = []
        var seen: Set<[UInt8]> = []
        var handles: Set<Int> = []
        /// Unlinked (or renamed over): what its handles still write is nobody's version.
        var removed = false
        /// While its copy is sparse (opened by a sniffing read): which bytes are certainly
        /// local (fetched by a read, or written). Nil once the copy is complete.
        var held: [Bool]?
        /// A sparse copy's fetches may fail from now on (the store went down, or another client
        /// changed it): reads, flushes and closes of it may fail; their successes are checked.
        var mayFail = false
        /// Another client changed the store since the sparse copy was opened: the version its
        /// holes belong to may be gone, and they may end as zeros. Else they are always fetched.
        var versionMayBeGone = false

        /// `range` of the content is certainly local now (a write past the end holds the zeros before it).
        mutating func hold(_ range: Range<Int>) {
            guard var held else { return }
            if held.count < range.upperBound { held += [Bool](repeating: true, count: range.upperBound - held.count) }
            for i in range { held[i] = true }
            self.held = held
        }
    }

    struct OpenHandle {
        var handle: UInt64
        var inode: Inode
        var writable: Bool
        /// O_APPEND: its writes land at the end of the copy, whatever offset they carry.
        var appends = false
        /// Marked modified through this handle: its flush/close commits.
        var wrote: Bool
    }

    static let files = ["a.txt", "b.txt", "c.txt", "d/x.txt", "d/y.txt", "a.txt/inner.txt", "n/g.txt", "n/m/f.txt"]
    static let topLevel = ["a.txt", "b.txt", "d"]
    static let listedDirectories = ["/", "d", "a.txt", "n", "n/m"]
    /// Folders a `mkdir` makes: `n/m` right after `n` is made ahead of its files.
    static let folders = ["n", "n/m"]

    let seed: UInt64
    private var random: SeededGenerator
    /// Odd seeds run against a store that looks names up one by one, as S3 does (lookups by
    /// `stat` in folders never listed, and the one-page listings they start); of those, every
    /// other one lists in pages of two.
    let store: InMemoryStore
    private var proxy: CrashableStore
    private var fixture: CoreFixture
    private var versions: [Version] = []
    private var lineages: [Inode: Lineage] = [:]
    private var handles: [Int: OpenHandle] = [:]
    private var nextHandle = 0
    private var down = false
    /// Opens read only the head of a file (a sniffer), leaving its copy sparse: with the
    /// streaming policy only, where a file is large enough to be streamed.
    private let sniffs: Bool
    private var remoteVersions = 0
    private var index = 0
    private var trace: [String] = []
    private var problems: [String] = []
    private var hung = false
    private var uploadHold: UploadHold?
    /// Every catalog-and-cache directory of the run (a crash leaves one, the restart takes a copy).
    private var directories: [String] = []
    /// The cores' debug log and the operations, with times (`DOCFS_MODEL_LOG`).
    private let log: CapturedLog?

    private init(seed: UInt64, streaming: StreamingPolicy, conflictClock: @escaping @Sendable () -> Date) throws {
        self.seed = seed
        random = SeededGenerator(seed: seed)
        sniffs = streaming != .default
        // Odd seeds ask names one by one, list the times versions were stored and rename a file
        // by copying it and then deleting the old name, as S3 does.
        // Every third seed uploads new files while they are written, from their 8th byte on,
        // giving up on a writer that pauses for 50 ms (most do, between operations).
        store = InMemoryStore(looksUpByStat: seed % 2 == 1, listsStoredTimes: seed % 2 == 1, streamsUploads: seed % 3 == 0)
        if seed % 4 == 3 { store.pageListings(by: 2) }
        store.readUploads(Self.uploadReading(seed: seed))
        proxy = CrashableStore(wrapping: store, renamesByCopying: seed % 2 == 1)
        log = ProcessInfo.processInfo.environment["DOCFS_MODEL_LOG"] != nil ? CapturedLog() : nil
        fixture = try CoreFixture(store: store, through: proxy, streaming: streaming, conflictClock: conflictClock,
                                  streamedUploads: StreamedUpload.Policy(minimumLength: 8, idleLimit: .milliseconds(50), minimumRate: 1),
                                  capturing: log)
        directories.append(fixture.directory)
    }

    /// Runs `operations` random operations from `seed` (or `script` instead), then checks.
    /// A script runs with the core's clock for conflict names stopped, so that two conflicts
    /// of one run are always kept in "the same second" (names such as `a (conflict DATE).txt`
    /// meet whatever second the run crosses).
    static func run(seed: UInt64, operations: Int = 40, script: [ModelOp]? = nil,
                    streaming: StreamingPolicy = .default) async -> ModelReport {
        let marker = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-model-seeds").path
        if let line = "\(seed)\n".data(using: .utf8), let file = FileHandle(forWritingAtPath: marker) ?? {
            FileManager.default.createFile(atPath: marker, contents: nil)
            return FileHandle(forWritingAtPath: marker)
        }() {
            file.seekToEndOfFile()
            file.write(line)
            try? file.close()
        }
        let run: ModelRun
        let clock: @Sendable () -> Date
        if script == nil {
            clock = { Date() }
        } else {
            let stopped = Date()
            clock = { stopped }
        }
        do { run = try ModelRun(seed: seed, streaming: streaming, conflictClock: clock) } catch {
            return ModelReport(seed: seed, operations: 0, problems: ["cannot make the fixture: \(error)"], trace: [])
        }
        await run.arrange()
        if let script {
            for op in script where !run.hung { await run.perform(op) }
        } else {
            for _ in 0..<operations where !run.hung { await run.perform(run.generate()) }
        }
        if !run.hung { await run.finish() }
        // A replayed seed keeps its catalog and cache for a look (the path is in the report).
        if ProcessInfo.processInfo.environment["DOCFS_MODEL_SEED"] == nil {
            for directory in run.directories { try? FileManager.default.removeItem(atPath: directory) }
        } else {
            run.trace.append("// catalog and cache kept in \(run.fixture.directory)")
        }
        if !run.problems.isEmpty, let log = run.log {
            run.trace.append("// the store's changes: " + run.store.mutations.joined(separator: ", "))
            run.trace.append("// the cores' log (DOCFS_MODEL_LOG):\n" + log.text)
        }
        return ModelReport(seed: seed, operations: run.index, problems: run.problems, trace: run.trace)
    }

    /// How this seed's uploads read their snapshot: chunks of 1 to 16 bytes (a file of the model
    /// is a few dozen), or a whole file now and then, with a yield or a short sleep between.
    /// From a generator of its own, so a seed draws the operations it drew before.
    static func uploadReading(seed: UInt64) -> InMemoryStore.UploadReading {
        var random = SeededGenerator(seed: seed ^ 0x5EED_C0DE_CAFE_F00D)
        let chunk = [1, 2, 3, 4, 8, 16, 4096][Int(random.next() % 7)]
        switch random.next() % 3 {
        case 0: return .init(chunk: chunk, pause: { await Task.yield() })
        case 1: return .init(chunk: chunk, pause: { try? await Task.sleep(for: .microseconds(50)) })
        default: return .init(chunk: chunk, pause: { try? await Task.sleep(for: .microseconds(500)) })
        }
    }

    // MARK: Generating

    private func arrange() async {
        for path in ["a.txt", "b.txt", "d/x.txt"] {
            await remoteWrite(path, size: 12 + Int(random.next() % 20), note: "initial")
        }
    }

    private func pick<T>(_ options: [T]) -> T { options[Int(random.next() % UInt64(options.count))] }
    private func number(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &random) }

    func generate() -> ModelOp {
        let open = handles.keys.sorted()
        let writable = open.filter { handles[$0]!.writable }
        func length(_ h: Int) -> Int { lineages[handles[h]!.inode]?.content.count ?? 0 }
        var choices: [(Int, () -> ModelOp)] = []
        if open.count < 4 {
            choices.append((14, { .open(self.pick(Self.files), self.pick([.read, .readWrite, .readWrite, .truncate, .blindWrite, .blindAppend])) }))
            choices.append((4, { .create(self.pick(Self.files)) }))
        }
        if !open.isEmpty {
            choices.append((8, {
                let h = self.pick(open)
                return .read(handle: h, offset: self.number(0...length(h) + 4), count: self.number(1...64))
            }))
            choices.append((3, { .flush(handle: self.pick(open)) }))
            choices.append((4, { .fsync(handle: self.pick(open)) }))
            choices.append((12, { .close(handle: self.pick(open)) }))
        }
        if !writable.isEmpty {
            choices.append((18, {
                let h = self.pick(writable)
                let hole = self.number(0...5) == 0
                let offset = hole ? length(h) + self.number(1...40) : self.number(0...length(h))
                return .write(handle: h, offset: offset, count: self.number(1...32))
            }))
            choices.append((3, {
                let h = self.pick(writable)
                return .truncateHandle(handle: h, size: self.number(0...length(h) + 20))
            }))
        }
        choices.append((2, { .truncatePath(self.pick(Self.files), size: 0) }))
        choices.append((4, { .rename(self.pick(Self.files), self.pick(Self.files)) }))
        choices.append((3, { .unlink(self.pick(Self.files)) }))
        choices.append((3, { .mkdir(self.pick(Self.folders)) }))
        choices.append((8, { .remoteChange(self.pick(Self.files), size: self.number(4...40)) }))
        choices.append((3, { .remoteDelete(self.pick(Self.files)) }))
        choices.append((3, { .remoteRename(self.pick(Self.files), self.pick(Self.files)) }))
        choices.append((2, { .remoteKindChange(self.pick(Self.topLevel)) }))
        choices.append((7, { .refresh(self.pick(Self.listedDirectories)) }))
        choices.append((2, { .pin(self.pick(Self.files + ["d"])) }))
        choices.append((1, { .unpin(self.pick(Self.files + ["d"])) }))
        choices.append(down ? (8, { .serverUp }) : (2, { .serverDown }))
        choices.append((2, { .crashAndRestart }))
        choices.append((1, { .killedDuring(.rename(self.pick(Self.files), self.pick(Self.files))) }))
        choices.append((1, { .killedDuring(.unlink(self.pick(Self.files))) }))
        choices.append((3, { .settle }))
        var roll = number(1...choices.map(\.0).reduce(0, +))
        for (weight, make) in choices {
            if roll <= weight { return make() }
            roll -= weight
        }
        return .settle
    }

    // MARK: Performing

    func perform(_ op: ModelOp) async {
        let number = index
        index += 1
        var handleNumber: Int?
        if op.makesHandle {
            handleNumber = nextHandle
            nextHandle += 1
        }
        log?.append("model: op \(number) \(op) begins")
        let outcome = await execute(op, number: number, handleNumber: handleNumber)
        log?.append("model: op \(number) ends" + (outcome.isEmpty ? "" : ": " + outcome))
        trace.append("\(op)," + (handleNumber.map { " // h\($0)" } ?? "") + (outcome.isEmpty ? "" : " // " + outcome))
    }

    /// Waits for a core call, or records a hang and ends the sequence.
    private func call<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async -> Result<T, any Error>? {
        // 60 s: no operation waits that long on purpose (outages fail in about a second), and a
        // busy 2-core machine running the whole suite can stall the cooperative pool for a while.
        switch await timed(60, body) {
        case .finished(let result): return result
        case .hung:
            problems.append("operation \(index - 1) hung for 60 s")
            hung = true
            return nil
        }
    }

    private func execute(_ op: ModelOp, number: Int, handleNumber: Int?) async -> String {
        let fixture = self.fixture
        let fs = fixture.fs
        switch op {
        case .open(let path, let access):
            let before = store.content(path)
            // The version `before` is: a sniffing open that gets it knows the bytes it did not read.
            let beforeVersion = await (try? proxy.stat(StorePath(path)))?.etag  // as the core sees versions
            let sniffing = sniffs && access != .truncate && number % 3 != 0 && store.content(path) == before && before != nil
            let sharing = lineages.values.contains { $0.path == path && !$0.handles.isEmpty }
            // Every other writer's open is as FUSE makes it: a large file's content is fetched
            // as it is used, of the version opened (the read of all of it, or of its head for a
            // sniffer, just after).
            // A blind writer's open is always as FUSE makes it. The model knows what it opened
            // without a read where the open fetches (or pins) the store's version at the open:
            // a placeholder nobody holds, while the store answers; else it reads all of it.
            let mode = DocFileSystem.OpenMode(writable: access.writable, truncate: access == .truncate,
                                              fetchOnFirstUse: access.isBlind || number % 2 == 0, append: access == .blindAppend)
            let blindly = access.isBlind && !sharing && !down && before != nil
            let store = self.store
            guard let result = await call({ () async throws -> (Inode, UInt64, [UInt8]?, Bool) in
                let item = try await fixture.lookup(path)
                let placeholder = item.state == .placeholder && !item.hasUnsyncedChanges
                let handle = try await fs.open(item.inode, mode: mode)
                guard access != .truncate else { return (item.inode, handle, nil, false) }
                // The store's version at the open is `before` if nothing changed it meanwhile (an
                // upload of an earlier close of the file can land during the lookup).
                if blindly, placeholder, let before, store.content(path) == before { return (item.inode, handle, before, true) }
                do {
                    if sniffing {
                        let head = try await fs.read(handle: handle, offset: 0, count: 4)
                        // The store's version at the open, clean: the rest is `before`'s.
                        if !sharing, let beforeVersion, fs.cleanVersion(handle: handle) == beforeVersion, let before,
                           head == Array(before.prefix(4)) {
                            return (item.inode, handle, before, true)
                        }
                        return (item.inode, handle, head + (try await Self.readAll(fs, handle, from: head.count)), false)
                    }
                    return (item.inode, handle, try await Self.readAll(fs, handle), false)
                } catch {
                    // A writer's open that deferred its content fails at its first read: the
                    // process gets the error there, and closes the file.
                    await fs.release(handle: handle)
                    throw error
                }
            }) else { return "hung" }
            guard case .success(let (inode, handle, read, sniffed)) = result else { return Self.failure(result) }
            var lineage = lineages[inode] ?? Lineage(path: path)
            lineage.path = path
            // A blind open of a streamed file holds none of it; a sniffer its head.
            let headRead = access.isBlind ? 0 : 4
            let streamedCopy = sniffs && (read?.count ?? 0) > Int(ModelTests.tinyStreaming.wholeFileLimit)
            let sparse = sniffed && (!access.isBlind || streamedCopy)
            if lineage.handles.isEmpty {
                lineage.held = sparse ? [Bool](repeating: true, count: min(headRead, read?.count ?? 0)) + [Bool](repeating: false, count: max(0, (read?.count ?? 0) - headRead)) : nil
                lineage.mayFail = false
                lineage.versionMayBeGone = false
            }
            if let read {
                if lineage.handles.isEmpty {
                    if !isKnown(read) && read != lineage.content {
                        problems.append("op \(number): open of \(path) presented \(shown(read)), which no one wrote")
                    }
                    lineage.content = read
                    lineage.seen.insert(read)
                } else if read != lineage.content {
                    problems.append("op \(number): open of \(path) read \(shown(read)), but the open copy holds \(shown(lineage.content))")
                }
            } else {
                lineage.content = []
                lineage.dirty = true
                if let before { lineage.seen.insert(before) }
            }
            lineage.handles.insert(handleNumber!)
            lineages[inode] = lineage
            handles[handleNumber!] = OpenHandle(handle: handle, inode: inode, writable: access.writable, appends: access == .blindAppend,
                                                wrote: access == .truncate)
            return "inode \(inode)" + (sniffed ? (access.isBlind ? ", blind" : ", sniffed") : "")

        case .create(let path):
            let before = store.content(path)
            let (directory, name) = Self.split(path)
            guard let result = await call({ () async throws -> (Inode, UInt64, Bool) in
                let known = await Self.settledLookup(path, fixture) != nil
                let parent = try await fixture.lookup(directory)
                let (item, handle) = try await fs.create(in: parent.inode, name: name, mode: 0o644, owner: 0, group: 0,
                                                         exclusive: false, truncate: true)
                return (item.inode, handle, known)
            }) else { return "hung" }
            guard case .success(let (inode, handle, known)) = result else { return Self.failure(result) }
            var lineage = lineages[inode] ?? Lineage(path: path)
            lineage.path = path
            lineage.content = []
            lineage.dirty = true
            if known, let before { lineage.seen.insert(before) }
            lineage.handles.insert(handleNumber!)
            lineages[inode] = lineage
            handles[handleNumber!] = OpenHandle(handle: handle, inode: inode, writable: true, wrote: true)
            return "inode \(inode)" + (known ? ", existed" : "")

        case .read(let h, let offset, let count):
            guard let open = handles[h] else { return "skipped: no such handle" }
            guard let result = await call({ () async throws -> [UInt8] in
                try await fs.read(handle: open.handle, offset: Int64(offset), count: count)
            }) else { return "hung" }
            guard case .success(let bytes) = result else {
                if lineages[open.inode]?.mayFail != true { problems.append("op \(number): read failed: \(Self.failure(result))") }
                return Self.failure(result)
            }
            let content = lineages[open.inode]!.content
            lineages[open.inode]!.hold(min(offset, content.count)..<min(content.count, offset + count))
            let expected = offset < content.count ? Array(content[offset..<min(content.count, offset + count)]) : []
            if bytes != expected {
                problems.append("op \(number): read of h\(h) at \(offset) gave \(shown(bytes)), the model says \(shown(expected))")
            }
            return ""

        case .write(let h, let offset, let count):
            guard let open = handles[h] else { return "skipped: no such handle" }
            let letter = UInt8(ascii: "a") + UInt8(number % 26)
            let bytes = [UInt8](repeating: letter, count: count)
            guard let result = await call({ () async throws -> Int in
                try bytes.withUnsafeBytes { try fs.writeLanding(handle: open.handle, offset: Int64(offset), bytes: $0).count }
            }) else { return "hung" }
            guard case .success(let written) = result else {
                problems.append("op \(number): write failed: \(Self.failure(result))")
                return Self.failure(result)
            }
            if written != count { problems.append("op \(number): write of \(count) bytes wrote \(written)") }
            var lineage = lineages[open.inode]!
            // An appender's write lands at the end of the copy, whatever offset it carried.
            let offset = open.appends ? lineage.content.count : offset
            if lineage.content.count < offset { lineage.content += [UInt8](repeating: 0, count: offset - lineage.content.count) }
            let end = min(lineage.content.count, offset + count)
            lineage.content.replaceSubrange(offset..<end, with: bytes)
            lineage.hold(offset..<(offset + count))
            lineage.dirty = true
            lineages[open.inode] = lineage
            handles[h]!.wrote = true
            return "'\(String(UnicodeScalar(letter)))'"

        case .flush(let h):
            guard let open = handles[h] else { return "skipped: no such handle" }
            guard let result = await call({ try await fs.flush(handle: open.handle) }) else { return "hung" }
            // A flush or close of any handle hands over the file's changes, whichever handle
            // made them: the handles share one copy, as a kernel's handles share one file.
            commit(open.inode, by: "op \(number) \(op)", completed: result.isSuccess)
            if case .failure = result {
                if lineages[open.inode]?.mayFail != true { problems.append("op \(number): flush failed: \(Self.failure(result))") }
                return Self.failure(result)
            }
            return ""

        case .fsync(let h):
            guard let open = handles[h] else { return "skipped: no such handle" }
            guard let result = await call({ try await fs.fsync(handle: open.handle) }) else { return "hung" }
            commit(open.inode, by: "op \(number) \(op)", completed: result.isSuccess)
            return Self.failure(result)

        case .close(let h):
            guard let open = handles[h] else { return "skipped: no such handle" }
            guard let result = await call({ () async throws -> Void in
                var failure: (any Error)?
                do { try await fs.flush(handle: open.handle) } catch { failure = error }
                await fs.release(handle: open.handle)
                if let failure { throw failure }
            }) else { return "hung" }
            commit(open.inode, by: "op \(number) \(op)", completed: result.isSuccess)
            handles[h] = nil
            lineages[open.inode]?.handles.remove(h)
            if case .failure = result {
                if lineages[open.inode]?.mayFail != true { problems.append("op \(number): close failed: \(Self.failure(result))") }
                return Self.failure(result)
            }
            return ""

        case .truncateHandle(let h, let size):
            guard let open = handles[h] else { return "skipped: no such handle" }
            guard open.writable else { return "skipped: read-only handle" }
            guard let result = await call({
                _ = try await fs.setAttributes(of: open.inode, .init(size: Int64(size)), handle: open.handle)
            }) else { return "hung" }
            guard case .success = result else {
                if lineages[open.inode]?.mayFail != true { problems.append("op \(number): ftruncate failed: \(Self.failure(result))") }
                return Self.failure(result)
            }
            resize(open.inode, to: size)
            handles[h]!.wrote = true
            return ""

        case .truncatePath(let path, let size):
            let before = store.content(path)
            guard let result = await call({ () async throws -> Inode in
                let item = try await fixture.lookup(path)
                _ = try await fs.setAttributes(of: item.inode, .init(size: Int64(size)), handle: nil)
                return item.inode
            }) else { return "hung" }
            guard case .success(let inode) = result else { return Self.failure(result) }
            var lineage = lineages[inode] ?? Lineage(path: path)
            if lineage.handles.isEmpty { lineage.content = [] }
            if let before { lineage.seen.insert(before) }
            lineages[inode] = lineage
            resize(inode, to: size)
            commit(inode, by: "op \(number) \(op)")
            return "inode \(inode)"

        case .rename, .unlink:
            guard let change = namespaceChange(op) else { return "" }
            guard let result = await call({ try await change.run() }) else { return "hung" }
            guard case .success = result else { return Self.failure(result) }
            if let (source, target) = change.looked.withLock({ $0 }) {
                namespaceChangeDone(op, source: source, target: target, replaced: change.replaced, number: number)
            }
            return ""

        case .mkdir(let path):
            let (directory, name) = Self.split(path)
            let fixture = self.fixture
            guard let result = await call({
                let parent = try await fixture.lookup(directory)
                _ = try await fixture.fs.makeDirectory(in: parent.inode, name: name, mode: 0o755, owner: 0, group: 0)
            }) else { return "hung" }
            return Self.failure(result)

        case .remoteChange(let path, let size):
            exposeSparseCopies()
            guard await storeKind(path) != .directory, await parentsAreDirectories(path),
                  await remoteWrite(path, size: size, note: "op \(number)") else { return "skipped: not a file path on the store" }
            return ""

        case .remoteDelete(let path):
            exposeSparseCopies()
            guard await storeKind(path) == .file else { return "skipped: no file there" }
            let removed = await proxy.asAnotherClient { () -> [UInt8]? in
                // Checked again in one step with the delete: an upload may have landed since.
                guard let content = store.content(path) else { return nil }
                store.remove(path)
                return content
            }
            guard let removed else { return "skipped: no file there" }
            discharge(removed, because: "op \(number) \(op)")
            return ""

        case .remoteRename(let from, let to):
            exposeSparseCopies()
            guard from != to, await storeKind(from) == .file, await storeKind(to) != .directory,
                  await parentsAreDirectories(to), !to.hasPrefix(from + "/") else { return "skipped" }
            remoteVersions += 1
            let stamp = 1_700_000_000 + Double(remoteVersions)
            // Checked again in one step with the change: an upload may have landed since.
            let (moved, replaced) = await proxy.asAnotherClient { () -> (Bool, [UInt8]?) in
                guard let content = store.content(from) else { return (false, nil) }
                let (added, replaced) = store.addFileWhereAClientCould(to, content, modified: stamp)
                if added { store.remove(from) }
                return (added, replaced)
            }
            guard moved else { return "skipped" }
            if let replaced { discharge(replaced, because: "op \(number) \(op) replaced it") }
            return ""

        case .remoteKindChange(let path):
            exposeSparseCopies()
            switch await storeKind(path) {
            case .file?:
                remoteVersions += 1
                let stamp = 1_700_000_000 + Double(remoteVersions)
                let inner = remoteContent(size: 16)
                let removed = await proxy.asAnotherClient { () -> [UInt8]? in
                    let content = store.content(path)
                    store.remove(path)
                    store.addDirectory(path)
                    store.addFile(path + "/inner.txt", inner, modified: stamp)
                    return content
                }
                if let removed { discharge(removed, because: "op \(number) \(op)") }
                versions.append(Version(kind: .remote, bytes: inner, origin: "op \(number) \(op)", path: path + "/inner.txt"))
                return "now a directory"
            case .directory?:
                remoteVersions += 1
                let stamp = 1_700_000_000 + Double(remoteVersions)
                let file = remoteContent(size: 16)
                let removed = await proxy.asAnotherClient { () -> [[UInt8]] in
                    // Everything below it goes, also what a local rename moved in there.
                    let removed = store.removeTree(path)
                    store.addFile(path, file, modified: stamp)
                    return removed
                }
                for content in removed { discharge(content, because: "op \(number) \(op)") }
                versions.append(Version(kind: .remote, bytes: file, origin: "op \(number) \(op)", path: path))
                return "now a file"
            default:
                return "skipped: nothing there"
            }

        case .refresh(let path):
            guard let result = await call({ try await fixture.refresh(path) }) else { return "hung" }
            return Self.failure(result)

        case .serverDown:
            proxy.outage = .unreachable("model test: server down")
            down = true
            exposeSparseCopies(changed: false)
            return ""

        case .serverUp:
            proxy.outage = nil
            down = false
            return ""

        case .crashAndRestart:
            for (inode, lineage) in lineages where !lineage.handles.isEmpty {
                var lineage = lineage
                if lineage.dirty && !lineage.removed {
                    let last = lineage.committed.last.map { versions[$0].bytes }
                    for i in lineage.committed where versions[i].mustKeep {
                        versions[i].mustKeep = false
                    }
                    if !lineage.content.isEmpty && lineage.content != last && !lineage.seen.contains(lineage.content) {
                        versions.append(Version(kind: .unsaved, bytes: lineage.content, origin: "op \(number) crash, written to inode \(inode) and not closed",
                                                path: lineage.path, certain: lineage.versionMayBeGone || down ? lineage.held : nil))
                    }
                }
                lineage.dirty = false
                lineage.handles.removeAll()
                lineage.held = nil
                lineages[inode] = lineage
            }
            handles.removeAll()
            let left: String
            do { left = try await fixture.crash(proxy) } catch {
                problems.append("op \(number): cannot copy what the killed daemon left: \(error)")
                hung = true
                return "\(error)"
            }
            directories.append(left)
            let fresh = CrashableStore(wrapping: store, renamesByCopying: proxy.capabilities.renamesByCopying)
            fresh.outage = proxy.outage
            guard let result = await call({ try await fixture.restart(from: left, through: fresh) }) else { return "hung" }
            proxy = fresh
            guard case .success(let restarted) = result else {
                problems.append("op \(number): restart failed: \(Self.failure(result))")
                hung = true
                return Self.failure(result)
            }
            self.fixture = restarted
            return ""

        case .killedDuring(let cut):
            return await killed(during: cut, number: number)

        case .settle:
            guard let result = await call({ await fixture.settle() }) else { return "hung" }
            return Self.failure(result)

        case .waitForRetries:
            guard !down else { return "skipped: the server is down" }
            guard let result = await call({ await fixture.fs.waitForUploads(untilStalled: false) }) else { return "hung" }
            return Self.failure(result)

        case .holdUploads:
            let hold = UploadHold()
            uploadHold = hold
            store.holdWrites(until: {
                hold.arrived.withLock { $0 += 1 }
                await hold.gate.wait()
            })
            return ""

        case .waitForHeldUpload:
            guard let hold = uploadHold else { return "skipped: uploads are not held" }
            let deadline = ContinuousClock.now + testPatience
            while hold.arrived.withLock({ $0 }) == 0 {
                guard ContinuousClock.now < deadline else {
                    problems.append("op \(number): no upload reached the store within \(testPatience)")
                    return "none came"
                }
                try? await Task.sleep(for: .milliseconds(5))
            }
            return ""

        case .pin(let path):
            guard let result = await call({ try await fs.pin(try await fixture.lookup(path).inode) }) else { return "hung" }
            return Self.failure(result)

        case .unpin(let path):
            guard let result = await call({ try await fs.unpin(try await fixture.lookup(path).inode) }) else { return "hung" }
            return Self.failure(result)

        case .releaseUploads:
            store.holdWrites(until: nil)
            await uploadHold?.gate.open()
            uploadHold = nil
            return ""
        }
    }

    // MARK: Model bookkeeping

    /// A close, flush or fsync handed the lineage's content to docfs.
    /// `completed`: the flush, fsync or close succeeded, which for a sparse copy means its
    /// rest was fetched first; one that failed handed over a copy whose holes may end as zeros.
    private func commit(_ inode: Inode, by origin: String, completed: Bool = true) {
        guard var lineage = lineages[inode], lineage.dirty else { return }
        lineage.dirty = false
        // A close that failed hands the writes over: the uploader fetches the rest, unless the
        // version is gone by then (then zeros), which another client may do at any time.
        let certain = completed ? nil : lineage.held
        if completed { lineage.held = nil }
        defer { lineages[inode] = lineage }
        guard !lineage.removed else { return }
        // The uploader takes bytes at the file's path identical to what it sends for its own
        // (an answer lost on the way): a version held only there, identical to an earlier commit
        // of this file, is that commit (seed 95004: another client moved the same bytes there).
        if let there = store.content(lineage.path), store.filesHolding(there) == 1,
           lineage.committed.contains(where: { versions[$0].matches(there) }) {
            discharge(there, because: origin)
        }
        for i in lineage.committed { versions[i].mustKeep = false }
        for bytes in lineage.seen { discharge(bytes, because: origin) }
        versions.append(Version(kind: .local, bytes: lineage.content, origin: origin + " of inode \(inode)", path: lineage.path,
                                certain: certain))
        lineage.committed.append(versions.count - 1)
    }

    private func resize(_ inode: Inode, to size: Int) {
        guard var lineage = lineages[inode] else { return }
        if lineage.content.count > size {
            lineage.content.removeLast(lineage.content.count - size)
        } else {
            lineage.content += [UInt8](repeating: 0, count: size - lineage.content.count)
        }
        lineage.held = nil  // a truncate fetches the rest of a sparse copy first
        lineage.dirty = true
        lineages[inode] = lineage
    }

    /// `.killedDuring(cut)`: runs the removal or rename until the store made its change (or
    /// until it ended without one), then kills and restarts the daemon. A change the store made
    /// counts as done, whatever the killed daemon's catalog said: the next start must finish it
    /// without losing a version the operation did not replace.
    /// An unlink or rename as the model asks the core for it: the store's change it makes, what
    /// the store held where it removes or replaces, and the operation, which notes the inodes
    /// it works on (the source, and the target a rename replaces) before it asks the store.
    private final class NamespaceChange: Sendable {
        let storeChanges: Set<String>
        let replaced: [UInt8]?
        let looked = Mutex<(source: Inode, target: Inode?)?>(nil)
        let operation: @Sendable (NamespaceChange) async throws -> Void

        init(storeChanges: Set<String>, replaced: [UInt8]?, operation: @escaping @Sendable (NamespaceChange) async throws -> Void) {
            self.storeChanges = storeChanges
            self.replaced = replaced
            self.operation = operation
        }

        func run() async throws { try await operation(self) }
    }

    private func namespaceChange(_ op: ModelOp) -> NamespaceChange? {
        let fixture = self.fixture
        let fs = fixture.fs
        switch op {
        case .unlink(let path):
            let (directory, name) = Self.split(path)
            return NamespaceChange(storeChanges: ["DELETE /\(path)"], replaced: store.content(path)) { change in
                let item = try await fixture.lookup(path)
                let parent = try await fixture.lookup(directory)
                change.looked.withLock { $0 = (item.inode, nil) }
                try await fs.remove(from: parent.inode, name: name, directory: false)
            }
        case .rename(let from, let to):
            let (fromDirectory, fromName) = Self.split(from)
            let (toDirectory, toName) = Self.split(to)
            // A store that renames by copying is killed right after the copy, before the
            // deletion of the old name (the case that needs its settling).
            return NamespaceChange(storeChanges: ["MOVE /\(from) /\(to)", "COPY /\(from) /\(to)", "DELETE /\(to)"],
                                   replaced: store.content(to)) { change in
                let target = await Self.settledLookup(to, fixture)
                let source = try await fixture.lookup(from)
                let sourceParent = try await fixture.lookup(fromDirectory)
                let targetParent = try await fixture.lookup(toDirectory)
                change.looked.withLock { $0 = (source.inode, target?.inode) }
                try await fs.rename(from: sourceParent.inode, name: fromName, to: targetParent.inode, newName: toName, noReplace: false)
            }
        default:
            return nil
        }
    }

    /// An unlink or rename is done: the versions it removed or replaced may go.
    private func namespaceChangeDone(_ op: ModelOp, source: Inode, target: Inode?, replaced: [UInt8]?, number: Int) {
        switch op {
        case .unlink:
            giveUp(source, because: "op \(number) \(op)")
            if let replaced { discharge(replaced, because: "op \(number) \(op)") }
        case .rename(_, let to):
            if let target, target != source {
                giveUp(target, because: "op \(number) \(op) replaced it")
                if let replaced { discharge(replaced, because: "op \(number) \(op) replaced it") }
            }
            lineages[source, default: Lineage(path: to)].path = to
        default:
            break
        }
    }

    private func killed(during cut: ModelOp, number: Int) async -> String {
        guard let change = namespaceChange(cut) else { return "skipped: only a removal or a rename" }
        let finished = Mutex<Result<Void, any Error>?>(nil)
        let proxy = self.proxy
        let changes = change.storeChanges
        proxy.crash(rightAfter: { changes.contains($0) })
        let running = Task {
            let result: Result<Void, any Error>
            do { result = .success(try await change.run()) } catch { result = .failure(error) }
            finished.withLock { $0 = result }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while !proxy.isCrashed, finished.withLock({ $0 }) == nil, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        proxy.disarm()
        var outcome: String
        var done = true
        if proxy.isCrashed {
            outcome = "killed right after the store's change"
        } else if let result = finished.withLock({ $0 }) {
            if case .success = result {
                outcome = "done before any store change, then killed"
            } else {
                outcome = Self.failure(result) + ", then killed"
                done = false
            }
        } else {
            problems.append("operation \(number) hung for 60 s")
            hung = true
            return "hung"
        }
        _ = running
        let killedMidway = proxy.isCrashed
        // An operation cut short left the catalog as it was: the restart, which runs before it
        // asks the store about the removal or rename, keeps writes no close handed over as
        // `NAME (unsaved …)` (an item the store still had must not lose them). One that ended
        // had removed the item from the catalog before the kill, as a plain one does.
        if killedMidway {
            let restarted = await execute(.crashAndRestart, number: number, handleNumber: nil)
            if !restarted.isEmpty { outcome += "; restart: " + restarted }
            // A clean item's removal or rename is not noted (its next listing shows the store's
            // truth): the folders are listed, so that the catalog's rows are the store's before
            // the model decides which inode stands where.
            let fixture = self.fixture
            let folders: [String]
            switch cut {
            case .unlink(let path): folders = [Self.split(path).0]
            case .rename(let from, let to): folders = [Self.split(from).0, Self.split(to).0]
            default: folders = []
            }
            guard await call({ for folder in Set(folders) { try? await fixture.refresh(folder) } }) != nil else { return "hung" }
        }
        // The operation is done, as the store has it: the versions it replaced may go.
        if done, let (source, target) = change.looked.withLock({ $0 }) {
            // A rename not noted leaves the target's row there, which now stands for the moved
            // content (what it held before was replaced all the same). A noted one was moved.
            var holder: Inode?
            if killedMidway, case .rename(_, let to) = cut {
                let fixture = self.fixture
                if case .success(let item?)? = await call({ await Self.settledLookup(to, fixture) }), item.inode != source {
                    holder = item.inode
                }
            }
            if let holder {
                giveUp(holder, because: "op \(number) \(cut) replaced it")
                lineages[holder]?.removed = false
                if let replaced = change.replaced { discharge(replaced, because: "op \(number) \(cut) replaced it") }
            } else {
                namespaceChangeDone(cut, source: source, target: target, replaced: change.replaced, number: number)
            }
        }
        if !killedMidway {
            let restarted = await execute(.crashAndRestart, number: number, handleNumber: nil)
            if !restarted.isEmpty { outcome += "; restart: " + restarted }
        }
        return outcome
    }

    /// The user removed the file (unlink, or a rename over it).
    private func giveUp(_ inode: Inode, because origin: String) {
        guard var lineage = lineages[inode] else { return }
        for i in lineage.committed { versions[i].mustKeep = false }
        lineage.removed = true
        lineage.dirty = false
        lineages[inode] = lineage
        _ = origin
    }

    private func discharge(_ bytes: [UInt8], because origin: String) {
        for i in versions.indices where versions[i].mustKeep && versions[i].matches(bytes) {
            versions[i].mustKeep = false
        }
        _ = origin
    }

    private func isKnown(_ bytes: [UInt8]) -> Bool {
        versions.contains { $0.matches(bytes) }
    }

    /// The store went down, or another client changed it (`changed`): a sparse copy's fetches
    /// may fail from now on.
    private func exposeSparseCopies(changed: Bool = true) {
        for (inode, lineage) in lineages where lineage.held != nil && !lineage.handles.isEmpty {
            lineages[inode]?.mayFail = true
            if changed { lineages[inode]?.versionMayBeGone = true }
        }
    }

    private func remoteContent(size: Int) -> [UInt8] {
        let tag = Array("<remote \(remoteVersions)>".utf8)
        return Array((tag + [UInt8](repeating: UInt8(ascii: "A") + UInt8(remoteVersions % 26), count: max(0, size - tag.count))).prefix(max(size, tag.count)))
    }

    /// Another client writes `path`: a new version, replacing what the store had there. False
    /// when the store refused it (a folder there, or a file above it: an upload landed since
    /// the caller looked).
    @discardableResult
    private func remoteWrite(_ path: String, size: Int, note: String) async -> Bool {
        remoteVersions += 1
        let content = remoteContent(size: size)
        let stamp = 1_700_000_000 + Double(remoteVersions)
        let (added, replaced) = await proxy.asAnotherClient { store.addFileWhereAClientCould(path, content, modified: stamp) }
        guard added else { return false }
        if let log {
            let version = try? await store.stat(StorePath(path)).etag
            log.append("model: another client stored \(path) as \(version?.value ?? "-"), replacing \(replaced.map(shown) ?? "nothing")")
        }
        if let replaced { discharge(replaced, because: "\(note) remote change of \(path)") }
        versions.append(Version(kind: .remote, bytes: content, origin: "\(note) remote change", path: path))
        return true
    }

    private enum StoreKind { case file, directory }

    private func storeKind(_ path: String) async -> StoreKind? {
        guard let storePath = try? StorePath(path), let entry = try? await store.stat(storePath) else { return nil }
        return entry.isDirectory ? .directory : .file
    }

    private func parentsAreDirectories(_ path: String) async -> Bool {
        var parent = (try? StorePath(path))?.parent
        while let directory = parent, !directory.isRoot {
            if await storeKind(directory.description.trimmingCharacters(in: ["/"])) == .file { return false }
            parent = directory.parent
        }
        return true
    }

    // MARK: The end

    /// Server up, every handle closed, uploads settled; then the checks.
    private func finish() async {
        if down { await perform(.serverUp) }
        if uploadHold != nil { await perform(.releaseUploads) }
        for h in handles.keys.sorted() where !hung { await perform(.close(handle: h)) }
        guard !hung else { return }
        trace.append("// end: uploads settle")
        let deadline = ContinuousClock.now + .seconds(4)
        while ContinuousClock.now < deadline {
            let fixture = self.fixture
            // A listing an upload caused (a conflict copy's folder) can queue a pinned file's
            // download, whose copy exists before its row says it is pinned and local.
            guard await call({ await fixture.settle(); await fixture.fs.waitForListings(); await fixture.fs.pinnedRefresher.waitUntilIdle() }) != nil
            else { return }
            if (try? fixture.pendingUploads().isEmpty) == true && (try? fixture.unpinnedCachedFiles().isEmpty) == true { break }
            try? await Task.sleep(for: .milliseconds(50))
        }
        let pending: [Item], cached: [String]
        do {
            (pending, cached) = (try fixture.pendingUploads(), try fixture.unpinnedCachedFiles())
        } catch {
            problems.append("the catalog cannot tell what is pending: \(error)")
            return
        }
        if !pending.isEmpty {
            problems.append("uploads never settled: " + pending.map { "\($0.path) (\($0.state.rawValue), inode \($0.inode)\($0.uploadError.map { ", " + $0 } ?? ""))" }.joined(separator: ", "))
        }
        if !cached.isEmpty {
            problems.append("the cache holds \(cached.count) unpinned file(s) after every handle closed and uploads settled")
        }

        let onStore = await storeFiles(StorePath.root)
        let recovered = recoveryFiles()
        for version in versions where version.mustKeep {
            if onStore.contains(where: { version.matches($0.content) }) || recovered.contains(where: version.matches) { continue }
            let there = store.content(version.path).map(shown) ?? "nothing"
            problems.append("lost: the \(version.kind.rawValue) version \(shown(version.bytes)) of \(version.path) from \(version.origin); the store has \(there) there")
        }
        for file in onStore where !isKnown(file.content) {
            problems.append("torn: the store holds \(shown(file.content)) at \(file.path), which is no version")
        }
        let heldNow = Set(onStore.map(\.content))
        for (path, content) in store.writtenContents where !isKnown(content) && !heldNow.contains(content) {
            problems.append("torn: an upload put \(shown(content)) at \(path), which is no version (replaced since)")
        }
    }

    /// Every file on the store, with its content (read from the store itself, not through
    /// docfs): those in listed directories, and those a core wrote under a name that is not a
    /// directory, which no listing shows.
    private func storeFiles(_ directory: StorePath) async -> [(path: String, content: [UInt8])] {
        var directories: Set<String> = ["/"]
        var pending: [StorePath] = [directory]
        while let next = pending.popLast() {
            var token: PageToken? = nil
            repeat {
                guard let page = try? await store.list(next, page: token) else { break }
                for entry in page.entries where entry.isDirectory {
                    directories.insert(entry.path.description.trimmingCharacters(in: ["/"]))
                    pending.append(entry.path)
                }
                token = page.next
            } while token != nil
        }
        var files: [(path: String, content: [UInt8])] = []
        for directory in directories.union(Self.files.map { Self.split($0).directory }).union(Self.topLevel) {
            for name in store.fileNames(in: directory) {
                let path = directory == "/" ? name : directory + "/" + name
                files.append((path, store.content(path) ?? []))
                if !directories.contains(directory) {
                    problems.append("hidden: the store holds \(path) under \(directory), which is not a directory there")
                }
            }
        }
        return files
    }

    /// Contents kept on local disk next to the catalog (a recovery folder), outside the cache.
    private func recoveryFiles() -> Set<[UInt8]> {
        var found = Set<[UInt8]>()
        let root = fixture.directory
        guard let walker = FileManager.default.enumerator(atPath: root) else { return found }
        while let relative = walker.nextObject() as? String {
            if relative == "cache" || relative.hasPrefix("cache/") || relative.hasPrefix("catalog.sqlite") { continue }
            var isDirectory: ObjCBool = false
            let path = root + "/" + relative
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue,
               let data = FileManager.default.contents(atPath: path) {
                found.insert(Array(data))
            }
        }
        return found
    }

    // MARK: Helpers

    /// Looks `path` up once no listing that a lookup starts is still in flight, so that what
    /// the model learns (whether a name exists, which item it is) is what docfs itself sees in
    /// the operation that follows: a background refresh that lands between the model's lookup
    /// and docfs's own would make docfs see a version the model thinks it did not.
    private static func settledLookup(_ path: String, _ fixture: CoreFixture) async -> Item? {
        // Each round may start a refresh one level deeper (a folder listed by an earlier mount).
        for _ in 0..<3 {
            _ = try? await fixture.lookup(path)
            await fixture.fs.waitForListings()
        }
        return try? await fixture.lookup(path)
    }

    private static func readAll(_ fs: DocFileSystem, _ handle: UInt64, from start: Int = 0) async throws -> [UInt8] {
        var result: [UInt8] = []
        while true {
            let bytes = try await fs.read(handle: handle, offset: Int64(start + result.count), count: 65536)
            if bytes.isEmpty { return result }
            result += bytes
        }
    }

    private static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return ("/", path) }
        return (String(path[..<slash]), String(path[path.index(after: slash)...]))
    }

    private static func failure<T>(_ result: Result<T, any Error>) -> String {
        guard case .failure(let error) = result else { return "" }
        return "error: \(error)"
    }
}

private extension Result {
    var isSuccess: Bool {
        if case .success = self { return true }
        return false
    }
}

/// The seeds a model run is running, and since when: one that runs for over a minute is named
/// on standard error (unbuffered: a hung run never flushes standard output).
final class RunningSeeds: Sendable {
    private let since = Mutex<[UInt64: ContinuousClock.Instant]>([:])

    func started(_ seed: UInt64) { since.withLock { $0[seed] = .now } }
    func ended(_ seed: UInt64) { since.withLock { $0[seed] = nil } }

    func watch(label: String) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(10))
            let now = ContinuousClock.now
            for (seed, start) in since.withLock({ $0 }) where now - start > .seconds(60) {
                FileHandle.standardError.write(Data("\(label): seed \(seed) has run for \(now - start)\n".utf8))
            }
        }
    }
}
