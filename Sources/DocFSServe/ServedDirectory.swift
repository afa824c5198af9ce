// ServedDirectory: all file system access of `docfs serve`. Owns the resolved root, the
// "does this path stay inside the root" check (also through symlinks), stat -> FileInfo with
// its strong ETag, and the blocking operations (recursive delete and copy, temp files).
// Blocking calls run on NIO's thread pool through `blocking`, never on the cooperative pool.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import NIOCore
import NIOPosix

/// What a stat tells us about one entry.
struct FileInfo: Sendable {
    var isDirectory: Bool
    var isRegularFile: Bool
    var size: Int64
    var modificationSeconds: Int
    var modificationNanoseconds: Int
    var inode: UInt64
    var device: UInt64

    init(_ st: stat) {
        let type = st.st_mode & S_IFMT
        isDirectory = type == S_IFDIR
        isRegularFile = type == S_IFREG
        size = Int64(st.st_size)
        #if canImport(Darwin)
        modificationSeconds = Int(st.st_mtimespec.tv_sec)
        modificationNanoseconds = Int(st.st_mtimespec.tv_nsec)
        #else
        modificationSeconds = Int(st.st_mtim.tv_sec)
        modificationNanoseconds = Int(st.st_mtim.tv_nsec)
        #endif
        inode = UInt64(st.st_ino)
        device = UInt64(st.st_dev)
    }

    /// Strong ETag: a hash of (inode, size, mtime in ns). A PUT replaces the inode (rename),
    /// and any in-place write changes size or mtime, so the tag changes with the content.
    var etag: String {
        var bytes: [UInt8] = []
        for value in [inode, UInt64(bitPattern: size), UInt64(bitPattern: Int64(modificationSeconds)), UInt64(modificationNanoseconds)] {
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
        let digest = SHA256.hash(data: bytes)
        let hex = digest.prefix(12).map { byte in
            let s = String(byte, radix: 16)
            return s.count == 1 ? "0" + s : s
        }.joined()
        return "\"\(hex)\""
    }

    var lastModified: String { HTTPDate.rfc1123(seconds: modificationSeconds) }
}

/// A file descriptor that is closed when the last reference goes away.
/// `@unchecked Sendable`: the descriptor is immutable and only used with `pread`/`fstat`,
/// which are thread-safe; it is closed exactly once, in `deinit`.
final class OpenFile: @unchecked Sendable {
    let fd: Int32
    init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }
}

/// Runs blocking file system work on NIO's thread pool.
func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await NIOThreadPool.singleton.runIfActive(body)
}

/// Prefix of the temporary files PUT and COPY write before renaming into place; hidden from listings.
let temporaryNamePrefix = ".docfs-put-"

struct ServedDirectory: Sendable {
    /// The resolved (realpath) root.
    let root: String

    init(path: String) throws(DAVError) {
        guard let resolved = ServedDirectory.realPath(path) else {
            throw DAVError.errno(errno, "cannot serve \(path)")
        }
        var st = stat()
        guard stat(resolved, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw DAVError(.internalServerError, "\(path) is not a directory")
        }
        self.root = resolved
    }

    func path(_ davPath: DAVPath) -> String { davPath.fileSystemPath(root: root) }

    // MARK: Containment

    /// True when `path` resolves (through any symlinks) to the root or below it. For a path that
    /// does not exist yet, its nearest existing ancestor must be inside.
    func staysInside(_ path: String) -> Bool {
        var candidate = path
        while true {
            if let real = ServedDirectory.realPath(candidate) {
                return isInsideRoot(real)
            }
            let error = errno
            guard error == ENOENT || error == ENOTDIR else { return false }
            guard candidate != root, let slash = candidate.lastIndex(of: "/"), slash != candidate.startIndex else {
                return false
            }
            candidate = String(candidate[..<slash])
            if candidate.count < root.count { return false }
        }
    }

    func isInsideRoot(_ resolved: String) -> Bool {
        if root == "/" { return true }
        return resolved == root || resolved.hasPrefix(root + "/")
    }

