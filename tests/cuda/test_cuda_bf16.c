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
 * run_mlp_act16), the typed linear ops with fp32 operands against the CPU (see
 * run_typed_f32), and SwiGLU and rotary embeddings on bf16 arrays against their fp32 kernels on
 * the same values (see run_swiglu_bf16, run_rope_bf16). The query and key
 * head norms (head_norm_forward / _backward) on fp32 and bf16 qkv against the CPU backend's ops
 * on the same values, and two runs for the same bits (see run_head_norm).
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

#define CT_SEED 77 /* the stream of the random inputs */
#include "cuda_test_util.h"

static struct loom_backend *g_cpu, *g_gpu;

static int g_f16; /* run_case rounds to fp16 instead of bf16 */

/* CPU fp32 linear forward/backward on the given host inputs. */
/* the GELU's form of the GELU cases (the erf form's products take no epilogue) */
static enum loom_gelu g_gelu = LOOM_GELU_TANH;

static void cpu_linear(float *out, float *dinp, float *dw, const float *inp, const float *w,
                       const float *b, const float *dout, const float *dw0, int64_t N, int64_t C,
                       int64_t OC) {
    struct loom_backend *be = g_cpu;
    float *di = ct_dputf(be, inp, N * C), *dwt = ct_dputf(be, w, OC * C),
          *db = b ? ct_dputf(be, b, OC) : NULL;
    float *dout_d = ct_dputf(be, dout, N * OC), *o = ct_dputf(be, NULL, N * OC);
    float *gi = ct_dputf(be, NULL, N * C), *gw = ct_dputf(be, dw0, OC * C);
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
    float *inp = ct_randn(N * C, seed + 1, 1.0f, 0.0f),
          *w = ct_randn(OC * C, seed + 2, 0.05f, 0.0f);
    float *b = bias ? ct_randn(OC, seed + 3, 0.1f, 0.0f) : NULL,
          *dout = ct_randn(N * OC, seed + 4, 0.01f, 0.0f);
    float *dw0 = ct_randn(OC * C, seed + 5, 0.001f, 0.0f),
          *db0 = ct_randn(OC, seed + 6, 0.001f, 0.0f);
    float *inp_r = ct_rounded(inp, N * C, g_f16), *w_r = ct_rounded(w, OC * C, g_f16),
          *dout_r = ct_rounded(dout, N * OC, g_f16);
    float *out_ref = malloc((size_t)(N * OC) * sizeof(float));
    float *dinp_ref = malloc((size_t)(N * C) * sizeof(float));
    float *dw_ref = malloc((size_t)(OC * C) * sizeof(float));
    cpu_linear(out_ref, dinp_ref, dw_ref, inp_r, w_r, b, dout_r, dw0, N, C, OC);

    /* the GPU's parameters: [16 floats | w | 16 floats], registered or not */
    int64_t np = OC * C + 32;
    float *params_h = calloc((size_t)np, sizeof(float));
    memcpy(params_h + 16, w, (size_t)(OC * C) * sizeof(float));
    float *params = ct_dputf(g_gpu, params_h, np);
    float *wd = params + 16;
    if (g_gpu->ops->set_matmul_dtype(g_gpu, g_f16 ? LOOM_DTYPE_F16 : LOOM_DTYPE_BF16,
                                     registered ? params : NULL,
                                     registered ? np : 0) != LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    float *di = ct_dputf(g_gpu, inp, N * C), *db = bias ? ct_dputf(g_gpu, b, OC) : NULL;
    float *dd = ct_dputf(g_gpu, dout, N * OC), *o = ct_dputf(g_gpu, NULL, N * OC);
    float *gi = ct_dputf(g_gpu, NULL, N * C), *gw = ct_dputf(g_gpu, dw0, OC * C),
          *gb = ct_dputf(g_gpu, db0, OC);
    g_gpu->ops->linear_forward(g_gpu, o, di, wd, db, N, C, OC);
    g_gpu->ops->linear_backward(g_gpu, gi, gw, gb, dd, di, wd, N, C, OC);
    float *h;
    snprintf(what, sizeof what, "forward  %lldx%lldx%lld%s, %s", (long long)N, (long long)C,
             (long long)OC, bias ? " +bias" : "", tag);
    ct_check_norm(what, h = ct_dgetf(g_gpu, o, N * OC), out_ref, N * OC, 1e-4);
    free(h);
    snprintf(what, sizeof what, "backward dinp %lldx%lldx%lld, %s", (long long)N, (long long)C,
             (long long)OC, tag);
    ct_check_norm(what, h = ct_dgetf(g_gpu, gi, N * C), dinp_ref, N * C, 1e-4);
    free(h);
    snprintf(what, sizeof what, "backward dw (accumulated) %lldx%lldx%lld, %s", (long long)N,
             (long long)C, (long long)OC, tag);
    ct_check_norm(what, h = ct_dgetf(g_gpu, gw, OC * C), dw_ref, OC * C, 1e-4);
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
    h = ct_dgetf(g_gpu, gb, OC);
    int from_r = ct_norm_err(h, db_ref_r, OC) <= ct_norm_err(h, db_ref, OC);
    ct_check_norm(from_r ? "backward db, sums of the rounded gradient (epilogue)"
                         : "backward db, sums of the fp32 gradient",
                  h, from_r ? db_ref_r : db_ref, OC, 1e-5);
    free(h);
    free(dbs_r);
    free(db_ref_r);

    /* the weights change: through to_device, then scale; the products follow */
    float *w2 = ct_randn(OC * C, seed + 7, 0.05f, 0.0f);
    g_gpu->ops->to_device(g_gpu, wd, w2, (size_t)(OC * C) * sizeof(float));
    g_gpu->ops->scale(g_gpu, wd, 0.5f, OC * C);
    for (int64_t i = 0; i < OC * C; i++) w2[i] *= 0.5f;
    float *w2_r = ct_rounded(w2, OC * C, g_f16);
    cpu_linear(out_ref, dinp_ref, dw_ref, inp_r, w2_r, b, dout_r, dw0, N, C, OC);
    g_gpu->ops->linear_forward(g_gpu, o, di, wd, db, N, C, OC);
    ct_check_norm("forward after the weights changed (to_device, scale)",
                  h = ct_dgetf(g_gpu, o, N * OC), out_ref, N * OC, 1e-4);
    free(h);
    /* bf16 rounding against the exact fp32 product */
    cpu_linear(out_ref, dinp_ref, dw_ref, inp, w2, b, dout, dw0, N, C, OC);
    ct_check_norm(g_f16 ? "forward against unrounded fp32 (fp16 rounding only)"
                        : "forward against unrounded fp32 (bf16 rounding only)",
                  h = ct_dgetf(g_gpu, o, N * OC), out_ref, N * OC, 2e-2);
    free(h);
    /* back to exact fp32 */
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    g_gpu->ops->linear_forward(g_gpu, o, di, wd, db, N, C, OC);
    ct_check_norm("forward after switching back to fp32", h = ct_dgetf(g_gpu, o, N * OC), out_ref,
                  N * OC, 1e-5);
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
    snprintf(tag, sizeof tag, "%lldx%lldx%lld%s%s, %s", (long long)N, (long long)C, (long long)F,
             bias ? " +bias" : "", g_gelu == LOOM_GELU_ERF ? " erf" : "",
             registered ? "registered weights" : "weights outside the range");
    float *h = ct_randn(N * C, seed + 1, 1.0f, 0.0f), *w1 = ct_randn(F * C, seed + 2, 0.05f, 0.0f);
    float *b1 = bias ? ct_randn(F, seed + 3, 0.1f, 0.0f) : NULL,
          *w2 = ct_randn(C * F, seed + 4, 0.05f, 0.0f);
    float *dy = ct_randn(N * C, seed + 5, 0.01f, 0.0f);
    const int64_t ng = F * C + F + C; /* [dw2 | db1 | db2], pre-filled: they accumulate */
    float *g0 = ct_randn(ng, seed + 6, 0.001f, 0.0f);
    float *h_r = ct_rounded(h, N * C, 0), *w1_r = ct_rounded(w1, F * C, 0),
          *w2_r = ct_rounded(w2, C * F, 0);
    float *dy_r = ct_rounded(dy, N * C, 0);

    /* CPU reference on the rounded inputs; dw2 from the rounded activation */
    struct loom_backend *cb = g_cpu;
    float *ch = ct_dputf(cb, h_r, N * C), *cw1 = ct_dputf(cb, w1_r, F * C);
    float *cb1 = bias ? ct_dputf(cb, b1, F) : NULL, *cw2 = ct_dputf(cb, w2_r, C * F);
    float *cdy = ct_dputf(cb, dy_r, N * C), *cpre = ct_dputf(cb, NULL, N * F),
          *ca = ct_dputf(cb, NULL, N * F);
    float *cdpre = ct_dputf(cb, NULL, N * F), *cg = ct_dputf(cb, g0, ng);
    cb->ops->linear_gelu_forward(cb, g_gelu, ca, cpre, LOOM_DTYPE_F32, ch, LOOM_DTYPE_F32, cw1, cb1,
                                 N, C, F);
    float *ref_a = ct_dgetf(cb, ca, N * F), *ref_pre = ct_dgetf(cb, cpre, N * F);
    float *a_r = ct_rounded(ref_a, N * F, 0);
    cb->ops->to_device(cb, ca, a_r, (size_t)(N * F) * sizeof(float));
    cb->ops->linear_gelu_backward(cb, g_gelu, cdpre, LOOM_DTYPE_F32, bias ? cg + F * C : NULL, cg,
                                  bias ? cg + F * C + F : NULL, cdy, LOOM_DTYPE_F32, ca, cpre, cw2,
                                  N, F, C);
    float *ref_dpre = ct_dgetf(cb, cdpre, N * F), *ref_g = ct_dgetf(cb, cg, ng);

    /* GPU: parameters [16 floats | w1 | w2 | 16 floats], registered or not */
    int64_t np = 2 * F * C + 32;
    float *params_h = calloc((size_t)np, sizeof(float));
    memcpy(params_h + 16, w1, (size_t)(F * C) * sizeof(float));
    memcpy(params_h + 16 + F * C, w2, (size_t)(C * F) * sizeof(float));
    float *params = ct_dputf(g_gpu, params_h, np);
    if (g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, registered ? params : NULL,
                                     registered ? np : 0) != LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    float *gw1 = params + 16, *gw2 = params + 16 + F * C;
    float *gh = ct_dputf(g_gpu, h, N * C), *gb1 = bias ? ct_dputf(g_gpu, b1, F) : NULL;
    float *gdy = ct_dputf(g_gpu, dy, N * C), *gpre = ct_dputf(g_gpu, NULL, N * F);
    float *ga = ct_dputf(g_gpu, NULL, N * F), *gdpre = ct_dputf(g_gpu, NULL, N * F);
    float *gg = ct_dputf(g_gpu, NULL, ng);
    float *run[2][4];
    for (int rep = 0; rep < 2; rep++) {
        g_gpu->ops->to_device(g_gpu, gg, g0, (size_t)ng * sizeof(float));
        g_gpu->ops->linear_gelu_forward(g_gpu, g_gelu, ga, gpre, LOOM_DTYPE_F32, gh, LOOM_DTYPE_F32,
                                        gw1, gb1, N, C, F);
        g_gpu->ops->linear_gelu_backward(g_gpu, g_gelu, gdpre, LOOM_DTYPE_F32,
                                         bias ? gg + F * C : NULL, gg, bias ? gg + F * C + F : NULL,
                                         gdy, LOOM_DTYPE_F32, ga, gpre, gw2, N, F, C);
        run[rep][0] = ct_dgetf(g_gpu, gpre, N * F);
        run[rep][1] = ct_dgetf(g_gpu, ga, N * F);
        run[rep][2] = ct_dgetf(g_gpu, gdpre, N * F);
        run[rep][3] = ct_dgetf(g_gpu, gg, ng);
    }
    snprintf(what, sizeof what, "linear_gelu forward pre %s", tag);
    ct_check_norm(what, run[0][0], ref_pre, N * F, 1e-4);
    snprintf(what, sizeof what, "linear_gelu forward out = gelu(pre) %s", tag);
    ct_check_norm(what, run[0][1], ref_a, N * F, 1e-2);
    snprintf(what, sizeof what, "linear_gelu backward dpre %s", tag);
    ct_check_norm(what, run[0][2], ref_dpre, N * F, 1e-2);
    ct_check_norm("linear_gelu backward dw2 (accumulated)", run[0][3], ref_g, F * C, 1e-2);
    if (bias) {
        ct_check_norm("linear_gelu backward db1 = sums of dpre (accumulated)", run[0][3] + F * C,
                      ref_g + F * C, F, 1e-2);
        ct_check_norm("linear_gelu backward db2 (accumulated)", run[0][3] + F * C + F,
                      ref_g + F * C + F, C, 1e-2);
    }
    int same = !memcmp(run[0][0], run[1][0], (size_t)(N * F) * 4) &&
               !memcmp(run[0][1], run[1][1], (size_t)(N * F) * 4) &&
               !memcmp(run[0][2], run[1][2], (size_t)(N * F) * 4) &&
               !memcmp(run[0][3], run[1][3], (size_t)ng * 4);
    ct_check_true("linear_gelu bf16: two runs bit for bit", same);
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
    snprintf(tag, sizeof tag, "%lldx%lldx%lld%s%s, %s", (long long)N, (long long)C, (long long)F,
             bias ? " +bias" : "", g_gelu == LOOM_GELU_ERF ? " erf" : "",
             registered ? "registered weights" : "weights outside");
    float *h = ct_randn(N * C, seed + 1, 1.0f, 0.0f), *w1 = ct_randn(F * C, seed + 2, 0.05f, 0.0f);
    float *b1 = bias ? ct_randn(F, seed + 3, 0.1f, 0.0f) : NULL,
          *w2 = ct_randn(C * F, seed + 4, 0.05f, 0.0f);
    float *b2 = bias ? ct_randn(C, seed + 7, 0.1f, 0.0f) : NULL,
          *dy = ct_randn(N * C, seed + 5, 0.01f, 0.0f);
    /* [dw1 | dw2 | db1 | db2 | dbA | dwB | dbB], pre-filled: dbA from fc1's typed backward
     * with the bias gradient alone, dwB and dbB from it with both */
    const int64_t oDW2 = F * C, oDB1 = 2 * F * C, oDB2 = oDB1 + F, oDBA = oDB2 + C;
    const int64_t oDWB = oDBA + F, oDBB = oDWB + F * C, ng = oDBB + F;
    float *g0 = ct_randn(ng, seed + 6, 0.001f, 0.0f);
    float *h_r = ct_rounded(h, N * C, 0), *w1_r = ct_rounded(w1, F * C, 0),
          *w2_r = ct_rounded(w2, C * F, 0);
    float *dy_r = ct_rounded(dy, N * C, 0);

    /* CPU reference, stage by stage on rounded values */
    struct loom_backend *cb = g_cpu;
    float *ch = ct_dputf(cb, h_r, N * C), *cw1 = ct_dputf(cb, w1_r, F * C),
          *cw2 = ct_dputf(cb, w2_r, C * F);
    float *cb1 = bias ? ct_dputf(cb, b1, F) : NULL, *cb2 = bias ? ct_dputf(cb, b2, C) : NULL;
    float *cdy = ct_dputf(cb, dy_r, N * C), *cpre = ct_dputf(cb, NULL, N * F),
          *ca = ct_dputf(cb, NULL, N * F);
    float *cy = ct_dputf(cb, NULL, N * C), *cdpre = ct_dputf(cb, NULL, N * F),
          *cdh = ct_dputf(cb, NULL, N * C);
    float *cg = ct_dputf(cb, g0, ng), *cscratch = ct_dputf(cb, NULL, F * C);
    cb->ops->linear_gelu_forward(cb, g_gelu, ca, cpre, LOOM_DTYPE_F32, ch, LOOM_DTYPE_F32, cw1, cb1,
                                 N, C, F);
    float *ref_pre = ct_dgetf(cb, cpre, N * F), *ref_a = ct_dgetf(cb, ca, N * F);
    float *pre_r = ct_rounded(ref_pre, N * F, 0), *a_r = ct_rounded(ref_a, N * F, 0);
    cb->ops->to_device(cb, cpre, pre_r, (size_t)(N * F) * sizeof(float));
    cb->ops->to_device(cb, ca, a_r, (size_t)(N * F) * sizeof(float));
    cb->ops->linear_forward(cb, cy, ca, cw2, cb2, N, F, C);
    cb->ops->linear_gelu_backward(cb, g_gelu, cdpre, LOOM_DTYPE_F32, bias ? cg + oDB1 : NULL,
                                  cg + oDW2, bias ? cg + oDB2 : NULL, cdy, LOOM_DTYPE_F32, ca, cpre,
                                  cw2, N, F, C);
    float *ref_dpre = ct_dgetf(cb, cdpre, N * F), *dpre_r = ct_rounded(ref_dpre, N * F, 0);
    cb->ops->to_device(cb, cdpre, dpre_r, (size_t)(N * F) * sizeof(float));
    cb->ops->linear_backward(cb, cdh, cg, NULL, cdpre, ch, cw1, N, C, F);
    cb->ops->linear_backward(cb, NULL, cscratch, cg + oDBA, cdpre, ch, cw1, N, C, F);
    cb->ops->linear_backward(cb, NULL, cg + oDWB, cg + oDBB, cdpre, ch, cw1, N, C, F);
    float *ref_y = ct_dgetf(cb, cy, N * C), *ref_dh = ct_dgetf(cb, cdh, N * C),
          *ref_g = ct_dgetf(cb, cg, ng);

    /* GPU: parameters [16 floats | w1 | w2 | 16 floats], registered or not */
    int64_t np = 2 * F * C + 32;
    float *params_h = calloc((size_t)np, sizeof(float));
    memcpy(params_h + 16, w1, (size_t)(F * C) * sizeof(float));
    memcpy(params_h + 16 + F * C, w2, (size_t)(C * F) * sizeof(float));
    float *params = ct_dputf(g_gpu, params_h, np);
    if (g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, registered ? params : NULL,
                                     registered ? np : 0) != LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    const enum loom_dtype dt = g_gpu->ops->activation_dtype(g_gpu);
    snprintf(what, sizeof what, "activation_dtype with bf16 products: %s", loom_dtype_name(dt));
    ct_check_true(what, dt == LOOM_DTYPE_BF16);
    float *gw1 = params + 16, *gw2 = params + 16 + F * C;
    float *gh = ct_dputf(g_gpu, h, N * C), *gb1 = bias ? ct_dputf(g_gpu, b1, F) : NULL;
    float *gb2 = bias ? ct_dputf(g_gpu, b2, C) : NULL, *gdy = ct_dputf(g_gpu, dy, N * C);
    void *gpre = ct_dputf(g_gpu, NULL, N * F / 2 + 1), *ga = ct_dputf(g_gpu, NULL, N * F / 2 + 1);
    void *gdpre = ct_dputf(g_gpu, NULL, N * F / 2 + 1);
    float *gy = ct_dputf(g_gpu, NULL, N * C), *gdh = ct_dputf(g_gpu, NULL, N * C);
    float *gg = ct_dputf(g_gpu, NULL, ng);
    float *run[2][6];
    for (int rep = 0; rep < 2; rep++) {
        g_gpu->ops->to_device(g_gpu, gg, g0, (size_t)ng * sizeof(float));
        g_gpu->ops->linear_gelu_forward(g_gpu, g_gelu, ga, gpre, LOOM_DTYPE_BF16, gh,
                                        LOOM_DTYPE_F32, gw1, gb1, N, C, F);
        g_gpu->ops->linear_forward_typed(g_gpu, gy, LOOM_DTYPE_F32, ga, LOOM_DTYPE_BF16, gw2, gb2,
                                         N, F, C);
        g_gpu->ops->linear_gelu_backward(
            g_gpu, g_gelu, gdpre, LOOM_DTYPE_BF16, bias ? gg + oDB1 : NULL, gg + oDW2,
            bias ? gg + oDB2 : NULL, gdy, LOOM_DTYPE_F32, ga, gpre, gw2, N, F, C);
        g_gpu->ops->linear_backward_typed(g_gpu, gdh, LOOM_DTYPE_F32, gg, NULL, gdpre,
                                          LOOM_DTYPE_BF16, gh, LOOM_DTYPE_F32, gw1, N, C, F);
        g_gpu->ops->linear_backward_typed(g_gpu, NULL, LOOM_DTYPE_F32, NULL, gg + oDBA, gdpre,
                                          LOOM_DTYPE_BF16, gh, LOOM_DTYPE_F32, gw1, N, C, F);
        g_gpu->ops->linear_backward_typed(g_gpu, NULL, LOOM_DTYPE_F32, gg + oDWB, gg + oDBB,
                                          gdpre, LOOM_DTYPE_BF16, gh, LOOM_DTYPE_F32, gw1, N, C,
                                          F);
        run[rep][0] = ct_dget16(g_gpu, gpre, N * F, 0);
        run[rep][1] = ct_dget16(g_gpu, ga, N * F, 0);
        run[rep][2] = ct_dgetf(g_gpu, gy, N * C);
        run[rep][3] = ct_dget16(g_gpu, gdpre, N * F, 0);
        run[rep][4] = ct_dgetf(g_gpu, gdh, N * C);
        run[rep][5] = ct_dgetf(g_gpu, gg, ng);
    }
    snprintf(what, sizeof what, "bf16 MLP pre %s", tag);
    ct_check_norm(what, run[0][0], ref_pre, N * F, 1e-2);
    snprintf(what, sizeof what, "bf16 MLP act = gelu(pre) %s", tag);
    ct_check_norm(what, run[0][1], ref_a, N * F, 1e-2);
    ct_check_norm("bf16 MLP fc2 out (linear_forward_typed)", run[0][2], ref_y, N * C, 1e-2);
    snprintf(what, sizeof what, "bf16 MLP dpre %s", tag);
    ct_check_norm(what, run[0][3], ref_dpre, N * F, 1e-2);
    ct_check_norm("bf16 MLP dh (linear_backward_typed)", run[0][4], ref_dh, N * C, 1e-2);
    ct_check_norm("bf16 MLP dw1 (accumulated)", run[0][5], ref_g, F * C, 1e-2);
    ct_check_norm("bf16 MLP dw2 (accumulated)", run[0][5] + oDW2, ref_g + oDW2, F * C, 1e-2);
    if (bias) {
        ct_check_norm("bf16 MLP db1 = sums of dpre (accumulated)", run[0][5] + oDB1, ref_g + oDB1,
                      F, 1e-2);
        ct_check_norm("bf16 MLP db2 (accumulated)", run[0][5] + oDB2, ref_g + oDB2, C, 1e-2);
    }
    ct_check_norm("linear_backward_typed bf16 dout: db alone", run[0][5] + oDBA, ref_g + oDBA, F,
                  1e-2);
    ct_check_norm("linear_backward_typed bf16 dout: dw with db", run[0][5] + oDWB, ref_g + oDWB,
                  F * C, 1e-2);
    ct_check_norm("linear_backward_typed bf16 dout: db with dw", run[0][5] + oDBB, ref_g + oDBB, F,
                  1e-2);
    if (bias) {
        /* db1: the sums of the stored dpre's columns, onto its pre-filled values. The tensor
         * cores sum them in fp32 (dpre^T . 1), in an order of their own: any order of fp32
         * additions is within N 2^-24 of the sum of the magnitudes added (the textbook bound of
         * recursive summation), so each column's error is measured against that sum. */
        double worst = 0.0;
        for (int64_t f = 0; f < F; f++) {
            double acc = g0[oDB1 + f], mag = fabs(g0[oDB1 + f]);
            for (int64_t n = 0; n < N; n++) {
                acc += run[0][3][n * F + f];
                mag += fabs(run[0][3][n * F + f]);
            }
            const double e = fabs((double)run[0][5][oDB1 + f] - acc) / (mag > 0 ? mag : 1.0);
            worst = e > worst || e != e ? e : worst;
        }
        char name[160];
        snprintf(name, sizeof name,
                 "bf16 MLP db1 = column sums of the stored dpre (error / sum of |terms|, bound "
                 "N 2^-24 = %.2g)",
                 (double)(N + 1) * 0x1p-24);
        ct_check(name, worst, (double)(N + 1) * 0x1p-24);
    }
    const int64_t len[6] = {N * F, N * F, N * C, N * F, N * C, ng};
    int same = 1;
    for (int k = 0; k < 6; k++) same &= !memcmp(run[0][k], run[1][k], (size_t)len[k] * 4);
    snprintf(what, sizeof what, "bf16 MLP %s: two runs bit for bit", tag);
    ct_check_true(what, same);
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
    float *x = ct_randn(N * C, seed + 1, 1.0f, 0.0f), *w = ct_randn(OC * C, seed + 2, 0.05f, 0.0f);
    float *b = ct_randn(OC, seed + 3, 0.1f, 0.0f), *dout = ct_randn(N * OC, seed + 4, 0.01f, 0.0f);
    float *g0 = ct_randn(OC * C + OC, seed + 5, 0.001f, 0.0f);
    float *res[2][3];
    struct loom_backend *bes[2] = {g_cpu, g_gpu};
    for (int k = 0; k < 2; k++) {
        struct loom_backend *be = bes[k];
        float *dx = ct_dputf(be, x, N * C), *dw = ct_dputf(be, w, OC * C),
              *db = ct_dputf(be, b, OC);
        float *dd = ct_dputf(be, dout, N * OC), *o = ct_dputf(be, NULL, N * OC);
        float *gi = ct_dputf(be, NULL, N * C), *g = ct_dputf(be, g0, OC * C + OC);
        be->ops->linear_forward_typed(be, o, LOOM_DTYPE_F32, dx, LOOM_DTYPE_F32, dw, db, N, C,
                                      OC);
        be->ops->linear_backward_typed(be, gi, LOOM_DTYPE_F32, g, g + OC * C, dd, LOOM_DTYPE_F32,
                                       dx, LOOM_DTYPE_F32, dw, N, C,
                                       OC);
        res[k][0] = ct_dgetf(be, o, N * OC);
        res[k][1] = ct_dgetf(be, gi, N * C);
        res[k][2] = ct_dgetf(be, g, OC * C + OC);
        void *bufs[] = {dx, dw, db, dd, o, gi, g};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->ops->free(be, bufs[i]);
    }
    ct_check_norm("linear_forward_typed fp32 against the CPU", res[1][0], res[0][0], N * OC, 1e-5);
    ct_check_norm("linear_backward_typed fp32 dinp against the CPU", res[1][1], res[0][1], N * C,
                  1e-5);
    ct_check_norm("linear_backward_typed fp32 dw against the CPU", res[1][2], res[0][2], OC * C,
                  1e-5);
    ct_check_norm("linear_backward_typed fp32 db against the CPU", res[1][2] + OC * C,
                  res[0][2] + OC * C, OC, 1e-5);
    enum loom_dtype d32 = g_gpu->ops->activation_dtype(g_gpu);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F16, NULL, 0);
    enum loom_dtype d16 = g_gpu->ops->activation_dtype(g_gpu);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    char what[128];
    snprintf(what, sizeof what, "activation_dtype with fp32 products %s, with fp16 products %s",
             loom_dtype_name(d32), loom_dtype_name(d16));
    ct_check_true(what, d32 == LOOM_DTYPE_F32 && d16 == LOOM_DTYPE_F32);
    float *hb[] = {x, w, b, dout, g0, res[0][0], res[0][1], res[0][2], res[1][0], res[1][1],
                   res[1][2]};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

/* Tensor-core attention (head size 64 or 128, no dropout) with 16-bit products of type dt
 * (LOOM_DTYPE_BF16 or LOOM_DTYPE_F16) against the CPU's fp32 attention on q, k, v and dout rounded
 * to dt: the probabilities and dS are rounded to dt inside (normwise 2e-2), the scores are not
 * (lse within 1e-4); two runs agree bit for bit. With g_attn_docs, both with the document mask
 * of documents packed into samples (ct_docs). */
static int g_attn_docs;
static void run_attention_typed(enum loom_dtype dt, int64_t B, int64_t T, int64_t NH,
                                int64_t NKV, int64_t HS, int causal, uint64_t seed) {
    const int f16 = dt == LOOM_DTYPE_F16;
    const char *ty = f16 ? (g_attn_docs ? "fp16, documents" : "fp16")
                         : (g_attn_docs ? "bf16, documents" : "bf16");
    struct loom_attn a = ct_attn(B, T, NH, NKV, HS, causal);
    int32_t *doc = g_attn_docs ? ct_docs(B, T) : NULL;
    a.doc_start = doc; /* the host array for the CPU, a device copy for the GPU (ag) */
    int64_t nqkv = B * T * (NH + 2 * NKV) * HS, nout = B * T * NH * HS, nl = B * NH * T;
    float *qkv = ct_randn(nqkv, seed + 1, 1.0f, 0.0f), *dout = ct_randn(nout, seed + 2, 0.1f, 0.0f);
    float *qkv_r = ct_rounded(qkv, nqkv, f16), *dout_r = ct_rounded(dout, nout, f16);
    /* CPU reference on rounded inputs */
    float *cq = ct_dputf(g_cpu, qkv_r, nqkv), *cd = ct_dputf(g_cpu, dout_r, nout);
    float *co = ct_dputf(g_cpu, NULL, nout), *cl = ct_dputf(g_cpu, NULL, nl),
          *cg = ct_dputf(g_cpu, NULL, nqkv);
    g_cpu->ops->attention_forward(g_cpu, co, cl, cq, &a);
    g_cpu->ops->attention_backward(g_cpu, cg, cd, co, cl, cq, &a);
    float *ro = ct_dgetf(g_cpu, co, nout), *rl = ct_dgetf(g_cpu, cl, nl),
          *rg = ct_dgetf(g_cpu, cg, nqkv);
    /* GPU on the unrounded inputs (the kernels round them) */
    g_gpu->ops->set_matmul_dtype(g_gpu, dt, NULL, 0);
    float *gq = ct_dputf(g_gpu, qkv, nqkv), *gd = ct_dputf(g_gpu, dout, nout);
    float *go = ct_dputf(g_gpu, NULL, nout), *gl = ct_dputf(g_gpu, NULL, nl),
          *gg = ct_dputf(g_gpu, NULL, nqkv);
    struct loom_attn ag = a;
    ag.doc_start = doc ? ct_dput(g_gpu, doc, (size_t)(B * T) * sizeof(int32_t)) : NULL;
    float *h1[3], *h2[3];
    for (int rep = 0; rep < 2; rep++) {
        g_gpu->ops->attention_forward(g_gpu, go, gl, gq, &ag);
        /* dout is rounded on the GPU too, but D = rowsum(dout * out) uses fp32 dout: give it the
         * rounded one so that the reference sees the same D */
        g_gpu->ops->to_device(g_gpu, gd, dout_r, (size_t)nout * sizeof(float));
        g_gpu->ops->attention_backward(g_gpu, gg, gd, go, gl, gq, &ag);
        float **h = rep ? h2 : h1;
        h[0] = ct_dgetf(g_gpu, go, nout);
        h[1] = ct_dgetf(g_gpu, gl, nl);
        h[2] = ct_dgetf(g_gpu, gg, nqkv);
    }
    char what[160];
    const char *shape = causal ? "causal" : "full";
    snprintf(what, sizeof what, "attention %s out, B%lld T%lld NH%lld NKV%lld HS%lld %s", ty,
             (long long)B, (long long)T, (long long)NH, (long long)NKV, (long long)HS, shape);
    ct_check_norm(what, h1[0], ro, nout, 2e-2);
    snprintf(what, sizeof what, "attention %s lse, T%lld %s", ty, (long long)T, shape);
    ct_check_norm(what, h1[1], rl, nl, 1e-4);
    snprintf(what, sizeof what, "attention %s dqkv, T%lld %s", ty, (long long)T, shape);
    ct_check_norm(what, h1[2], rg, nqkv, 2e-2);
    int same = !memcmp(h1[0], h2[0], (size_t)nout * 4) && !memcmp(h1[1], h2[1], (size_t)nl * 4) &&
               !memcmp(h1[2], h2[2], (size_t)nqkv * 4);
    snprintf(what, sizeof what, "attention %s: two runs bit for bit", ty);
    ct_check_true(what, same);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    void *gb[] = {gq, gd, go, gl, gg};
    for (size_t i = 0; i < 5; i++) g_gpu->ops->free(g_gpu, gb[i]);
    if (ag.doc_start) g_gpu->ops->free(g_gpu, (void *)ag.doc_start);
    free(doc);
    void *cb[] = {cq, cd, co, cl, cg};
    for (size_t i = 0; i < 5; i++) g_cpu->ops->free(g_cpu, cb[i]);
    float *hb[] = {qkv, dout, qkv_r, dout_r, ro, rl, rg, h1[0], h1[1], h1[2], h2[0], h2[1], h2[2]};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

static void run_attention(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int causal,
                          uint64_t seed) {
    run_attention_typed(LOOM_DTYPE_BF16, B, T, NH, NKV, HS, causal, seed);
}

/* Attention with bf16 arrays (loom_attn.dt = BF16) against the same op on fp32 arrays holding the
 * same bf16 values, under bf16 products: the kernels round q, k, v and dout to bf16 in both, so
 * the bf16 out must be the fp32 out rounded, bit for bit, and the bf16 dqkv the fp32 dqkv
 * rounded, when the fp32 backward is given the rounded out (D = rowsum(dout * out) of the
 * stored values). lse is the same. Head sizes 64 and 128 take the tensor-core kernels; others
 * (and dropout) the fp32 kernels through fp32 copies, which must agree just as exactly. loom's own
 * kernels (--attention-backend flash): cuDNN's, which bf16 arrays take by default, are checked in
 * test_cuda_attention. */
static void run_attention_bf16_arrays(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                      int causal, uint64_t seed) {
    struct loom_attn a = ct_attn(B, T, NH, NKV, HS, causal);
    const int64_t nqkv = B * T * (NH + 2 * NKV) * HS, nout = B * T * NH * HS, nl = B * NH * T;
    float *qkv = ct_randn(nqkv, seed + 1, 1.0f, 0.0f), *dout = ct_randn(nout, seed + 2, 0.1f, 0.0f);
    float *qkv_r = ct_rounded(qkv, nqkv, 0), *dout_r = ct_rounded(dout, nout, 0);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0);
    g_gpu->ops->set_attention_backend(g_gpu, LOOM_ATTN_FLASH);
    /* fp32 arrays */
    float *q32 = ct_dputf(g_gpu, qkv_r, nqkv), *d32 = ct_dputf(g_gpu, dout_r, nout);
    float *o32 = ct_dputf(g_gpu, NULL, nout), *l32 = ct_dputf(g_gpu, NULL, nl);
    float *g32 = ct_dputf(g_gpu, NULL, nqkv);
    g_gpu->ops->attention_forward(g_gpu, o32, l32, q32, &a);
    float *ho32 = ct_dgetf(g_gpu, o32, nout), *hl32 = ct_dgetf(g_gpu, l32, nl);
    float *ho_r = ct_rounded(ho32, nout, 0);
    g_gpu->ops->to_device(g_gpu, o32, ho_r, (size_t)nout * sizeof(float));
    g_gpu->ops->attention_backward(g_gpu, g32, d32, o32, l32, q32, &a);
    float *hg32 = ct_dgetf(g_gpu, g32, nqkv), *hg_r = ct_rounded(hg32, nqkv, 0);
    /* bf16 arrays */
    a.dt = LOOM_DTYPE_BF16;
    void *q16 = ct_dput16(g_gpu, qkv_r, nqkv, 0), *d16 = ct_dput16(g_gpu, dout_r, nout, 0);
    void *o16 = ct_dput(g_gpu, NULL, (size_t)nout * 2),
         *g16 = ct_dput(g_gpu, NULL, (size_t)nqkv * 2);
    float *l16 = ct_dputf(g_gpu, NULL, nl);
    g_gpu->ops->attention_forward(g_gpu, o16, l16, q16, &a);
    g_gpu->ops->attention_backward(g_gpu, g16, d16, o16, l16, q16, &a);
    float *ho16 = ct_dget16(g_gpu, o16, nout, 0), *hl16 = ct_dgetf(g_gpu, l16, nl);
    float *hg16 = ct_dget16(g_gpu, g16, nqkv, 0);
    char what[160];
    snprintf(what, sizeof what, "attention on bf16 arrays B%lld T%lld NH%lld NKV%lld HS%lld %s: out",
             (long long)B, (long long)T, (long long)NH, (long long)NKV, (long long)HS,
             causal ? "causal" : "full");
    ct_exact(what, ho16, ho_r, nout);
    ct_exact("  lse", hl16, hl32, nl);
    ct_exact("  dqkv", hg16, hg_r, nqkv);
    g_gpu->ops->set_attention_backend(g_gpu, LOOM_ATTN_AUTO);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    void *gb[] = {q32, d32, o32, l32, g32, q16, d16, o16, g16, l16};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) g_gpu->ops->free(g_gpu, gb[i]);
    float *hb[] = {qkv, dout, qkv_r, dout_r, ho32, hl32, ho_r, hg32, hg_r, ho16, hl16, hg16};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

/* bf16 values (held as floats) that are the same or adjacent bf16 numbers of one sign; the
 * count of those not the same goes to *differ. */
static int within_one_bf16_ulp(const float *got, const float *want, int64_t n, int64_t *differ) {
    int ok = 1;
    *differ = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4), memcpy(&b, &want[i], 4);
        if (a == b) continue;
        ++*differ;
        const uint32_t ha = a >> 16, hb = b >> 16;
        ok &= (a & 0xffff) == 0 && (ha >> 15) == (hb >> 15) && (ha > hb ? ha - hb : hb - ha) == 1;
    }
    return ok;
}

