/* bf16 matrix products of the CUDA backend (set_matmul_dtype(LOOM_DTYPE_BF16)).
 *
 * The linear ops with bf16 inputs and fp32 accumulation must equal the CPU backend's fp32 ops
 * run on the same inputs rounded to bf16 (products of bf16 values are exact in fp32, so only
 * the order of the sums differs): normwise <= 1e-4, with and without bias, for weights inside
 * the registered parameter range and outside it, at odd shapes (unaligned rows) and at GPT-2
 * shapes. The bias gradient is the column sum of the rounded gradient where cuBLASLt sums it in
 * the weight-gradient product, else of the fp32 one (either within 1e-5). After the weights change
 * through to_device or scale, the products must use the new values (the bf16 copy is refreshed),
 * and against the unrounded fp32 products the error is that of bf16 rounding (<= 2e-2).
 * Switching back to F32 restores the exact fp32 products (<= 1e-5). Two cases repeat with fp16
 * products (LOOM_DTYPE_F16) against inputs rounded to fp16. The tensor-core attention is
 * checked in bf16 and in fp16 against the CPU's fp32 attention on inputs rounded to the type
 * (see run_attention_typed), the fused linear + GELU products against the CPU's fp32 ops on
 * rounded inputs (see run_linear_gelu), the GELU MLP with its activations in bf16 likewise (see
 * run_mlp_act16), and the typed linear ops with fp32 operands against the CPU (see
 * run_typed_f32).
 *
 * Exit status: 0 passed, 1 failed, 77 skipped (no CUDA build or no device; with
 * LOOM_REQUIRE_CUDA=1 a missing device fails).
 */
#include <stdio.h>
#include <stdlib.h>

#ifdef LOOM_HAVE_CUDA

#include <math.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/log.h"
#include "loom/rng.h"

static struct loom_backend *g_cpu, *g_gpu;
static int g_fail, g_pass;

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static float *hrand(int64_t n, uint64_t purpose, float sd) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) exit(2);
    for (int64_t i = 0; i < n; i++) p[i] = sd * loom_rng_normal(77, purpose, (uint64_t)i);
    return p;
}

static int g_f16; /* run_case rounds to fp16 instead of bf16 */

/* x rounded to fp16 (f16) or bf16, to nearest even */
static float *rounded_as(int f16, const float *x, int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) exit(2);
    for (int64_t i = 0; i < n; i++) p[i] = f16 ? (float)(_Float16)x[i] : bf16_round(x[i]);
    return p;
}

static float *rounded(const float *x, int64_t n) { return rounded_as(g_f16, x, n); }

static void *dput(struct loom_backend *be, const float *h, int64_t n) {
    void *d = be->ops->malloc(be, (size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!d) exit(2);
    if (h && n > 0) be->ops->to_device(be, d, h, (size_t)n * sizeof(float));
    return d;
}

static float *dget(struct loom_backend *be, const void *d, int64_t n) {
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!h) exit(2);
    if (n > 0) be->ops->to_host(be, h, d, (size_t)n * sizeof(float));
    return h;
}

static void compare(const char *what, const float *got, const float *want, int64_t n, double tol) {
    double mx = 0, err = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs((double)want[i]) > mx) mx = fabs((double)want[i]);
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= err)) err = e; /* NaN propagates */
    }
    double rel = mx > 0 ? err / mx : err;
    int ok = rel <= tol;
    printf("%s %-62s normwise %.2e (tolerance %.0e)\n", ok ? "ok  " : "FAIL", what, rel, tol);
    if (ok)
        g_pass++;
    else
        g_fail++;
}

/* normwise error max |got - want| / max |want| (NaN gives NaN) */
static double normwise(const float *got, const float *want, int64_t n) {
    double mx = 0, err = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs((double)want[i]) > mx) mx = fabs((double)want[i]);
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= err)) err = e;
    }
    return mx > 0 ? err / mx : err;
}

