/* 1-bit Adam's steps on one vector, one worker a rank (launched by test_onebit.sh under mpirun):
 * reads IN/config ("n steps freeze lr beta1 beta2 eps weight_decay"), IN/p0.bin (n fp32) and
 * IN/grads.bin (steps x ranks x n fp32: each worker's gradient of each step), runs the steps as
 * loom's trainer does (the gradients a rank holds are its own divided by the ranks: the warmup
 * all-reduces them, the compressed steps scale them back), and writes OUT/rank<r>.bin: the
 * parameters, m, v (n each), the worker error (padded length) and the server error (a chunk),
 * with OUT/bytes<r>.txt: the bytes this rank sent in the last step and in an fp32 all-reduce of
 * n floats. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/onebit.h"

static int fail(const char *what) {
    fprintf(stderr, "onebit_check: %s\n", what);
    return 1;
}

static int read_floats(const char *path, float *dst, size_t count, long offset) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int ok = fseek(f, offset, SEEK_SET) == 0 && fread(dst, sizeof(float), count, f) == count;
    fclose(f);
    return ok;
}

static int64_t sent(struct loom_comm *c) {
    int64_t b = 0;
    for (int k = 0; k < LOOM_COLL_COUNT; k++) b += loom_comm_bytes(c, (enum loom_coll)k);
    return b;
}

int main(int argc, char **argv) {
    struct loom_comm *w;
    if (loom_comm_world(&w, "auto", &argc, &argv) != LOOM_OK || argc != 3) {
        loom_print_error();
        return fail("usage: onebit_check IN OUT (under mpirun)");
    }
    const int R = loom_comm_rank(w), W = loom_comm_size(w);
    char path[4096];
    snprintf(path, sizeof path, "%s/config", argv[1]);
    FILE *cf = fopen(path, "r");
    long long n, steps, freeze;
    float lr, eps, wd;
    double b1, b2;
    if (!cf || fscanf(cf, "%lld %lld %lld %f %lf %lf %f %f", &n, &steps, &freeze, &lr, &b1, &b2,
                      &eps, &wd) != 8)
        return fail("cannot read the config");
    fclose(cf);
    float *p = malloc((size_t)n * sizeof(float)), *g = malloc((size_t)n * sizeof(float));
    float *m = calloc((size_t)n, sizeof(float)), *v = calloc((size_t)n, sizeof(float));
    snprintf(path, sizeof path, "%s/p0.bin", argv[1]);
    if (!p || !g || !m || !v || !read_floats(path, p, (size_t)n, 0)) return fail("cannot read p0");
    struct loom_onebit ob;
    if (loom_onebit_init(&ob, w, NULL, n) != LOOM_OK) return fail("init");
    int64_t step_bytes = 0;
    for (long long s = 1; s <= steps; s++) {
        snprintf(path, sizeof path, "%s/grads.bin", argv[1]);
        if (!read_floats(path, g, (size_t)n, (long)(((s - 1) * W + R) * n * (long long)sizeof(float))))
            return fail("cannot read the gradients");
        for (long long i = 0; i < n; i++) g[i] /= (float)W; /* the rank's share of the mean */
        loom_comm_reset_counters(w);
        const int frozen = s > freeze;
        if (!frozen) {
            if (loom_comm_allreduce(w, g, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM) != LOOM_OK)
                return fail("allreduce");
            loom_onebit_moments(m, v, g, n, b1, b2, 1.0f, 0);
        } else {
            loom_onebit_moments(m, v, g, n, b1, b2, (float)W, 1);
            if (loom_onebit_allreduce(&ob, m) != LOOM_OK) return fail("compressed allreduce");
        }
        loom_onebit_update(p, m, v, n, lr, eps, wd);
        step_bytes = sent(w);
    }
    snprintf(path, sizeof path, "%s/rank%d.bin", argv[2], R);
    FILE *of = fopen(path, "wb");
    if (!of) return fail("cannot write the output");
    fwrite(p, sizeof(float), (size_t)n, of);
    fwrite(m, sizeof(float), (size_t)n, of);
    fwrite(v, sizeof(float), (size_t)n, of);
    fwrite(ob.worker_error, sizeof(float), (size_t)ob.npad, of);
    fwrite(ob.server_error, sizeof(float), (size_t)ob.chunk, of);
    fclose(of);
    snprintf(path, sizeof path, "%s/bytes%d.txt", argv[2], R);
    of = fopen(path, "w");
    if (!of) return fail("cannot write the byte counts");
    fprintf(of, "%lld %lld\n", (long long)step_bytes, (long long)(2 * (W - 1) * 4 * n / W));
    fclose(of);
    loom_onebit_free(&ob);
    free(p);
    free(g);
    free(m);
    free(v);
    loom_comm_free(w);
    loom_comm_finalize();
    return 0;
}
