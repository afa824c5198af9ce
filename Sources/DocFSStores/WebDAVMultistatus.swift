// WebDAVMultistatus: what a WebDAV server says in a 207 Multi-Status answer to PROPFIND, and the
// helpers that turn it into store entries: the XML parser (percent-encoding lives in
// PercentEncoding.swift), and HTTP dates. Nothing here does I/O, so it is tested on fixed samples.

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

/// HTTP dates: RFC 1123 (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`)
/// and asctime (`Sun Nov  6 08:49:37 1994`), always UTC.
enum WebDAVDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Seconds since 1970, or nil if `string` is none of the three forms.
    static func parse(_ string: String) -> Double? {
        // Tokenise on spaces, commas and dashes; the weekday is ignored.
        let tokens = string.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "-" || $0 == "\t" }).map(String.init)
        guard tokens.count >= 4 else { return nil }
        var day: Int?, month: Int?, year: Int?, time: (Int, Int, Int)?
        for token in tokens {
            if let parsed = parseTime(token) { time = parsed; continue }
            if let index = months.firstIndex(of: token.lowercased()) { month = index + 1; continue }
            if let number = Int(token) {
                if day == nil, token.count <= 2 { day = number; continue }
                if year == nil { year = token.count == 2 ? (number < 70 ? 2000 + number : 1900 + number) : number; continue }
            }
            if token.uppercased() == "GMT" || token.uppercased() == "UTC" || token == "+0000" { continue }
        }
        guard let day, let month, let year, let time, (1...31).contains(day), time.0 < 24, time.1 < 60, time.2 < 61 else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        return Double(days * 86_400 + time.0 * 3600 + time.1 * 60 + time.2)
    }

    /// RFC 1123 form of `seconds` since 1970.
    static func format(_ seconds: Double) -> String {
        let total = Int(seconds.rounded(.down))
        let days = total >= 0 ? total / 86_400 : (total - 86_399) / 86_400
        let rest = total - days * 86_400
        let (year, month, day) = civilFromDays(days)
        let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][((days % 7) + 7) % 7]
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(weekday), \(two(day)) \(months[month - 1].capitalized) \(year) \(two(rest / 3600)):\(two(rest / 60 % 60)):\(two(rest % 60)) GMT"
    }

    private static func parseTime(_ token: String) -> (Int, Int, Int)? {
        let parts = token.split(separator: ":")
        guard parts.count == 3, let h = Int(parts[0]), let m = Int(parts[1]), let s = Int(parts[2]) else { return nil }
        return (h, m, s)
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    private static func civilFromDays(_ days: Int) -> (Int, Int, Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (month <= 2 ? 1 : 0), month, day)
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