/* CPU fp32 linear forward/backward on the given host inputs. */
static void cpu_linear(float *out, float *dinp, float *dw, const float *inp, const float *w,
                       const float *b, const float *dout, const float *dw0, int64_t N, int64_t C,
                       int64_t OC) {
    struct loom_backend *be = g_cpu;
    float *di = dput(be, inp, N * C), *dwt = dput(be, w, OC * C), *db = b ? dput(be, b, OC) : NULL;
    float *dout_d = dput(be, dout, N * OC), *o = dput(be, NULL, N * OC);
    float *gi = dput(be, NULL, N * C), *gw = dput(be, dw0, OC * C);
    be->ops->linear_forward(be, o, di, dwt, db, N, C, OC);
    be->ops->linear_backward(be, gi, gw, NULL, dout_d, di, dwt, N, C, OC);
    be->ops->to_host(be, out, o, (size_t)(N * OC) * sizeof(float));
    be->ops->to_host(be, dinp, gi, (size_t)(N * C) * sizeof(float));
    be->ops->to_host(be, dw, gw, (size_t)(OC * C) * sizeof(float));
    void *bufs[] = {di, dwt, db, dout_d, o, gi, gw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
}

static void run_case(int64_t N, int64_t C, int64_t OC, int bias, int registered, uint64_t seed) {
    char what[160], tag[64];
    snprintf(tag, sizeof tag, "%s%s", g_f16 ? "fp16, " : "",
             registered ? "registered weight" : "weight outside the range");
    float *inp = hrand(N * C, seed + 1, 1.0f), *w = hrand(OC * C, seed + 2, 0.05f);
    float *b = bias ? hrand(OC, seed + 3, 0.1f) : NULL, *dout = hrand(N * OC, seed + 4, 0.01f);
    float *dw0 = hrand(OC * C, seed + 5, 0.001f), *db0 = hrand(OC, seed + 6, 0.001f);
    float *inp_r = rounded(inp, N * C), *w_r = rounded(w, OC * C), *dout_r = rounded(dout, N * OC);
    float *out_ref = malloc((size_t)(N * OC) * sizeof(float));
    float *dinp_ref = malloc((size_t)(N * C) * sizeof(float));
    float *dw_ref = malloc((size_t)(OC * C) * sizeof(float));
    cpu_linear(out_ref, dinp_ref, dw_ref, inp_r, w_r, b, dout_r, dw0, N, C, OC);

    /* the GPU's parameters: [16 floats | w | 16 floats], registered or not */
    int64_t np = OC * C + 32;
    float *params_h = calloc((size_t)np, sizeof(float));
    memcpy(params_h + 16, w, (size_t)(OC * C) * sizeof(float));
    float *params = dput(g_gpu, params_h, np);
    float *wd = params + 16;
    if (g_gpu->ops->set_matmul_dtype(g_gpu, g_f16 ? LOOM_DTYPE_F16 : LOOM_DTYPE_BF16,
                                     registered ? params : NULL,
                                     registered ? np : 0) != LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    float *di = dput(g_gpu, inp, N * C), *db = bias ? dput(g_gpu, b, OC) : NULL;
    float *dd = dput(g_gpu, dout, N * OC), *o = dput(g_gpu, NULL, N * OC);
    float *gi = dput(g_gpu, NULL, N * C), *gw = dput(g_gpu, dw0, OC * C), *gb = dput(g_gpu, db0, OC);
    g_gpu->ops->linear_forward(g_gpu, o, di, wd, db, N, C, OC);
    g_gpu->ops->linear_backward(g_gpu, gi, gw, gb, dd, di, wd, N, C, OC);
    float *h;
    snprintf(what, sizeof what, "forward  %lldx%lldx%lld%s, %s", (long long)N, (long long)C,
             (long long)OC, bias ? " +bias" : "", tag);
    compare(what, h = dget(g_gpu, o, N * OC), out_ref, N * OC, 1e-4);
    free(h);
    snprintf(what, sizeof what, "backward dinp %lldx%lldx%lld, %s", (long long)N, (long long)C,
             (long long)OC, tag);
    compare(what, h = dget(g_gpu, gi, N * C), dinp_ref, N * C, 1e-4);
    free(h);
    snprintf(what, sizeof what, "backward dw (accumulated) %lldx%lldx%lld, %s", (long long)N,
             (long long)C, (long long)OC, tag);
    compare(what, h = dget(g_gpu, gw, OC * C), dw_ref, OC * C, 1e-4);
    free(h);
    /* db += column sums of dout: the contract allows the sums of the rounded dout; the backend
     * sums the fp32 dout (in the pass that rounds it) */
    double *dbs = calloc((size_t)OC, sizeof(double)), *dbs_r = calloc((size_t)OC, sizeof(double));
    float *db_ref = malloc((size_t)OC * sizeof(float));
    float *db_ref_r = malloc((size_t)OC * sizeof(float));
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < OC; k++) {
            dbs[k] += dout[n * OC + k];
            dbs_r[k] += dout_r[n * OC + k];
        }
    for (int64_t k = 0; k < OC; k++) {
        db_ref[k] = (float)(db0[k] + dbs[k]);
        db_ref_r[k] = (float)(db0[k] + dbs_r[k]);
    }
    h = dget(g_gpu, gb, OC);
    int from_r = normwise(h, db_ref_r, OC) <= normwise(h, db_ref, OC);
    compare(from_r ? "backward db, sums of the rounded gradient (epilogue)"
                   : "backward db, sums of the fp32 gradient",
            h, from_r ? db_ref_r : db_ref, OC, 1e-5);
    free(h);
    free(dbs_r);
    free(db_ref_r);

    /* the weights change: through to_device, then scale; the products follow */
    float *w2 = hrand(OC * C, seed + 7, 0.05f);
    g_gpu->ops->to_device(g_gpu, wd, w2, (size_t)(OC * C) * sizeof(float));
    g_gpu->ops->scale(g_gpu, wd, 0.5f, OC * C);
    for (int64_t i = 0; i < OC * C; i++) w2[i] *= 0.5f;
    float *w2_r = rounded(w2, OC * C);
    cpu_linear(out_ref, dinp_ref, dw_ref, inp_r, w2_r, b, dout_r, dw0, N, C, OC);
    g_gpu->ops->linear_forward(g_gpu, o, di, wd, db, N, C, OC);
    compare("forward after the weights changed (to_device, scale)", h = dget(g_gpu, o, N * OC),
            out_ref, N * OC, 1e-4);
    free(h);
    /* bf16 rounding against the exact fp32 product */
    cpu_linear(out_ref, dinp_ref, dw_ref, inp, w2, b, dout, dw0, N, C, OC);
    compare(g_f16 ? "forward against unrounded fp32 (fp16 rounding only)"
                  : "forward against unrounded fp32 (bf16 rounding only)",
            h = dget(g_gpu, o, N * OC), out_ref, N * OC, 2e-2);
    free(h);
    /* back to exact fp32 */
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    g_gpu->ops->linear_forward(g_gpu, o, di, wd, db, N, C, OC);
    compare("forward after switching back to fp32", h = dget(g_gpu, o, N * OC), out_ref, N * OC,
            1e-5);
    free(h);

    void *bufs[] = {params, di, db, dd, o, gi, gw, gb};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) g_gpu->ops->free(g_gpu, bufs[i]);
    float *hb[] = {inp, w, b, dout, dw0, db0, inp_r, w_r, dout_r, out_ref, dinp_ref, dw_ref,
                   params_h, db_ref, w2, w2_r};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
    free(dbs);
}

/* The GELU MLP's fused products with bf16 inputs: linear_gelu_forward (pre = h . w1^T + b1 and
 * out = gelu(pre) from one product) and linear_gelu_backward (dpre = (dy . w2) * gelu'(pre), the
 * sums of dpre into db1, then dw2 and db2), against the CPU's fp32 ops on inputs rounded to
 * bf16: pre within 1e-4 as a plain product, the rest within 1e-2 (the GELU evaluated by the
 * backend, the activation rounded again for dw2, the bias gradient db2 from the rounded dy or
 * the fp32 one).
 * Two runs agree bit for bit. F not a multiple of 8 takes the path without the epilogues. */
