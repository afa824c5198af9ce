import CFuse
import DocFSCore
import Glibc

/// The table of `fuse_lowlevel_ops`: one C-callable closure per operation, filled by field
/// name, as libfuse's own examples do. Each recovers the adapter from the session's userdata,
/// copies its arguments into Swift values and calls the adapter. Operations not listed here
/// are answered by libfuse itself (`ENOSYS`); the mount is read-only, so the kernel refuses
/// writes with `EROFS` before they reach us.
enum FuseOperations {
    static func table() -> fuse_lowlevel_ops {
        var ops = fuse_lowlevel_ops()

        ops.lookup = { req, parent, name in
            let name = String(cString: name!)
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.lookup(request, parent: parent, name: name) }
        }
        ops.forget = { req, inode, count in
            fuseAdapter(req).forget(inode, count: count)
            fuse_reply_none(req)
        }
        ops.forget_multi = { req, count, forgets in
            let adapter = fuseAdapter(req)
            for index in 0..<count {
                let item = forgets![index]
                adapter.forget(item.ino, count: item.nlookup)
            }
            fuse_reply_none(req)
        }
        ops.getattr = { req, inode, _ in
            fuseAdapter(req).getattr(FuseRequest(RequestToken(raw: req!)), inode: inode)
        }
        ops.readlink = { req, inode in
            fuseAdapter(req).readlink(FuseRequest(RequestToken(raw: req!)), inode: inode)
        }
        ops.open = { req, inode, fi in
            let flags = fi!.pointee.flags
            let adapter = fuseAdapter(req)
            adapter.respond(req!) { request in await adapter.open(request, inode: inode, flags: flags) }
        }
        ops.read = { req, _, size, offset, fi in
            fuseAdapter(req).read(FuseRequest(RequestToken(raw: req!)), handle: fi!.pointee.fh, offset: Int64(offset), size: size)
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
            fuseAdapter(req).readdir(FuseRequest(RequestToken(raw: req!)), raw: req!, handle: fi!.pointee.fh,
                                 offset: Int64(offset), size: size, plus: false)
        }
        ops.readdirplus = { req, _, size, offset, fi in
            fuseAdapter(req).readdir(FuseRequest(RequestToken(raw: req!)), raw: req!, handle: fi!.pointee.fh,
                                 offset: Int64(offset), size: size, plus: true)
        }
        ops.releasedir = { req, _, fi in
            fuseAdapter(req).releasedir(FuseRequest(RequestToken(raw: req!)), handle: fi!.pointee.fh)
        }
        ops.statfs = { req, _ in
            fuseAdapter(req).statfs(FuseRequest(RequestToken(raw: req!)))
        }
        ops.getxattr = { req, inode, name, size in
            fuseAdapter(req).getxattr(FuseRequest(RequestToken(raw: req!)), inode: inode, name: String(cString: name!), size: size)
        }
        ops.listxattr = { req, inode, size in
            fuseAdapter(req).listxattr(FuseRequest(RequestToken(raw: req!)), inode: inode, size: size)
        }
        ops.access = { req, inode, mask in
            fuseAdapter(req).access(FuseRequest(RequestToken(raw: req!)), inode: inode, mask: mask)
        }
        return ops
    }
}

/// The adapter behind a request: the session's userdata (no globals).
private func fuseAdapter(_ req: fuse_req_t?) -> FuseAdapter {
    Unmanaged<FuseAdapter>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}
