// WebDAVMultistatus: what a WebDAV server says in a 207 Multi-Status answer to PROPFIND, and the
// helpers that turn it into store entries: the multistatus grammar, read as the body streams
// (XML tokens come from XMLPushParser.swift; percent-encoding lives in PercentEncoding.swift,
// HTTP dates in HTTPDate.swift). Nothing here does I/O, so it is tested on fixed samples and
// on generated ones (the fuzz tests).

import Foundation
import DocFSStore

/// One `<D:response>` of a multistatus body.
struct WebDAVResponse: Sendable, Equatable {
    /// The href as the server sent it (absolute URL or absolute path, encoded its way).
    var href: String
    /// Properties found in `propstat` blocks whose status is 2xx (nil when absent).
    var isCollection: Bool
    var contentLength: Int64?
    var lastModified: String?
    var etag: String?
    /// A response-level `<D:status>` (set for errors such as 404 on one member), as its code.
    var status: Int?
    /// docfs's dead properties (WebDAVDeadProperties.swift), where the server keeps them.
    var posix = PosixProperties()
    /// The status of each `propstat` block, in order (a PROPPATCH answer says per property
    /// whether it was kept).
    var propstatStatuses: [Int] = []
    /// Nextcloud's / ownCloud's `has-preview` (`true`): the server makes previews of this file.
    var hasPreview = false
    /// `hasPreview` was said in Nextcloud's namespace (whose preview endpoint differs from ownCloud's).
    var previewFromNextcloud = false
    /// The server answered `has-preview` (true or false): it makes previews of some files.
    var answersPreview = false
    /// The tokens of the locks `lockdiscovery` names (asked only under docfs's own lock).
    var lockTokens: [String] = []

    /// A name locked before anything was written to it (a LOCK of an unmapped URL), on a
    /// server that keeps such names as RFC 2518's lock-null resources (Apache): listed, but with
    /// no length, time or version, and no content. Not a file yet; the lock's PUT makes it one.
    var isLockNull: Bool {
        !isCollection && status == nil && contentLength == nil && lastModified == nil && etag == nil
    }

    init(href: String, isCollection: Bool = false, contentLength: Int64? = nil, lastModified: String? = nil,
                etag: String? = nil, status: Int? = nil) {
        self.href = href
        self.isCollection = isCollection
        self.contentLength = contentLength
        self.lastModified = lastModified
        self.etag = etag
        self.status = status
    }
}

enum WebDAVMultistatus {
    /// Parses a whole multistatus body (a Depth 0 PROPFIND, a PROPPATCH answer). Throws
    /// `.protocolError` on XML that is not well-formed or not a multistatus.
    static func parse(_ data: Data) throws(StoreError) -> [WebDAVResponse] {
        var stream = MultistatusStream(limits: .unlimited)
        var responses = try stream.feed(data)
        responses += try stream.finish()
        return responses
    }
}

/// A multistatus body read as it streams: fed chunks, it hands back each `<D:response>` as
/// soon as its end tag is read, and keeps nothing of the responses it handed back.
///
/// Bounded by entries, not by the body's size: a listing may be any length, but it may not
/// have more than `maximumEntries` responses, and no response (nor what stands between two)
/// may take more than `maximumEntryBytes`. A body that never ends is so cut: either it keeps
/// sending responses, or it stops completing them.
struct MultistatusStream {
    struct Limits: Sendable, Equatable {
        var maximumEntries: Int
        var maximumEntryBytes: Int
        static let unlimited = Limits(maximumEntries: .max, maximumEntryBytes: .max)
    }

    let limits: Limits
    private var xml: XMLPushParser<MultistatusHandler>

    init(limits: Limits) {
        self.limits = limits
        self.xml = XMLPushParser(handler: MultistatusHandler(maximumEntries: limits.maximumEntries),
                                 maximumTokenBytes: min(limits.maximumEntryBytes, 16 << 20))
    }

