// ETag+HTTP: ETags as HTTP stores (WebDAV and S3) send them: the one form docfs keeps, and
// when two of them name the same version. Both stores use these; neither owns them.

import DocFSStore
import Foundation

extension ETag {
    /// An ETag from a header or a listing as `"…"` (a weak `W/"…"` kept as it is): S3 quotes
    /// them, some compatible servers and WebDAV servers do not.
    static func normalized(_ raw: String) -> ETag {
        let value = raw.trimmingCharacters(in: .whitespaces)
        if value.hasPrefix("\"") || value.hasPrefix("W/\"") { return ETag(value) }
        return ETag("\"" + value + "\"")
    }

    /// Two ETags name the same version (the weak marker aside).
    static func sameVersion(_ a: ETag, _ b: ETag) -> Bool {
        func strong(_ e: ETag) -> Substring { e.value.hasPrefix("W/") ? e.value.dropFirst(2) : Substring(e.value) }
        return strong(a) == strong(b)
    }
}
