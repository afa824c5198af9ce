// XMLPushParser: an incremental XML tokenizer for the documents stores answer with (WebDAV
// multistatus, S3 listings), fed chunks as they arrive off the wire. Foundation's XMLParser
// on Linux can only pull a whole document (or block a thread on a stream), so a listing had
// to sit whole in memory, twice, before its first entry was seen; this parser keeps nothing
// but the markup or text under way and the open elements.
//
// It reads the subset of XML 1.0 such documents use: elements, attributes, namespaces
// (`xmlns`, `xmlns:p`), character data, CDATA sections, the five predefined entities and
// character references. The XML declaration, processing instructions, comments and a DOCTYPE
// (with its internal subset) are skipped; entities a DTD would declare are never expanded (an
// unknown `&name;` reads as nothing), so neither external entities nor entity bombs exist
// here. Bytes are not checked as UTF-8: the handler decides what invalid text means (a name
// that does not decode is skipped, the rest of the listing stays). One state per byte, no
// rescans: a token that arrives one byte per chunk costs what it costs at once.

import DocFSStore

/// A namespace-resolved element name.
struct XMLName: Sendable, Equatable {
    /// The namespace URI, or nil for none (or an undeclared prefix).
    var namespace: String?
    var local: String
}

/// What a push parser tells its handler, in document order.
protocol XMLPushHandler {
    /// What the handler makes of an element's name. A listing repeats a dozen names thousands
    /// of times: each is turned into an `Element` once (while the bindings in scope stay), so
    /// the handler switches over a small value instead of comparing strings per element.
    associatedtype Element
    /// Pure: the parser keeps what it returns for every element of that name in scope.
    func element(named name: XMLName) -> Element
    /// An element begins. `attributes` are raw names (`p:name`) with decoded values.
    mutating func startElement(_ element: Element, attributes: [(name: String, value: [UInt8])]) throws(StoreError)
    /// An element ends; `offset` is the count of document bytes read up to its `>`.
    mutating func endElement(_ element: Element, at offset: Int) throws(StoreError)
    /// Character data (entities decoded, CDATA as is); one run may come in several calls.
    mutating func characters(_ bytes: ArraySlice<UInt8>) throws(StoreError)
}

/// An element's name as written (`D:href`), hashed in one pass over its bytes (an array of
/// bytes hashes byte by byte, a measurable share of parsing a listing).
private struct RawName: Hashable {
    let bytes: [UInt8]

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    func hash(into hasher: inout Hasher) {
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}

/// A raw name and, for one without a prefix, the default namespace it was resolved under.
private struct ResolvedName: Hashable {
    let raw: RawName
    let defaultNamespace: String?
}

struct XMLPushParser<Handler: XMLPushHandler> {
    var handler: Handler
    /// Elements open at once beyond this are refused (a bound on the element stack).
    let maximumDepth: Int
    /// A name, an attribute value or a DOCTYPE longer than this is refused.
    let maximumTokenBytes: Int

    /// Document bytes read so far.
    private(set) var offset = 0
    private(set) var sawRoot = false
    private(set) var rootClosed = false

    private enum State {
        case text
        case entity                 // after `&` in text or in an attribute value
        case markupStart            // after `<`
        case bang                   // after `<!`
        case comment(dashes: Int)   // inside `<!--`, counting `-` just seen
        case cdata(brackets: Int)   // inside `<![CDATA[`, counting `]` just seen
        case doctype(depth: Int, quote: UInt8)
        case processing(question: Bool)
        case startName
        case inTag                  // between attributes
        case attributeName
        case afterAttributeName     // expecting `=`
        case beforeValue            // expecting a quote
        case value(quote: UInt8)
        case selfClosing            // after `/` in a start tag
        case endName
        case afterEndName
    }

