// RangedBody: the body of a GET (200 or 206, with or without a Range) streamed into a sink.
// Shared by the WebDAV and S3 stores, which both speak plain HTTP for content. It checks that
// the answer fits the request (a 206 must start where we asked; a 200 to a range request
// brings the whole file, of which only the range is kept) and that the body is complete:
// a connection that ends early is an error, never a short file. A 206 whose Content-Length
// disagrees with its Content-Range is refused; an answer without any length is bounded by the
// range asked, and the store compares it with the entry's size afterwards (`knownLength`).
// The body is bounded in time by the transport's transfer deadline (HTTPTimeouts): a body that
// trickles fails with `.timedOut`.

import AsyncHTTPClient
import DocFSStore
import NIOCore

enum RangedBody {
    /// Where the delivered bytes ended, and the file's total size when the answer told it.
    struct Delivered: Sendable {
        var end: Int64
        var totalSize: Int64?
        /// Whether the answer said how long its body was (Content-Length or Content-Range), so
        /// that a body cut short was detected; when false, the store checks `end` against the
        /// entry's size (`checkUnframed`).
        var knownLength: Bool
    }

    static func deliver(_ response: HTTPClientResponse, range: ByteRange?, path: StorePath,
                        into sink: any ContentSink, timeouts: HTTPTimeouts) async throws(StoreError) -> Delivered {
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
            if let contentLength, contentLength != contentRange.last - contentRange.first + 1 {
                await HTTPTransport.discard(response)
                throw .protocolError("GET \(path): Content-Length \(contentLength) does not match Content-Range \(header)")
            }
            if let total = contentRange.total, contentRange.last >= total {
                await HTTPTransport.discard(response)
                throw .protocolError("GET \(path): Content-Range \(header) ends past the file's size")
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

        let start = bodyStart
        let end = expectedEnd ?? wanted.upperBound
        let kept = wanted
        let position: Int64
        do {
            position = try await HTTPTransport.withTransferDeadline(timeouts, what: "GET \(path)") { progress in
                var position = start
                for try await buffer in response.body {
                    progress.add(buffer.readableBytes)
                    let chunkStart = position
                    let chunkEnd = position + Int64(buffer.readableBytes)
                    position = chunkEnd
                    let from = max(chunkStart, kept.lowerBound)
                    let to = min(chunkEnd, kept.upperBound, end)
                    if from < to {
                        try buffer.withUnsafeReadableBytes { (bytes) throws(StoreError) in
                            let slice = UnsafeRawBufferPointer(rebasing: bytes[Int(from - chunkStart)..<Int(to - chunkStart)])
                            try sink.write(slice, at: from)
                        }
                    }
                    if position >= end { break }
                }
                return position
            }
        } catch {
            throw HTTPTransport.storeError(error, method: "GET", path: path)
        }
        if let expectedEnd, position < expectedEnd {
            throw .unreachable("GET \(path): the connection ended after \(position - bodyStart) of \(expectedEnd - bodyStart) bytes")
        }
        return Delivered(end: min(position, end), totalSize: totalSize, knownLength: expectedEnd != nil)
    }

    /// `deliver`, for a store's read: an answer that does not say how long it is (a 200
    /// without Content-Length) is bounded by the entry's size from `stat` (one byte more shows
    /// a body longer than the file) and checked against it. Returns the file's size.
    static func receive(_ response: HTTPClientResponse, range: ByteRange?, path: StorePath, into sink: any ContentSink,
                        timeouts: HTTPTimeouts, stat: () async throws(StoreError) -> RemoteEntry) async throws(StoreError) -> Int64 {
        var limit = range
        var statted: RemoteEntry?
        if range == nil, response.status.code == 200, response.headers.first(name: "Content-Length") == nil {
            do {
                let entry = try await stat()
                statted = entry
                limit = 0..<(entry.size + 1)
            } catch {
                await HTTPTransport.discard(response)
                throw error
            }
        }
        let delivered = try await deliver(response, range: limit, path: path, into: sink, timeouts: timeouts)
        if delivered.knownLength {
            if let total = delivered.totalSize { return total }
            if range == nil { return delivered.end }
            return try await stat().size
        }
        let entry: RemoteEntry
        if let statted { entry = statted } else { entry = try await stat() }
        try checkUnframed(delivered, range: range, entry: entry, path: path)
        return entry.size
    }

    /// For an answer that did not say how long it was: the body must have brought exactly what
    /// `entry` (a stat made after it) says there is, within `range`; else the body was cut short
    /// (transient) or is longer than the file (refused as corrupt).
    static func checkUnframed(_ delivered: Delivered, range: ByteRange?, entry: RemoteEntry, path: StorePath) throws(StoreError) {
        let expected = min(range?.upperBound ?? entry.size, entry.size)
        if delivered.end < expected {
            throw .unreachable("GET \(path): an answer without a length ended after \(delivered.end) of \(expected) bytes")
        }
        if range == nil, delivered.end > expected {
            throw .protocolError("GET \(path): \(delivered.end) bytes arrived for a file of \(expected)")
        }
    }
}
