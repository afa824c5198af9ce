// ServedPreviews: the thumbnails `docfs serve` makes of its images and videos, so a docfs mount
// shows a photo's thumbnail without downloading the photo. Made with what the server machine
// has: `gdk-pixbuf-thumbnailer` (Debian's libgdk-pixbuf2.0-bin) for images, `ffmpegthumbnailer`
// for videos; a kind whose tool is missing has no preview, and PROPFIND says so
// (`has-preview`, in ownCloud's namespace). Asked for as ownCloud does:
// `GET FILE?preview=1&x=S&y=S&a=1`.
//
// Kept in a cache directory, one PNG per version and size: the key is the file's ETag (inode,
// size and mtime) with the size, so a changed file gets a new preview and an unchanged one is
// made once; a version the tool could not read (exited non-zero) is marked `.unreadable` there
// and answered 404 at once after that. At most `concurrency` tools run at once; each gets `toolSeconds` and is killed
// after that. The tool reads the file through the descriptor the server opened (beneath the
// root, no symlink followed), as `/proc/PID/fd/N`: never a path string of the served tree.

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Crypto
import Logging

/// Why a preview could not be made (each knows its HTTP status).
enum PreviewError: Error {
    /// No tool for this kind of file on this machine, or the tool could not read this version
    /// (not an image after all, a damaged one): remembered, not tried again.
    case noPreview
    /// The tool could not be run, or ran out of time.
    case toolFailed(String)

    var davError: DAVError {
        switch self {
        case .noPreview: DAVError(.notFound, "no preview for this file")
        case .toolFailed(let why): DAVError(.internalServerError, "preview: \(why)")
        }
    }
}

final class ServedPreviews: Sendable {
    /// The sides asked for are clamped to this (a preview, not a copy of the photo).
    static let largestSide = 1024
    static let concurrency = 2
    static let toolSeconds = 30

    let cacheDirectory: String
    /// `gdk-pixbuf-thumbnailer`, where installed.
    let imageTool: String?
    /// `ffmpegthumbnailer`, where installed.
    let videoTool: String?
    private let slots = ToolSlots(count: ServedPreviews.concurrency)
    private let logger: Logger

    static let imageExtensions: Set<String> = ["png", "jpg", "jpeg", "gif", "bmp", "tif", "tiff", "webp", "ico", "tga", "xpm", "pnm", "ppm", "svg", "heic", "avif"]
    static let videoExtensions: Set<String> = ["mp4", "m4v", "mov", "mkv", "webm", "avi", "mpg", "mpeg", "ogv", "wmv", "flv", "3gp"]

    /// Nil when neither tool is installed (then no file has a preview).
    init?(cacheDirectory: String, path: String? = getenv("PATH").map { String(cString: $0) }, logger: Logger) {
        let directories = (path ?? "/usr/bin:/bin").split(separator: ":").map(String.init)
        func find(_ tool: String) -> String? {
            directories.map { $0 + "/" + tool }.first { access($0, X_OK) == 0 }
        }
        imageTool = find("gdk-pixbuf-thumbnailer")
        videoTool = find("ffmpegthumbnailer")
        guard imageTool != nil || videoTool != nil else { return nil }
        self.cacheDirectory = cacheDirectory
        self.logger = logger
    }

    private enum Kind { case image, video }