    /// Reads the next chunk; returns the responses it completed.
    mutating func feed<Bytes: Collection>(_ bytes: Bytes) throws(StoreError) -> [WebDAVResponse] where Bytes.Element == UInt8 {
        var rest = bytes[...]
        // In slices, so an entry over the bound is caught within a slice of it.
        while !rest.isEmpty {
            let slice = rest.prefix(16 * 1024)
            rest = rest.dropFirst(slice.count)
            try xml.feed(slice)
            if xml.offset - xml.handler.entryStart > limits.maximumEntryBytes {
                throw .protocolError("PROPFIND answer: an entry larger than \(limits.maximumEntryBytes) bytes")
            }
        }
        return xml.handler.takeCompleted()
    }

    /// The body ended: it must have been a whole multistatus. Returns the last responses.
    mutating func finish() throws(StoreError) -> [WebDAVResponse] {
        // A cut-off document must not pass for a short listing.
        try xml.finish()
        guard xml.handler.sawMultistatus, xml.handler.closedMultistatus else {
            throw .protocolError("PROPFIND answer ends before </multistatus>")
        }
        return xml.handler.takeCompleted()
    }

    /// Responses read so far (handed back or not).
    var entriesRead: Int { xml.handler.count }
}

/// The multistatus grammar on top of the push parser's events.
private struct MultistatusHandler: XMLPushHandler {
    private static let dav = "DAV:"
    let maximumEntries: Int
    private(set) var sawMultistatus = false
    private(set) var closedMultistatus = false
    /// Responses completed and not handed back yet.
    private var completed: [WebDAVResponse] = []
    /// Responses read, empty hrefs included.
    private(set) var count = 0
    /// Document offset where the entry under way began (after the last `</response>`).
    private(set) var entryStart = 0

    private var current: WebDAVResponse?
    private var inPropstat = false
    private var propstatIsCollection = false
    private var propstatLength: Int64?
    private var propstatModified: String?
    private var propstatETag: String?
    private var propstatStatus: Int?
    private var propstatPosix = PosixProperties()
    private var propstatHasPreview = false
    private var propstatPreviewFromNextcloud = false
    private var propstatAnswersPreview = false
    private var inProp = false
    private var inResourceType = false
    private var inLockToken = false
    private var propstatLockTokens: [String] = []
    private var text: [UInt8] = []

    init(maximumEntries: Int) { self.maximumEntries = maximumEntries }

    mutating func takeCompleted() -> [WebDAVResponse] {
        defer { completed = [] }
        return completed
    }

    /// The elements this grammar reads; anything else is `.other`.
    enum Element {
        case dav(DAV)
        /// docfs's dead properties, by local name.
        case posix(String)
        case hasPreview(fromNextcloud: Bool)
        case other
    }

    enum DAV: String {
        case multistatus, response, href, status, propstat, prop, getcontentlength, getlastmodified, getetag
        case resourcetype, collection, locktoken
    }

    func element(named name: XMLName) -> Element {
        if name.namespace == PosixProperties.namespace { return .posix(name.local) }
        if name.local == "has-preview", let namespace = name.namespace, PreviewProperty.namespaces.contains(namespace) {
            return .hasPreview(fromNextcloud: namespace == PreviewProperty.nextcloud)
        }
        guard name.namespace == Self.dav, let dav = DAV(rawValue: name.local) else { return .other }
        return .dav(dav)
    }

    mutating func startElement(_ element: Element, attributes: [(name: String, value: [UInt8])]) throws(StoreError) {
        text.clear()
        if !sawMultistatus {
            // The root decides at once: a login page is not read to its end.
            guard case .dav(.multistatus) = element else {
                throw .protocolError("PROPFIND answer is not a DAV: multistatus")
            }
            sawMultistatus = true
            return
        }
        guard case .dav(let name) = element else { return }
        switch name {
        case .response: current = WebDAVResponse(href: "")
        case .propstat:
            inPropstat = true
            propstatIsCollection = false
            propstatLength = nil
            propstatModified = nil
            propstatETag = nil
            propstatStatus = nil
            propstatPosix = PosixProperties()
            propstatHasPreview = false
            propstatPreviewFromNextcloud = false
            propstatAnswersPreview = false
            propstatLockTokens = []
        case .prop: inProp = true
        case .locktoken: inLockToken = inProp
        case .resourcetype: inResourceType = true
        case .collection: if inResourceType { propstatIsCollection = true }
        case .multistatus, .href, .status, .getcontentlength, .getlastmodified, .getetag: break
        }
    }

