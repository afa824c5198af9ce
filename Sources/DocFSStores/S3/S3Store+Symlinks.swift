// Symbolic links on S3, the way s3fs writes them, so a bucket shared with s3fs shows the same
// links in both: an object whose content is the link's target and whose `x-amz-meta-mode`
// carries S_IFLNK (0o120000) with the permission bits 0777.
//
// A ListObjectsV2 listing carries no metadata, so there a link looks like a small file. The
// store says so in its capabilities (`SymlinkDiscovery.byStat`): the core asks `stat` about
// each small file once per version, and `stat`'s HEAD tells a link by its mode, after which one
// GET of at most 4095 bytes reads the target.

import AsyncHTTPClient
import DocFSStore
import Foundation
import NIOCore

extension S3Store {
    /// What S3 does not check for us before a new link or special file is PUT: a directory at
    /// the path, a missing parent, an object already there on servers that ignore If-None-Match.
    func checkFreeForNewObject(_ path: StorePath) async throws(StoreError) {
        async let isDirectory = Self.catching { () throws(StoreError) in try await self.directoryExists(path).exists }
        async let parentExists = Self.catching { () throws(StoreError) in try await self.parentExists(of: path) }
        async let existing = Self.catching { () throws(StoreError) in try await self.headObject(path) != nil }
        let directoryThere = try await isDirectory.get()
        let objectThere = try await existing.get()
        if directoryThere || objectThere { throw .alreadyExists(path) }
        if try await !parentExists.get() { throw .notFound(path.parent ?? .root) }
    }

    /// The longest target a link can have: PATH_MAX less the terminating NUL.
    static let maximumLinkTargetBytes: Int64 = 4095

    public func makeSymlink(_ path: StorePath, target: String) async throws(StoreError) -> RemoteEntry {
        guard configuration.symlinks else { throw .notSupported("symbolic links (the store was mounted with --no-symlinks)") }
        guard !path.isRoot else { throw .alreadyExists(path) }
        knownFolders.used(path)
        let bytes = Array(target.utf8)
        guard !bytes.isEmpty, Int64(bytes.count) <= Self.maximumLinkTargetBytes, !bytes.contains(0) else {
            throw .invalidName(target)
        }
        try await checkFreeForNewObject(path)

        let modified = Timestamp.now
        var call = Call(method: .PUT, key: key(path), payloadHash: SigV4Signer.unsignedPayload)
        call.headers.append(("If-None-Match", "*"))
        call.headers.append(("Content-Type", "application/octet-stream"))
        call.headers += S3Metadata.headers(for: StoreAttributes(mode: 0o777, modified: modified), type: .symlink)
        let answer = try await send(call, path: path, body: .bytes(ByteBuffer(bytes: bytes)))
        switch answer.status {
        case 200, 201, 204: break
        case 412, 409: throw .alreadyExists(path)
        default: throw error(answer, method: "PUT", path: path)
        }
        return RemoteEntry(path: path, kind: .symlink(target: target), size: Int64(bytes.count), modified: modified.seconds,
                           etag: answer.headers.first(name: "ETag").map(ETag.normalized), mode: 0o777)
    }

    /// The entry of an object whose HEAD said it is a link: one GET reads the target. What the
    /// GET's own headers say wins (the object may have been replaced in between); nil when it
    /// is gone.
    func linkObject(_ path: StorePath) async throws(StoreError) -> RemoteEntry? {
        let answer = try await send(Call(method: .GET, key: key(path)), path: path)
        switch answer.status {
        case 200: break
        case 404: return nil
        default: throw error(answer, method: "GET", path: path)
        }
        var entry = objectEntry(path, answer.headers)
        entry.size = Int64(answer.body.count)
        guard S3Metadata.type(in: answer.headers) == .symlink else { return entry }
        guard Int64(answer.body.count) <= Self.maximumLinkTargetBytes, !answer.body.contains(0),
              let target = String(bytes: answer.body, encoding: .utf8), !target.isEmpty else {
            // Not a target a link can have: show the object as the file it is.
            logger.warning("an object marked as a link holds no usable target; showing it as a file", metadata: ["path": "\(path)"])
            return entry
        }
        entry.kind = .symlink(target: target)
        return entry
    }
}
