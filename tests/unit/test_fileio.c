/* Tests of include/loom/fileio.h: atomic files (commit, abort, crash, full disk), atomic directory
 * replacement, mkdir -p, rm -rf, whole-file reads. Everything happens in a fresh directory under
 * $TMPDIR (or /tmp), removed at the end. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "expect.h"
#include "loom/fileio.h"

static char g_root[200];

static char *path_in(char *buf, const char *name) {
    snprintf(buf, 512, "%s/%s", g_root, name);
    return buf;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* true when the file at `path` holds exactly `text`. */
static int holds(const char *path, const char *text) {
    char *data = NULL;
    size_t n = 0;
    if (loom_read_file(path, 1 << 20, &data, &n) != LOOM_OK) return 0;
    int ok = n == strlen(text) && memcmp(data, text, n) == 0;
    free(data);
    return ok;
}

/* Number of entries of `dir` (without . and ..); with `contains`, only names containing it. */
static int count_entries(const char *dir, const char *contains) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!contains || strstr(e->d_name, contains)) n++;
    }
    closedir(d);
    return n;
}

static void test_commit_leaves_only_dest(void) {
    char dir[512], dest[1024];
    path_in(dir, "commit");
    EXPECT_OK(loom_mkdir_p(dir));
    snprintf(dest, sizeof dest, "%s/model.bin", dir);

    struct loom_atomic_file f;
    EXPECT_OK(loom_atomic_file_open(&f, dest));
    EXPECT(count_entries(dir, ".tmp.") == 1);
    EXPECT(!loom_file_exists(dest)); /* invisible until commit */
    EXPECT_OK(loom_atomic_file_write(&f, "hello ", 6));
    EXPECT_OK(loom_atomic_file_write(&f, "world", 5));
    EXPECT_OK(loom_atomic_file_write(&f, "", 0));
    EXPECT(f.bytes == 11);
    EXPECT_OK(loom_atomic_file_commit(&f));
    EXPECT(holds(dest, "hello world"));
    EXPECT(count_entries(dir, NULL) == 1);
    loom_atomic_file_abort(&f); /* after commit: harmless no-op */
    EXPECT(holds(dest, "hello world"));

    /* replacing an existing file */
    EXPECT_OK(loom_atomic_write_file(dest, "v2", 2));
    EXPECT(holds(dest, "v2"));
    EXPECT(count_entries(dir, NULL) == 1);
}

static void test_abort_leaves_dest(void) {
    char dir[512], dest[1024];
    path_in(dir, "abort");
    EXPECT_OK(loom_mkdir_p(dir));
    snprintf(dest, sizeof dest, "%s/latest", dir);
    put(dest, "old");

    struct loom_atomic_file f;
    EXPECT_OK(loom_atomic_file_open(&f, dest));
    EXPECT_OK(loom_atomic_file_write(&f, "new content", 11));
    loom_atomic_file_abort(&f);
    loom_atomic_file_abort(&f); /* twice is fine */
    EXPECT(holds(dest, "old"));
    EXPECT(count_entries(dir, NULL) == 1);

    /* abort without any write, on a file that does not exist yet */
    char fresh[1024];
    snprintf(fresh, sizeof fresh, "%s/never", dir);
    EXPECT_OK(loom_atomic_file_open(&f, fresh));
    loom_atomic_file_abort(&f);
    EXPECT(!loom_file_exists(fresh));
    EXPECT(count_entries(dir, NULL) == 1);
}