static void run_linear_gelu(int64_t N, int64_t C, int64_t F, int bias, int registered,
                            uint64_t seed) {
    char what[160], tag[96];
    snprintf(tag, sizeof tag, "%lldx%lldx%lld%s, %s", (long long)N, (long long)C, (long long)F,
             bias ? " +bias" : "", registered ? "registered weights" : "weights outside the range");
    float *h = hrand(N * C, seed + 1, 1.0f), *w1 = hrand(F * C, seed + 2, 0.05f);
    float *b1 = bias ? hrand(F, seed + 3, 0.1f) : NULL, *w2 = hrand(C * F, seed + 4, 0.05f);
    float *dy = hrand(N * C, seed + 5, 0.01f);
    const int64_t ng = F * C + F + C; /* [dw2 | db1 | db2], pre-filled: they accumulate */
    float *g0 = hrand(ng, seed + 6, 0.001f);
    float *h_r = rounded(h, N * C), *w1_r = rounded(w1, F * C), *w2_r = rounded(w2, C * F);
    float *dy_r = rounded(dy, N * C);

    /* CPU reference on the rounded inputs; dw2 from the rounded activation */
    struct loom_backend *cb = g_cpu;
    float *ch = dput(cb, h_r, N * C), *cw1 = dput(cb, w1_r, F * C);
    float *cb1 = bias ? dput(cb, b1, F) : NULL, *cw2 = dput(cb, w2_r, C * F);
    float *cdy = dput(cb, dy_r, N * C), *cpre = dput(cb, NULL, N * F), *ca = dput(cb, NULL, N * F);
    float *cdpre = dput(cb, NULL, N * F), *cg = dput(cb, g0, ng);
    cb->ops->linear_gelu_forward(cb, ca, cpre, LOOM_DTYPE_F32, ch, LOOM_DTYPE_F32, cw1, cb1, N, C,
                                 F);
    float *ref_a = dget(cb, ca, N * F), *ref_pre = dget(cb, cpre, N * F);
    float *a_r = rounded(ref_a, N * F);
    cb->ops->to_device(cb, ca, a_r, (size_t)(N * F) * sizeof(float));
    cb->ops->linear_gelu_backward(cb, cdpre, LOOM_DTYPE_F32, bias ? cg + F * C : NULL, cg,
                                  bias ? cg + F * C + F : NULL, cdy, ca, cpre, cw2, N, F, C);
    float *ref_dpre = dget(cb, cdpre, N * F), *ref_g = dget(cb, cg, ng);

    /* GPU: parameters [16 floats | w1 | w2 | 16 floats], registered or not */
    int64_t np = 2 * F * C + 32;
    float *params_h = calloc((size_t)np, sizeof(float));
    memcpy(params_h + 16, w1, (size_t)(F * C) * sizeof(float));
    memcpy(params_h + 16 + F * C, w2, (size_t)(C * F) * sizeof(float));
    float *params = dput(g_gpu, params_h, np);
    if (g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, registered ? params : NULL,
                                     registered ? np : 0) != LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    float *gw1 = params + 16, *gw2 = params + 16 + F * C;
    float *gh = dput(g_gpu, h, N * C), *gb1 = bias ? dput(g_gpu, b1, F) : NULL;
    float *gdy = dput(g_gpu, dy, N * C), *gpre = dput(g_gpu, NULL, N * F);
    float *ga = dput(g_gpu, NULL, N * F), *gdpre = dput(g_gpu, NULL, N * F);
    float *gg = dput(g_gpu, NULL, ng);
    float *run[2][4];
    for (int rep = 0; rep < 2; rep++) {
        g_gpu->ops->to_device(g_gpu, gg, g0, (size_t)ng * sizeof(float));
        g_gpu->ops->linear_gelu_forward(g_gpu, ga, gpre, LOOM_DTYPE_F32, gh, LOOM_DTYPE_F32, gw1,
                                        gb1, N, C, F);
        g_gpu->ops->linear_gelu_backward(g_gpu, gdpre, LOOM_DTYPE_F32, bias ? gg + F * C : NULL,
                                         gg, bias ? gg + F * C + F : NULL, gdy, ga, gpre, gw2, N,
                                         F, C);
        run[rep][0] = dget(g_gpu, gpre, N * F);
        run[rep][1] = dget(g_gpu, ga, N * F);
        run[rep][2] = dget(g_gpu, gdpre, N * F);
        run[rep][3] = dget(g_gpu, gg, ng);
    }
    snprintf(what, sizeof what, "linear_gelu forward pre %s", tag);
    compare(what, run[0][0], ref_pre, N * F, 1e-4);
    snprintf(what, sizeof what, "linear_gelu forward out = gelu(pre) %s", tag);
    compare(what, run[0][1], ref_a, N * F, 1e-2);
    snprintf(what, sizeof what, "linear_gelu backward dpre %s", tag);
    compare(what, run[0][2], ref_dpre, N * F, 1e-2);
    compare("linear_gelu backward dw2 (accumulated)", run[0][3], ref_g, F * C, 1e-2);
    if (bias) {
        compare("linear_gelu backward db1 = sums of dpre (accumulated)", run[0][3] + F * C,
                ref_g + F * C, F, 1e-2);
        compare("linear_gelu backward db2 (accumulated)", run[0][3] + F * C + F,
                ref_g + F * C + F, C, 1e-2);
    }
    int same = !memcmp(run[0][0], run[1][0], (size_t)(N * F) * 4) &&
               !memcmp(run[0][1], run[1][1], (size_t)(N * F) * 4) &&
               !memcmp(run[0][2], run[1][2], (size_t)(N * F) * 4) &&
               !memcmp(run[0][3], run[1][3], (size_t)ng * 4);
    printf("%s linear_gelu bf16: two runs bit for bit\n", same ? "ok  " : "FAIL");
    same ? g_pass++ : g_fail++;
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);

    void *gb[] = {params, gh, gb1, gdy, gpre, ga, gdpre, gg};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++)
        if (gb[i]) g_gpu->ops->free(g_gpu, gb[i]);
    void *cbufs[] = {ch, cw1, cb1, cw2, cdy, cpre, ca, cdpre, cg};
    for (size_t i = 0; i < sizeof cbufs / sizeof cbufs[0]; i++)
        if (cbufs[i]) cb->ops->free(cb, cbufs[i]);
    float *hb[] = {h, w1, b1, w2, dy, g0, h_r, w1_r, w2_r, dy_r, ref_a, ref_pre, a_r, ref_dpre,
                   ref_g, params_h, run[0][0], run[0][1], run[0][2], run[0][3], run[1][0],
                   run[1][1], run[1][2], run[1][3]};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

/* bf16 device array of n elements to host floats (exact: a bf16 value is an fp32 one) */
static float *dget16(struct loom_backend *be, const void *d, int64_t n) {
    uint16_t *u = malloc((size_t)(n > 0 ? n : 1) * 2);
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!u || !h) exit(2);
    if (n > 0) be->ops->to_host(be, u, d, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)u[i] << 16;
        memcpy(&h[i], &v, 4);
    }
    free(u);
    return h;
}

/* The GELU MLP with its activations in bf16 (activation_dtype under bf16 products), as the model
 * runs it: linear_gelu_forward writing pre and a = gelu(pre) in bf16, fc2's linear_forward_typed
 * reading a, linear_gelu_backward writing dpre in bf16 (db1 from its sums, dw2 and db2 onto
 * pre-filled values), fc1's linear_backward_typed reading dpre (dh assigned, dw1 accumulated;
 * twice more with a bias gradient summed from the bf16 dpre: alone, and with dw). Reference: the CPU's fp32 ops
 * composed on inputs rounded to bf16, each stage fed the rounded output of the one before
 * (a, pre and dpre rounded as the GPU stores them), all within normwise 1e-2 (the rounding of
 * the stored activations, a = gelu of the rounded pre). Two runs agree bit for bit. F not a multiple
 * of 8 takes the path without the epilogues. */
