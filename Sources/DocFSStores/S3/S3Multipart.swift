// S3Multipart: uploads of files of at least the part size, and copies of objects above 5 GiB.
// It owns the life of one multipart upload — CreateMultipartUpload, the parts (`concurrency` at
// a time, each read from the local file with pread, a transient failure retried twice), then
// CompleteMultipartUpload — and its abort: on any failure, cancellation included, the upload is
// aborted so that no parts are left behind on the server (where they would be billed and invisible).
// A crash cannot abort: S3Store+UploadLedger.swift records each upload so the next mount does.

import AsyncHTTPClient
import Crypto
import DocFSStore
import Foundation
import Logging
import NIOCore
import NIOHTTP1

extension S3Store {
    /// One part: its number (from 1) and its byte range in the source.
    struct Part: Sendable {
        var number: Int
        var range: Range<Int64>
    }

    /// The parts of `size` bytes at `partSize` each (enlarged when S3's 10,000-part limit needs it).
    static func parts(size: Int64, partSize: Int) -> [Part] {
        var partSize = Int64(partSize)
        if (size + partSize - 1) / partSize > 10_000 {
            let mebibyte: Int64 = 1024 * 1024
            partSize = ((size + 9_999) / 10_000 + mebibyte - 1) / mebibyte * mebibyte
        }
        var parts: [Part] = []
        var offset: Int64 = 0
        while offset < size || parts.isEmpty {
            let end = min(size, offset + partSize)
            parts.append(Part(number: parts.count + 1, range: offset..<end))
            offset = end
        }
        return parts
    }

    /// Uploads `file` to `path` in parts and returns the new ETag (`"…-N"`).
    func uploadMultipart(_ path: StorePath, file: LocalFileChunks, conditionHeaders: [(name: String, value: String)],
                         metadata: [(name: String, value: String)] = [], condition: WriteCondition) async throws(StoreError) -> ETag {
        let objectKey = key(path)
        return try await withMultipartUpload(objectKey, path: path, metadata: metadata) { (uploadId) throws(StoreError) -> ETag in
            let parts = Self.parts(size: file.size, partSize: configuration.partSize)
            logger.debug("multipart upload of \(path): \(parts.count) parts")
            let etags = PartETags()
            try await forEachConcurrently(parts) { (part) throws(StoreError) in
                let etag = try await self.uploadPart(part, key: objectKey, uploadId: uploadId, path: path) {
                    .stream(file.slice(part.range), length: .known(part.range.upperBound - part.range.lowerBound))
                }
                etags.set(part.number, etag)
            }
            return try await completeMultipartUpload(objectKey, uploadId: uploadId, parts: etags.sorted(), path: path,
                                                     conditionHeaders: conditionHeaders, condition: condition)
        }
    }

    /// Aborts an upload, even when the calling task is cancelled (an unstructured task does not
    /// inherit the cancellation). Failures are logged: the caller already has an error to report.
    /// Returns whether the upload is gone from the server.
    @discardableResult
    func abortInBackground(_ objectKey: String, uploadId: String, path: StorePath) async -> Bool {
        await Task {
            do {
                try await self.abortMultipartUpload(objectKey, uploadId: uploadId, path: path)
                self.logger.info("aborted the multipart upload of \(path)")
                return true
            } catch {
                self.logger.warning("could not abort the multipart upload of \(path): \(error)")
                return false
            }
        }.value
    }

    func createMultipartUpload(_ objectKey: String, path: StorePath, metadata: [(name: String, value: String)] = []) async throws(StoreError) -> String {
        var call = Call(method: .POST, key: objectKey, query: [("uploads", "")], headers: metadata)
        call.headers.append(("Content-Type", "application/octet-stream"))
        let answer = try await send(call, path: path, body: .bytes(ByteBuffer()))
        guard answer.status == 200 else { throw error(answer, method: "CREATE-MULTIPART", path: path) }
        return try S3XML.parseUploadId(answer.body)
    }

    /// One part, its body made anew (`body`) for each try.
    func uploadPart(_ part: Part, key objectKey: String, uploadId: String, path: StorePath,
                    body: () -> HTTPClientRequest.Body) async throws(StoreError) -> String {
        var attempt = 0
        while true {
            attempt += 1
            do throws(StoreError) {
                if let partHook {
                    do { try await partHook(part.number) } catch { throw HTTPTransport.storeError(error, method: "PART", path: path) }
                }
                let call = Call(method: .PUT, key: objectKey,
                                query: [("partNumber", String(part.number)), ("uploadId", uploadId)],
                                payloadHash: SigV4Signer.unsignedPayload)
                let answer = try await send(call, path: path, body: body(),
                                            timeout: transport.uploadTimeout(bytes: part.range.upperBound - part.range.lowerBound))
                guard answer.status == 200 else { throw error(answer, method: "PART \(part.number)", path: path) }
                guard let etag = answer.headers.first(name: "ETag") else {
                    throw .protocolError("PART \(part.number) of \(path): no ETag in the answer")
                }
                return etag
            } catch let failure where failure.isTransient && attempt < 3 && !Task.isCancelled {
                logger.info("part \(part.number) of \(path) failed (\(failure)); retrying")
                try? await Task.sleep(nanoseconds: UInt64(attempt) * 500_000_000)
            }
        }
    }

