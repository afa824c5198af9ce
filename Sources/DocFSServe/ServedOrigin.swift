// ServedOrigin: who a request must be addressed to. A web page a user visits can point a DNS
// name at 127.0.0.1 (DNS rebinding) and then talk to `docfs serve` as a "same origin" page;
// the one thing it cannot forge is the `Host` header, which carries its own name. So `Host`
// must name this server: a loopback name or the `--host` address, with the bound port. The
// `Destination` of COPY and MOVE, when it is an absolute URL, must name the same origin too
// (RFC 4918 §9.8.5: another server is 502). Behind a reverse proxy or a port forward the
// public name is given with `--allow-host NAME[:PORT]` (without a port: any port).

public struct ServedOrigin: Sendable {
    /// "http" or "https".
    let scheme: String
    /// Host names (lowercased, IPv6 without brackets) that name this server.
    let names: Set<String>
    /// Bound to every address (0.0.0.0, ::): any IP literal names us (it cannot be rebound).
    let acceptsAnyAddressLiteral: Bool
    /// Further names (`--allow-host`), each with its port or nil for any port.
    let allowed: [(host: String, port: Int?)]

    static let loopbackNames: Set<String> = ["localhost", "127.0.0.1", "::1", "localhost.localdomain"]

    init(scheme: String, host: String, allowedHosts: [String] = []) {
        self.scheme = scheme
        self.allowed = allowedHosts.compactMap { Self.authority($0) }
        let bound = Self.unbracketed(host.lowercased())
        var names = Self.loopbackNames
        names.insert(bound)
        self.names = names
        self.acceptsAnyAddressLiteral = bound == "0.0.0.0" || bound == "::" || bound.isEmpty
    }

    /// True when `text` is a usable `--allow-host` value (`name` or `name:port`).
    public static func isValidAllowedHost(_ text: String) -> Bool { authority(text) != nil }

    /// True when `host` is a loopback address or name (no authentication needed by default there).
    public static func isLoopback(_ host: String) -> Bool {
        let name = unbracketed(host.lowercased())
        if loopbackNames.contains(name) { return true }
        if let octets = ipv4(name) { return octets[0] == 127 }
        return false
    }

    /// Throws 421 unless `header` (a `Host` value) names this server on `port`.
    func checkHost(_ header: String?, port: Int) throws(DAVError) {
        guard let header, let authority = Self.authority(header), names(authority, port: port) else {
            throw DAVError(.init(code: 421, reasonPhrase: "Misdirected Request"), "Host does not name this server")
        }
    }

    /// Throws 502 when a `Destination` URL names another origin (a path alone is this origin).
    func checkDestination(_ header: String, port: Int) throws(DAVError) {
        let value = header.trimmingSpaces
        guard let schemeEnd = value.firstRange(of: "://") else { return }
        let scheme = value[..<schemeEnd.lowerBound].lowercased()
        let rest = value[schemeEnd.upperBound...]
        let authorityText = rest.prefix(while: { $0 != "/" && $0 != "?" && $0 != "#" })
        guard scheme == self.scheme, let authority = Self.authority(authorityText), names(authority, port: port) else {
            throw DAVError(.badGateway, "Destination names another server")
        }
    }

    private func names(_ authority: (host: String, port: Int?), port: Int) -> Bool {
        let defaultPort = scheme == "https" ? 443 : 80
        if allowed.contains(where: { $0.host == authority.host && ($0.port == nil || $0.port == (authority.port ?? defaultPort)) }) {
            return true
        }
        guard (authority.port ?? defaultPort) == port else { return false }
        if names.contains(authority.host) { return true }
        if Self.isLoopback(authority.host) { return true }
        return acceptsAnyAddressLiteral && (Self.ipv4(authority.host) != nil || authority.host.contains(":"))
    }

    /// `host[:port]` or `[v6]:port` -> (lowercased host without brackets, port). Nil when malformed
    /// (userinfo, empty host, a port that is not a number in 1...65535, stray characters).
    static func authority(_ text: some StringProtocol) -> (host: String, port: Int?)? {
        let value = String(text.trimmingSpaces).lowercased()
        guard !value.isEmpty, !value.contains("@"), value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        var host: Substring
        var portText: Substring?
        if value.hasPrefix("[") {
            guard let close = value.firstIndex(of: "]") else { return nil }
            host = value[value.index(after: value.startIndex)..<close]
            let after = value[value.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portText = after.dropFirst()
            }
            guard host.contains(":") else { return nil }
        } else {
            let parts = value.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { return nil }
            host = parts[0]
            portText = parts.count == 2 ? parts[1] : nil
        }
        guard !host.isEmpty else { return nil }
        var port: Int?
        if let portText {
            guard !portText.isEmpty, portText.count <= 5, portText.allSatisfy(\.isASCIIDigit), let number = Int(portText), (1...65535).contains(number) else {
                return nil
            }
            port = number
        }
        return (String(host), port)
    }

    static func unbracketed(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }

    /// The four octets of a dotted-quad IPv4 address.
    static func ipv4(_ text: String) -> [Int]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var octets: [Int] = []
        for part in parts {
            guard !part.isEmpty, part.count <= 3, part.allSatisfy(\.isASCIIDigit), let value = Int(part), value <= 255 else { return nil }
            octets.append(value)
        }
        return octets
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
