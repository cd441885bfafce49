/* CPU AdamW against a double-precision reference of torch.optim.AdamW's update (decoupled
 * weight decay, bias corrections 1 - beta^step, gradient scaled first) for 3 steps, with and
 * without weight decay, on a short vector and on one long enough for the threaded path; and
 * adamw_ranges against adamw called on each of its ranges (see run_ranges). */
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;

static void run(int64_t n, float lr, float wd, float gscale) {
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    float *p = ops_alloc((size_t)n * sizeof *p), *g = ops_alloc((size_t)n * sizeof *g);
    float *m = ops_alloc((size_t)n * sizeof *m), *v = ops_alloc((size_t)n * sizeof *v);
    float *p0 = ops_alloc((size_t)n * sizeof *p0);
    /* small weights, so that float rounding of p stays far below the size of one update and the
     * change of p can be compared closely */
    ops_fill(p, n, 80, -0.05f, 0.05f);
    memcpy(p0, p, (size_t)n * sizeof *p);
    memset(m, 0, (size_t)n * sizeof *m);
    memset(v, 0, (size_t)n * sizeof *v);
    double *rp = ops_to_double(p, n), *rm = ops_alloc((size_t)n * sizeof *rm);
    double *rv = ops_alloc((size_t)n * sizeof *rv);
    memset(rm, 0, (size_t)n * sizeof *rm);
    memset(rv, 0, (size_t)n * sizeof *rv);
    char name[128];
    for (int64_t step = 1; step <= 3; step++) {
        ops_fill(g, n, 80 + (uint64_t)step, -2.0f, 2.0f); /* a new gradient every step */
        if (n > 3) g[3] = 0.0f;                           /* a parameter with no gradient */
        loom_op(be, adamw, p, g, m, v, n, lr, b1, b2, eps, wd, step, gscale);
        const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
        for (int64_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gscale;
            rp[i] *= 1.0 - (double)lr * wd;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
            rp[i] -= (double)lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
        /* compare the change of p (the part AdamW computes) and the moments, normwise: m is a
         * running sum in which gradients of opposite sign cancel, so single elements of m (and
         * of the update) can be far smaller than float rounding of their terms */
        double *dref = ops_alloc((size_t)n * sizeof *dref);
        float *dgot = ops_alloc((size_t)n * sizeof *dgot);
        for (int64_t i = 0; i < n; i++) {
            dref[i] = rp[i] - p0[i];
            dgot[i] = (float)((double)p[i] - p0[i]);
        }
        snprintf(name, sizeof name, "adamw n=%lld lr=%g wd=%g scale=%g step %lld: p - p0",
                 (long long)n, lr, wd, gscale, (long long)step);
        ops_check(name, ops_max_norm_err(dgot, dref, n), 2e-6);
        snprintf(name, sizeof name, "adamw n=%lld step %lld: m, v", (long long)n, (long long)step);
        double em = ops_max_norm_err(m, rm, n), ev = ops_max_norm_err(v, rv, n);
        ops_check(name, em > ev ? em : ev, 1e-6);
        free(dref), free(dgot);
    }
    free(p), free(g), free(m), free(v), free(p0), free(rp), free(rm), free(rv);
}

/* adamw_ranges against adamw called on each range, bit for bit, over 3 steps: ranges of one
 * element, unaligned, longer than a vector, empty, one out of address order, weight decay on
 * some, gaps between them, whose elements must keep their values. big: more elements in all than
 * the threaded path's threshold, so that with `threads` threads the slices begin and end inside
 * ranges. packed: the moments laid out apart from the parameters (soff: the ranges' one after the
 * other in reverse order, from element 5), as the distributed optimizer keeps its shard's. */
static void run_ranges(int big, int threads, int packed) {
    static const int64_t off_s[] = {3, 8, 50, 64, 2000, 1100};
    static const int64_t len_s[] = {1, 37, 0, 1000, 500, 700};
    static const int64_t off_b[] = {3, 8, 50, 64, 60000, 40100, 60100};
    static const int64_t len_b[] = {1, 37, 0, 40000, 17, 19000, 33333};
    static const uint8_t dec_s[] = {1, 0, 1, 1, 0, 2};
    static const uint8_t dec_b[] = {1, 0, 1, 1, 0, 0, 3};
    const int64_t *off = big ? off_b : off_s, *len = big ? len_b : len_s;
    const uint8_t *dec = big ? dec_b : dec_s;
    const int nr = big ? 7 : 6;
    int64_t n = 0, soff[7], at = 5;
    for (int r = nr - 1; r >= 0; r--)
        soff[r] = packed ? at : off[r], at += len[r];
    for (int r = 0; r < nr; r++)
        if (off[r] + len[r] + 16 > n) n = off[r] + len[r] + 16;
    if (at + 16 > n) n = at + 16;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gscale = 0.5f;
    const size_t bytes = (size_t)n * sizeof(float);
    float *p0 = ops_alloc(bytes), *m0 = ops_alloc(bytes), *v0 = ops_alloc(bytes);
    float *g = ops_alloc(bytes);
    ops_fill(p0, n, 90, -1.0f, 1.0f);
    ops_fill(m0, n, 91, -0.1f, 0.1f);
    ops_fill(v0, n, 92, 0.0f, 0.01f);
    float *p = ops_alloc(bytes), *m = ops_alloc(bytes), *v = ops_alloc(bytes);
    float *rp = ops_alloc(bytes), *rm = ops_alloc(bytes), *rv = ops_alloc(bytes);
    memcpy(p, p0, bytes), memcpy(m, m0, bytes), memcpy(v, v0, bytes);
    memcpy(rp, p0, bytes), memcpy(rm, m0, bytes), memcpy(rv, v0, bytes);
    omp_set_num_threads(threads);
    for (int64_t step = 1; step <= 3; step++) {
        ops_fill(g, n, 93 + (uint64_t)step, -2.0f, 2.0f);
        loom_op(be, adamw_ranges, p, g, m, v, off, packed ? soff : NULL, len, dec, nr, lr, b1, b2,
                eps, wd, step, gscale);
        for (int r = 0; r < nr; r++)
            if (len[r] > 0)
                loom_op(be, adamw, rp + off[r], g + off[r], rm + soff[r], rv + soff[r], len[r], lr,
                        b1, b2, eps, dec[r] ? wd : 0.0f, step, gscale);
    }
    /* every element is in a range (and then changed by the reference: its p, m or v) or in a
     * gap (of p; of m and v) */
    char *in = calloc((size_t)n * 2, 1), *ins = in + n;
    if (!in) exit(2);
    int64_t gaps_kept = 0, gaps = 0, moved = 0, inside = 0;
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < len[r]; i++) {
            const int64_t a = off[r] + i, b = soff[r] + i;
            in[a] = ins[b] = 1;
            inside++;
            moved += rp[a] != p0[a] || rm[b] != m0[b] || rv[b] != v0[b];
        }
    for (int64_t i = 0; i < n; i++) {
        gaps += !in[i] + !ins[i];
        gaps_kept += (!in[i] && memcmp(&p[i], &p0[i], 4) == 0) +
                     (!ins[i] && memcmp(&m[i], &m0[i], 4) == 0 && memcmp(&v[i], &v0[i], 4) == 0);
    }
    char name[128];
    const char *kind = big ? packed ? "big, packed moments" : "big" : "small";
    snprintf(name, sizeof name, "adamw_ranges %s, %d threads: reference moved every element", kind,
             threads);
    ops_check_true(name, moved == inside);
    snprintf(name, sizeof name, "adamw_ranges %s, %d threads: p, m, v == adamw per range (bits)",
             kind, threads);
    ops_check_true(name, memcmp(p, rp, bytes) == 0 && memcmp(m, rm, bytes) == 0 &&
                             memcmp(v, rv, bytes) == 0);
    snprintf(name, sizeof name, "adamw_ranges %s, %d threads: %lld gap elements kept", kind,
             threads, (long long)gaps);
    ops_check_true(name, gaps > 0 && gaps_kept == gaps);
    free(in);
    free(p0), free(m0), free(v0), free(g), free(p), free(m), free(v), free(rp), free(rm), free(rv);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    run(37, 1e-2f, 0.1f, 0.5f);
    run(37, 3e-3f, 0.0f, 1.0f);
    run(100003, 1e-2f, 0.1f, 0.25f); /* threaded path */
    const int threads = omp_get_max_threads();
    run_ranges(0, 1, 0);
    static const int nthreads[] = {1, 2, 3, 7};
    for (int k = 0; k < 4; k++)
        run_ranges(1, nthreads[k], 0);
    for (int k = 0; k < 4; k++)
        run_ranges(1, nthreads[k], 1);
    omp_set_num_threads(threads);
    loom_backend_destroy(be);
    return ops_finish();
}
