// WebDAVStore+Versions: what names a version of a file on the server at hand, so that a listing,
// a download and an upload all speak of the same one.
//
// Servers differ in where they give an ETag:
// - most (Apache, rclone, sabre/dav with ETags, `docfs serve`) in PROPFIND and on GET alike;
// - nginx's `dav-ext` lists no `getetag`, while its GET sends one (`"mtime-size"` in hex);
// - sabre/dav's plain file tree gives none anywhere;
// - lighttpd's `mod_webdav` lists one, while its GET sends neither an ETag nor Last-Modified,
//   and ignores `If-Match` on GET.
//
// A server whose listings carry no tags gets one docfs makes from what every server lists: the
// modification time (whole seconds) and the size, `W/"docfs-mtime-SECONDS-SIZE"`. It is weak on
// purpose: two saves within one second that keep the size look alike, which no client of such a
// server can tell apart. Once a listing showed the server has no tags, the tags of GET and PUT
// answers are set aside too, and the version of a download is made the same way from its
// Last-Modified and its length: one form everywhere, or every listing would look like a change.
//
// A server whose GET carries no version (lighttpd, which also ignores `If-Match` on GET) is
// asked for the version around each download: a PROPFIND before and after it, which must agree
// (`readCheckedAround`). The first GET of a mount that shows it is set aside unread.

import DocFSStore
import Foundation
import NIOHTTP1
import Synchronization

/// What this server showed about where it gives versions, as the first answers taught it.
final class VersionSources: Sendable {
    /// A listing described a file without `getetag`: versions are made from time and size.
    let madeFromTimeAndSize = Mutex(false)
    /// A GET was answered without any version (no ETag, and no Last-Modified where versions
    /// are made from time and size): downloads check the version with a PROPFIND around them.
    let getsWithoutVersion = Mutex(false)
}

extension ETag {
    static let timeAndSizePrefix = "W/\"docfs-mtime-"

    /// The version docfs makes for a file on a server that lists no ETag.
    static func madeFrom(modified seconds: Double, size: Int64) -> ETag {
        ETag("\(timeAndSizePrefix)\(Int64(seconds.rounded(.down)))-\(size)\"")
    }

    /// This tag was made by docfs from time and size, not given by the server.
    var isMadeFromTimeAndSize: Bool { value.hasPrefix(Self.timeAndSizePrefix) }

    /// The modification time a tag made from time and size stands for.
    var madeFromSeconds: Double? {
        guard isMadeFromTimeAndSize else { return nil }
        let fields = value.dropFirst(Self.timeAndSizePrefix.count).dropLast().split(separator: "-")
        return fields.first.flatMap { Double($0) }
    }
}

extension WebDAVStore {
    /// The version of a file as a PROPFIND `response` describes it (nil for a collection, or a
    /// file of a server that lists neither a tag nor a time).
    func version(of response: WebDAVResponse) -> ETag? {
        if let raw = response.etag {
            if !versionSources.madeFromTimeAndSize.withLock({ $0 }) { return Self.normalizedETag(raw) }
        } else if response.isCollection {
            return nil
        } else {
            noteListingsWithoutTags()
        }
        guard !response.isCollection, let modified = response.lastModified.flatMap(HTTPDate.parse) else { return nil }
        return .madeFrom(modified: modified, size: max(0, response.contentLength ?? 0))
    }

    /// The version an HTTP answer's headers name: its ETag, or where versions are made from
    /// time and size, its Last-Modified and the file's `size`. Nil when they name none.
    func version(answeredIn headers: HTTPHeaders, size: Int64?) -> ETag? {
        if !versionSources.madeFromTimeAndSize.withLock({ $0 }) {
            return headers.first(name: "ETag").map(Self.normalizedETag)
        }
        guard let size, let modified = headers.first(name: "Last-Modified").flatMap(HTTPDate.parse) else { return nil }
        return .madeFrom(modified: modified, size: size)
    }

    /// The size of the whole file an answer to GET describes, where its headers say it.
    static func fileSize(answeredIn headers: HTTPHeaders, status: Int) -> Int64? {
        if status == 206 { return headers.first(name: "Content-Range").flatMap(ContentRange.init)?.total }
        return headers.first(name: "Content-Length").flatMap { Int64($0) }
    }

    /// The condition headers a GET of `version` can carry on this server: `If-Match` for a tag
    /// the server gave and compares strongly; `If-Unmodified-Since` for one made from time and
    /// size (weak tags of the server's own are checked against the answer instead).
    static func readConditions(for version: ETag) -> [String: String] {
        if let seconds = version.madeFromSeconds { return ["If-Unmodified-Since": HTTPDate.format(seconds)] }
        if version.isWeak { return [:] }
        return ["If-Match": version.value]
    }

