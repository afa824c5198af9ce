// BeneathWalk: opening a directory below a root descriptor without ever leaving it, for every
// part of docfs that acts on a local tree on someone else's behalf (the local-directory store,
// `docfs serve`). It owns the one rule both follow: no `..`, no symlink, no absolute path is
// ever resolved between the root and the directory opened, so nothing a client names, and
// nothing another process swaps into the tree meanwhile, can lead outside the root.
//
// Where the kernel has `openat2` (Linux 5.6, syscall 437), one call with
// `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` does it; elsewhere (older kernels, seccomp filters
// that answer ENOSYS or EPERM) the path is walked one name at a time with
// `openat(..., O_DIRECTORY | O_NOFOLLOW)`. Callers then act on the last name with the `*at()`
// calls (`fstatat(AT_SYMLINK_NOFOLLOW)`, `openat(O_NOFOLLOW)`, `renameat`, `unlinkat`,
// `mkdirat`) on the descriptor they got, never on a path string.
// Used by `docfs serve` (ServedDirectory) and LocalDirectoryStore (`Walk.openDirectory`).

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

public enum BeneathWalk {
    /// Why a walk stopped: the errno, and the index of the name that failed (0-based).
    public struct Failure: Error, Sendable, Equatable {
        public let errno: Int32
        public let index: Int
    }

    /// True when `name` can be one step of a walk: not empty, not `.` or `..`, no `/`, no NUL.
    public static func isStep(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.utf8.contains(UInt8(ascii: "/")) && !name.utf8.contains(0)
    }

    /// Opens the directory `names` below the open directory `root` (a new descriptor the caller
    /// closes; with no names, a duplicate of `root`). A symlink at any step fails (ELOOP or
    /// ENOTDIR), as does a name that is not a step (EINVAL).
    public static func openDirectory(below root: Int32, _ names: [String]) -> Result<Int32, Failure> {
        if let bad = names.firstIndex(where: { !isStep($0) }) { return .failure(Failure(errno: EINVAL, index: bad)) }
        if names.isEmpty {
            let fd = fcntl(root, F_DUPFD_CLOEXEC, 0)
            return fd >= 0 ? .success(fd) : .failure(Failure(errno: errno, index: 0))
        }
        if OpenAt2.available {
            let fd = OpenAt2.resolve(root, names.joined(separator: "/"), flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if fd >= 0 { return .success(fd) }
            // openat2 says what, not where: the walk finds the name that fails (errors are rare).
        }
        return walk(root, names)
    }

    /// The portable walk: one `openat(O_DIRECTORY | O_NOFOLLOW)` per name.
    static func walk(_ root: Int32, _ names: [String]) -> Result<Int32, Failure> {
        var fd = root
        for (index, name) in names.enumerated() {
            let next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            var code = errno
            // O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR; say ELOOP, as openat2 does.
            if next < 0 && code == ENOTDIR && isSymlink(fd, name) { code = ELOOP }
            if fd != root { close(fd) }
            guard next >= 0 else { return .failure(Failure(errno: code, index: index)) }
            fd = next
        }
        return .success(fd)
    }

    private static func isSymlink(_ directory: Int32, _ name: String) -> Bool {
        var info = stat()
        return fstatat(directory, name, &info, AT_SYMLINK_NOFOLLOW) == 0 && info.st_mode & S_IFMT == S_IFLNK
    }

    /// Forces the portable walk (tests compare both ways).
    public static func openDirectoryByWalking(below root: Int32, _ names: [String]) -> Result<Int32, Failure> {
        if let bad = names.firstIndex(where: { !isStep($0) }) { return .failure(Failure(errno: EINVAL, index: bad)) }
        if names.isEmpty { return openDirectory(below: root, []) }
        return walk(root, names)
    }

    /// Whether this kernel resolves with `openat2` (else every walk is the portable one).
    public static var usesOpenAt2: Bool { OpenAt2.available }
}

/// `openat2(2)` through `syscall(2)`: glibc has no wrapper, and Swift cannot call the variadic
/// `syscall` directly, so it is looked up with dlsym and called with a fixed signature (on
/// Linux's x86_64 and arm64 ABIs a variadic callee reads integer arguments as a fixed one does).
private enum OpenAt2 {
    private typealias Syscall = @convention(c) (Int, Int32, UnsafePointer<CChar>, UnsafeRawPointer, Int) -> Int
    private static let number = 437  // the same on every architecture (the unified table)
    private static let resolveNoMagicLinks: UInt64 = 0x02
    private static let resolveNoSymlinks: UInt64 = 0x04
    private static let resolveBeneath: UInt64 = 0x08

    private static let call: Syscall? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syscall") else { return nil }
        return unsafeBitCast(symbol, to: Syscall.self)
    }()

    /// Probed once: ENOSYS (old kernel) and EPERM (a seccomp filter) mean "walk instead".
    static let available: Bool = {
        let root = Glibc.open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard root >= 0 else { return false }
        defer { close(root) }
        let probe = resolve(root, ".", flags: O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if probe >= 0 { close(probe); return true }
        return false
    }()

    /// Returns the descriptor, or -1 with errno set.
    static func resolve(_ directory: Int32, _ path: String, flags: Int32) -> Int32 {
        guard let call else { errno = ENOSYS; return -1 }
        // struct open_how { __u64 flags; __u64 mode; __u64 resolve; }
        var how: (UInt64, UInt64, UInt64) = (UInt64(UInt32(bitPattern: flags)), 0, resolveBeneath | resolveNoSymlinks | resolveNoMagicLinks)
        let result = withUnsafeBytes(of: &how) { howBytes in
            path.withCString { call(number, directory, $0, howBytes.baseAddress!, 24) }
        }
        return Int32(truncatingIfNeeded: result)
    }
}
