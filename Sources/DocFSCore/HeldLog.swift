import DocFSStore
import Foundation

/// Which bytes a changed sparse copy holds, so after a kill the holes are fetched, not zeros.
/// Each record is appended after its bytes landed: it never claims a missing byte. Not flushed,
/// like the copy; used only under the copy's `landing` lock.
final class HeldLog {
    let path: String
    private var descriptor: Int32

    static func path(of copyPath: String) -> String { copyPath + suffix }

    private static let suffix = ".held"

    static func owner(ofFileNamed name: String) -> String? {
        name.hasSuffix(suffix) ? String(name.dropLast(suffix.count)) : nil
    }

    init(copyPath: String, holding held: ByteRangeSet) throws(FSError) {
        path = Self.path(of: copyPath)
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw .local(errno: errno, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        for range in held.ranges { try append(range) }
    }

    func append(_ range: ByteRange) throws(FSError) {
        guard !range.isEmpty else { return }
        var record = [range.lowerBound.littleEndian, (range.upperBound - range.lowerBound).littleEndian]
        let size = MemoryLayout<Int64>.size * 2
        let written = record.withUnsafeMutableBytes { Glibc.write(descriptor, $0.baseAddress!, size) }
        guard written == size else {
            throw .local(errno: written < 0 ? errno : EIO, "cannot record held bytes in \(path)")
        }
    }

    func remove() {
        close()
        unlink(path)
    }

    private func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }

    /// The log stays on disk for the next mount.
    deinit { close() }

    /// A torn last record is ignored.
    static func read(copyPath: String) -> ByteRangeSet? {
        guard let data = FileManager.default.contents(atPath: path(of: copyPath)) else { return nil }
        var held = ByteRangeSet()
        let size = MemoryLayout<Int64>.size
        data.withUnsafeBytes { raw in
            var offset = 0
            while offset + 2 * size <= raw.count {
                let lower = Int64(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: Int64.self))
                let count = Int64(littleEndian: raw.loadUnaligned(fromByteOffset: offset + size, as: Int64.self))
                if lower >= 0, count > 0, lower <= .max - count { held.insert(lower..<(lower + count)) }
                offset += 2 * size
            }
        }
        return held
    }

    static func remove(copyPath: String) {
        unlink(path(of: copyPath))
    }
}
