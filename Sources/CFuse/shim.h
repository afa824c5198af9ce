/* The only C that docfs compiles against: libfuse3's low-level API, pinned to the 3.12
 * interface, plus inline wrappers for what Swift cannot call directly (macros, bitfields). */
#ifndef DOCFS_CFUSE_SHIM_H
#define DOCFS_CFUSE_SHIM_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <sys/stat.h>
#include <errno.h>

/* fuse_session_loop_mt is a macro over versioned symbols; this runs it with a
 * multi-threaded loop of at most `max_threads` workers. */
static inline int docfs_session_loop_mt(struct fuse_session *se, unsigned int max_idle_threads,
                                        unsigned int max_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (config == NULL) return -ENOMEM;
    fuse_loop_cfg_set_clone_fd(config, 0);
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    fuse_loop_cfg_set_max_threads(config, max_threads);
    int result = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return result;
}

/* fuse_file_info's flags are bitfields; Swift sees them, but setting them through
 * these helpers keeps the adapter readable. */
static inline void docfs_fi_set_open_flags(struct fuse_file_info *fi, int keep_cache, int direct_io) {
    fi->keep_cache = keep_cache ? 1 : 0;
    fi->direct_io = direct_io ? 1 : 0;
}

static inline struct fuse_args docfs_args_init(int argc, char **argv) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    return args;
}

#endif
