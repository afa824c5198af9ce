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
    /// Bits cleared from every entry's mode (`--umask`), the explicit override. nil: modes as
    /// the store keeps them (or `chmod` and a create set them); with a umask, entries that have
    /// none start from 0666 and 0777, so `--umask 022` shows 0644/0755 and `--umask 077` 0600/0700.
    public var umask: mode_t?
    /// Bits cleared only where no mode is kept (a WebDAV file docfs did not create, an S3 object
    /// without mode metadata), from 0666/0777: a mount shared with `allow_other` shows those
    /// 0600/0700, while a mode someone set on purpose (`chmod 0777 shared/`) means what it says.
    public var maskWhereNoMode: mode_t?

    public init(uid: uid_t? = nil, gid: gid_t? = nil, umask: mode_t? = nil, maskWhereNoMode: mode_t? = nil) {
        self.uid = uid
        self.gid = gid
        self.umask = umask.map { $0 & 0o777 }
        self.maskWhereNoMode = maskWhereNoMode.map { $0 & 0o777 }
    }

    /// The permission bits shown for an entry of `kind` whose stored mode is `stored`.
    func permissions(stored: mode_t?, directory: Bool) -> mode_t {
        let unset: mode_t = directory ? 0o777 : 0o666
        if let umask { return (stored ?? unset) & 0o7777 & ~umask }
        if let stored { return stored & 0o7777 }
        if let maskWhereNoMode { return unset & ~maskWhereNoMode }
        return directory ? 0o755 : 0o644
    }

    /// The mask in force, in words, for `docfs status`; nil when modes show as they are.
    public var maskDescription: String? {
        if let umask { return "umask \(String(umask, radix: 8)) on every entry (--umask)" }
        if let maskWhereNoMode {
            return "\(String(0o666 & ~maskWhereNoMode, radix: 8))/\(String(0o777 & ~maskWhereNoMode, radix: 8)) where the store keeps no mode; modes set or kept show as they are"
        }
        return nil
    }
}
