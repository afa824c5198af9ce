// WebDAVMultistatus: what a WebDAV server says in a 207 Multi-Status answer to PROPFIND, and the
// helpers that turn it into store entries: the XML parser (percent-encoding lives in
// PercentEncoding.swift, HTTP dates in HTTPDate.swift). Nothing here does I/O, so it is tested on fixed samples.

#if canImport(FoundationXML)
import FoundationXML
#endif
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
    /// Parses a multistatus body. Throws `.protocolError` on XML that is not well-formed or not a multistatus.
    static func parse(_ data: Data) throws(StoreError) -> [WebDAVResponse] {
        let delegate = MultistatusParser()
        let parser = XMLParser(data: data)
        parser.shouldProcessNamespaces = true
        parser.shouldResolveExternalEntities = false
        parser.delegate = delegate
        guard parser.parse() else {
            let reason = parser.parserError.map { "\($0)" } ?? "unknown error"
            throw .protocolError("malformed PROPFIND answer: \(reason)")
        }
        guard delegate.sawMultistatus else { throw .protocolError("PROPFIND answer is not a DAV: multistatus") }
        // A cut-off document must not pass for a short listing.
        guard delegate.closedMultistatus else { throw .protocolError("PROPFIND answer ends before </multistatus>") }
        return delegate.responses
    }
}

/// The XMLParser delegate. Used by one parse on one thread, never shared.
private final class MultistatusParser: NSObject, XMLParserDelegate {
    private static let dav = "DAV:"
    var responses: [WebDAVResponse] = []
    var sawMultistatus = false
    var closedMultistatus = false

    private var current: WebDAVResponse?
    private var inPropstat = false
    private var propstatIsCollection = false
    private var propstatLength: Int64?
    private var propstatModified: String?
    private var propstatETag: String?
    private var propstatStatus: Int?
    private var propstatPosix = PosixProperties()
    private var inProp = false
    private var inResourceType = false
    private var text = ""
    private var depth = 0

    func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
        depth += 1
        text = ""
        guard namespaceURI == Self.dav else { return }
        if elementName == "propstat" { propstatPosix = PosixProperties() }
        switch elementName {
        case "multistatus": sawMultistatus = true
        case "response": current = WebDAVResponse(href: "")
        case "propstat":
            inPropstat = true
            propstatIsCollection = false
            propstatLength = nil
            propstatModified = nil
            propstatETag = nil
            propstatStatus = nil
        case "prop": inProp = true
        case "resourcetype": inResourceType = true
        case "collection": if inResourceType { propstatIsCollection = true }
        default: break
        }
    }

    func parser(_ parser: XMLParser, foundCharacters string: String) {
        text += string
    }

    func parser(_ parser: XMLParser, foundCDATA CDATABlock: Data) {
        text += String(decoding: CDATABlock, as: UTF8.self)
    }

    func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
        depth -= 1
        defer { text = "" }
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        if namespaceURI == PosixProperties.namespace {
            if inProp { propstatPosix.set(elementName, to: value) }
            return
        }
        guard namespaceURI == Self.dav else { return }
        switch elementName {
        case "href":
            if current != nil, !inPropstat { current?.href = value }
        case "status":
            let code = Self.statusCode(value)
            if inPropstat { propstatStatus = code } else { current?.status = code }
        case "getcontentlength": if inProp { propstatLength = Int64(value) }
        case "getlastmodified": if inProp { propstatModified = value }
        case "getetag": if inProp { propstatETag = value.isEmpty ? nil : value }
        case "multistatus": closedMultistatus = true
        case "resourcetype": inResourceType = false
        case "prop": inProp = false
        case "propstat":
            inPropstat = false
            if let status = propstatStatus { current?.propstatStatuses.append(status) }
            // Only properties the server reports as found (2xx) count.
            if let status = propstatStatus, (200..<300).contains(status) {
                if propstatIsCollection { current?.isCollection = true }
                if let propstatLength { current?.contentLength = propstatLength }
                if let propstatModified { current?.lastModified = propstatModified }
                if let propstatETag { current?.etag = propstatETag }
                current?.posix.merge(propstatPosix)
            }
        case "response":
            if let current, !current.href.isEmpty { responses.append(current) }
            current = nil
        default: break
        }
    }

    /// `HTTP/1.1 200 OK` -> 200.
    static func statusCode(_ line: String) -> Int? {
        let parts = line.split(separator: " ")
        guard parts.count >= 2 else { return nil }
        return Int(parts[1])
    }
}
