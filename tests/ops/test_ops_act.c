/* CPU activations: GELU (both forms) and SwiGLU against double loops and central
 * differences; dropout: p = 0 is the identity, the mask is the counter-based one at global
 * indices (two half blocks with offset sample0 / pos0 / feat0 reproduce one full block), the
 * drop rate is ~p, kept values are scaled by 1/(1-p), in-place use, backward = same mask. */
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/rng.h"
#include "ops_ref.h"

static struct loom_backend *be;

/* ---------------- GELU ---------------- */

struct gelu_ctx {
    enum loom_gelu form;
    int64_t n;
    double *x, *R;
};

static double gelu_loss(void *p) {
    struct gelu_ctx *k = p;
    double s = 0.0;
    for (int64_t i = 0; i < k->n; i++)
        s += ops_gelu(k->form == LOOM_GELU_ERF, k->x[i]) * k->R[i];
    return s;
}

static void test_gelu(enum loom_gelu form, int64_t n) {
    char name[96];
    const char *fn = form == LOOM_GELU_ERF ? "erf" : "tanh";
    float *x = ops_alloc((size_t)n * sizeof *x), *y = ops_alloc((size_t)n * sizeof *y);
    float *R = ops_alloc((size_t)n * sizeof *R), *dx = ops_alloc((size_t)n * sizeof *dx);
    ops_fill(x, n, 50, -6.0f, 6.0f);
    ops_fill(R, n, 51, -1.0f, 1.0f);
    /* the tails and the middle */
    const float special[] = {0.0f, 1e-4f, -1e-4f, 10.0f, -10.0f, 20.0f, -20.0f, -40.0f, 3.0f};
    for (size_t k = 0; k < sizeof special / sizeof *special && (int64_t)k < n; k++)
        x[k] = special[k];
    double *ref = ops_alloc((size_t)n * sizeof *ref);
    for (int64_t i = 0; i < n; i++)
        ref[i] = ops_gelu(form == LOOM_GELU_ERF, x[i]);
    loom_op(be, gelu_forward, form, y, x, n);
    snprintf(name, sizeof name, "gelu %s forward n=%lld (relative)", fn, (long long)n);
    ops_check(name, ops_max_rel_err(y, ref, n), 2e-6);
    snprintf(name, sizeof name, "gelu %s forward n=%lld (absolute, incl. tails)", fn, (long long)n);
    ops_check(name, ops_max_abs_err(y, ref, n), 2e-6);

    loom_op(be, gelu_backward, form, dx, R, x, n);
    struct gelu_ctx k = {form, n, ops_to_double(x, n), ops_to_double(R, n)};
    snprintf(name, sizeof name, "gelu %s backward n=%lld against central differences", fn,
             (long long)n);
    ops_check(name, ops_grad_check_some(gelu_loss, &k, k.x, n, dx, 1e-4, 100), 1e-5);
    free(x), free(y), free(R), free(dx), free(ref), free(k.x), free(k.R);
}

/* The two forms are different functions: at x = 1 they differ by 1.5e-4 (the tanh form's
 * error), far above the checks' tolerance, so each check above tells them apart. */
static void test_gelu_forms_differ(void) {
    float x = 1.0f, yt, ye;
    loom_op(be, gelu_forward, LOOM_GELU_TANH, &yt, &x, 1);
    loom_op(be, gelu_forward, LOOM_GELU_ERF, &ye, &x, 1);
    ops_check_true("gelu forms: tanh(1) and erf(1) differ by more than 1e-4",
                   fabs((double)yt - ye) > 1e-4);
}

/* ---------------- SwiGLU ---------------- */

struct swiglu_ctx {
    int64_t N, F;
    double *x, *R, *out;
};

