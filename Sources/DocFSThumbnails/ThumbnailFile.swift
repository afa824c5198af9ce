// Thumbnails as the freedesktop standard wants them, so file managers find them before running a
// thumbnailer. Written atomically; tested against GIO.

import Crypto
import DocFSCore
import DocFSStore
import Foundation

public enum ThumbnailFile {
    public enum Size: String, Sendable, CaseIterable {
        case normal
        case large
        public var pixels: Int { self == .normal ? 128 : 256 }
    }

    public static let software = "docfs"

    /// As `g_filename_to_uri` encodes it: a thumbnail is found by the MD5 of exactly this.
    public static func uri(ofPath path: String) -> String {
        var uri = "file://"
        for byte in path.utf8 {
            if isKeptInURI(byte) {
                uri.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                uri += "%" + hexDigit(byte >> 4) + hexDigit(byte & 0xF)
            }
        }
        return uri
    }

    private static func isKeptInURI(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!$&'()*+,-./:=@_~".utf8.contains(byte)
        }
    }

    private static func hexDigit(_ value: UInt8) -> String {
        String(UnicodeScalar(value < 10 ? value + 48 : value + 55))
    }

    public static func name(forURI uri: String) -> String {
        Insecure.MD5.hash(data: Array(uri.utf8)).map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined() + ".png"
    }

    public static func path(forURI uri: String, size: Size, cacheHome: String) -> String {
        cacheHome + "/thumbnails/" + size.rawValue + "/" + name(forURI: uri)
    }

    /// Whole seconds, as `tv_sec`.
    public static func mtime(_ modified: Timestamp) -> Int64 { modified.parts.seconds }

    /// Replaces chunks of the same keywords. Throws `.notPNG` for anything but a whole PNG.
    public static func tagged(_ png: [UInt8], uri: String, mtime: Int64, size: Int64) throws(PNGText.Failure) -> [UInt8] {
        try PNGText.replacingText(in: png, with: [("Thumb::URI", uri), ("Thumb::MTime", String(mtime)),
                                                 ("Thumb::Size", String(size)), ("Software", software)])
    }

    public static func isValid(at path: String, uri: String, mtime: Int64) -> Bool {
        guard let data = FileManager.default.contents(atPath: path),
              let text = try? PNGText.textChunks(of: Array(data)) else { return false }
        return text["Thumb::URI"] == uri && text["Thumb::MTime"] == String(mtime)
    }

    /// Atomically, making folders (0700) as needed.
    public static func write(_ bytes: [UInt8], to path: String) throws(FSError) {
        let folder = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw .io("cannot make \(folder): \(error)")
        }
        let temporary = folder + "/.docfs-" + UUID().uuidString + ".png"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("cannot write \(temporary): errno \(errno)") }
        var offset = 0
        var failure: Int32 = 0
        bytes.withUnsafeBytes { raw in
            while offset < raw.count {
                let n = Foundation.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                offset += n
            }
        }
        close(fd)
        guard failure == 0, rename(temporary, path) == 0 else {
            let code = failure == 0 ? errno : failure
            unlink(temporary)
            throw .io("cannot write \(path): errno \(code)")
        }
    }

    /// So a thumbnailer refused while it was a placeholder is tried again. Returns how many went.
    @discardableResult
    public static func removeFailureMarkers(forURI uri: String, cacheHome: String) -> Int {
        let fail = cacheHome + "/thumbnails/fail"
        guard let applications = try? FileManager.default.contentsOfDirectory(atPath: fail) else { return 0 }
        let name = name(forURI: uri)
        var removed = 0
        for application in applications where unlink(fail + "/" + application + "/" + name) == 0 {
            removed += 1
        }
        return removed
    }
}

public enum PNGText {
    public enum Failure: Error, Equatable {
        case notPNG
    }

    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    public static func isPNG(_ bytes: [UInt8]) -> Bool { bytes.starts(with: signature) }

    struct Chunk {
        var type: [UInt8]
        var data: ArraySlice<UInt8>
        var typeName: String { String(decoding: type, as: UTF8.self) }
        var textKeyword: String? {
            guard ["tEXt", "zTXt", "iTXt"].contains(typeName), let end = data.firstIndex(of: 0) else { return nil }
            return String(decoding: data[data.startIndex..<end], as: UTF8.self)
        }
    }

    static func chunks(of png: [UInt8]) throws(Failure) -> [Chunk] {
        guard isPNG(png) else { throw .notPNG }
        var chunks: [Chunk] = []
        var offset = signature.count
        while offset < png.count {
            guard offset + 12 <= png.count else { throw .notPNG }
            let length = png[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            guard length <= png.count - offset - 12 else { throw .notPNG }
            let type = Array(png[offset + 4..<offset + 8])
            chunks.append(Chunk(type: type, data: png[offset + 8..<offset + 8 + length]))
            offset += 12 + length
            if type == Array("IEND".utf8) { break }
        }
        guard chunks.first?.typeName == "IHDR", chunks.last?.typeName == "IEND" else { throw .notPNG }
        return chunks
    }

    public static func textChunks(of png: [UInt8]) throws(Failure) -> [String: String] {
        var text: [String: String] = [:]
        for chunk in try chunks(of: png) where chunk.typeName == "tEXt" {
            guard let end = chunk.data.firstIndex(of: 0) else { continue }
            let keyword = String(chunk.data[chunk.data.startIndex..<end].map { Character(Unicode.Scalar($0)) })
            text[keyword] = String(chunk.data[(end + 1)...].map { Character(Unicode.Scalar($0)) })
        }
        return text
    }

    /// Keywords and texts must be Latin-1.
    public static func replacingText(in png: [UInt8], with entries: [(keyword: String, text: String)]) throws(Failure) -> [UInt8] {
        let keywords = Set(entries.map(\.keyword))
        var out = signature
        for chunk in try chunks(of: png) {
            if let keyword = chunk.textKeyword, keywords.contains(keyword) { continue }
            append(chunk.type, chunk.data, to: &out)
            if chunk.typeName == "IHDR" {
                for entry in entries {
                    let data = latin1(entry.keyword) + [0] + latin1(entry.text)
                    append(Array("tEXt".utf8), data[...], to: &out)
                }
            }
        }
        return out
    }

    private static func latin1(_ text: String) -> [UInt8] {
        text.unicodeScalars.map { $0.value < 256 ? UInt8($0.value) : UInt8(ascii: "?") }
    }

    private static func append(_ type: [UInt8], _ data: ArraySlice<UInt8>, to out: inout [UInt8]) {
        let length = UInt32(data.count)
        out += [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)]
        out += type
        out += data
        let crc = CRC32.checksum(type + Array(data))
        out += [UInt8(crc >> 24), UInt8(crc >> 16 & 0xFF), UInt8(crc >> 8 & 0xFF), UInt8(crc & 0xFF)]
    }
}

enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
