import CFuse
import DocFSCore
import Glibc
import Logging

/// A kernel request that must be answered exactly once.
///
/// It is `~Copyable` and every reply is `consuming`, so the compiler refuses a second reply;
/// a request dropped without a reply answers `EIO` from its `deinit` (and says so in the
/// log), so the calling process never hangs.
struct FuseRequest: ~Copyable {
    private let raw: fuse_req_t

    init(_ token: RequestToken) { raw = token.raw }

    deinit {
        fuse_reply_err(raw, EIO)
    }

    consuming func fail(_ error: FSError) {
        reply(errno: error.errno)
    }

    consuming func reply(errno code: Int32) {
        fuse_reply_err(raw, code)
        discard self
    }

    consuming func replyEntry(_ entry: fuse_entry_param) {
        var entry = entry
        fuse_reply_entry(raw, &entry)
        discard self
    }

    consuming func replyAttributes(_ attributes: stat, timeout: Double) {
        var attributes = attributes
        fuse_reply_attr(raw, &attributes, timeout)
        discard self
    }

    consuming func replyOpen(handle: UInt64, keepCache: Bool = false) {
        var info = fuse_file_info()
        info.fh = handle
        docfs_fi_set_open_flags(&info, keepCache ? 1 : 0, 0)
        fuse_reply_open(raw, &info)
        discard self
    }

    consuming func replyCreate(_ entry: fuse_entry_param, handle: UInt64) {
        var entry = entry
        var info = fuse_file_info()
        info.fh = handle
        fuse_reply_create(raw, &entry, &info)
        discard self
    }

    consuming func replyWrite(count: Int) {
        fuse_reply_write(raw, count)
        discard self
    }

    consuming func replyBuffer(_ bytes: UnsafeRawBufferPointer) {
        fuse_reply_buf(raw, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
        discard self
    }

    consuming func replyBytes(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { buffer in
            _ = fuse_reply_buf(raw, buffer.baseAddress?.assumingMemoryBound(to: CChar.self), buffer.count)
        }
        discard self
    }

    /// getxattr/listxattr: a caller asking with size 0 wants the size; a buffer too small is ERANGE.
    consuming func replyXattr(_ value: [UInt8], callerBufferSize: Int) {
        if callerBufferSize == 0 {
            fuse_reply_xattr(raw, value.count)
            discard self
        } else if callerBufferSize < value.count {
            fail(.rangeTooSmall)
        } else {
            replyBytes(value)
        }
    }

    consuming func replyReadlink(_ target: String) {
        fuse_reply_readlink(raw, target)
        discard self
    }

    consuming func replyStatfs(_ statistics: statvfs) {
        var statistics = statistics
        fuse_reply_statfs(raw, &statistics)
        discard self
    }

    /// For requests that take no reply (forget).
    consuming func replyNone() {
        fuse_reply_none(raw)
        discard self
    }
}

/// The raw request pointer, carried into a Swift task. Safe to send: libfuse lets any thread
/// reply to a request, and `FuseRequest` (created from the token on the replying side) makes
/// sure it happens once.
struct RequestToken: @unchecked Sendable {
    let raw: fuse_req_t
}
