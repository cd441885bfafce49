/* Atomic file writing, atomic directory replacement and small file-system helpers.
 * See include/loom/fileio.h for the guarantees. POSIX only (open/fsync/rename/openat). */
#include "loom/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#endif

/* Largest single write(2); Linux transfers at most ~2 GiB per call anyway. */
#define LOOM_WRITE_CHUNK ((size_t)1 << 30)
/* Deepest directory nesting loom_rm_rf descends into (loom's own trees are shallow). */
#define LOOM_RM_MAX_DEPTH 64

/* malloc'd concatenation of a and b. */
static char *str_cat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (!s) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

/* malloc'd copy of `path` without trailing slashes ("/" stays "/"). */
static char *strip_slashes(const char *path) {
    char *s = strdup(path);
    if (!s) return NULL;
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/') s[--n] = 0;
    return s;
}

/* malloc'd parent directory of `path`: "a/b" -> "a", "b" -> ".", "/b" -> "/". */
static char *parent_dir(const char *path) {
    char *s = strip_slashes(path);
    if (!s) return NULL;
    char *slash = strrchr(s, '/');
    if (!slash) {
        free(s);
        return strdup(".");
    }
    while (slash > s && slash[-1] == '/') slash--;
    if (slash == s)
        s[1] = 0;
    else
        *slash = 0;
    return s;
}

/* Test-only: LOOM_TEST_KILL_AT=N makes the process kill itself (SIGKILL) just before its N-th
 * rename or fsync in this file, counted from the start of the process, so that a test can stop a
 * save at every step that changes what is on disk. Unset (always, outside tests) it does nothing. */
static void test_kill_point(void) {
    static long long at = -1, count = 0;
    if (at < 0) {
        const char *e = getenv("LOOM_TEST_KILL_AT");
        at = e && *e ? strtoll(e, NULL, 10) : 0;
        if (at < 0) at = 0;
    }
    if (at > 0 && ++count == at) {
        fflush(stdout);
        fflush(stderr);
        kill(getpid(), SIGKILL);
    }
}

static int do_fsync(int fd) {
    test_kill_point();
    return fsync(fd);
}

static int do_rename(const char *from, const char *to) {
    test_kill_point();
    return rename(from, to);
}

/* Swap two existing paths in one step (Linux's renameat2 with RENAME_EXCHANGE): 0 on success,
 * -1 with errno set otherwise (EINVAL or ENOSYS where the kernel or file system cannot). The
 * test-only LOOM_TEST_NO_EXCHANGE=1 makes it unavailable, for testing the fallback. */
static int do_exchange(const char *a, const char *b) {
    const char *no = getenv("LOOM_TEST_NO_EXCHANGE");
    if (no && *no && strcmp(no, "0") != 0) {
        errno = ENOSYS;
        return -1;
    }
#if defined(__linux__) && defined(SYS_renameat2)
    test_kill_point();
    return (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 2 /* RENAME_EXCHANGE */);
#else
    (void)a;
    (void)b;
    errno = ENOSYS;
    return -1;
#endif
}

enum loom_status loom_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return loom_fail(LOOM_ERR_IO, "cannot open directory %s: %s", dir, strerror(errno));
    int rc = do_fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0 && err != EINVAL)
        return loom_fail(LOOM_ERR_IO, "cannot fsync directory %s: %s", dir, strerror(err));
    return LOOM_OK;
}

static enum loom_status fsync_parent(const char *path) {
    char *dir = parent_dir(path);
    if (!dir) return loom_fail(LOOM_ERR_OOM, "out of memory syncing the directory of %s", path);
    enum loom_status s = loom_fsync_dir(dir);
    free(dir);
    return s;
}

/* ---- atomic files ---------------------------------------------------------------------------- */

static void atomic_release(struct loom_atomic_file *f) {
    free(f->dest);
    free(f->tmp);
    f->dest = f->tmp = NULL;
    f->fd = -1;
}