static void run_mlp_act16(int64_t N, int64_t C, int64_t F, int bias, int registered,
                          uint64_t seed) {
    char what[160], tag[96];
    snprintf(tag, sizeof tag, "%lldx%lldx%lld%s, %s", (long long)N, (long long)C, (long long)F,
             bias ? " +bias" : "", registered ? "registered weights" : "weights outside");
    float *h = hrand(N * C, seed + 1, 1.0f), *w1 = hrand(F * C, seed + 2, 0.05f);
    float *b1 = bias ? hrand(F, seed + 3, 0.1f) : NULL, *w2 = hrand(C * F, seed + 4, 0.05f);
    float *b2 = bias ? hrand(C, seed + 7, 0.1f) : NULL, *dy = hrand(N * C, seed + 5, 0.01f);
    /* [dw1 | dw2 | db1 | db2 | dbA | dwB | dbB], pre-filled: dbA from fc1's typed backward
     * with the bias gradient alone, dwB and dbB from it with both */
    const int64_t oDW2 = F * C, oDB1 = 2 * F * C, oDB2 = oDB1 + F, oDBA = oDB2 + C;
    const int64_t oDWB = oDBA + F, oDBB = oDWB + F * C, ng = oDBB + F;
    float *g0 = hrand(ng, seed + 6, 0.001f);
    float *h_r = rounded(h, N * C), *w1_r = rounded(w1, F * C), *w2_r = rounded(w2, C * F);
    float *dy_r = rounded(dy, N * C);

    /* CPU reference, stage by stage on rounded values */
    struct loom_backend *cb = g_cpu;
    float *ch = dput(cb, h_r, N * C), *cw1 = dput(cb, w1_r, F * C), *cw2 = dput(cb, w2_r, C * F);
    float *cb1 = bias ? dput(cb, b1, F) : NULL, *cb2 = bias ? dput(cb, b2, C) : NULL;
    float *cdy = dput(cb, dy_r, N * C), *cpre = dput(cb, NULL, N * F), *ca = dput(cb, NULL, N * F);
    float *cy = dput(cb, NULL, N * C), *cdpre = dput(cb, NULL, N * F), *cdh = dput(cb, NULL, N * C);
    float *cg = dput(cb, g0, ng), *cscratch = dput(cb, NULL, F * C);
    cb->ops->linear_gelu_forward(cb, ca, cpre, LOOM_DTYPE_F32, ch, LOOM_DTYPE_F32, cw1, cb1, N, C,
                                 F);
    float *ref_pre = dget(cb, cpre, N * F), *ref_a = dget(cb, ca, N * F);
    float *pre_r = rounded(ref_pre, N * F), *a_r = rounded(ref_a, N * F);
    cb->ops->to_device(cb, cpre, pre_r, (size_t)(N * F) * sizeof(float));
    cb->ops->to_device(cb, ca, a_r, (size_t)(N * F) * sizeof(float));
    cb->ops->linear_forward(cb, cy, ca, cw2, cb2, N, F, C);
    cb->ops->linear_gelu_backward(cb, cdpre, LOOM_DTYPE_F32, bias ? cg + oDB1 : NULL, cg + oDW2,
                                  bias ? cg + oDB2 : NULL, cdy, ca, cpre, cw2, N, F, C);
    float *ref_dpre = dget(cb, cdpre, N * F), *dpre_r = rounded(ref_dpre, N * F);
    cb->ops->to_device(cb, cdpre, dpre_r, (size_t)(N * F) * sizeof(float));
    cb->ops->linear_backward(cb, cdh, cg, NULL, cdpre, ch, cw1, N, C, F);
    cb->ops->linear_backward(cb, NULL, cscratch, cg + oDBA, cdpre, ch, cw1, N, C, F);
    cb->ops->linear_backward(cb, NULL, cg + oDWB, cg + oDBB, cdpre, ch, cw1, N, C, F);
    float *ref_y = dget(cb, cy, N * C), *ref_dh = dget(cb, cdh, N * C), *ref_g = dget(cb, cg, ng);

    /* GPU: parameters [16 floats | w1 | w2 | 16 floats], registered or not */
    int64_t np = 2 * F * C + 32;
    float *params_h = calloc((size_t)np, sizeof(float));
    memcpy(params_h + 16, w1, (size_t)(F * C) * sizeof(float));
    memcpy(params_h + 16 + F * C, w2, (size_t)(C * F) * sizeof(float));
    float *params = dput(g_gpu, params_h, np);
    if (g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, registered ? params : NULL,
                                     registered ? np : 0) != LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    const enum loom_dtype dt = g_gpu->ops->activation_dtype(g_gpu);
    printf("%s activation_dtype with bf16 products: %s\n", dt == LOOM_DTYPE_BF16 ? "ok  " : "FAIL",
           loom_dtype_name(dt));
    dt == LOOM_DTYPE_BF16 ? g_pass++ : g_fail++;
    float *gw1 = params + 16, *gw2 = params + 16 + F * C;
    float *gh = dput(g_gpu, h, N * C), *gb1 = bias ? dput(g_gpu, b1, F) : NULL;
    float *gb2 = bias ? dput(g_gpu, b2, C) : NULL, *gdy = dput(g_gpu, dy, N * C);
    void *gpre = dput(g_gpu, NULL, N * F / 2 + 1), *ga = dput(g_gpu, NULL, N * F / 2 + 1);
    void *gdpre = dput(g_gpu, NULL, N * F / 2 + 1);
    float *gy = dput(g_gpu, NULL, N * C), *gdh = dput(g_gpu, NULL, N * C);
    float *gg = dput(g_gpu, NULL, ng);
    float *run[2][6];
    for (int rep = 0; rep < 2; rep++) {
        g_gpu->ops->to_device(g_gpu, gg, g0, (size_t)ng * sizeof(float));
        g_gpu->ops->linear_gelu_forward(g_gpu, ga, gpre, LOOM_DTYPE_BF16, gh, LOOM_DTYPE_F32, gw1,
                                        gb1, N, C, F);
        g_gpu->ops->linear_forward_typed(g_gpu, gy, LOOM_DTYPE_F32, ga, LOOM_DTYPE_BF16, gw2, gb2,
                                         N, F, C);
        g_gpu->ops->linear_gelu_backward(g_gpu, gdpre, LOOM_DTYPE_BF16, bias ? gg + oDB1 : NULL,
                                         gg + oDW2, bias ? gg + oDB2 : NULL, gdy, ga, gpre, gw2, N,
                                         F, C);
        g_gpu->ops->linear_backward_typed(g_gpu, gdh, LOOM_DTYPE_F32, gg, NULL, gdpre,
                                          LOOM_DTYPE_BF16, gh, LOOM_DTYPE_F32, gw1, N, C, F);
        g_gpu->ops->linear_backward_typed(g_gpu, NULL, LOOM_DTYPE_F32, NULL, gg + oDBA, gdpre,
                                          LOOM_DTYPE_BF16, gh, LOOM_DTYPE_F32, gw1, N, C, F);
        g_gpu->ops->linear_backward_typed(g_gpu, NULL, LOOM_DTYPE_F32, gg + oDWB, gg + oDBB,
                                          gdpre, LOOM_DTYPE_BF16, gh, LOOM_DTYPE_F32, gw1, N, C,
                                          F);
        run[rep][0] = dget16(g_gpu, gpre, N * F);
        run[rep][1] = dget16(g_gpu, ga, N * F);
        run[rep][2] = dget(g_gpu, gy, N * C);
        run[rep][3] = dget16(g_gpu, gdpre, N * F);
        run[rep][4] = dget(g_gpu, gdh, N * C);
        run[rep][5] = dget(g_gpu, gg, ng);
    }
    snprintf(what, sizeof what, "bf16 MLP pre %s", tag);
    compare(what, run[0][0], ref_pre, N * F, 1e-2);
    snprintf(what, sizeof what, "bf16 MLP act = gelu(pre) %s", tag);
    compare(what, run[0][1], ref_a, N * F, 1e-2);
    compare("bf16 MLP fc2 out (linear_forward_typed)", run[0][2], ref_y, N * C, 1e-2);
    snprintf(what, sizeof what, "bf16 MLP dpre %s", tag);
    compare(what, run[0][3], ref_dpre, N * F, 1e-2);
    compare("bf16 MLP dh (linear_backward_typed)", run[0][4], ref_dh, N * C, 1e-2);
    compare("bf16 MLP dw1 (accumulated)", run[0][5], ref_g, F * C, 1e-2);
    compare("bf16 MLP dw2 (accumulated)", run[0][5] + oDW2, ref_g + oDW2, F * C, 1e-2);
    if (bias) {
        compare("bf16 MLP db1 = sums of dpre (accumulated)", run[0][5] + oDB1, ref_g + oDB1, F,
                1e-2);
        compare("bf16 MLP db2 (accumulated)", run[0][5] + oDB2, ref_g + oDB2, C, 1e-2);
    }
    compare("linear_backward_typed bf16 dout: db alone", run[0][5] + oDBA, ref_g + oDBA, F, 1e-2);
    compare("linear_backward_typed bf16 dout: dw with db", run[0][5] + oDWB, ref_g + oDWB, F * C,
            1e-2);
    compare("linear_backward_typed bf16 dout: db with dw", run[0][5] + oDBB, ref_g + oDBB, F, 1e-2);
    const int64_t len[6] = {N * F, N * F, N * C, N * F, N * C, ng};
    int same = 1;
    for (int k = 0; k < 6; k++) same &= !memcmp(run[0][k], run[1][k], (size_t)len[k] * 4);
    printf("%s bf16 MLP %s: two runs bit for bit\n", same ? "ok  " : "FAIL", tag);
    same ? g_pass++ : g_fail++;
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);

    void *gb[] = {params, gh, gb1, gb2, gdy, gpre, ga, gdpre, gy, gdh, gg};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++)
        if (gb[i]) g_gpu->ops->free(g_gpu, gb[i]);
    void *cbufs[] = {ch, cw1, cw2, cb1, cb2, cdy, cpre, ca, cy, cdpre, cdh, cg, cscratch};
    for (size_t i = 0; i < sizeof cbufs / sizeof cbufs[0]; i++)
        if (cbufs[i]) cb->ops->free(cb, cbufs[i]);
    float *hb[] = {h, w1, b1, w2, b2, dy, g0, h_r, w1_r, w2_r, dy_r, ref_pre, ref_a, pre_r, a_r,
                   ref_dpre, dpre_r, ref_y, ref_dh, ref_g, params_h};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < 6; k++) free(run[rep][k]);
}

