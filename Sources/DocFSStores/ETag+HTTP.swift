// ETag+HTTP: ETags as HTTP stores (WebDAV and S3) send them: the one form docfs keeps, and
// when two of them name the same version. Both stores use these; neither owns them.

import DocFSStore
import Foundation

extension ETag {
    /// An ETag from a header or a listing as `"…"` (a weak `W/"…"` kept as it is): S3 quotes
    /// them, some compatible servers and WebDAV servers do not.
    static func normalized(_ raw: String) -> ETag {
        // Foundation's trimming is slow and nearly always has nothing to do (one ETag per
        // entry of a listing): it runs only when an end is not a plain visible ASCII byte.
        let plain = { (byte: UInt8?) in byte.map { $0 > 0x20 && $0 < 0x7F } ?? false }
        let value = plain(raw.utf8.first) && plain(raw.utf8.last) ? raw : raw.trimmingCharacters(in: .whitespaces)
        if value.hasPrefix("\"") || value.hasPrefix("W/\"") { return ETag(value) }
        return ETag("\"" + value + "\"")
    }

    /// A weak tag (`W/"…"`): Apache's for a second after a change. `If-Match` compares tags
    /// strongly (RFC 9110), so a weak one never matches there.
    var isWeak: Bool { value.hasPrefix("W/") }

}
