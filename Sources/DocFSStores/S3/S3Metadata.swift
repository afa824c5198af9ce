// S3Metadata: POSIX mode, owner and mtime as user metadata on an object, the way s3fs keeps
// them — `x-amz-meta-mode` (the decimal st_mode, file type bits included), `x-amz-meta-uid` and
// `x-amz-meta-gid` (decimal), and `x-amz-meta-mtime` (seconds since 1970; docfs adds the
// fraction after a dot, which s3fs's integer parser stops at) — so a bucket shared with s3fs
// shows the same permissions, owners and dates in both.

import DocFSStore
import NIOHTTP1

enum S3Metadata {
    static let modeHeader = "x-amz-meta-mode"
    static let mtimeHeader = "x-amz-meta-mtime"
    /// s3fs's device number of a character or block device (decimal `st_rdev`).
    static let rdevHeader = "x-amz-meta-rdev"
    static let uidHeader = "x-amz-meta-uid"
    static let gidHeader = "x-amz-meta-gid"

    /// The file type bits of `st_mode` that s3fs writes into `x-amz-meta-mode`.
    enum FileType: UInt32 {
        case regular = 0o100000
        case directory = 0o040000
        case symlink = 0o120000
        /// Special files (see `SpecialFile`): empty objects, as s3fs writes them.
        case fifo = 0o010000
        case characterDevice = 0o020000
        case blockDevice = 0o060000
        case socket = 0o140000

        static let mask: UInt32 = 0o170000
    }

    /// The request headers that carry `attributes` on a PUT, a CreateMultipartUpload or a
    /// CopyObject with `x-amz-metadata-directive: REPLACE`.
    static func headers(for attributes: StoreAttributes, type: FileType = .regular) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = []
        if let mode = attributes.mode {
            headers.append((modeHeader, String(type.rawValue | (mode & 0o7777))))
        }
        if let modified = attributes.modified {
            headers.append((mtimeHeader, modified.decimalSeconds))
        }
        if let owner = attributes.owner { headers.append((uidHeader, String(owner))) }
        if let group = attributes.group { headers.append((gidHeader, String(group))) }
        return headers
    }

    /// The owner from `x-amz-meta-uid`, if any.
    static func owner(in headers: HTTPHeaders) -> UInt32? { number(uidHeader, in: headers) }

    /// The group from `x-amz-meta-gid`, if any.
    static func group(in headers: HTTPHeaders) -> UInt32? { number(gidHeader, in: headers) }

    private static func number(_ name: String, in headers: HTTPHeaders) -> UInt32? {
        headers.first(name: name).flatMap { UInt32($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// Permission bits from a response's `x-amz-meta-mode`, if any.
    static func mode(in headers: HTTPHeaders) -> UInt32? {
        fullMode(in: headers).map { $0 & 0o7777 }
    }

    /// The file type `x-amz-meta-mode` names, if it names one we know.
    static func type(in headers: HTTPHeaders) -> FileType? {
        fullMode(in: headers).flatMap { FileType(rawValue: $0 & FileType.mask) }
    }

    private static func fullMode(in headers: HTTPHeaders) -> UInt32? {
        headers.first(name: modeHeader).flatMap { UInt32($0.trimmingCharacters(in: .whitespaces)) }
    }

    /// The special file an object's headers describe, if its mode names one.
    static func special(in headers: HTTPHeaders) -> SpecialFile? {
        guard let type = fullMode(in: headers).flatMap(SpecialFile.FileType.init(mode:)) else { return nil }
        let rdev = headers.first(name: rdevHeader).flatMap { UInt64($0.trimmingCharacters(in: .whitespaces)) } ?? 0
        return SpecialFile(type: type, rdev: rdev)
    }

    /// The modification time from `x-amz-meta-mtime`, if any (seconds, maybe with a fraction).
    /// Anyone can write that header, so anything is expected: a time beyond what docfs holds
    /// (`1e300`, `-inf`) is the nearest one it does (see `Timestamp`); `nan` or text that is no
    /// number is no time, and the object's `Last-Modified` stands instead.
    static func modified(in headers: HTTPHeaders) -> Double? {
        headers.first(name: mtimeHeader).flatMap(Timestamp.representableSeconds)
    }

    /// Every `x-amz-meta-*` header of a response, to keep them when replacing one.
    static func userMetadata(in headers: HTTPHeaders) -> [(name: String, value: String)] {
        headers.filter { $0.name.lowercased().hasPrefix("x-amz-meta-") }.map { ($0.name.lowercased(), $0.value) }
    }
}
