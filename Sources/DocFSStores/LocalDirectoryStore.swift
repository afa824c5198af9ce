// LocalDirectoryStore: a store over a directory of the local filesystem (tests, and a store
// on a network filesystem). It owns the mapping of POSIX calls and errno values onto the
// store protocol.
//
// Containment: every call starts from the root directory and walks the path one component at
// a time with `openat(..., O_DIRECTORY | O_NOFOLLOW)`, then acts on the last name with the
// `*at()` calls that do not follow symlinks. A symlink anywhere in the path is therefore never
// traversed (it is listed as `.symlink(target:)`, and the kernel above us resolves it), so no
// call can reach outside the root, whatever the links point to.
//
// Blocking: POSIX calls block, so each call runs on a dispatch queue, off the cooperative pool.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Dispatch
import DocFSStore
import Logging

public struct LocalDirectoryStore: Store {
    /// The absolute, symlink-resolved path of the root directory.
    public let root: String
    private let logger: Logger
    /// Sorted names of listings under way, so that paging a directory reads it once.
    private let listings = ListingSnapshots()
    public let uploadMeter: UploadMeter? = UploadMeter()

    /// Size of one read from disk, and so of one chunk handed to a sink or copied on write.
    static let chunkSize = 256 * 1024
    /// One listing page holds at most this many entries.
    static let pageSize = 1000
    /// Prefix of the temporary files `write` creates next to its target (hidden from listings).
    static let temporaryPrefix = ".docfs-upload-"

    /// Opens a store over `root`, which must exist and be a directory (symlinks to it are resolved once, here).
    public init(root: String, logger: Logger = Logger(label: "docfs.store.local")) throws(StoreError) {
        guard let resolved = realpath(root, nil) else {
            throw LocalDirectoryStore.error(errno, path: .root, doing: "open store root \(root)")
        }
        let path = String(cString: resolved)
        free(resolved)
        var info = Glibc.stat()
        guard statFollowingLinks(path, &info) == 0 else {
            throw LocalDirectoryStore.error(errno, path: .root, doing: "stat store root \(path)")
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { throw .notADirectory(.root) }
        self.root = path
        self.logger = logger
    }

    public var identity: StoreIdentity { StoreIdentity(kind: "local", location: root) }

    public var capabilities: StoreCapabilities {
        StoreCapabilities(canWrite: true, canRename: true, hasRangeReads: true)
    }

    // MARK: - list

    public func list(_ directory: StorePath, page: PageToken?) async throws(StoreError) -> ListPage {
        let root = self.root
        let logger = self.logger
        let listings = self.listings
        return try await Blocking.run { () throws(StoreError) -> ListPage in
            let fd = try Walk.openDirectory(root: root, directory)
            defer { close(fd) }
            let token = page.map { ListingToken($0.value) }
            var snapshot = token.flatMap { listings.take($0.listing) }
            if snapshot == nil {
                // A first page, or a later one whose snapshot was dropped: read the directory.
                var names = try Walk.names(in: fd, directory: directory, logger: logger)
                names.sort { Array($0.utf8).lexicographicallyPrecedes($1.utf8) }
                var start = 0
                if let after = token?.after {
                    let afterBytes = Array(after.utf8)
                    start = names.firstIndex { afterBytes.lexicographicallyPrecedes($0.utf8) } ?? names.count
                }
                snapshot = ListingSnapshots.Snapshot(names: names, position: start)
            }
            guard var snapshot else { return ListPage(entries: [], next: nil) }
            let names = snapshot.names
            var entries: [RemoteEntry] = []
            var index = snapshot.position
            while index < names.count, entries.count < LocalDirectoryStore.pageSize {
                let name = names[index]
                index += 1
                let path = StorePath(validated: directory.components + [name])
                var info = Glibc.stat()
                if fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) != 0 {
                    let code = errno
                    if code == ENOENT { continue }  // removed since readdir
                    throw LocalDirectoryStore.error(code, path: path, doing: "stat")
                }
                entries.append(LocalDirectoryStore.entry(path, info, directoryFD: fd, name: name))
            }
            // The token names the snapshot and the last name considered: the next page starts
            // after it, from the snapshot if it is still kept, else from a new read.
            guard index < names.count else { return ListPage(entries: entries, next: nil) }
            snapshot.position = index
            let listing = listings.keep(snapshot)
            return ListPage(entries: entries, next: PageToken(ListingToken(listing: listing, after: names[index - 1]).value))
        }
    }

