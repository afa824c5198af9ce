/* The only C that docfs compiles against: libfuse3's low-level API, pinned to the 3.12
 * interface, plus inline wrappers for what Swift cannot call directly (macros, bitfields). */
#ifndef DOCFS_CFUSE_SHIM_H
#define DOCFS_CFUSE_SHIM_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <sys/stat.h>
#include <errno.h>
#include <malloc.h>

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

/* Answers a read with `size` bytes at `offset` of the open file `fd`, without copying them
 * through a buffer of ours: libfuse splices them into /dev/fuse where the kernel allows it
 * (FUSE_CAP_SPLICE_WRITE), and reads them into its own buffer otherwise. As passthrough_ll's
 * lo_read does. */
static inline int docfs_reply_fd(fuse_req_t req, int fd, size_t size, off_t offset) {
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = (enum fuse_buf_flags)(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
    buf.buf[0].fd = fd;
    buf.buf[0].pos = offset;
    return fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

/* The capabilities docfs asks for, each only where the kernel offers it (conn->capable). */
static inline void docfs_want_if_capable(struct fuse_conn_info *conn, unsigned int capability) {
    if (conn->capable & capability) conn->want |= capability;
}

static inline struct fuse_args docfs_args_init(int argc, char **argv) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    return args;
}

#endif