/* The typed linear ops with fp32 operands (LOOM_DTYPE_F32) on the GPU: with fp32 products
 * against the CPU's linear_forward / linear_backward (normwise 1e-5, out, dinp, dw and db onto
 * pre-filled values); activation_dtype is fp32 then, and with fp16 products too. */
static void run_typed_f32(int64_t N, int64_t C, int64_t OC, uint64_t seed) {
    float *x = hrand(N * C, seed + 1, 1.0f), *w = hrand(OC * C, seed + 2, 0.05f);
    float *b = hrand(OC, seed + 3, 0.1f), *dout = hrand(N * OC, seed + 4, 0.01f);
    float *g0 = hrand(OC * C + OC, seed + 5, 0.001f);
    float *res[2][3];
    struct loom_backend *bes[2] = {g_cpu, g_gpu};
    for (int k = 0; k < 2; k++) {
        struct loom_backend *be = bes[k];
        float *dx = dput(be, x, N * C), *dw = dput(be, w, OC * C), *db = dput(be, b, OC);
        float *dd = dput(be, dout, N * OC), *o = dput(be, NULL, N * OC);
        float *gi = dput(be, NULL, N * C), *g = dput(be, g0, OC * C + OC);
        be->ops->linear_forward_typed(be, o, LOOM_DTYPE_F32, dx, LOOM_DTYPE_F32, dw, db, N, C,
                                      OC);
        be->ops->linear_backward_typed(be, gi, LOOM_DTYPE_F32, g, g + OC * C, dd, LOOM_DTYPE_F32,
                                       dx, LOOM_DTYPE_F32, dw, N, C,
                                       OC);
        res[k][0] = dget(be, o, N * OC);
        res[k][1] = dget(be, gi, N * C);
        res[k][2] = dget(be, g, OC * C + OC);
        void *bufs[] = {dx, dw, db, dd, o, gi, g};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->ops->free(be, bufs[i]);
    }
    compare("linear_forward_typed fp32 against the CPU", res[1][0], res[0][0], N * OC, 1e-5);
    compare("linear_backward_typed fp32 dinp against the CPU", res[1][1], res[0][1], N * C, 1e-5);
    compare("linear_backward_typed fp32 dw against the CPU", res[1][2], res[0][2], OC * C, 1e-5);
    compare("linear_backward_typed fp32 db against the CPU", res[1][2] + OC * C, res[0][2] + OC * C,
            OC, 1e-5);
    enum loom_dtype d32 = g_gpu->ops->activation_dtype(g_gpu);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F16, NULL, 0);
    enum loom_dtype d16 = g_gpu->ops->activation_dtype(g_gpu);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    int ok = d32 == LOOM_DTYPE_F32 && d16 == LOOM_DTYPE_F32;
    printf("%s activation_dtype with fp32 products %s, with fp16 products %s\n", ok ? "ok  " : "FAIL",
           loom_dtype_name(d32), loom_dtype_name(d16));
    ok ? g_pass++ : g_fail++;
    float *hb[] = {x, w, b, dout, g0, res[0][0], res[0][1], res[0][2], res[1][0], res[1][1],
                   res[1][2]};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

