// S3Store+StreamedUpload: a new file uploaded while it is written (`GrowingContent`, see the
// core's `StreamedUpload`). S3 takes no body of unknown length, but a multipart upload is one
// made part by part: each part goes once the writer has passed its end, `concurrency` at a
// time, and the close completes it with the last part (`If-None-Match: *` for a new file).
// Nothing shows under the key before CompleteMultipartUpload; a stream the core cancels, or
// one that fails, is aborted (a killed daemon's by the next mount, S3Store+UploadLedger.swift).

import AsyncHTTPClient
import DocFSStore
import Foundation
import NIOCore

extension S3Store {
    /// Mode and owners go with the upload as metadata (as s3fs keeps them), set when it begins;
    /// the time is the object's own (`LastModified`).
    public func write(_ path: StorePath, growing content: any GrowingContent, condition: WriteCondition,
                      attributes: StoreAttributes) async throws(StoreError) -> RemoteEntry {
        guard !path.isRoot else { throw .isADirectory(path) }
        knownFolders.used(path)
        var conditionHeaders: [(name: String, value: String)] = []
        switch condition {
        case .always: break
        case .mustNotExist: conditionHeaders.append(("If-None-Match", "*"))
        case .ifMatch: throw .notSupported("a streamed upload over a version")
        }
        // Asked while the upload begins (a round trip less) and answered before it completes (S3
        // checks only that no object is there): a wrong answer cancels it, and its parts go with
        // the abort.
        let answered = Task { () async -> Result<Void, StoreError> in
            await Self.catching { () throws(StoreError) in
                async let isDirectory = Self.catching { () throws(StoreError) in try await self.directoryExists(path).exists }
                async let parentExists = Self.catching { () throws(StoreError) in try await self.parentExists(of: path) }
                async let current = Self.catching { () throws(StoreError) -> RemoteEntry? in
                    condition == .mustNotExist ? try await self.headObject(path) : nil
                }
                if try await isDirectory.get() { throw .isADirectory(path) }
                if try await !parentExists.get() { throw .notFound(path.parent ?? .root) }
                if try await current.get() != nil { throw .alreadyExists(path) }
            }
        }
        let carried = StoreAttributes(mode: attributes.mode, owner: attributes.owner, group: attributes.group)
        let objectKey = key(path)
        let headers = conditionHeaders
        let (etag, size) = try await asking({ () throws(StoreError) in try await answered.value.get() }, alongside: {
            () throws(StoreError) -> (ETag, Int64) in
            try await self.withMultipartUpload(objectKey, path: path, metadata: S3Metadata.headers(for: carried)) {
                (uploadId) throws(StoreError) -> (ETag, Int64) in
                let etags = PartETags()
                let size = try await self.uploadParts(of: content, key: objectKey, uploadId: uploadId, path: path, etags: etags)
                try await answered.value.get()
                let etag = try await self.completeMultipartUpload(objectKey, uploadId: uploadId, parts: etags.sorted(), path: path,
                                                                  conditionHeaders: headers, condition: condition)
                return (etag, size)
            }
        })
        return RemoteEntry(path: path, kind: .file, size: size, modified: Date().timeIntervalSince1970, etag: etag,
                           mode: carried.mode, owner: carried.owner, group: carried.group)
    }

    /// Sends `content` in parts of `configuration.partSize` as the writer gets past each; returns
    /// its length once it ended. Throws when the core cancels it, or a part fails.
    private func uploadParts(of content: any GrowingContent, key objectKey: String, uploadId: String, path: StorePath,
                             etags: PartETags) async throws(StoreError) -> Int64 {
        let partSize = Int64(configuration.partSize)
        let concurrency = configuration.concurrency
        do {
            return try await withThrowingTaskGroup(of: Void.self) { group in
                var offset: Int64 = 0
                var number = 1
                var running = 0
                while true {
                    // A whole part, or the rest once the content ended.
                    var end: Int64
                    var last = false
                    switch await content.next(after: offset + partSize - 1) {
                    case .written: end = offset + partSize
                    case .cancelled: throw StoreError.timedOut("the upload was cancelled")
                    case .end:
                        last = true
                        switch await content.next(after: offset) {
                        case .written(let upTo): end = upTo
                        case .end: end = offset
                        case .cancelled: throw StoreError.timedOut("the upload was cancelled")
                        }
                    }
                    guard number <= 10_000 else { throw StoreError.notSupported("a streamed upload of more than 10,000 parts") }
                    // S3 wants at least one part; only the last may be empty or short.
                    if end > offset || number == 1 {
                        if running == concurrency {
                            _ = try await group.next()
                            running -= 1
                        }
                        let part = Part(number: number, range: offset..<end)
                        group.addTask {
                            let etag = try await self.uploadPart(part, key: objectKey, uploadId: uploadId, path: path) {
                                .stream(GrowingSlice(content: content, range: part.range), length: .known(part.range.upperBound - part.range.lowerBound))
                            }
                            etags.set(part.number, etag)
                        }
                        running += 1
                        number += 1
                    }
                    offset = end
                    if last { break }
                }
                try await group.waitForAll()
                return offset
            }
        } catch {
            throw HTTPTransport.storeError(error, method: "PART", path: path)
        }
    }
}

/// Bytes of growing content that are written already, read in chunks of 256 KiB.
struct GrowingSlice: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let content: any GrowingContent
    let range: Range<Int64>

    struct AsyncIterator: AsyncIteratorProtocol {
        let content: any GrowingContent
        let end: Int64
        var offset: Int64

        mutating func next() async throws -> ByteBuffer? {
            guard offset < end else { return nil }
            let buffer = try content.buffer(at: offset, count: Int(Swift.min(Int64(256 << 10), end - offset)))
            offset += Int64(buffer.readableBytes)
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(content: content, end: range.upperBound, offset: range.lowerBound)
    }
}
