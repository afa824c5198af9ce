import DocFSCore
import Glibc

/// setxattr/removexattr: how any tool (and `docfs pin`, `unpin`, `evict`) steers what is local
/// through docfs's own attributes (`user.docfs.pinned`, `user.docfs.evict`). Pinning downloads,
/// so these run in a task, never on the FUSE worker thread.
extension FuseAdapter {
    func setxattr(_ request: consuming FuseRequest, inode: Inode, name: String, value: [UInt8]) async {
        do {
            try await fs.setExtendedAttribute(name, value: value, of: inode)
            request.reply(errno: 0)
        } catch {
            request.fail(error)
        }
    }

    func removexattr(_ request: consuming FuseRequest, inode: Inode, name: String) async {
        do {
            try await fs.removeExtendedAttribute(name, of: inode)
            request.reply(errno: 0)
        } catch {
            request.fail(error)
        }
    }
}
