import DocFSStore
import Foundation

/// Which bytes a changed, still sparse local copy holds, kept next to it on disk
/// (`<copy>.held`) so that a restart after a `kill -9` can tell the user's bytes and the
/// fetched ones from the holes.
///
/// A write into a sparse copy lands at once: only the ranges it does not overwrite are fetched,
/// and only before the commit (see `LocalCopy.writeLocal`). Until the copy is complete, its
/// file alone cannot say which zeros are holes, so a crash in between would leave an unsaved
/// copy with zeros where the store's bytes belong. The log says where they belong: the next
/// mount fetches them from the version the copy started from (`UnfilledCopies`), and only if
/// that version is gone do they stay zeros.
///
/// An append-only file of (offset, length) pairs, little-endian `Int64`s, each appended after
/// its bytes landed in the copy: a record never claims a byte the copy lacks. Not flushed to
/// disk, as the copy is not (`SessionMarker` distrusts both after a machine crash). Used
/// only under the copy's `landing` lock.
final class HeldLog {
    let path: String
    private var descriptor: Int32

    /// The log of the copy at `copyPath`.
    static func path(of copyPath: String) -> String { copyPath + suffix }

    private static let suffix = ".held"

    /// The name of the copy whose log is the cache's file `name`; nil if it is no log.
    static func owner(ofFileNamed name: String) -> String? {
        name.hasSuffix(suffix) ? String(name.dropLast(suffix.count)) : nil
    }

    /// Starts the log of the copy at `copyPath` with what it holds now.
    init(copyPath: String, holding held: ByteRangeSet) throws(FSError) {
        path = Self.path(of: copyPath)
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw .local(errno: errno, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        for range in held.ranges { try append(range) }
    }

    /// Records that `range` of the copy holds its bytes now.
    func append(_ range: ByteRange) throws(FSError) {
        guard !range.isEmpty else { return }
        var record = [range.lowerBound.littleEndian, (range.upperBound - range.lowerBound).littleEndian]
        let size = MemoryLayout<Int64>.size * 2
        let written = record.withUnsafeMutableBytes { Glibc.write(descriptor, $0.baseAddress!, size) }
        guard written == size else {
            throw .local(errno: written < 0 ? errno : EIO, "cannot record held bytes in \(path)")
        }
    }

    /// The copy is complete (or gone): the log is not needed any more.
    func remove() {
        close()
        unlink(path)
    }

    private func close() {
        if descriptor >= 0 { Glibc.close(descriptor) }
        descriptor = -1
    }

    /// The last holder let go: the log stays on disk (the copy stays for the next mount).
    deinit { close() }

    /// What the log of the copy at `copyPath` says it holds; nil when there is no log (the copy
    /// was complete, or never changed while sparse). A torn last record is ignored.
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

    /// Deletes the log of the copy at `copyPath`, if any.
    static func remove(copyPath: String) {
        unlink(path(of: copyPath))
    }
}
