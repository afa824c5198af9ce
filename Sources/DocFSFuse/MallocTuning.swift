import CFuse
import Glibc

/// glibc malloc settings for the mount daemon.
///
/// glibc gives each thread that allocates while another holds an arena its own arena (up to 8
/// per core), and memory freed in one arena serves only that arena. The daemon's threads (FUSE
/// workers, the cooperative pool, NIO, the catalog's queues) each built a heap of their own
/// during a big listing, and a 100,000-entry `ls -l` peaked far above what it held. Two arenas
/// keep contention low on the worker threads and let freed memory be reused across them.
enum MallocTuning {
    static func apply() {
        _ = mallopt(M_ARENA_MAX, 2)
    }

    /// Hands the pages free chunks occupy back to the kernel: after a big folder's snapshot is
    /// dropped, the daemon's resident size shrinks to what it holds.
    static func releaseFreePages() {
        _ = malloc_trim(0)
    }
}
