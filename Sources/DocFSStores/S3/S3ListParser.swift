// S3ListParser: the XML documents S3 answers with — ListObjectsV2 results, error bodies,
// multipart upload results, copy results — read with XMLPushParser into plain values (the
// same tokenizer as WebDAV listings: no DTD, no entity expansion, a key that is not UTF-8
// costs that key only, not its page).
// It owns nothing else: what a key means for a directory listing is S3Store's business.
//
// Elements are matched by local name, so a namespace (or its absence, as some S3-compatible
// servers send) does not matter. Dates are ISO 8601 (`2009-10-12T17:50:30.000Z`).

import DocFSStore
import Foundation

/// One `<Contents>` of a listing.
struct S3Object: Sendable, Equatable {
    var key: String
    var size: Int64
    var lastModified: Double?
    var etag: String?
}

/// One ListObjectsV2 page.
struct S3ListResult: Sendable, Equatable {
    var objects: [S3Object] = []
    var commonPrefixes: [String] = []
    var isTruncated = false
    var nextContinuationToken: String?
    /// The server honoured `encoding-type=url`: keys and prefixes are URL-encoded.
    var urlEncoded = false
    /// Keys and prefixes left out because their text is not UTF-8 (a server that ignored
    /// `encoding-type=url` and sent the raw bytes of a key).
    var undecodableKeys = 0
}

/// An `<Error>` body.
struct S3ErrorBody: Sendable, Equatable {
    var code: String
    var message: String?
}

/// An in-progress multipart upload, from ListMultipartUploads.
struct S3Upload: Sendable, Equatable {
    var key: String
    var uploadId: String
}

enum S3XML {
    /// A generic parse: every element's text by its path of local names (`ListBucketResult/Contents/Key`),
    /// with the repeated groups (`Contents`, `CommonPrefixes`, `Upload`) kept apart. Text that is
    /// not UTF-8 is left out of `fields` and named in `undecodable` instead, so one bad key
    /// does not take the page with it.
    private struct Collector: XMLPushHandler {
        /// Elements whose children form one record.
        let groups: Set<String>
        var path: [String] = []
        var text: [UInt8] = []
        var root: String?
        /// Fields of the top level (outside any group), by local name.
        var top: [String: String] = [:]
        /// Completed records, each with its group's name.
        var records: [(group: String, fields: [String: String], undecodable: Set<String>)] = []
        private var current: (group: String, fields: [String: String], undecodable: Set<String>)?

        init(groups: Set<String>) { self.groups = groups }

        /// S3's answers use one namespace: the local name says it all.
        func element(named name: XMLName) -> String { name.local }

        mutating func startElement(_ name: String, attributes: [(name: String, value: [UInt8])]) throws(StoreError) {
            if root == nil { root = name }
            path.append(name)
            text.removeAll(keepingCapacity: true)
            if current == nil, groups.contains(name), path.count == 2 { current = (name, [:], []) }
        }

        mutating func characters(_ bytes: ArraySlice<UInt8>) throws(StoreError) { text.append(contentsOf: bytes) }

        mutating func endElement(_ name: String, at offset: Int) throws(StoreError) {
            if path.count == 2, let record = current, record.group == name {
                records.append(record)
                current = nil
            } else if path.count == 3, current != nil {
                if let value = String(validating: text, as: UTF8.self) {
                    current?.fields[name] = value
                } else {
                    current?.undecodable.insert(name)
                }
            } else if path.count == 2 {
                top[name] = String(decoding: text, as: UTF8.self)
            }
            path.removeLast()
            text.removeAll(keepingCapacity: true)
        }
    }

    private static func collect(_ data: Data, groups: Set<String>) throws(StoreError) -> Collector {
        var parser = XMLPushParser(handler: Collector(groups: groups), maximumDepth: 64)
        do {
            try parser.feed(data)
            try parser.finish()
        } catch {
            throw .protocolError("S3 answered XML that does not parse (\(error))")
        }
        guard parser.handler.root != nil else { throw .protocolError("S3 answered XML that does not parse") }
        return parser.handler
    }