enum loom_status loom_atomic_file_open(struct loom_atomic_file *f, const char *dest) {
    f->fd = -1;
    f->dest = f->tmp = NULL;
    f->bytes = 0;
    f->status = LOOM_OK;
    if (!dest || !*dest) return loom_fail(LOOM_ERR_INVALID_ARG, "empty output file name");
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".tmp.%ld", (long)getpid());
    f->dest = strdup(dest);
    f->tmp = str_cat(dest, suffix);
    if (!f->dest || !f->tmp) {
        atomic_release(f);
        return loom_fail(LOOM_ERR_OOM, "out of memory opening %s", dest);
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0) return LOOM_OK;
        /* A temporary with our pid cannot belong to a live writer on this host: it was left by a
         * crashed process that had the same pid. Replace it once. */
        if (errno != EEXIST || attempt == 1 || unlink(f->tmp) != 0) break;
    }
    int err = errno;
    enum loom_status s = loom_fail(LOOM_ERR_IO, "cannot create %s (temporary for %s): %s", f->tmp,
                                   dest, strerror(err));
    atomic_release(f);
    return s;
}

enum loom_status loom_atomic_file_write(struct loom_atomic_file *f, const void *data, size_t n) {
    if (f->status != LOOM_OK) return f->status;
    if (f->fd < 0) return loom_fail(LOOM_ERR_INTERNAL, "write to an atomic file that is not open");
    const char *p = data;
    while (n > 0) {
        size_t chunk = n < LOOM_WRITE_CHUNK ? n : LOOM_WRITE_CHUNK;
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            /* write() returning 0 for a non-zero count means no space could be allocated. */
            const char *why = w < 0 ? strerror(errno) : "no space left (short write)";
            f->status = loom_fail(LOOM_ERR_IO, "cannot write %s (after %llu bytes, via %s): %s",
                                  f->dest, (unsigned long long)f->bytes, f->tmp, why);
            return f->status;
        }
        p += w;
        n -= (size_t)w;
        f->bytes += (uint64_t)w;
    }
    return LOOM_OK;
}

enum loom_status loom_atomic_file_commit(struct loom_atomic_file *f) {
    if (f->status != LOOM_OK) {
        enum loom_status s = f->status;
        loom_atomic_file_abort(f);
        return s;
    }
    if (f->fd < 0) return loom_fail(LOOM_ERR_INTERNAL, "commit of an atomic file that is not open");
    enum loom_status s = LOOM_OK;
    /* fsync reports delayed write errors (ENOSPC, EIO) too; close can as well on network file
     * systems, so both are checked before the rename makes the file visible. */
    if (do_fsync(f->fd) != 0) {
        s = loom_fail(LOOM_ERR_IO, "cannot write %s (fsync of %s): %s", f->dest, f->tmp,
                      strerror(errno));
    }
    int rc = close(f->fd);
    int err = errno;
    f->fd = -1;
    if (s == LOOM_OK && rc != 0)
        s = loom_fail(LOOM_ERR_IO, "cannot write %s (close of %s): %s", f->dest, f->tmp,
                      strerror(err));
    if (s == LOOM_OK && do_rename(f->tmp, f->dest) != 0)
        s = loom_fail(LOOM_ERR_IO, "cannot rename %s to %s: %s", f->tmp, f->dest, strerror(errno));
    if (s != LOOM_OK) {
        loom_atomic_file_abort(f);
        return s;
    }
    s = fsync_parent(f->dest);
    atomic_release(f);
    return s;
}

void loom_atomic_file_abort(struct loom_atomic_file *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    atomic_release(f);
}

enum loom_status loom_atomic_write_file(const char *dest, const void *data, size_t n) {
    struct loom_atomic_file f;
    LOOM_CHECK(loom_atomic_file_open(&f, dest));
    enum loom_status s = loom_atomic_file_write(&f, data, n);
    if (s != LOOM_OK) {
        loom_atomic_file_abort(&f);
        return s;
    }
    return loom_atomic_file_commit(&f);
}

/* ---- directories ----------------------------------------------------------------------------- */