/* A child process writes most of a new file and dies before commit: the old file survives. */
static void test_crash_before_commit(void) {
    char dir[512], dest[1024];
    path_in(dir, "crash");
    EXPECT_OK(loom_mkdir_p(dir));
    snprintf(dest, sizeof dest, "%s/ckpt.safetensors", dir);
    put(dest, "old complete checkpoint");

    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct loom_atomic_file f;
        if (loom_atomic_file_open(&f, dest) != LOOM_OK) _exit(3);
        char junk[4096];
        memset(junk, 'x', sizeof junk);
        for (int i = 0; i < 16; i++)
            if (loom_atomic_file_write(&f, junk, sizeof junk) != LOOM_OK) _exit(4);
        _exit(0); /* the crash: no commit, no abort, no cleanup */
    }
    int wst = 0;
    waitpid(pid, &wst, 0);
    EXPECT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    EXPECT(holds(dest, "old complete checkpoint"));
    char stale[1100];
    snprintf(stale, sizeof stale, "%s.tmp.%ld", dest, (long)pid);
    EXPECT(loom_file_exists(stale)); /* the crashed writer's temporary, never DEST */

    /* The next writer is not disturbed by the stale temporary. */
    EXPECT_OK(loom_atomic_write_file(dest, "new", 3));
    EXPECT(holds(dest, "new"));

    /* A stale temporary carrying our own pid (a crashed earlier process with the same pid) is
     * replaced rather than blocking the write. */
    char mine[1100];
    snprintf(mine, sizeof mine, "%s.tmp.%ld", dest, (long)getpid());
    put(mine, "stale garbage from an earlier process");
    EXPECT_OK(loom_atomic_write_file(dest, "newer", 5));
    EXPECT(holds(dest, "newer"));
    EXPECT(!loom_file_exists(mine));
}

/* A full disk, simulated with a file-size limit in a child process: the write fails with
 * LOOM_ERR_IO naming the file, the error is sticky, and nothing but the old DEST remains. */
