// What `docfs status --watch` computes and draws, without a terminal: the smoothed rate and time
// left of a transfer from successive samples (on a clock of our own), and the layout of a
// transfer's line for any terminal width.

@testable import docfs
import Foundation
import Testing

@Suite("docfs status --watch")
struct StatusWatchTests {
    @Test("a steady transfer: the rate is its speed, the time left what remains at that speed")
    func steadyRate() {
        var rates = TransferRates()
        #expect(rates.observe("a", done: 0, total: 1_000_000, at: 0) == .init(rate: nil, eta: nil))
        var last = TransferRates.Estimate()
        for second in 1...5 {
            last = rates.observe("a", done: Int64(second) * 100_000, total: 1_000_000, at: Double(second))
        }
        #expect(abs(last.rate! - 100_000) < 1)
        #expect(abs(last.eta! - 5) < 0.01)
    }

    @Test("a change of speed shows within a few samples; one empty interval is no stall")
    func smoothing() {
        var rates = TransferRates(timeConstant: 3)
        var done: Int64 = 0
        _ = rates.observe("a", done: 0, total: 100_000_000, at: 0)
        for second in 1...10 {  // 100 KB/s
            done += 100_000
            _ = rates.observe("a", done: done, total: 100_000_000, at: Double(second))
        }
        // One second with nothing (a burst fell after the sample), then on again.
        let gap = rates.observe("a", done: done, total: 100_000_000, at: 11).rate!
        #expect(gap > 50_000 && gap < 100_000, "one empty second: \(gap)")
        var estimate = TransferRates.Estimate()
        for second in 12...24 {  // now 1 MB/s
            done += 1_000_000
            estimate = rates.observe("a", done: done, total: 100_000_000, at: Double(second))
        }
        #expect(estimate.rate! > 950_000 && estimate.rate! <= 1_000_000, "\(estimate)")
    }

    @Test("a count that goes back (a retry) starts afresh; finished transfers are forgotten")
    func restart() {
        var rates = TransferRates()
        _ = rates.observe("a", done: 0, total: 1000, at: 0)
        #expect(rates.observe("a", done: 500, total: 1000, at: 1).rate == 500)
        #expect(rates.observe("a", done: 100, total: 1000, at: 2) == .init(rate: nil, eta: nil))
        #expect(rates.observe("a", done: 300, total: 1000, at: 3).rate == 200)
        rates.keep(only: [])
        #expect(rates.observe("a", done: 400, total: 1000, at: 4) == .init(rate: nil, eta: nil))
        // Stalled from the start: a rate of 0 and no time left to promise.
        _ = rates.observe("b", done: 0, total: 1000, at: 0)
        #expect(rates.observe("b", done: 0, total: 1000, at: 1) == .init(rate: 0, eta: nil))
    }

    @Test("a transfer's line fits every width; narrow windows lose rate and time left, then the bar",
          arguments: [true, false])
    func lineFitsTheWidth(unicode: Bool) {
        let transfer = StatusCommand.Transfer(path: "/photos/2026/holidays/a rather long file name.jpeg", state: "downloading",
                                              done: 3_000_000, total: 12_000_000, rate: 1_500_000, eta: 6)
        for columns in 1...240 {
            let line = StatusFrame.transferLine(transfer, columns: columns, unicode: unicode)
            #expect(line.count <= columns, "\(columns) columns: \(line)")
        }
        let wide = StatusFrame.transferLine(transfer, columns: 120, unicode: unicode)
        #expect(wide.contains(" 25%") && wide.contains("1.4 MiB/s") && wide.contains("ETA 6s") && wide.contains("["), "\(wide)")
        #expect(wide.contains("a rather long file name.jpeg"), "the end of the name stays: \(wide)")
        let narrow = StatusFrame.transferLine(transfer, columns: 44, unicode: unicode)
        #expect(narrow.contains(" 25%") && narrow.contains("[") && !narrow.contains("MiB/s"), "\(narrow)")
        let tiny = StatusFrame.transferLine(transfer, columns: 24, unicode: unicode)
        #expect(tiny.contains(" 25%") && !tiny.contains("["), "\(tiny)")
        let filled = wide.filter { $0 == (unicode ? "█" : "#") }.count, empty = wide.filter { $0 == (unicode ? "░" : "-") }.count
        #expect(filled == (filled + empty) / 4 && filled + empty >= 10, "a quarter of the bar is filled: \(wide)")
    }

    @Test("an upload is marked as one; a transfer without counts has no bar")
    func directionAndUnknown() {
        let up = StatusCommand.Transfer(path: "/a.bin", state: "uploading", done: 1, total: 2)
        #expect(StatusFrame.transferLine(up, columns: 80, unicode: true).hasPrefix("  ↑ /a.bin"))
        #expect(StatusFrame.transferLine(up, columns: 80, unicode: false).hasPrefix("  up /a.bin"))
        let unknown = StatusCommand.Transfer(path: "/b.bin", state: "downloading")
        let line = StatusFrame.transferLine(unknown, columns: 80, unicode: false)
        #expect(line.contains("?%") && !line.contains("["), "\(line)")
    }

    @Test("plain lines: timestamped, a mount's summary only when it changed, every transfer each time")
    func plainLines() {
        let transfer = StatusCommand.Transfer(path: "/big.bin", state: "downloading", done: 500, total: 1000, rate: 100, eta: 5)
        var mount = StatusCommand.MountStatus(mountpoint: "/m", store: "webdav http://x/", pid: 7, running: true,
                                              cacheDirectory: "/c", cacheBytes: 4096, cacheFiles: 1,
                                              states: ["downloading": 1, "placeholder": 2], pendingUploads: 0,
                                              transfers: [transfer], errors: [])
        var printed: [String: String] = [:]
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let first = StatusFrame.plainLines([mount], now: now, printed: &printed)
        #expect(first == ["2027-01-15T08:00:00Z /m webdav http://x/, pid 7, cache 4.0 KiB in 1 file(s)  files placeholder=2 downloading=1  pending uploads 0",
                          "2027-01-15T08:00:00Z /m down /big.bin 500/1000 50% 100 B/s ETA 5s"])
        #expect(StatusFrame.plainLines([mount], now: now, printed: &printed).count == 1)
        mount.pendingUploads = 1
        #expect(StatusFrame.plainLines([mount], now: now, printed: &printed).count == 2)
    }

    @Test("a frame is cut to the window's height")
    func frameHeight() {
        let transfers = (0..<50).map { StatusCommand.Transfer(path: "/f\($0)", state: "downloading", done: 1, total: 2) }
        let mount = StatusCommand.MountStatus(mountpoint: "/m", store: "s", pid: 1, running: true, cacheDirectory: "/c",
                                              cacheBytes: 0, cacheFiles: 0, states: [:], pendingUploads: 0,
                                              transfers: transfers, errors: [])
        let lines = StatusFrame.screen([mount], interval: 1, now: Date(), columns: 60, rows: 20, unicode: false)
        #expect(lines.count == 19)
        #expect(lines.last!.hasPrefix("... ") && lines.last!.contains("more line(s)"))
        #expect(lines.allSatisfy { $0.count <= 60 })
    }
}