static void swiglu_ref(struct swiglu_ctx *k) {
    for (int64_t i = 0; i < k->N; i++)
        for (int64_t j = 0; j < k->F; j++) {
            double g = k->x[i * 2 * k->F + j], u = k->x[i * 2 * k->F + k->F + j];
            k->out[i * k->F + j] = g / (1.0 + exp(-g)) * u;
        }
}

static double swiglu_loss(void *p) {
    struct swiglu_ctx *k = p;
    swiglu_ref(k);
    double s = 0.0;
    for (int64_t i = 0; i < k->N * k->F; i++) s += k->out[i] * k->R[i];
    return s;
}

static void test_swiglu(int64_t N, int64_t F) {
    char name[96];
    const int64_t n = N * F;
    float *x = ops_alloc((size_t)(2 * n) * sizeof *x), *y = ops_alloc((size_t)n * sizeof *y);
    float *R = ops_alloc((size_t)n * sizeof *R), *dx = ops_alloc((size_t)(2 * n) * sizeof *dx);
    ops_fill(x, 2 * n, 52, -5.0f, 5.0f);
    ops_fill(R, n, 53, -1.0f, 1.0f);
    x[0] = -30.0f; /* silu's far tail */
    x[1] = 30.0f;
    struct swiglu_ctx k = {N, F, ops_to_double(x, 2 * n), ops_to_double(R, n),
                           ops_alloc((size_t)n * sizeof(double))};
    swiglu_ref(&k);
    loom_op(be, swiglu_forward, y, x, LOOM_DTYPE_F32, N, F);
    snprintf(name, sizeof name, "swiglu forward N=%lld F=%lld", (long long)N, (long long)F);
    ops_check(name, ops_max_rel_err(y, k.out, n), 2e-6);
    for (int64_t i = 0; i < 2 * n; i++) dx[i] = NAN; /* assigned */
    loom_op(be, swiglu_backward, dx, R, x, LOOM_DTYPE_F32, N, F);
    snprintf(name, sizeof name, "swiglu backward N=%lld F=%lld against central differences",
             (long long)N, (long long)F);
    ops_check(name, ops_grad_check_some(swiglu_loss, &k, k.x, 2 * n, dx, 1e-4, 100), 1e-5);
    free(x), free(y), free(R), free(dx), free(k.x), free(k.R), free(k.out);
}

/* ---------------- dropout ---------------- */

/* out[B,T,C] block at offsets (s0, t0, f0) of a [*, TG, CG] global tensor. */
static void dropout_block(float *out, const float *full, int64_t B, int64_t T, int64_t C,
                          int64_t s0, int64_t t0, int64_t f0, int64_t TG, int64_t CG,
                          const struct loom_dropout *base) {
    struct loom_dropout d = *base;
    d.sample0 = s0;
    d.pos0 = t0;
    d.feat0 = f0;
    d.T_global = TG;
    d.C_global = CG;
    /* gather the local input block from the full [*, TG, CG] tensor */
    float *in = ops_alloc((size_t)(B * T * C) * sizeof *in);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            memcpy(in + (b * T + t) * C, full + ((s0 + b) * TG + t0 + t) * CG + f0,
                   (size_t)C * sizeof *in);
    loom_op(be, dropout_forward, out, in, B, T, C, &d);
    free(in);
}

/* compare a local block with the same elements of a full [BG, TG, CG] result */
static int block_matches(const float *blk, const float *full, int64_t B, int64_t T, int64_t C,
                         int64_t s0, int64_t t0, int64_t f0, int64_t TG, int64_t CG) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            if (memcmp(blk + (b * T + t) * C, full + ((s0 + b) * TG + t0 + t) * CG + f0,
                       (size_t)C * sizeof *blk) != 0)
                return 0;
    return 1;
}