    // MARK: - stat

    public func stat(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> RemoteEntry in
                var info = Glibc.stat()
                if fstatat(parent, name ?? ".", &info, AT_SYMLINK_NOFOLLOW) != 0 {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                }
                return LocalDirectoryStore.entry(path, info, directoryFD: parent, name: name ?? ".")
            }
        }
    }

    // MARK: - read

    @discardableResult
    public func read(_ path: StorePath, range: ByteRange?, ifMatch: ETag?, into sink: any ContentSink) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            let fd = try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> Int32 in
                guard let name else { throw .isADirectory(path) }
                let fd = openat(parent, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
                if fd < 0 {
                    let code = errno
                    if code == ELOOP { throw .notSupported("\(path) is a symbolic link") }
                    throw LocalDirectoryStore.error(code, path: path, doing: "open")
                }
                return fd
            }
            defer { close(fd) }
            var info = Glibc.stat()
            guard fstat(fd, &info) == 0 else { throw LocalDirectoryStore.error(errno, path: path, doing: "stat") }
            if (info.st_mode & S_IFMT) == S_IFDIR { throw .isADirectory(path) }
            guard (info.st_mode & S_IFMT) == S_IFREG else { throw .notSupported("\(path) is not a regular file") }
            let before = LocalDirectoryStore.entry(path, info, directoryFD: -1, name: "")
            if let ifMatch, before.etag != ifMatch { throw .versionMismatch(path) }

            let size = Int64(info.st_size)
            let start = max(0, range?.lowerBound ?? 0)
            let end = min(size, range?.upperBound ?? size)
            if start < end {
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: LocalDirectoryStore.chunkSize, alignment: 16)
                defer { buffer.deallocate() }
                var offset = start
                while offset < end {
                    let want = Int(min(Int64(buffer.count), end - offset))
                    let got = pread(fd, buffer.baseAddress, want, off_t(offset))
                    if got < 0 {
                        if errno == EINTR { continue }
                        throw LocalDirectoryStore.error(errno, path: path, doing: "read")
                    }
                    if got == 0 { throw .versionMismatch(path) }  // shrank under us
                    try sink.write(UnsafeRawBufferPointer(rebasing: buffer[0..<got]), at: offset)
                    offset += Int64(got)
                }
            }
            // Content that changed while we read it is not the version we report: never hand
            // back a torn copy as good.
            var after = Glibc.stat()
            if fstat(fd, &after) == 0, LocalDirectoryStore.etag(after) != before.etag {
                throw .versionMismatch(path)
            }
            return before
        }
    }

    // MARK: - write

    public func write(_ path: StorePath, fromLocalFile localFile: String, condition: WriteCondition) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            let source = open(localFile, O_RDONLY | O_CLOEXEC)
            guard source >= 0 else {
                let code = errno
                throw .localIO(errno: code, message: "open \(localFile): \(LocalDirectoryStore.describe(code))")
            }
            defer { close(source) }
            return try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> RemoteEntry in
                guard let name else { throw .isADirectory(path) }
                var existing = Glibc.stat()
                let exists = fstatat(parent, name, &existing, AT_SYMLINK_NOFOLLOW) == 0
                if exists, (existing.st_mode & S_IFMT) == S_IFDIR { throw .isADirectory(path) }
                switch condition {
                case .always: break
                case .mustNotExist: if exists { throw .alreadyExists(path) }
                case .ifMatch(let etag):
                    if !exists || LocalDirectoryStore.etag(existing) != etag { throw .versionMismatch(path) }
                }

                if exists, existing.st_nlink > 1 {
                    // A file with other names (hard links) keeps them only if written in place,
                    // as on any file system: not atomic, as there.
                    return try LocalDirectoryStore.writeInPlace(path, parent: parent, name: name, from: source, localFile: localFile,
                                                                meter: uploadMeter)
                }
                let temporary = LocalDirectoryStore.temporaryPrefix + String(UInt64.random(in: 0...UInt64.max), radix: 36)
                let mode: mode_t = exists ? (existing.st_mode & 0o7777) : 0o666
                let target = openat(parent, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
                guard target >= 0 else { throw LocalDirectoryStore.error(errno, path: path, doing: "create temporary file for") }
                var renamed = false
                defer {
                    if !renamed { unlinkat(parent, temporary, 0) }
                }
                do {
                    defer { close(target) }
                    if exists { fchmod(target, mode) }  // keep the mode of the file we replace, despite the umask
                    try LocalDirectoryStore.copy(from: source, to: target, path: path, localFile: localFile, meter: uploadMeter)
                    guard fsync(target) == 0 else { throw LocalDirectoryStore.error(errno, path: path, doing: "fsync") }
                }

                // The last check is as late as possible; `.mustNotExist` is atomic (RENAME_NOREPLACE).
                switch condition {
                case .always:
                    guard renameat(parent, temporary, parent, name) == 0 else {
                        throw LocalDirectoryStore.error(errno, path: path, doing: "rename onto")
                    }
                case .ifMatch(let etag):
                    var now = Glibc.stat()
                    guard fstatat(parent, name, &now, AT_SYMLINK_NOFOLLOW) == 0, LocalDirectoryStore.etag(now) == etag else {
                        throw .versionMismatch(path)
                    }
                    guard renameat(parent, temporary, parent, name) == 0 else {
                        throw LocalDirectoryStore.error(errno, path: path, doing: "rename onto")
                    }
                case .mustNotExist:
                    try Rename.noReplace(parent, temporary, parent, name, target: path)
                }
                renamed = true
                fsync(parent)

                var info = Glibc.stat()
                guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                }
                return LocalDirectoryStore.entry(path, info, directoryFD: parent, name: name)
            }
        }
    }

    /// Replaces the content of `name` in `parent` with `source`'s, in the same inode.
    static func writeInPlace(_ path: StorePath, parent: Int32, name: String, from source: Int32, localFile: String,
                             meter: UploadMeter?) throws(StoreError) -> RemoteEntry {
        let target = openat(parent, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
        guard target >= 0 else { throw LocalDirectoryStore.error(errno, path: path, doing: "open") }
        defer { close(target) }
        guard ftruncate(target, 0) == 0 else { throw LocalDirectoryStore.error(errno, path: path, doing: "truncate") }
        try LocalDirectoryStore.copy(from: source, to: target, path: path, localFile: localFile, meter: meter)
        guard fsync(target) == 0 else { throw LocalDirectoryStore.error(errno, path: path, doing: "fsync") }
        var info = Glibc.stat()
        guard fstat(target, &info) == 0 else { throw LocalDirectoryStore.error(errno, path: path, doing: "stat") }
        return LocalDirectoryStore.entry(path, info, directoryFD: parent, name: name)
    }

    // MARK: - hard links

    public func makeHardLink(_ path: StorePath, to source: StorePath) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            try Walk.withParent(root: root, source) { (sourceParent, sourceName) throws(StoreError) -> RemoteEntry in
                guard let sourceName else { throw .isADirectory(source) }
                return try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> RemoteEntry in
                    guard let name else { throw .alreadyExists(path) }
                    guard linkat(sourceParent, sourceName, parent, name, 0) == 0 else {
                        throw LocalDirectoryStore.error(errno, path: path, doing: "link")
                    }
                    fsync(parent)
                    var info = Glibc.stat()
                    guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                        throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                    }
                    return LocalDirectoryStore.entry(path, info, directoryFD: parent, name: name)
                }
            }
        }
    }

    // MARK: - makeDirectory

    public func makeDirectory(_ path: StorePath) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> RemoteEntry in
                guard let name else { throw .alreadyExists(path) }
                guard mkdirat(parent, name, 0o777) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "mkdir")
                }
                var info = Glibc.stat()
                guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                }
                return LocalDirectoryStore.entry(path, info, directoryFD: parent, name: name)
            }
        }
    }

    // MARK: - symlinks and attributes

    public func makeSymlink(_ path: StorePath, target: String) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> RemoteEntry in
                guard let name else { throw .alreadyExists(path) }
                guard symlinkat(target, parent, name) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "symlink")
                }
                var info = Glibc.stat()
                guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                }
                return LocalDirectoryStore.entry(path, info, directoryFD: parent, name: name)
            }
        }
    }

    /// The real thing: `mknodat` in the store directory (devices need CAP_MKNOD, as anywhere).
    public func makeSpecial(_ path: StorePath, _ special: SpecialFile, mode: UInt32) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> RemoteEntry in
                guard let name else { throw .alreadyExists(path) }
                guard mknodat(parent, name, mode_t(special.type.rawValue | (mode & 0o7777)), dev_t(special.rdev)) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "mknod")
                }
                // mknod's mode went through the daemon's umask: set the bits asked for.
                _ = fchmodat(parent, name, mode & 0o7777, 0)
                var info = Glibc.stat()
                guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                }
                return LocalDirectoryStore.entry(path, info, directoryFD: parent, name: name)
            }
        }
    }

    /// Real attributes: the local directory carries mode, owner and times as any file does.
    /// Symlinks keep their own (Linux has no lchmod); their times are set without following.
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes) async throws(StoreError) -> Bool {
        _ = try await settingAttributes(path, attributes, onVersion: nil)
        return true
    }

    /// The version checked and the new one read in the same walk; another process's write in
    /// between is not excluded (a directory offers no conditional chmod), only made unlikely.
    public func setAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag) async throws(StoreError) -> AttributesSet {
        .kept(newVersion: try await settingAttributes(path, attributes, onVersion: version))
    }

    /// Returns the version after the change.
    private func settingAttributes(_ path: StorePath, _ attributes: StoreAttributes, onVersion version: ETag?) async throws(StoreError) -> ETag {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> ETag in
            try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> ETag in
                let name = name ?? "."
                var info = Glibc.stat()
                guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                }
                if let version, LocalDirectoryStore.etag(info) != version { throw .versionMismatch(path) }
                let isLink = info.st_mode & S_IFMT == S_IFLNK
                // The owner first, as chown(2) clears set-user-ID bits a mode given with it keeps.
                // A daemon that may not give files away (not root) keeps owners in the catalog.
                if attributes.owner != nil || attributes.group != nil {
                    let owner = attributes.owner.map { uid_t($0) } ?? uid_t.max
                    let group = attributes.group.map { gid_t($0) } ?? gid_t.max
                    if fchownat(parent, name, owner, group, AT_SYMLINK_NOFOLLOW) != 0, errno != EPERM {
                        throw LocalDirectoryStore.error(errno, path: path, doing: "chown")
                    }
                }
                if let mode = attributes.mode, !isLink {
                    guard fchmodat(parent, name, mode & 0o7777, 0) == 0 else {
                        throw LocalDirectoryStore.error(errno, path: path, doing: "chmod")
                    }
                }
                if attributes.modified != nil || attributes.accessed != nil {
                    func time(_ value: Timestamp?) -> timespec {
                        guard let value else { return timespec(tv_sec: 0, tv_nsec: (1 << 30) - 2) }  // UTIME_OMIT
                        return timespec(tv_sec: Int(value.parts.seconds), tv_nsec: Int(value.parts.nanoseconds))
                    }
                    var times = [time(attributes.accessed), time(attributes.modified)]
                    guard utimensat(parent, name, &times, AT_SYMLINK_NOFOLLOW) == 0 else {
                        throw LocalDirectoryStore.error(errno, path: path, doing: "utimensat")
                    }
                }
                guard fstatat(parent, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw LocalDirectoryStore.error(errno, path: path, doing: "stat")
                }
                return LocalDirectoryStore.etag(info)
            }
        }
    }

    // MARK: - delete

    public func delete(_ path: StorePath, isDirectory: Bool) async throws(StoreError) {
        let root = self.root
        try await Blocking.run { () throws(StoreError) -> Void in
            try Walk.withParent(root: root, path) { (parent, name) throws(StoreError) -> Void in
                guard let name else { throw .accessDenied("refusing to delete the store's root") }
                guard unlinkat(parent, name, isDirectory ? AT_REMOVEDIR : 0) == 0 else {
                    let code = errno
                    // rmdir of a non-empty directory may say EEXIST as well as ENOTEMPTY.
                    if isDirectory, code == EEXIST { throw .notEmpty(path) }
                    throw LocalDirectoryStore.error(code, path: path, doing: "delete")
                }
            }
        }
    }

    // MARK: - move

    public func move(_ source: StorePath, to target: StorePath, replace: Bool) async throws(StoreError) -> RemoteEntry {
        let root = self.root
        return try await Blocking.run { () throws(StoreError) -> RemoteEntry in
            try Walk.withParent(root: root, source) { (sourceParent, sourceName) throws(StoreError) -> RemoteEntry in
                guard let sourceName else { throw .accessDenied("refusing to move the store's root") }
                return try Walk.withParent(root: root, target) { (targetParent, targetName) throws(StoreError) -> RemoteEntry in
                    guard let targetName else { throw .alreadyExists(target) }
                    if replace {
                        if renameat(sourceParent, sourceName, targetParent, targetName) != 0 {
                            let code = errno
                            throw LocalDirectoryStore.moveError(code, source: source, target: target, sourceParent: sourceParent, sourceName: sourceName)
                        }
                    } else {
                        // Make sure the source exists first, so a missing source is not reported as something else.
                        var info = Glibc.stat()
                        guard fstatat(sourceParent, sourceName, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                            throw LocalDirectoryStore.error(errno, path: source, doing: "move")
                        }
                        try Rename.noReplace(sourceParent, sourceName, targetParent, targetName, target: target, source: source)
                    }
                    var info = Glibc.stat()
                    guard fstatat(targetParent, targetName, &info, AT_SYMLINK_NOFOLLOW) == 0 else {
                        throw LocalDirectoryStore.error(errno, path: target, doing: "stat")
                    }
                    return LocalDirectoryStore.entry(target, info, directoryFD: targetParent, name: targetName)
                }
            }
        }
    }

    // MARK: - Helpers

    /// The entry for `info`; `directoryFD`/`name` locate a symlink to read its target.
    static func entry(_ path: StorePath, _ info: Glibc.stat, directoryFD: Int32, name: String) -> RemoteEntry {
        let modified = Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1_000_000_000
        let mode = UInt32(info.st_mode & 0o7777)
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            return RemoteEntry(path: path, kind: .directory, size: 0, modified: modified, etag: nil, mode: mode,
                               owner: UInt32(info.st_uid), group: UInt32(info.st_gid))
        case S_IFLNK:
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlinkat(directoryFD, name, &buffer, buffer.count - 1)
            let target = count >= 0 ? String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
            return RemoteEntry(path: path, kind: .symlink(target: target), size: Int64(info.st_size), modified: modified, etag: nil, mode: mode,
                               owner: UInt32(info.st_uid), group: UInt32(info.st_gid))
        case let type where SpecialFile.FileType(mode: UInt32(type)) != nil:
            let special = SpecialFile(type: SpecialFile.FileType(mode: UInt32(type))!, rdev: UInt64(info.st_rdev))
            return RemoteEntry(path: path, kind: .special(special), size: 0, modified: modified, etag: etag(info), mode: mode,
                               owner: UInt32(info.st_uid), group: UInt32(info.st_gid))
        default:
            return RemoteEntry(path: path, kind: .file, size: Int64(info.st_size), modified: modified, etag: etag(info), mode: mode,
                               owner: UInt32(info.st_uid), group: UInt32(info.st_gid), links: Int(info.st_nlink))
        }
    }

    /// `"<inode>-<size>-<mtime in ns>"` in hex, as Apache and `docfs serve` do.
    static func etag(_ info: Glibc.stat) -> ETag {
        let nanoseconds = Int64(info.st_mtim.tv_sec) &* 1_000_000_000 &+ Int64(info.st_mtim.tv_nsec)
        let parts = [String(UInt64(info.st_ino), radix: 16), String(UInt64(bitPattern: Int64(info.st_size)), radix: 16),
                     String(UInt64(bitPattern: nanoseconds), radix: 16)]
        return ETag("\"" + parts.joined(separator: "-") + "\"")
    }

    static func copy(from source: Int32, to target: Int32, path: StorePath, localFile: String, meter: UploadMeter?) throws(StoreError) {
        meter?.restart(localFile)  // a new attempt counts from 0 again
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
        defer { buffer.deallocate() }
        var offset: off_t = 0
        while true {
            let got = pread(source, buffer.baseAddress, buffer.count, offset)
            if got < 0 {
                let code = errno
                if code == EINTR { continue }
                throw .localIO(errno: code, message: "read \(localFile): \(describe(code))")
            }
            if got == 0 { return }
            meter?.record(localFile, got)  // `user.docfs.progress` of the upload, as the HTTP stores count it
            var written = 0
            while written < got {
                let count = Glibc.write(target, buffer.baseAddress! + written, got - written)
                if count < 0 {
                    let code = errno
                    if code == EINTR { continue }
                    throw error(code, path: path, doing: "write")
                }
                written += count
            }
            offset += off_t(got)
        }
    }

    static func moveError(_ code: Int32, source: StorePath, target: StorePath, sourceParent: Int32, sourceName: String) -> StoreError {
        switch code {
        case ENOENT:
            var info = Glibc.stat()
            if fstatat(sourceParent, sourceName, &info, AT_SYMLINK_NOFOLLOW) != 0 { return .notFound(source) }
            return .notFound(target.parent ?? target)
        case EEXIST, ENOTEMPTY: return .notEmpty(target)
        case EISDIR: return .isADirectory(target)
        case ENOTDIR: return .notADirectory(target)
        case EINVAL: return .notSupported("cannot move \(source) into itself (\(target))")
        default: return error(code, path: source, doing: "move")
        }
    }

    /// The one errno table of this store.
    static func error(_ code: Int32, path: StorePath, doing operation: String) -> StoreError {
        switch code {
        case ENOENT: return .notFound(path)
        case ENOTDIR, ELOOP: return .notADirectory(path)  // ELOOP: a symlink where a directory was needed
        case EISDIR: return .isADirectory(path)
        case EACCES, EPERM, EROFS: return .accessDenied("\(operation) \(path): \(describe(code))")
        case EEXIST: return .alreadyExists(path)
        case ENOTEMPTY: return .notEmpty(path)
        case ENAMETOOLONG: return .invalidName(path.name)
        case EXDEV: return .notSupported("\(operation) \(path): crosses filesystems")
        default: return .localIO(errno: code, message: "\(operation) \(path): \(describe(code))")
        }
    }

    static func describe(_ code: Int32) -> String {
        String(cString: strerror(code))
    }
}