/* Tensor-core attention (head size 64 or 128, no dropout) with 16-bit products of type dt
 * (LOOM_DTYPE_BF16 or LOOM_DTYPE_F16) against the CPU's fp32 attention on q, k, v and dout rounded
 * to dt: the probabilities and dS are rounded to dt inside (normwise 2e-2), the scores are not
 * (lse within 1e-4); two runs agree bit for bit. */
static void run_attention_typed(enum loom_dtype dt, int64_t B, int64_t T, int64_t NH,
                                int64_t NKV, int64_t HS, int causal, uint64_t seed) {
    const int f16 = dt == LOOM_DTYPE_F16;
    const char *ty = f16 ? "fp16" : "bf16";
    struct loom_attn a = {0};
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.HS = HS;
    a.causal = causal;
    a.scale = 1.0f / sqrtf((float)HS);
    a.NH_global = NH;
    int64_t nqkv = B * T * (NH + 2 * NKV) * HS, nout = B * T * NH * HS, nl = B * NH * T;
    float *qkv = hrand(nqkv, seed + 1, 1.0f), *dout = hrand(nout, seed + 2, 0.1f);
    float *qkv_r = rounded_as(f16, qkv, nqkv), *dout_r = rounded_as(f16, dout, nout);
    /* CPU reference on rounded inputs */
    float *cq = dput(g_cpu, qkv_r, nqkv), *cd = dput(g_cpu, dout_r, nout);
    float *co = dput(g_cpu, NULL, nout), *cl = dput(g_cpu, NULL, nl), *cg = dput(g_cpu, NULL, nqkv);
    g_cpu->ops->attention_forward(g_cpu, co, cl, cq, &a);
    g_cpu->ops->attention_backward(g_cpu, cg, cd, co, cl, cq, &a);
    float *ro = dget(g_cpu, co, nout), *rl = dget(g_cpu, cl, nl), *rg = dget(g_cpu, cg, nqkv);
    /* GPU on the unrounded inputs (the kernels round them) */
    g_gpu->ops->set_matmul_dtype(g_gpu, dt, NULL, 0);
    float *gq = dput(g_gpu, qkv, nqkv), *gd = dput(g_gpu, dout, nout);
    float *go = dput(g_gpu, NULL, nout), *gl = dput(g_gpu, NULL, nl), *gg = dput(g_gpu, NULL, nqkv);
    float *h1[3], *h2[3];
    for (int rep = 0; rep < 2; rep++) {
        g_gpu->ops->attention_forward(g_gpu, go, gl, gq, &a);
        /* dout is rounded on the GPU too, but D = rowsum(dout * out) uses fp32 dout: give it the
         * rounded one so that the reference sees the same D */
        g_gpu->ops->to_device(g_gpu, gd, dout_r, (size_t)nout * sizeof(float));
        g_gpu->ops->attention_backward(g_gpu, gg, gd, go, gl, gq, &a);
        float **h = rep ? h2 : h1;
        h[0] = dget(g_gpu, go, nout);
        h[1] = dget(g_gpu, gl, nl);
        h[2] = dget(g_gpu, gg, nqkv);
    }
    char what[160];
    const char *shape = causal ? "causal" : "full";
    snprintf(what, sizeof what, "attention %s out, B%lld T%lld NH%lld NKV%lld HS%lld %s", ty,
             (long long)B, (long long)T, (long long)NH, (long long)NKV, (long long)HS, shape);
    compare(what, h1[0], ro, nout, 2e-2);
    snprintf(what, sizeof what, "attention %s lse, T%lld %s", ty, (long long)T, shape);
    compare(what, h1[1], rl, nl, 1e-4);
    snprintf(what, sizeof what, "attention %s dqkv, T%lld %s", ty, (long long)T, shape);
    compare(what, h1[2], rg, nqkv, 2e-2);
    int same = !memcmp(h1[0], h2[0], (size_t)nout * 4) && !memcmp(h1[1], h2[1], (size_t)nl * 4) &&
               !memcmp(h1[2], h2[2], (size_t)nqkv * 4);
    printf("%s attention %s: two runs bit for bit\n", same ? "ok  " : "FAIL", ty);
    same ? g_pass++ : g_fail++;
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    void *gb[] = {gq, gd, go, gl, gg};
    for (size_t i = 0; i < 5; i++) g_gpu->ops->free(g_gpu, gb[i]);
    void *cb[] = {cq, cd, co, cl, cg};
    for (size_t i = 0; i < 5; i++) g_cpu->ops->free(g_cpu, cb[i]);
    float *hb[] = {qkv, dout, qkv_r, dout_r, ro, rl, rg, h1[0], h1[1], h1[2], h2[0], h2[1], h2[2]};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

static void run_attention(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int causal,
                          uint64_t seed) {
    run_attention_typed(LOOM_DTYPE_BF16, B, T, NH, NKV, HS, causal, seed);
}

/* host floats (bf16 values already) to a bf16 device array */
static void *dput16(struct loom_backend *be, const float *h, int64_t n) {
    uint16_t *u = malloc((size_t)(n > 0 ? n : 1) * 2);
    if (!u) exit(2);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, &h[i], 4);
        u[i] = (uint16_t)(v >> 16);
    }
    void *d = be->ops->malloc(be, (size_t)(n > 0 ? n : 1) * 2);
    if (!d) exit(2);
    if (n > 0) be->ops->to_device(be, d, u, (size_t)n * 2);
    free(u);
    return d;
}

static void exact(const char *what, const float *got, const float *want, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
    printf("%s %s: %lld of %lld differ\n", bad ? "FAIL" : "ok  ", what, (long long)bad,
           (long long)n);
    bad ? g_fail++ : g_pass++;
}

/* Attention with bf16 arrays (loom_attn.dt = BF16) against the same op on fp32 arrays holding the
 * same bf16 values, under bf16 products: the kernels round q, k, v and dout to bf16 in both, so
 * the bf16 out must be the fp32 out rounded, bit for bit, and the bf16 dqkv the fp32 dqkv
 * rounded, when the fp32 backward is given the rounded out (D = rowsum(dout * out) of the
 * stored values). lse is the same. Head sizes 64 and 128 take the tensor-core kernels; others
 * (and dropout) the fp32 kernels through fp32 copies, which must agree just as exactly. */