/* gelu_forward_typed on bf16 arrays: the fp32 op's values on the same (bf16) inputs, rounded.
 * The bf16 kernel computes the same function with approximate 2^x and reciprocal (relative error
 * about 2^-21), so a value within 2^-21 of a rounding boundary may round to the other
 * neighbour: every element within one bf16 unit, at most one in 256 not the same bits.
 * n = 8 k + 5 and an odd offset take the vector and the one-at-a-time kernels. */
static void run_gelu_bf16(int64_t n, int64_t off, uint64_t seed) {
    float *x0 = ct_randn(n, seed, 2.0f, 0.0f), *x = ct_rounded(x0, n, 0);
    float *d32 = ct_dputf(g_gpu, x, n), *o32 = ct_dputf(g_gpu, NULL, n);
    g_gpu->ops->gelu_forward(g_gpu, g_gelu, o32, d32, n);
    float *ref = ct_dgetf(g_gpu, o32, n), *ref_r = ct_rounded(ref, n, 0);
    float *xp = ct_alloc((size_t)(n + off) * sizeof(float));
    for (int64_t i = 0; i < off; i++) xp[i] = 0.0f;
    memcpy(xp + off, x, (size_t)n * sizeof(float));
    char *in16 = ct_dput16(g_gpu, xp, n + off, 0), *out16 = ct_dput16(g_gpu, xp, n + off, 0);
    g_gpu->ops->gelu_forward_typed(g_gpu, g_gelu, out16 + 2 * off, in16 + 2 * off, LOOM_DTYPE_BF16,
                                   n);
    float *got = ct_dget16(g_gpu, out16, n + off, 0);
    char what[128];
    int64_t differ = 0;
    const int near = within_one_bf16_ulp(got + off, ref_r, n, &differ);
    snprintf(what, sizeof what,
             "gelu_forward_typed bf16%s, n %lld at element offset %lld: %lld of them one unit off",
             g_gelu == LOOM_GELU_ERF ? " erf" : "", (long long)n, (long long)off,
             (long long)differ);
    ct_check_true(what, near && differ * 256 <= n);
    void *gb[] = {d32, o32, in16, out16};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) g_gpu->ops->free(g_gpu, gb[i]);
    float *hb[] = {x0, x, ref, ref_r, xp, got};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
}

