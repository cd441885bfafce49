/* CPU fused cross-entropy (xent_fused) and the fused output layer (linear_xent) against the
 * unfused ops they replace and against double loops.
 *
 * xent_fused: the per-row loss against the loss the head forms from xent_forward's statistics
 * (and against log-sum-exp in double), the gradient written over the logits against
 * xent_backward with the row's own statistics (and against double loops), on rows with ignored
 * targets (-1), a target in the padding, and padded columns holding junk (1e4, NaN); without
 * grad the logits are left as they were and the losses are the same; 1 and 2 threads give the
 * same bits on wide rows. linear_xent: losses, input gradient (assigned) and weight gradient
 * (accumulated onto what was there) against linear_forward, xent_forward, xent_backward and
 * linear_backward in turn; loss-only mode. All within 1e-5 relative. */
#include <float.h>
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;

/* The unfused path of the head without tensor parallelism (one shard with v0 = 0):
 * xent_forward, the loss formed on the host as loom_gpt_head_forward does, then xent_backward
 * with those statistics. loss[n] is 0 for ignored rows; d may alias x. */
static void unfused(double *loss, float *d, const float *x, const int32_t *tgt, float dloss,
                    int64_t N, int64_t Vl, int64_t Vvalid) {
    float *st = ops_alloc((size_t)N * 3 * sizeof *st), *gs = ops_alloc((size_t)N * 2 * sizeof *gs);
    float *dl = ops_alloc((size_t)N * sizeof *dl);
    loom_op(be, xent_forward, st, x, tgt, N, Vl, 0, Vvalid);
    for (int64_t n = 0; n < N; n++) {
        gs[2 * n] = st[3 * n];
        gs[2 * n + 1] = st[3 * n + 1];
        dl[n] = tgt[n] < 0 ? 0.0f : dloss;
        loss[n] = tgt[n] < 0 ? 0.0
                             : (double)logf(st[3 * n + 1]) + (double)st[3 * n] - (double)st[3 * n + 2];
    }
    loom_op(be, xent_backward, d, x, tgt, gs, dl, N, Vl, 0, Vvalid);
    free(st), free(gs), free(dl);
}

static double max_rel(const float *got, const double *ref, int64_t n) {
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) > 1e-30 ? fabs(ref[i]) : 1.0);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e;
}

static void test_fused_small(void) {
    enum { N = 9, VL = 23, VV = 19 }; /* 4 padded columns */
    const int32_t tgt[N] = {3, 18, -1, 0, 20, 7, -1, 18, 11}; /* 20: a target in the padding */
    const float dloss = 0.37f;
    float *x = ops_alloc(N * VL * sizeof *x);
    ops_fill(x, N * VL, 80, -5.0f, 5.0f);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = VV; c < VL; c++) x[n * VL + c] = (c & 1) ? NAN : 1e4f;
    double *xd = ops_to_double(x, N * VL);

    double loss_ref[N];
    float *d_ref = ops_alloc(N * VL * sizeof *d_ref);
    unfused(loss_ref, d_ref, x, tgt, dloss, N, VL, VV);

    float losses[N], losses0[N];
    float *y = ops_alloc(N * VL * sizeof *y), *y0 = ops_alloc(N * VL * sizeof *y0);
    memcpy(y, x, N * VL * sizeof *y);
    memcpy(y0, x, N * VL * sizeof *y0);
    loom_op(be, xent_fused, losses, y, LOOM_DTYPE_F32, tgt, dloss, 1, N, VL, VV);
    loom_op(be, xent_fused, losses0, y0, LOOM_DTYPE_F32, tgt, dloss, 0, N, VL, VV);

    ops_check("xent_fused loss == head's loss from xent_forward stats", max_rel(losses, loss_ref, N),
              1e-5);
    ops_check("xent_fused gradient == xent_backward (in place, junk padding)",
              ops_max_rel_err_f(y, d_ref, N * VL), 1e-5);

    /* independent double loops */
    double loss_dd[N], *g_dd = ops_alloc(N * VL * sizeof *g_dd);
    for (int64_t n = 0; n < N; n++) {
        const double *r = xd + n * VL;
        double m = -INFINITY, s = 0.0;
        for (int64_t c = 0; c < VV; c++) m = r[c] > m ? r[c] : m;
        for (int64_t c = 0; c < VV; c++) s += exp(r[c] - m);
        const double lse = m + log(s);
        const int in = tgt[n] >= 0 && tgt[n] < VV;
        loss_dd[n] = tgt[n] < 0 ? 0.0 : lse - (in ? r[tgt[n]] : 0.0);
        for (int64_t c = 0; c < VL; c++) {
            double g = 0.0;
            if (tgt[n] >= 0 && c < VV) g = (exp(r[c] - lse) - (c == tgt[n])) * dloss;
            g_dd[n * VL + c] = g;
        }
    }
    ops_check("xent_fused loss against log-sum-exp in double", max_rel(losses, loss_dd, N), 1e-6);
    ops_check("xent_fused gradient against (softmax - onehot) * dloss in double",
              ops_max_rel_err(y, g_dd, N * VL), 2e-6);
    int zeros = 1;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < VL; c++)
            if (tgt[n] < 0 || c >= VV)
                zeros &= y[n * VL + c] == 0.0f && !signbit(y[n * VL + c]);
    ops_check_true("xent_fused: padded columns and ignored rows get exactly +0", zeros);
    int ign = 1;
    for (int64_t n = 0; n < N; n++)
        if (tgt[n] < 0) ign &= losses[n] == 0.0f;
    ops_check_true("xent_fused: ignored rows have loss 0", ign);
    ops_check_true("xent_fused without grad: logits untouched (NaN padding included)",
                   memcmp(y0, x, N * VL * sizeof *x) == 0);
    ops_check_true("xent_fused without grad: the same losses",
                   memcmp(losses0, losses, sizeof losses) == 0);
    free(x), free(xd), free(d_ref), free(y), free(y0), free(g_dd);
}

