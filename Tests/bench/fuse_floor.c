/* The FUSE floor of the performance record: the least a FUSE file system can cost on this
 * machine. It shows a local directory read-only through libfuse's low-level API and does
 * nothing else: no network, no catalog, no cache of its own. A `stat` or `ls -l` of it is one
 * round trip through /dev/fuse per name plus the local disk's own work, so its time against
 * local disk is what any FUSE file system pays here before doing anything of its own (docfs's
 * `stat` target, <= 2x local disk, is held against this too).
 *
 * Built by the bench (`cc fuse_floor.c $(pkg-config --cflags --libs fuse3)`), run as
 *   fuse_floor DIRECTORY MOUNTPOINT
 * in the foreground until unmounted. Inodes are the directory's own; each is remembered with
 * its path while the kernel knows it (lookup count), as passthrough_ll does with descriptors.
 * Timeouts are docfs's defaults (1 s), and the same libfuse multi-threaded loop is used. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct node {
    fuse_ino_t ino;
    uint64_t lookups;
    char *path;
    struct node *next;
};

#define BUCKETS 65536
static struct node *table[BUCKETS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static char *root_path;

/* The path of `ino` (the caller frees it); NULL when the kernel forgot it. */
static char *path_of(fuse_ino_t ino) {
    if (ino == FUSE_ROOT_ID) return strdup(root_path);
    pthread_mutex_lock(&table_lock);
    char *path = NULL;
    for (struct node *n = table[ino % BUCKETS]; n; n = n->next)
        if (n->ino == ino) { path = strdup(n->path); break; }
    pthread_mutex_unlock(&table_lock);
    return path;
}

static void remember(fuse_ino_t ino, const char *path) {
    pthread_mutex_lock(&table_lock);
    struct node **slot = &table[ino % BUCKETS];
    for (struct node *n = *slot; n; n = n->next)
        if (n->ino == ino) { n->lookups++; pthread_mutex_unlock(&table_lock); return; }
    struct node *n = calloc(1, sizeof *n);
    n->ino = ino; n->lookups = 1; n->path = strdup(path); n->next = *slot; *slot = n;
    pthread_mutex_unlock(&table_lock);
}

static void forget_one(fuse_ino_t ino, uint64_t count) {
    pthread_mutex_lock(&table_lock);
    for (struct node **slot = &table[ino % BUCKETS]; *slot; slot = &(*slot)->next) {
        struct node *n = *slot;
        if (n->ino != ino) continue;
        n->lookups = n->lookups > count ? n->lookups - count : 0;
        if (n->lookups == 0) { *slot = n->next; free(n->path); free(n); }
        break;
    }
    pthread_mutex_unlock(&table_lock);
}

static void floor_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
    char *dir = path_of(parent);
    if (!dir) { fuse_reply_err(req, ESTALE); return; }
    char *path;
    if (asprintf(&path, "%s/%s", dir, name) < 0) { free(dir); fuse_reply_err(req, ENOMEM); return; }
    free(dir);
    struct fuse_entry_param entry;
    memset(&entry, 0, sizeof entry);
    if (lstat(path, &entry.attr) != 0) {
        int error = errno;
        free(path);
        if (error != ENOENT) { fuse_reply_err(req, error); return; }
        entry.entry_timeout = 1; /* a negative entry, as docfs answers */
        fuse_reply_entry(req, &entry);
        return;
    }
    entry.ino = entry.attr.st_ino == FUSE_ROOT_ID ? 0 : entry.attr.st_ino;
    if (entry.ino == 0) { free(path); fuse_reply_err(req, EIO); return; }
    entry.attr_timeout = 1;
    entry.entry_timeout = 1;
    remember(entry.ino, path);
    free(path);
    fuse_reply_entry(req, &entry);
}

static void floor_forget(fuse_req_t req, fuse_ino_t ino, uint64_t count) {
    forget_one(ino, count);
    fuse_reply_none(req);
}

static void floor_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets) {
    for (size_t i = 0; i < count; i++) forget_one(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void floor_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi;
    char *path = path_of(ino);
    if (!path) { fuse_reply_err(req, ESTALE); return; }
    struct stat attr;
    int result = lstat(path, &attr);
    free(path);
    if (result != 0) { fuse_reply_err(req, errno); return; }
    if (ino == FUSE_ROOT_ID) attr.st_ino = FUSE_ROOT_ID;
    fuse_reply_attr(req, &attr, 1);
}

static void floor_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    char *path = path_of(ino);
    if (!path) { fuse_reply_err(req, ESTALE); return; }
    DIR *dir = opendir(path);
    free(path);
    if (!dir) { fuse_reply_err(req, errno); return; }
    fi->fh = (uint64_t)(uintptr_t)dir;
    fuse_reply_open(req, fi);
}

/* Entries from the directory's own stream; the offset is telldir's, as passthrough_ll does. */
static void floor_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)ino;
    DIR *dir = (DIR *)(uintptr_t)fi->fh;
    char *buffer = malloc(size);
    if (!buffer) { fuse_reply_err(req, ENOMEM); return; }
    size_t used = 0;
    seekdir(dir, offset);
    for (;;) {
        errno = 0;
        struct dirent *entry = readdir(dir);
        if (!entry) break;
        struct stat attr;
        memset(&attr, 0, sizeof attr);
        attr.st_ino = entry->d_ino;
        attr.st_mode = (mode_t)entry->d_type << 12;
        size_t needed = fuse_add_direntry(req, buffer + used, size - used, entry->d_name, &attr, telldir(dir));
        if (needed > size - used) break;
        used += needed;
    }
    fuse_reply_buf(req, buffer, used);
    free(buffer);
}

static void floor_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)ino;
    closedir((DIR *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops operations = {
    .lookup = floor_lookup,
    .forget = floor_forget,
    .forget_multi = floor_forget_multi,
    .getattr = floor_getattr,
    .opendir = floor_opendir,
    .readdir = floor_readdir,
    .releasedir = floor_releasedir,
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DIRECTORY MOUNTPOINT\n", argv[0]);
        return 2;
    }
    root_path = realpath(argv[1], NULL);
    if (!root_path) { perror(argv[1]); return 1; }
    char *fuse_argv[] = {argv[0], "-o", "ro,fsname=fuse-floor", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
    struct fuse_session *session = fuse_session_new(&args, &operations, sizeof operations, NULL);
    if (!session) return 1;
    if (fuse_session_mount(session, argv[2]) != 0) { fuse_session_destroy(session); return 1; }
    fuse_set_signal_handlers(session);
    /* docfs's loop: at most 10 idle workers of 64 (FuseMount.swift). */
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(config, 0);
    fuse_loop_cfg_set_idle_threads(config, 10);
    fuse_loop_cfg_set_max_threads(config, 64);
    int result = fuse_session_loop_mt(session, config);
    fuse_loop_cfg_destroy(config);
    fuse_remove_signal_handlers(session);
    fuse_session_unmount(session);
    fuse_session_destroy(session);
    return result == 0 ? 0 : 1;
}
