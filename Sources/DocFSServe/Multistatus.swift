// Multistatus: the XML bodies of PROPFIND (207) and of DAV error responses (RFC 4918 §14, §16).

struct PropfindEntry {
    let href: String
    let name: String
    let info: FileInfo
    /// ownCloud's `has-preview` of a file (nil: the server makes no previews, and says nothing).
    var hasPreview: Bool? = nil
}

enum Multistatus {
    static func propfind(_ entries: [PropfindEntry]) -> String {
        var xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\" xmlns:oc=\"http://owncloud.org/ns\">\n"
        for entry in entries {
            xml += "<D:response><D:href>\(escape(entry.href))</D:href><D:propstat><D:prop>"
            xml += "<D:displayname>\(escape(entry.name))</D:displayname>"
            if entry.info.isDirectory {
                xml += "<D:resourcetype><D:collection/></D:resourcetype>"
            } else {
                xml += "<D:resourcetype/>"
                xml += "<D:getcontentlength>\(entry.info.size)</D:getcontentlength>"
                xml += "<D:getcontenttype>\(escape(ContentType.forName(entry.name)))</D:getcontenttype>"
                if let hasPreview = entry.hasPreview { xml += "<oc:has-preview>\(hasPreview)</oc:has-preview>" }
            }
            xml += "<D:getlastmodified>\(entry.info.lastModified)</D:getlastmodified>"
            xml += "<D:creationdate>\(HTTPDate.iso8601(seconds: entry.info.modificationSeconds))</D:creationdate>"
            xml += "<D:getetag>\(escape(entry.info.etag))</D:getetag>"
            xml += "<D:supportedlock/>"
            xml += "</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n"
        }
        xml += "</D:multistatus>\n"
        return xml
    }

    /// A PROPPATCH answer refusing every property: we keep no dead properties.
    static func proppatchRefused(href: String, properties: [String]) -> String {
        var xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n"
        xml += "<D:response><D:href>\(escape(href))</D:href><D:propstat><D:prop>"
        xml += properties.joined()
        xml += "</D:prop><D:status>HTTP/1.1 403 Forbidden</D:status></D:propstat></D:response>\n</D:multistatus>\n"
        return xml
    }

    static func error(precondition: String) -> String {
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:error xmlns:D=\"DAV:\"><D:\(precondition)/></D:error>\n"
    }

    /// XML escaping for text content, and with `attribute: true` for quoted attribute values.
    /// Characters XML 1.0 cannot carry at all become U+FFFD.
    static func escape(_ text: String, attribute: Bool = false) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"" where attribute: out += "&quot;"
            case "'" where attribute: out += "&apos;"
            case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
            default:
                if scalar.value < 0x20 || scalar.value == 0xFFFE || scalar.value == 0xFFFF {
                    out += "\u{FFFD}"
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out
    }
}