static void test_full_disk(void) {
    char dir[512], dest[1024];
    path_in(dir, "full");
    EXPECT_OK(loom_mkdir_p(dir));
    snprintf(dest, sizeof dest, "%s/shard.bin", dir);
    put(dest, "old");

    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG instead of killing us */
        struct rlimit rl = {.rlim_cur = 10000, .rlim_max = 10000};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
        struct loom_atomic_file f;
        if (loom_atomic_file_open(&f, dest) != LOOM_OK) _exit(11);
        static char big[65536];
        loom_clear_error();
        enum loom_status s = loom_atomic_file_write(&f, big, sizeof big);
        if (s != LOOM_ERR_IO) _exit(12);
        if (!strstr(loom_last_error(), dest)) _exit(13);
        if (f.bytes != 10000) _exit(14); /* the partial write was counted, then the error */
        if (loom_atomic_file_write(&f, "x", 1) != LOOM_ERR_IO) _exit(15); /* sticky */
        if (loom_atomic_file_commit(&f) != LOOM_ERR_IO) _exit(16);
        _exit(0);
    }
    int wst = 0;
    waitpid(pid, &wst, 0);
    if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
        fprintf(stderr, "full-disk child: status %d\n", WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
    EXPECT(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    EXPECT(holds(dest, "old"));
    EXPECT(count_entries(dir, NULL) == 1); /* the failed commit removed its temporary */
}

static void test_open_errors(void) {
    char dest[512];
    path_in(dest, "no/such/dir/file");
    struct loom_atomic_file f;
    EXPECT_FAIL(loom_atomic_file_open(&f, dest), LOOM_ERR_IO, dest);
    loom_atomic_file_abort(&f); /* no-op after a failed open */
    EXPECT_FAIL(loom_atomic_write_file(dest, "x", 1), LOOM_ERR_IO, "no/such/dir/file");
    EXPECT_FAIL(loom_atomic_file_open(&f, ""), LOOM_ERR_INVALID_ARG, "empty");
}

static void test_rename_dir(void) {
    char tmp[512], dest[512], file[700];
    path_in(tmp, "ckpt/iter_100.tmp");
    path_in(dest, "ckpt/iter_100");

    /* destination absent */
    EXPECT_OK(loom_mkdir_p(tmp));
    snprintf(file, sizeof file, "%s/a", tmp);
    EXPECT_OK(loom_atomic_write_file(file, "first", 5));
    EXPECT_OK(loom_atomic_rename_dir(tmp, dest));
    snprintf(file, sizeof file, "%s/a", dest);
    EXPECT(holds(file, "first"));
    EXPECT(!loom_file_exists(tmp));

    /* destination present, with a nested tree: replaced wholesale, the aside copy removed */
    char sub[600];
    snprintf(sub, sizeof sub, "%s/nested/deeper", dest);
    EXPECT_OK(loom_mkdir_p(sub));
    snprintf(file, sizeof file, "%s/old_only", sub);
    put(file, "x");
    EXPECT_OK(loom_mkdir_p(tmp));
    snprintf(file, sizeof file, "%s/a", tmp);
    EXPECT_OK(loom_atomic_write_file(file, "second", 6));
    char dest_slash[600];
    snprintf(dest_slash, sizeof dest_slash, "%s/", dest); /* trailing slashes are fine */
    EXPECT_OK(loom_atomic_rename_dir(tmp, dest_slash));
    snprintf(file, sizeof file, "%s/a", dest);
    EXPECT(holds(file, "second"));
    EXPECT(!loom_file_exists(sub));
    char parent[512];
    path_in(parent, "ckpt");
    EXPECT(count_entries(parent, NULL) == 1); /* no .old.<pid>, no .tmp */

    /* where the file system cannot swap (the test-only LOOM_TEST_NO_EXCHANGE): the two renames,
     * the second replacement's content in place, nothing else left; a stale aside copy with our
     * pid (left by a crash after the first rename of an earlier process) does not block it */
    setenv("LOOM_TEST_NO_EXCHANGE", "1", 1);
    EXPECT_OK(loom_mkdir_p(tmp));
    snprintf(file, sizeof file, "%s/a", tmp);
    put(file, "third");
    EXPECT_OK(loom_atomic_rename_dir(tmp, dest));
    snprintf(file, sizeof file, "%s/a", dest);
    EXPECT(holds(file, "third"));
    EXPECT(count_entries(parent, NULL) == 1);
    char aside[600];
    snprintf(aside, sizeof aside, "%s.old.%ld", dest, (long)getpid());
    EXPECT_OK(loom_mkdir_p(aside));
    EXPECT_OK(loom_mkdir_p(tmp));
    EXPECT_OK(loom_atomic_rename_dir(tmp, dest));
    EXPECT(count_entries(parent, NULL) == 1);
    unsetenv("LOOM_TEST_NO_EXCHANGE");

    /* errors: missing source; destination that is a file */
    EXPECT_FAIL(loom_atomic_rename_dir(tmp, dest), LOOM_ERR_IO, "not a directory");
    EXPECT(loom_file_exists(dest));
    char plain[600];
    snprintf(plain, sizeof plain, "%s/plainfile", parent);
    put(plain, "x");
    EXPECT_OK(loom_mkdir_p(tmp));
    EXPECT_FAIL(loom_atomic_rename_dir(tmp, plain), LOOM_ERR_IO, "plainfile");
    EXPECT(holds(plain, "x"));
}

static void test_mkdir_rm(void) {
    char deep[512], file[700];
    path_in(deep, "mk/a/b//c/");
    EXPECT_OK(loom_mkdir_p(deep));
    EXPECT_OK(loom_mkdir_p(deep)); /* existing: fine */
    struct stat st;
    path_in(file, "mk/a/b/c");
    EXPECT(stat(file, &st) == 0 && S_ISDIR(st.st_mode));
    path_in(file, "mk/a/b/c/f");
    put(file, "x");
    char below_file[800];
    snprintf(below_file, sizeof below_file, "%s/g", file);
    EXPECT_FAIL(loom_mkdir_p(below_file), LOOM_ERR_IO, file);
    EXPECT_FAIL(loom_mkdir_p(file), LOOM_ERR_IO, "not a directory");

    /* rm -rf does not follow a symbolic link out of the tree */
    char outside[512], keep[700], link[700];
    path_in(outside, "outside");
    EXPECT_OK(loom_mkdir_p(outside));
    snprintf(keep, sizeof keep, "%s/keep", outside);
    put(keep, "precious");
    path_in(link, "mk/a/link_to_outside");
    EXPECT(symlink(outside, link) == 0);
    path_in(link, "mk/a/dangling");
    EXPECT(symlink("/nonexistent/target", link) == 0);
    char mk[512];
    path_in(mk, "mk");
    EXPECT_OK(loom_rm_rf(mk));
    EXPECT(!loom_file_exists(mk));
    EXPECT(holds(keep, "precious"));
    EXPECT_OK(loom_rm_rf(mk)); /* missing: fine */
    EXPECT_OK(loom_rm_rf(keep)); /* a plain file */
    EXPECT(!loom_file_exists(keep));

    EXPECT_FAIL(loom_rm_rf("/"), LOOM_ERR_INVALID_ARG, "refusing");
    EXPECT_FAIL(loom_rm_rf("//"), LOOM_ERR_INVALID_ARG, "refusing");
    EXPECT_FAIL(loom_rm_rf("."), LOOM_ERR_INVALID_ARG, "refusing");
    EXPECT_FAIL(loom_rm_rf("some/.."), LOOM_ERR_INVALID_ARG, "refusing");
    EXPECT_FAIL(loom_rm_rf(""), LOOM_ERR_INVALID_ARG, "refusing");
}

static void test_read_file(void) {
    char p[512];
    path_in(p, "text.txt");
    put(p, "line one\nline two\n");
    char *data = NULL;
    size_t n = 0;
    EXPECT_OK(loom_read_file(p, 1000, &data, &n));
    EXPECT(n == 18 && data && data[n] == 0 && strcmp(data, "line one\nline two\n") == 0);
    free(data);
    EXPECT_OK(loom_read_file(p, 18, &data, NULL)); /* exactly at the cap */
    free(data);
    EXPECT_FAIL(loom_read_file(p, 17, &data, &n), LOOM_ERR_FORMAT, "text.txt");
    EXPECT(data == NULL);

    path_in(p, "empty");
    put(p, "");
    EXPECT_OK(loom_read_file(p, 0, &data, &n));
    EXPECT(n == 0 && data && data[0] == 0);
    free(data);

    path_in(p, "missing");
    EXPECT_FAIL(loom_read_file(p, 100, &data, &n), LOOM_ERR_IO, "missing");
    EXPECT_FAIL(loom_read_file(g_root, 100, &data, &n), LOOM_ERR_IO, "directory");

    /* a file whose size stat does not know (procfs): read until EOF, cap enforced */
    EXPECT_OK(loom_read_file("/proc/self/status", 1 << 20, &data, &n));
    EXPECT(n > 0 && strstr(data, "Pid:"));
    free(data);
    EXPECT_FAIL(loom_read_file("/proc/self/status", 10, &data, &n), LOOM_ERR_FORMAT, "10 bytes");

    EXPECT(loom_file_exists(g_root));
    EXPECT(!loom_file_exists(p));
    EXPECT(!loom_file_exists(NULL));
}

int main(void) {
    const char *base = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/loom_test_fileio_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_commit_leaves_only_dest();
    test_abort_leaves_dest();
    test_crash_before_commit();
    test_full_disk();
    test_open_errors();
    test_rename_dir();
    test_mkdir_rm();
    test_read_file();
    if (loom_rm_rf(g_root) != LOOM_OK) {
        fprintf(stderr, "cleanup: %s\n", loom_last_error());
        expect_failures++;
    }
    if (expect_finish("test_fileio")) return 1;
    printf("test_fileio: all passed\n");
    return 0;
}
