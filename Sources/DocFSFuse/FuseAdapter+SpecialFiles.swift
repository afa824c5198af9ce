import DocFSCore
import DocFSStore
import Glibc

extension FuseAdapter {
    /// mknod of a FIFO, socket (`bind` of a Unix socket) or device node. The kernel gives the
    /// new inode its type and `rdev` from the entry's attributes, and serves every later open
    /// of it itself (a pipe, the host's device): no open of such an inode reaches docfs.
    func mknodSpecial(_ request: consuming FuseRequest, parent: Inode, name: String, _ special: SpecialFile, mode: UInt32,
                      caller: (uid: UInt32, gid: UInt32)) async {
        do {
            let item = try await shielded { [fs] () throws(FSError) in
                try await fs.makeSpecial(in: parent, name: name, special, mode: mode, owner: caller.uid, group: caller.gid)
            }
            request.replyEntry(entry(for: item))
        } catch {
            request.fail(error)
        }
    }
}
