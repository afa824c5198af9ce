// RangedBody: the body of a GET (200 or 206, with or without a Range) streamed into a sink.
// Shared by the WebDAV and S3 stores, which both speak plain HTTP for content. It checks that
// the answer fits the request (a 206 must start where we asked; a 200 to a range request
// brings the whole file, of which only the range is kept) and that the body is complete:
// a connection that ends early is an error, never a short file.

import AsyncHTTPClient
import DocFSStore
import NIOCore

enum RangedBody {
    /// Where the delivered bytes ended, and the file's total size when the answer told it.
    struct Delivered {
        var end: Int64
        var totalSize: Int64?
    }

    static func deliver(_ response: HTTPClientResponse, range: ByteRange?, path: StorePath,
                        into sink: any ContentSink) async throws(StoreError) -> Delivered {
        let contentLength = response.headers.first(name: "Content-Length").flatMap { Int64($0) }
        // Where the body starts in the file, which part of it we want, and the file's size.
        var bodyStart: Int64 = 0
        var wanted: Range<Int64> = 0..<Int64.max
        var expectedEnd: Int64?  // the offset the body must reach, when known
        var totalSize: Int64?
        if response.status.code == 206 {
            guard let range else {
                await HTTPTransport.discard(response)
                throw .protocolError("GET \(path): 206 to a request without Range")
            }
            guard let header = response.headers.first(name: "Content-Range"), let contentRange = ContentRange(header) else {
                await HTTPTransport.discard(response)
                throw .protocolError("GET \(path): 206 without a usable Content-Range")
            }
            guard contentRange.first == range.lowerBound else {
                await HTTPTransport.discard(response)
                throw .protocolError("GET \(path): asked bytes from \(range.lowerBound), got \(contentRange.first)")
            }
            bodyStart = contentRange.first
            wanted = range
            expectedEnd = min(contentRange.last + 1, range.upperBound)
            totalSize = contentRange.total
        } else {
            totalSize = contentLength
            if let range {
                // A 200 to a range request: the whole content comes; keep only the range.
                wanted = range
                expectedEnd = contentLength.map { min($0, range.upperBound) }
            } else {
                expectedEnd = contentLength
            }
        }

        var position = bodyStart
        let end = expectedEnd ?? wanted.upperBound
        do {
            for try await buffer in response.body {
                let chunkStart = position
                let chunkEnd = position + Int64(buffer.readableBytes)
                position = chunkEnd
                let from = max(chunkStart, wanted.lowerBound)
                let to = min(chunkEnd, wanted.upperBound, end)
                if from < to {
                    try buffer.withUnsafeReadableBytes { (bytes) throws(StoreError) in
                        let slice = UnsafeRawBufferPointer(rebasing: bytes[Int(from - chunkStart)..<Int(to - chunkStart)])
                        try sink.write(slice, at: from)
                    }
                }
                if position >= end { break }
            }
        } catch {
            throw HTTPTransport.storeError(error, method: "GET", path: path)
        }
        if let expectedEnd, position < expectedEnd {
            throw .unreachable("GET \(path): the connection ended after \(position - bodyStart) of \(expectedEnd - bodyStart) bytes")
        }
        return Delivered(end: position, totalSize: totalSize)
    }
}