func statFollowingLinks(_ path: String, _ info: inout Glibc.stat) -> Int32 {
    stat(path, &info)
}

/// Walking a `StorePath` from the root, one component at a time, without following symlinks.
enum Walk {
    static func openRoot(_ root: String) throws(StoreError) -> Int32 {
        let fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw LocalDirectoryStore.error(errno, path: .root, doing: "open store root") }
        return fd
    }

    /// Opens the directory at `path`; a symlink at any component is refused (`.notADirectory`).
    /// The walk itself is BeneathWalk's (shared with `docfs serve`): openat2 where the kernel has
    /// it, else one `openat(O_NOFOLLOW)` per name.
    static func openDirectory(root: String, _ path: StorePath) throws(StoreError) -> Int32 {
        let rootFD = try openRoot(root)
        defer { close(rootFD) }
        switch BeneathWalk.openDirectory(below: rootFD, path.components) {
        case .success(let fd):
            return fd
        case .failure(let failure):
            let failed = path.components.isEmpty ? StorePath.root : StorePath(validated: Array(path.components[0...min(failure.index, path.components.count - 1)]))
            throw LocalDirectoryStore.error(failure.errno, path: failed, doing: "open")
        }
    }

    /// Calls `body` with the open parent directory of `path` and the last name (nil for the root,
    /// then the descriptor is the root itself).
    static func withParent<T>(root: String, _ path: StorePath, _ body: (Int32, String?) throws(StoreError) -> T) throws(StoreError) -> T {
        let parent = try openDirectory(root: root, path.parent ?? .root)
        defer { close(parent) }
        return try body(parent, path.isRoot ? nil : path.name)
    }

    /// The valid, UTF-8 names in the open directory `fd` (the descriptor stays open).
    static func names(in fd: Int32, directory: StorePath, logger: Logger) throws(StoreError) -> [String] {
        let copy = dup(fd)
        guard copy >= 0, let stream = fdopendir(copy) else {
            let code = errno
            if copy >= 0 { close(copy) }
            throw LocalDirectoryStore.error(code, path: directory, doing: "list")
        }
        defer { closedir(stream) }
        rewinddir(stream)
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else {
                if errno != 0 { throw LocalDirectoryStore.error(errno, path: directory, doing: "list") }
                break
            }
            let name: String? = withUnsafePointer(to: entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(validatingCString: $0) }
            }
            guard let name else {
                logger.warning("skipping a name that is not valid UTF-8", metadata: ["directory": "\(directory)"])
                continue
            }
            if name == "." || name == ".." || name.utf8.starts(with: LocalDirectoryStore.temporaryPrefix.utf8) { continue }
            guard StorePath.isValidName(name) else {
                logger.warning("skipping an unsafe name", metadata: ["directory": "\(directory)", "name": "\(name.debugDescription)"])
                continue
            }
            names.append(name)
        }
        return names
    }
}