enum loom_status loom_atomic_rename_dir(const char *tmpdir, const char *destdir) {
    enum loom_status s = LOOM_OK;
    char *src = strip_slashes(tmpdir), *dst = strip_slashes(destdir), *aside = NULL;
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".old.%ld", (long)getpid());
    if (!src || !dst || !(aside = str_cat(dst, suffix))) {
        s = loom_fail(LOOM_ERR_OOM, "out of memory renaming %s", tmpdir);
        goto done;
    }
    struct stat st;
    if (stat(src, &st) != 0 || !S_ISDIR(st.st_mode)) {
        s = loom_fail(LOOM_ERR_IO, "cannot put %s in place as %s: %s is not a directory", src, dst,
                      src);
        goto done;
    }
    /* The entries of the new directory must be durable before it becomes visible. */
    if ((s = loom_fsync_dir(src)) != LOOM_OK) goto done;

    if (lstat(dst, &st) != 0) {
        if (errno != ENOENT) {
            s = loom_fail(LOOM_ERR_IO, "cannot inspect %s: %s", dst, strerror(errno));
            goto done;
        }
        if (do_rename(src, dst) != 0) {
            s = loom_fail(LOOM_ERR_IO, "cannot rename %s to %s: %s", src, dst, strerror(errno));
            goto done;
        }
        if ((s = fsync_parent(src)) != LOOM_OK) goto done;
        s = fsync_parent(dst);
        goto done;
    }
    if (!S_ISDIR(st.st_mode)) {
        s = loom_fail(LOOM_ERR_IO, "cannot replace %s with directory %s: %s is not a directory",
                      dst, src, dst);
        goto done;
    }
    /* destdir exists: swap the two in one step where the file system can, so that destdir is
     * never missing; the old checkpoint, now under tmpdir's name, is removed after. */
    if (do_exchange(src, dst) == 0) {
        if ((s = fsync_parent(dst)) != LOOM_OK) goto done;
        if ((s = fsync_parent(src)) != LOOM_OK) goto done;
        if ((s = loom_rm_rf(src)) != LOOM_OK) goto done;
        s = fsync_parent(src);
        goto done;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP && errno != EOPNOTSUPP) {
        s = loom_fail(LOOM_ERR_IO, "cannot exchange %s and %s: %s", src, dst, strerror(errno));
        goto done;
    }
    /* destdir exists, so an aside copy with our name is a stale duplicate of an older one. */
    if ((s = loom_rm_rf(aside)) != LOOM_OK) goto done;
    if (do_rename(dst, aside) != 0) {
        s = loom_fail(LOOM_ERR_IO, "cannot rename %s to %s: %s", dst, aside, strerror(errno));
        goto done;
    }
    if ((s = fsync_parent(dst)) != LOOM_OK) goto done;
    if (do_rename(src, dst) != 0) {
        int err = errno;
        (void)rename(aside, dst); /* put the old one back under its name */
        (void)fsync_parent(dst);
        s = loom_fail(LOOM_ERR_IO, "cannot rename %s to %s: %s", src, dst, strerror(err));
        goto done;
    }
    if ((s = fsync_parent(src)) != LOOM_OK) goto done;
    if ((s = fsync_parent(dst)) != LOOM_OK) goto done;
    if ((s = loom_rm_rf(aside)) != LOOM_OK) goto done;
    s = fsync_parent(aside);
done:
    free(src);
    free(dst);
    free(aside);
    return s;
}

enum loom_status loom_mkdir_p(const char *path) {
    if (!path || !*path) return loom_fail(LOOM_ERR_INVALID_ARG, "empty directory name");
    char *buf = strip_slashes(path);
    if (!buf) return loom_fail(LOOM_ERR_OOM, "out of memory creating %s", path);
    enum loom_status s = LOOM_OK;
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            s = loom_fail(LOOM_ERR_IO, "cannot create directory %s: %s", buf, strerror(errno));
            break;
        }
        struct stat st;
        if (c == 0) { /* the full path: it must be a directory now */
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                s = loom_fail(LOOM_ERR_IO, "cannot create directory %s: exists and is not a "
                              "directory", buf);
            break;
        }
        *p = c;
    }
    free(buf);
    return s;
}

enum loom_status loom_dir_writable(const char *path) {
    LOOM_CHECK(loom_mkdir_p(path));
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/.loom_write_test.%ld", path, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return loom_fail(LOOM_ERR_IO, "cannot write in directory %s: %s", path, strerror(errno));
    close(fd);
    unlink(probe);
    return LOOM_OK;
}

