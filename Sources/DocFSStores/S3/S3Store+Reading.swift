// S3Store+Reading: content, whole or a byte range, streamed from one GET into a sink, and
// only from the version the caller asks for (If-Match sent, and checked again on the answer
// for servers that ignore it).

import DocFSStore
import Foundation

extension S3Store {
    @discardableResult
    public func read(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .isADirectory(path) }
        if let range, range.isEmpty || range.lowerBound < 0 {
            let entry = try await stat(path)
            if entry.kind == .directory { throw .isADirectory(path) }
            if let ifMatch, let etag = entry.etag, !Self.sameVersion(etag, ifMatch) { throw .versionMismatch(path) }
            return entry
        }
        var call = Call(method: .GET, key: key(path))
        if let range { call.headers.append(("Range", "bytes=\(range.lowerBound)-\(range.upperBound - 1)")) }
        if let ifMatch { call.headers.append(("If-Match", ifMatch.value)) }
        let response = try await start(call, path: path, timeout: transport.metadataTimeout)
        let status = Int(response.status.code)
        switch status {
        case 200, 206: break
        case 416:
            // The range starts at or after the end: nothing to deliver.
            await HTTPTransport.discard(response)
            let entry = try await stat(path)
            if let ifMatch, let etag = entry.etag, !Self.sameVersion(etag, ifMatch) { throw .versionMismatch(path) }
            return entry
        default:
            let answer = await HTTPTransport.Answer(consuming: response)
            let mapped = error(answer, method: "GET", path: path)
            if case .notFound = mapped, S3XML.parseError(answer.body)?.code != "NoSuchBucket",
               try await directoryExists(path).exists {
                throw .isADirectory(path)
            }
            throw mapped
        }
        let headerETag = response.headers.first(name: "ETag").map(ETag.normalized)
        if let ifMatch, let headerETag, !Self.sameVersion(headerETag, ifMatch) {
            // The server ignored If-Match; we do not.
            await HTTPTransport.discard(response)
            throw .versionMismatch(path)
        }
        let modified = response.headers.first(name: "Last-Modified").flatMap(HTTPDate.parse) ?? 0
        let size = try await RangedBody.receive(response, range: range, path: path, into: sink, timeouts: transport.timeouts) { () async throws(StoreError) in
            try await self.stat(path)
        }
        let ownTime = S3Metadata.modified(in: response.headers)
        return RemoteEntry(path: path, kind: .file, size: size, modified: ownTime ?? modified,
                           etag: headerETag, mode: S3Metadata.mode(in: response.headers),
                           owner: S3Metadata.owner(in: response.headers), group: S3Metadata.group(in: response.headers),
                           carriesOwnTime: ownTime != nil)
    }
}
