import DocFSCore
import DocFSStore
import Glibc

/// How an item looks to `stat(2)`: the placeholder's metadata, with `st_blocks` counting
/// only what is really on local disk (0 for a placeholder), so `du` tells what is local.
/// Owner, group and mode bits follow `access` (`--uid`, `--gid`, `--umask`).
struct FileAttributes {
    var owner: uid_t
    var group: gid_t
    var access = LocalAccess()

    func stat(for item: Item, localBlocks: Int64) -> Glibc.stat {
        var st = Glibc.stat()
        st.st_ino = ino_t(item.inode)
        switch item.kind {
        case .directory:
            st.st_mode = S_IFDIR | access.permissions(stored: item.mode, directory: true)
            // 1, "not counted" (as btrfs and other FUSE file systems say): a directory's 2 +
            // subfolders would need a count of its children for every stat, and a bare 2 says
            // "no subfolders", which fts(3) with FTS_NOSTAT (Foundation's FileManager
            // enumerator among others) believes and never descends.
            st.st_nlink = 1
        case .file:
            st.st_mode = S_IFREG | access.permissions(stored: item.mode, directory: false)
            st.st_nlink = item.unlinked ? 0 : nlink_t(max(1, item.links))
        case .symlink:
            st.st_mode = S_IFLNK | 0o777
            st.st_nlink = 1
        case .fifo, .characterDevice, .blockDevice, .socket:
            st.st_mode = Self.typeBits(of: item) | access.permissions(stored: item.mode, directory: false)
            st.st_nlink = 1
            st.st_rdev = dev_t(item.rdev)
        }
        st.st_uid = access.uid ?? item.owner ?? owner
        st.st_gid = access.gid ?? item.group ?? group
        st.st_size = item.kind == .symlink ? off_t(item.symlinkTarget?.utf8.count ?? 0) : item.kind.specialType != nil ? 0 : off_t(item.size)
        st.st_blksize = 4096
        st.st_blocks = blkcnt_t(localBlocks)
        st.st_mtim = timespec(item.modified)
        st.st_ctim = timespec(item.changed ?? item.modified)
        st.st_atim = timespec(item.accessed ?? item.modified)
        return st
    }
}

extension FileAttributes {
    /// The `st_mode` type bits of `item`'s kind: what readdir reports as `d_type`.
    static func typeBits(of item: Item) -> mode_t {
        switch item.kind {
        case .directory: return S_IFDIR
        case .file: return S_IFREG
        case .symlink: return S_IFLNK
        case .fifo, .characterDevice, .blockDevice, .socket: return mode_t(item.kind.specialType!.rawValue)
        }
    }
}

extension timespec {
    /// `time` as `stat` reports it. Clamping, not trapping, where `time_t` is narrower than
    /// 64 bits; with a 64-bit `time_t` (every Linux docfs builds for) it is exact.
    init(_ time: Timestamp) {
        let (seconds, nanoseconds) = time.parts
        self.init(tv_sec: time_t(clamping: seconds), tv_nsec: Int(clamping: nanoseconds))
    }
}
