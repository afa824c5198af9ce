// ServedDirectory: all file system access of `docfs serve`. Owns a descriptor of the root, and
// every operation starts from it: the parent of a request path is opened with BeneathWalk
// (`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or an `openat(O_NOFOLLOW)` walk), and the
// last name is acted on with `fstatat(AT_SYMLINK_NOFOLLOW)`, `openat(O_NOFOLLOW)`, `renameat`,
// `linkat`, `unlinkat`, `mkdirat` on that descriptor. There is no "check the path, then use the
// path string" anywhere, so a client racing a MOVE against a PUT or DELETE, or anyone swapping
// a directory for a symlink, cannot make an operation land outside the root.
// Symlinks in the served tree are never followed: they are left out of listings and copies,
// and a request through one is refused (403). DELETE removes a symlink itself, never its target.
// Blocking calls run on NIO's thread pool through `blocking`, never on the cooperative pool.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import DocFSStore
import NIOCore
import NIOPosix

/// What a stat tells us about one entry.
struct FileInfo: Sendable {
    var isDirectory: Bool
    var isRegularFile: Bool
    var isSymlink: Bool
    var size: Int64
    var modificationSeconds: Int
    var modificationNanoseconds: Int
    var inode: UInt64
    var device: UInt64

    init(_ st: stat) {
        let type = st.st_mode & S_IFMT
        isDirectory = type == S_IFDIR
        isRegularFile = type == S_IFREG
        isSymlink = type == S_IFLNK
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

/// One entry of a directory listing.
struct DirectoryEntry: Sendable {
    let name: String
    let info: FileInfo
}

struct ServedDirectory: Sendable {
    /// The root as given (for messages only: nothing is ever opened by this string again).
    let root: String
    /// The root directory; every access starts here.
    let rootDirectory: OpenFile

    init(path: String) throws(DAVError) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw DAVError.errno(errno, "cannot serve \(path)") }
        self.root = path
        self.rootDirectory = OpenFile(fd: fd)
    }

    // MARK: Walking

    /// Opens the directory at `davPath`. ENOENT/ENOTDIR -> 404 or 409 by the caller's choice;
    /// a symlink on the way -> 403.
    func openDirectory(_ davPath: DAVPath) throws(DAVError) -> OpenFile {
        switch BeneathWalk.openDirectory(below: rootDirectory.fd, davPath.components) {
        case .success(let fd): return OpenFile(fd: fd)
        case .failure(let failure): throw Self.walkError(failure.errno)
        }
    }

    /// Opens the parent of `davPath` (not the root itself). A missing parent is 409, as RFC 4918
    /// asks of PUT, MKCOL, COPY and MOVE targets.
    func openParent(_ davPath: DAVPath) throws(DAVError) -> OpenFile {
        do {
            return try openDirectory(davPath.parent)
        } catch let error where error.status == .notFound {
            throw DAVError(.conflict, "parent collection does not exist")
        }
    }

    static func walkError(_ code: Int32) -> DAVError {
        switch code {
        case ENOENT, ENOTDIR: return DAVError(.notFound, "no such collection")
        case ELOOP: return DAVError(.forbidden, "symlinks are not followed")
        case EXDEV: return DAVError(.forbidden, "path leaves the served directory")
        default: return DAVError.errno(code, "open")
        }
    }

    // MARK: Stat

    /// What is at `davPath` (symlinks not followed); nil when nothing is there.
    func info(_ davPath: DAVPath) throws(DAVError) -> FileInfo? {
        if davPath.isRoot { return try Self.info(of: rootDirectory.fd) }
        let parent: OpenFile
        do {
            parent = try openDirectory(davPath.parent)
        } catch let error where error.status == .notFound {
            return nil
        }
        return try Self.info(in: parent.fd, davPath.name)
    }

    /// fstatat without following a symlink; nil when the name does not exist.
    static func info(in directory: Int32, _ name: String) throws(DAVError) -> FileInfo? {
        var st = stat()
        if fstatat(directory, name, &st, AT_SYMLINK_NOFOLLOW) == 0 { return FileInfo(st) }
        let error = errno
        if error == ENOENT || error == ENOTDIR { return nil }
        throw DAVError.errno(error, "stat")
    }

