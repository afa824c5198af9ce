import ArgumentParser
import Foundation
import Glibc

/// `docfs pin`, `docfs unpin`, `docfs evict`: "keep downloaded" and "free up space". They talk
/// to the mount only through extended attributes on the paths (`user.docfs.pinned`,
/// `user.docfs.evict`), so any tool can do the same with `setfattr`, and they work on any
/// docfs mount the caller can reach, whoever started it.
enum Steering {
    static let pinned = "user.docfs.pinned"
    static let evict = "user.docfs.evict"
    static let state = "user.docfs.state"

    // Swift's Glibc module leaves out <sys/xattr.h>: the two calls come from libc by name.
    private typealias SetAttribute = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeRawPointer?, Int, Int32) -> Int32
    private typealias GetAttribute = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutableRawPointer?, Int) -> Int
    private static let lsetxattr = unsafeBitCast(dlsym(nil, "lsetxattr"), to: SetAttribute.self)
    private static let lgetxattr = unsafeBitCast(dlsym(nil, "lgetxattr"), to: GetAttribute.self)

    /// Sets `name` to `value` on `path` (never following a last symlink); nil or the errno.
    static func set(_ name: String, _ value: String, on path: String) -> Int32? {
        let bytes = Array(value.utf8)
        let result = bytes.withUnsafeBytes { lsetxattr(path, name, $0.baseAddress, $0.count, 0) }
        return result == 0 ? nil : errno
    }

    static func get(_ name: String, of path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { lgetxattr(path, name, $0.baseAddress, $0.count) }
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Regular files below `directory` (lists folders never listed; symlinks not followed).
    static func files(under directory: String) -> [String] {
        guard let walker = FileManager.default.enumerator(atPath: directory) else { return [] }
        var found: [String] = []
        while let relative = walker.nextObject() as? String {
            let path = directory + "/" + relative
            var info = stat()
            if lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG { found.append(path) }
        }
        return found
    }

    static func explain(_ code: Int32, path: String) -> String {
        switch code {
        case EOPNOTSUPP, ENOTSUP: return "\(path) is not on a docfs mount"
        default: return "\(path): \(String(cString: strerror(code)))"
        }
    }
}

struct PinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Download files now and keep them local (folders: everything below, and what is added later).",
        discussion: """
            Pinned copies outlive the last close and unmounts; `docfs unpin` returns them to \
            the default policy. Same as `setfattr -n user.docfs.pinned -v 1 PATH`.
            """)

    @Argument(help: "Files or folders on a docfs mount.")
    var paths: [String]

    func run() throws {
        var failed = false
        for path in paths {
            if let code = Steering.set(Steering.pinned, "1", on: path) {
                printError("docfs: cannot pin \(Steering.explain(code, path: path))")
                failed = true
            } else {
                print("pinned \(path)")
            }
        }
        if failed { throw ExitCode(1) }
    }
}

struct UnpinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unpin",
        abstract: "Return pinned files to the default policy (their copies go when nobody uses them).")

    @Argument(help: "Files or folders on a docfs mount.")
    var paths: [String]

    func run() throws {
        var failed = false
        for path in paths {
            if let code = Steering.set(Steering.pinned, "0", on: path) {
                printError("docfs: cannot unpin \(Steering.explain(code, path: path))")
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }
}

struct EvictCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evict",
        abstract: "Free up space: make files placeholders now (folders: every file below), and unpin them.",
        discussion: """
            Files that are open, or hold changes the store does not have yet, are left alone \
            and named; the exit status is then 1. Same as `setfattr -n user.docfs.evict -v 1 PATH`.
            """)

    @Argument(help: "Files or folders on a docfs mount.")
    var paths: [String]

    func run() throws {
        var failed = false
        for path in paths {
            let files = Steering.isDirectory(path) ? Steering.files(under: path) : [path]
            for file in files {
                guard let code = Steering.set(Steering.evict, "1", on: file) else { continue }
                failed = true
                if code == EBUSY {
                    let state = Steering.get(Steering.state, of: file) ?? ""
                    let why = state == "modified" || state == "uploading" ? "it has changes not on the store yet (\(state))" : "it is open"
                    printError("docfs: not evicted: \(file): \(why)")
                } else {
                    printError("docfs: cannot evict \(Steering.explain(code, path: file))")
                }
            }
            // The folder itself: unpins it (and what is below); its files were handled above.
            if Steering.isDirectory(path), let code = Steering.set(Steering.evict, "1", on: path), code != EBUSY {
                printError("docfs: cannot evict \(Steering.explain(code, path: path))")
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }
}
