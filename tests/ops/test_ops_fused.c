/* CPU fused ops against the ops they fuse.
 *
 * residual_layernorm_forward / residual_rmsnorm_forward: xs, out, mean and rstd equal add
 * followed by layernorm_forward / rmsnorm_forward bit for bit, with xs apart from the inputs and
 * in place over either of them, with and without the LayerNorm bias, on one thread and on
 * several; out also against a double reference of norm(x + r).
 * linear_gelu_forward: pre and out equal linear_forward then gelu_forward bit for bit; out also
 * against gelu of a double product.
 * linear_gelu_backward, in the GELU MLP's backward (fc2 then fc1): every gradient equals the
 * separate chain (linear_backward, gelu_backward, linear_backward with fc1's bias) bit for bit,
 * onto pre-filled parameter gradients (they accumulate) and a poisoned dpre (assigned); dpre also
 * against (dout . w) * gelu'(pre) in double. The fused ops take their activations as fp32
 * (LOOM_DTYPE_F32), and fc1's backward runs through linear_backward_typed as the model runs it.
 * linear_forward_typed / linear_backward_typed with fp32 operands equal linear_forward /
 * linear_backward bit for bit; the CPU has no 16-bit activation type (activation_dtype NULL). */
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;
static const float EPS = 1e-5f;

