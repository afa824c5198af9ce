#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// Standard output as `docfs status --watch` uses it: whether it is a terminal, how wide and
/// tall that terminal is now (asked at every frame, so a resized window is followed), the few
/// ANSI sequences a redraw needs, and unbuffered writes (one `write(2)` per frame, so a frame
/// never shows half drawn, and a pipe sees each plain line as it is made).
enum Terminal {
    static let home = "\u{1B}[H"
    static let clearLine = "\u{1B}[K"
    static let clearBelow = "\u{1B}[J"
    static let hideCursor = "\u{1B}[?25l"
    static let showCursor = "\u{1B}[?25h"

    static var isTerminal: Bool { isatty(STDOUT_FILENO) == 1 }

    /// Columns and rows of the terminal on standard output (TIOCGWINSZ); `COLUMNS`/`LINES`, then
    /// 80 x 24, where it does not say.
    static func size(environment: [String: String]) -> (columns: Int, rows: Int) {
        var window = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &window) == 0, window.ws_col > 0 {
            return (Int(window.ws_col), window.ws_row > 0 ? Int(window.ws_row) : 24)
        }
        let columns = environment["COLUMNS"].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil } ?? 80
        let rows = environment["LINES"].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil } ?? 24
        return (columns, rows)
    }

    /// Whether the locale says the terminal takes UTF-8 (for block characters in the bar).
    static func speaksUTF8(environment: [String: String]) -> Bool {
        let locale = environment["LC_ALL"].flatMap { $0.isEmpty ? nil : $0 }
            ?? environment["LC_CTYPE"].flatMap { $0.isEmpty ? nil : $0 }
            ?? environment["LANG"] ?? ""
        let lowered = locale.lowercased()
        return lowered.contains("utf-8") || lowered.contains("utf8")
    }

    /// Writes `text` to standard output whole, unbuffered. False once the reader is gone.
    @discardableResult
    static func write(_ text: String) -> Bool {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.write(STDOUT_FILENO, $0.baseAddress! + offset, $0.count - offset) }
            if count < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += count
        }
        return true
    }
}