/* got (n bf16 values as floats) against ref rounded to bf16: every element within one unit, at
 * most one in 256 not the same bits (a reordered or contracted fp32 operation moves a value near
 * a rounding boundary across it) */
static void check_rounded(const char *what, const float *got, const float *ref, int64_t n) {
    float *ref_r = ct_rounded(ref, n, 0);
    int64_t differ = 0;
    const int near = within_one_bf16_ulp(got, ref_r, n, &differ);
    char line[160];
    snprintf(line, sizeof line, "%s: %lld of %lld one unit off", what, (long long)differ,
             (long long)n);
    ct_check_true(line, near && differ * 256 <= n);
    free(ref_r);
}

/* swiglu_forward / swiglu_backward on bf16 arrays against the fp32 ops on the GPU on the same
 * (bf16) inputs, rounded (the bf16 kernels compute in fp32 and round once). F % 8 != 0 takes the
 * one-element kernels. */
static void run_swiglu_bf16(int64_t N, int64_t F, uint64_t seed) {
    ct_check_true("set_matmul_dtype bf16",
                  g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0) == LOOM_OK);
    float *x0 = ct_randn(2 * N * F, seed, 2.0f, 0.0f), *x = ct_rounded(x0, 2 * N * F, 0);
    float *d0 = ct_randn(N * F, seed + 1, 1.0f, 0.0f), *dy = ct_rounded(d0, N * F, 0);
    float *x32 = ct_dputf(g_gpu, x, 2 * N * F), *dy32 = ct_dputf(g_gpu, dy, N * F);
    float *y32 = ct_dputf(g_gpu, NULL, N * F), *dx32 = ct_dputf(g_gpu, NULL, 2 * N * F);
    loom_op(g_gpu, swiglu_forward, y32, x32, LOOM_DTYPE_F32, N, F);
    loom_op(g_gpu, swiglu_backward, dx32, dy32, x32, LOOM_DTYPE_F32, N, F);
    void *x16 = ct_dput16(g_gpu, x, 2 * N * F, 0), *dy16 = ct_dput16(g_gpu, dy, N * F, 0);
    void *y16 = ct_dput(g_gpu, NULL, (size_t)(N * F) * 2),
         *dx16 = ct_dput(g_gpu, NULL, (size_t)(2 * N * F) * 2);
    loom_op(g_gpu, swiglu_forward, y16, x16, LOOM_DTYPE_BF16, N, F);
    loom_op(g_gpu, swiglu_backward, dx16, dy16, x16, LOOM_DTYPE_BF16, N, F);
    float *ry = ct_dgetf(g_gpu, y32, N * F), *rdx = ct_dgetf(g_gpu, dx32, 2 * N * F);
    float *gy = ct_dget16(g_gpu, y16, N * F, 0), *gdx = ct_dget16(g_gpu, dx16, 2 * N * F, 0);
    char what[96];
    snprintf(what, sizeof what, "swiglu_forward bf16 N %lld F %lld", (long long)N, (long long)F);
    check_rounded(what, gy, ry, N * F);
    snprintf(what, sizeof what, "swiglu_backward bf16 N %lld F %lld", (long long)N, (long long)F);
    check_rounded(what, gdx, rdx, 2 * N * F);
    void *gb[] = {x32, dy32, y32, dx32, x16, dy16, y16, dx16};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++)
        g_gpu->ops->free(g_gpu, gb[i]);
    float *hb[] = {x0, x, d0, dy, ry, rdx, gy, gdx};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++)
        free(hb[i]);
}