    /// Throws 403 when the path escapes the root.
    func checkInside(_ davPath: DAVPath) throws(DAVError) {
        guard staysInside(path(davPath)) else {
            throw DAVError(.forbidden, "path leaves the served directory")
        }
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    // MARK: Stat

    /// stat (following symlinks); nil when the entry does not exist (ENOENT/ENOTDIR).
    static func info(_ path: String) throws(DAVError) -> FileInfo? {
        var st = stat()
        if stat(path, &st) == 0 { return FileInfo(st) }
        let error = errno
        if error == ENOENT || error == ENOTDIR { return nil }
        throw DAVError.errno(error, "stat")
    }

    /// lstat (not following symlinks); nil when the entry does not exist.
    static func linkInfo(_ path: String) throws(DAVError) -> FileInfo? {
        var st = stat()
        if lstat(path, &st) == 0 { return FileInfo(st) }
        let error = errno
        if error == ENOENT || error == ENOTDIR { return nil }
        throw DAVError.errno(error, "lstat")
    }

    static func isSymlink(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFLNK
    }

    /// The names in a directory (without `.`, `..` and our temporary files), in byte order.
    /// A name that is not valid UTF-8 is left out: repaired (U+FFFD for each bad byte) it would
    /// be a name that opens nothing, or another file's.
    static func names(in path: String) throws(DAVError) -> [String] {
        try rawNames(in: Array(path.utf8))
            .filter { !$0.starts(with: temporaryNamePrefix.utf8) }
            .compactMap { String(validating: $0, as: UTF8.self) }
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    /// The names in a directory as the file system has them (bytes), without `.` and `..`.
    private static func rawNames(in path: [UInt8]) throws(DAVError) -> [[UInt8]] {
        guard let dir = withCString(path, { opendir($0) }) else { throw DAVError.errno(errno, "opendir") }
        defer { closedir(dir) }
        var names: [[UInt8]] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix(while: { $0 != 0 })) }
            if name == Array(".".utf8) || name == Array("..".utf8) { continue }
            names.append(name)
        }
        return names
    }

    private static func withCString<T>(_ path: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
        (path + [0]).withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
        }
    }

    // MARK: Mutations (blocking)

    /// Removes a file, a symlink or a directory tree (never following symlinks).
    static func removeTree(_ path: String) throws(DAVError) {
        try removeTree(bytes: Array(path.utf8))
    }

    /// Works on bytes, so that every entry is removed under its exact name, UTF-8 or not.
    private static func removeTree(bytes path: [UInt8]) throws(DAVError) {
        var st = stat()
        guard withCString(path, { lstat($0, &st) }) == 0 else { throw DAVError.errno(errno, "lstat") }
        if st.st_mode & S_IFMT == S_IFDIR {
            for child in try rawNames(in: path) {
                try removeTree(bytes: path + [UInt8(ascii: "/")] + child)
            }
            guard withCString(path, { rmdir($0) }) == 0 else { throw DAVError.errno(errno, "rmdir") }
        } else {
            guard withCString(path, { unlink($0) }) == 0 else { throw DAVError.errno(errno, "unlink") }
        }
    }

    /// Creates an empty temporary file in `directory`; returns its path and descriptor.
    static func makeTemporaryFile(in directory: String) throws(DAVError) -> (String, Int32) {
        var template = Array((directory + "/" + temporaryNamePrefix + "XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw DAVError.errno(errno, "mkstemp") }
        let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        // mkstemp creates 0600; a served file should be readable like any other.
        _ = fchmod(fd, 0o644)
        return (path, fd)
    }

    static func writeAll(_ fd: Int32, _ buffer: ByteBuffer) throws(DAVError) {
        let failure: Int32 = buffer.withUnsafeReadableBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += n
            }
            return 0
        }
        if failure != 0 { throw DAVError.errno(failure, "write") }
    }

    /// Copies one regular file to `destination` through a temporary file and rename.
    static func copyFile(from source: String, to destination: String) throws(DAVError) {
        let input = open(source, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw DAVError.errno(errno, "open") }
        defer { close(input) }
        let directory = String(destination[..<(destination.lastIndex(of: "/") ?? destination.startIndex)])
        let (temporary, output) = try makeTemporaryFile(in: directory.isEmpty ? "/" : directory)
        var done = false
        defer {
            close(output)
            if !done { unlink(temporary) }
        }
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(input, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw DAVError.errno(errno, "read")
            }
            if n == 0 { break }
            var offset = 0
            while offset < n {
                let w = buffer.withUnsafeBytes { write(output, $0.baseAddress! + offset, n - offset) }
                if w < 0 {
                    if errno == EINTR { continue }
                    throw DAVError.errno(errno, "write")
                }
                offset += w
            }
        }
        guard rename(temporary, destination) == 0 else { throw DAVError.errno(errno, "rename") }
        done = true
    }

    /// Copies a file, symlink or directory. `recursive == false` copies a directory without members.
    static func copyTree(from source: String, to destination: String, recursive: Bool) throws(DAVError) {
        var st = stat()
        guard lstat(source, &st) == 0 else { throw DAVError.errno(errno, "lstat") }
        switch st.st_mode & S_IFMT {
        case S_IFDIR:
            guard mkdir(destination, 0o755) == 0 else { throw DAVError.errno(errno, "mkdir") }
            guard recursive else { return }
            for name in try names(in: source) {
                try copyTree(from: source + "/" + name, to: destination + "/" + name, recursive: true)
            }
        case S_IFREG:
            try copyFile(from: source, to: destination)
        case S_IFLNK:
            var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let n = readlink(source, &target, target.count - 1)
            guard n >= 0 else { throw DAVError.errno(errno, "readlink") }
            target[n] = 0
            guard symlink(&target, destination) == 0 else { throw DAVError.errno(errno, "symlink") }
        default:
            // Devices, sockets, FIFOs are not content; leave them out of a copy.
            return
        }
    }
}
