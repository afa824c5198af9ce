// Previews over WebDAV (issue 35): `has-preview` read from PROPFIND answers, where the preview of
// a file is asked for (ownCloud / docfs serve, Nextcloud), and docfs serve making one for real.

import DocFSServe
import DocFSStore
@testable import DocFSStores
import Foundation
import Glibc
import Testing

@Suite("WebDAV previews")
struct WebDAVPreviewTests {
    @Test func hasPreviewIsReadInNextcloudsAndOwnCloudsNamespaces() throws {
        let body = """
            <?xml version="1.0"?>
            <d:multistatus xmlns:d="DAV:" xmlns:oc="http://owncloud.org/ns" xmlns:nc="http://nextcloud.org/ns">
              <d:response><d:href>/d/a.png</d:href>
                <d:propstat><d:prop><d:getcontentlength>3</d:getcontentlength><nc:has-preview>true</nc:has-preview></d:prop>
                  <d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
              <d:response><d:href>/d/b.png</d:href>
                <d:propstat><d:prop><d:getcontentlength>3</d:getcontentlength><oc:has-preview>1</oc:has-preview></d:prop>
                  <d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
              <d:response><d:href>/d/c.png</d:href>
                <d:propstat><d:prop><d:getcontentlength>3</d:getcontentlength><oc:has-preview>false</oc:has-preview></d:prop>
                  <d:status>HTTP/1.1 200 OK</d:status></d:propstat></d:response>
              <d:response><d:href>/d/d.png</d:href>
                <d:propstat><d:prop><d:getcontentlength>3</d:getcontentlength></d:prop><d:status>HTTP/1.1 200 OK</d:status></d:propstat>
                <d:propstat><d:prop><oc:has-preview>true</oc:has-preview></d:prop><d:status>HTTP/1.1 404 Not Found</d:status></d:propstat>
              </d:response>
            </d:multistatus>
            """
        let responses = try WebDAVMultistatus.parse(Data(body.utf8))
        #expect(responses.map(\.hasPreview) == [true, true, false, false])
        #expect(responses.map(\.previewFromNextcloud) == [true, false, false, false])
    }