/* rope on a bf16 qkv against the fp32 op on the GPU on the same (bf16) values, rounded, forward
 * and inverse; HS / 2 % 8 != 0 takes the one-pair kernel. */
static void run_rope_bf16(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                          uint64_t seed, int64_t dims) {
    const struct loom_rope rot = {.theta = 10000.0, .dims = dims};
    ct_check_true("set_matmul_dtype bf16",
                  g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0) == LOOM_OK);
    const int64_t n = B * T * (NH + 2 * NKV) * HS;
    float *x0 = ct_randn(n, seed, 1.0f, 0.0f), *x = ct_rounded(x0, n, 0);
    for (int inverse = 0; inverse < 2; inverse++) {
        float *q32 = ct_dputf(g_gpu, x, n);
        void *q16 = ct_dput16(g_gpu, x, n, 0);
        loom_op(g_gpu, rope, q32, LOOM_DTYPE_F32, NULL, B, T, NH, NKV, HS, pos0, &rot, inverse);
        loom_op(g_gpu, rope, q16, LOOM_DTYPE_BF16, NULL, B, T, NH, NKV, HS, pos0, &rot, inverse);
        float *ref = ct_dgetf(g_gpu, q32, n), *got = ct_dget16(g_gpu, q16, n, 0);
        char what[128];
        snprintf(what, sizeof what,
                 "rope%s bf16 B %lld T %lld NH %lld NKV %lld HS %lld pos0 %lld rotated %lld",
                 inverse ? " inverse" : "", (long long)B, (long long)T, (long long)NH,
                 (long long)NKV, (long long)HS, (long long)pos0, (long long)(dims ? dims : HS));
        check_rounded(what, got, ref, n);
        g_gpu->ops->free(g_gpu, q32);
        g_gpu->ops->free(g_gpu, q16);
        free(ref);
        free(got);
    }
    free(x0);
    free(x);
}