    static func info(of fd: Int32) throws(DAVError) -> FileInfo {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw DAVError.errno(errno, "fstat") }
        return FileInfo(st)
    }

    /// Throws 403 for a symlink: it is never served, listed or followed.
    static func refuseSymlink(_ info: FileInfo?) throws(DAVError) {
        if info?.isSymlink == true { throw DAVError(.forbidden, "symlinks are not followed") }
    }

    // MARK: Reading

    /// Opens a regular file for reading, or stats a directory (no descriptor then).
    func openForReading(_ davPath: DAVPath, wantDescriptor: Bool) throws(DAVError) -> (OpenFile?, FileInfo) {
        if davPath.isRoot { return (nil, try Self.info(of: rootDirectory.fd)) }
        let parent = try openDirectory(davPath.parent)
        guard let info = try Self.info(in: parent.fd, davPath.name) else { throw DAVError(.notFound, "no such file") }
        try Self.refuseSymlink(info)
        if info.isDirectory || !info.isRegularFile || !wantDescriptor { return (nil, info) }
        // O_NONBLOCK: a FIFO swapped in after the stat must not block the open.
        let fd = openat(parent.fd, davPath.name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let error = errno
            throw error == ELOOP ? DAVError(.forbidden, "symlinks are not followed") : DAVError.errno(error, "open")
        }
        let file = OpenFile(fd: fd)
        let opened = try Self.info(of: fd)
        guard opened.isRegularFile else { throw DAVError(.forbidden, "not a regular file") }
        return (file, opened)
    }

    /// The entries of the directory at `davPath` that a client may see: valid UTF-8 names,
    /// no temporary files, no symlinks, no devices; in byte order.
    func entries(_ davPath: DAVPath) throws(DAVError) -> [DirectoryEntry] {
        let directory = try openDirectory(davPath)
        var entries: [DirectoryEntry] = []
        for raw in try Self.rawNames(in: directory.fd) {
            if raw.starts(with: temporaryNamePrefix.utf8) { continue }
            // A name that is not valid UTF-8 is left out: repaired (U+FFFD for each bad byte) it
            // would be a name that opens nothing, or another file's.
            guard let name = String(validating: raw, as: UTF8.self) else { continue }
            guard let info = try? Self.info(in: directory.fd, name), info.isDirectory || info.isRegularFile else { continue }
            entries.append(DirectoryEntry(name: name, info: info))
        }
        return entries.sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
    }

    /// The names in an open directory as the file system has them (bytes), without `.` and `..`.
    static func rawNames(in directory: Int32) throws(DAVError) -> [[UInt8]] {
        let copy = openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard copy >= 0 else { throw DAVError.errno(errno, "opendir") }
        guard let stream = fdopendir(copy) else {
            let error = errno
            close(copy)
            throw DAVError.errno(error, "opendir")
        }
        defer { closedir(stream) }
        var names: [[UInt8]] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix(while: { $0 != 0 })) }
            if name == Array(".".utf8) || name == Array("..".utf8) { continue }
            names.append(name)
        }
        return names
    }

    private static func withCString<T>(_ name: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
        (name + [0]).withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) }
        }
    }

    // MARK: Mutations (blocking)

    /// Removes the file, symlink or directory tree `name` in `directory` (never following symlinks).
    static func removeTree(in directory: Int32, _ name: String) throws(DAVError) {
        try removeTree(in: directory, bytes: Array(name.utf8))
    }

    /// Works on bytes, so that every entry is removed under its exact name, UTF-8 or not.
    private static func removeTree(in directory: Int32, bytes name: [UInt8]) throws(DAVError) {
        var st = stat()
        guard withCString(name, { fstatat(directory, $0, &st, AT_SYMLINK_NOFOLLOW) }) == 0 else { throw DAVError.errno(errno, "lstat") }
        if st.st_mode & S_IFMT == S_IFDIR {
            let child = withCString(name, { openat(directory, $0, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) })
            guard child >= 0 else { throw DAVError.errno(errno, "open") }
            let opened = OpenFile(fd: child)
            for entry in try rawNames(in: opened.fd) {
                try removeTree(in: opened.fd, bytes: entry)
            }
            guard withCString(name, { unlinkat(directory, $0, AT_REMOVEDIR) }) == 0 else { throw DAVError.errno(errno, "rmdir") }
        } else {
            guard withCString(name, { unlinkat(directory, $0, 0) }) == 0 else { throw DAVError.errno(errno, "unlink") }
        }
    }

    /// Creates an empty temporary file in `directory`; returns its name and descriptor.
    static func makeTemporaryFile(in directory: Int32) throws(DAVError) -> (String, OpenFile) {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<100 {
            let name = temporaryNamePrefix + String(generator.next() as UInt64, radix: 36)
            let fd = openat(directory, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
            if fd >= 0 {
                // A served file should be readable like any other, whatever the umask.
                _ = fchmod(fd, 0o644)
                return (name, OpenFile(fd: fd))
            }
            if errno != EEXIST { throw DAVError.errno(errno, "create temporary file") }
        }
        throw DAVError(.internalServerError, "no free temporary name")
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

    /// Copies the regular file `name` in `source` to `destinationName` in `destination`, through a
    /// temporary file and rename.
    static func copyFile(in source: Int32, _ name: String, to destination: Int32, _ destinationName: String) throws(DAVError) {
        let input = openat(source, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard input >= 0 else { throw DAVError.errno(errno, "open") }
        let inputFile = OpenFile(fd: input)
        guard try info(of: inputFile.fd).isRegularFile else { return }
        let (temporary, output) = try makeTemporaryFile(in: destination)
        var done = false
        defer { if !done { unlinkat(destination, temporary, 0) } }
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(inputFile.fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw DAVError.errno(errno, "read")
            }
            if n == 0 { break }
            var offset = 0
            while offset < n {
                let w = buffer.withUnsafeBytes { write(output.fd, $0.baseAddress! + offset, n - offset) }
                if w < 0 {
                    if errno == EINTR { continue }
                    throw DAVError.errno(errno, "write")
                }
                offset += w
            }
        }
        guard renameat(destination, temporary, destination, destinationName) == 0 else { throw DAVError.errno(errno, "rename") }
        done = true
    }

    /// Copies a file or a directory (`recursive == false`: without members). Symlinks, devices,
    /// sockets and FIFOs are left out. A directory this copy created is never copied again, so a
    /// copy can never recurse into itself, whatever aliases the tree has (bind mounts included).
    static func copyTree(in source: Int32, _ name: String, to destination: Int32, _ destinationName: String, recursive: Bool) throws(DAVError) {
        var created: Set<FileIdentity> = []
        try copyTree(in: source, name, to: destination, destinationName, recursive: recursive, created: &created)
    }

    struct FileIdentity: Hashable {
        let device: UInt64
        let inode: UInt64
        init(_ info: FileInfo) { device = info.device; inode = info.inode }
    }

    private static func copyTree(in source: Int32, _ name: String, to destination: Int32, _ destinationName: String,
                                 recursive: Bool, created: inout Set<FileIdentity>) throws(DAVError) {
        guard let info = try info(in: source, name) else { throw DAVError(.notFound, "no such resource") }
        if info.isRegularFile { return try copyFile(in: source, name, to: destination, destinationName) }
        guard info.isDirectory, !created.contains(FileIdentity(info)) else { return }
        guard mkdirat(destination, destinationName, 0o755) == 0 else { throw DAVError.errno(errno, "mkdir") }
        let target = openat(destination, destinationName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard target >= 0 else { throw DAVError.errno(errno, "open") }
        let targetDirectory = OpenFile(fd: target)
        created.insert(FileIdentity(try Self.info(of: targetDirectory.fd)))
        guard recursive else { return }
        let from = openat(source, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard from >= 0 else { throw DAVError.errno(errno, "open") }
        let sourceDirectory = OpenFile(fd: from)
        for raw in try rawNames(in: sourceDirectory.fd) {
            guard !raw.starts(with: temporaryNamePrefix.utf8), let child = String(validating: raw, as: UTF8.self) else { continue }
            try copyTree(in: sourceDirectory.fd, child, to: targetDirectory.fd, child, recursive: true, created: &created)
        }
    }
}
