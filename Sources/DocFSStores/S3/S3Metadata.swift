// S3Metadata: POSIX mode and mtime as user metadata on an object, the way s3fs keeps them —
// `x-amz-meta-mode` (the decimal st_mode, file type bits included) and `x-amz-meta-mtime`
// (seconds since 1970; docfs adds the fraction after a dot, which s3fs's integer parser stops
// at) — so a bucket shared with s3fs shows the same permissions and dates in both.

import DocFSStore
import NIOHTTP1

enum S3Metadata {
    static let modeHeader = "x-amz-meta-mode"
    static let mtimeHeader = "x-amz-meta-mtime"

    /// The request headers that carry `attributes` on a PUT, a CreateMultipartUpload or a
    /// CopyObject with `x-amz-metadata-directive: REPLACE`.
    static func headers(for attributes: StoreAttributes, isDirectory: Bool = false) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = []
        if let mode = attributes.mode {
            let type: UInt32 = isDirectory ? 0o040000 : 0o100000
            headers.append((modeHeader, String(type | (mode & 0o7777))))
        }
        if let modified = attributes.modified {
            let parts = modified.parts
            headers.append((mtimeHeader, parts.nanoseconds == 0 ? String(parts.seconds)
                : String(parts.seconds) + "." + String(String(parts.nanoseconds + 1_000_000_000).dropFirst())))
        }
        return headers
    }

    /// Permission bits from a response's `x-amz-meta-mode`, if any.
    static func mode(in headers: HTTPHeaders) -> UInt32? {
        headers.first(name: modeHeader).flatMap { UInt32($0.trimmingCharacters(in: .whitespaces)) }.map { $0 & 0o7777 }
    }

    /// The modification time from `x-amz-meta-mtime`, if any (seconds, maybe with a fraction).
    static func modified(in headers: HTTPHeaders) -> Double? {
        headers.first(name: mtimeHeader).flatMap { Double($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// Every `x-amz-meta-*` header of a response, to keep them when replacing one.
    static func userMetadata(in headers: HTTPHeaders) -> [(name: String, value: String)] {
        headers.filter { $0.name.lowercased().hasPrefix("x-amz-meta-") }.map { ($0.name.lowercased(), $0.value) }
    }
}
