// S3Store+Stat: what one path is on S3 — an object (HEAD), a directory (a marker or keys
// below it) or nothing — and the entry and version an object's headers describe.

import DocFSStore
import Foundation
import NIOHTTP1

extension S3Store {
    public func stat(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        if path.isRoot {
            // The root exists when the bucket does (and we may list it).
            _ = try await listObjects(prefix: prefix, delimiter: "/", maxKeys: 1, continuation: nil, path: path)
            return RemoteEntry(path: path, kind: .directory, size: 0, modified: 0)
        }
        if let file = try await headObject(path) { return file }
        let directory = try await directoryExists(path)
        guard directory.exists else { throw .notFound(path) }
        return RemoteEntry(path: path, kind: .directory, size: 0, modified: directory.modified ?? 0)
    }

    /// The entry at `path`, or nil when there is none.
    func statIfExists(_ path: StorePath) async throws(StoreError) -> RemoteEntry? {
        do {
            return try await stat(path)
        } catch .notFound {
            return nil
        }
    }

    /// HEAD of a key: the file entry (or the link entry, see S3Store+Symlinks.swift), or nil for 404.
    func headObject(_ path: StorePath) async throws(StoreError) -> RemoteEntry? {
        let answer = try await send(Call(method: .HEAD, key: key(path)), path: path)
        switch answer.status {
        case 200:
            let entry = objectEntry(path, answer.headers)
            if configuration.symlinks, S3Metadata.type(in: answer.headers) == .symlink, entry.size <= Self.maximumLinkTargetBytes {
                return try await linkObject(path)
            }
            if configuration.symlinks, entry.size == 0, let special = S3Metadata.special(in: answer.headers) {
                return specialEntry(entry, special)
            }
            return entry
        case 404:
            return nil
        default:
            throw error(answer, method: "HEAD", path: path)
        }
    }

    /// The file entry that an object's HEAD or GET headers describe.
    func objectEntry(_ path: StorePath, _ headers: HTTPHeaders) -> RemoteEntry {
        let ownTime = S3Metadata.modified(in: headers)
        return RemoteEntry(path: path, kind: .file,
                           size: headers.first(name: "Content-Length").flatMap { Int64($0) } ?? 0,
                           modified: ownTime ?? headers.first(name: "Last-Modified").flatMap(HTTPDate.parse) ?? 0,
                           etag: headers.first(name: "ETag").map(ETag.normalized),
                           mode: S3Metadata.mode(in: headers), owner: S3Metadata.owner(in: headers), group: S3Metadata.group(in: headers),
                           carriesOwnTime: ownTime != nil)
    }

    /// Two ETags name the same version, an unquoted one (some servers' listings) quoted first.
    static func sameVersion(_ a: ETag, _ b: ETag) -> Bool {
        ETag.sameVersion(.normalized(a.value), .normalized(b.value))
    }
}
