import CFuse
import DocFSCore
import Glibc
import Logging
import Synchronization

/// A kernel request that must be answered exactly once.
///
/// It is `~Copyable` and every reply is `consuming`, so the compiler refuses a second reply;
/// a request dropped without a reply answers `EIO` from its `deinit`, so the calling process
/// never hangs. Every reply, that one included, passes the session's `ReplyGate`: once the
/// session is being destroyed a reply is dropped instead of written into freed memory.
struct FuseRequest: ~Copyable {
    private let raw: fuse_req_t
    /// Unowned so that the request stays trivially destroyed (`discard self` needs that). Safe:
    /// the gate belongs to the adapter, which the session's userdata retains while the loop
    /// runs, and which every request task captures until the task (and its request) ends.
    private unowned(unsafe) let gate: ReplyGate

    init(_ token: RequestToken, gate: ReplyGate) {
        raw = token.raw
        self.gate = gate
    }

    deinit {
        send { fuse_reply_err($0, EIO) }
    }

    /// The thread that made the request, as the kernel names it (0 when the kernel itself
    /// asks, or the caller lives in a pid namespace the daemon cannot see). Valid until replied.
    var callerPID: pid_t {
        fuse_req_ctx(raw)?.pointee.pid ?? 0
    }

    /// Runs one `fuse_reply_*` call, unless the session is gone.
    private func send(_ reply: (fuse_req_t) -> Int32) {
        gate.pass { _ = reply(raw) }
    }

    consuming func fail(_ error: FSError) {
        reply(errno: error.errno)
    }

    consuming func reply(errno code: Int32) {
        send { fuse_reply_err($0, code) }
        discard self
    }

    consuming func replyEntry(_ entry: fuse_entry_param) {
        var entry = entry
        send { fuse_reply_entry($0, &entry) }
        discard self
    }

    consuming func replyAttributes(_ attributes: stat, timeout: Double) {
        var attributes = attributes
        send { fuse_reply_attr($0, &attributes, timeout) }
        discard self
    }

    consuming func replyOpen(handle: UInt64, keepCache: Bool = false) {
        var info = fuse_file_info()
        info.fh = handle
        docfs_fi_set_open_flags(&info, keepCache ? 1 : 0, 0)
        send { fuse_reply_open($0, &info) }
        discard self
    }

    consuming func replyCreate(_ entry: fuse_entry_param, handle: UInt64) {
        var entry = entry
        var info = fuse_file_info()
        info.fh = handle
        send { fuse_reply_create($0, &entry, &info) }
        discard self
    }

    consuming func replyWrite(count: Int) {
        send { fuse_reply_write($0, count) }
        discard self
    }

    consuming func replyBuffer(_ bytes: UnsafeRawBufferPointer) {
        send { fuse_reply_buf($0, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count) }
        discard self
    }

    /// A read answered straight from a file: `count` bytes at `offset` of `descriptor`, which
    /// must stay open until this returns.
    consuming func replyData(from descriptor: Int32, count: Int, at offset: Int64) {
        send { docfs_reply_fd($0, descriptor, count, off_t(offset)) }
        discard self
    }

    consuming func replyBytes(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { buffer in
            send { fuse_reply_buf($0, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count) }
        }
        discard self
    }

    /// getxattr/listxattr: a caller asking with size 0 wants the size; a buffer too small is ERANGE.
    consuming func replyXattr(_ value: [UInt8], callerBufferSize: Int) {
        if callerBufferSize == 0 {
            send { fuse_reply_xattr($0, value.count) }
            discard self
        } else if callerBufferSize < value.count {
            fail(.rangeTooSmall)
        } else {
            replyBytes(value)
        }
    }

    consuming func replyReadlink(_ target: String) {
        send { fuse_reply_readlink($0, target) }
        discard self
    }

    consuming func replyStatfs(_ statistics: statvfs) {
        var statistics = statistics
        send { fuse_reply_statfs($0, &statistics) }
        discard self
    }

    /// For requests that take no reply (forget).
    consuming func replyNone() {
        send { fuse_reply_none($0); return 0 }
        discard self
    }
}

/// The raw request pointer, carried into a Swift task. Safe to send: libfuse lets any thread
/// reply to a request, and `FuseRequest` (created from the token on the replying side) makes
/// sure it happens once.
struct RequestToken: @unchecked Sendable {
    let raw: fuse_req_t
}

/// Whether replies may still reach the session, and how many are being written right now.
///
/// Requests answered from Swift tasks may outlive the session loop. `FuseMount.finish()`
/// shuts the gate before `fuse_session_destroy`: `close()` waits for the replies already
/// passing through, and every reply after it is dropped without touching the session (its
/// kernel connection is gone by then, and no caller waits for the answer any more; the
/// request's few bytes stay allocated, as libfuse has no way to free a request unanswered).
final class ReplyGate: Sendable {
    /// The count of replies in progress, with `closedBit` set once the gate is shut.
    private let state = Atomic<Int>(0)
    private static let closedBit = 1 << 62

    /// Runs `reply` unless the gate is shut; returns whether it ran.
    @discardableResult
    func pass(_ reply: () -> Void) -> Bool {
        let before = state.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
        defer { state.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        guard before & Self.closedBit == 0 else { return false }
        reply()
        return true
    }

    var isOpen: Bool { state.load(ordering: .sequentiallyConsistent) & Self.closedBit == 0 }

    /// Shuts the gate and returns once no reply is being written.
    func close() {
        state.bitwiseOr(Self.closedBit, ordering: .sequentiallyConsistent)
        while state.load(ordering: .sequentiallyConsistent) & ~Self.closedBit != 0 {
            sched_yield()
        }
    }
}
