import CFuse
import DocFSCore
import Foundation
import Glibc
import Logging

/// Why mounting failed, said in one line.
public enum FuseMountError: Error, CustomStringConvertible {
    case session(String)
    case mount(String)

    public var description: String {
        switch self {
        case .session(let message), .mount(let message): return message
        }
    }
}

/// One FUSE session: mount, serve requests until unmounted, tear down.
///
/// The loop runs on a dedicated thread with libfuse's multi-threaded loop; it ends when the
/// kernel side goes away (`docfs unmount`, `fusermount3 -u`, or `requestUnmount()` on a signal).
public final class FuseMount: @unchecked Sendable {
    // @unchecked: `session` is set once in `mount()` before the loop starts and cleared in
    // `finish()` after it ended; libfuse's session calls are made from those two points only
    // (replies and notifications from tasks pass the adapter's `ReplyGate`, shut before destroy).
    private var session: OpaquePointer?
    private let adapter: FuseAdapter
    private let retained: Unmanaged<FuseAdapter>
    public let mountpoint: String
    private let options: [String]
    private var arguments: [UnsafeMutablePointer<CChar>?] = []

    /// `entryTimeout` and `attributeTimeout`: seconds the kernel may trust a name (also one
    /// that was not found) and an item's attributes before it asks docfs again. `access`: the
    /// owner, group and mode bits entries show (`--uid`, `--gid`, `--umask`). `fetchPolicy`:
    /// the processes that get content only when it is local (`--no-fetch-for`).
    public init(filesystem: DocFileSystem, mountpoint: String, options: [String], cacheDirectory: String,
                entryTimeout: Double = 1, attributeTimeout: Double = 1, access: LocalAccess = LocalAccess(),
                fetchPolicy: FetchPolicy = .default, logger: Logger) {
        MallocTuning.apply()
        self.adapter = FuseAdapter(fs: filesystem, cacheDirectory: cacheDirectory, entryTimeout: entryTimeout,
                                   attributeTimeout: attributeTimeout, access: access, fetchPolicy: fetchPolicy, logger: logger)
        self.retained = Unmanaged.passRetained(adapter)
        // A pinned copy refreshed in the background may have another size: drop the kernel's.
        filesystem.whenPinnedCopyRefreshed { [weak adapter] inode in adapter?.invalidateAttributes(of: inode) }
        self.mountpoint = mountpoint
        self.options = options
    }

    deinit {
        for argument in arguments { free(argument) }
        retained.release()
    }

    /// Creates the session and mounts it. `options` are `-o` mount options (`ro`, `fsname=…`).
    public func mount() throws(FuseMountError) {
        var argv = ["docfs"]
        if !options.isEmpty { argv += ["-o", options.joined(separator: ",")] }
        arguments = argv.map { strdup($0) } + [nil]
        var args = arguments.withUnsafeMutableBufferPointer { docfs_args_init(Int32(argv.count), $0.baseAddress) }
        var ops = FuseOperations.table()
        guard let session = fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, retained.toOpaque()) else {
            throw .session("cannot create the FUSE session (bad -o option?)")
        }
        guard fuse_session_mount(session, mountpoint) == 0 else {
            fuse_session_destroy(session)
            throw .mount("cannot mount on \(mountpoint) (is /dev/fuse available and fuse3 installed?)")
        }
        self.session = session
        adapter.session.withLock { $0 = SessionPointer(pointer: session) }
    }

    /// Serves requests on a dedicated thread until the filesystem is unmounted.
    /// Returns libfuse's loop result (0 on a clean unmount).
    public func run() async -> Int32 {
        guard let session else { return -1 }
        let box = SessionBox(session: session)
        return await withCheckedContinuation { continuation in
            let thread = Thread {
                let result = docfs_session_loop_mt(box.session, 10, 64)
                continuation.resume(returning: result)
            }
            thread.name = "docfs-fuse-loop"
            thread.start()
        }
    }

    /// Ends the kernel side of the mount (lazily, so a busy mount goes away too); the loop
    /// then returns. Used on SIGINT/SIGTERM.
    public func requestUnmount() {
        if umount2(mountpoint, Int32(MNT_DETACH)) != 0 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
            process.arguments = ["-u", "-z", mountpoint]
            try? process.run()
            process.waitUntilExit()
        }
    }

    /// After the loop ended: settles the requests still being answered in Swift tasks, then
    /// unmounts (if still mounted) and destroys the session.
    ///
    /// The loop ends when the kernel connection is gone (an unmount, or an abort), while tasks
    /// may still wait on a slow or dead store holding a `fuse_req_t`. They get `grace` to
    /// finish, then are cancelled and get `cancelGrace` more; then the reply gate shuts, so a
    /// task still running is dropped without a reply, and only then is the session destroyed:
    /// no `fuse_reply_*` (nor `FuseRequest.deinit`'s) can reach a freed session.
    public func finish(grace: Duration = .seconds(2), cancelGrace: Duration = .seconds(2)) async {
        guard let session else { return }
        let abandoned = await adapter.inFlight.close(grace: grace, cancelGrace: cancelGrace)
        if abandoned > 0 {
            adapter.logger.warning("requests still running at unmount are dropped without a reply",
                                   metadata: ["count": "\(abandoned)"])
        }
        adapter.gate.close()
        adapter.session.withLock { $0 = nil }
        fuse_session_unmount(session)
        fuse_session_destroy(session)
        self.session = nil
    }
}

/// Carries the session pointer to the loop thread. Safe: the pointer is only used by that
/// thread until the loop returns.
private struct SessionBox: @unchecked Sendable {
    let session: OpaquePointer
}
