/* faultfs: an LD_PRELOAD shim for fault injection on one directory.

   1. A power-cut model. For every file under RASE_FAULTFS_DIR the shim keeps
      a durable image in RASE_FAULTFS_SHADOW: what the disk would hold after
      a power cut. A write changes only the live file and marks its 4 KiB
      blocks dirty; fsync or fdatasync copies the dirty blocks and the file
      size into the image before returning. After the process is killed,
      simulators/faults/faultfs.py puts the images back in place of the live
      files: everything not fsynced is gone (or, in the torn mode, each
      512-byte sector not fsynced is kept or lost at random).
   2. Disk errors on demand. RASE_FAULTFS_CONTROL names a small file the shim
      maps: its first byte 1 makes every write, truncate and unlink under the
      directory fail with ENOSPC, 2 with EROFS (opening for writing too, and
      fsync), 0 lets them through. No system call is spent per check.

   Limits (docs/reliability.md states them): directory entries (create,
   unlink, rename) are durable at once; writes through a shared mmap (SQLite's
   -shm index, which SQLite rebuilds from the WAL after a crash) are not
   modelled; a sector written twice between syncs comes back as its last
   version or its synced one, never the one in between. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define BLOCK 4096
#define MAX_FDS 65536
#define MAX_FILES 256

enum { FD_UNKNOWN = 0, FD_OTHER, FD_TRACKED };
enum { FAULT_NONE = 0, FAULT_ENOSPC = 1, FAULT_EROFS = 2 };

struct tracked {
    dev_t dev;
    ino_t ino;
    int live;                  /* 0 once unlinked */
    char name[NAME_MAX + 1];   /* path below the watched directory, '/' as '%' */
    int rfd;                   /* our own read-only descriptor of the file */
    int sfd;                   /* its durable image; -1: not modelled */
    off64_t image_size;        /* size of the durable image */
    unsigned char *dirty;      /* one byte per block written since the last sync */
    size_t ndirty;
};

static struct tracked files[MAX_FILES];
static int nfiles;
static unsigned char fd_state[MAX_FDS];
static short fd_file[MAX_FDS];
static unsigned char fd_append[MAX_FDS];
static unsigned char fd_sync[MAX_FDS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char watch[PATH_MAX];
static size_t watch_len;
static char shadow[PATH_MAX];
static volatile unsigned char *control;
static int ready;

#define REAL(ret, name, args)                                  \
    static ret(*real_##name) args;                             \
    static ret(*get_##name(void)) args {                       \
        if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name); \
        return real_##name;                                    \
    }
REAL(int, open, (const char *, int, ...))
REAL(int, open64, (const char *, int, ...))
REAL(int, openat, (int, const char *, int, ...))
REAL(int, openat64, (int, const char *, int, ...))
REAL(int, close, (int))
REAL(ssize_t, write, (int, const void *, size_t))
REAL(ssize_t, pwrite, (int, const void *, size_t, off_t))
REAL(ssize_t, pwrite64, (int, const void *, size_t, off64_t))
REAL(ssize_t, writev, (int, const struct iovec *, int))
REAL(ssize_t, pwritev, (int, const struct iovec *, int, off_t))
REAL(ssize_t, pread64, (int, void *, size_t, off64_t))
REAL(int, ftruncate, (int, off_t))
REAL(int, ftruncate64, (int, off64_t))
REAL(int, fsync, (int))
REAL(int, fdatasync, (int))
REAL(int, fallocate, (int, int, off_t, off_t))
REAL(int, posix_fallocate, (int, off_t, off_t))
REAL(int, unlink, (const char *))
REAL(int, unlinkat, (int, const char *, int))
REAL(int, rename, (const char *, const char *))
REAL(int, dup, (int))
REAL(int, dup2, (int, int))
REAL(int, dup3, (int, int, int))
REAL(void, sync, (void))
REAL(int, syncfs, (int))

__attribute__((constructor)) static void faultfs_init(void) {
    const char *dir = getenv("RASE_FAULTFS_DIR");
    const char *img = getenv("RASE_FAULTFS_SHADOW");
    const char *ctl = getenv("RASE_FAULTFS_CONTROL");
    if (!dir || !*dir || !realpath(dir, watch)) return;
    watch_len = strlen(watch);
    if (img && *img) snprintf(shadow, sizeof shadow, "%s", img);
    if (ctl && *ctl) {
        int fd = get_open()(ctl, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            void *p = mmap(NULL, BLOCK, PROT_READ, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) control = p;
            get_close()(fd);
        }
    }
    ready = 1;
}

static int fault(void) { return control ? control[0] : FAULT_NONE; }

/* dir + "/" + name into out (PATH_MAX bytes); 0 when it does not fit. */
static int join(char *out, const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b + 1 > PATH_MAX) return 0;
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return 1;
}