    mutating func characters(_ bytes: ArraySlice<UInt8>) throws(StoreError) {
        text.append(contentsOf: bytes)
    }

    /// The element's text, trimmed, invalid UTF-8 replaced (for values, not names).
    private var value: String {
        String(decoding: trimmedText, as: UTF8.self)
    }

    /// The element's text without XML's whitespace around it.
    private var trimmedText: ArraySlice<UInt8> { ASCIIWhitespace.trimmed(text) }

    /// An href as a string that keeps every byte: when the text is not UTF-8, its bytes above
    /// ASCII are percent-encoded, so the name they make fails to decode and is skipped (a
    /// href's `%XX` are decoded by the store, not here).
    private var hrefValue: String {
        let trimmed = trimmedText
        if let string = String(validating: trimmed, as: UTF8.self) { return string }
        var encoded = ""
        for byte in trimmed {
            if byte < 0x80 { encoded.unicodeScalars.append(Unicode.Scalar(byte)) } else { encoded += "%" + String(byte, radix: 16, uppercase: true) }
        }
        return encoded
    }

    mutating func endElement(_ element: Element, at offset: Int) throws(StoreError) {
        defer { text.clear() }
        let name: DAV
        switch element {
        case .posix(let local):
            if inProp { propstatPosix.set(local, to: value) }
            return
        case .hasPreview(let fromNextcloud):
            if inProp { propstatAnswersPreview = true }
            if inProp, value == "true" || value == "1" {
                propstatHasPreview = true
                if fromNextcloud { propstatPreviewFromNextcloud = true }
            }
            return
        case .other:
            return
        case .dav(let dav):
            name = dav
        }
        switch name {
        case .href:
            if current != nil, !inPropstat {
                let href = hrefValue
                current?.href = href
            } else if inLockToken {
                propstatLockTokens.append(value)
            }
        case .status:
            let code = Self.statusCode(value)
            if inPropstat { propstatStatus = code } else { current?.status = code }
        case .getcontentlength: if inProp { propstatLength = Int64(value) }
        case .getlastmodified: if inProp { propstatModified = value }
        case .getetag: if inProp { propstatETag = value.isEmpty ? nil : value }
        case .multistatus: closedMultistatus = true
        case .resourcetype: inResourceType = false
        case .locktoken: inLockToken = false
        case .prop: inProp = false
        case .propstat:
            inPropstat = false
            if let status = propstatStatus { current?.propstatStatuses.append(status) }
            // Only properties the server reports as found (2xx) count.
            if let status = propstatStatus, (200..<300).contains(status) {
                if propstatIsCollection { current?.isCollection = true }
                if let propstatLength { current?.contentLength = propstatLength }
                if let propstatModified { current?.lastModified = propstatModified }
                if let propstatETag { current?.etag = propstatETag }
                current?.posix.merge(propstatPosix)
                if propstatHasPreview { current?.hasPreview = true }
                if propstatPreviewFromNextcloud { current?.previewFromNextcloud = true }
                if propstatAnswersPreview { current?.answersPreview = true }
                current?.lockTokens += propstatLockTokens
            }
        case .response:
            count += 1
            guard count <= maximumEntries else {
                throw .protocolError("PROPFIND answer: more than \(maximumEntries) entries")
            }
            if let current, !current.href.isEmpty { completed.append(current) }
            current = nil
            entryStart = offset
        default: break
        }
    }

    /// `HTTP/1.1 200 OK` -> 200: the second field between spaces. Read in place (two per
    /// entry of a listing: an array of fields each was a measurable share of parsing one).
    static func statusCode(_ line: String) -> Int? {
        let bytes = line.utf8
        let space = UInt8(ascii: " ")
        var index = bytes.startIndex
        func skip(while isSpace: Bool) {
            while index != bytes.endIndex, (bytes[index] == space) == isSpace { index = bytes.index(after: index) }
        }
        skip(while: true)
        guard index != bytes.endIndex else { return nil }
        skip(while: false)
        skip(while: true)
        guard index != bytes.endIndex else { return nil }
        let start = index
        skip(while: false)
        return Int(Substring(bytes[start..<index]))
    }
}
