import CFuse
import DocFSCore
import DocFSStore
import Foundation
import Glibc

/// The table of `fuse_lowlevel_ops`: one C-callable closure per operation, filled by field
/// name, as libfuse's own examples do. Each recovers the adapter from the session's userdata,
/// copies its arguments into Swift values and calls the adapter.
enum FuseOperations {
    static func table() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()

        ops.lookup = { req, parent, name in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let adapter = fuseAdapter(req)
            // Most lookups are answered by the catalog on this thread; a directory never listed
            // is listed first, in a task.
            guard !adapter.lookupFromCatalog(req!, parent: parent, name: name) else { return }
            adapter.respond(req!) { request in await adapter.lookup(request, parent: parent, name: name) }
        }
        // Nothing to release: lookup references are not counted (see `FuseAdapter.entry(for:)`).
        ops.forget = { req, _, _ in fuse_reply_none(req) }
        ops.forget_multi = { req, _, _ in fuse_reply_none(req) }
        ops.getattr = { req, inode, _ in
            fuseAdapter(req).getattr(fuseRequest(req), inode: inode)
        }
        ops.readlink = { req, inode in
            fuseAdapter(req).readlink(fuseRequest(req), inode: inode)
        }
        ops.open = { req, inode, fi in
            let flags = fi!.pointee.flags
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.open(request, inode: inode, flags: flags) }
        }
        ops.read = { req, _, size, offset, fi in
            // Bytes that are local are answered on this thread; others are fetched first, in a task.
            fuseAdapter(req).read(req!, handle: fi!.pointee.fh, offset: Int64(offset), size: size)
        }
        ops.release = { req, _, fi in
            let handle = fi!.pointee.fh
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.release(request, handle: handle) }
        }
        ops.opendir = { req, inode, _ in
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.opendir(request, inode: inode) }
        }
        ops.readdir = { req, _, size, offset, fi in
            fuseAdapter(req).readdir(fuseRequest(req), raw: req!, handle: fi!.pointee.fh,
                                 offset: Int64(offset), size: size, plus: false)
        }
        ops.readdirplus = { req, _, size, offset, fi in
            fuseAdapter(req).readdir(fuseRequest(req), raw: req!, handle: fi!.pointee.fh,
                                 offset: Int64(offset), size: size, plus: true)
        }
        ops.releasedir = { req, _, fi in
            fuseAdapter(req).releasedir(fuseRequest(req), handle: fi!.pointee.fh)
        }
        ops.statfs = { req, _ in
            fuseAdapter(req).statfs(fuseRequest(req))
        }
        ops.getxattr = { req, inode, name, size in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            fuseAdapter(req).getxattr(fuseRequest(req), inode: inode, name: name, size: size)
        }
        ops.setxattr = { req, inode, name, value, size, _ in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            // Copied now: `value` is valid only until this callback returns.
            let bytes = value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.setxattr(request, inode: inode, name: name, value: bytes) }
        }
        ops.removexattr = { req, inode, name in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.removexattr(request, inode: inode, name: name) }
        }
        ops.listxattr = { req, inode, size in
            fuseAdapter(req).listxattr(fuseRequest(req), inode: inode, size: size)
        }
        ops.access = { req, inode, mask in
            fuseAdapter(req).access(fuseRequest(req), inode: inode, mask: mask)
        }
        ops.`init` = { _, conn in
            // O_TRUNC arrives with open() instead of as a separate truncate: no download.
            docfs_want_if_capable(conn, UInt32(FUSE_CAP_ATOMIC_O_TRUNC))
            // Reads answered by splicing from the local copy's descriptor (see FuseRequest.replyData).
            docfs_want_if_capable(conn, UInt32(FUSE_CAP_SPLICE_WRITE))
            docfs_want_if_capable(conn, UInt32(FUSE_CAP_SPLICE_MOVE))
            // Writes of up to 1 MiB per request (the kernel's default is 128 KiB): a quarter of the
            // round trips through /dev/fuse for large files. The kernel caps it at what it supports.
            conn!.pointee.max_write = 1 << 20
            conn!.pointee.max_readahead = 1 << 20
        }
        ops.create = { req, parent, name, mode, fi in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let flags = fi!.pointee.flags
            let caller = callerIdentity(req)
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.create(request, parent: parent, name: name, mode: mode, flags: flags, caller: caller) }
        }
        ops.write = { req, _, buffer, size, offset, fi in
            fuseAdapter(req).write(req!, handle: fi!.pointee.fh, offset: Int64(offset),
                                   bytes: UnsafeRawBufferPointer(start: buffer, count: size))
        }
        ops.flush = { req, _, fi in
            fuseAdapter(req).flush(req!, handle: fi!.pointee.fh)
        }
        ops.fsync = { req, _, _, fi in
            let handle = fi!.pointee.fh
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.fsync(request, handle: handle) }
        }
        ops.setattr = { req, inode, attributes, toSet, fi in
            let changes = attributeChanges(attributes!.pointee, toSet: toSet)
            let handle = fi?.pointee.fh
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.setattr(request, inode: inode, changes: changes, handle: handle) }
        }
        ops.mkdir = { req, parent, name, mode in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let caller = callerIdentity(req)
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.mkdir(request, parent: parent, name: name, mode: mode, caller: caller) }
        }
        ops.mknod = { req, parent, name, mode, rdev in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let caller = callerIdentity(req)
            let adapter = fuseAdapter(req)
            let device = UInt64(rdev)
            adapter.respond(req!) { request in
                await adapter.mknod(request, parent: parent, name: name, mode: mode, rdev: device, caller: caller)
            }
        }
        ops.unlink = { req, parent, name in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.remove(request, parent: parent, name: name, directory: false) }
        }
        ops.rmdir = { req, parent, name in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.remove(request, parent: parent, name: name, directory: true) }
        }
        ops.rename = { req, parent, name, newParent, newName, flags in
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            guard let newName = decodedName(newName) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in
                await adapter.rename(request, parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
            }
        }
        ops.link = { req, inode, newParent, newName in
            guard let newName = decodedName(newName) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.link(request, inode: inode, newParent: newParent, newName: newName) }
        }
        ops.symlink = { req, target, parent, name in
            guard let target = decodedName(target) else { return fuseRequest(req).reply(errno: EILSEQ) }
            guard let name = decodedName(name) else { return fuseRequest(req).reply(errno: EILSEQ) }
            let caller = callerIdentity(req)
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.symlink(request, parent: parent, name: name, target: target, caller: caller) }
        }
        ops.fallocate = { req, inode, mode, offset, length, fi in
            let handle = fi!.pointee.fh
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in
                await adapter.fallocate(request, inode: inode, mode: mode, offset: Int64(offset), length: Int64(length), handle: handle)
            }
        }
        return ops
    }
}

