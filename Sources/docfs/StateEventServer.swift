import DocFSCore
import DocFSStores
import Foundation
import Logging
import Synchronization

/// Tells file managers (`Sources/desktop`) when an item's `user.docfs.state` changes, on a Unix
/// stream socket whose path the mount root's `user.docfs.events` gives. Each change is one line:
/// the item's path from the mount's root, percent-encoded (every byte but RFC 3986's unreserved
/// characters and `/`), a tab, the state, a newline. Nothing is sent on connecting: a client
/// asks each file it shows for its state, and is told what changes after that. A client that
/// does not keep up (its socket buffer full) is dropped; it reconnects and asks again.
///
/// The socket is the daemon user's alone (0600, in a 0700 folder): the lines name files of
/// folders other users may not be allowed to list.
final class StateEventServer: Sendable {
    let path: String
    private let listener: Int32
    private let clients = Mutex<[Int32]>([])
    private let logger: Logger

    /// Listens at `path` (a socket left there by a killed daemon is replaced).
    init(path: String, logger: Logger) throws {
        self.path = path
        self.logger = logger
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw POSIXError(.ENAMETOOLONG)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        unlink(path)
        let previous = umask(0o177)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        umask(previous)
        guard bound == 0, listen(fd, 16) == 0 else {
            let code = errno
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        listener = fd
        let thread = Thread { [self] in acceptClients() }
        thread.name = "docfs-events"
        thread.start()
    }

    /// Where the socket goes: `$XDG_RUNTIME_DIR/docfs/KEY.events`, else beside the catalog
    /// (`STATE/events.sock`), else `/tmp/docfs-UID/KEY.events`: a socket's path has at most
    /// 107 bytes.
    static func path(key: String, stateDirectory: String, environment: [String: String]) -> String {
        let limit = 107
        let shortKey = String(key.suffix(12))
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty {
            let candidate = runtime + "/docfs/" + shortKey + ".events"
            if candidate.utf8.count <= limit, makePrivateFolder(runtime + "/docfs") { return candidate }
        }
        let beside = stateDirectory + "/events.sock"
        if beside.utf8.count <= limit { return beside }
        let folder = "/tmp/docfs-\(geteuid())"
        _ = makePrivateFolder(folder)
        return folder + "/" + shortKey + ".events"
    }

    private static func makePrivateFolder(_ folder: String) -> Bool {
        if mkdir(folder, 0o700) != 0 && errno != EEXIST { return false }
        var info = stat()
        // Another user's folder of that name (in /tmp) is not ours to put a socket in.
        guard lstat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, info.st_uid == geteuid() else { return false }
        return chmod(folder, 0o700) == 0
    }

    /// Whether any client is connected.
    var hasClients: Bool { clients.withLock { !$0.isEmpty } }

    /// Sends `changes` to every client.
    func publish(_ changes: [DocFileSystem.StateChange]) {
        var text = ""
        for change in changes {
            text += PercentEncoding.encode(change.path, keepingSlash: true) + "\t" + change.state + "\n"
        }
        let bytes = Array(text.utf8)
        clients.withLock { clients in
            clients.removeAll { fd in
                let sent = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
                guard sent == bytes.count else {
                    // Gone, or too slow to take a batch whole: it reconnects and asks again.
                    close(fd)
                    return true
                }
                return false
            }
        }
    }

    /// Stops listening, disconnects every client and removes the socket.
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        unlink(path)
        clients.withLock { clients in
            for fd in clients { close(fd) }
            clients.removeAll()
        }
    }

    private func acceptClients() {
        while true {
            let fd = accept(listener, nil, nil)
            if fd < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                break  // stopped
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            clients.withLock { $0.append(fd) }
        }
        close(listener)
    }
}
