/* CPU softmax cross-entropy over a vocabulary shard: statistics and loss against double loops,
 * backward against double loops and central differences of the loss, padded columns (never in
 * the softmax, gradient exactly 0), ignored targets (-1: zero gradient row), two vocabulary
 * shards combined as the tensor-parallel path does == one full shard, dlogits aliasing logits,
 * large logits, thread counts. */
#include <float.h>
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;

/* per-row loss sum_n dloss[n] * (logsumexp(x[n, :Vvalid]) - x[n, target]) over kept rows */
struct xent_ctx {
    int64_t N, Vl, Vvalid;
    const int32_t *tgt;
    const double *dloss;
    double *x;
};

static double row_lse(const double *x, int64_t V) {
    double m = -INFINITY, s = 0.0;
    for (int64_t c = 0; c < V; c++) m = x[c] > m ? x[c] : m;
    for (int64_t c = 0; c < V; c++) s += exp(x[c] - m);
    return m + log(s);
}

static double xent_loss(void *p) {
    struct xent_ctx *k = p;
    double L = 0.0;
    for (int64_t n = 0; n < k->N; n++) {
        if (k->tgt[n] < 0) continue;
        const double *x = k->x + n * k->Vl;
        L += k->dloss[n] * (row_lse(x, k->Vvalid) - x[k->tgt[n]]);
    }
    return L;
}

/* Loss of row n from one shard's stats (one shard holding the whole vocabulary). */
static double loss_from_stats(const float *st) {
    return log((double)st[1]) + (double)st[0] - (double)st[2];
}

static void test_single_shard(void) {
    enum { N = 7, VL = 19, VV = 16 }; /* 3 padded columns */
    const int32_t tgt[N] = {3, 15, -1, 0, 7, 15, 9};
    float *x = ops_alloc(N * VL * sizeof *x), *st = ops_alloc(N * 3 * sizeof *st);
    float *dl = ops_alloc(N * sizeof *dl), *d = ops_alloc(N * VL * sizeof *d);
    ops_fill(x, N * VL, 70, -4.0f, 4.0f);
    ops_fill(dl, N, 71, 0.1f, 1.0f);
    for (int64_t n = 0; n < N; n++) /* padding holds large values: they must not count */
        for (int64_t c = VV; c < VL; c++) x[n * VL + c] = 1e4f;

    loom_op(be, xent_forward, st, x, tgt, N, VL, 0, VV);
    double *xd = ops_to_double(x, N * VL);
    double e_stats = 0.0, e_loss = 0.0;
    for (int64_t n = 0; n < N; n++) {
        const double *r = xd + n * VL;
        double m = -INFINITY, s = 0.0;
        for (int64_t c = 0; c < VV; c++) m = r[c] > m ? r[c] : m;
        for (int64_t c = 0; c < VV; c++) s += exp(r[c] - m);
        double t = tgt[n] >= 0 ? r[tgt[n]] : 0.0;
        double e = fabs(st[3 * n] - m) / fabs(m) + fabs(st[3 * n + 1] - s) / s +
                   fabs(st[3 * n + 2] - t) / (fabs(t) > 1e-30 ? fabs(t) : 1.0);
        if (e > e_stats) e_stats = e;
        if (tgt[n] >= 0) {
            double le = fabs(loss_from_stats(st + 3 * n) - (row_lse(r, VV) - t));
            if (le > e_loss) e_loss = le;
        }
    }
    ops_check("xent forward stats (max, sumexp, target logit) N=7 Vl=19 Vvalid=16", e_stats, 1e-6);
    ops_check("xent loss from stats, absolute", e_loss, 1e-6);

    /* padding content does not matter */
    float *x2 = ops_alloc(N * VL * sizeof *x2), *st2 = ops_alloc(N * 3 * sizeof *st2);
    memcpy(x2, x, N * VL * sizeof *x2);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = VV; c < VL; c++) x2[n * VL + c] = (c & 1) ? NAN : -3.0f;
    loom_op(be, xent_forward, st2, x2, tgt, N, VL, 0, VV);
    ops_check_true("xent padded columns (1e4, NaN, -3) do not change the stats",
                   memcmp(st, st2, N * 3 * sizeof *st) == 0);

    /* backward with the single shard's stats as the global ones */
    float *gs = ops_alloc(N * 2 * sizeof *gs);
    for (int64_t n = 0; n < N; n++) gs[2 * n] = st[3 * n], gs[2 * n + 1] = st[3 * n + 1];
    for (int64_t i = 0; i < N * VL; i++) d[i] = NAN; /* assigned */
    loom_op(be, xent_backward, d, x, tgt, gs, dl, N, VL, 0, VV);
    double *ref = ops_alloc(N * VL * sizeof *ref);
    for (int64_t n = 0; n < N; n++) {
        double lse = row_lse(xd + n * VL, VV);
        for (int64_t c = 0; c < VL; c++) {
            double v = 0.0;
            if (tgt[n] >= 0 && c < VV) v = (exp(xd[n * VL + c] - lse) - (c == tgt[n])) * dl[n];
            ref[n * VL + c] = v;
        }
    }
    ops_check("xent backward (softmax - onehot) * dloss against double loops",
              ops_max_rel_err(d, ref, N * VL), 2e-6);
    int pad_zero = 1, ign_zero = 1;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < VL; c++) {
            if (c >= VV) pad_zero &= d[n * VL + c] == 0.0f && !signbit(d[n * VL + c]);
            if (tgt[n] < 0) ign_zero &= d[n * VL + c] == 0.0f;
        }
    ops_check_true("xent backward: padded columns get exactly 0", pad_zero);
    ops_check_true("xent backward: the ignored row (target -1) gets exactly 0", ign_zero);

    /* central differences of the loss with respect to every logit, padding included */
    double dld[N];
    for (int64_t n = 0; n < N; n++) dld[n] = dl[n];
    struct xent_ctx k = {N, VL, VV, tgt, dld, xd};
    ops_check("xent backward against central differences (padding included)",
              ops_grad_check(xent_loss, &k, xd, N * VL, d, 1e-4), 1e-5);

    /* dlogits may alias logits */
    loom_op(be, xent_backward, x2, x2, tgt, gs, dl, N, VL, 0, VV);
    ops_check_true("xent backward in place (dlogits == logits) == out of place",
                   memcmp(x2, d, N * VL * sizeof *d) == 0);

    free(x), free(st), free(dl), free(d), free(xd), free(x2), free(st2), free(gs), free(ref);
}