    /// Notes that this server lists no ETags, so that versions are made from time and size.
    func noteListingsWithoutTags() {
        let first = versionSources.madeFromTimeAndSize.withLock { made in
            defer { made = true }
            return !made
        }
        guard first else { return }
        traitsMayHaveChanged()
        logger.notice("the server lists no ETags: docfs tells versions by modification time and size (a change within the same second that keeps the size goes unseen)")
    }

    /// Takes a version the core asks for (learnt from this server in an earlier mount, kept in
    /// the catalog) as a sign of how the server names versions: one made from time and size
    /// means the server lists no ETags, also before this mount's first listing showed it (a
    /// mount's recovery reads and writes before it lists anything).
    func learn(from version: ETag?) {
        if version?.isMadeFromTimeAndSize == true { noteListingsWithoutTags() }
    }

    /// Notes that a GET came back without a version; true the first time.
    func noteGetWithoutVersion() -> Bool {
        let first = versionSources.getsWithoutVersion.withLock { known in
            defer { known = true }
            return !known
        }
        if first { traitsMayHaveChanged() }
        return first
    }
}

extension WebDAVStore {
    /// The largest part of a checked download held in memory until the version after it is known.
    static let checkedPart: Int64 = 4 << 20

    /// A download from a server whose GETs name no version (lighttpd): the version is asked
    /// before it (it must be `ifMatch`, when given) and after it. A range of a version goes
    /// through in parts of at most `checkedPart` bytes, each held here until the stat after
    /// it shows the version unchanged, so that no byte of another version reaches the sink; a
    /// whole download (its caller resets the copy when it asks again) streams into the sink,
    /// and is answered "busy" when the file changed meanwhile.
    func readCheckedAround(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry {
        let before = try await stat(path, asking: ifMatch)
        guard let version = ifMatch ?? before.etag else {
            // Nothing names versions of this file: its bytes as they come.
            guard let answer = try await startGET(path, range: range, conditions: [:]) else { return before }
            let size = try await receive(answer, range: range, path: path, into: sink)
            return RemoteEntry(path: path, kind: .file, size: size, modified: before.modified, etag: nil)
        }
        if range == nil, ifMatch == nil {
            guard let answer = try await startGET(path, range: nil, conditions: Self.readConditions(for: version)) else { return before }
            let size = try await receive(answer, range: nil, path: path, into: sink)
            let after = try await stat(path)
            guard let now = after.etag, Self.sameVersion(now, version), size == after.size else {
                throw .busy(status: 200, retryAfter: .zero, message: "\(path) changed while it was downloaded")
            }
            return RemoteEntry(path: path, kind: .file, size: size, modified: before.modified, etag: version)
        }
        let wanted = range ?? 0..<before.size
        var offset = wanted.lowerBound
        let end = min(wanted.upperBound, before.size)
        while offset < end {
            let part = offset..<min(end, offset + Self.checkedPart)
            guard let answer = try await startGET(path, range: part, conditions: Self.readConditions(for: version)) else { break }
            let held = HeldPart(part)
            _ = try await receive(answer, range: part, path: path, into: held)
            _ = try await stat(path, asking: version)
            try held.deliver(to: sink)
            offset = part.upperBound
        }
        return RemoteEntry(path: path, kind: .file, size: before.size, modified: before.modified, etag: version)
    }
}

/// The bytes of one part of a checked download, held until they may be delivered.
final class HeldPart: ContentSink, Sendable {
    let part: ByteRange
    let bytes: Mutex<[UInt8]>

    init(_ part: ByteRange) {
        self.part = part
        self.bytes = Mutex([])
    }

    func write(_ chunk: UnsafeRawBufferPointer, at offset: Int64) throws(StoreError) {
        bytes.withLock { held in
            guard offset == part.lowerBound + Int64(held.count) else { return }
            held.append(contentsOf: chunk.prefix(Int(part.upperBound - offset)))
        }
    }

    func deliver(to sink: any ContentSink) throws(StoreError) {
        let held = bytes.withLock { $0 }
        guard !held.isEmpty else { return }
        let result: Result<Void, StoreError> = held.withUnsafeBytes { buffer in
            Result { () throws(StoreError) in try sink.write(buffer, at: part.lowerBound) }
        }
        try result.get()
    }
}
