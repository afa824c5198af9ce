import Foundation

/// `report (conflict 2026-11-22 061530).pdf`, or `(unsaved …)` for writes never handed over.
/// Dot files and names without an extension get the suffix at the end.
public enum ConflictName {
    public enum Kind: String, Sendable {
        case conflict, unsaved
    }

    public static func make(for name: String, at date: Date, attempt: Int = 1, kind: Kind = .conflict) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone.current
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        var stamp = String(format: "%04d-%02d-%02d %02d%02d%02d", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
        if attempt > 1 { stamp += " \(attempt)" }
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            return "\(name[..<dot]) (\(kind.rawValue) \(stamp))\(name[dot...])"
        }
        return "\(name) (\(kind.rawValue) \(stamp))"
    }
}