/* A path below the watched directory as one file name ('/' becomes '%'). */
static int image_name(char *out, const char *rel) {
    size_t n = strlen(rel);
    if (n > NAME_MAX) return 0;
    for (size_t i = 0; i <= n; i++) out[i] = rel[i] == '/' ? '%' : rel[i];
    return 1;
}

static int fault_errno(int kind) { return kind == FAULT_EROFS ? EROFS : ENOSPC; }

/* Under the watched directory: an absolute path, or relative to the cwd. */
static int absolute(const char *path, char *out);

static int under_watch(const char *path) {
    char abs[PATH_MAX];
    if (!ready || !path || !absolute(path, abs)) return 0;
    return strncmp(abs, watch, watch_len) == 0 && abs[watch_len] == '/';
}

static void copy_all(int from, int to) {
    char buf[65536];
    off_t off = 0;
    ssize_t n;
    while ((n = get_pread64()(from, buf, sizeof buf, off)) > 0) {
        get_pwrite64()(to, buf, (size_t)n, off);
        off += n;
    }
    get_ftruncate64()(to, off);
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* A new file record; its durable image starts as the file is now (what a
   previous run left, or an earlier cut put back). Called with mu held. */
static int add_file(int fd, const struct stat *st, const char *rel) {
    if (nfiles == MAX_FILES) return -1;
    struct tracked *f = &files[nfiles];
    memset(f, 0, sizeof *f);
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    f->live = 1;
    if (!image_name(f->name, rel)) return -1;
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    f->rfd = get_open()(proc, O_RDONLY | O_CLOEXEC);
    f->sfd = -1;
    /* SQLite's -shm is a memory-mapped index it rebuilds after a crash. */
    if (shadow[0] && f->rfd >= 0 && !ends_with(f->name, "-shm")) {
        char img[PATH_MAX];
        if (join(img, shadow, f->name)) {
            int existed = access(img, F_OK) == 0;
            f->sfd = get_open()(img, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
            if (f->sfd >= 0 && !existed) copy_all(f->rfd, f->sfd);
            struct stat ist;
            if (f->sfd >= 0 && fstat(f->sfd, &ist) == 0) f->image_size = ist.st_size;
        }
    }
    return nfiles++;
}

/* What fd is: a file under the watched directory or anything else. Called
   with mu held. */
static int classify(int fd) {
    char proc[64], path[PATH_MAX];
    struct stat st;
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, path, sizeof path - 1);
    if (n <= 0) return fd_state[fd] = FD_OTHER;
    path[n] = 0;
    if (strncmp(path, watch, watch_len) != 0 || path[watch_len] != '/' || fstat(fd, &st) != 0 ||
        !S_ISREG(st.st_mode))
        return fd_state[fd] = FD_OTHER;
    int idx = -1;
    for (int i = 0; i < nfiles; i++)
        if (files[i].live && files[i].dev == st.st_dev && files[i].ino == st.st_ino) idx = i;
    if (idx < 0) idx = add_file(fd, &st, path + watch_len + 1);
    if (idx < 0) return fd_state[fd] = FD_OTHER;
    int fl = fcntl(fd, F_GETFL);
    fd_file[fd] = (short)idx;
    fd_append[fd] = fl >= 0 && (fl & O_APPEND);
    fd_sync[fd] = fl >= 0 && (fl & (O_SYNC | O_DSYNC));
    return fd_state[fd] = FD_TRACKED;
}

static struct tracked *tracked(int fd) {
    if (!ready || fd < 0 || fd >= MAX_FDS) return NULL;
    if (fd_state[fd] == FD_UNKNOWN) classify(fd);
    return fd_state[fd] == FD_TRACKED ? &files[fd_file[fd]] : NULL;
}

static void mark(struct tracked *f, off_t off, size_t len) {
    if (f->sfd < 0 || len == 0) return;
    size_t first = (size_t)off / BLOCK, last = ((size_t)off + len - 1) / BLOCK;
    if (last >= f->ndirty) {
        size_t n = (last + 1) * 2;
        unsigned char *d = realloc(f->dirty, n);
        if (!d) return;
        memset(d + f->ndirty, 0, n - f->ndirty);
        f->dirty = d;
        f->ndirty = n;
    }
    memset(f->dirty + first, 1, last - first + 1);
}

/* fsync: the dirty blocks and the size reach the durable image. */
static void persist(struct tracked *f) {
    char buf[BLOCK];
    struct stat st;
    if (f->sfd < 0) return;
    for (size_t i = 0; i < f->ndirty; i++) {
        if (!f->dirty[i]) continue;
        ssize_t n = get_pread64()(f->rfd, buf, BLOCK, (off64_t)i * BLOCK);
        if (n > 0) get_pwrite64()(f->sfd, buf, (size_t)n, (off64_t)i * BLOCK);
        f->dirty[i] = 0;
    }
    if (fstat(f->rfd, &st) == 0 && st.st_size != f->image_size && get_ftruncate64()(f->sfd, st.st_size) == 0)
        f->image_size = st.st_size;
}

static void opened(int fd) {
    if (!ready || fd < 0 || fd >= MAX_FDS) return;
    pthread_mutex_lock(&mu);
    fd_state[fd] = FD_UNKNOWN;
    classify(fd);
    pthread_mutex_unlock(&mu);
}

static void forget(int fd) {
    if (fd >= 0 && fd < MAX_FDS) fd_state[fd] = FD_UNKNOWN;
}

static int wants_write(int flags) { return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0; }

#define OPEN_MODE(flags, last)                              \
    mode_t mode = 0;                                        \
    if ((flags) & (O_CREAT | O_TMPFILE)) {                  \
        va_list ap;                                         \
        va_start(ap, last);                                 \
        mode = (mode_t)va_arg(ap, int);                     \
        va_end(ap);                                         \
    }

#define REFUSE_OPEN(path, flags)                                           \
    if (fault() == FAULT_EROFS && wants_write(flags) && under_watch(path)) { \
        errno = EROFS;                                                     \
        return -1;                                                         \
    }

int open(const char *path, int flags, ...) {
    OPEN_MODE(flags, flags)
    REFUSE_OPEN(path, flags)
    int fd = get_open()(path, flags, mode);
    opened(fd);
    return fd;
}

int open64(const char *path, int flags, ...) {
    OPEN_MODE(flags, flags)
    REFUSE_OPEN(path, flags)
    int fd = get_open64()(path, flags, mode);
    opened(fd);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    OPEN_MODE(flags, flags)
    if (dirfd == AT_FDCWD || path[0] == '/') REFUSE_OPEN(path, flags)
    int fd = get_openat()(dirfd, path, flags, mode);
    opened(fd);
    return fd;
}

int openat64(int dirfd, const char *path, int flags, ...) {
    OPEN_MODE(flags, flags)
    if (dirfd == AT_FDCWD || path[0] == '/') REFUSE_OPEN(path, flags)
    int fd = get_openat64()(dirfd, path, flags, mode);
    opened(fd);
    return fd;
}

int close(int fd) {
    forget(fd);
    return get_close()(fd);
}

int dup(int fd) {
    int n = get_dup()(fd);
    forget(n);
    return n;
}

int dup2(int fd, int to) {
    int n = get_dup2()(fd, to);
    forget(n);
    return n;
}

int dup3(int fd, int to, int flags) {
    int n = get_dup3()(fd, to, flags);
    forget(n);
    return n;
}

/* Every write path: refuse in a fault, else write and mark the blocks. */
#define WRITE_BODY(call, offset_expr)                            \
    pthread_mutex_lock(&mu);                                     \
    struct tracked *f = tracked(fd);                             \
    if (!f) {                                                    \
        pthread_mutex_unlock(&mu);                               \
        return call;                                             \
    }                                                            \
    int kind = fault();                                          \
    if (kind) {                                                  \
        pthread_mutex_unlock(&mu);                               \
        errno = fault_errno(kind);                               \
        return -1;                                               \
    }                                                            \
    off_t at = offset_expr;                                      \
    ssize_t r = call;                                            \
    int saved = errno;                                           \
    if (r > 0 && at >= 0) {                                      \
        mark(f, at, (size_t)r);                                  \
        if (fd_sync[fd]) persist(f);                             \
    }                                                            \
    pthread_mutex_unlock(&mu);                                   \
    errno = saved;                                               \
    return r;

static off_t position(int fd) {
    if (fd_append[fd]) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : -1;
    }
    return lseek(fd, 0, SEEK_CUR);
}