    static func parseList(_ data: Data) throws(StoreError) -> S3ListResult {
        let collected = try collect(data, groups: ["Contents", "CommonPrefixes"])
        guard collected.root == "ListBucketResult" else {
            throw .protocolError("S3 answered <\(collected.root ?? "?")> to a listing")
        }
        var result = S3ListResult()
        for record in collected.records {
            switch record.group {
            case "Contents":
                guard let key = record.fields["Key"] else {
                    if record.undecodable.contains("Key") { result.undecodableKeys += 1 }
                    continue
                }
                result.objects.append(S3Object(key: key,
                                               size: record.fields["Size"].flatMap { Int64($0) } ?? 0,
                                               lastModified: record.fields["LastModified"].flatMap(parseISO8601),
                                               etag: record.fields["ETag"]))
            case "CommonPrefixes":
                if let prefix = record.fields["Prefix"] {
                    result.commonPrefixes.append(prefix)
                } else if record.undecodable.contains("Prefix") {
                    result.undecodableKeys += 1
                }
            default: break
            }
        }
        result.isTruncated = collected.top["IsTruncated"]?.lowercased() == "true"
        result.urlEncoded = collected.top["EncodingType"]?.lowercased() == "url"
        result.nextContinuationToken = collected.top["NextContinuationToken"].flatMap { $0.isEmpty ? nil : $0 }
        return result
    }

    /// The `<Error>` of a body, or nil when the body is not one.
    static func parseError(_ data: Data) -> S3ErrorBody? {
        guard !data.isEmpty, let collected = try? collect(data, groups: []), collected.root == "Error",
              let code = collected.top["Code"], !code.isEmpty else { return nil }
        return S3ErrorBody(code: code, message: collected.top["Message"])
    }

    /// The `UploadId` of an InitiateMultipartUploadResult.
    static func parseUploadId(_ data: Data) throws(StoreError) -> String {
        let collected = try collect(data, groups: [])
        guard collected.root == "InitiateMultipartUploadResult", let id = collected.top["UploadId"], !id.isEmpty else {
            throw .protocolError("CreateMultipartUpload answered without an UploadId")
        }
        return id
    }

    /// The `ETag` of a CompleteMultipartUploadResult or CopyObjectResult (both may also be an
    /// `<Error>` under a 200 status: the caller checks `parseError` first).
    static func parseResultETag(_ data: Data) -> String? {
        guard let collected = try? collect(data, groups: []) else { return nil }
        return collected.top["ETag"]
    }

    static func parseUploads(_ data: Data) throws(StoreError) -> [S3Upload] {
        let collected = try collect(data, groups: ["Upload"])
        return collected.records.compactMap { record in
            guard let key = record.fields["Key"], let id = record.fields["UploadId"] else { return nil }
            return S3Upload(key: key, uploadId: id)
        }
    }

    /// `2009-10-12T17:50:30.000Z` (fraction and zone optional; `+hh:mm` offsets understood).
    static func parseISO8601(_ string: String) -> Double? {
        let s = Array(ASCIIWhitespace.trimmed(string.utf8))  // once per entry of an S3 listing
        func number(_ from: Int, _ count: Int) -> Int? {
            guard from + count <= s.count else { return nil }
            var value = 0
            for byte in s[from..<from + count] {
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              (1...12).contains(month), (1...31).contains(day) else { return nil }
        var index = 19
        var fraction = 0.0
        if index < s.count, s[index] == UInt8(ascii: ".") {
            index += 1
            var scale = 0.1
            while index < s.count, s[index] >= 48, s[index] <= 57 {
                fraction += Double(s[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        var offset = 0
        if index < s.count, s[index] == UInt8(ascii: "+") || s[index] == UInt8(ascii: "-") {
            let sign = s[index] == UInt8(ascii: "-") ? -1 : 1
            if let h = number(index + 1, 2), let m = number(index + 4, 2) { offset = sign * (h * 3600 + m * 60) }
        }
        // Days from civil (Howard Hinnant's algorithm).
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return Double(days * 86_400 + hour * 3600 + minute * 60 + second - offset) + fraction
    }
}