/// The adapter behind a request: the session's userdata (no globals).
private func fuseAdapter(_ req: fuse_req_t?) -> FuseAdapter {
    Unmanaged<FuseAdapter>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

/// A name (or link target) from the kernel as a string; nil when its bytes are not valid UTF-8.
/// Such a name is refused with `EILSEQ`: repairing it (`String(cString:)` puts U+FFFD in place of
/// each bad byte) would make `a\xe9` and `a\xe8` one file. Valid names keep their bytes exactly.
private func decodedName(_ name: UnsafePointer<CChar>?) -> String? {
    name.flatMap { String(validatingCString: $0) }
}

/// The request, for a handler that answers on this thread.
private func fuseRequest(_ req: fuse_req_t?) -> FuseRequest {
    fuseAdapter(req).request(req!)
}

/// Who is asking: new files and directories belong to the calling process's user.
private func callerIdentity(_ req: fuse_req_t?) -> (uid: UInt32, gid: UInt32) {
    guard let context = fuse_req_ctx(req) else { return (getuid(), getgid()) }
    return (context.pointee.uid, context.pointee.gid)
}

/// Copies what a setattr asks for into Swift values (times resolved: `*_NOW` is now).
private func attributeChanges(_ attributes: stat, toSet: Int32) -> DocFileSystem.AttributeChanges {
    let now = Timestamp.now
    func exact(_ time: timespec) -> Timestamp { Timestamp(seconds: Int64(time.tv_sec), nanoseconds: Int64(time.tv_nsec)) }
    var changes = DocFileSystem.AttributeChanges()
    if toSet & (1 << 0) != 0 { changes.mode = attributes.st_mode }
    if toSet & (1 << 1) != 0 { changes.owner = attributes.st_uid }
    if toSet & (1 << 2) != 0 { changes.group = attributes.st_gid }
    if toSet & (1 << 3) != 0 { changes.size = Int64(attributes.st_size) }
    if toSet & (1 << 7) != 0 { changes.accessed = now } else if toSet & (1 << 4) != 0 { changes.accessed = exact(attributes.st_atim) }
    if toSet & (1 << 8) != 0 { changes.modified = now } else if toSet & (1 << 5) != 0 { changes.modified = exact(attributes.st_mtim) }
    return changes
}
