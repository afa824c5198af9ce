import DocFSStore
import Foundation

/// A frozen copy of the content for an upload, so the store never gets a torn object with a
/// valid ETag. A reflink, else `copy_file_range`, else a read/write loop.
enum Snapshot {
    /// `_IOW(0x94, 9, int)`: clone the whole file.
    private static let ficlone: UInt = 0x4004_9409

    private typealias CopyFileRange = @convention(c) (Int32, UnsafeMutablePointer<off_t>?, Int32, UnsafeMutablePointer<off_t>?, Int, UInt32) -> Int
    /// Swift's glibc module does not export it (`_GNU_SOURCE`).
    nonisolated(unsafe) private static let copyFileRange: CopyFileRange? =
        dlsym(UnsafeMutableRawPointer(bitPattern: 0), "copy_file_range").map { unsafeBitCast($0, to: CopyFileRange.self) }

    static func copy(from source: Int32, length: Int64, to path: String) throws(FSError) {
        unlink(path)
        let target = CacheDirectory.creating(path) { open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600) }
        guard target >= 0 else { throw .local(errno: errno, "cannot create upload snapshot \(path): \(String(cString: strerror(errno)))") }
        defer { close(target) }
        if ioctl(target, ficlone, source) == 0, ftruncate(target, off_t(length)) == 0 { return }
        var sourceOffset: off_t = 0
        var targetOffset: off_t = 0
        var kernelCopy = copyFileRange != nil
        while sourceOffset < length {
            let chunk = Int(min(length - Int64(sourceOffset), 1 << 30))
            if kernelCopy {
                let n = copyFileRange!(source, &sourceOffset, target, &targetOffset, chunk, 0)
                if n > 0 { continue }
                if n == 0 { break }
                if errno == EINTR { continue }
                guard errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL else {
                    throw .local(errno: errno, "copying to the upload snapshot: \(String(cString: strerror(errno)))")
                }
                kernelCopy = false
            }
            var buffer = [UInt8](repeating: 0, count: min(chunk, 1 << 20))
            let n = buffer.withUnsafeMutableBytes { pread(source, $0.baseAddress, $0.count, sourceOffset) }
            if n < 0 {
                if errno == EINTR { continue }
                throw .local(errno: errno, "reading for the upload snapshot: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            if let code = buffer.withUnsafeBytes({ LocalCopy.writeAll(target, UnsafeRawBufferPointer(rebasing: $0[..<n]), at: Int64(targetOffset)) }) {
                throw .local(errno: code, "writing the upload snapshot: \(String(cString: strerror(code)))")
            }
            sourceOffset += off_t(n)
            targetOffset += off_t(n)
        }
        // The copy's length wins (a sparse tail reads as zeros).
        guard ftruncate(target, off_t(length)) == 0 else {
            throw .local(errno: errno, "sizing the upload snapshot: \(String(cString: strerror(errno)))")
        }
    }
}
