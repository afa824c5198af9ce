import Glibc

/// Who may use a mount's entries, as `stat(2)` shows them to local users (`--uid`, `--gid`,
/// `--umask`, as rclone mount offers them). The kernel enforces what it shows, because docfs
/// always mounts with `default_permissions`; with `allow_other` this is what keeps other
/// local users out.
public struct LocalAccess: Sendable, Equatable {
    /// Owner of every entry (`--uid`); nil: the owner the store or the creating caller gave
    /// an entry, else the mounting user.
    public var uid: uid_t?
    /// Group of every entry (`--gid`); nil: as for `uid`, with the mounting user's group.
    public var gid: gid_t?
    /// Bits cleared from every entry's mode (`--umask`). nil: modes as the store keeps them,
    /// 0644 for files and 0755 for folders that have none; with a umask those two start from
    /// 0666 and 0777 instead, so `--umask 022` shows the same and `--umask 077` shows 0600/0700.
    public var umask: mode_t?

    public init(uid: uid_t? = nil, gid: gid_t? = nil, umask: mode_t? = nil) {
        self.uid = uid
        self.gid = gid
        self.umask = umask.map { $0 & 0o777 }
    }

    /// The permission bits shown for an entry of `kind` whose stored mode is `stored`.
    func permissions(stored: mode_t?, directory: Bool) -> mode_t {
        guard let umask else { return stored ?? (directory ? 0o755 : 0o644) }
        return (stored ?? (directory ? 0o777 : 0o666)) & 0o7777 & ~umask
    }
}