static void run_attention_bf16_arrays(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                      int causal, uint64_t seed) {
    struct loom_attn a = {0};
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.HS = HS;
    a.causal = causal;
    a.scale = 1.0f / sqrtf((float)HS);
    a.NH_global = NH;
    const int64_t nqkv = B * T * (NH + 2 * NKV) * HS, nout = B * T * NH * HS, nl = B * NH * T;
    float *qkv = hrand(nqkv, seed + 1, 1.0f), *dout = hrand(nout, seed + 2, 0.1f);
    float *qkv_r = rounded_as(0, qkv, nqkv), *dout_r = rounded_as(0, dout, nout);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0);
    /* fp32 arrays */
    float *q32 = dput(g_gpu, qkv_r, nqkv), *d32 = dput(g_gpu, dout_r, nout);
    float *o32 = dput(g_gpu, NULL, nout), *l32 = dput(g_gpu, NULL, nl);
    float *g32 = dput(g_gpu, NULL, nqkv);
    g_gpu->ops->attention_forward(g_gpu, o32, l32, q32, &a);
    float *ho32 = dget(g_gpu, o32, nout), *hl32 = dget(g_gpu, l32, nl);
    float *ho_r = rounded_as(0, ho32, nout);
    g_gpu->ops->to_device(g_gpu, o32, ho_r, (size_t)nout * sizeof(float));
    g_gpu->ops->attention_backward(g_gpu, g32, d32, o32, l32, q32, &a);
    float *hg32 = dget(g_gpu, g32, nqkv), *hg_r = rounded_as(0, hg32, nqkv);
    /* bf16 arrays */
    a.dt = LOOM_DTYPE_BF16;
    void *q16 = dput16(g_gpu, qkv_r, nqkv), *d16 = dput16(g_gpu, dout_r, nout);
    void *o16 = g_gpu->ops->malloc(g_gpu, (size_t)nout * 2);
    void *g16 = g_gpu->ops->malloc(g_gpu, (size_t)nqkv * 2);
    if (!o16 || !g16) exit(2);
    float *l16 = dput(g_gpu, NULL, nl);
    g_gpu->ops->attention_forward(g_gpu, o16, l16, q16, &a);
    g_gpu->ops->attention_backward(g_gpu, g16, d16, o16, l16, q16, &a);
    float *ho16 = dget16(g_gpu, o16, nout), *hl16 = dget(g_gpu, l16, nl);
    float *hg16 = dget16(g_gpu, g16, nqkv);
    char what[160];
    snprintf(what, sizeof what, "attention on bf16 arrays B%lld T%lld NH%lld NKV%lld HS%lld %s: out",
             (long long)B, (long long)T, (long long)NH, (long long)NKV, (long long)HS,
             causal ? "causal" : "full");
    exact(what, ho16, ho_r, nout);
    exact("  lse", hl16, hl32, nl);
    exact("  dqkv", hg16, hg_r, nqkv);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    void *gb[] = {q32, d32, o32, l32, g32, q16, d16, o16, g16, l16};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) g_gpu->ops->free(g_gpu, gb[i]);
    float *hb[] = {qkv, dout, qkv_r, dout_r, ho32, hl32, ho_r, hg32, hg_r, ho16, hl16, hg16};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

/* gelu_forward_typed on bf16 arrays: the fp32 op's values on the same (bf16) inputs, rounded,
 * bit for bit; n = 8 k + 5 and an odd offset take the vector and the one-at-a-time kernels. */
static void run_gelu_bf16(int64_t n, int64_t off, uint64_t seed) {
    float *x0 = hrand(n, seed, 2.0f), *x = rounded_as(0, x0, n);
    float *d32 = dput(g_gpu, x, n), *o32 = dput(g_gpu, NULL, n);
    g_gpu->ops->gelu_forward(g_gpu, o32, d32, n);
    float *ref = dget(g_gpu, o32, n), *ref_r = rounded_as(0, ref, n);
    float *xp = malloc((size_t)(n + off) * sizeof(float));
    if (!xp) exit(2);
    for (int64_t i = 0; i < off; i++) xp[i] = 0.0f;
    memcpy(xp + off, x, (size_t)n * sizeof(float));
    char *in16 = dput16(g_gpu, xp, n + off), *out16 = dput16(g_gpu, xp, n + off);
    g_gpu->ops->gelu_forward_typed(g_gpu, out16 + 2 * off, in16 + 2 * off, LOOM_DTYPE_BF16, n);
    float *got = dget16(g_gpu, out16, n + off);
    char what[96];
    snprintf(what, sizeof what, "gelu_forward_typed bf16, n %lld at element offset %lld",
             (long long)n, (long long)off);
    exact(what, got + off, ref_r, n);
    void *gb[] = {d32, o32, in16, out16};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) g_gpu->ops->free(g_gpu, gb[i]);
    float *hb[] = {x0, x, ref, ref_r, xp, got};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

/* linear_forward_typed writing bf16 (with the bias) and linear_backward_typed writing a bf16 dinp
 * from a bf16 input, against the CPU's fp32 ops on the rounded inputs (normwise 1e-2: the output
 * and the bias rounded to bf16); db sums the bf16 dout as stored. */
