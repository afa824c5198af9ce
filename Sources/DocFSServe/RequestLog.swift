// RequestLog: one tab-separated line per completed request, appended with a single write(2)
// on an O_APPEND descriptor, so every line is on disk (in the page cache) before the response
// ends and concurrent requests never interleave within a line.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// `@unchecked Sendable`: the descriptor is immutable; `write(2)` with O_APPEND is atomic per
/// call for regular files and safe from any thread; it is closed once, in `deinit`.
final class RequestLog: @unchecked Sendable {
    private let fd: Int32

    init(path: String) throws(DAVError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw DAVError.errno(errno, "cannot open request log \(path)") }
        self.fd = fd
    }

    deinit { close(fd) }

    /// `METHOD\tPATH\tSTATUS\tBYTES\tRANGE`
    func record(method: String, path: String, status: Int, bytes: Int64, range: String?) {
        let line = "\(method)\t\(clean(path))\t\(status)\t\(bytes)\t\(range.map(clean) ?? "-")\n"
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return
                }
                offset += n
            }
        }
    }

    private func clean(_ field: String) -> String {
        String(field.map { $0 == "\t" || $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}
