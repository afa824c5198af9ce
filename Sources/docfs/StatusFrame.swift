import Foundation

/// What `docfs status --watch` prints for one sample of the mounts: a terminal frame (per mount
/// a summary, then per running transfer its name, direction, a progress bar, percent, rate and
/// time left, laid out for the terminal's width and cut to its height), or timestamped plain
/// lines for a pipe or a log. Pure functions of the sample, so the layout does not depend on
/// where it is drawn.
enum StatusFrame {
    typealias Mount = StatusCommand.MountStatus
    typealias Transfer = StatusCommand.Transfer

    // MARK: - terminal

    /// The lines of one frame, each at most `columns` characters, at most `rows - 1` of them.
    static func screen(_ mounts: [Mount], interval: Double, now: Date, columns: Int, rows: Int, unicode: Bool) -> [String] {
        var lines = ["docfs status   every \(String(format: "%g", interval))s   \(clock(now))   Ctrl-C quits", ""]
        for mount in mounts {
            let policy = mount.retention.map { ", " + $0.summary } ?? ""
            lines.append("\(mount.mountpoint)  (\(mount.store), pid \(mount.pid)\(mount.running ? "" : ", not running")\(policy))")
            lines.append("  " + summary(mount))
            if mount.transfers.isEmpty { lines.append("  no transfers") }
            for transfer in mount.transfers { lines.append(transferLine(transfer, columns: columns, unicode: unicode)) }
            for error in mount.errors { lines.append("  ! \(error.path): \(error.error)") }
            lines.append("")
        }
        let height = max(3, rows - 1)
        if lines.count > height {
            let hidden = lines.count - (height - 1)
            lines = Array(lines.prefix(height - 1)) + ["... \(hidden) more line(s); a taller window shows them"]
        }
        return lines.map { fit($0, columns) }
    }

    /// One transfer on one line of `columns`: the bar takes what the name leaves, up to 40
    /// cells; a narrow terminal loses the bar, then rate and time left, and the name is cut at
    /// its start (the file name at its end says most).
    static func transferLine(_ transfer: Transfer, columns: Int, unicode: Bool) -> String {
        let arrow = transfer.state == "uploading" ? (unicode ? "↑" : "up") : (unicode ? "↓" : "dn")
        let prefix = "  \(arrow) "
        let fraction = fraction(of: transfer)
        let percent = fraction.map { String(format: "%3d%%", Int(($0 * 100).rounded(.down))) } ?? "  ?%"
        let rate = transfer.rate.map { bytes($0) + "/s" } ?? "--"
        let eta = transfer.eta.map { "ETA " + duration($0) } ?? ""
        var tail = " " + percent + "  " + pad(rate, 11) + "  " + pad(eta, 9)
        var available = columns - prefix.count - tail.count
        if available < 12 {
            tail = " " + percent
            available = columns - prefix.count - tail.count
        }
        let name = transfer.path
        let barLimit = 40, barMinimum = 10
        guard available >= barMinimum + 3 + 8, let fraction else {
            return fit(prefix + pad(cutStart(name, max(1, available)), max(1, available)) + tail, columns)
        }
        let barWidth = max(barMinimum, min(barLimit, available - 3 - name.count))
        let nameWidth = available - 3 - barWidth
        let filled = min(barWidth, Int((fraction * Double(barWidth)).rounded(.down)))
        let bar = String(repeating: unicode ? "█" : "#", count: filled) + String(repeating: unicode ? "░" : "-", count: barWidth - filled)
        return fit(prefix + pad(cutStart(name, nameWidth), nameWidth) + " [" + bar + "]" + tail, columns)
    }

    // MARK: - plain lines

    /// Timestamped lines for a pipe: a mount's summary when it changed since `printed` (what was
    /// last said per mount point), and every running transfer with its exact byte counts.
    static func plainLines(_ mounts: [Mount], now: Date, printed: inout [String: String]) -> [String] {
        let stamp = timestamp(now)
        var lines: [String] = []
        for mount in mounts {
            let said = "\(mount.store), pid \(mount.pid)\(mount.running ? "" : " (not running)"), " + summary(mount)
            if printed[mount.mountpoint] != said {
                printed[mount.mountpoint] = said
                lines.append("\(stamp) \(mount.mountpoint) \(said)")
                for error in mount.errors { lines.append("\(stamp) \(mount.mountpoint) error \(error.path): \(error.error)") }
            }
            for transfer in mount.transfers {
                let direction = transfer.state == "uploading" ? "up" : "down"
                var line = "\(stamp) \(mount.mountpoint) \(direction) \(transfer.path)"
                if let done = transfer.done, let total = transfer.total {
                    line += " \(done)/\(total)"
                    if let fraction = fraction(of: transfer) { line += " \(Int((fraction * 100).rounded(.down)))%" }
                }
                if let rate = transfer.rate { line += " " + bytes(rate) + "/s" }
                if let eta = transfer.eta { line += " ETA " + duration(eta) }
                lines.append(line)
            }
        }
        return lines
    }

    // MARK: - pieces

    static func summary(_ mount: Mount) -> String {
        let order = ["placeholder", "downloading", "local", "pinned", "modified", "uploading", "error"]
        let states = mount.states.sorted { (order.firstIndex(of: $0.key) ?? 99, $0.key) < (order.firstIndex(of: $1.key) ?? 99, $1.key) }
        let files = states.isEmpty ? "none" : states.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
        return "cache \(bytes(Double(mount.cacheBytes))) in \(mount.cacheFiles) file(s)  files \(files)  pending uploads \(mount.pendingUploads)"
            + (mount.errors.isEmpty ? "" : "  errors \(mount.errors.count)")
    }

    static func fraction(of transfer: Transfer) -> Double? {
        guard let done = transfer.done, let total = transfer.total else { return nil }
        guard total > 0 else { return 1 }
        return min(1, max(0, Double(done) / Double(total)))
    }

    /// `1.4 MiB`, `512 B`.
    static func bytes(_ count: Double) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = count, unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(Int(value)) B" : String(format: "%.1f %@", value, units[unit])
    }

    /// `45s`, `3m05s`, `2h10m` (whole seconds, rounded up: never `0s` while bytes are left).
    static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded(.up))
        if whole < 60 { return "\(whole)s" }
        if whole < 3600 { return String(format: "%dm%02ds", whole / 60, whole % 60) }
        if whole < 100 * 3600 { return String(format: "%dh%02dm", whole / 3600, (whole % 3600) / 60) }
        return ">99h"
    }

    static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }

    static func clock(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss"
        return formatter.string(from: date)
    }

    /// `text` cut to `width` characters.
    static func fit(_ text: String, _ width: Int) -> String {
        text.count <= width ? text : String(text.prefix(max(0, width)))
    }

    /// `text` cut at its start to `width` characters, marked with `...`.
    static func cutStart(_ text: String, _ width: Int) -> String {
        guard text.count > width else { return text }
        guard width > 3 else { return String(text.suffix(width)) }
        return "..." + text.suffix(width - 3)
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }
}
