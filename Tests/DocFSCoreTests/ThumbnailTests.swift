@testable import DocFSCore
import DocFSStore
import DocFSTesting
@testable import DocFSThumbnails
import Foundation
import Glibc
import Testing

/// Thumbnails as the freedesktop standard names and tags them, checked against GLib itself, and
/// the core writing them from a store's previews without a download (issue 35).
@Suite("Thumbnails: named, tagged and written as file managers find them")
struct ThumbnailTests {
    /// A 1×1 RGB PNG.
    static let tinyPNG: [UInt8] = [137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82, 0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0,
                                   144, 119, 83, 222, 0, 0, 0, 12, 73, 68, 65, 84, 120, 156, 99, 248, 207, 192, 0, 0, 3, 1, 1, 0, 201,
                                   254, 146, 239, 0, 0, 0, 0, 73, 69, 78, 68, 174, 66, 96, 130]

    @Test func theURIIsEscapedAsGLibEscapesIt() {
        // `gio info` of this path says exactly this URI (GLib 2.74).
        #expect(ThumbnailFile.uri(ofPath: "/tmp/gu/IMG 003 & é#[x]%;?.png")
                == "file:///tmp/gu/IMG%20003%20&%20%C3%A9%23%5Bx%5D%25%3B%3F.png")
        #expect(ThumbnailFile.uri(ofPath: "/a/b-c_d.e~f!$'()*+,:=@") == "file:///a/b-c_d.e~f!$'()*+,:=@")
    }

    @Test func theNameIsTheMD5OfTheURI() {
        // The standard's own example.
        #expect(ThumbnailFile.name(forURI: "file:///home/jens/photos/me.png") == "c6ee772d9e49320e97ec29a7eb5b1697.png")
        #expect(ThumbnailFile.path(forURI: "file:///home/jens/photos/me.png", size: .large, cacheHome: "/c")
                == "/c/thumbnails/large/c6ee772d9e49320e97ec29a7eb5b1697.png")
    }

    @Test func theMTimeIsTheWholeSecondsOfStMtime() {
        #expect(ThumbnailFile.mtime(Timestamp(seconds: 1_700_000_000, nanoseconds: 999_999_999)) == 1_700_000_000)
        #expect(ThumbnailFile.mtime(Timestamp(seconds: -2, nanoseconds: 500_000_000)) == -2)
    }

    @Test func textChunksAreWrittenWithTheirCRCAndReplaceTheServers() throws {
        #expect(CRC32.checksum(Array("IEND".utf8)) == 0xAE42_6082)
        let server = try PNGText.replacingText(in: Self.tinyPNG, with: [("Thumb::URI", "file:///srv/a.png"), ("Thumb::Image::Width", "4000")])
        let tagged = try ThumbnailFile.tagged(server, uri: "file:///mnt/a%20b.png", mtime: 1_700_000_000, size: 1234)
        let text = try PNGText.textChunks(of: tagged)
        #expect(text == ["Thumb::URI": "file:///mnt/a%20b.png", "Thumb::MTime": "1700000000", "Thumb::Size": "1234",
                         "Software": "docfs", "Thumb::Image::Width": "4000"])
        // Every chunk whole, with a right CRC, IHDR first and IEND last.
        let chunks = try PNGText.chunks(of: tagged)
        #expect(chunks.first?.typeName == "IHDR" && chunks.last?.typeName == "IEND")
        var offset = 8
        while offset < tagged.count {
            let length = tagged[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            let crc = tagged[offset + 8 + length..<offset + 12 + length].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            #expect(crc == CRC32.checksum(Array(tagged[offset + 4..<offset + 8 + length])))
            offset += 12 + length
        }
        #expect(throws: PNGText.Failure.notPNG) { try ThumbnailFile.tagged([0xFF, 0xD8, 0xFF, 0xE0], uri: "u", mtime: 0, size: 0) }
        #expect(throws: PNGText.Failure.notPNG) { try ThumbnailFile.tagged(Array(Self.tinyPNG.dropLast(5)), uri: "u", mtime: 0, size: 0) }
    }

    @Test func gioTakesTheThumbnailForValid() throws {
        guard access("/usr/bin/gio", X_OK) == 0 else {
            print("SKIPPED: gio (libglib2.0-bin) is not installed")
            return
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("docfs-thumb-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let folder = directory + "/photos & more"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let file = folder + "/IMG é 1.png"
        #expect(FileManager.default.createFile(atPath: file, contents: Data(repeating: 7, count: 321)))
        var times = [timespec(tv_sec: 1_700_000_123, tv_nsec: 456_000_000), timespec(tv_sec: 1_700_000_123, tv_nsec: 456_000_000)]
        #expect(utimensat(AT_FDCWD, file, &times, 0) == 0)
        let cacheHome = directory + "/cache"
        let uri = ThumbnailFile.uri(ofPath: file)
        let path = ThumbnailFile.path(forURI: uri, size: .large, cacheHome: cacheHome)
        try ThumbnailFile.write(try ThumbnailFile.tagged(Self.tinyPNG, uri: uri, mtime: 1_700_000_123, size: 321), to: path)
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(ThumbnailFile.isValid(at: path, uri: uri, mtime: 1_700_000_123))
        #expect(!ThumbnailFile.isValid(at: path, uri: uri, mtime: 1_700_000_124))

        let output = try Self.gioInfo(file, cacheHome: cacheHome)
        #expect(output.contains("uri: \(uri)\n"), "\(output)")
        #expect(output.contains("thumbnail::path: \(path)\n"), "\(output)")
        #expect(output.contains("thumbnail::is-valid: TRUE"), "\(output)")

        // A failure marker, as GNOME leaves one, goes; GIO then reports no failure.
        let fail = cacheHome + "/thumbnails/fail/gnome-thumbnail-factory/" + ThumbnailFile.name(forURI: uri)
        try ThumbnailFile.write(try ThumbnailFile.tagged(Self.tinyPNG, uri: uri, mtime: 1_700_000_123, size: 321), to: fail)
        try FileManager.default.removeItem(atPath: path)
        #expect(try Self.gioInfo(file, cacheHome: cacheHome).contains("thumbnail::failed: TRUE"))
        #expect(ThumbnailFile.removeFailureMarkers(forURI: uri, cacheHome: cacheHome) == 1)
        #expect(!(try Self.gioInfo(file, cacheHome: cacheHome).contains("thumbnail::failed: TRUE")))
    }

    static func gioInfo(_ file: String, cacheHome: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/gio")
        process.arguments = ["info", "-a", "thumbnail::path,thumbnail::is-valid,thumbnail::failed", file]
        process.environment = ProcessInfo.processInfo.environment.merging(["XDG_CACHE_HOME": cacheHome]) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    @Test func aListingWritesThumbnailsFromPreviewsAndDownloadsNothing() async throws {
        let store = InMemoryStore(previews: true)
        store.addDirectory("/Photos")
        for name in ["a.png", "b.jpg", "c.png"] { store.addFile("/Photos/" + name, [UInt8](repeating: 1, count: 500), modified: 1_700_000_000.5) }
        store.addFile("/Photos/notes.txt", [1, 2, 3])
        store.addPreview("/Photos/a.png", Self.tinyPNG)
        store.addPreview("/Photos/b.jpg", Self.tinyPNG)
        store.addPreview("/Photos/notes.txt", Self.tinyPNG)  // a document: left to the file manager
        let fixture = try CoreFixture(store: store)
        let cacheHome = fixture.directory + "/xdg-cache"
        let thumbnails = Thumbnails.start(for: fixture.fs, store: store, catalog: fixture.catalog,
                                          settings: Thumbnails.Settings(mountPoint: "/mnt/photos", cacheHome: cacheHome), logger: fixture.fs.logger)
        let folder = try await fixture.lookup("Photos")
        _ = try await fixture.fs.children(of: folder.inode)
        try await eventually("two thumbnails written") { thumbnails.written == 2 }
        #expect(store.previewsAsked == 2)
        #expect(store.totalReads == 0)
        for name in ["a.png", "b.jpg"] {
            let uri = "file:///mnt/photos/Photos/" + name
            #expect(ThumbnailFile.isValid(at: ThumbnailFile.path(forURI: uri, size: .large, cacheHome: cacheHome), uri: uri, mtime: 1_700_000_000))
        }
        // Listed again: each thumbnail is valid, no preview is asked for again.
        try await fixture.fs.enumerator.refresh(try fixture.fs.item(folder.inode))
        try await eventually("the second listing considered") { thumbnails.considered == 2 }
        await thumbnails.waitUntilIdle()
        #expect(store.previewsAsked == 2)
        #expect(thumbnails.written == 2)

        // A file GNOME's thumbnailer was refused (a failure marker) becomes local: the marker goes.
        let uri = "file:///mnt/photos/Photos/c.png"
        let marker = cacheHome + "/thumbnails/fail/gnome-thumbnail-factory/" + ThumbnailFile.name(forURI: uri)
        try ThumbnailFile.write(Self.tinyPNG, to: marker)
        try await fixture.fs.pin(try await fixture.lookup("Photos/c.png").inode)
        try await eventually("the failure marker removed") { !FileManager.default.fileExists(atPath: marker) }
    }
}
