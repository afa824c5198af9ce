import Foundation

/// One mount per store: an exclusive `flock` held while the daemon runs (the kernel releases
/// it on any exit). Two mounts would share catalog, journal and cache, and the second's crash
/// recovery would trample the first's live state, so it is refused, naming the first.
public final class StateLock: Sendable {
    private let descriptor: Int32

    /// Its pid and mount point, as the holder wrote them.
    public struct Holder: Sendable, Equatable, CustomStringConvertible {
        public var pid: Int32?
        public var mountpoint: String?

        public var description: String {
            switch (mountpoint, pid) {
            case let (mountpoint?, pid?): return "on \(mountpoint) (pid \(pid))"
            case let (mountpoint?, nil): return "on \(mountpoint)"
            case let (nil, pid?): return "by pid \(pid)"
            case (nil, nil): return "by another docfs"
            }
        }
    }

    public enum Failure: Error, Equatable {
        case held(by: Holder)
        case unavailable(errno: Int32)
    }

    /// Without waiting.
    public init(stateDirectory: String, mountpoint: String) throws(Failure) {
        let path = stateDirectory + "/lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .unavailable(errno: errno) }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            defer { close(fd) }
            if code == EWOULDBLOCK { throw .held(by: Self.holder(reading: fd)) }
            throw .unavailable(errno: code)
        }
        descriptor = fd
        // For the message a second mount prints; the lock, not this text, decides.
        let text = Array("\(getpid())\n\(mountpoint)\n".utf8)
        if ftruncate(fd, 0) == 0 { _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } }
    }

    deinit {
        close(descriptor)
    }

    private static func holder(reading fd: Int32) -> Holder {
        var bytes = [UInt8](repeating: 0, count: 4096)
        let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return Holder() }
        let lines = String(decoding: bytes[..<count], as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        let pid = lines.first.flatMap { Int32($0) }
        let mountpoint = lines.count > 1 && !lines[1].isEmpty ? String(lines[1]) : nil
        return Holder(pid: pid, mountpoint: mountpoint)
    }
}
