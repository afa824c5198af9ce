import ArgumentParser
import DocFSFuse
import Glibc

/// Options for who may use a mount locally: the owner, group and mode bits every entry shows,
/// and FUSE's `allow_other`. docfs mounts with `default_permissions`, so the kernel enforces
/// what entries show; with `allow_other` and no `--umask`, entries whose mode the store does
/// not keep show 0600/0700 (other local users reach them only if the mount is asked to let
/// them), while a mode set with `chmod` or at create, or kept by the store, shows as it is.
struct AccessOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Owner of every entry: a user name or number (default: the owner the store keeps, else the mounting user).",
                               valueName: "user"))
    var uid: String?

    @Option(help: ArgumentHelp("Group of every entry: a group name or number (default: the group the store keeps, else the mounting user's).",
                               valueName: "group"))
    var gid: String?

    @Option(help: ArgumentHelp("Permission bits taken from every entry's mode, in octal: 022 shows files 0644 and folders 0755, 077 shows 0600 and 0700 (default: none: modes show as set or kept; where the store keeps none, 0644/0755, or 0600/0700 with --allow-other).",
                               valueName: "octal"))
    var umask: String?

    @Flag(help: "Let other local users use the mount (FUSE allow_other, the same as -o allow_other; needs root or user_allow_other in /etc/fuse.conf). Without --umask, entries whose mode the store does not keep then show 0600/0700; modes set with chmod show as they are.")
    var allowOther = false

    func validate() throws {
        if let uid, Self.userID(uid) == nil { throw ValidationError("--uid: no such user: \(uid)") }
        if let gid, Self.groupID(gid) == nil { throw ValidationError("--gid: no such group: \(gid)") }
        if let umask, Self.octal(umask) == nil { throw ValidationError("--umask must be octal permission bits, e.g. 022 or 077") }
    }

    /// The FUSE mount options these add to `options` (the `-o` ones, split).
    func mountOptions(adding options: [String]) -> [String] {
        allowOther && !options.contains("allow_other") ? options + ["allow_other"] : options
    }

    /// What entries show, for a mount with the FUSE options `options` (all of them, split).
    func localAccess(mountOptions options: [String]) -> LocalAccess {
        let sharing = options.contains("allow_other")
        return LocalAccess(uid: uid.flatMap(Self.userID), gid: gid.flatMap(Self.groupID),
                           umask: umask.flatMap(Self.octal), maskWhereNoMode: sharing ? 0o077 : nil)
    }

    static func octal(_ text: String) -> mode_t? {
        guard !text.isEmpty, text.count <= 4, let value = mode_t(text, radix: 8), value <= 0o777 else { return nil }
        return value
    }

    static func userID(_ text: String) -> uid_t? {
        if let number = uid_t(text) { return number }
        return getpwnam(text).map { $0.pointee.pw_uid }
    }

    static func groupID(_ text: String) -> gid_t? {
        if let number = gid_t(text) { return number }
        return getgrnam(text).map { $0.pointee.gr_gid }
    }
}
