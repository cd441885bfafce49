/* The checkpoint pointer file, latest_checkpointed_iteration.txt (Megatron's form: the iteration
 * in decimal), as loom_ckpt_resolve reads it for --load, generate and convert. The checkpoint
 * root holds two complete checkpoints, iter_0000002 and iter_0000004. The target checks the
 * outcome, not only that nothing crashes: a pointer of 1 to 18 decimal digits and at most one
 * line end ("\n", "\r\n" or "\r") resolves to the directory it names when that is complete, else
 * to the newest complete one (iter_0000004); anything else is an error. Input: the file. */
#include "fuzz_util.h"
#include "loom/ckpt.h"
#include "loom/status.h"

#include <sys/stat.h>

static const int fz_iters[] = {2, 4};

static void make_checkpoints(void) {
    char path[512];
    for (size_t i = 0; i < sizeof fz_iters / sizeof fz_iters[0]; i++) {
        snprintf(path, sizeof path, "%s/iter_%07d", fz_dir(), fz_iters[i]);
        if (mkdir(path, 0700) != 0) abort();
        snprintf(path, sizeof path, "%s/iter_%07d/meta.json", fz_dir(), fz_iters[i]);
        FILE *f = fopen(path, "wb");
        if (!f || fputs("{}\n", f) < 0 || fclose(f) != 0) abort();
    }
}

/* runs before fz_cleanup (atexit is last in, first out), which then removes the root */
static void remove_checkpoints(void) {
    char path[512];
    for (size_t i = 0; i < sizeof fz_iters / sizeof fz_iters[0]; i++) {
        snprintf(path, sizeof path, "%s/iter_%07d/meta.json", fz_dir(), fz_iters[i]);
        unlink(path);
        snprintf(path, sizeof path, "%s/iter_%07d", fz_dir(), fz_iters[i]);
        rmdir(path);
    }
}

/* The iteration a well-formed pointer names, or -1 */
static long long expected_iteration(const uint8_t *d, size_t n) {
    size_t k = 0;
    long long it = 0;
    for (; k < n && k < 19 && d[k] >= '0' && d[k] <= '9'; k++)
        if (k < 18) it = it * 10 + (d[k] - '0'); /* a 19th digit makes it malformed */
    if (k == 0 || k > 18) return -1;
    const char *rest = (const char *)d + k;
    size_t left = n - k;
    if (left == 0 || (left == 1 && (rest[0] == '\n' || rest[0] == '\r')) ||
        (left == 2 && rest[0] == '\r' && rest[1] == '\n'))
        return it;
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        make_checkpoints();
        atexit(remove_checkpoints);
        ready = 1;
    }
    char path[512], dir[4400], want[600];
    fz_write("latest_checkpointed_iteration.txt", data, size, path, sizeof path);
    enum loom_status s = loom_ckpt_resolve(fz_dir(), dir, sizeof dir);
    long long it = expected_iteration(data, size);
    if (s != LOOM_OK) {
        if (it >= 0) {
            fprintf(stderr, "pointer naming iteration %lld refused: %s\n", it, loom_last_error());
            abort();
        }
        loom_clear_error();
        return 0;
    }
    if (it < 0) {
        fprintf(stderr, "malformed pointer accepted as %s\n", dir);
        abort();
    }
    snprintf(want, sizeof want, "%s/iter_%07lld", fz_dir(), it == 2 ? 2LL : 4LL);
    if (strcmp(dir, want) != 0) {
        fprintf(stderr, "pointer naming iteration %lld resolved to %s, not %s\n", it, dir, want);
        abort();
    }
    return 0;
}
