import Foundation

/// Entry points for libFuzzer (`Sources/DocFSFuzz`, `make fuzz`, issue 10 item 10): each runs
/// one parser of what a server wrote over arbitrary bytes, as docfs runs it, and keeps
/// nothing. A crash or a hang here is a bug; an error is an answer. `make test` runs the same
/// parsers under a seeded generator (ListingParsersFuzzTests).
public enum ParserFuzzing {
    /// The WebDAV multistatus stream, fed in chunks of a size the input's first byte picks
    /// (streaming is where a token cut between two chunks must survive).
    public static func multistatus(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let chunk = 1 + Int(first) * 61
        var stream = MultistatusStream(limits: .init(maximumEntries: 100_000, maximumEntryBytes: 1 << 20))
        var rest = bytes.dropFirst()
        do {
            while !rest.isEmpty {
                _ = try stream.feed(rest.prefix(chunk))
                rest = rest.dropFirst(chunk)
            }
            _ = try stream.finish()
        } catch {
            return
        }
    }

    /// An S3 ListObjectsV2 page, an error body and a ListMultipartUploads answer.
    public static func s3Answers(_ bytes: [UInt8]) {
        let data = Data(bytes)
        _ = try? S3XML.parseList(data)
        _ = S3XML.parseError(data)
        _ = try? S3XML.parseUploads(data)
        _ = S3XML.parseISO8601(String(decoding: bytes, as: UTF8.self))
    }

    /// An HTTP date (Last-Modified, getlastmodified, Retry-After).
    public static func httpDate(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        _ = HTTPDate.parse(text)
        _ = RetryAfter.parse(text, now: 1_800_000_000)
    }
}