ssize_t write(int fd, const void *buf, size_t n) { WRITE_BODY(get_write()(fd, buf, n), position(fd)) }

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { WRITE_BODY(get_pwrite()(fd, buf, n, off), off) }

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    WRITE_BODY(get_pwrite64()(fd, buf, n, off), off)
}

ssize_t writev(int fd, const struct iovec *iov, int n) {
    WRITE_BODY(get_writev()(fd, iov, n), position(fd))
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
    WRITE_BODY(get_pwritev()(fd, iov, n, off), off)
}

static int truncate_body(int fd, off64_t len, int use64) {
    pthread_mutex_lock(&mu);
    struct tracked *f = tracked(fd);
    if (!f) {
        pthread_mutex_unlock(&mu);
        return use64 ? get_ftruncate64()(fd, len) : get_ftruncate()(fd, (off_t)len);
    }
    int kind = fault();
    if (kind) {
        pthread_mutex_unlock(&mu);
        errno = fault_errno(kind);
        return -1;
    }
    struct stat st;
    off64_t old = fstat(fd, &st) == 0 ? st.st_size : len;
    int r = use64 ? get_ftruncate64()(fd, len) : get_ftruncate()(fd, (off_t)len);
    int saved = errno;
    if (r == 0 && old != len) {
        off64_t lo = old < len ? old : len, hi = old < len ? len : old;
        mark(f, lo, (size_t)(hi - lo));
    }
    pthread_mutex_unlock(&mu);
    errno = saved;
    return r;
}