/* Padded vocabulary of 38 = 2 x 19 columns, 35 real tokens: shard 0 holds [0,19) (all valid),
 * shard 1 holds [19,38) of which 16 are valid. Combining the shards' stats as the
 * vocabulary-parallel loss does gives the one-shard loss and gradient. */
static void test_two_shards(void) {
    enum { N = 9, VP = 38, V = 35, VL = 19 };
    const int32_t tgt[N] = {0, 18, 19, 34, -1, 5, 27, 20, 33};
    float *x = ops_alloc(N * VP * sizeof *x), *dl = ops_alloc(N * sizeof *dl);
    ops_fill(x, N * VP, 72, -6.0f, 6.0f);
    ops_fill(dl, N, 73, 0.1f, 1.0f);
    float *full_st = ops_alloc(N * 3 * sizeof *full_st), *full_d = ops_alloc(N * VP * sizeof *full_d);
    float *gs = ops_alloc(N * 2 * sizeof *gs);
    loom_op(be, xent_forward, full_st, x, tgt, N, VP, 0, V);
    for (int64_t n = 0; n < N; n++) gs[2 * n] = full_st[3 * n], gs[2 * n + 1] = full_st[3 * n + 1];
    loom_op(be, xent_backward, full_d, x, tgt, gs, dl, N, VP, 0, V);

    /* each shard sees its own [N, 19] slice */
    float *xs[2], *st[2], *ds[2];
    for (int r = 0; r < 2; r++) {
        xs[r] = ops_alloc(N * VL * sizeof(float));
        st[r] = ops_alloc(N * 3 * sizeof(float));
        ds[r] = ops_alloc(N * VL * sizeof(float));
        for (int64_t n = 0; n < N; n++)
            memcpy(xs[r] + n * VL, x + n * VP + r * VL, VL * sizeof(float));
        loom_op(be, xent_forward, st[r], xs[r], tgt, N, VL, r * VL, r ? V - VL : VL);
    }
    double e_loss = 0.0;
    int owner_ok = 1;
    float *g2 = ops_alloc(N * 2 * sizeof *g2);
    for (int64_t n = 0; n < N; n++) {
        double M = st[0][3 * n] > st[1][3 * n] ? st[0][3 * n] : st[1][3 * n];
        double S = st[0][3 * n + 1] * exp(st[0][3 * n] - M) + st[1][3 * n + 1] * exp(st[1][3 * n] - M);
        double t = (double)st[0][3 * n + 2] + st[1][3 * n + 2];
        g2[2 * n] = (float)M;
        g2[2 * n + 1] = (float)S;
        /* the shard that does not own the target reports 0 */
        if (tgt[n] >= 0) owner_ok &= st[tgt[n] < VL ? 1 : 0][3 * n + 2] == 0.0f;
        if (tgt[n] < 0) continue;
        double lf = loss_from_stats(full_st + 3 * n), ls = log(S) + M - t;
        if (fabs(lf - ls) > e_loss) e_loss = fabs(lf - ls);
    }
    ops_check("xent two shards: combined loss == one-shard loss, absolute", e_loss, 2e-6);
    ops_check_true("xent two shards: the shard without the target reports target logit 0",
                   owner_ok);
    float *cat = ops_alloc(N * VP * sizeof *cat);
    for (int r = 0; r < 2; r++) {
        loom_op(be, xent_backward, ds[r], xs[r], tgt, g2, dl, N, VL, r * VL, r ? V - VL : VL);
        for (int64_t n = 0; n < N; n++)
            memcpy(cat + n * VP + r * VL, ds[r] + n * VL, VL * sizeof(float));
    }
    ops_check("xent two shards: concatenated gradients == one-shard gradient",
              ops_max_rel_err_f(cat, full_d, N * VP), 1e-5);
    /* an all-padding shard: max -FLT_MAX, sum 0, gradient 0 */
    float st_empty[3 * N];
    loom_op(be, xent_forward, st_empty, xs[1], tgt, N, VL, 2 * VL, 0);
    int empty_ok = 1;
    for (int64_t n = 0; n < N; n++)
        empty_ok &= st_empty[3 * n] == -FLT_MAX && st_empty[3 * n + 1] == 0.0f &&
                    st_empty[3 * n + 2] == 0.0f;
    ops_check_true("xent shard without valid columns: stats (-FLT_MAX, 0, 0)", empty_ok);
    for (int r = 0; r < 2; r++) free(xs[r]), free(st[r]), free(ds[r]);
    free(x), free(dl), free(full_st), free(full_d), free(gs), free(g2), free(cat);
}

