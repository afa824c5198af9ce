import ArgumentParser
import Dispatch
import Foundation
import Glibc
import Synchronization

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
        // Its size first: a list (`user.docfs.transfers`) may be any length. A value that grew
        // in between is asked for again.
        for _ in 0..<3 {
            let size = lgetxattr(path, name, nil, 0)
            guard size >= 0 else { return nil }
            var buffer = [UInt8](repeating: 0, count: size + 256)
            let count = buffer.withUnsafeMutableBytes { lgetxattr(path, name, $0.baseAddress, $0.count) }
            if count >= 0 { return String(decoding: buffer[..<count], as: UTF8.self) }
            guard errno == ERANGE else { return nil }
        }
        return nil
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// Regular files below `directory`, by name in each folder (lists folders never listed;
    /// symlinks not followed). Walked with readdir and lstat, not FileManager's enumerator:
    /// that one (fts) trusts a folder's link count of 2 to mean "no subfolders", and docfs
    /// reports 2 for every folder, so it never went below the first level.
    static func files(under directory: String) -> [String] {
        var found: [String] = []
        for name in ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted() {
            let path = directory + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            switch info.st_mode & S_IFMT {
            case S_IFREG: found.append(path)
            case S_IFDIR: found += files(under: path)
            default: break
            }
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
            the default policy. Same as `setfattr -n user.docfs.pinned -v 1 PATH`. Shows each \
            file's download (bytes done of its size) in a terminal, and prints a line per file \
            pinned otherwise.
            """)

    @Argument(help: "Files or folders on a docfs mount.")
    var paths: [String]

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        let progress = PinProgress(live: Terminal.isTerminal && environment["TERM"] != "dumb", environment: environment)
        var failed = false
        for path in paths {
            // A folder's files are pinned one by one, so each download shows; the folder itself
            // last (what is added to it later is pinned, what appeared meanwhile downloaded).
            let files = Steering.isDirectory(path) ? Steering.files(under: path) : []
            for (index, file) in files.enumerated() {
                if let code = progress.pin(file, counter: "\(index + 1)/\(files.count)") {
                    printError("docfs: cannot pin \(Steering.explain(code, path: file))")
                    failed = true
                }
            }
            if let code = progress.pin(path, counter: nil, folderFiles: Steering.isDirectory(path) ? files.count : nil) {
                printError("docfs: cannot pin \(Steering.explain(code, path: path))")
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }
}

/// What `docfs pin` shows while a file downloads: the pin is one `setxattr` that returns when
/// the copy is complete, so it runs on another thread while this one samples the file's
/// `user.docfs.progress` (`DONE/TOTAL`) every 200 ms and redraws one line on a terminal
/// (`pinning (2/5) PATH  300000/1500000 bytes  20%`), replaced by `pinned PATH (SIZE)` when
/// it returns. Without a terminal only the `pinned PATH` lines are printed.
struct PinProgress {
    let live: Bool
    let environment: [String: String]

    /// Pins `path`; nil or the errno.
    func pin(_ path: String, counter: String?, folderFiles: Int? = nil) -> Int32? {
        let result = Outcome()
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            result.code.withLock { $0 = Steering.set(Steering.pinned, "1", on: path) }
            done.signal()
        }
        var drawn = false
        let label = "pinning " + (counter.map { "(\($0)) " } ?? "")
        while done.wait(timeout: .now() + .milliseconds(200)) == .timedOut {
            guard live, let value = Steering.get("user.docfs.progress", of: path) else { continue }
            let parts = value.split(separator: "/").compactMap { Int64($0) }
            guard parts.count == 2 else { continue }
            let percent = parts[1] > 0 ? " \(min(100, parts[0] * 100 / parts[1]))%" : ""
            let columns = Terminal.size(environment: environment).columns
            let tail = "  \(parts[0])/\(parts[1]) bytes" + percent
            let line = label + StatusFrame.cutStart(path, max(10, columns - label.count - tail.count - 1)) + tail
            Terminal.write("\r" + StatusFrame.fit(line, columns - 1) + Terminal.clearLine)
            drawn = true
        }
        let code = result.code.withLock { $0 }
        if drawn { Terminal.write("\r" + Terminal.clearLine) }
        guard code == nil else { return code }
        var info = stat()
        let size = folderFiles.map { " (\($0) file(s))" }
            ?? (lstat(path, &info) == 0 ? " (\(StatusFrame.bytes(Double(info.st_size))))" : "")
        Terminal.write("pinned \(path)\(size)\n")
        return nil
    }

    /// The pinning thread's errno (nil: pinned), read after it signalled.
    private final class Outcome: Sendable {
        let code = Mutex<Int32?>(nil)
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