    private var state = State.text
    /// Where an entity returns to: text, or an attribute value with this quote.
    private var entityQuote: UInt8 = 0
    private var text: [UInt8] = []
    private var entity: [UInt8] = []
    private var name: [UInt8] = []
    private var attributeName: [UInt8] = []
    private var attributeValue: [UInt8] = []
    private var attributes: [(name: [UInt8], value: [UInt8])] = []
    private var bangBytes: [UInt8] = []
    private var doctypeBytes = 0
    /// Open elements: raw name (to match the end tag) and what the handler made of it.
    private var open: [(raw: [UInt8], element: Handler.Element)] = []
    /// Namespace bindings per open element (prefix "" is the default namespace).
    private var scopes: [[String: String]] = []
    /// Raw element names resolved under the bindings open now; emptied when an element binds a
    /// prefix anew. A name without a prefix (`mode`) is kept by the default namespace it was
    /// resolved under: rclone binds the default namespace on each property it does not have,
    /// twice per entry, and back again after it. A listing repeats a dozen names thousands of times.
    private var resolved: [ResolvedName: Handler.Element] = [:]
    /// The default namespace bound now (nil: none).
    private var defaultNamespace: String?
    /// Bytes of a UTF-8 byte order mark read at the start.
    private var byteOrderMark = 0

    init(handler: Handler, maximumDepth: Int = 128, maximumTokenBytes: Int = 1 << 20) {
        self.handler = handler
        self.maximumDepth = maximumDepth
        self.maximumTokenBytes = maximumTokenBytes
    }

    private static func malformed(_ why: String) -> StoreError { .protocolError("malformed XML: \(why)") }

    private static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }
    private static func isNameByte(_ b: UInt8) -> Bool {
        !isSpace(b) && b != UInt8(ascii: "<") && b != UInt8(ascii: ">") && b != UInt8(ascii: "/")
            && b != UInt8(ascii: "=") && b != UInt8(ascii: "\"") && b != UInt8(ascii: "'") && b != UInt8(ascii: "&")
    }

    /// Reads the next bytes of the document.
    mutating func feed<Bytes: Collection>(_ bytes: Bytes) throws(StoreError) where Bytes.Element == UInt8 {
        let contiguous: Void?
        do {
            contiguous = try bytes.withContiguousStorageIfAvailable { buffer in try feedRuns(buffer) }
        } catch let error as StoreError {
            throw error
        } catch {
            throw Self.malformed("\(error)")
        }
        if contiguous == nil {
            for byte in bytes {
                try step(byte)
                offset += 1
            }
        }
        try flushText()
    }