/* Wide rows with large logits through the threaded path; 1 and 2 threads give the same bits
 * (rows are independent). */
static void test_large(void) {
    const int64_t N = 24, V = 5003;
    int32_t *tgt = ops_alloc((size_t)N * sizeof *tgt);
    for (int64_t n = 0; n < N; n++) tgt[n] = (int32_t)((n * 977) % V);
    float *x = ops_alloc((size_t)(N * V) * sizeof *x), *st = ops_alloc((size_t)(N * 3) * sizeof *st);
    ops_fill(x, N * V, 74, -50.0f, 50.0f);
    int maxt = omp_get_max_threads();
    omp_set_num_threads(1);
    loom_op(be, xent_forward, st, x, tgt, N, V, 0, V);
    float *g = ops_alloc((size_t)(N * 2) * sizeof *g), *dl = ops_alloc((size_t)N * sizeof *dl);
    for (int64_t n = 0; n < N; n++) g[2 * n] = st[3 * n], g[2 * n + 1] = st[3 * n + 1], dl[n] = 1.0f / N;
    float *d1 = ops_alloc((size_t)(N * V) * sizeof *d1), *d2 = ops_alloc((size_t)(N * V) * sizeof *d2);
    loom_op(be, xent_backward, d1, x, tgt, g, dl, N, V, 0, V);
    omp_set_num_threads(2);
    float *st2 = ops_alloc((size_t)(N * 3) * sizeof *st2);
    loom_op(be, xent_forward, st2, x, tgt, N, V, 0, V);
    loom_op(be, xent_backward, d2, x, tgt, g, dl, N, V, 0, V);
    omp_set_num_threads(maxt);
    double *xd = ops_to_double(x, N * V), e = 0.0;
    double *ref = ops_alloc((size_t)(N * V) * sizeof *ref);
    for (int64_t n = 0; n < N; n++) {
        double lse = row_lse(xd + n * V, V);
        e = fmax(e, fabs(loss_from_stats(st + 3 * n) - (lse - xd[n * V + tgt[n]])));
        for (int64_t c = 0; c < V; c++)
            ref[n * V + c] = (exp(xd[n * V + c] - lse) - (c == tgt[n])) / (double)N;
    }
    ops_check("xent N=24 V=5003 logits in (-50, 50): loss, absolute", e, 1e-6);
    ops_check("xent N=24 V=5003: gradient against double loops", ops_max_norm_err(d1, ref, N * V),
              1e-5);
    ops_check_true("xent N=24 V=5003: 1 and 2 threads give the same bits",
                   memcmp(st, st2, (size_t)(N * 3) * sizeof *st) == 0 &&
                       memcmp(d1, d2, (size_t)(N * V) * sizeof *d1) == 0);
    free(tgt), free(x), free(st), free(g), free(dl), free(d1), free(d2), free(st2), free(xd);
    free(ref);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    test_single_shard();
    test_two_shards();
    test_large();
    loom_backend_destroy(be);
    return ops_finish();
}
