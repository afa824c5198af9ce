// Small HTTP helpers for the WebDAV server: RFC 1123 dates, content types from the file
// extension, single byte ranges, and ETag list matching for If-Match / If-None-Match.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// "Sun, 06 Nov 1994 08:49:37 GMT"
    static func rfc1123(seconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// "1994-11-06T08:49:37Z"
    static func iso8601(seconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T"
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }

    static func now() -> String {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return rfc1123(seconds: Int(spec.tv_sec))
    }

    private static func two(_ value: Int32) -> String {
        value < 10 ? "0\(value)" : "\(value)"
    }
}

enum ContentType {
    private static let table: [String: String] = [
        "txt": "text/plain; charset=utf-8", "md": "text/markdown; charset=utf-8",
        "html": "text/html; charset=utf-8", "htm": "text/html; charset=utf-8",
        "css": "text/css", "csv": "text/csv", "xml": "application/xml", "json": "application/json",
        "js": "text/javascript", "pdf": "application/pdf", "zip": "application/zip",
        "gz": "application/gzip", "tar": "application/x-tar",
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif",
        "svg": "image/svg+xml", "webp": "image/webp", "heic": "image/heic",
        "mp3": "audio/mpeg", "wav": "audio/wav", "mp4": "video/mp4", "mov": "video/quicktime",
        "doc": "application/msword",
        "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "odt": "application/vnd.oasis.opendocument.text", "rtf": "application/rtf",
    ]

    static func forName(_ name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "application/octet-stream" }
        let ext = name[name.index(after: dot)...].lowercased()
        return table[ext] ?? "application/octet-stream"
    }
}

/// A single `Range: bytes=...` request.
enum ByteRangeRequest: Equatable {
    case fromTo(Int64, Int64)  // a-b
    case from(Int64)  // a-
    case suffix(Int64)  // -n

    /// Parses a Range header. Returns nil for anything we ignore (other units, several ranges,
    /// bad syntax): RFC 9110 lets a server answer such requests with the whole representation.
    init?(header: String) {
        let value = header.trimmingSpaces
        guard value.lowercased().hasPrefix("bytes=") else { return nil }
        let spec = value.dropFirst("bytes=".count).trimmingSpaces
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash].trimmingSpaces
        let last = spec[spec.index(after: dash)...].trimmingSpaces
        if first.isEmpty {
            guard let n = Int64(last), n >= 0 else { return nil }
            self = .suffix(n)
        } else if last.isEmpty {
            guard let a = Int64(first), a >= 0 else { return nil }
            self = .from(a)
        } else {
            guard let a = Int64(first), let b = Int64(last), a >= 0, b >= a else { return nil }
            self = .fromTo(a, b)
        }
    }

    /// The inclusive byte range to send, or nil when unsatisfiable for a file of `size` bytes.
    func resolve(size: Int64) -> ClosedRange<Int64>? {
        switch self {
        case .fromTo(let a, let b):
            guard a < size else { return nil }
            return a...min(b, size - 1)
        case .from(let a):
            guard a < size else { return nil }
            return a...(size - 1)
        case .suffix(let n):
            guard n > 0, size > 0 else { return nil }
            return max(0, size - n)...(size - 1)
        }
    }
}

enum ETagMatch {
    /// Does an If-Match / If-None-Match header value match the current tag?
    /// `etag` is nil when the resource does not exist. `weak` compares ignoring `W/`.
    static func matches(_ header: String, etag: String?, weak: Bool) -> Bool {
        guard let etag else { return false }
        for item in header.split(separator: ",") {
            var tag = item.trimmingSpaces
            if tag == "*" { return true }
            if tag.hasPrefix("W/") {
                guard weak else { continue }
                tag = tag.dropFirst(2)
            }
            if tag == etag { return true }
        }
        return false
    }
}