/* Wide rows with large logits through the threaded path. */
static void test_fused_wide(void) {
    const int64_t N = 24, VL = 5008, VV = 5003;
    int32_t *tgt = ops_alloc((size_t)N * sizeof *tgt);
    for (int64_t n = 0; n < N; n++) tgt[n] = n % 7 == 3 ? -1 : (int32_t)((n * 977) % VV);
    float *x = ops_alloc((size_t)(N * VL) * sizeof *x);
    ops_fill(x, N * VL, 81, -50.0f, 50.0f);
    double *loss_ref = ops_alloc((size_t)N * sizeof *loss_ref);
    float *d_ref = ops_alloc((size_t)(N * VL) * sizeof *d_ref);
    unfused(loss_ref, d_ref, x, tgt, 1.0f / (float)N, N, VL, VV);

    float *y1 = ops_alloc((size_t)(N * VL) * sizeof *y1), *y2 = ops_alloc((size_t)(N * VL) * sizeof *y2);
    float *l1 = ops_alloc((size_t)N * sizeof *l1), *l2 = ops_alloc((size_t)N * sizeof *l2);
    memcpy(y1, x, (size_t)(N * VL) * sizeof *x);
    memcpy(y2, x, (size_t)(N * VL) * sizeof *x);
    int maxt = omp_get_max_threads();
    omp_set_num_threads(1);
    loom_op(be, xent_fused, l1, y1, LOOM_DTYPE_F32, tgt, 1.0f / (float)N, 1, N, VL, VV);
    omp_set_num_threads(2);
    loom_op(be, xent_fused, l2, y2, LOOM_DTYPE_F32, tgt, 1.0f / (float)N, 1, N, VL, VV);
    omp_set_num_threads(maxt);
    ops_check("xent_fused N=24 V=5003 (pad 5008), logits in (-50, 50): loss", max_rel(l1, loss_ref, N),
              1e-5);
    ops_check("xent_fused N=24 V=5003: gradient == xent_backward",
              ops_max_rel_err_f(y1, d_ref, N * VL), 1e-5);
    ops_check_true("xent_fused N=24 V=5003: 1 and 2 threads give the same bits",
                   memcmp(l1, l2, (size_t)N * sizeof *l1) == 0 &&
                       memcmp(y1, y2, (size_t)(N * VL) * sizeof *y1) == 0);
    free(tgt), free(x), free(loss_ref), free(d_ref), free(y1), free(y2), free(l1), free(l2);
}

static void test_linear_xent(void) {
    enum { N = 19, C = 24, VL = 40, VV = 35 };
    int32_t tgt[N];
    for (int64_t n = 0; n < N; n++) tgt[n] = n % 5 == 2 ? -1 : (int32_t)((n * 13) % VV);
    const float dloss = 0.05f;
    float *inp = ops_alloc(N * C * sizeof *inp), *w = ops_alloc(VL * C * sizeof *w);
    float *dw0 = ops_alloc(VL * C * sizeof *dw0);
    ops_fill(inp, N * C, 82, -1.0f, 1.0f);
    ops_fill(w, VL * C, 83, -0.5f, 0.5f);
    ops_fill(dw0, VL * C, 84, -0.1f, 0.1f);

    /* reference: the unfused ops in turn */
    float *logits = ops_alloc(N * VL * sizeof *logits), *dinp_ref = ops_alloc(N * C * sizeof *dinp_ref);
    float *dw_ref = ops_alloc(VL * C * sizeof *dw_ref);
    double loss_ref[N];
    memcpy(dw_ref, dw0, VL * C * sizeof *dw_ref);
    loom_op(be, linear_forward, logits, inp, w, NULL, N, C, VL);
    unfused(loss_ref, logits, logits, tgt, dloss, N, VL, VV);
    loom_op(be, linear_backward, dinp_ref, dw_ref, NULL, logits, inp, w, N, C, VL);

    float losses[N], losses0[N];
    float *ws = ops_alloc(N * VL * sizeof *ws), *dinp = ops_alloc(N * C * sizeof *dinp);
    float *dw = ops_alloc(VL * C * sizeof *dw);
    memcpy(dw, dw0, VL * C * sizeof *dw);
    for (int64_t i = 0; i < N * C; i++) dinp[i] = NAN; /* assigned */
    loom_op(be, linear_xent, losses, dinp, dw, ws, inp, w, tgt, dloss, N, C, VL, VV);
    ops_check("linear_xent losses == linear_forward + xent_forward", max_rel(losses, loss_ref, N),
              1e-5);
    ops_check("linear_xent dinp == linear_backward of xent_backward's gradient",
              ops_max_rel_err_f(dinp, dinp_ref, N * C), 1e-5);
    ops_check("linear_xent dw (accumulated) == the same", ops_max_rel_err_f(dw, dw_ref, VL * C), 1e-5);

    loom_op(be, linear_xent, losses0, NULL, NULL, ws, inp, w, tgt, dloss, N, C, VL, VV);
    ops_check_true("linear_xent without gradients: the same losses",
                   memcmp(losses0, losses, sizeof losses) == 0);
    free(inp), free(w), free(dw0), free(logits), free(dinp_ref), free(dw_ref), free(ws), free(dinp);
    free(dw);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    test_fused_small();
    test_fused_wide();
    test_linear_xent();
    loom_backend_destroy(be);
    return ops_finish();
}