static void run_linear_bf16_arrays(int64_t N, int64_t C, int64_t OC, uint64_t seed) {
    float *x0 = hrand(N * C, seed + 1, 1.0f), *dy0 = hrand(N * OC, seed + 4, 0.01f);
    float *x = rounded_as(0, x0, N * C), *dy = rounded_as(0, dy0, N * OC);
    float *w = hrand(OC * C, seed + 2, 0.05f), *b = hrand(OC, seed + 3, 0.1f);
    float *w_r = rounded_as(0, w, OC * C);
    float *ref_out = malloc((size_t)(N * OC) * 4), *ref_dx = malloc((size_t)(N * C) * 4);
    float *ref_dw = calloc((size_t)(OC * C), 4), *zero = calloc((size_t)(OC * C), 4);
    if (!ref_out || !ref_dx || !ref_dw || !zero) exit(2);
    cpu_linear(ref_out, ref_dx, ref_dw, x, w_r, b, dy, zero, N, C, OC);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0);
    void *x16 = dput16(g_gpu, x, N * C), *dy16 = dput16(g_gpu, dy, N * OC);
    float *wd = dput(g_gpu, w, OC * C), *bd = dput(g_gpu, b, OC);
    void *o16 = g_gpu->ops->malloc(g_gpu, (size_t)(N * OC) * 2);
    void *dx16 = g_gpu->ops->malloc(g_gpu, (size_t)(N * C) * 2);
    float *dw = dput(g_gpu, zero, OC * C), *db = dput(g_gpu, zero, OC);
    const enum loom_dtype bf = LOOM_DTYPE_BF16;
    g_gpu->ops->linear_forward_typed(g_gpu, o16, bf, x16, bf, wd, bd, N, C, OC);
    g_gpu->ops->linear_backward_typed(g_gpu, dx16, bf, dw, db, dy16, bf, x16, bf, wd, N, C, OC);
    float *h;
    char what[128];
    snprintf(what, sizeof what, "bf16 arrays %lldx%lldx%lld: linear_forward_typed out", (long long)N,
             (long long)C, (long long)OC);
    compare(what, h = dget16(g_gpu, o16, N * OC), ref_out, N * OC, 1e-2);
    free(h);
    compare("  linear_backward_typed dinp", h = dget16(g_gpu, dx16, N * C), ref_dx, N * C, 1e-2);
    free(h);
    compare("  linear_backward_typed dw", h = dget(g_gpu, dw, OC * C), ref_dw, OC * C, 1e-4);
    free(h);
    double *sum = calloc((size_t)OC, sizeof(double));
    float *ref_db = malloc((size_t)OC * 4);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < OC; k++) sum[k] += dy[n * OC + k];
    for (int64_t k = 0; k < OC; k++) ref_db[k] = (float)sum[k];
    compare("  linear_backward_typed db", h = dget(g_gpu, db, OC), ref_db, OC, 1e-5);
    free(h);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    void *gb[] = {x16, dy16, wd, bd, o16, dx16, dw, db};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) g_gpu->ops->free(g_gpu, gb[i]);
    float *hb[] = {x0, dy0, x, w, b, dy, w_r, ref_out, ref_dx, ref_dw, zero, ref_db};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
    free(sum);
}

int main(void) {
    if (loom_backend_create(&g_gpu, "cuda", 0) != LOOM_OK) {
        const char *req = getenv("LOOM_REQUIRE_CUDA");
        loom_print_error();
        if (req && req[0] == '1') return 1;
        puts("skipped: no CUDA device");
        return 77;
    }
    if (loom_backend_create(&g_cpu, "cpu", 0) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    struct loom_mem_stats m0, m1;
    g_gpu->ops->memory_stats(g_gpu, &m0);
    run_case(64, 96, 80, 1, 1, 100);
    run_case(33, 70, 50, 1, 0, 200);  /* odd rows: unaligned bf16 operands */
    run_case(37, 72, 13, 0, 1, 300);
    run_case(2048, 768, 2304, 1, 1, 400); /* GPT-2 qkv */
    run_case(2048, 3072, 768, 1, 0, 500); /* GPT-2 fc2 */
    run_linear_gelu(64, 96, 384, 1, 1, 1500);
    run_linear_gelu(37, 72, 50, 1, 0, 1600);     /* F % 8 != 0: without the epilogues */
    run_linear_gelu(64, 96, 384, 0, 0, 1700);
    run_linear_gelu(2048, 768, 3072, 1, 1, 1800); /* GPT-2 MLP */
    run_mlp_act16(64, 96, 384, 1, 1, 1900);
    run_mlp_act16(37, 72, 50, 1, 0, 2000);     /* F % 8 != 0: without the epilogues */
    run_mlp_act16(64, 96, 384, 0, 0, 2100);
    run_mlp_act16(2048, 768, 3072, 1, 1, 2200); /* GPT-2 MLP */
    run_typed_f32(33, 70, 50, 2300);
    run_typed_f32(256, 768, 3072, 2400);
    g_f16 = 1; /* the same products in fp16 */
    run_case(64, 96, 80, 1, 1, 900);
    run_case(2048, 768, 2304, 1, 0, 1000);
    g_f16 = 0;
    run_attention(2, 200, 4, 2, 64, 1, 600);    /* grouped queries, partial last tile */
    run_attention(1, 256, 6, 6, 64, 0, 700);    /* no causal mask */
    run_attention(1, 77, 4, 1, 64, 0, 1100);    /* less than a tile, one kv head for four */
    run_attention(2, 1024, 12, 12, 64, 1, 800); /* GPT-2 124M shapes */
    run_attention(2, 200, 4, 2, 128, 1, 1200);  /* head size 128: grouped, partial last tile */
    run_attention(1, 300, 4, 4, 128, 0, 1300);  /* head size 128, no causal mask */
    run_attention(1, 1024, 16, 16, 128, 1, 1400); /* head size 128 at the 1.3B model's heads */
    run_attention_bf16_arrays(2, 200, 4, 2, 64, 1, 3000);
    run_attention_bf16_arrays(1, 300, 4, 4, 128, 0, 3100);
    run_attention_bf16_arrays(2, 1024, 12, 12, 64, 1, 3200); /* GPT-2 124M shapes */
    run_attention_bf16_arrays(1, 100, 4, 2, 32, 1, 3300);   /* fp32 kernels through copies */
    run_gelu_bf16(2048 * 8, 0, 3700);
    run_gelu_bf16(8 * 101 + 5, 1, 3800);
    run_linear_bf16_arrays(64, 96, 80, 3400);
    run_linear_bf16_arrays(2048, 768, 2304, 3500); /* GPT-2 qkv */
    run_linear_bf16_arrays(37, 72, 50, 3600);      /* unaligned rows */
    /* the same kernels in fp16 (fp16 products) */
    run_attention_typed(LOOM_DTYPE_F16, 2, 200, 4, 2, 64, 1, 2500);
    run_attention_typed(LOOM_DTYPE_F16, 1, 77, 4, 1, 64, 0, 2600);
    run_attention_typed(LOOM_DTYPE_F16, 2, 1024, 12, 12, 64, 1, 2700); /* GPT-2 124M shapes */
    run_attention_typed(LOOM_DTYPE_F16, 2, 200, 4, 2, 128, 1, 2800);
    run_attention_typed(LOOM_DTYPE_F16, 1, 300, 4, 4, 128, 0, 2900);
    g_gpu->ops->memory_stats(g_gpu, &m1);
    int ok = m1.peak >= m0.peak && m1.in_use >= m0.in_use && m1.allocations > m0.allocations;
    printf("%s memory_stats: in use %zu -> %zu bytes, peak %zu bytes, %lld allocations\n",
           ok ? "ok  " : "FAIL", m0.in_use, m1.in_use, m1.peak, (long long)m1.allocations);
    ok ? g_pass++ : g_fail++;
    printf("%d passed, %d failed\n", g_pass, g_fail);
    loom_backend_destroy(g_gpu);
    loom_backend_destroy(g_cpu);
    return g_fail ? 1 : 0;
}

#else
int main(void) {
    puts("skipped: built without CUDA");
    return 77;
}
#endif