static float *falloc(int64_t n) { return ops_alloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

static int same(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static float *copy_of(const float *x, int64_t n) {
    float *p = falloc(n);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* ---------------- residual add + norm ---------------- */

/* double reference of norm(x + r) (x + r rounded to float first, as the op does) */
static void ref_residual_norm(double *out, const float *x, const float *r, const float *w,
                              const float *b, int rms, int64_t N, int64_t C) {
    for (int64_t i = 0; i < N; i++) {
        double m = 0.0, v = 0.0;
        const float *xr = x + i * C, *rr = r + i * C;
        if (!rms) {
            for (int64_t c = 0; c < C; c++) m += (double)(xr[c] + rr[c]);
            m /= (double)C;
        }
        for (int64_t c = 0; c < C; c++) {
            double d = (double)(xr[c] + rr[c]) - m;
            v += d * d;
        }
        double rs = 1.0 / sqrt(v / (double)C + (double)EPS);
        for (int64_t c = 0; c < C; c++)
            out[i * C + c] = ((double)(xr[c] + rr[c]) - m) * rs * w[c] + (b ? b[c] : 0.0);
    }
}

/* where: 0 xs apart, 1 xs over x, 2 xs over r */
static void test_residual_norm(int rms, int has_b, int64_t N, int64_t C, int where) {
    const int64_t n = N * C;
    char name[160];
    const char *kind = rms     ? "residual rmsnorm"
                       : has_b ? "residual layernorm"
                               : "residual layernorm (b=NULL)";
    const char *place[] = {"xs apart", "xs over x", "xs over r"};
    float *x = falloc(n), *r = falloc(n), *w = falloc(C), *b = !rms && has_b ? falloc(C) : NULL;
    ops_fill(x, n, 300 + (uint64_t)C, -3.0f, 5.0f);
    ops_fill(r, n, 301, -1.0f, 1.0f);
    ops_fill(w, C, 302, 0.5f, 1.5f);
    if (b) ops_fill(b, C, 303, -0.5f, 0.5f);

    /* the separate ops */
    float *s_ref = falloc(n), *o_ref = falloc(n), *m_ref = falloc(N), *r_ref = falloc(N);
    loom_op(be, add, s_ref, x, r, n);
    if (rms)
        loom_op(be, rmsnorm_forward, o_ref, LOOM_DTYPE_F32, r_ref, s_ref, w, N, C, EPS);
    else
        loom_op(be, layernorm_forward, o_ref, LOOM_DTYPE_F32, m_ref, r_ref, s_ref, w, b, N, C, EPS);

    /* the fused op, in place when asked */
    float *xi = copy_of(x, n), *ri = copy_of(r, n), *apart = falloc(n);
    float *xs = where == 1 ? xi : where == 2 ? ri : apart;
    float *out = falloc(n), *mean = falloc(N), *rstd = falloc(N);
    if (rms)
        loom_op(be, residual_rmsnorm_forward, xs, out, LOOM_DTYPE_F32, rstd, xi, ri, LOOM_DTYPE_F32,
                w, N, C, EPS);
    else
        loom_op(be, residual_layernorm_forward, xs, out, LOOM_DTYPE_F32, mean, rstd, xi, ri,
                LOOM_DTYPE_F32, w, b, N, C, EPS);
    snprintf(name, sizeof name, "%s N=%lld C=%lld, %s: xs, out, %s bit for bit", kind,
             (long long)N, (long long)C, place[where], rms ? "rstd" : "mean, rstd");
    ops_check_true(name, same(xs, s_ref, n) && same(out, o_ref, n) && same(rstd, r_ref, N) &&
                             (rms || same(mean, m_ref, N)));
    if (where == 0) {
        double *ref = ops_alloc((size_t)n * sizeof *ref);
        ref_residual_norm(ref, x, r, w, b, rms, N, C);
        snprintf(name, sizeof name, "%s N=%lld C=%lld: out against double", kind, (long long)N,
                 (long long)C);
        ops_check(name, ops_max_norm_err(out, ref, n), 1e-6);
        free(ref);
    }
    free(x), free(r), free(w), free(b), free(s_ref), free(o_ref), free(m_ref), free(r_ref);
    free(xi), free(ri), free(apart), free(out), free(mean), free(rstd);
}

/* ---------------- linear + GELU ---------------- */

static void test_linear_gelu_forward(enum loom_gelu form, int64_t N, int64_t C, int64_t OC,
                                     int has_b) {
    char name[160];
    const char *fn = form == LOOM_GELU_ERF ? "erf" : "tanh";
    float *x = falloc(N * C), *w = falloc(OC * C), *b = has_b ? falloc(OC) : NULL;
    ops_fill(x, N * C, 310, -1.0f, 1.0f);
    ops_fill(w, OC * C, 311, -0.2f, 0.2f);
    if (b) ops_fill(b, OC, 312, -0.5f, 0.5f);
    float *pre_ref = falloc(N * OC), *out_ref = falloc(N * OC);
    loom_op(be, linear_forward, pre_ref, x, w, b, N, C, OC);
    loom_op(be, gelu_forward, form, out_ref, pre_ref, N * OC);
    float *pre = falloc(N * OC), *out = falloc(N * OC);
    loom_op(be, linear_gelu_forward, form, out, pre, LOOM_DTYPE_F32, x, LOOM_DTYPE_F32, w, b, N, C,
            OC);
    snprintf(name, sizeof name,
             "linear_gelu_forward %s N=%lld C=%lld OC=%lld%s: pre, out bit for bit", fn,
             (long long)N, (long long)C, (long long)OC, has_b ? "" : " (no bias)");
    ops_check_true(name, same(pre, pre_ref, N * OC) && same(out, out_ref, N * OC));
    double *ref = ops_alloc((size_t)(N * OC) * sizeof *ref);
    for (int64_t i = 0; i < N; i++)
        for (int64_t o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t c = 0; c < C; c++) s += (double)x[i * C + c] * w[o * C + c];
            ref[i * OC + o] = ops_gelu(form == LOOM_GELU_ERF, s);
        }
    snprintf(name, sizeof name, "linear_gelu_forward %s N=%lld C=%lld OC=%lld: out against double",
             fn, (long long)N, (long long)C, (long long)OC);
    ops_check(name, ops_max_norm_err(out, ref, N * OC), 1e-5);
    free(x), free(w), free(b), free(pre_ref), free(out_ref), free(pre), free(out), free(ref);
}

/* The GELU MLP: h[N,C] -> pre = h W1^T + b1 [N,F] -> a = gelu(pre) -> y = a W2^T + b2 [N,C].
 * Backward from dy, old chain against linear_gelu_backward + linear_backward without b1. */
static void test_mlp_backward(enum loom_gelu form, int64_t N, int64_t C, int64_t F, int has_b) {
    char name[160];
    const char *fn = form == LOOM_GELU_ERF ? "erf" : "tanh";
    float *h = falloc(N * C), *w1 = falloc(F * C), *b1 = has_b ? falloc(F) : NULL;
    float *w2 = falloc(C * F), *dy = falloc(N * C);
    ops_fill(h, N * C, 320, -1.0f, 1.0f);
    ops_fill(w1, F * C, 321, -0.3f, 0.3f);
    if (b1) ops_fill(b1, F, 322, -0.5f, 0.5f);
    ops_fill(w2, C * F, 323, -0.3f, 0.3f);
    ops_fill(dy, N * C, 324, -1.0f, 1.0f);
    float *pre = falloc(N * F), *a = falloc(N * F);
    loom_op(be, linear_gelu_forward, form, a, pre, LOOM_DTYPE_F32, h, LOOM_DTYPE_F32, w1, b1, N, C,
            F);

    /* parameter gradients start from earlier micro-batches' values */
    float *g0 = falloc(2 * F * C + F + C);
    ops_fill(g0, 2 * F * C + F + C, 325, -0.1f, 0.1f);
    float *g_old = copy_of(g0, 2 * F * C + F + C), *g_new = copy_of(g0, 2 * F * C + F + C);
    /* [dw1 | dw2 | db1 | db2] */
    float *o_dw1 = g_old, *o_dw2 = g_old + F * C, *o_db1 = g_old + 2 * F * C, *o_db2 = o_db1 + F;
    float *n_dw1 = g_new, *n_dw2 = g_new + F * C, *n_db1 = g_new + 2 * F * C, *n_db2 = n_db1 + F;

    float *da = falloc(N * F), *dpre_old = falloc(N * F), *dh_old = falloc(N * C);
    loom_op(be, linear_backward, da, o_dw2, has_b ? o_db2 : NULL, dy, a, w2, N, F, C);
    loom_op(be, gelu_backward, form, dpre_old, da, pre, N * F);
    loom_op(be, linear_backward, dh_old, o_dw1, has_b ? o_db1 : NULL, dpre_old, h, w1, N, C, F);

    float *dpre = falloc(N * F), *dh = falloc(N * C);
    for (int64_t i = 0; i < N * F; i++) dpre[i] = NAN; /* assigned: every element written */
    loom_op(be, linear_gelu_backward, form, dpre, LOOM_DTYPE_F32, has_b ? n_db1 : NULL, n_dw2,
            has_b ? n_db2 : NULL, dy, LOOM_DTYPE_F32, a, pre, w2, N, F, C);
    loom_op(be, linear_backward_typed, dh, LOOM_DTYPE_F32, n_dw1, NULL, dpre, LOOM_DTYPE_F32, h,
            LOOM_DTYPE_F32, w1, N, C, F);

    snprintf(name, sizeof name,
             "GELU MLP backward %s N=%lld C=%lld F=%lld%s: dpre, dinp, dw1, dw2%s bit for bit", fn,
             (long long)N, (long long)C, (long long)F, has_b ? "" : " (no bias)",
             has_b ? ", db1, db2 (accumulated)" : " (accumulated)");
    ops_check_true(name, same(dpre, dpre_old, N * F) && same(dh, dh_old, N * C) &&
                             same(g_new, g_old, 2 * F * C + F + C));

    double *ref = ops_alloc((size_t)(N * F) * sizeof *ref);
    for (int64_t i = 0; i < N; i++)
        for (int64_t f = 0; f < F; f++) {
            double s = 0.0;
            for (int64_t c = 0; c < C; c++) s += (double)dy[i * C + c] * w2[c * F + f];
            ref[i * F + f] = s * ops_dgelu(form == LOOM_GELU_ERF, pre[i * F + f]);
        }
    snprintf(name, sizeof name, "linear_gelu_backward %s N=%lld C=%lld F=%lld: dpre against double",
             fn, (long long)N, (long long)C, (long long)F);
    ops_check(name, ops_max_norm_err(dpre, ref, N * F), 1e-5);
    free(h), free(w1), free(b1), free(w2), free(dy), free(pre), free(a), free(g0), free(g_old);
    free(g_new), free(da), free(dpre_old), free(dh_old), free(dpre), free(dh), free(ref);
}

/* The typed linear ops with fp32 operands against the plain ones: out, dinp, dw, db bit for bit
 * (dw and db onto pre-filled values). */
static void test_typed_f32(int64_t N, int64_t C, int64_t OC) {
    char name[160];
    float *x = falloc(N * C), *w = falloc(OC * C), *b = falloc(OC), *dout = falloc(N * OC);
    ops_fill(x, N * C, 330, -1.0f, 1.0f);
    ops_fill(w, OC * C, 331, -0.3f, 0.3f);
    ops_fill(b, OC, 332, -0.5f, 0.5f);
    ops_fill(dout, N * OC, 333, -1.0f, 1.0f);
    float *out_ref = falloc(N * OC), *out = falloc(N * OC);
    loom_op(be, linear_forward, out_ref, x, w, b, N, C, OC);
    loom_op(be, linear_forward_typed, out, LOOM_DTYPE_F32, x, LOOM_DTYPE_F32, w, b, N, C, OC);
    float *g0 = falloc(OC * C + OC);
    ops_fill(g0, OC * C + OC, 334, -0.1f, 0.1f);
    float *g_ref = copy_of(g0, OC * C + OC), *g = copy_of(g0, OC * C + OC);
    float *dx_ref = falloc(N * C), *dx = falloc(N * C);
    loom_op(be, linear_backward, dx_ref, g_ref, g_ref + OC * C, dout, x, w, N, C, OC);
    loom_op(be, linear_backward_typed, dx, LOOM_DTYPE_F32, g, g + OC * C, dout, LOOM_DTYPE_F32, x,
            LOOM_DTYPE_F32, w, N, C, OC);
    snprintf(name, sizeof name,
             "linear_*_typed fp32 N=%lld C=%lld OC=%lld: out, dinp, dw, db bit for bit",
             (long long)N, (long long)C, (long long)OC);
    ops_check_true(name, same(out, out_ref, N * OC) && same(dx, dx_ref, N * C) &&
                             same(g, g_ref, OC * C + OC));
    free(x), free(w), free(b), free(dout), free(out_ref), free(out), free(g0), free(g_ref);
    free(g), free(dx_ref), free(dx);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    for (int rms = 0; rms <= 1; rms++)
        for (int where = 0; where < 3; where++) {
            test_residual_norm(rms, !rms, 7, 33, where);
            test_residual_norm(rms, !rms, 64, 300, where); /* threaded */
        }
    test_residual_norm(0, 0, 64, 300, 0);
    test_residual_norm(0, 0, 7, 33, 2);
    for (int f = LOOM_GELU_TANH; f <= LOOM_GELU_ERF; f++) {
        const enum loom_gelu form = (enum loom_gelu)f;
        test_linear_gelu_forward(form, 7, 33, 20, 1);
        test_linear_gelu_forward(form, 7, 33, 20, 0);
        test_linear_gelu_forward(form, 96, 64, 256, 1); /* threaded */
        test_mlp_backward(form, 7, 12, 48, 1);
        test_mlp_backward(form, 7, 12, 48, 0);
        test_mlp_backward(form, 96, 64, 256, 1); /* threaded */
    }
    test_typed_f32(7, 33, 20);
    test_typed_f32(96, 64, 256); /* threaded */
    ops_check_true("cpu: no 16-bit activation type (activation_dtype NULL)",
                   be->ops->activation_dtype == NULL);
    loom_backend_destroy(be);
    return ops_finish();
}
