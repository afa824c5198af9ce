// S3Store+Writing: content and attributes going up. A file below the part size is one
// PutObject, a larger one a multipart upload (S3Multipart.swift); mode and times travel with
// the content as object metadata, and changing them alone copies the object onto itself.
//
// Conditional writes: `If-None-Match: *` and `If-Match` go to the server (AWS and moto honour
// them on PutObject and CompleteMultipartUpload), and the condition is also checked with a HEAD
// first, because some S3-compatible servers ignore them and because a multipart upload should
// not send 100 MiB only to be refused at the end. With a server that ignores the headers, the
// window between that HEAD and the write is the only unprotected one.

import DocFSStore
import Foundation

extension S3Store {
    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry {
        try await write(path, fromLocalFile: localFile, condition: condition, attributes: StoreAttributes())
    }

    /// Mode and times travel with the content as object metadata: no second request.
    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .isADirectory(path) }
        let file = try LocalFileChunks(path: localFile, meter: uploadMeter)
        let metadata = S3Metadata.headers(for: attributes)
        // A new name in a folder made here a moment ago is free: nothing to ask first.
        if condition == .mustNotExist, knownFolders.isFresh(path) {
            let headers = [(name: "If-None-Match", value: "*")]
            let etag = file.size < Int64(configuration.partSize)
                ? try await putObject(path, file: file, conditionHeaders: headers, metadata: metadata, condition: condition)
                : try await uploadMultipart(path, file: file, conditionHeaders: headers, metadata: metadata, condition: condition)
            return RemoteEntry(path: path, kind: .file, size: file.size, modified: attributes.modified?.seconds ?? Date().timeIntervalSince1970,
                               etag: etag, mode: attributes.mode, owner: attributes.owner, group: attributes.group)
        }
        // Any other write uses the name too: a folder made at it a moment later must ask first.
        knownFolders.used(path)

        // What S3 does not check for us: a directory at the path, a missing parent; and the
        // condition, for servers that ignore conditional headers (see the top of the file).
        async let isDirectory = Self.catching { () throws(StoreError) in try await self.directoryExists(path).exists }
        async let parentExists = Self.catching { () throws(StoreError) in try await self.parentExists(of: path) }
        async let current = Self.catching { () throws(StoreError) -> RemoteEntry? in
            condition == .always ? nil : try await self.headObject(path)
        }
        if try await isDirectory.get() { throw .isADirectory(path) }
        if try await !parentExists.get() { throw .notFound(path.parent ?? .root) }
        let existing = try await current.get()
        var conditionHeaders: [(name: String, value: String)] = []
        switch condition {
        case .always: break
        case .mustNotExist:
            if existing != nil { throw .alreadyExists(path) }
            conditionHeaders.append(("If-None-Match", "*"))
        case .ifMatch(let etag):
            guard let existing, let currentETag = existing.etag, Self.sameVersion(currentETag, etag) else { throw .versionMismatch(path) }
            conditionHeaders.append(("If-Match", etag.value))
        }

        let etag: ETag
        if file.size < Int64(configuration.partSize) {
            etag = try await putObject(path, file: file, conditionHeaders: conditionHeaders, metadata: metadata, condition: condition)
        } else {
            etag = try await uploadMultipart(path, file: file, conditionHeaders: conditionHeaders, metadata: metadata, condition: condition)
        }
        return RemoteEntry(path: path, kind: .file, size: file.size, modified: attributes.modified?.seconds ?? Date().timeIntervalSince1970,
                           etag: etag, mode: attributes.mode, owner: attributes.owner, group: attributes.group)
    }

    private func putObject(_ path: StorePath, file: LocalFileChunks, conditionHeaders: [(name: String, value: String)],
                           metadata: [(name: String, value: String)], condition: WriteCondition) async throws(StoreError) -> ETag {
        var call = Call(method: .PUT, key: key(path), headers: conditionHeaders + metadata, payloadHash: SigV4Signer.unsignedPayload)
        call.headers.append(("Content-Type", "application/octet-stream"))
        let answer = try await send(call, path: path, body: .stream(file, length: .known(file.size)), timeout: transport.uploadTimeout(bytes: file.size))
        switch answer.status {
        case 200, 201, 204: break
        case 412, 409: throw Self.conditionError(condition, path: path)
        case 404 where condition != .always && S3XML.parseError(answer.body)?.code == "NoSuchKey":
            throw .versionMismatch(path)  // If-Match on a key that is gone
        default: throw error(answer, method: "PUT", path: path)
        }
        guard let etag = answer.headers.first(name: "ETag") else { throw .protocolError("PUT \(path): no ETag in the answer") }
        return ETag.normalized(etag)
    }

    /// Mode, owner and mtime as object metadata (s3fs's keys). S3 cannot change an object's metadata in
    /// place: the object is copied onto itself with the metadata replaced (its other user
    /// metadata kept). Directories without a marker object, and objects above CopyObject's 5 GiB,
    /// keep their attributes in docfs's catalog only.
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool {
        try await copyingWithAttributes(path, attributes, onVersion: nil) != .notKept
    }

    /// The copy onto itself only from `version` (`x-amz-copy-source-if-match`), and the version it
    /// made from the copy's answer: a stat after it could see another client's.
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag) async throws(StoreError) -> AttributesSet {
        try await copyingWithAttributes(path, attributes, onVersion: version)
    }

    private func copyingWithAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag?) async throws(StoreError) -> AttributesSet {
        guard !attributes.isEmpty, !path.isRoot else { return .notKept }
        let head = try await send(Call(method: .HEAD, key: key(path)), path: path)
        guard head.status == 200 else {
            if head.status == 404 { if version != nil { throw .notFound(path) }; return .notKept }
            throw error(head, method: "HEAD", path: path)
        }
        if let version, head.headers.first(name: "ETag").map(ETag.normalized) != version { throw .versionMismatch(path) }
        let size = head.headers.first(name: "Content-Length").flatMap { Int64($0) } ?? 0
        guard size <= Int64(Configuration.maximumPartSize) else { return .notKept }
        var metadata = S3Metadata.userMetadata(in: head.headers)
        // A link stays a link (s3fs's mode carries the type).
        let replaced = S3Metadata.headers(for: attributes, type: S3Metadata.type(in: head.headers) ?? .regular)
        metadata.removeAll { old in replaced.contains { $0.name == old.name } }
        var call = Call(method: .PUT, key: key(path))
        call.headers.append(("x-amz-copy-source", copySource(key(path))))
        if let version { call.headers.append(("x-amz-copy-source-if-match", version.value)) }
        call.headers.append(("x-amz-metadata-directive", "REPLACE"))
        call.headers.append(("Content-Type", head.headers.first(name: "Content-Type") ?? "application/octet-stream"))
        call.headers += metadata + replaced
        let answer = try await send(call, path: path, timeout: Self.serverSideCopyTimeout)
        if answer.status == 412, version != nil { throw .versionMismatch(path) }
        guard answer.status == 200, S3XML.parseError(answer.body) == nil else {
            throw error(answer, method: "COPY", path: path)
        }
        return .kept(newVersion: S3XML.parseResultETag(answer.body).map(ETag.normalized))
    }
}