int ftruncate(int fd, off_t len) { return truncate_body(fd, len, 0); }

int ftruncate64(int fd, off64_t len) { return truncate_body(fd, len, 1); }

int fallocate(int fd, int mode, off_t off, off_t len) {
    pthread_mutex_lock(&mu);
    int kind = tracked(fd) ? fault() : FAULT_NONE;
    pthread_mutex_unlock(&mu);
    if (kind) {
        errno = fault_errno(kind);
        return -1;
    }
    return get_fallocate()(fd, mode, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len) {
    pthread_mutex_lock(&mu);
    int kind = tracked(fd) ? fault() : FAULT_NONE;
    pthread_mutex_unlock(&mu);
    if (kind) return fault_errno(kind);    /* posix_fallocate returns the error */
    return get_posix_fallocate()(fd, off, len);
}

static int sync_body(int fd, int data_only) {
    pthread_mutex_lock(&mu);
    struct tracked *f = tracked(fd);
    if (f) {
        if (fault() == FAULT_EROFS) {
            pthread_mutex_unlock(&mu);
            errno = EROFS;
            return -1;
        }
        persist(f);
    }
    pthread_mutex_unlock(&mu);
    return data_only ? get_fdatasync()(fd) : get_fsync()(fd);
}

int fsync(int fd) { return sync_body(fd, 0); }

int fdatasync(int fd) { return sync_body(fd, 1); }

static void persist_all(void) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nfiles; i++)
        if (files[i].live) persist(&files[i]);
    pthread_mutex_unlock(&mu);
}

