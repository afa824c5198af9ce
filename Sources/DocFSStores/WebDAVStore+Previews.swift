// WebDAVStore+Previews: thumbnails made by the server, so a placeholder of a photo or a video
// shows one without its content being downloaded. Asked for only for entries whose listing said
// `has-preview` (Nextcloud's and ownCloud's property, which `docfs serve` answers too): a server
// that ignores a preview query would send the whole file, and that must never be the cost.
//
// Two ways to ask, by server:
// - ownCloud and `docfs serve`: `GET <file URL>?preview=1&x=S&y=S&a=1` (ownCloud 10's WebDAV preview);
// - Nextcloud (a listing said `has-preview` in its namespace, and the store URL is its
//   `/remote.php/dav/files/USER/`): `GET /index.php/core/preview.png?file=PATH&x=S&y=S&a=1`.
// The answer must be an image (`Content-Type: image/*`) of at most `maximumPreviewBytes`.

import DocFSStore
import Foundation
import Synchronization

/// The `has-preview` property: where it lives, and how the PROPFIND asks for it.
enum PreviewProperty {
    static let nextcloud = "http://nextcloud.org/ns"
    static let owncloud = "http://owncloud.org/ns"
    static let namespaces: Set<String> = [nextcloud, owncloud]
    static let declarations = "xmlns:nc=\"\(nextcloud)\" xmlns:oc=\"\(owncloud)\""
    static let propfindNames = "<nc:has-preview/><oc:has-preview/>"
}

extension WebDAVStore {
    /// The largest preview accepted: a thumbnail of 256 px is tens of KiB; more is not one.
    static let maximumPreviewBytes = 1 << 20

    public func preview(of path: StorePath, side: Int) async throws(StoreError) -> Data {
        let side = max(1, min(side, 1024))
        let url = previewURL(path, side: side)
        let answer = try await transport.metadata(.GET, url: url, path: path, headers: ["Accept": "image/png, image/*"], body: nil,
                                                  timeout: Self.metadataTimeout, maximumBodyBytes: Self.maximumPreviewBytes)
        guard answer.status == 200 else {
            if answer.status == 404 { throw .notFound(path) }
            throw answer.error(method: "GET preview", path: path)
        }
        let type = answer.headers.first(name: "Content-Type")?.lowercased() ?? ""
        guard type.hasPrefix("image/") else {
            throw .protocolError("GET preview of \(path): answered \(type.isEmpty ? "no Content-Type" : type), not an image")
        }
        return answer.body
    }

    /// Where the preview of `path` is asked for (see the file's header).
    func previewURL(_ path: StorePath, side: Int) -> String {
        let size = "x=\(side)&y=\(side)&a=1"
        if saidNextcloud.load(ordering: .relaxed), let user = Self.nextcloudUserRoot(baseComponents) {
            let prefix = user.prefix.isEmpty ? "" : "/" + user.prefix.map { PercentEncoding.encode($0) }.joined(separator: "/")
            let file = "/" + (user.rest + path.components).joined(separator: "/")
            return origin + prefix + "/index.php/core/preview.png?file=" + PercentEncoding.encode(file) + "&" + size
        }
        return url(path) + "?preview=1&" + size
    }

    /// A Nextcloud store URL `[PREFIX/]remote.php/dav/files/USER/[REST]`: the components before
    /// `remote.php` (a Nextcloud installed under a path) and those after the user's root.
    static func nextcloudUserRoot(_ components: [String]) -> (prefix: [String], rest: [String])? {
        guard let index = components.firstIndex(of: "remote.php"), components.count >= index + 4,
              components[index + 1] == "dav", components[index + 2] == "files" else { return nil }
        return (Array(components[..<index]), Array(components[(index + 4)...]))
    }
}
