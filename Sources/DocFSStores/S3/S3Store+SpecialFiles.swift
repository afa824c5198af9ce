// FIFOs, sockets and device nodes on S3, the way s3fs writes them, so a bucket shared with
// s3fs shows the same special files in both: an empty object whose `x-amz-meta-mode` carries
// the type bits (S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK) with the permission bits, and whose
// `x-amz-meta-rdev` carries a device's number.
//
// A listing shows such an object as an empty file. They are found as links are
// (`SymlinkDiscovery.byStat`): the core asks `stat` about each empty object once per version
// (its HEAD tells the type by the mode), and keeps the answer in the catalog for that version.
// Empty objects are asked about whatever their name: a FIFO or socket has no telling extension,
// and the cost is one HEAD per empty object per version, the next listing asks nothing.

import DocFSStore
import Foundation
import NIOCore

extension S3Store {
    public func makeSpecial(_ path: StorePath, _ special: SpecialFile, mode: UInt32) async throws(StoreError) -> RemoteEntry {
        guard configuration.symlinks else { throw .notSupported("special files (the store was mounted with --no-symlinks)") }
        guard !path.isRoot else { throw .alreadyExists(path) }
        knownFolders.used(path)
        try await checkFreeForNewObject(path)

        let modified = Timestamp.now
        var call = Call(method: .PUT, key: key(path), payloadHash: SigV4Signer.unsignedPayload)
        call.headers.append(("If-None-Match", "*"))
        call.headers.append(("Content-Type", "application/octet-stream"))
        call.headers.append((S3Metadata.modeHeader, String(special.type.rawValue | (mode & 0o7777))))
        call.headers.append((S3Metadata.mtimeHeader, modified.decimalSeconds))
        if special.type.isDevice { call.headers.append((S3Metadata.rdevHeader, String(special.rdev))) }
        let answer = try await send(call, path: path, body: .bytes(ByteBuffer()))
        switch answer.status {
        case 200, 201, 204: break
        case 412, 409: throw .alreadyExists(path)
        default: throw error(answer, method: "PUT", path: path)
        }
        return RemoteEntry(path: path, kind: .special(special), size: 0, modified: modified.seconds,
                           etag: answer.headers.first(name: "ETag").map(ETag.normalized), mode: mode & 0o7777)
    }

    /// `entry` (an empty object's) as the special file its mode says it is.
    func specialEntry(_ entry: RemoteEntry, _ special: SpecialFile) -> RemoteEntry {
        var entry = entry
        entry.kind = .special(special)
        return entry
    }
}