    /// `feed` over bytes in memory: a run of text, of a name or of an attribute value is taken
    /// whole (one scan, one append) rather than byte by byte through `step`, which a listing of
    /// thousands of entries spent most of its parsing time in. Every other byte goes through
    /// `step`, so the two paths accept and refuse the same documents.
    private mutating func feedRuns(_ buffer: UnsafeBufferPointer<UInt8>) throws(StoreError) {
        var index = 0
        let count = buffer.count
        while index < count {
            var end = index
            switch state {
            case .text where offset >= 3 && (byteOrderMark == 0 || byteOrderMark == 3):
                while end < count, buffer[end] != UInt8(ascii: "<"), buffer[end] != UInt8(ascii: "&") { end += 1 }
                if end > index {
                    text.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[index..<end]))
                    if text.count >= 16 * 1024 { try flushText() }
                }
            case .startName, .endName:
                while end < count, Self.isNameByte(buffer[end]) { end += 1 }
                if end > index {
                    name.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[index..<end]))
                    try bound(name.count)
                }
            case .value(let quote):
                while end < count, buffer[end] != quote, buffer[end] != UInt8(ascii: "&"), buffer[end] != UInt8(ascii: "<") { end += 1 }
                if end > index {
                    attributeValue.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[index..<end]))
                    try bound(attributeValue.count)
                }
            default:
                break
            }
            if end > index {
                offset += end - index
                index = end
                continue
            }
            try step(buffer[index])
            offset += 1
            index += 1
        }
    }

    /// The document ended: it must be complete, with its root element closed.
    mutating func finish() throws(StoreError) {
        try flushText()
        guard case .text = state else { throw Self.malformed("the document ends inside markup") }
        guard sawRoot else { throw Self.malformed("no root element") }
        guard rootClosed else { throw Self.malformed("the document ends before its root element does") }
    }

    private mutating func flushText() throws(StoreError) {
        guard !text.isEmpty else { return }
        if open.isEmpty {
            // Outside the root only white space may stand.
            guard text.allSatisfy(Self.isSpace) else { throw Self.malformed("text outside the root element") }
        } else {
            try handler.characters(text[...])
        }
        text.clear()
    }

    private mutating func step(_ byte: UInt8) throws(StoreError) {
        switch state {
        case .text:
            if offset < 3, byteOrderMark == offset, byte == [0xEF, 0xBB, 0xBF][offset] {
                // A UTF-8 byte order mark may open the document.
                byteOrderMark += 1
                return
            }
            if byteOrderMark > 0, byteOrderMark < 3 { throw Self.malformed("a broken byte order mark") }
            switch byte {
            case UInt8(ascii: "<"):
                try flushText()
                state = .markupStart
            case UInt8(ascii: "&"):
                entityQuote = 0
                entity.clear()
                state = .entity
            default:
                text.append(byte)
                if text.count >= 16 * 1024 { try flushText() }
            }
        case .entity:
            if byte == UInt8(ascii: ";") {
                let decoded = try Self.decodeEntity(entity)
                if entityQuote == 0 {
                    text.append(contentsOf: decoded)
                    state = .text
                } else {
                    attributeValue.append(contentsOf: decoded)
                    try bound(attributeValue.count)
                    state = .value(quote: entityQuote)
                }
            } else {
                guard entity.count < 32, Self.isNameByte(byte) || byte == UInt8(ascii: "#") else {
                    throw Self.malformed("an `&` that starts no entity")
                }
                entity.append(byte)
            }
        case .markupStart:
            switch byte {
            case UInt8(ascii: "/"):
                name.clear()
                state = .endName
            case UInt8(ascii: "?"):
                state = .processing(question: false)
            case UInt8(ascii: "!"):
                bangBytes.clear()
                state = .bang
            default:
                guard Self.isNameByte(byte) else { throw Self.malformed("`<` followed by \(byte)") }
                // The buffer is reused: open elements keep the resolved cache's copy of their name.
                name.clear()
                name.append(byte)
                attributes.clear()
                state = .startName
            }
        case .bang:
            bangBytes.append(byte)
            if bangBytes == Array("--".utf8) {
                state = .comment(dashes: 0)
            } else if bangBytes == Array("[CDATA[".utf8) {
                guard !open.isEmpty else { throw Self.malformed("CDATA outside the root element") }
                state = .cdata(brackets: 0)
            } else if bangBytes == Array("DOCTYPE".utf8) {
                guard !sawRoot else { throw Self.malformed("a DOCTYPE after the root element") }
                doctypeBytes = 0
                state = .doctype(depth: 0, quote: 0)
            } else if !(Array("--".utf8).starts(with: bangBytes) || Array("[CDATA[".utf8).starts(with: bangBytes)
                        || Array("DOCTYPE".utf8).starts(with: bangBytes)) {
                throw Self.malformed("unknown markup `<!`")
            }
        case .comment(let dashes):
            if byte == UInt8(ascii: "-") {
                state = .comment(dashes: dashes + 1)
            } else if byte == UInt8(ascii: ">"), dashes >= 2 {
                state = .text
            } else {
                state = .comment(dashes: 0)
            }
        case .cdata(let brackets):
            if byte == UInt8(ascii: "]") {
                if brackets == 2 { text.append(byte) } else { state = .cdata(brackets: brackets + 1) }
            } else if byte == UInt8(ascii: ">"), brackets == 2 {
                try flushText()
                state = .text
            } else {
                text.append(contentsOf: repeatElement(UInt8(ascii: "]"), count: brackets))
                text.append(byte)
                state = .cdata(brackets: 0)
                if text.count >= 16 * 1024 { try flushText() }
            }
        case .doctype(let depth, let quote):
            doctypeBytes += 1
            try bound(doctypeBytes)
            if quote != 0 {
                if byte == quote { state = .doctype(depth: depth, quote: 0) }
            } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                state = .doctype(depth: depth, quote: byte)
            } else if byte == UInt8(ascii: "[") {
                state = .doctype(depth: depth + 1, quote: 0)
            } else if byte == UInt8(ascii: "]") {
                state = .doctype(depth: max(0, depth - 1), quote: 0)
            } else if byte == UInt8(ascii: ">"), depth == 0 {
                state = .text
            }
        case .processing(let question):
            if byte == UInt8(ascii: ">"), question {
                state = .text
            } else {
                state = .processing(question: byte == UInt8(ascii: "?"))
            }
        case .startName:
            if Self.isNameByte(byte) {
                name.append(byte)
                try bound(name.count)
            } else {
                state = .inTag
                try step(byte)
            }
        case .inTag:
            if Self.isSpace(byte) { return }
            switch byte {
            case UInt8(ascii: ">"):
                try startElement(selfClosing: false)
                state = .text
            case UInt8(ascii: "/"):
                state = .selfClosing
            default:
                guard Self.isNameByte(byte) else { throw Self.malformed("unexpected byte \(byte) in a start tag") }
                guard attributes.count < 256 else { throw Self.malformed("too many attributes") }
                attributeName = [byte]
                state = .attributeName
            }
        case .attributeName:
            if Self.isNameByte(byte) {
                attributeName.append(byte)
                try bound(attributeName.count)
            } else {
                state = .afterAttributeName
                try step(byte)
            }
        case .afterAttributeName:
            if Self.isSpace(byte) { return }
            guard byte == UInt8(ascii: "=") else { throw Self.malformed("an attribute without a value") }
            state = .beforeValue
        case .beforeValue:
            if Self.isSpace(byte) { return }
            guard byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") else { throw Self.malformed("an unquoted attribute value") }
            attributeValue.clear()
            state = .value(quote: byte)
        case .value(let quote):
            if byte == quote {
                attributes.append((attributeName, attributeValue))
                state = .inTag
            } else if byte == UInt8(ascii: "&") {
                entityQuote = quote
                entity.clear()
                state = .entity
            } else if byte == UInt8(ascii: "<") {
                throw Self.malformed("`<` in an attribute value")
            } else {
                attributeValue.append(byte)
                try bound(attributeValue.count)
            }
        case .selfClosing:
            guard byte == UInt8(ascii: ">") else { throw Self.malformed("`/` not followed by `>` in a start tag") }
            try startElement(selfClosing: true)
            state = .text
        case .endName:
            if Self.isNameByte(byte) {
                name.append(byte)
                try bound(name.count)
            } else {
                state = .afterEndName
                try step(byte)
            }
        case .afterEndName:
            if Self.isSpace(byte) { return }
            guard byte == UInt8(ascii: ">") else { throw Self.malformed("unexpected byte \(byte) in an end tag") }
            try endElement()
            state = .text
        }
    }

    private func bound(_ count: Int) throws(StoreError) {
        if count > maximumTokenBytes { throw Self.malformed("a token longer than \(maximumTokenBytes) bytes") }
    }

    private mutating func startElement(selfClosing: Bool) throws(StoreError) {
        if rootClosed { throw Self.malformed("a second root element") }
        guard open.count < maximumDepth else { throw Self.malformed("elements nested deeper than \(maximumDepth)") }
        sawRoot = true
        var scope: [String: String] = [:]
        var plain: [(name: String, value: [UInt8])] = []
        for (rawName, value) in attributes {
            let attribute = String(decoding: rawName, as: UTF8.self)
            let prefix: String
            if attribute == "xmlns" {
                prefix = ""
            } else if attribute.hasPrefix("xmlns:") {
                prefix = String(attribute.dropFirst(6))
            } else {
                plain.append((attribute, value))
                continue
            }
            // A declaration that binds a prefix to the URI it has already changes nothing (rclone
            // repeats `xmlns:D="DAV:"` inside every entry): only a new binding empties the cache.
            let uri = String(decoding: value, as: UTF8.self)
            if scope[prefix] != nil || binding(of: prefix) != uri { scope[prefix] = uri }
        }
        scopes.append(scope)
        bindingsChanged(scope)
        let (raw, element) = resolve(name)
        open.append((raw, element))
        try handler.startElement(element, attributes: plain)
        if selfClosing { try endElement() }
    }

    private mutating func endElement() throws(StoreError) {
        guard let top = open.last else { throw Self.malformed("an end tag without a start tag") }
        guard top.raw == name else {
            throw Self.malformed("</\(String(decoding: name, as: UTF8.self))> closes <\(String(decoding: top.raw, as: UTF8.self))>")
        }
        open.removeLast()
        bindingsChanged(scopes.removeLast())
        if open.isEmpty { rootClosed = true }
        try handler.endElement(top.element, at: offset + 1)
    }

    /// What the handler makes of `raw` (`p:local` or `local`) under the open scopes, and the
    /// cache's copy of `raw` (an open element holds that one, not the parser's buffer).
    private mutating func resolve(_ raw: [UInt8]) -> (raw: [UInt8], element: Handler.Element) {
        let namespace = raw.contains(UInt8(ascii: ":")) ? nil : defaultNamespace
        if let index = resolved.index(forKey: ResolvedName(raw: RawName(raw), defaultNamespace: namespace)) {
            let (key, element) = resolved[index]
            return (key.raw.bytes, element)
        }
        let element = handler.element(named: resolveInScopes(raw))
        if resolved.count >= 256 { resolved.removeAll(keepingCapacity: true) }
        resolved[ResolvedName(raw: RawName(raw), defaultNamespace: namespace)] = element
        return (raw, element)
    }

    /// An element that declared `scope` begins or ends: names resolved under the bindings it
    /// changes no longer hold.
    private mutating func bindingsChanged(_ scope: [String: String]) {
        guard !scope.isEmpty else { return }
        if scope[""] != nil { defaultNamespace = binding(of: "") }
        if scope.count > (scope[""] != nil ? 1 : 0) { resolved.removeAll(keepingCapacity: true) }
    }

    /// The URI `prefix` names in the open scopes (`""`: the default namespace); nil if unbound.
    private func binding(of prefix: String) -> String? {
        for scope in scopes.reversed() {
            if let uri = scope[prefix] { return uri }
        }
        return nil
    }

    private func resolveInScopes(_ raw: [UInt8]) -> XMLName {
        let qualified = String(decoding: raw, as: UTF8.self)
        var prefix = ""
        var local = qualified
        if let colon = qualified.firstIndex(of: ":") {
            prefix = String(qualified[..<colon])
            local = String(qualified[qualified.index(after: colon)...])
        }
        if prefix == "xml" { return XMLName(namespace: "http://www.w3.org/XML/1998/namespace", local: local) }
        if let uri = binding(of: prefix) { return XMLName(namespace: uri.isEmpty ? nil : uri, local: local) }
        return XMLName(namespace: nil, local: local)
    }

    /// The bytes of `&name;` (`name` without `&` and `;`). Unknown names read as nothing: a DTD
    /// may declare them, and docfs never expands what a DTD declares.
    private static func decodeEntity(_ name: [UInt8]) throws(StoreError) -> [UInt8] {
        switch name {
        case Array("lt".utf8): return [UInt8(ascii: "<")]
        case Array("gt".utf8): return [UInt8(ascii: ">")]
        case Array("amp".utf8): return [UInt8(ascii: "&")]
        case Array("quot".utf8): return [UInt8(ascii: "\"")]
        case Array("apos".utf8): return [UInt8(ascii: "'")]
        default: break
        }
        guard name.first == UInt8(ascii: "#") else {
            guard !name.isEmpty else { throw malformed("an empty entity `&;`") }
            return []
        }
        var digits = name.dropFirst()
        var radix: UInt32 = 10
        if digits.first == UInt8(ascii: "x") {
            radix = 16
            digits = digits.dropFirst()
        }
        guard !digits.isEmpty, digits.count <= 8,
              let value = UInt32(String(decoding: digits, as: UTF8.self), radix: Int(radix)),
              let scalar = Unicode.Scalar(value) else {
            throw malformed("a character reference that names no character")
        }
        return Array(String(Character(scalar)).utf8)
    }
}

extension Array {
    /// Empties the array and keeps its storage. `removeAll(keepingCapacity:)` is a generic
    /// `replaceSubrange` even on an empty array: per element of a listing, a share of the parse.
    mutating func clear() {
        if !isEmpty { removeAll(keepingCapacity: true) }
    }
}