/* linear_forward_typed writing bf16 (with the bias) and linear_backward_typed writing a bf16 dinp
 * from a bf16 input, against the CPU's fp32 ops on the rounded inputs (normwise 1e-2: the output
 * and the bias rounded to bf16); db sums the bf16 dout as stored. */
static void run_linear_bf16_arrays(int64_t N, int64_t C, int64_t OC, uint64_t seed) {
    float *x0 = ct_randn(N * C, seed + 1, 1.0f, 0.0f),
          *dy0 = ct_randn(N * OC, seed + 4, 0.01f, 0.0f);
    float *x = ct_rounded(x0, N * C, 0), *dy = ct_rounded(dy0, N * OC, 0);
    float *w = ct_randn(OC * C, seed + 2, 0.05f, 0.0f), *b = ct_randn(OC, seed + 3, 0.1f, 0.0f);
    float *w_r = ct_rounded(w, OC * C, 0);
    float *ref_out = malloc((size_t)(N * OC) * 4), *ref_dx = malloc((size_t)(N * C) * 4);
    float *ref_dw = calloc((size_t)(OC * C), 4), *zero = calloc((size_t)(OC * C), 4);
    if (!ref_out || !ref_dx || !ref_dw || !zero) exit(2);
    cpu_linear(ref_out, ref_dx, ref_dw, x, w_r, b, dy, zero, N, C, OC);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0);
    void *x16 = ct_dput16(g_gpu, x, N * C, 0), *dy16 = ct_dput16(g_gpu, dy, N * OC, 0);
    float *wd = ct_dputf(g_gpu, w, OC * C), *bd = ct_dputf(g_gpu, b, OC);
    void *o16 = ct_dput(g_gpu, NULL, (size_t)(N * OC) * 2);
    void *dx16 = ct_dput(g_gpu, NULL, (size_t)(N * C) * 2);
    float *dw = ct_dputf(g_gpu, zero, OC * C), *db = ct_dputf(g_gpu, zero, OC);
    const enum loom_dtype bf = LOOM_DTYPE_BF16;
    g_gpu->ops->linear_forward_typed(g_gpu, o16, bf, x16, bf, wd, bd, N, C, OC);
    g_gpu->ops->linear_backward_typed(g_gpu, dx16, bf, dw, db, dy16, bf, x16, bf, wd, N, C, OC);
    float *h;
    char what[128];
    snprintf(what, sizeof what, "bf16 arrays %lldx%lldx%lld: linear_forward_typed out", (long long)N,
             (long long)C, (long long)OC);
    ct_check_norm(what, h = ct_dget16(g_gpu, o16, N * OC, 0), ref_out, N * OC, 1e-2);
    free(h);
    ct_check_norm("  linear_backward_typed dinp", h = ct_dget16(g_gpu, dx16, N * C, 0), ref_dx,
                  N * C, 1e-2);
    free(h);
    ct_check_norm("  linear_backward_typed dw", h = ct_dgetf(g_gpu, dw, OC * C), ref_dw, OC * C,
                  1e-4);
    free(h);
    double *sum = calloc((size_t)OC, sizeof(double));
    float *ref_db = malloc((size_t)OC * 4);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < OC; k++) sum[k] += dy[n * OC + k];
    for (int64_t k = 0; k < OC; k++) ref_db[k] = (float)sum[k];
    ct_check_norm("  linear_backward_typed db", h = ct_dgetf(g_gpu, db, OC), ref_db, OC, 1e-5);
    free(h);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    void *gb[] = {x16, dy16, wd, bd, o16, dx16, dw, db};
    for (size_t i = 0; i < sizeof gb / sizeof gb[0]; i++) g_gpu->ops->free(g_gpu, gb[i]);
    float *hb[] = {x0, dy0, x, w, b, dy, w_r, ref_out, ref_dx, ref_dw, zero, ref_db};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) free(hb[i]);
    free(sum);
}