    func completeMultipartUpload(_ objectKey: String, uploadId: String, parts: [(Int, String)], path: StorePath,
                                         conditionHeaders: [(name: String, value: String)],
                                         condition: WriteCondition) async throws(StoreError) -> ETag {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for (number, etag) in parts {
            xml += "<Part><PartNumber>\(number)</PartNumber><ETag>\(XMLText.escaped(etag))</ETag></Part>"
        }
        xml += "</CompleteMultipartUpload>"
        let body = Data(xml.utf8)
        var call = Call(method: .POST, key: objectKey, query: [("uploadId", uploadId)], headers: conditionHeaders,
                        payloadHash: SigV4Signer.sha256Hex(body))
        call.headers.append(("Content-Type", "application/xml"))
        let answer = try await send(call, path: path, body: .bytes(ByteBuffer(bytes: body)), timeout: .minutes(15))
        switch answer.status {
        case 200:
            // The 200 comes before the work is done; a failure then arrives as an <Error> body.
            if let failure = S3XML.parseError(answer.body) {
                if failure.code == "PreconditionFailed" { throw Self.conditionError(condition, path: path) }
                throw Self.error(code: failure.code, status: 500, method: "COMPLETE-MULTIPART", path: path, logger: logger)
            }
        case 412, 409:
            throw Self.conditionError(condition, path: path)
        case 404 where condition != .always && S3XML.parseError(answer.body)?.code == "NoSuchKey":
            throw .versionMismatch(path)
        default:
            throw error(answer, method: "COMPLETE-MULTIPART", path: path)
        }
        guard let etag = S3XML.parseResultETag(answer.body) ?? answer.headers.first(name: "ETag") else {
            throw .protocolError("COMPLETE-MULTIPART \(path): no ETag in the answer")
        }
        return ETag.normalized(etag)
    }

    func abortMultipartUpload(_ objectKey: String, uploadId: String, path: StorePath) async throws(StoreError) {
        let call = Call(method: .DELETE, key: objectKey, query: [("uploadId", uploadId)])
        let answer = try await send(call, path: path)
        switch answer.status {
        case 200, 204, 404: return
        default: throw error(answer, method: "ABORT-MULTIPART", path: path)
        }
    }

    /// UploadPartCopy in parts of 1 GiB, for a copy of an object above CopyObject's 5 GiB.
    func copyMultipart(from sourceKey: String, size: Int64, to targetKey: String, path: StorePath) async throws(StoreError) {
        try await withMultipartUpload(targetKey, path: path) { (uploadId) throws(StoreError) in
            let parts = Self.parts(size: size, partSize: 1024 * 1024 * 1024)
            let etags = PartETags()
            try await forEachConcurrently(parts) { (part) throws(StoreError) in
                var call = Call(method: .PUT, key: targetKey, query: [("partNumber", String(part.number)), ("uploadId", uploadId)])
                call.headers.append(("x-amz-copy-source", self.copySource(sourceKey)))
                call.headers.append(("x-amz-copy-source-range", "bytes=\(part.range.lowerBound)-\(part.range.upperBound - 1)"))
                let answer = try await self.send(call, path: path, timeout: Self.serverSideCopyTimeout)
                guard answer.status == 200, S3XML.parseError(answer.body) == nil,
                      let etag = S3XML.parseResultETag(answer.body) else {
                    throw self.error(answer, method: "COPY-PART \(part.number)", path: path)
                }
                etags.set(part.number, etag)
            }
            _ = try await completeMultipartUpload(targetKey, uploadId: uploadId, parts: etags.sorted(), path: path,
                                                  conditionHeaders: [], condition: .always)
        }
    }
}

/// The ETags of the finished parts, filled from concurrent tasks.
/// `@unchecked Sendable`: every access to `etags` is under `lock`.
final class PartETags: @unchecked Sendable {
    private let lock = NSLock()
    private var etags: [Int: String] = [:]

    func set(_ number: Int, _ etag: String) {
        lock.lock()
        defer { lock.unlock() }
        etags[number] = etag
    }

    func sorted() -> [(Int, String)] {
        lock.lock()
        defer { lock.unlock() }
        return etags.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
    }
}