void sync(void) {
    persist_all();
    get_sync()();
}

int syncfs(int fd) {
    persist_all();
    return get_syncfs()(fd);
}

/* Directory entries change at once, in the live directory and the images. */
static void unlinked(const char *path) {
    char name[NAME_MAX + 1], img[PATH_MAX];
    if (!image_name(name, path + watch_len + 1)) return;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nfiles; i++) {
        if (files[i].live && strcmp(files[i].name, name) == 0) {
            files[i].live = 0;
            if (files[i].rfd >= 0) get_close()(files[i].rfd);
            if (files[i].sfd >= 0) get_close()(files[i].sfd);
            files[i].rfd = files[i].sfd = -1;
        }
    }
    pthread_mutex_unlock(&mu);
    if (shadow[0] && join(img, shadow, name)) get_unlink()(img);
}

/* path made absolute (PATH_MAX bytes); 0 when it does not fit. */
static int absolute(const char *path, char *out) {
    char cwd[PATH_MAX];
    if (path[0] == '/') {
        if (strlen(path) + 1 > PATH_MAX) return 0;
        strcpy(out, path);
        return 1;
    }
    return getcwd(cwd, sizeof cwd) && join(out, cwd, path);
}

int unlink(const char *path) {
    char abs[PATH_MAX];
    if (!under_watch(path) || !absolute(path, abs)) return get_unlink()(path);
    if (fault() == FAULT_EROFS) {
        errno = EROFS;
        return -1;
    }
    int r = get_unlink()(path);
    if (r == 0) unlinked(abs);
    return r;
}

int unlinkat(int dirfd, const char *path, int flags) {
    char abs[PATH_MAX];
    if ((dirfd != AT_FDCWD && path[0] != '/') || (flags & AT_REMOVEDIR) || !under_watch(path) ||
        !absolute(path, abs))
        return get_unlinkat()(dirfd, path, flags);
    if (fault() == FAULT_EROFS) {
        errno = EROFS;
        return -1;
    }
    int r = get_unlinkat()(dirfd, path, flags);
    if (r == 0) unlinked(abs);
    return r;
}

int rename(const char *from, const char *to) {
    int watched = under_watch(from) || under_watch(to);
    if (watched && fault() == FAULT_EROFS) {
        errno = EROFS;
        return -1;
    }
    if (!watched) return get_rename()(from, to);
    /* A rename replaces the target: drop the target's record and image
       first; the source keeps its record (same inode) under a new name. */
    char afrom[PATH_MAX], ato[PATH_MAX];
    if (!absolute(from, afrom) || !absolute(to, ato)) return get_rename()(from, to);
    int r = get_rename()(from, to);
    if (r != 0 || !under_watch(ato)) return r;
    unlinked(ato);
    if (under_watch(afrom) && shadow[0]) {
        char name_from[NAME_MAX + 1], name_to[NAME_MAX + 1], img_from[PATH_MAX], img_to[PATH_MAX];
        if (!image_name(name_from, afrom + watch_len + 1) || !image_name(name_to, ato + watch_len + 1)) return r;
        pthread_mutex_lock(&mu);
        for (int i = 0; i < nfiles; i++)
            if (files[i].live && strcmp(files[i].name, name_from) == 0) strcpy(files[i].name, name_to);
        pthread_mutex_unlock(&mu);
        if (join(img_from, shadow, name_from) && join(img_to, shadow, name_to)) get_rename()(img_from, img_to);
    }
    return r;
}