/* ---- head_norm_forward / head_norm_backward: the CUDA ops against the CPU's ---- */

/* A typed array of n values (rounded to bf16 with bf) on be, shift elements past an allocation's
 * start (shift 1: not 16-byte aligned, the kernels' scalar path); *base is what to free. */
static void *hn_dput(struct loom_backend *be, const float *h, int64_t n, int bf, int shift,
                     void **base) {
    float *pad = ct_alloc((size_t)(n + shift) * sizeof(float));
    for (int64_t i = 0; i < shift; i++)
        pad[i] = 0.0f;
    memcpy(pad + shift, h, (size_t)n * sizeof(float));
    *base = bf ? ct_dput16(be, pad, n + shift, 0) : (void *)ct_dputf(be, pad, n + shift);
    free(pad);
    return (char *)*base + (size_t)shift * (bf ? 2 : 4);
}
static float *hn_dget(struct loom_backend *be, const void *d, int64_t n, int bf) {
    return bf ? ct_dget16(be, d, n, 0) : ct_dgetf(be, d, n);
}

/* Whether two bf16 values (held as floats) are at most one bf16 step apart, or within 1e-6 of
 * the array's largest value `scale` (values that cancel to about zero may round to either side
 * of it from fp32 results that differ in their last bit) */
static int hn_bf16_near(float a, float b, double scale) {
    const uint16_t ua = ct_to16(a, 0), ub = ct_to16(b, 0);
    const int ia = ua & 0x8000 ? -(int)(ua & 0x7fff) : (int)ua;
    const int ib = ub & 0x8000 ? -(int)(ub & 0x7fff) : (int)ub;
    return abs(ia - ib) <= 1 || fabs((double)a - (double)b) <= 1e-6 * scale;
}
static void hn_check_bf16(const char *what, const float *got, const float *want, int64_t n) {
    int64_t far = 0, same = 0;
    const double scale = ct_ref_max(got, want, n);
    for (int64_t i = 0; i < n; i++) {
        far += scale < 0.0 || !hn_bf16_near(got[i], want[i], scale);
        same += !memcmp(&got[i], &want[i], 4);
    }
    printf("%s %s: %lld of %lld more than one bf16 step from the cpu's (%lld the same bits)\n",
           far ? "FAIL" : "ok  ", what, (long long)far, (long long)n, (long long)same);
    ct_tally(!far);
}

