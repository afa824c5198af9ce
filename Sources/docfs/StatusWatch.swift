#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import Foundation
import Synchronization

/// `docfs status --watch`: samples the mounts every `interval` (the same reading as `docfs
/// status`: registry, catalog, `user.docfs.progress`), estimates each transfer's rate and time
/// left from successive samples (`TransferRates`), and shows them: a frame redrawn in place on a
/// terminal (cursor home, clear, the cursor hidden meanwhile), timestamped plain lines on a pipe,
/// one JSON report per line with `--json`. Ends when the mounts it watches are gone (unmounted,
/// or their daemon died), saying so, or at Ctrl-C (SIGINT, SIGTERM, SIGHUP), leaving the
/// terminal as it found it.
struct StatusWatch {
    enum Output { case terminal, plain, json }

    let interval: Double
    let output: Output
    let environment: [String: String]
    /// The mount points or paths asked for, as given, or nil for every mount of this user.
    let watched: String?
    /// The mounts of the registry to watch now.
    let records: () -> [MountRecord]

    /// Runs until the mounts are gone or a signal asks to stop; the exit status.
    func run() async -> Int32 {
        let stopFlag = StopFlag()
        let handlers = SignalHandlers(signals: [SIGINT, SIGTERM, SIGHUP]) { _ in stopFlag.set() }
        defer { handlers.cancel() }
        if output == .terminal { Terminal.write(Terminal.hideCursor) }

        var rates = TransferRates()
        var printed: [String: String] = [:]
        var ending: String?
        var seenRunning = false
        while !stopFlag.isSet {
            let now = Date()
            let at = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
            var mounts = records().map(StatusCommand.status(of:)).filter(\.running)
            var keys = Set<String>()
            for m in mounts.indices {
                for t in mounts[m].transfers.indices {
                    let transfer = mounts[m].transfers[t]
                    guard let done = transfer.done, let total = transfer.total else { continue }
                    let key = mounts[m].mountpoint + "\u{0}" + transfer.state + "\u{0}" + transfer.path
                    keys.insert(key)
                    let estimate = rates.observe(key, done: done, total: total, at: at)
                    (mounts[m].transfers[t].rate, mounts[m].transfers[t].eta) = (estimate.rate, estimate.eta)
                }
            }
            rates.keep(only: keys)
            if mounts.isEmpty {
                if let watched {
                    ending = "docfs: \(watched) is no longer mounted"
                } else {
                    ending = seenRunning ? "docfs: no docfs mount left" : "no docfs mounts"
                }
                break
            }
            seenRunning = true
            guard show(mounts, now: now, printed: &printed) else { break }  // the reader went away
            await sleep(interval, unless: stopFlag)
        }
        if output == .terminal { Terminal.write(Terminal.showCursor) }
        if let ending {
            switch output {
            case .terminal: Terminal.write(ending + "\n")
            case .plain: Terminal.write(StatusFrame.timestamp(Date()) + " " + ending + "\n")
            case .json: printError(ending)
            }
        }
        return 0
    }

    /// Shows one sample; false once standard output is closed.
    private func show(_ mounts: [StatusCommand.MountStatus], now: Date, printed: inout [String: String]) -> Bool {
        switch output {
        case .terminal:
            let size = Terminal.size(environment: environment)
            let lines = StatusFrame.screen(mounts, interval: interval, now: now, columns: size.columns, rows: size.rows,
                                           unicode: Terminal.speaksUTF8(environment: environment))
            return Terminal.write(Terminal.home + lines.map { $0 + Terminal.clearLine + "\n" }.joined() + Terminal.clearBelow)
        case .plain:
            let lines = StatusFrame.plainLines(mounts, now: now, printed: &printed)
            return lines.isEmpty || Terminal.write(lines.map { $0 + "\n" }.joined())
        case .json:
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            guard let data = try? encoder.encode(StatusCommand.Report(mounts: mounts)) else { return true }
            return Terminal.write(String(decoding: data, as: UTF8.self) + "\n")
        }
    }

    /// Waits `seconds`, in short steps so that a stop request is answered at once.
    private func sleep(_ seconds: Double, unless stop: StopFlag) async {
        let end = DispatchTime.now().uptimeNanoseconds + UInt64(seconds * 1e9)
        while !stop.isSet {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < end else { return }
            try? await Task.sleep(nanoseconds: min(end - now, 50_000_000))
        }
    }
}

/// Set by a signal handler, read by the watch loop.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func set() { flag.store(true, ordering: .relaxed) }
    var isSet: Bool { flag.load(ordering: .relaxed) }
}