/// `renameat2(RENAME_NOREPLACE)`, which the Glibc module does not export: looked up once with
/// dlsym. Where it is missing or the filesystem refuses the flag, a check before `renameat` (racy,
/// but never silent about an existing target it can see).
enum Rename {
    private typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32
    private static let renameat2: RenameAt2? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
        return unsafeBitCast(symbol, to: RenameAt2.self)
    }()
    private static let noReplaceFlag: UInt32 = 1  // RENAME_NOREPLACE

    static func noReplace(_ fromDir: Int32, _ fromName: String, _ toDir: Int32, _ toName: String, target: StorePath, source: StorePath? = nil) throws(StoreError) {
        if let renameat2 {
            if renameat2(fromDir, fromName, toDir, toName, noReplaceFlag) == 0 { return }
            let code = errno
            if code != EINVAL && code != ENOSYS {
                if code == EEXIST { throw .alreadyExists(target) }
                if let source { throw LocalDirectoryStore.moveError(code, source: source, target: target, sourceParent: fromDir, sourceName: fromName) }
                throw LocalDirectoryStore.error(code, path: target, doing: "rename onto")
            }
        }
        var info = stat()
        if fstatat(toDir, toName, &info, AT_SYMLINK_NOFOLLOW) == 0 { throw .alreadyExists(target) }
        if renameat(fromDir, fromName, toDir, toName) != 0 {
            let code = errno
            if let source { throw LocalDirectoryStore.moveError(code, source: source, target: target, sourceParent: fromDir, sourceName: fromName) }
            throw LocalDirectoryStore.error(code, path: target, doing: "rename onto")
        }
    }
}