static void test_dropout(void) {
    enum { BG = 4, TG = 6, CG = 40, NG = BG * TG * CG };
    float *x = ops_alloc(NG * sizeof *x), *y = ops_alloc(NG * sizeof *y);
    float *z = ops_alloc(NG * sizeof *z);
    ops_fill(x, NG, 60, -2.0f, 2.0f);
    struct loom_dropout d = {.p = 0.0f, .seed = 1234, .key = 99, .sample0 = 0, .pos0 = 0,
                             .T_global = TG, .feat0 = 0, .C_global = CG};

    /* p = 0: identity, also in place */
    loom_op(be, dropout_forward, y, x, BG, TG, CG, &d);
    int ok = memcmp(x, y, NG * sizeof *x) == 0;
    loom_op(be, dropout_forward, y, y, BG, TG, CG, &d);
    ok &= memcmp(x, y, NG * sizeof *x) == 0;
    loom_op(be, dropout_backward, z, x, BG, TG, CG, &d);
    ok &= memcmp(x, z, NG * sizeof *x) == 0;
    ops_check_true("dropout p=0 is the exact identity (forward, in place, backward)", ok);

    /* p = 0.3: each element is 0 or x / (1 - p), decided by loom_rng_keep at its global index */
    d.p = 0.3f;
    loom_op(be, dropout_forward, y, x, BG, TG, CG, &d);
    const float scale = 1.0f / (1.0f - d.p);
    ok = 1;
    for (int64_t i = 0; i < NG; i++) {
        int keep = loom_rng_keep(d.seed, d.key, (uint64_t)i, d.p);
        ok &= y[i] == (keep ? x[i] * scale : 0.0f);
    }
    ops_check_true("dropout p=0.3: y = x * keep(seed, key, global index) / (1 - p), exactly", ok);

    /* halves along each of the three dimensions reproduce the full block, bit for bit */
    float *h0 = ops_alloc(NG * sizeof *h0), *h1 = ops_alloc(NG * sizeof *h1);
    dropout_block(h0, x, BG / 2, TG, CG, 0, 0, 0, TG, CG, &d);
    dropout_block(h1, x, BG / 2, TG, CG, BG / 2, 0, 0, TG, CG, &d);
    ok = block_matches(h0, y, BG / 2, TG, CG, 0, 0, 0, TG, CG) &&
         block_matches(h1, y, BG / 2, TG, CG, BG / 2, 0, 0, TG, CG);
    ops_check_true("dropout: two half blocks over samples (sample0) == the full block", ok);
    dropout_block(h0, x, BG, TG / 2, CG, 0, 0, 0, TG, CG, &d);
    dropout_block(h1, x, BG, TG / 2, CG, 0, TG / 2, 0, TG, CG, &d);
    ok = block_matches(h0, y, BG, TG / 2, CG, 0, 0, 0, TG, CG) &&
         block_matches(h1, y, BG, TG / 2, CG, 0, TG / 2, 0, TG, CG);
    ops_check_true("dropout: two half blocks over positions (pos0) == the full block", ok);
    dropout_block(h0, x, BG, TG, CG / 2, 0, 0, 0, TG, CG, &d);
    dropout_block(h1, x, BG, TG, CG / 2, 0, 0, CG / 2, TG, CG, &d);
    ok = block_matches(h0, y, BG, TG, CG / 2, 0, 0, 0, TG, CG) &&
         block_matches(h1, y, BG, TG, CG / 2, 0, 0, CG / 2, TG, CG);
    ops_check_true("dropout: two half blocks over features (feat0) == the full block", ok);

    /* in place gives the same bits */
    memcpy(z, x, NG * sizeof *x);
    loom_op(be, dropout_forward, z, z, BG, TG, CG, &d);
    ops_check_true("dropout in place (out == inp) == out of place",
                   memcmp(z, y, NG * sizeof *z) == 0);

    /* backward: dinp = dout * mask / (1 - p) with the forward's mask; as a linear map, that is
     * the gradient of sum(y * R), which central differences confirm */
    float *R = ops_alloc(NG * sizeof *R), *dx = ops_alloc(NG * sizeof *dx);
    ops_fill(R, NG, 61, -1.0f, 1.0f);
    loom_op(be, dropout_backward, dx, R, BG, TG, CG, &d);
    double *num = ops_alloc(NG * sizeof *num);
    for (int64_t i = 0; i < NG; i++) { /* d/dx_i sum_j y_j R_j, y_i = x_i k_i / (1 - p) */
        const double hh = 1e-3;
        double k = loom_rng_keep(d.seed, d.key, (uint64_t)i, d.p) ? 1.0 / (1.0 - (double)d.p) : 0;
        num[i] = ((x[i] + hh) * k * R[i] - (x[i] - hh) * k * R[i]) / (2 * hh);
    }
    ops_check("dropout backward against central differences", ops_max_rel_err(dx, num, NG), 1e-6);
    int same_mask = 1;
    for (int64_t i = 0; i < NG; i++)
        same_mask &= (dx[i] == R[i] * scale) == loom_rng_keep(d.seed, d.key, (uint64_t)i, d.p) &&
                     (dx[i] == 0.0f) == !loom_rng_keep(d.seed, d.key, (uint64_t)i, d.p);
    ops_check_true("dropout backward drops exactly the elements the forward dropped", same_mask);

    /* another key draws another mask */
    d.key = 100;
    loom_op(be, dropout_forward, z, x, BG, TG, CG, &d);
    ops_check_true("dropout: a different key gives a different mask",
                   memcmp(z, y, NG * sizeof *z) != 0);

    /* p = 1 drops everything */
    d.p = 1.0f;
    loom_op(be, dropout_forward, z, x, BG, TG, CG, &d);
    ok = 1;
    for (int64_t i = 0; i < NG; i++) ok &= z[i] == 0.0f;
    ops_check_true("dropout p=1 gives zeros", ok);

    /* the drop rate is p within 5 standard deviations, on 400k elements through the threads */
    const float ps[] = {0.1f, 0.5f};
    for (int k = 0; k < 2; k++) {
        const int64_t B = 8, T = 100, C = 500, n = B * T * C;
        float *ones = ops_alloc((size_t)n * sizeof *ones), *o = ops_alloc((size_t)n * sizeof *o);
        for (int64_t i = 0; i < n; i++) ones[i] = 1.0f;
        struct loom_dropout dd = {.p = ps[k], .seed = 7, .key = 3, .sample0 = 5, .pos0 = 17,
                                  .T_global = 1000, .feat0 = 250, .C_global = 1000};
        loom_op(be, dropout_forward, o, ones, B, T, C, &dd);
        int64_t dropped = 0;
        int scaled = 1;
        for (int64_t i = 0; i < n; i++) {
            dropped += o[i] == 0.0f;
            scaled &= o[i] == 0.0f || o[i] == 1.0f / (1.0f - ps[k]);
        }
        double rate = (double)dropped / (double)n;
        double sd = sqrt(ps[k] * (1.0 - ps[k]) / (double)n);
        char name[96];
        snprintf(name, sizeof name, "dropout p=%.1f: drop rate %.4f within 5 sd of p", ps[k], rate);
        ops_check(name, fabs(rate - ps[k]) / sd, 5.0);
        snprintf(name, sizeof name, "dropout p=%.1f: kept values scaled by 1/(1-p)", ps[k]);
        ops_check_true(name, scaled);
        free(ones), free(o);
    }
    free(x), free(y), free(z), free(h0), free(h1), free(R), free(dx), free(num);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    for (int form = LOOM_GELU_TANH; form <= LOOM_GELU_ERF; form++) {
        test_gelu((enum loom_gelu)form, 37);
        test_gelu((enum loom_gelu)form, 40001); /* threaded path */
    }
    test_gelu_forms_differ();
    test_swiglu(7, 19);
    test_swiglu(64, 300); /* threaded path */
    test_dropout();
    loom_backend_destroy(be);
    return ops_finish();
}