    @Test func thePreviewIsAskedWhereEachServerGivesIt() async throws {
        let photo = try StorePath("/Photos/a b.png"), top = try StorePath("/a.jpg"), deeper = try StorePath("/2024/a b.jpg")
        try await withWebDAVStore("http://127.0.0.1:1/dav/") { store in
            #expect(store.previewURL(photo, side: 256)
                    == "http://127.0.0.1:1/dav/Photos/a%20b.png?preview=1&x=256&y=256&a=1")
        }
        try await withWebDAVStore("https://cloud.example.org/nc/remote.php/dav/files/me/Camera/") { store in
            // ownCloud's way until a listing says `has-preview` in Nextcloud's namespace.
            #expect(store.previewURL(top, side: 128).hasSuffix("/remote.php/dav/files/me/Camera/a.jpg?preview=1&x=128&y=128&a=1"))
            store.saidNextcloud.store(true, ordering: .relaxed)
            #expect(store.previewURL(deeper, side: 256)
                    == "https://cloud.example.org/nc/index.php/core/preview.png?file=%2FCamera%2F2024%2Fa%20b.jpg&x=256&y=256&a=1")
        }
    }

    @Test func docfsServeMakesPreviewsOfImagesAndListsWhichHaveOne() async throws {
        guard access("/usr/bin/gdk-pixbuf-thumbnailer", X_OK) == 0 else {
            print("SKIPPED: gdk-pixbuf-thumbnailer (libgdk-pixbuf2.0-bin) is not installed")
            return
        }
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try directory.write("photo.png", Self.png(width: 600, height: 300))
        try directory.write("notes.txt", "text")
        try directory.write("broken.png", "not an image")
        var configuration = WebDAVServerConfiguration(root: directory.path, host: "127.0.0.1", port: 0)
        configuration.previewCacheDirectory = directory.path + "-previews"
        defer { try? FileManager.default.removeItem(atPath: directory.path + "-previews") }
        let server = WebDAVServer(configuration: configuration, logger: testLogger)
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let task = Task {
            defer { continuation.finish() }
            try await server.run(onListening: { continuation.yield($0) })
        }
        defer { task.cancel() }
        var iterator = ports.makeAsyncIterator()
        let port = try #require(await iterator.next())
        try await withWebDAVStore("http://127.0.0.1:\(port)/") { store in
            #expect(store.capabilities.previews)
            let entries = try await store.list(.root, page: nil).entries
            #expect(Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0.hasPreview) })
                    == ["photo.png": true, "notes.txt": false, "broken.png": true])
            let photo = try StorePath("/photo.png"), notes = try StorePath("/notes.txt")
            let preview = try await store.preview(of: photo, side: 256)
            let bytes = [UInt8](preview)
            #expect(bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]))
            let width = bytes[16..<20].reduce(0) { $0 << 8 | Int($1) }
            #expect(width == 256, "a 600 px photo fits 256 px")
            // Kept: the same answer again, from the cache, one file per version and size.
            let again = try await store.preview(of: photo, side: 256)
            #expect(again == preview)
            let kept = FileManager.default.enumerator(atPath: directory.path + "-previews")?.compactMap { $0 as? String }
                .filter { $0.hasSuffix(".png") }
            #expect(kept?.count == 1)
            await #expect(throws: StoreError.self) { try await store.preview(of: notes, side: 256) }
            // A file the tool cannot read: no preview (404), remembered for this version.
            let broken = try StorePath("/broken.png")
            await #expect(throws: StoreError.notFound(broken)) { try await store.preview(of: broken, side: 256) }
            let marked = FileManager.default.enumerator(atPath: directory.path + "-previews")?.compactMap { $0 as? String }
                .filter { $0.hasSuffix(".unreadable") }
            #expect(marked?.count == 1)
            await #expect(throws: StoreError.notFound(broken)) { try await store.preview(of: broken, side: 256) }
        }
    }

    /// An RGB PNG of a gradient.
    static func png(width: Int, height: Int) -> [UInt8] {
        // Stored (uncompressed) deflate blocks inside a zlib stream: no zlib needed to make it.
        var raw: [UInt8] = []
        for y in 0..<height {
            raw.append(0)
            for x in 0..<width { raw += [UInt8(x % 256), UInt8(y % 256), UInt8((x + y) % 256)] }
        }
        var zlib: [UInt8] = [0x78, 0x01]
        var offset = 0
        while offset < raw.count {
            let count = min(65535, raw.count - offset)
            let last: UInt8 = offset + count == raw.count ? 1 : 0
            zlib += [last, UInt8(count & 0xFF), UInt8(count >> 8), UInt8(~count & 0xFF), UInt8((~count >> 8) & 0xFF)]
            zlib += raw[offset..<offset + count]
            offset += count
        }
        var a: UInt32 = 1, b: UInt32 = 0
        for byte in raw {
            a = (a + UInt32(byte)) % 65521
            b = (b + a) % 65521
        }
        let adler = b << 16 | a
        zlib += [UInt8(adler >> 24), UInt8(adler >> 16 & 0xFF), UInt8(adler >> 8 & 0xFF), UInt8(adler & 0xFF)]
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            let body = Array(type.utf8) + data
            var crc: UInt32 = 0xFFFF_FFFF
            for byte in body {
                crc ^= UInt32(byte)
                for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
            }
            crc ^= 0xFFFF_FFFF
            let length = UInt32(data.count)
            return [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + body
                + [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]
        }
        let header = [UInt8(width >> 24), UInt8(width >> 16 & 0xFF), UInt8(width >> 8 & 0xFF), UInt8(width & 0xFF),
                      UInt8(height >> 24), UInt8(height >> 16 & 0xFF), UInt8(height >> 8 & 0xFF), UInt8(height & 0xFF), 8, 2, 0, 0, 0]
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", header) + chunk("IDAT", zlib) + chunk("IEND", [])
    }
}
