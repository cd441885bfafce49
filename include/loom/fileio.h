/* Safe file writing and small file-system helpers.
 *
 * Atomic files: every file loom writes that a later run reads (checkpoint shards, the "latest"
 * pointer, exported safetensors) goes through struct loom_atomic_file. Bytes go to a temporary
 * file next to the destination, "DEST.tmp.<pid>"; commit flushes it to stable storage (fsync),
 * renames it over DEST and fsyncs the directory, so that DEST is at every instant either the old
 * complete file or the new complete file, never a torn mix, whatever the crash or power loss.
 * A crash before commit leaves the old DEST untouched and, at worst, a stale DEST.tmp.<pid>.
 *
 * Errors (a full disk, a read-only file system, a missing directory) are LOOM_ERR_IO with a
 * one-line message naming the file and the system's reason.
 */
#ifndef LOOM_FILEIO_H
#define LOOM_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"

struct loom_atomic_file {
    int fd;                  /* -1 when not open */
    char *dest;              /* final path */
    char *tmp;               /* "DEST.tmp.<pid>" */
    uint64_t bytes;          /* bytes written so far */
    enum loom_status status; /* first write error; sticky: later writes and commit return it */
};

/* Create DEST.tmp.<pid> for writing (a stale one with this pid, left by a crashed earlier
 * process, is replaced). The directory of DEST must exist. On failure `f` holds nothing to free,
 * and abort on it is a no-op. */
enum loom_status loom_atomic_file_open(struct loom_atomic_file *f, const char *dest);
/* Write n bytes (all of them, retrying short writes). After a failure every later write and the
 * commit return the same error without writing. */
enum loom_status loom_atomic_file_write(struct loom_atomic_file *f, const void *data, size_t n);
/* fsync + close the temporary, rename it over DEST, fsync DEST's directory. On failure the
 * temporary is removed and DEST keeps its old content. In every case `f` is released. */
enum loom_status loom_atomic_file_commit(struct loom_atomic_file *f);
/* Close and remove the temporary; DEST is untouched. Safe to call on a released or failed-open
 * `f`, and more than once. */
void loom_atomic_file_abort(struct loom_atomic_file *f);

/* Write a whole buffer to `dest` atomically (open + write + commit). For small files such as a
 * checkpoint's "latest" pointer. */
enum loom_status loom_atomic_write_file(const char *dest, const void *data, size_t n);

/* Put a completely written directory `tmpdir` in place as `destdir` (same file system).
 * If destdir does not exist: rename(tmpdir, destdir).
 * If it exists: the two are swapped in one step (Linux's renameat2 RENAME_EXCHANGE), so that
 * destdir is never missing, and the old directory, now named tmpdir, is removed. Where the file
 * system cannot swap, destdir is renamed aside to "DESTDIR.old.<pid>", tmpdir renamed to
 * destdir, then the aside copy removed. Every step is followed by an fsync of the parent
 * directory.
 *
 * Crash semantics: at every instant either the old or the new checkpoint is complete under some
 * name, and the one under `destdir` is always complete when present:
 *   swap:     before it       old at destdir,   new at tmpdir
 *             after it        new at destdir,   old (complete, or being removed) at tmpdir
 *   fallback: before the first rename     old at destdir,             new at tmpdir
 *             between the two renames     old at DESTDIR.old.<pid>,   new at tmpdir
 *                                                                     (destdir missing)
 *             after the second rename     new at destdir,             old (complete, or being
 *                                                                     removed) at DESTDIR.old.<pid>
 * so a DESTDIR.old.<pid> is complete whenever destdir is missing (checkpoint.c puts it back).
 * Which checkpoint a run loads is decided by a separate pointer file (the "latest" file, written
 * with loom_atomic_write_file only after this function returns): a pointer names a directory
 * that was complete when the pointer was written. The contents of tmpdir must already be durable
 * (each file written with loom_atomic_file, or fsynced). On failure of the second rename the old
 * directory is renamed back to destdir.
 *
 * Test-only environment variables (tests/ckpt/test_kill_saves.sh; never set them otherwise):
 * LOOM_TEST_KILL_AT=N kills the process (SIGKILL) just before its N-th rename or fsync done
 * through this file; LOOM_TEST_NO_EXCHANGE=1 takes the fallback instead of the swap. */
enum loom_status loom_atomic_rename_dir(const char *tmpdir, const char *destdir);

/* fsync a directory, making renames and creations inside it durable. File systems that cannot
 * fsync a directory (EINVAL) are treated as success. */
enum loom_status loom_fsync_dir(const char *dir);

/* mkdir -p with mode 0777 (less the umask). Succeeds when the path already is a directory. */
enum loom_status loom_mkdir_p(const char *path);
/* loom_mkdir_p, then a file created in the directory and removed again: LOOM_ERR_IO naming the
 * directory and the reason when either fails (so that a run fails before it has trained, not at
 * its first save). */
enum loom_status loom_dir_writable(const char *path);

/* rm -rf for loom's own temporary directories: removes `path` and everything below it without
 * following symbolic links (a link is removed, never its target). A missing path is success.
 * Refuses "", "/", "." and "..". */
enum loom_status loom_rm_rf(const char *path);

/* Open `path` for reading (*fd, close with close()) when it is a regular file; anything else (a
 * FIFO, a device, a directory) is a LOOM_ERR_IO error naming it, at once: a FIFO never blocks. */
enum loom_status loom_open_regular(const char *path, int *fd);

/* Read a whole regular file (see loom_open_regular) into a malloc'd buffer (free with free()). The buffer is NUL-terminated one
 * byte past *out_len, so text files can be used as C strings. A file larger than max_bytes is a
 * LOOM_ERR_FORMAT error naming the file and both sizes. out_len may be NULL. */
enum loom_status loom_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len);

/* true when `path` names something that exists (following symbolic links). */
bool loom_file_exists(const char *path);

#endif
