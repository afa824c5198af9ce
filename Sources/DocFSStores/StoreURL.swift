// StoreURL: an `http(s)://` URL of a store taken apart — origin, decoded path components,
// credentials from its userinfo — and the same URL redacted for messages. WebDAV base URLs, S3
// endpoints and the store locator's URLs all go through it; a URL with a query, a fragment or
// an unsafe path component is refused.

import DocFSStore
import Foundation

/// An `http(s)://` store URL taken apart: origin, decoded path components and credentials.
struct StoreURL {
    var origin: String
    var components: [String]
    var username: String?
    var password: String?

    init(_ string: String) throws(StoreError) {
        guard let schemeEnd = string.range(of: "://") else { throw .protocolError("not a URL: \(StoreURL.redacted(string))") }
        let scheme = string[..<schemeEnd.lowerBound].lowercased()
        guard scheme == "http" || scheme == "https" else { throw .notSupported("URL scheme \(scheme)") }
        let rest = string[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        let pathPart = rest[authorityEnd...]
        guard !pathPart.contains("?"), !pathPart.contains("#") else {
            throw .protocolError("a store URL cannot have a query or fragment: \(StoreURL.redacted(string))")
        }
        if let at = authority.lastIndex(of: "@") {
            let userinfo = authority[..<at]
            authority = authority[authority.index(after: at)...]
            if let colon = userinfo.firstIndex(of: ":") {
                username = PercentEncoding.decode(userinfo[..<colon])
                password = PercentEncoding.decode(userinfo[userinfo.index(after: colon)...])
            } else {
                username = PercentEncoding.decode(userinfo)
            }
        }
        guard !authority.isEmpty else { throw .protocolError("no host in \(StoreURL.redacted(string))") }
        origin = scheme + "://" + authority
        guard let decoded = PercentEncoding.decodedPathComponents(of: String(pathPart)) else {
            throw .protocolError("undecodable path in \(StoreURL.redacted(string))")
        }
        for component in decoded where !StorePath.isValidName(component) {
            throw .invalidName(component)
        }
        components = decoded
    }

    /// The URL with any `user:password@` removed, for messages.
    static func redacted(_ string: String) -> String {
        guard let schemeEnd = string.range(of: "://") else { return string }
        let rest = string[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return string }
        return String(string[..<schemeEnd.upperBound]) + String(rest[rest.index(after: at)...])
    }
}
