// S3Store+Namespace: the shape of the tree — making directories (marker keys), deleting
// objects and empty directories, and moving files and directories.
//
// Moves are CopyObject + DeleteObject (UploadPartCopy above 5 GiB), directories key by key:
// S3 has no rename, so a move is NOT atomic — an interrupted directory move leaves some keys
// copied and the source still complete (sources are deleted only after every copy succeeded).

import DocFSStore
import Foundation
import NIOCore

extension S3Store {
    public func makeDirectory(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .alreadyExists(path) }
        // In a folder made here a moment ago, the name is free unless this mount used it.
        if knownFolders.isFresh(path) {
            try await putDirectoryMarker(directoryPrefix(path), path: path, onlyIfAbsent: true)
            knownFolders.madeFolder(path)
            return RemoteEntry(path: path, kind: .directory, size: 0, modified: Date().timeIntervalSince1970)
        }
        // The three questions at once: one round trip before the marker, not three.
        async let parentExists = Self.catching { () throws(StoreError) in try await self.parentExists(of: path) }
        async let fileThere = Self.catching { () throws(StoreError) in try await self.headObject(path) != nil }
        async let folderThere = Self.catching { () throws(StoreError) in try await self.directoryExists(path).exists }
        let (parent, file, folder) = await (parentExists, fileThere, folderThere)
        if try !parent.get() { throw .notFound(path.parent ?? .root) }
        if try file.get() { throw .alreadyExists(path) }
        if try folder.get() { throw .alreadyExists(path) }
        try await putDirectoryMarker(directoryPrefix(path), path: path, onlyIfAbsent: true)
        knownFolders.madeFolder(path)
        return RemoteEntry(path: path, kind: .directory, size: 0, modified: Date().timeIntervalSince1970)
    }

    /// Writes a zero-byte `dir/` marker. Markers are written, never copied: some servers
    /// (SeaweedFS) refuse CopyObject of a marker with NoSuchKey although HEAD finds it.
    func putDirectoryMarker(_ key: String, path: StorePath, onlyIfAbsent: Bool) async throws(StoreError) {
        var call = Call(method: .PUT, key: key)
        if onlyIfAbsent { call.headers.append(("If-None-Match", "*")) }
        call.headers.append(("Content-Type", "application/x-directory"))
        let answer = try await send(call, path: path, body: .bytes(ByteBuffer()))
        switch answer.status {
        case 200, 201, 204: break
        case 412, 409: throw .alreadyExists(path)
        default: throw error(answer, method: "PUT", path: path)
        }
    }

    public func delete(_ path: StorePath, isDirectory: Bool) async throws(StoreError) {
        guard !path.isRoot else { throw .accessDenied("refusing to delete the store's root") }
        if !isDirectory {
            guard try await headObject(path) != nil else {
                if try await directoryExists(path).exists { throw .isADirectory(path) }
                throw .notFound(path)
            }
            try await deleteKey(key(path), path: path)
            return
        }
        let marker = directoryPrefix(path)
        let below = try await listObjects(prefix: marker, delimiter: nil, maxKeys: 2, continuation: nil, path: path)
        let keys = below.objects.compactMap { Self.decodeListedKey($0.key, encoded: below.urlEncoded) }
        if keys.isEmpty, below.commonPrefixes.isEmpty {
            if try await headObject(path) != nil { throw .notADirectory(path) }
            throw .notFound(path)
        }
        guard keys.allSatisfy({ $0 == marker }), below.commonPrefixes.isEmpty else { throw .notEmpty(path) }
        knownFolders.forget(path)
        try await deleteKey(marker, path: path)
    }

    /// DeleteObject (which succeeds for a missing key too).
    func deleteKey(_ key: String, path: StorePath) async throws(StoreError) {
        let answer = try await send(Call(method: .DELETE, key: key), path: path)
        switch answer.status {
        case 200, 202, 204, 404: return
        default: throw error(answer, method: "DELETE", path: path)
        }
    }

    public func move(_ source: StorePath, to target: StorePath, replace: Bool) async throws(StoreError) -> RemoteEntry {
        guard !source.isRoot else { throw .accessDenied("refusing to move the store's root") }
        guard !target.isRoot else { throw .alreadyExists(target) }
        if source == target { return try await stat(source) }
        let sourceEntry = try await stat(source)
        if sourceEntry.kind == .directory, target.components.starts(with: source.components) {
            throw .invalidName("cannot move \(source) into itself (\(target))")
        }
        if try await !parentExists(of: target) { throw .notFound(target.parent ?? .root) }
        if let existing = try await statIfExists(target) {
            guard replace else { throw .alreadyExists(target) }
            switch (sourceEntry.kind, existing.kind) {
            case (.directory, .directory):
                let below = try await listObjects(prefix: directoryPrefix(target), delimiter: nil, maxKeys: 2, continuation: nil, path: target)
                let keys = below.objects.compactMap { Self.decodeListedKey($0.key, encoded: below.urlEncoded) }
                guard keys.allSatisfy({ $0 == directoryPrefix(target) }), below.commonPrefixes.isEmpty else { throw .notEmpty(target) }
            case (.directory, _): throw .notADirectory(target)
            case (_, .directory): throw .isADirectory(target)
            default: break
            }
        }
        knownFolders.used(target)
        if sourceEntry.kind == .directory {
            knownFolders.forget(source)
            knownFolders.forget(target)  // a folder made here, replaced: its names are no longer free
            try await moveDirectory(source, to: target)
        } else {
            try await copyObject(from: key(source), size: sourceEntry.size, to: key(target), path: source)
            try await deleteKey(key(source), path: source)
        }
        return try await stat(target)
    }

    /// Copies every key below `source/` to the same name below `target/`, then deletes the
    /// sources. Not atomic (see the top of the file); the sources go only once all copies exist.
    /// A listing page is sorted, so a marker comes in the page of its first key below it, or earlier.
    private func moveDirectory(_ source: StorePath, to target: StorePath) async throws(StoreError) {
        let from = directoryPrefix(source)
        let to = directoryPrefix(target)
        var copied: [String] = []
        var token: String?
        repeat {
            let page = try await listObjects(prefix: from, delimiter: nil, maxKeys: 1000, continuation: token, path: source)
            var batch: [(key: String, size: Int64)] = []
            for object in page.objects {
                guard let key = Self.decodeListedKey(object.key, encoded: page.urlEncoded), key.utf8.starts(with: from.utf8) else {
                    throw .protocolError("LIST \(source): a key that does not decode or lies outside the directory")
                }
                batch.append((key, object.size))
            }
            // Markers first, shallower before deeper, then the objects: a marker is on the
            // store before any key below it. A server that keeps directories (SeaweedFS's filer)
            // makes a parent implicitly for a key put below it; a marker put at the same moment
            // can lose that race and vanish from listings.
            let isMarker = { (item: (key: String, size: Int64)) in item.key.hasSuffix("/") && item.size == 0 }
            let markersByDepth = Dictionary(grouping: batch.filter(isMarker)) { item in
                item.key.utf8.reduce(0) { $1 == UInt8(ascii: "/") ? $0 + 1 : $0 }
            }
            for (_, markers) in markersByDepth.sorted(by: { $0.key < $1.key }) {
                try await forEachConcurrently(markers) { (item) throws(StoreError) in
                    try await self.putDirectoryMarker(to + Self.dropping(from, from: item.key), path: target, onlyIfAbsent: false)
                }
            }
            try await forEachConcurrently(batch.filter { !isMarker($0) }) { (item) throws(StoreError) in
                try await self.copyObject(from: item.key, size: item.size, to: to + Self.dropping(from, from: item.key), path: source)
            }
            copied += batch.map(\.key)
            token = page.isTruncated ? page.nextContinuationToken : nil
        } while token != nil
        try await forEachConcurrently(copied.map { (key: $0, size: Int64(0)) }) { (item) throws(StoreError) in
            try await self.deleteKey(item.key, path: source)
        }
    }

    /// CopyObject, or a multipart copy for objects above 5 GiB (CopyObject's limit).
    func copyObject(from sourceKey: String, size: Int64, to targetKey: String, path: StorePath) async throws(StoreError) {
        if size > Int64(Configuration.maximumPartSize) {
            try await copyMultipart(from: sourceKey, size: size, to: targetKey, path: path)
            return
        }
        var call = Call(method: .PUT, key: targetKey)
        call.headers.append(("x-amz-copy-source", copySource(sourceKey)))
        let answer = try await send(call, path: path, timeout: Self.serverSideCopyTimeout)
        // A copy can fail after its 200 has been sent: the body is then an <Error>.
        guard answer.status == 200, S3XML.parseError(answer.body) == nil else {
            throw error(answer, method: "COPY", path: path)
        }
    }

    /// `x-amz-copy-source`: `/bucket/key`, URL-encoded.
    func copySource(_ key: String) -> String {
        "/" + SigV4Signer.uriEncode(configuration.bucket, encodeSlash: true) + SigV4Signer.encodePath(key)
    }
}