/* Remove entry `name` of directory `parent`; `path` is its full name for messages. */
static enum loom_status rm_at(int parent, const char *name, const char *path, int depth) {
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return LOOM_OK;
        return loom_fail(LOOM_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(parent, name, 0) != 0 && errno != ENOENT)
            return loom_fail(LOOM_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
        return LOOM_OK;
    }
    if (depth >= LOOM_RM_MAX_DEPTH)
        return loom_fail(LOOM_ERR_IO, "cannot remove %s: nested deeper than %d directories", path,
                         LOOM_RM_MAX_DEPTH);
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return loom_fail(LOOM_ERR_IO, "cannot open directory %s: %s", path, strerror(errno));
    DIR *d = fdopendir(fd);
    if (!d) {
        int err = errno;
        close(fd);
        return loom_fail(LOOM_ERR_IO, "cannot open directory %s: %s", path, strerror(err));
    }
    enum loom_status s = LOOM_OK;
    struct dirent *e = NULL;
    while (s == LOOM_OK && (errno = 0, e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *sub = malloc(strlen(path) + strlen(e->d_name) + 2);
        if (!sub) {
            s = loom_fail(LOOM_ERR_OOM, "out of memory removing %s", path);
            break;
        }
        sprintf(sub, "%s/%s", path, e->d_name);
        s = rm_at(dirfd(d), e->d_name, sub, depth + 1);
        free(sub);
    }
    if (s == LOOM_OK && !e && errno != 0)
        s = loom_fail(LOOM_ERR_IO, "cannot list directory %s: %s", path, strerror(errno));
    closedir(d);
    if (s == LOOM_OK && unlinkat(parent, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        s = loom_fail(LOOM_ERR_IO, "cannot remove directory %s: %s", path, strerror(errno));
    return s;
}

enum loom_status loom_rm_rf(const char *path) {
    if (!path || !*path) return loom_fail(LOOM_ERR_INVALID_ARG, "refusing to remove an empty path");
    char *p = strip_slashes(path);
    if (!p) return loom_fail(LOOM_ERR_OOM, "out of memory removing %s", path);
    const char *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    enum loom_status s;
    if (strcmp(p, "/") == 0 || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        s = loom_fail(LOOM_ERR_INVALID_ARG, "refusing to remove '%s'", path);
    else
        s = rm_at(AT_FDCWD, p, p, 0);
    free(p);
    return s;
}

/* ---- reading --------------------------------------------------------------------------------- */

enum loom_status loom_open_regular(const char *path, int *out) {
    *out = -1;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return loom_fail(LOOM_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return loom_fail(LOOM_ERR_IO, "cannot stat %s: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return loom_fail(LOOM_ERR_IO, "cannot read %s: not a regular file (%s)", path,
                         S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                         : S_ISSOCK(st.st_mode) ? "a socket" : "a device");
    }
    /* back to blocking reads */
    int fl = fcntl(fd, F_GETFL);
    if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
        int err = errno;
        close(fd);
        return loom_fail(LOOM_ERR_IO, "cannot open %s: %s", path, strerror(err));
    }
    *out = fd;
    return LOOM_OK;
}

enum loom_status loom_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len) {
    *out = NULL;
    if (out_len) *out_len = 0;
    int fd;
    LOOM_CHECK(loom_open_regular(path, &fd));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return loom_fail(LOOM_ERR_IO, "cannot stat %s: %s", path, strerror(err));
    }
    if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
        close(fd);
        return loom_fail(LOOM_ERR_FORMAT, "%s is %lld bytes, more than the %zu allowed", path,
                         (long long)st.st_size, max_bytes);
    }
    /* The size is known (the loop still copes with a file that grows or shrinks). */
    size_t cap = (size_t)st.st_size + 1;
    size_t len = 0;
    char *buf = malloc(cap);
    enum loom_status s = LOOM_OK;
    if (!buf) s = loom_fail(LOOM_ERR_OOM, "out of memory reading %s (%zu bytes)", path, cap);
    while (s == LOOM_OK) {
        if (len == cap) {
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                s = loom_fail(LOOM_ERR_OOM, "out of memory reading %s (%zu bytes)", path, ncap);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            s = loom_fail(LOOM_ERR_IO, "cannot read %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        len += (size_t)r;
        if (len > max_bytes)
            s = loom_fail(LOOM_ERR_FORMAT, "%s is more than the %zu bytes allowed", path,
                          max_bytes);
    }
    close(fd);
    /* The loop grows the buffer before each read, so here len < cap: room for the NUL. */
    if (s != LOOM_OK) {
        free(buf);
        return s;
    }
    buf[len] = 0;
    *out = buf;
    if (out_len) *out_len = len;
    return LOOM_OK;
}

bool loom_file_exists(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0;
}