/* The results of one backend: qkv after the forward, keep, mean, rstd; dqkv after the backward,
 * the four weight gradients (accumulated onto dw0) */
struct hn_out {
    float *qkv, *keep, *mean, *rstd, *dqkv, *dw;
};
static void hn_free_out(struct hn_out *o) {
    free(o->qkv), free(o->keep), free(o->mean), free(o->rstd), free(o->dqkv), free(o->dw);
}

static struct hn_out hn_run(struct loom_backend *be, int rms, int has_b, int bf, int shift,
                            const float *qkv, const float *dqkv, const float *w4, const float *dw0,
                            int64_t N, int64_t NH, int64_t NKV, int64_t HS) {
    const int64_t total = N * (NH + 2 * NKV) * HS, nv = N * (NH + NKV);
    const enum loom_dtype dt = bf ? LOOM_DTYPE_BF16 : LOOM_DTYPE_F32;
    void *bq_, *bk_, *bd_;
    void *q = hn_dput(be, qkv, total, bf, shift, &bq_);
    void *keep = hn_dput(be, qkv, nv * HS, bf, shift, &bk_); /* overwritten */
    void *dq = hn_dput(be, dqkv, total, bf, shift, &bd_);
    float *mean = ct_dputf(be, NULL, nv), *rstd = ct_dputf(be, NULL, nv);
    float *w = ct_dputf(be, w4, 4 * HS), *dw = ct_dputf(be, dw0, 4 * HS);
    const int b = has_b && !rms;
    loom_op(be, head_norm_forward, rms, q, dt, keep, rms ? NULL : mean, rstd, w, b ? w + HS : NULL,
            w + 2 * HS, b ? w + 3 * HS : NULL, N, NH, NKV, HS, 1e-5f);
    loom_op(be, head_norm_backward, rms, dq, dt, dw, b ? dw + HS : NULL, dw + 2 * HS,
            b ? dw + 3 * HS : NULL, keep, rms ? NULL : mean, rstd, w, w + 2 * HS, N, NH, NKV, HS);
    struct hn_out o = {hn_dget(be, q, total, bf),  hn_dget(be, keep, nv * HS, bf),
                       ct_dgetf(be, mean, nv),     ct_dgetf(be, rstd, nv),
                       hn_dget(be, dq, total, bf), ct_dgetf(be, dw, 4 * HS)};
    void *bufs[] = {bq_, bk_, bd_, mean, rstd, w, dw};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->ops->free(be, bufs[i]);
    return o;
}

/* The CUDA head norms against the CPU backend's on the same values (fp32 and bf16 arrays): fp32
 * outputs and input gradients within 1e-6 of the largest, mean and rstd within 1e-6 each, bf16
 * ones within one bf16 step elementwise, the kept inputs the same bits, the weight gradients
 * (accumulated onto nonzero values) within 1e-5 of the largest; the value heads untouched; a
 * second CUDA run the same bits. */
static void run_head_norm(int rms, int has_b, int64_t N, int64_t NH, int64_t NKV, int64_t HS,
                          int shift, uint64_t seed) {
    const int64_t R = NH / NKV, row = (NH + 2 * NKV) * HS, total = N * row, nv = N * (NH + NKV);
    float *qkv = ct_randn(total, seed, 1.0f, 0.5f), *dqkv = ct_randn(total, seed + 1, 1.0f, 0.0f);
    float *w4 = ct_randn(4 * HS, seed + 2, 0.2f, 1.0f),
          *dw0 = ct_randn(4 * HS, seed + 3, 1.0f, 0.0f);
    for (int64_t c = 0; c < HS; c++) /* biases about zero */
        w4[HS + c] -= 1.0f, w4[3 * HS + c] -= 1.0f;
    for (int bf = 0; bf < 2; bf++) {
        char tag[128], what[200];
        snprintf(tag, sizeof tag, "%s%s %s NH %lld NKV %lld HS %lld N %lld%s",
                 rms ? "rmsnorm" : "layernorm", !rms && !has_b ? " (no bias)" : "",
                 bf ? "bf16" : "f32", (long long)NH, (long long)NKV, (long long)HS, (long long)N,
                 shift ? " unaligned" : "");
        struct hn_out g = hn_run(g_gpu, rms, has_b, bf, shift, qkv, dqkv, w4, dw0, N, NH, NKV, HS);
        struct hn_out g2 = hn_run(g_gpu, rms, has_b, bf, shift, qkv, dqkv, w4, dw0, N, NH, NKV, HS);
        struct hn_out c = hn_run(g_cpu, rms, has_b, bf, 0, qkv, dqkv, w4, dw0, N, NH, NKV, HS);
        snprintf(what, sizeof what, "head_norm fwd qkv, %s", tag);
        if (bf)
            hn_check_bf16(what, g.qkv, c.qkv, total);
        else
            ct_check(what, ct_norm_err(g.qkv, c.qkv, total), 1e-6);
        snprintf(what, sizeof what, "head_norm fwd keep, %s", tag);
        ct_exact(what, g.keep, c.keep, nv * HS);
        snprintf(what, sizeof what, "head_norm fwd rstd, %s", tag);
        ct_check(what, ct_elem_err(g.rstd, c.rstd, nv, 0.0), 1e-6);
        if (!rms) {
            snprintf(what, sizeof what, "head_norm fwd mean, %s", tag);
            ct_check(what, ct_elem_err(g.mean, c.mean, nv, 1e-3), 1e-6);
        }
        snprintf(what, sizeof what, "head_norm bwd dqkv, %s", tag);
        if (bf)
            hn_check_bf16(what, g.dqkv, c.dqkv, total);
        else
            ct_check(what, ct_norm_err(g.dqkv, c.dqkv, total), 1e-6);
        const char *wname[4] = {"dwq", "dbq", "dwk", "dbk"};
        for (int j = 0; j < 4; j++) {
            snprintf(what, sizeof what, "head_norm bwd %s +=, %s", wname[j], tag);
            ct_check(what, ct_norm_err(g.dw + j * HS, c.dw + j * HS, HS), 1e-5);
        }
        /* the value heads as they were (rounded to the type) */
        int64_t bad = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < NKV; k++)
                for (int64_t i = 0; i < HS; i++) {
                    const int64_t at = n * row + (k * (R + 2) + R + 1) * HS + i;
                    const float q0 = bf ? ct_from16(ct_to16(qkv[at], 0), 0) : qkv[at];
                    const float d0 = bf ? ct_from16(ct_to16(dqkv[at], 0), 0) : dqkv[at];
                    bad += memcmp(&g.qkv[at], &q0, 4) != 0 || memcmp(&g.dqkv[at], &d0, 4) != 0;
                }
        printf("%s head_norm value heads untouched, %s: %lld differ\n", bad ? "FAIL" : "ok  ", tag,
               (long long)bad);
        ct_tally(!bad);
        snprintf(what, sizeof what, "head_norm two cuda runs the same bits, %s", tag);
        ct_check_true(what, !memcmp(g.qkv, g2.qkv, (size_t)total * 4) &&
                                !memcmp(g.mean, g2.mean, (size_t)nv * 4) &&
                                !memcmp(g.rstd, g2.rstd, (size_t)nv * 4) &&
                                !memcmp(g.dqkv, g2.dqkv, (size_t)total * 4) &&
                                !memcmp(g.dw, g2.dw, (size_t)(4 * HS) * 4));
        hn_free_out(&g);
        hn_free_out(&g2);
        hn_free_out(&c);
    }
    free(qkv), free(dqkv), free(w4), free(dw0);
}

