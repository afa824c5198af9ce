import Foundation

/// The FUSE control filesystem (fusectl) at /sys/fs/fuse/connections: writing to `N/abort`
/// there ends FUSE connection N, which is what frees processes stuck in a mount. Some systems do
/// not mount it (containers, minimal images); `docfs unmount --force` then mounts it itself
/// (`mount -t fusectl none /sys/fs/fuse/connections`, which needs root), and where that fails
/// it says that processes stuck in the mount may stay stuck.
enum FuseControl {
    static let directory = "/sys/fs/fuse/connections"

    enum Availability: Equatable {
        /// It was mounted already.
        case mounted
        /// It was not; docfs mounted it just now (and leaves it mounted, as systemd would).
        case mountedNow
        /// It is not mounted and could not be: why.
        case unavailable(String)
    }

    /// Makes sure fusectl is mounted at `directory`. `mounts`: the mount table;
    /// `mountFusectl`: mounts it, returning 0 or an errno.
    static func ensureMounted(mounts: [MountTable.Entry] = MountTable.entries(),
                              mountFusectl: () -> Int32 = mountFusectl) -> Availability {
        if mounts.contains(where: { $0.mountpoint == directory && $0.type == "fusectl" }) { return .mounted }
        let code = mountFusectl()
        guard code == 0 else {
            return .unavailable("the FUSE control filesystem is not mounted on \(directory), and mounting it failed "
                                + "(\(String(cString: strerror(code))))")
        }
        return .mountedNow
    }

    /// `mount -t fusectl none /sys/fs/fuse/connections`: 0, or the errno.
    static func mountFusectl() -> Int32 {
        Glibc.mount("none", directory, "fusectl", 0, nil) == 0 ? 0 : errno
    }
}
