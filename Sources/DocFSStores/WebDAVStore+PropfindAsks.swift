// WebDAVStore+PropfindAsks: a PROPFIND asks only for what the server can answer. docfs's dead
// properties are asked for until the server refuses to keep them (its first PROPPATCH,
// WebDAVDeadProperties.swift), and `has-preview` until a file is listed without it (a server
// that makes previews answers it of every file, true or false). A server that has neither
// (`rclone serve webdav`, nginx) answers each property asked with a 404 block per entry: its
// listing of 5,000 files was 3.5 MB, of which docfs reads 1.6.

import DocFSStore
import Synchronization

/// What this mount learnt a PROPFIND need not ask.
final class PropfindAsks: Sendable {
    /// Whether the server answers `has-preview`: nil until a file was listed.
    private let previews = Mutex<Bool?>(nil)

    /// Learns from one entry of an answer: a file with no `has-preview` (not even false) is a
    /// server without previews, unless another file had it.
    func saw(_ response: WebDAVResponse) {
        guard !response.isCollection, response.status == nil, !response.isLockNull else { return }
        previews.withLock { previews in
            if previews == true { return }
            previews = response.answersPreview
        }
    }

    var asksPreviews: Bool { previews.withLock { $0 } != false }
}

extension WebDAVStore {
    /// The body of a PROPFIND of entries' kinds, sizes, times and versions, with docfs's dead
    /// properties and `has-preview` unless the server showed it has none; `lockDiscovery` adds
    /// the locks held (asked under docfs's own lock).
    func propfindBody(lockDiscovery: Bool = false) -> String {
        let posix = deadProperties.decided.withLock { $0 } != false
        return Self.propfindBody(posix: posix, previews: propfindAsks.asksPreviews, lockDiscovery: lockDiscovery)
    }

    static func propfindBody(posix: Bool, previews: Bool, lockDiscovery: Bool) -> String {
        var namespaces = "xmlns:D=\"DAV:\""
        var names = "<D:resourcetype/><D:getcontentlength/><D:getlastmodified/><D:getetag/>"
        if posix {
            namespaces += " xmlns:P=\"\(PosixProperties.namespace)\""
            names += PosixProperties.propfindNames
        }
        if previews {
            namespaces += " " + PreviewProperty.declarations
            names += PreviewProperty.propfindNames
        }
        if lockDiscovery { names += "<D:lockdiscovery/>" }
        return "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:propfind \(namespaces)><D:prop>\(names)</D:prop></D:propfind>"
    }
}