/* adamw_ranges over registered parameters writes their 16-bit copy in the same pass: a product
 * after it reads the new values rounded, bit for bit (w^T through an identity input: out[n][oc]
 * = w[oc][n] as the product sees it), also where the copy was fresh before the step (made by an
 * earlier product), and elements outside the ranges keep theirs. */
static void run_adamw_copy(int f16, uint64_t seed) {
    const int64_t C = 64, OC = 40, n = OC * C + 24; /* the weight, then 24 more parameters */
    float *hp = ct_randn(n, seed, 0.5f, 0.0f), *hg = ct_randn(n, seed + 1, 0.1f, 0.0f);
    float *eye = ct_alloc((size_t)(C * C) * 4);
    for (int64_t i = 0; i < C * C; i++)
        eye[i] = i / C == i % C ? 1.0f : 0.0f;
    float *p = ct_dputf(g_gpu, hp, n), *g = ct_dputf(g_gpu, hg, n);
    float *m = ct_dputf(g_gpu, NULL, n), *v = ct_dputf(g_gpu, NULL, n);
    float *x = ct_dputf(g_gpu, eye, C * C), *out = ct_dputf(g_gpu, NULL, C * OC);
    g_gpu->ops->zero(g_gpu, m, (size_t)n * 4);
    g_gpu->ops->zero(g_gpu, v, (size_t)n * 4);
    if (g_gpu->ops->set_matmul_dtype(g_gpu, f16 ? LOOM_DTYPE_F16 : LOOM_DTYPE_BF16, p, n) !=
        LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    g_gpu->ops->linear_forward(g_gpu, out, x, p, NULL, C, C, OC); /* the copy made, fresh */
    /* two ranges over most of the weight, leaving a gap and the tail alone */
    const int64_t off[2] = {0, 1000}, len[2] = {900, OC * C - 1000};
    const uint8_t decay[2] = {1, 0};
    for (int step = 1; step <= 2; step++)
        g_gpu->ops->adamw_ranges(g_gpu, p, g, m, v, off, NULL, len, decay, 2, 1e-2f, 0.9f, 0.95f,
                                 1e-8f, 0.1f, step, 1.0f);
    g_gpu->ops->linear_forward(g_gpu, out, x, p, NULL, C, C, OC);
    float *np = ct_dgetf(g_gpu, p, n), *ho = ct_dgetf(g_gpu, out, C * OC);
    int same = 1, moved = 0;
    for (int64_t oc = 0; oc < OC; oc++)
        for (int64_t c = 0; c < C; c++) {
            same &= ho[c * OC + oc] == ct_from16(ct_to16(np[oc * C + c], f16), f16);
            moved += np[oc * C + c] != hp[oc * C + c];
        }
    char what[128];
    snprintf(what, sizeof what,
             "adamw_ranges keeps the %s copy of registered parameters: products read the new "
             "values (%d of %lld moved)",
             f16 ? "fp16" : "bf16", moved, (long long)(OC * C));
    ct_check_true(what, same && moved == OC * C - 100);
    g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0);
    void *dev[] = {p, g, m, v, x, out};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        g_gpu->ops->free(g_gpu, dev[i]);
    free(hp), free(hg), free(eye), free(np), free(ho);
}

int main(void) {
    int st = ct_open(&g_gpu, &g_cpu);
    if (st) return st;
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
    g_gelu = LOOM_GELU_ERF; /* the exact GELU: its own kernels, the products plain */
    run_linear_gelu(64, 96, 384, 1, 1, 1550);
    run_mlp_act16(37, 72, 50, 1, 0, 2050); /* N F % 8 != 0: one element a thread */
    run_mlp_act16(2048, 768, 3072, 1, 1, 2250);
    run_gelu_bf16(8 * 101 + 5, 1, 3850);
    g_gelu = LOOM_GELU_TANH;
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
    g_attn_docs = 1; /* documents packed into samples: the document mask */
    run_attention(2, 600, 4, 2, 64, 1, 1500);
    run_attention(2, 600, 4, 2, 128, 1, 1600);
    run_attention_typed(LOOM_DTYPE_F16, 2, 600, 4, 2, 64, 1, 1700);
    g_attn_docs = 0;
    run_attention_bf16_arrays(2, 200, 4, 2, 64, 1, 3000);
    run_attention_bf16_arrays(1, 300, 4, 4, 128, 0, 3100);
    run_attention_bf16_arrays(2, 1024, 12, 12, 64, 1, 3200); /* GPT-2 124M shapes */
    run_attention_bf16_arrays(1, 100, 4, 2, 32, 1, 3300);   /* fp32 kernels through copies */
    run_gelu_bf16(2048 * 8, 0, 3700);
    run_gelu_bf16(8 * 101 + 5, 1, 3800);
    run_swiglu_bf16(64, 96, 4100);
    run_swiglu_bf16(37, 50, 4200); /* F % 8 != 0 */
    run_swiglu_bf16(2048, 2048, 4300);
    run_rope_bf16(2, 33, 4, 2, 16, 0, 4400, 0);
    run_rope_bf16(1, 20, 4, 1, 12, 1000, 4500, 0); /* HS / 2 % 8 != 0 */
    run_rope_bf16(2, 1024, 12, 4, 64, 0, 4600, 0);
    run_rope_bf16(2, 64, 4, 2, 64, 3, 4700, 16); /* --rotary-percent 0.25, 8 pairs a thread */
    run_rope_bf16(2, 64, 4, 2, 64, 3, 4800, 24); /* one pair a thread */
    run_linear_bf16_arrays(64, 96, 80, 3400);
    run_linear_bf16_arrays(2048, 768, 2304, 3500); /* GPT-2 qkv */
    run_linear_bf16_arrays(37, 72, 50, 3600);      /* unaligned rows */
    /* the query heads (R = 4 of HS 64 in groups of 6 heads) and the keys of qkv rows, gathered
     * and written back; odd sizes */
    /* the query and key head norms: grouped and plain heads, HS 64 and 128 (16-byte accesses),
     * 24 (16-byte accesses with lanes left idle), 12, 7 and 64 unaligned (one value at a time),
     * 256 (the largest), GPT-2 124M's 12 heads of 64 */
    run_head_norm(0, 1, 300, 4, 2, 64, 0, 5200);
    run_head_norm(1, 0, 300, 4, 2, 128, 0, 5300);
    run_head_norm(0, 1, 300, 3, 3, 24, 0, 5400);
    run_head_norm(1, 0, 100, 4, 1, 24, 0, 5450);
    run_head_norm(0, 0, 2048, 12, 12, 64, 0, 5500);
    run_head_norm(1, 0, 64, 2, 2, 256, 0, 5600);
    run_head_norm(0, 1, 50, 4, 2, 7, 0, 5700);
    run_head_norm(0, 1, 50, 4, 2, 12, 0, 5750);
    run_head_norm(0, 1, 100, 4, 2, 64, 1, 5800);
    run_head_norm(1, 0, 100, 4, 2, 64, 1, 5850);
    run_adamw_copy(0, 3900);
    run_adamw_copy(1, 4000);
    /* the same kernels in fp16 (fp16 products) */
    run_attention_typed(LOOM_DTYPE_F16, 2, 200, 4, 2, 64, 1, 2500);
    run_attention_typed(LOOM_DTYPE_F16, 1, 77, 4, 1, 64, 0, 2600);
    run_attention_typed(LOOM_DTYPE_F16, 2, 1024, 12, 12, 64, 1, 2700); /* GPT-2 124M shapes */
    run_attention_typed(LOOM_DTYPE_F16, 2, 200, 4, 2, 128, 1, 2800);
    run_attention_typed(LOOM_DTYPE_F16, 1, 300, 4, 4, 128, 0, 2900);
    g_gpu->ops->memory_stats(g_gpu, &m1);
    int ok = m1.peak >= m0.peak && m1.in_use >= m0.in_use && m1.allocations > m0.allocations;
    char what[160];
    snprintf(what, sizeof what,
             "memory_stats: in use %zu -> %zu bytes, peak %zu bytes, %lld allocations", m0.in_use,
             m1.in_use, m1.peak, (long long)m1.allocations);
    ct_check_true(what, ok);
    loom_backend_destroy(g_gpu);
    loom_backend_destroy(g_cpu);
    return ct_finish();
}

#else
int main(void) {
    puts("skipped: built without CUDA");
    return 77;
}
#endif