    private func kind(of name: String) -> Kind? {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return nil }
        let ext = name[name.index(after: dot)...].lowercased()
        if imageTool != nil, Self.imageExtensions.contains(ext) { return .image }
        if videoTool != nil, Self.videoExtensions.contains(ext) { return .video }
        return nil
    }

    /// What PROPFIND says as `has-preview`: a regular, non-empty file of a kind a tool reads.
    func canPreview(name: String, info: FileInfo) -> Bool {
        info.isRegularFile && info.size > 0 && kind(of: name) != nil
    }

    /// The PNG preview of `file` (named `name`, at version `info`) fitting `side` pixels: from
    /// the cache, or made now.
    func preview(of file: OpenFile, name: String, info: FileInfo, side: Int) async throws -> [UInt8] {
        guard let kind = kind(of: name), info.isRegularFile else { throw PreviewError.noPreview }
        let side = max(16, min(side, Self.largestSide))
        let cached = cachePath(info: info, side: side)
        // A version the tool could not read is not given to it again.
        let unreadable = cached + ".unreadable"
        let known: @Sendable () throws -> [UInt8]? = {
            if access(unreadable, F_OK) == 0 { throw PreviewError.noPreview }
            return Self.readFile(cached)
        }
        if let bytes = try await blocking(known) { return bytes }
        await slots.acquire()
        defer { Task { await slots.release() } }
        // Made meanwhile by a request for the same preview that held a slot first.
        if let bytes = try await blocking(known) { return bytes }
        let tool = kind == .image ? imageTool! : videoTool!
        let temporary = cached + ".tmp-\(getpid())-\(UInt64.random(in: 0 ... .max))"
        let input = "/proc/\(getpid())/fd/\(file.fd)"
        let arguments = kind == .image
            ? [tool, "-s", String(side), input, temporary]
            : [tool, "-i", input, "-o", temporary, "-s", String(side), "-c", "png", "-f"]
        let logger = self.logger
        return try await blocking { () throws -> [UInt8] in
            Self.makeDirectories(for: cached)
            defer { unlink(temporary) }
            do {
                try Self.run(arguments, seconds: Self.toolSeconds)
            } catch ToolRun.exited(let status) {
                logger.debug("no preview: \(tool) exited with status \(status)")
                close(open(unreadable, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600))
                throw PreviewError.noPreview
            }
            guard let bytes = Self.readFile(temporary), bytes.count > 8 else { throw PreviewError.toolFailed("\(tool) wrote no image") }
            if rename(temporary, cached) != 0 { logger.debug("preview not kept: rename failed (errno \(errno))") }
            return bytes
        }
    }

    /// `DIR/ab/abcdef….png`: SHA-256 of the version and the size.
    func cachePath(info: FileInfo, side: Int) -> String {
        let digest = SHA256.hash(data: Array("\(info.device)|\(info.etag)|\(side)".utf8))
        let hex = digest.map { byte in (byte < 16 ? "0" : "") + String(byte, radix: 16) }.joined()
        return cacheDirectory + "/" + hex.prefix(2) + "/" + hex + ".png"
    }

    private static func makeDirectories(for file: String) {
        var prefix = ""
        for component in file.split(separator: "/").dropLast() {
            prefix += "/" + component
            mkdir(prefix, 0o700)
        }
    }

    /// A whole small file, or nil when it is not there (or over 4 MiB: not a preview of ours).
    static func readFile(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { return nil }
            if n == 0 { return bytes }
            bytes += buffer[0..<n]
            if bytes.count > 4 << 20 { return nil }
        }
    }

    /// Runs a tool with no shell, stdin and stdout closed, and kills it after `seconds`.
    static func run(_ arguments: [String], seconds: Int) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        // A tool needs no secret of the server's environment (credentials may be there).
        let variables: [String] = ["PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C.UTF-8"]
        let environment: [UnsafeMutablePointer<CChar>?] = variables.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            environment.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, arguments[0], &actions, nil, argv, environment)
        guard spawned == 0 else { throw PreviewError.toolFailed("cannot run \(arguments[0]) (errno \(spawned))") }
        var status: Int32 = 0
        let deadline = seconds * 100
        for tick in 0... {
            let done = waitpid(pid, &status, WNOHANG)
            if done == pid { break }
            if done < 0, errno != EINTR { throw PreviewError.toolFailed("waitpid failed (errno \(errno))") }
            if tick >= deadline {
                kill(pid, SIGKILL)
                _ = waitpid(pid, &status, 0)
                throw PreviewError.toolFailed("\(arguments[0]) took more than \(seconds) s")
            }
            usleep(10_000)
        }
        // Exited normally with status 0 (`WIFEXITED && WEXITSTATUS == 0`); killed: a failure.
        guard status & 0x7f == 0 else { throw PreviewError.toolFailed("\(arguments[0]) was killed (wait status \(status))") }
        guard (status >> 8) & 0xff == 0 else { throw ToolRun.exited(Int((status >> 8) & 0xff)) }
    }
}

/// A tool that ran and said no (its exit status): it cannot read this file.
enum ToolRun: Error {
    case exited(Int)
}

/// At most `count` preview tools at once: each takes a core for a while.
private actor ToolSlots {
    private var free: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(count: Int) { free = count }

    func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty { free += 1 } else { waiting.removeFirst().resume() }
    }
}
