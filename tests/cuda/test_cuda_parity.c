/* Parity of the CUDA backend with the CPU backend, op by op, in fp32.
 *
 * Every op gets fresh random inputs (loom/rng.h), runs on the CPU backend and twice on the CUDA
 * backend, and reports for each output:
 *   rel  = max_i |gpu_i - cpu_i| / max(|cpu_i|, 1e-6 max_j |cpu_j|)   (elementwise)
 *   norm = max_i |gpu_i - cpu_i| / max_j |cpu_j|                      (normwise)
 * Pointwise ops are held to rel <= 1e-5. Ops that sum (matrix products, norms, attention,
 * embedding and bias gradients, softmax sums) are held to norm <= 1e-5: their elements near
 * zero carry the rounding of sums of much larger terms, which no summation order avoids.
 * Dropout masks must agree exactly, and the two CUDA runs must agree bit for bit (no atomics).
 * Documents packed into samples (Megatron-LM's --reset-position-ids, --reset-attention-mask):
 * the embedding and rotary embeddings at per-token positions restarting at each document, and
 * attention with the document mask (loom_attn.doc_start; cuda_test_util.h's ct_docs: single
 * tokens and documents shorter, as long as and longer than the kernels' 32-key tiles), each
 * held to the same bounds as without.
 *
 * Exit status: 0 all passed, 1 a check failed, 77 skipped (built without CUDA, or no device;
 * with LOOM_REQUIRE_CUDA=1 a missing device is a failure).
 *   test_cuda_parity          the parity checks, small and large shapes
 *   test_cuda_parity small    the small shapes only (quick; for compute-sanitizer)
 *   test_cuda_parity bench    no checks: times linear and attention forward+backward at GPT-2
 *                             124M shapes (B=16, T=1024, C=768, NH=12), for information
 */
#include <stdio.h>
#include <stdlib.h>

#ifdef LOOM_HAVE_CUDA

#include <math.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/log.h"
#include "loom/rng.h"

#define CT_SEED 2024 /* the stream of the random inputs */
#include "cuda_test_util.h"

static struct loom_backend *g_cpu, *g_gpu;

/* ---- buffers ---- */

/* copy device -> new host array, then free the device buffer */
static float *dtake(struct loom_backend *be, void *d, int64_t n) {
    float *h = ct_dgetf(be, d, n);
    be->ops->free(be, d);
    return h;
}

/* ---- comparisons ---- */

enum gate { GATE_ELEM, GATE_NORM };

static void compare(const char *what, const float *gpu, const float *cpu, const float *gpu2,
                    int64_t n, enum gate gate, double tol) {
    const double rel = ct_elem_err(gpu, cpu, n, 1e-6), norm = ct_norm_err(gpu, cpu, n);
    int same = gpu2 ? memcmp(gpu, gpu2, (size_t)n * sizeof(float)) == 0 : 1;
    double gated = gate == GATE_ELEM ? rel : norm;
    int ok = gated <= tol && same;
    printf("%-4s %-56s rel %.2e  norm %.2e  (%s <= %.0e)%s\n", ok ? "ok" : "FAIL", what, rel, norm,
           gate == GATE_ELEM ? "rel" : "norm", tol, same ? "" : "  NOT DETERMINISTIC");
    ct_tally(ok);
}

/* the zero pattern (dropped elements) of two outputs must agree */
static void compare_mask(const char *what, const float *gpu, const float *cpu, int64_t n) {
    int64_t bad = 0, zeros = 0;
    for (int64_t i = 0; i < n; i++) {
        if ((gpu[i] == 0.0f) != (cpu[i] == 0.0f)) bad++;
        if (cpu[i] == 0.0f) zeros++;
    }
    int ok = bad == 0;
    printf("%-4s %-56s %lld of %lld dropped, %lld differ\n", ok ? "ok" : "FAIL", what,
           (long long)zeros, (long long)n, (long long)bad);
    ct_tally(ok);
}

/* run index: 0 = CPU, 1 and 2 = CUDA */
static struct loom_backend *backend_of(int r) { return r == 0 ? g_cpu : g_gpu; }

/* ---- elementwise ---- */

static void test_elementwise(int64_t n) {
    float *a = ct_randn(n, 1, 1.0f, 0.0f), *b = ct_randn(n, 2, 1.0f, 0.0f);
    float *res[3][3];
    double ss[3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *da = ct_dputf(be, a, n), *db = ct_dputf(be, b, n), *dy = ct_dputf(be, NULL, n);
        ss[r] = loom_op(be, sumsq, da, n);
        loom_op(be, add, dy, da, db, n);
        loom_op(be, axpy, da, -0.75f, db, n);
        loom_op(be, scale, db, 1.3f, n);
        res[r][0] = dtake(be, dy, n);
        res[r][1] = dtake(be, da, n);
        res[r][2] = dtake(be, db, n);
    }
    char name[96];
    snprintf(name, sizeof name, "add n=%lld", (long long)n);
    compare(name, res[1][0], res[0][0], res[2][0], n, GATE_ELEM, 1e-5);
    compare("axpy", res[1][1], res[0][1], res[2][1], n, GATE_ELEM, 1e-5);
    compare("scale", res[1][2], res[0][2], res[2][2], n, GATE_ELEM, 1e-5);
    double e = fabs(ss[1] - ss[0]) / ss[0];
    printf("%-4s %-56s rel %.2e  (<= 1e-12)%s\n", e <= 1e-12 && ss[1] == ss[2] ? "ok" : "FAIL",
           "sumsq (double)", e, ss[1] == ss[2] ? "" : "  NOT DETERMINISTIC");
    ct_tally(e <= 1e-12 && ss[1] == ss[2]);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++) free(res[r][k]);
    free(a);
    free(b);
}

/* sumsq_ranges over ranges of mixed sizes (empty, one piece, several pieces, unaligned),
 * against the sum of the exact per-range sums of squares computed here in long double; and its
 * count of zeros (every 7th element made +0 or -0, some inside the ranges, some between them)
 * against the count made here. */
static void test_sumsq_ranges(void) {
    const int64_t off[] = {0, 16, 5000, 5000, 40000, 123457};
    const int64_t len[] = {7, 4000, 0, 1, 70001, 33333};
    const int nr = 6;
    int64_t n = 123457 + 33333;
    float *a = ct_randn(n, 3, 1.0f, 0.25f);
    for (int64_t i = 0; i < n; i += 7)
        a[i] = i % 2 ? -0.0f : 0.0f;
    long double want = 0;
    int64_t want_zeros = 0;
    for (int k = 0; k < nr; k++)
        for (int64_t i = off[k]; i < off[k] + len[k]; i++) {
            want += (long double)a[i] * a[i];
            want_zeros += a[i] == 0.0f;
        }
    double got[3];
    int64_t zeros[3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *da = ct_dputf(be, a, n);
        got[r] = loom_op(be, sumsq_ranges, da, off, len, nr, r == 2 ? NULL : &zeros[r]);
        be->ops->free(be, da);
    }
    for (int r = 0; r < 2; r++) {
        double e = fabs((double)((got[r] - want) / want));
        int ok = e <= 1e-12 && (r == 0 || got[1] == got[2]);
        printf("%-4s %-56s rel %.2e  (<= 1e-12)%s\n", ok ? "ok" : "FAIL",
               r == 0 ? "sumsq_ranges cpu (double)" : "sumsq_ranges cuda (double)", e,
               r == 1 && got[1] != got[2] ? "  NOT DETERMINISTIC" : "");
        ct_tally(ok);
        ok = zeros[r] == want_zeros;
        printf("%-4s %-56s %lld of %lld\n", ok ? "ok" : "FAIL",
               r == 0 ? "sumsq_ranges cpu: zeros counted" : "sumsq_ranges cuda: zeros counted",
               (long long)zeros[r], (long long)want_zeros);
        ct_tally(ok);
    }
    free(a);
}

/* ---- embedding ---- */

/* docs: per-token positions, restarting at each document (ct_docs) */
static void test_embedding_docs(int64_t B, int64_t T, int64_t C, int64_t V, int64_t v0, int64_t Vl,
                                int64_t pos0, int docs) {
    int64_t N = B * T, Tmax = pos0 + T + 3;
    int32_t *doc = docs ? ct_docs(B, T) : NULL;
    int32_t *hpos = docs ? ct_doc_positions(doc, B, T) : NULL;
    int32_t *tok = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) {
        uint32_t w[4];
        loom_rng_u32x4(7, 11, (uint64_t)i, w);
        tok[i] = (int32_t)(w[0] % (uint32_t)V);
        if (i % 7 == 3) tok[i] = (int32_t)(v0 + 1); /* a token repeated many times */
    }
    float *wte = ct_randn(Vl * C, 20, 0.1f, 0.0f), *wpe = ct_randn(Tmax * C, 21, 0.1f, 0.0f);
    float *dout = ct_randn(N * C, 22, 1.0f, 0.0f);
    float *dwte0 = ct_randn(Vl * C, 23, 0.1f, 0.0f), *dwpe0 = ct_randn(Tmax * C, 24, 0.1f, 0.0f);
    float *res[3][3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        int32_t *dtok = ct_dput(be, tok, (size_t)N * sizeof(int32_t));
        float *dwte = ct_dputf(be, wte, Vl * C), *dwpe = ct_dputf(be, wpe, Tmax * C);
        float *dy = ct_dputf(be, NULL, N * C), *ddout = ct_dputf(be, dout, N * C);
        float *gwte = ct_dputf(be, dwte0, Vl * C), *gwpe = ct_dputf(be, dwpe0, Tmax * C);
        int32_t *dpos = docs ? ct_dput(be, hpos, (size_t)N * sizeof(int32_t)) : NULL;
        loom_op(be, embedding_forward, dy, dtok, dpos, dwte, dwpe, B, T, C, v0, Vl, pos0);
        loom_op(be, embedding_backward, gwte, gwpe, ddout, dtok, dpos, B, T, C, v0, Vl, pos0);
        if (dpos) be->ops->free(be, dpos);
        res[r][0] = dtake(be, dy, N * C);
        res[r][1] = dtake(be, gwte, Vl * C);
        res[r][2] = dtake(be, gwpe, Tmax * C);
        be->ops->free(be, dtok);
        be->ops->free(be, dwte);
        be->ops->free(be, dwpe);
        be->ops->free(be, ddout);
    }
    char name[96];
    snprintf(name, sizeof name, "embedding fwd B=%lld T=%lld C=%lld shard %lld+%lld%s",
             (long long)B, (long long)T, (long long)C, (long long)v0, (long long)Vl,
             docs ? " doc positions" : "");
    compare(name, res[1][0], res[0][0], res[2][0], N * C, GATE_ELEM, 1e-5);
    compare("embedding bwd dwte", res[1][1], res[0][1], res[2][1], Vl * C, GATE_NORM, 1e-5);
    compare(docs ? "embedding bwd dwpe (rows shared by the documents' tokens)"
                 : "embedding bwd dwpe",
            res[1][2], res[0][2], res[2][2], Tmax * C, GATE_NORM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++) free(res[r][k]);
    free(doc);
    free(hpos);
    free(tok);
    free(wte);
    free(wpe);
    free(dout);
    free(dwte0);
    free(dwpe0);
}

/* ---- norms ---- */

static void test_layernorm(int64_t N, int64_t C, int with_bias) {
    float *x = ct_randn(N * C, 30, 2.0f, 3.0f), *w = ct_randn(C, 31, 0.5f, 1.0f);
    float *bias = ct_randn(C, 32, 0.5f, 0.0f), *dout = ct_randn(N * C, 33, 1.0f, 0.0f);
    float *dx0 = ct_randn(N * C, 34, 1.0f, 0.0f), *dw0 = ct_randn(C, 35, 1.0f, 0.0f);
    float *db0 = ct_randn(C, 36, 1.0f, 0.0f);
    float *res[3][6];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dx_ = ct_dputf(be, x, N * C), *dw_ = ct_dputf(be, w, C);
        float *db_ = with_bias ? ct_dputf(be, bias, C) : NULL;
        float *out = ct_dputf(be, NULL, N * C), *mean = ct_dputf(be, NULL, N),
              *rstd = ct_dputf(be, NULL, N);
        float *ddout = ct_dputf(be, dout, N * C), *gx = ct_dputf(be, dx0, N * C);
        float *gw = ct_dputf(be, dw0, C), *gb = ct_dputf(be, db0, C);
        loom_op(be, layernorm_forward, out, LOOM_DTYPE_F32, mean, rstd, dx_, dw_, db_, N, C, 1e-5f);
        loom_op(be, layernorm_backward, gx, NULL, NULL, gw, gb, ddout, LOOM_DTYPE_F32, dx_, dw_,
                mean, rstd, N, C);
        res[r][0] = dtake(be, out, N * C);
        res[r][1] = dtake(be, mean, N);
        res[r][2] = dtake(be, rstd, N);
        res[r][3] = dtake(be, gx, N * C);
        res[r][4] = dtake(be, gw, C);
        res[r][5] = dtake(be, gb, C);
        be->ops->free(be, dx_);
        be->ops->free(be, dw_);
        if (db_) be->ops->free(be, db_);
        be->ops->free(be, ddout);
    }
    char name[96];
    snprintf(name, sizeof name, "layernorm fwd N=%lld C=%lld%s", (long long)N, (long long)C,
             with_bias ? "" : " (no bias)");
    compare(name, res[1][0], res[0][0], res[2][0], N * C, GATE_NORM, 1e-5);
    compare("layernorm fwd mean", res[1][1], res[0][1], res[2][1], N, GATE_ELEM, 1e-5);
    compare("layernorm fwd rstd", res[1][2], res[0][2], res[2][2], N, GATE_ELEM, 1e-5);
    compare("layernorm bwd dinp (accumulated)", res[1][3], res[0][3], res[2][3], N * C, GATE_NORM,
            1e-5);
    compare("layernorm bwd dw", res[1][4], res[0][4], res[2][4], C, GATE_NORM, 1e-5);
    compare("layernorm bwd db", res[1][5], res[0][5], res[2][5], C, GATE_NORM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 6; k++) free(res[r][k]);
    free(x);
    free(w);
    free(bias);
    free(dout);
    free(dx0);
    free(dw0);
    free(db0);
}

static void test_rmsnorm(int64_t N, int64_t C) {
    float *x = ct_randn(N * C, 40, 2.0f, 0.5f), *w = ct_randn(C, 41, 0.5f, 1.0f);
    float *dout = ct_randn(N * C, 43, 1.0f, 0.0f), *dx0 = ct_randn(N * C, 44, 1.0f, 0.0f);
    float *dw0 = ct_randn(C, 45, 1.0f, 0.0f);
    float *res[3][4];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dx_ = ct_dputf(be, x, N * C), *dw_ = ct_dputf(be, w, C);
        float *out = ct_dputf(be, NULL, N * C), *rstd = ct_dputf(be, NULL, N);
        float *ddout = ct_dputf(be, dout, N * C), *gx = ct_dputf(be, dx0, N * C),
              *gw = ct_dputf(be, dw0, C);
        loom_op(be, rmsnorm_forward, out, LOOM_DTYPE_F32, rstd, dx_, dw_, N, C, 1e-6f);
        loom_op(be, rmsnorm_backward, gx, NULL, NULL, gw, ddout, LOOM_DTYPE_F32, dx_, dw_, rstd, N,
                C);
        res[r][0] = dtake(be, out, N * C);
        res[r][1] = dtake(be, rstd, N);
        res[r][2] = dtake(be, gx, N * C);
        res[r][3] = dtake(be, gw, C);
        be->ops->free(be, dx_);
        be->ops->free(be, dw_);
        be->ops->free(be, ddout);
    }
    char name[96];
    snprintf(name, sizeof name, "rmsnorm fwd N=%lld C=%lld", (long long)N, (long long)C);
    compare(name, res[1][0], res[0][0], res[2][0], N * C, GATE_NORM, 1e-5);
    compare("rmsnorm fwd rstd", res[1][1], res[0][1], res[2][1], N, GATE_ELEM, 1e-5);
    compare("rmsnorm bwd dinp (accumulated)", res[1][2], res[0][2], res[2][2], N * C, GATE_NORM,
            1e-5);
    compare("rmsnorm bwd dw", res[1][3], res[0][3], res[2][3], C, GATE_NORM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 4; k++) free(res[r][k]);
    free(x);
    free(w);
    free(dout);
    free(dx0);
    free(dw0);
}

/* ---- linear ---- */

static void test_linear(int64_t N, int64_t C, int64_t OC, int with_bias, int with_dinp) {
    float *x = ct_randn(N * C, 50, 1.0f, 0.0f), *w = ct_randn(OC * C, 51, 0.05f, 0.0f);
    float *bias = ct_randn(OC, 52, 0.5f, 0.0f), *dout = ct_randn(N * OC, 53, 1.0f, 0.0f);
    float *dw0 = ct_randn(OC * C, 54, 1.0f, 0.0f), *db0 = ct_randn(OC, 55, 1.0f, 0.0f);
    float *res[3][4] = {{0}};
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dx_ = ct_dputf(be, x, N * C), *dw_ = ct_dputf(be, w, OC * C);
        float *db_ = with_bias ? ct_dputf(be, bias, OC) : NULL;
        float *out = ct_dputf(be, NULL, N * OC), *ddout = ct_dputf(be, dout, N * OC);
        float *gx = with_dinp ? ct_dputf(be, NULL, N * C) : NULL;
        float *gw = ct_dputf(be, dw0, OC * C), *gb = with_bias ? ct_dputf(be, db0, OC) : NULL;
        loom_op(be, linear_forward, out, dx_, dw_, db_, N, C, OC);
        loom_op(be, linear_backward, gx, gw, gb, ddout, dx_, dw_, N, C, OC);
        res[r][0] = dtake(be, out, N * OC);
        if (gx) res[r][1] = dtake(be, gx, N * C);
        res[r][2] = dtake(be, gw, OC * C);
        if (gb) res[r][3] = dtake(be, gb, OC);
        be->ops->free(be, dx_);
        be->ops->free(be, dw_);
        if (db_) be->ops->free(be, db_);
        be->ops->free(be, ddout);
    }
    char name[96];
    snprintf(name, sizeof name, "linear fwd N=%lld C=%lld OC=%lld%s", (long long)N, (long long)C,
             (long long)OC, with_bias ? "" : " (no bias)");
    compare(name, res[1][0], res[0][0], res[2][0], N * OC, GATE_NORM, 1e-5);
    if (with_dinp)
        compare("linear bwd dinp", res[1][1], res[0][1], res[2][1], N * C, GATE_NORM, 1e-5);
    compare("linear bwd dw (accumulated)", res[1][2], res[0][2], res[2][2], OC * C, GATE_NORM,
            1e-5);
    if (with_bias)
        compare("linear bwd db (accumulated)", res[1][3], res[0][3], res[2][3], OC, GATE_NORM,
                1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 4; k++) free(res[r][k]);
    free(x);
    free(w);
    free(bias);
    free(dout);
    free(dw0);
    free(db0);
}

/* ---- rotary embeddings and attention ---- */

/* docs: per-token positions, restarting at each document (ct_docs) */
static void test_rope_with(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                           int docs, const struct loom_rope *rot) {
    int64_t n = B * T * (NH + 2 * NKV) * HS;
    float *x = ct_randn(n, 60, 1.0f, 0.0f);
    int32_t *doc = docs ? ct_docs(B, T) : NULL;
    int32_t *hpos = docs ? ct_doc_positions(doc, B, T) : NULL;
    float *res[3][2];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *d = ct_dputf(be, x, n);
        int32_t *dpos = docs ? ct_dput(be, hpos, (size_t)(B * T) * sizeof(int32_t)) : NULL;
        loom_op(be, rope, d, LOOM_DTYPE_F32, dpos, B, T, NH, NKV, HS, pos0, rot, 0);
        res[r][0] = ct_dgetf(be, d, n);
        loom_op(be, rope, d, LOOM_DTYPE_F32, dpos, B, T, NH, NKV, HS, pos0, rot, 1);
        res[r][1] = dtake(be, d, n);
        if (dpos) be->ops->free(be, dpos);
    }
    free(doc);
    free(hpos);
    char name[160];
    snprintf(name, sizeof name, "rope B=%lld T=%lld NH=%lld NKV=%lld HS=%lld pos0=%lld%s%s%s",
             (long long)B, (long long)T, (long long)NH, (long long)NKV, (long long)HS,
             (long long)pos0, docs ? " doc positions" : "", rot->dims ? " partial" : "",
             rot->factor > 0 ? " llama3 scaling" : rot->interpolation > 0 ? " interpolated" : "");
    compare(name, res[1][0], res[0][0], res[2][0], n, GATE_NORM, 1e-5);
    compare("rope inverse", res[1][1], res[0][1], res[2][1], n, GATE_NORM, 1e-5);
    double back = 0.0;
    for (int64_t i = 0; i < n; i++) back = fmax(back, fabs((double)res[1][1][i] - x[i]));
    ct_check_true("rope inverse(rope(x)) == x within 1e-5 on cuda", back <= 1e-5);
    for (int r = 0; r < 3; r++) {
        free(res[r][0]);
        free(res[r][1]);
    }
    free(x);
}

/* docs: the document mask of ct_docs (causal only) */
static void test_attention_docs(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                int causal, float dropout_p, int docs) {
    struct loom_attn a = {.B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS, .causal = causal,
                          .scale = 1.0f / sqrtf((float)HS), .dropout_p = dropout_p,
                          .seed = 99, .key = 0xa77e, .sample0 = 3, .head0 = 2,
                          .NH_global = NH + 4};
    int32_t *doc = docs ? ct_docs(B, T) : NULL;
    int64_t R = (NH + 2 * NKV) * HS, nqkv = B * T * R, nout = B * T * NH * HS, nlse = B * NH * T;
    float *qkv = ct_randn(nqkv, 70, 1.0f, 0.0f), *dout = ct_randn(nout, 71, 1.0f, 0.0f);
    float *res[3][3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dq = ct_dputf(be, qkv, nqkv), *out = ct_dputf(be, NULL, nout);
        float *lse = ct_dputf(be, NULL, nlse);
        float *ddout = ct_dputf(be, dout, nout), *dqkv = ct_dputf(be, NULL, nqkv);
        /* dqkv is assigned: poison it so that an element left unwritten shows */
        float *poison = ct_alloc((size_t)nqkv * sizeof(float));
        for (int64_t i = 0; i < nqkv; i++) poison[i] = NAN;
        be->ops->to_device(be, dqkv, poison, (size_t)nqkv * sizeof(float));
        free(poison);
        int32_t *ddoc = docs ? ct_dput(be, doc, (size_t)(B * T) * sizeof(int32_t)) : NULL;
        a.doc_start = ddoc;
        loom_op(be, attention_forward, out, lse, dq, &a);
        loom_op(be, attention_backward, dqkv, ddout, out, lse, dq, &a);
        res[r][0] = dtake(be, out, nout);
        res[r][1] = dtake(be, lse, nlse);
        res[r][2] = dtake(be, dqkv, nqkv);
        be->ops->free(be, dq);
        be->ops->free(be, ddout);
        if (ddoc) be->ops->free(be, ddoc);
    }
    free(doc);
    char name[120];
    snprintf(name, sizeof name, "attention fwd B=%lld T=%lld NH=%lld NKV=%lld HS=%lld %s p=%.2f",
             (long long)B, (long long)T, (long long)NH, (long long)NKV, (long long)HS,
             docs     ? "documents"
             : causal ? "causal"
                      : "bidir",
             dropout_p);
    compare(name, res[1][0], res[0][0], res[2][0], nout, GATE_NORM, 1e-5);
    /* lse = max + log(sum): an absolute quantity (row 0 of a causal mask is one score) */
    compare("attention fwd lse", res[1][1], res[0][1], res[2][1], nlse, GATE_NORM, 1e-5);
    compare("attention bwd dqkv", res[1][2], res[0][2], res[2][2], nqkv, GATE_NORM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++) free(res[r][k]);
    free(qkv);
    free(dout);
}

static void test_attention(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int causal,
                           float dropout_p) {
    test_attention_docs(B, T, NH, NKV, HS, causal, dropout_p, 0);
}

static void test_embedding(int64_t B, int64_t T, int64_t C, int64_t V, int64_t v0, int64_t Vl,
                           int64_t pos0) {
    test_embedding_docs(B, T, C, V, v0, Vl, pos0, 0);
}

static const struct loom_rope rope_plain = {.theta = 10000.0};
static void test_rope_docs(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                           int docs) {
    test_rope_with(B, T, NH, NKV, HS, pos0, docs, &rope_plain);
}
static void test_rope(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0) {
    test_rope_docs(B, T, NH, NKV, HS, pos0, 0);
}

static void test_decode(int64_t L, int64_t NH, int64_t NKV, int64_t HS) {
    float *q = ct_randn(NH * HS, 130, 1.0f, 0.0f), *k = ct_randn(L * NKV * HS, 131, 1.0f, 0.0f);
    float *v = ct_randn(L * NKV * HS, 132, 1.0f, 0.0f);
    float *res[3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dq = ct_dputf(be, q, NH * HS), *dk = ct_dputf(be, k, L * NKV * HS);
        float *dv = ct_dputf(be, v, L * NKV * HS), *out = ct_dputf(be, NULL, NH * HS);
        loom_op(be, attention_decode, out, dq, dk, dv, L, NH, NKV, HS, 1.0f / sqrtf((float)HS));
        res[r] = dtake(be, out, NH * HS);
        be->ops->free(be, dq);
        be->ops->free(be, dk);
        be->ops->free(be, dv);
    }
    char name[96];
    snprintf(name, sizeof name, "attention decode L=%lld NH=%lld NKV=%lld HS=%lld", (long long)L,
             (long long)NH, (long long)NKV, (long long)HS);
    compare(name, res[1], res[0], res[2], NH * HS, GATE_NORM, 1e-5);
    for (int r = 0; r < 3; r++) free(res[r]);
    free(q);
    free(k);
    free(v);
}

/* ---- activations and dropout ---- */

static void test_activations(int64_t N, int64_t F) {
    int64_t n = N * F;
    float *x = ct_randn(2 * n, 80, 2.0f, 0.0f), *dout = ct_randn(2 * n, 81, 1.0f, 0.0f);
    float *res[3][6];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dx_ = ct_dputf(be, x, 2 * n), *ddout = ct_dputf(be, dout, 2 * n);
        float *y = ct_dputf(be, NULL, 2 * n), *g = ct_dputf(be, NULL, 2 * n);
        float *ys = ct_dputf(be, NULL, n), *gs = ct_dputf(be, NULL, 2 * n);
        for (int f = LOOM_GELU_ERF; f >= LOOM_GELU_TANH; f--) { /* the erf form into res 4, 5 */
            loom_op(be, gelu_forward, (enum loom_gelu)f, y, dx_, 2 * n);
            loom_op(be, gelu_backward, (enum loom_gelu)f, g, ddout, dx_, 2 * n);
            if (f == LOOM_GELU_ERF) {
                res[r][4] = ct_dgetf(be, y, 2 * n);
                res[r][5] = ct_dgetf(be, g, 2 * n);
            }
        }
        loom_op(be, swiglu_forward, ys, dx_, LOOM_DTYPE_F32, N, F);
        loom_op(be, swiglu_backward, gs, ddout, dx_, LOOM_DTYPE_F32, N, F);
        res[r][0] = dtake(be, y, 2 * n);
        res[r][1] = dtake(be, g, 2 * n);
        res[r][2] = dtake(be, ys, n);
        res[r][3] = dtake(be, gs, 2 * n);
        be->ops->free(be, dx_);
        be->ops->free(be, ddout);
    }
    char name[96];
    snprintf(name, sizeof name, "gelu fwd n=%lld", (long long)(2 * n));
    compare(name, res[1][0], res[0][0], res[2][0], 2 * n, GATE_ELEM, 1e-5);
    /* the derivative crosses zero near x = -0.75: measured normwise */
    compare("gelu bwd", res[1][1], res[0][1], res[2][1], 2 * n, GATE_NORM, 1e-5);
    compare("gelu erf fwd", res[1][4], res[0][4], res[2][4], 2 * n, GATE_ELEM, 1e-5);
    compare("gelu erf bwd", res[1][5], res[0][5], res[2][5], 2 * n, GATE_NORM, 1e-5);
    snprintf(name, sizeof name, "swiglu fwd N=%lld F=%lld", (long long)N, (long long)F);
    compare(name, res[1][2], res[0][2], res[2][2], n, GATE_ELEM, 1e-5);
    compare("swiglu bwd", res[1][3], res[0][3], res[2][3], 2 * n, GATE_NORM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 6; k++)
            free(res[r][k]);
    free(x);
    free(dout);
}

static void test_dropout(int64_t B, int64_t T, int64_t C, float p) {
    struct loom_dropout d = {.p = p, .seed = 5, .key = 77, .sample0 = 4, .pos0 = 16,
                             .T_global = T + 32, .feat0 = 64, .C_global = C + 128};
    int64_t n = B * T * C;
    float *x = ct_randn(n, 90, 1.0f, 0.0f), *dout = ct_randn(n, 91, 1.0f, 0.0f);
    float *res[3][3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dx_ = ct_dputf(be, x, n), *ddout = ct_dputf(be, dout, n), *y = ct_dputf(be, NULL, n);
        float *g = ct_dputf(be, NULL, n);
        loom_op(be, dropout_forward, y, dx_, B, T, C, &d);
        loom_op(be, dropout_backward, g, ddout, B, T, C, &d);
        loom_op(be, dropout_forward, dx_, dx_, B, T, C, &d); /* in place */
        res[r][0] = dtake(be, y, n);
        res[r][1] = dtake(be, g, n);
        res[r][2] = dtake(be, dx_, n);
        be->ops->free(be, ddout);
    }
    char name[96];
    snprintf(name, sizeof name, "dropout fwd B=%lld T=%lld C=%lld p=%.2f", (long long)B,
             (long long)T, (long long)C, p);
    compare(name, res[1][0], res[0][0], res[2][0], n, GATE_ELEM, 1e-5);
    compare_mask("dropout fwd mask", res[1][0], res[0][0], n);
    compare("dropout bwd", res[1][1], res[0][1], res[2][1], n, GATE_ELEM, 1e-5);
    compare("dropout fwd in place", res[1][2], res[0][2], res[2][2], n, GATE_ELEM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++) free(res[r][k]);
    free(x);
    free(dout);
}

/* ---- cross-entropy ---- */

static void test_xent(int64_t N, int64_t Vl, int64_t Vvalid, int64_t v0, int64_t V) {
    float *logits = ct_randn(N * Vl, 100, 3.0f, 0.0f), *dloss = ct_randn(N, 101, 0.1f, 0.05f);
    int32_t *tgt = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) {
        uint32_t w[4];
        loom_rng_u32x4(8, 12, (uint64_t)i, w);
        tgt[i] = (int32_t)(w[0] % (uint32_t)V);
        if (i % 5 == 0) tgt[i] = (int32_t)(v0 + w[1] % (uint32_t)Vvalid); /* in this shard */
        if (i % 11 == 0) tgt[i] = -1;                                      /* ignored */
    }
    /* global (max, sumexp) as the caller would combine them, here from this shard alone */
    float *gstats = ct_alloc((size_t)(2 * N) * sizeof(float));
    for (int64_t i = 0; i < N; i++) {
        double m = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < Vvalid; j++) m = fmax(m, logits[i * Vl + j]);
        for (int64_t j = 0; j < Vvalid; j++) s += exp(logits[i * Vl + j] - m);
        gstats[2 * i] = (float)m;
        gstats[2 * i + 1] = (float)s;
    }
    float *res[3][3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dl = ct_dputf(be, logits, N * Vl), *dd = ct_dputf(be, dloss, N);
        int32_t *dt = ct_dput(be, tgt, (size_t)N * sizeof(int32_t));
        float *dg = ct_dputf(be, gstats, 2 * N), *st = ct_dputf(be, NULL, 3 * N);
        float *grad = ct_dputf(be, NULL, N * Vl);
        loom_op(be, xent_forward, st, dl, dt, N, Vl, v0, Vvalid);
        loom_op(be, xent_backward, grad, dl, dt, dg, dd, N, Vl, v0, Vvalid);
        loom_op(be, xent_backward, dl, dl, dt, dg, dd, N, Vl, v0, Vvalid); /* in place */
        res[r][0] = dtake(be, st, 3 * N);
        res[r][1] = dtake(be, grad, N * Vl);
        res[r][2] = dtake(be, dl, N * Vl);
        be->ops->free(be, dd);
        be->ops->free(be, dt);
        be->ops->free(be, dg);
    }
    /* stats: the maxima and target logits are exact; the sums are compared elementwise */
    char name[120];
    snprintf(name, sizeof name, "xent fwd stats N=%lld Vl=%lld Vvalid=%lld v0=%lld", (long long)N,
             (long long)Vl, (long long)Vvalid, (long long)v0);
    compare(name, res[1][0], res[0][0], res[2][0], 3 * N, GATE_ELEM, 1e-5);
    compare("xent bwd dlogits", res[1][1], res[0][1], res[2][1], N * Vl, GATE_NORM, 1e-5);
    compare("xent bwd dlogits in place", res[1][2], res[0][2], res[2][2], N * Vl, GATE_NORM, 1e-5);
    int pad_zero = 1;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = Vvalid; j < Vl; j++)
            if (res[1][1][i * Vl + j] != 0.0f) pad_zero = 0;
    ct_check_true("xent bwd padded columns are 0 on cuda", pad_zero);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++) free(res[r][k]);
    free(logits);
    free(dloss);
    free(tgt);
    free(gstats);
}

/* ---- AdamW ---- */

static void test_adamw(int64_t n) {
    float *p = ct_randn(n, 110, 0.5f, 0.0f), *g = ct_randn(n, 111, 1.0f, 0.0f);
    float *m = ct_randn(n, 112, 0.1f, 0.0f), *v = ct_randn(n, 113, 0.1f, 0.0f);
    for (int64_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    float *res[3][3];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dp = ct_dputf(be, p, n), *dg = ct_dputf(be, g, n), *dm = ct_dputf(be, m, n);
        float *dv = ct_dputf(be, v, n);
        for (int64_t step = 3; step <= 5; step++)
            loom_op(be, adamw, dp, dg, dm, dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
        res[r][0] = dtake(be, dp, n);
        res[r][1] = dtake(be, dm, n);
        res[r][2] = dtake(be, dv, n);
        be->ops->free(be, dg);
    }
    char name[96];
    snprintf(name, sizeof name, "adamw param n=%lld (3 steps)", (long long)n);
    compare(name, res[1][0], res[0][0], res[2][0], n, GATE_ELEM, 1e-5);
    compare("adamw m", res[1][1], res[0][1], res[2][1], n, GATE_ELEM, 1e-5);
    compare("adamw v", res[1][2], res[0][2], res[2][2], n, GATE_ELEM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 3; k++) free(res[r][k]);
    free(p);
    free(g);
    free(m);
    free(v);
}

/* adamw_ranges, 3 steps over ranges of mixed sizes (one element, unaligned, one, two and a bit
 * over one of cuda's 4096-element pieces, empty, out of address order), weight decay on some,
 * gaps between them: cuda equals the CPU bit for bit on the whole buffers in both runs, equals
 * cuda's adamw on each range, and leaves the gaps as they were. Then the bf16 copy of
 * registered weights follows the op: a bf16 product after adamw_ranges over the weights equals,
 * up to the order of the sums, the product of an unregistered copy of the new weights (a stale
 * copy would be off by the size of the update, lr = 1e-2 against weights of 0.05). */
static void test_adamw_ranges(void) {
    const int64_t off[] = {5, 16, 40, 12000, 4200, 17000, 28000};
    const int64_t len[] = {1, 4097, 0, 4096, 7000, 10001, 8192};
    const uint8_t dec[] = {1, 0, 1, 0, 0, 1, 1};
    const int nr = 7;
    const int64_t n = 28000 + 8192 + 16;
    float *p = ct_randn(n, 114, 0.5f, 0.0f), *m = ct_randn(n, 115, 0.1f, 0.0f);
    float *v = ct_randn(n, 116, 0.1f, 0.0f), *g[3];
    for (int64_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    for (int k = 0; k < 3; k++) g[k] = ct_randn(n, 117 + (uint64_t)k, 1.0f, 0.0f);
    /* the moments packed, the ranges' in reverse order from element 3 (as the distributed
     * optimizer keeps its shard's) */
    int64_t soff[7], at = 3;
    for (int k = nr - 1; k >= 0; k--)
        soff[k] = at, at += len[k];
    float *pm = malloc((size_t)n * sizeof(float)), *pv = malloc((size_t)n * sizeof(float));
    memcpy(pm, m, (size_t)n * sizeof(float));
    memcpy(pv, v, (size_t)n * sizeof(float));
    for (int k = 0; k < nr; k++) { /* the same moments at their packed places */
        memcpy(pm + soff[k], m + off[k], (size_t)len[k] * sizeof(float));
        memcpy(pv + soff[k], v + off[k], (size_t)len[k] * sizeof(float));
    }
    /* CPU, cuda, cuda again, cuda's adamw per range; cuda and CPU with packed moments */
    float *res[6][3];
    static const int which[6] = {0, 1, 2, 1, 1, 0};
    for (int r = 0; r < 6; r++) {
        struct loom_backend *be = backend_of(which[r]);
        float *dp = ct_dputf(be, p, n), *dm = ct_dputf(be, r >= 4 ? pm : m, n),
              *dv = ct_dputf(be, r >= 4 ? pv : v, n);
        float *dg = ct_dputf(be, NULL, n);
        for (int64_t step = 1; step <= 3; step++) {
            be->ops->to_device(be, dg, g[step - 1], (size_t)n * sizeof(float));
            if (r != 3) {
                loom_op(be, adamw_ranges, dp, dg, dm, dv, off, r >= 4 ? soff : NULL, len, dec, nr,
                        1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
                continue;
            }
            for (int k = 0; k < nr; k++)
                loom_op(be, adamw, dp + off[k], dg + off[k], dm + off[k], dv + off[k], len[k],
                        1e-3f, 0.9f, 0.95f, 1e-8f, dec[k] ? 0.1f : 0.0f, step, 0.5f);
        }
        res[r][0] = dtake(be, dp, n);
        res[r][1] = dtake(be, dm, n);
        res[r][2] = dtake(be, dv, n);
        be->ops->free(be, dg);
    }
    static const char *what[3] = {"param", "m", "v"};
    const float *in[3] = {p, m, v};
    char name[128];
    for (int k = 0; k < 3; k++) {
        for (int r = 1; r <= 2; r++) {
            snprintf(name, sizeof name, "adamw_ranges %s, cuda run %d == cpu (bits)", what[k], r);
            ct_exact(name, res[r][k], res[0][k], n);
        }
        snprintf(name, sizeof name, "adamw_ranges %s, cuda == cuda adamw per range (bits)",
                 what[k]);
        ct_exact(name, res[1][k], res[3][k], n);
        snprintf(name, sizeof name, "adamw_ranges %s, packed moments: cuda == cpu (bits)", what[k]);
        ct_exact(name, res[4][k], res[5][k], n);
    }
    snprintf(name, sizeof name, "adamw_ranges, packed moments: param as with one layout (bits)");
    ct_exact(name, res[4][0], res[1][0], n);
    int packed_ok = 1;
    for (int k = 0; k < nr; k++)
        packed_ok &= !memcmp(res[4][1] + soff[k], res[1][1] + off[k], (size_t)len[k] * 4) &&
                     !memcmp(res[4][2] + soff[k], res[1][2] + off[k], (size_t)len[k] * 4);
    ct_check_true("adamw_ranges, packed moments: m, v of each range as with one layout (bits)",
                  packed_ok);
    int64_t gaps = 0, kept = 0;
    for (int64_t i = 0; i < n; i++) {
        int inside = 0;
        for (int k = 0; k < nr; k++) inside |= i >= off[k] && i < off[k] + len[k];
        if (inside) continue;
        gaps++;
        for (int k = 0; k < 3; k++) kept += memcmp(&res[1][k][i], &in[k][i], 4) == 0;
    }
    snprintf(name, sizeof name, "adamw_ranges cuda: the %lld gap elements keep p, m, v",
             (long long)gaps);
    ct_check_true(name, gaps > 0 && kept == 3 * gaps);
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < 3; k++) free(res[r][k]);
    free(pm);
    free(pv);

    /* the bf16 copy: weights w[OC, C] at params + 16, registered */
    const int64_t N = 64, C = 96, OC = 80, np = OC * C + 32;
    struct loom_backend *be = g_gpu;
    float *hw = ct_randn(np, 118, 0.05f, 0.0f), *hx = ct_randn(N * C, 119, 1.0f, 0.0f);
    float *params = ct_dputf(be, hw, np), *x = ct_dputf(be, hx, N * C);
    float *dg = ct_dputf(be, g[0], np), *dm = ct_dputf(be, NULL, np), *dv = ct_dputf(be, NULL, np);
    float *out = ct_dputf(be, NULL, N * OC), *out_ref = ct_dputf(be, NULL, N * OC);
    float *w_copy = ct_dputf(be, NULL, OC * C);
    if (be->ops->set_matmul_dtype(be, LOOM_DTYPE_BF16, params, np) != LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    loom_op(be, linear_forward, out, x, params + 16, NULL, N, C, OC); /* makes the copy */
    const int64_t woff[] = {16, 16 + OC * C / 2}, wlen[] = {OC * C / 2, OC * C - OC * C / 2};
    const uint8_t wdec[] = {1, 0};
    loom_op(be, adamw_ranges, params, dg, dm, dv, woff, NULL, wlen, wdec, 2, 1e-2f, 0.9f, 0.95f,
            1e-8f, 0.1f, 1, 1.0f);
    loom_op(be, linear_forward, out, x, params + 16, NULL, N, C, OC);
    be->ops->copy(be, w_copy, params + 16, (size_t)(OC * C) * sizeof(float));
    loom_op(be, linear_forward, out_ref, x, w_copy, NULL, N, C, OC);
    float *h = ct_dgetf(be, out, N * OC), *h_ref = ct_dgetf(be, out_ref, N * OC);
    float *hw2 = ct_dgetf(be, params, np);
    int64_t moved = 0;
    for (int64_t i = 16; i < 16 + OC * C; i++) moved += fabsf(hw2[i] - hw[i]) > 5e-3f;
    snprintf(name, sizeof name, "adamw_ranges moved the %lld registered weights by > 5e-3",
             (long long)(OC * C));
    ct_check_true(name, moved == OC * C);
    ct_check_norm("bf16 product after adamw_ranges == unregistered copy's", h, h_ref, N * OC,
                  1e-4);
    be->ops->set_matmul_dtype(be, LOOM_DTYPE_F32, NULL, 0);
    float *dbufs[] = {params, x, dg, dm, dv, out, out_ref, w_copy};
    for (int k = 0; k < 8; k++) be->ops->free(be, dbufs[k]);
    float *hbufs[] = {p, m, v, g[0], g[1], g[2], hw, hx, h, h_ref, hw2};
    for (int k = 0; k < 11; k++) free(hbufs[k]);
}

/* ---- fused ops: residual add + norm, linear + GELU ---- */

/* residual_layernorm_forward / residual_rmsnorm_forward, xs over r as the model runs them:
 * against the CPU, and on cuda bit for bit equal to add followed by the norm. */
static void test_residual_norm(int64_t N, int64_t C, int rms) {
    float *x = ct_randn(N * C, 130, 2.0f, 1.0f), *rr = ct_randn(N * C, 131, 1.0f, 0.0f);
    float *w = ct_randn(C, 132, 0.5f, 1.0f), *bias = ct_randn(C, 133, 0.5f, 0.0f);
    float *res[3][4];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dx = ct_dputf(be, x, N * C), *dr = ct_dputf(be, rr, N * C), *dw = ct_dputf(be, w, C);
        float *db = ct_dputf(be, bias, C), *out = ct_dputf(be, NULL, N * C);
        float *mean = ct_dputf(be, NULL, N), *rstd = ct_dputf(be, NULL, N);
        if (rms)
            loom_op(be, residual_rmsnorm_forward, dr, out, LOOM_DTYPE_F32, rstd, dx, dr,
                    LOOM_DTYPE_F32, dw, N, C, 1e-5f);
        else
            loom_op(be, residual_layernorm_forward, dr, out, LOOM_DTYPE_F32, mean, rstd, dx, dr,
                    LOOM_DTYPE_F32, dw, db, N, C, 1e-5f);
        res[r][0] = dtake(be, dr, N * C);
        res[r][1] = dtake(be, out, N * C);
        res[r][2] = dtake(be, mean, N);
        res[r][3] = dtake(be, rstd, N);
        if (r == 2) {
            /* the separate ops on cuda */
            float *s = ct_dputf(be, NULL, N * C), *o = ct_dputf(be, NULL, N * C);
            float *m2 = ct_dputf(be, NULL, N), *r2 = ct_dputf(be, NULL, N);
            float *dr2 = ct_dputf(be, rr, N * C);
            loom_op(be, add, s, dx, dr2, N * C);
            if (rms)
                loom_op(be, rmsnorm_forward, o, LOOM_DTYPE_F32, r2, s, dw, N, C, 1e-5f);
            else
                loom_op(be, layernorm_forward, o, LOOM_DTYPE_F32, m2, r2, s, dw, db, N, C, 1e-5f);
            float *hs = dtake(be, s, N * C), *ho = dtake(be, o, N * C);
            float *hm = dtake(be, m2, N), *hr = dtake(be, r2, N);
            char what[96];
            snprintf(what, sizeof what,
                     "residual %s N=%lld C=%lld on cuda == add + norm, bit for bit",
                     rms ? "rmsnorm" : "layernorm", (long long)N, (long long)C);
            ct_check_true(what, !memcmp(hs, res[1][0], (size_t)(N * C) * sizeof(float)) &&
                                    !memcmp(ho, res[1][1], (size_t)(N * C) * sizeof(float)) &&
                                    (rms || !memcmp(hm, res[1][2], (size_t)N * sizeof(float))) &&
                                    !memcmp(hr, res[1][3], (size_t)N * sizeof(float)));
            free(hs);
            free(ho);
            free(hm);
            free(hr);
            be->ops->free(be, dr2);
        }
        be->ops->free(be, dx);
        be->ops->free(be, dw);
        be->ops->free(be, db);
    }
    char name[96];
    snprintf(name, sizeof name, "residual %s fwd N=%lld C=%lld: xs = x + r",
             rms ? "rmsnorm" : "layernorm", (long long)N, (long long)C);
    compare(name, res[1][0], res[0][0], res[2][0], N * C, GATE_ELEM, 1e-5);
    compare("residual norm fwd out", res[1][1], res[0][1], res[2][1], N * C, GATE_NORM, 1e-5);
    if (!rms)
        compare("residual norm fwd mean", res[1][2], res[0][2], res[2][2], N, GATE_ELEM, 1e-5);
    compare("residual norm fwd rstd", res[1][3], res[0][3], res[2][3], N, GATE_ELEM, 1e-5);
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 4; k++) free(res[r][k]);
    free(x);
    free(rr);
    free(w);
    free(bias);
}

/* The GELU MLP h[N,C] -> gelu(h W1^T + b1) [N,F] -> . W2^T + b2 through linear_gelu_forward,
 * linear_gelu_backward and fc1's linear_backward (without its bias, which linear_gelu_backward
 * sums): against the CPU, and on cuda (fp32) bit for bit equal to the separate ops. */
static void test_linear_gelu(enum loom_gelu form, int64_t N, int64_t C, int64_t F, int with_bias) {
    const char *fn = form == LOOM_GELU_ERF ? "erf" : "tanh";
    float *h = ct_randn(N * C, 140, 1.0f, 0.0f), *w1 = ct_randn(F * C, 141, 0.05f, 0.0f);
    float *b1 = ct_randn(F, 142, 0.5f, 0.0f), *w2 = ct_randn(C * F, 143, 0.05f, 0.0f);
    float *dy = ct_randn(N * C, 144, 1.0f, 0.0f);
    const int64_t ng = 2 * F * C + F + C; /* [dw1 | dw2 | db1 | db2], pre-filled: they accumulate */
    float *g0 = ct_randn(ng, 145, 0.1f, 0.0f);
    float *res[3][5];
    for (int r = 0; r < 3; r++) {
        struct loom_backend *be = backend_of(r);
        float *dh_ = ct_dputf(be, h, N * C), *dw1 = ct_dputf(be, w1, F * C);
        float *db1 = with_bias ? ct_dputf(be, b1, F) : NULL, *dw2 = ct_dputf(be, w2, C * F);
        float *ddy = ct_dputf(be, dy, N * C), *pre = ct_dputf(be, NULL, N * F);
        float *a = ct_dputf(be, NULL, N * F);
        float *dpre = ct_dputf(be, NULL, N * F), *dh = ct_dputf(be, NULL, N * C),
              *g = ct_dputf(be, g0, ng);
        float *gw1 = g, *gw2 = g + F * C, *gb1 = g + 2 * F * C, *gb2 = gb1 + F;
        loom_op(be, linear_gelu_forward, form, a, pre, LOOM_DTYPE_F32, dh_, LOOM_DTYPE_F32, dw1,
                db1, N, C, F);
        loom_op(be, linear_gelu_backward, form, dpre, LOOM_DTYPE_F32, with_bias ? gb1 : NULL, gw2,
                with_bias ? gb2 : NULL, ddy, LOOM_DTYPE_F32, a, pre, dw2, N, F, C);
        loom_op(be, linear_backward, dh, gw1, NULL, dpre, dh_, dw1, N, C, F);
        res[r][0] = dtake(be, a, N * F);
        res[r][1] = dtake(be, pre, N * F);
        res[r][2] = dtake(be, dpre, N * F);
        res[r][3] = dtake(be, dh, N * C);
        res[r][4] = dtake(be, g, ng);
        if (r == 2) {
            /* the separate ops on cuda */
            float *p2 = ct_dputf(be, NULL, N * F), *a2 = ct_dputf(be, NULL, N * F);
            float *da = ct_dputf(be, NULL, N * F), *dp2 = ct_dputf(be, NULL, N * F);
            float *dh2 = ct_dputf(be, NULL, N * C), *g2 = ct_dputf(be, g0, ng);
            loom_op(be, linear_forward, p2, dh_, dw1, db1, N, C, F);
            loom_op(be, gelu_forward, form, a2, p2, N * F);
            loom_op(be, linear_backward, da, g2 + F * C, with_bias ? g2 + 2 * F * C + F : NULL, ddy,
                    a2, dw2, N, F, C);
            loom_op(be, gelu_backward, form, dp2, da, p2, N * F);
            loom_op(be, linear_backward, dh2, g2, with_bias ? g2 + 2 * F * C : NULL, dp2, dh_, dw1,
                    N, C, F);
            float *h2[5] = {dtake(be, a2, N * F), dtake(be, p2, N * F), dtake(be, dp2, N * F),
                            dtake(be, dh2, N * C), dtake(be, g2, ng)};
            const int64_t len[5] = {N * F, N * F, N * F, N * C, ng};
            int eq = 1;
            for (int k = 0; k < 5; k++) {
                eq = eq && !memcmp(h2[k], res[1][k], (size_t)len[k] * sizeof(float));
                free(h2[k]);
            }
            be->ops->free(be, da);
            char what[128];
            snprintf(what, sizeof what,
                     "GELU MLP %s N=%lld C=%lld F=%lld on cuda == separate ops, bit for bit", fn,
                     (long long)N, (long long)C, (long long)F);
            ct_check_true(what, eq);
        }
        be->ops->free(be, dh_);
        be->ops->free(be, dw1);
        if (db1) be->ops->free(be, db1);
        be->ops->free(be, dw2);
        be->ops->free(be, ddy);
    }
    char name[96];
    snprintf(name, sizeof name, "linear_gelu %s fwd N=%lld C=%lld F=%lld%s: out", fn, (long long)N,
             (long long)C, (long long)F, with_bias ? "" : " (no bias)");
    compare(name, res[1][0], res[0][0], res[2][0], N * F, GATE_NORM, 1e-5);
    compare("linear_gelu fwd pre", res[1][1], res[0][1], res[2][1], N * F, GATE_NORM, 1e-5);
    compare("linear_gelu bwd dpre", res[1][2], res[0][2], res[2][2], N * F, GATE_NORM, 1e-5);
    compare("GELU MLP bwd dinp of fc1", res[1][3], res[0][3], res[2][3], N * C, GATE_NORM, 1e-5);
    compare("GELU MLP bwd dw1", res[1][4], res[0][4], res[2][4], F * C, GATE_NORM, 1e-5);
    compare("GELU MLP bwd dw2", res[1][4] + F * C, res[0][4] + F * C, res[2][4] + F * C, F * C,
            GATE_NORM, 1e-5);
    if (with_bias) {
        compare("GELU MLP bwd db1 (linear_gelu_backward's dpre_b)", res[1][4] + 2 * F * C,
                res[0][4] + 2 * F * C, res[2][4] + 2 * F * C, F, GATE_NORM, 1e-5);
        compare("GELU MLP bwd db2", res[1][4] + 2 * F * C + F, res[0][4] + 2 * F * C + F,
                res[2][4] + 2 * F * C + F, C, GATE_NORM, 1e-5);
    }
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 5; k++) free(res[r][k]);
    free(h);
    free(w1);
    free(b1);
    free(w2);
    free(dy);
    free(g0);
}

/* ---- timings (information only) ---- */

static double time_ms(double t0) { return (loom_time_s() - t0) * 1e3; }

/* mean milliseconds of `stmt` over `iters` runs after two warm-up runs, the stream drained */
#define BENCH_MS(be, iters, ms, stmt)                                                         \
    do {                                                                                      \
        ms = 0.0;                                                                             \
        for (int it_ = -2; it_ < (iters); it_++) {                                            \
            (be)->ops->synchronize(be);                                                       \
            double t0_ = loom_time_s();                                                       \
            stmt;                                                                             \
            (be)->ops->synchronize(be);                                                       \
            if (it_ >= 0) ms += time_ms(t0_) / (iters);                                       \
        }                                                                                     \
    } while (0)

/* memory-bound ops at GPT-2 124M shapes: time and effective bandwidth (bytes each op must move) */
static void bench_memory_bound(struct loom_backend *be, int64_t B, int64_t T, int64_t C,
                               int iters) {
    const int64_t N = B * T, V = 50257, Vp = 50304, F = 4 * C, P = 124000000;
    double ms, ms2;
    float *x = ct_dputf(be, NULL, N * F), *y = ct_dputf(be, NULL, N * F),
          *g = ct_dputf(be, NULL, N * F);
    float *w = ct_dputf(be, NULL, C), *b = ct_dputf(be, NULL, C), *dw = ct_dputf(be, NULL, C);
    float *db = ct_dputf(be, NULL, C), *mean = ct_dputf(be, NULL, N), *rstd = ct_dputf(be, NULL, N);
    float *ones = ct_randn(C, 140, 0.0f, 1.0f);
    be->ops->to_device(be, w, ones, (size_t)C * sizeof(float));
    free(ones);
    BENCH_MS(be, iters, ms,
             loom_op(be, layernorm_forward, y, LOOM_DTYPE_F32, mean, rstd, x, w, b, N, C, 1e-5f));
    BENCH_MS(be, iters, ms2,
             loom_op(be, layernorm_backward, g, NULL, NULL, dw, db, y, LOOM_DTYPE_F32, x, w, mean,
                     rstd, N, C));
    printf("  layernorm N=%lld C=%lld: fwd %7.3f ms (%6.0f GB/s)  bwd %7.3f ms (%6.0f GB/s)\n",
           (long long)N, (long long)C, ms, 8.0 * N * C / ms * 1e-6, ms2,
           16.0 * N * C / ms2 * 1e-6);
    BENCH_MS(be, iters, ms, loom_op(be, gelu_forward, LOOM_GELU_TANH, y, x, N * F));
    BENCH_MS(be, iters, ms2, loom_op(be, gelu_backward, LOOM_GELU_TANH, g, y, x, N * F));
    printf("  gelu n=%lld: fwd %7.3f ms (%6.0f GB/s)  bwd %7.3f ms (%6.0f GB/s)\n",
           (long long)(N * F), ms, 8.0 * N * F / ms * 1e-6, ms2, 12.0 * N * F / ms2 * 1e-6);
    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->free(be, g);

    /* embedding: random tokens */
    int32_t *tok = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) {
        uint32_t r4[4];
        loom_rng_u32x4(9, 13, (uint64_t)i, r4);
        tok[i] = (int32_t)(r4[0] % (uint32_t)V);
    }
    int32_t *dtok = ct_dput(be, tok, (size_t)N * sizeof(int32_t));
    free(tok);
    float *wte = ct_dputf(be, NULL, Vp * C), *wpe = ct_dputf(be, NULL, T * C);
    float *out = ct_dputf(be, NULL, N * C);
    BENCH_MS(be, iters, ms,
             loom_op(be, embedding_forward, out, dtok, NULL, wte, wpe, B, T, C, 0, Vp, 0));
    BENCH_MS(be, iters, ms2,
             loom_op(be, embedding_backward, wte, wpe, out, dtok, NULL, B, T, C, 0, Vp, 0));
    printf("  embedding B=%lld T=%lld V=%lld: fwd %7.3f ms  bwd %7.3f ms\n", (long long)B,
           (long long)T, (long long)Vp, ms, ms2);
    be->ops->free(be, wte);
    be->ops->free(be, wpe);
    be->ops->free(be, out);

    /* cross-entropy over the padded vocabulary */
    float *logits = ct_dputf(be, NULL, N * Vp), *stats = ct_dputf(be, NULL, 3 * N);
    float *gst = ct_dputf(be, NULL, 2 * N), *dl = ct_dputf(be, NULL, N);
    float *gs_h = ct_alloc((size_t)(2 * N) * sizeof(float));
    for (int64_t i = 0; i < N; i++) {
        gs_h[2 * i] = 0.0f;
        gs_h[2 * i + 1] = (float)V;
    }
    be->ops->to_device(be, gst, gs_h, (size_t)(2 * N) * sizeof(float));
    free(gs_h);
    BENCH_MS(be, iters, ms, loom_op(be, xent_forward, stats, logits, dtok, N, Vp, 0, V));
    BENCH_MS(be, iters, ms2,
             loom_op(be, xent_backward, logits, logits, dtok, gst, dl, N, Vp, 0, V));
    printf("  xent N=%lld V=%lld: fwd %7.3f ms (%6.0f GB/s)  bwd in place %7.3f ms (%6.0f GB/s)\n",
           (long long)N, (long long)Vp, ms, 4.0 * N * Vp / ms * 1e-6, ms2,
           8.0 * N * Vp / ms2 * 1e-6);
    be->ops->free(be, logits);
    be->ops->free(be, stats);
    be->ops->free(be, gst);
    be->ops->free(be, dl);
    be->ops->free(be, dtok);

    float *p = ct_dputf(be, NULL, P), *gr = ct_dputf(be, NULL, P), *m = ct_dputf(be, NULL, P);
    float *v = ct_dputf(be, NULL, P);
    BENCH_MS(be, iters, ms,
             loom_op(be, adamw, p, gr, m, v, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 1.0f));
    printf("  adamw n=%lld: %7.3f ms (%6.0f GB/s)\n", (long long)P, ms, 28.0 * P / ms * 1e-6);
    BENCH_MS(be, iters, ms, (void)loom_op(be, sumsq, gr, P));
    printf("  sumsq n=%lld: %7.3f ms (%6.0f GB/s)\n", (long long)P, ms, 4.0 * P / ms * 1e-6);
    be->ops->free(be, p);
    be->ops->free(be, gr);
    be->ops->free(be, m);
    be->ops->free(be, v);
    be->ops->free(be, w);
    be->ops->free(be, b);
    be->ops->free(be, dw);
    be->ops->free(be, db);
    be->ops->free(be, mean);
    be->ops->free(be, rstd);
}

static void bench(void) {
    struct loom_backend *be = g_gpu;
    const int64_t B = 16, T = 1024, C = 768, NH = 12, HS = 64, N = B * T;
    const int iters = 10;
    printf("\ntimings on cuda, GPT-2 124M shapes (B=%lld T=%lld C=%lld NH=%lld), mean of %d after "
           "warm-up:\n",
           (long long)B, (long long)T, (long long)C, (long long)NH, iters);
    const int64_t shapes[3][2] = {{C, 3 * C}, {C, 4 * C}, {4 * C, C}};
    const char *names[3] = {"qkv", "fc", "proj"};
    for (int s = 0; s < 3; s++) {
        int64_t IC = shapes[s][0], OC = shapes[s][1];
        float *x = ct_dputf(be, NULL, N * IC), *w = ct_dputf(be, NULL, OC * IC),
              *b = ct_dputf(be, NULL, OC);
        float *y = ct_dputf(be, NULL, N * OC), *dx = ct_dputf(be, NULL, N * IC);
        float *dw = ct_dputf(be, NULL, OC * IC), *db = ct_dputf(be, NULL, OC);
        double f_ms = 0, b_ms = 0;
        for (int it = -2; it < iters; it++) {
            be->ops->synchronize(be);
            double t0 = loom_time_s();
            loom_op(be, linear_forward, y, x, w, b, N, IC, OC);
            be->ops->synchronize(be);
            double t1 = time_ms(t0);
            t0 = loom_time_s();
            loom_op(be, linear_backward, dx, dw, db, y, x, w, N, IC, OC);
            be->ops->synchronize(be);
            double t2 = time_ms(t0);
            if (it >= 0) {
                f_ms += t1 / iters;
                b_ms += t2 / iters;
            }
        }
        double fl = 2.0 * N * IC * OC;
        printf("  linear %-4s %4lld -> %4lld: fwd %7.3f ms (%5.1f TFLOP/s)  bwd %7.3f ms (%5.1f "
               "TFLOP/s)\n",
               names[s], (long long)IC, (long long)OC, f_ms, fl / f_ms * 1e-9, b_ms,
               2 * fl / b_ms * 1e-9);
        void *bufs[] = {x, w, b, y, dx, dw, db};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) be->ops->free(be, bufs[k]);
    }
    for (int causal = 1; causal >= 0; causal--) {
        struct loom_attn a = {.B = B, .T = T, .NH = NH, .NKV = NH, .HS = HS, .causal = causal,
                              .scale = 0.125f, .NH_global = NH};
        int64_t nqkv = N * 3 * C, nout = N * C;
        float *qkv = ct_randn(nqkv, 120, 1.0f, 0.0f);
        float *dq = ct_dputf(be, qkv, nqkv), *out = ct_dputf(be, NULL, nout);
        float *lse = ct_dputf(be, NULL, B * NH * T), *dqkv = ct_dputf(be, NULL, nqkv);
        free(qkv);
        double f_ms = 0, b_ms = 0;
        for (int it = -2; it < iters; it++) {
            be->ops->synchronize(be);
            double t0 = loom_time_s();
            loom_op(be, attention_forward, out, lse, dq, &a);
            be->ops->synchronize(be);
            double t1 = time_ms(t0);
            t0 = loom_time_s();
            loom_op(be, attention_backward, dqkv, out, out, lse, dq, &a);
            be->ops->synchronize(be);
            double t2 = time_ms(t0);
            if (it >= 0) {
                f_ms += t1 / iters;
                b_ms += t2 / iters;
            }
        }
        /* useful FLOPs: 4 B NH T^2 HS forward (half under the causal mask), 2.5x that backward */
        double fl = 4.0 * B * NH * (double)T * T * HS * (causal ? 0.5 : 1.0);
        printf("  attention %-6s HS=%lld: fwd %7.3f ms (%5.1f TFLOP/s)  bwd %7.3f ms (%5.1f "
               "TFLOP/s)\n",
               causal ? "causal" : "bidir", (long long)HS, f_ms, fl / f_ms * 1e-9, b_ms,
               2.5 * fl / b_ms * 1e-9);
        be->ops->free(be, dq);
        be->ops->free(be, out);
        be->ops->free(be, lse);
        be->ops->free(be, dqkv);
    }
    bench_memory_bound(be, B, T, C, iters);
}

static int run(int argc, char **argv) {
    int st = ct_open(&g_gpu, &g_cpu);
    if (st) return st;

    const char *mode = argc > 1 ? argv[1] : "";
    int bench_only = strcmp(mode, "bench") == 0, small_only = strcmp(mode, "small") == 0;
    if (!bench_only) {
        printf("-- small: B=2 T=64 C=96 NH=6 NKV=2 HS=16\n");
        test_elementwise(2 * 64 * 96);
        test_embedding(2, 64, 96, 500, 100, 300, 3);
        test_embedding(2, 64, 50, 500, 100, 300, 3); /* C not a multiple of 4 */
        /* tables of few rows (BERT's token types; a shard of 3 rows of 6): summed by segments */
        test_embedding(2, 100, 96, 2, 0, 2, 0);
        test_embedding(2, 100, 50, 6, 2, 3, 0);
        test_layernorm(2 * 64, 96, 1);
        test_layernorm(2 * 64, 96, 0);
        test_rmsnorm(2 * 64, 96);
        test_linear(2 * 64, 96, 3 * 96, 1, 1);
        test_linear(2 * 64, 96, 96, 0, 0);
        test_rope(2, 64, 6, 2, 16, 5);
        /* --rotary-percent (whole and single pairs a thread) and Llama 3.1's scaling */
        test_rope_with(2, 64, 6, 2, 16, 5, 0, &(struct loom_rope){.theta = 10000.0, .dims = 8});
        test_rope_with(2, 64, 4, 2, 12, 0, 0, &(struct loom_rope){.theta = 10000.0, .dims = 4});
        test_rope_with(2, 96, 4, 2, 64, 7, 1,
                       &(struct loom_rope){.theta = 10000.0,
                                           .dims = 32,
                                           .factor = 8.0,
                                           .low_freq_factor = 1.0,
                                           .high_freq_factor = 4.0,
                                           .original_max_positions = 64});
        test_rope_with(2, 64, 4, 2, 16, 3, 0,
                       &(struct loom_rope){.theta = 10000.0, .interpolation = 4.0});
        test_attention(2, 64, 6, 2, 16, 1, 0.0f);
        test_attention(2, 64, 6, 2, 16, 0, 0.0f);
        test_attention(2, 64, 6, 2, 16, 1, 0.1f);
        test_attention(2, 50, 6, 6, 16, 1, 0.0f);
        test_attention(1, 70, 4, 1, 80, 0, 0.2f);
        /* documents packed into samples */
        test_embedding_docs(2, 200, 96, 500, 100, 300, 3, 1);
        test_embedding_docs(2, 200, 50, 500, 0, 500, 0, 1);
        test_rope_docs(2, 200, 6, 2, 16, 0, 1);
        test_attention_docs(2, 300, 6, 2, 16, 1, 0.0f, 1);
        test_attention_docs(2, 300, 6, 2, 16, 1, 0.1f, 1);
        test_attention_docs(1, 300, 4, 1, 80, 1, 0.0f, 1);
        test_decode(37, 6, 2, 16);
        test_activations(2 * 64, 2 * 96);
        test_dropout(2, 64, 96, 0.1f);
        test_xent(2 * 64, 1000, 990, 500, 2000);
        test_adamw(10007);
        test_residual_norm(2 * 64, 96, 0);
        test_residual_norm(2 * 64, 96, 1);
        test_linear_gelu(LOOM_GELU_TANH, 2 * 64, 96, 4 * 96, 1);
        test_linear_gelu(LOOM_GELU_TANH, 2 * 64, 96, 4 * 96, 0);
        test_linear_gelu(LOOM_GELU_ERF, 2 * 64, 96, 4 * 96, 1);
        test_sumsq_ranges();
        test_adamw_ranges();
        if (!small_only) {
            printf("-- large: B=4 T=256 C=768 NH=12 HS=64\n");
            test_elementwise(4 * 256 * 768);
            test_embedding(4, 256, 768, 16384, 4096, 8192, 0);
            test_embedding(8, 512, 1024, 2, 0, 2, 0); /* BERT-large's token types */
            test_layernorm(4 * 256, 768, 1);
            test_rmsnorm(4 * 256, 768);
            test_linear(4 * 256, 768, 3 * 768, 1, 1);
            test_linear(4 * 256, 3072, 768, 1, 1);
            test_rope(4, 256, 12, 4, 64, 0);
            test_attention(4, 256, 12, 12, 64, 1, 0.0f);
            test_attention(4, 256, 12, 4, 64, 1, 0.1f);
            test_attention(4, 256, 12, 12, 64, 0, 0.0f);
            test_attention(2, 256, 8, 2, 128, 1, 0.0f);
            test_embedding_docs(4, 512, 768, 16384, 4096, 8192, 0, 1);
            test_rope_docs(4, 512, 12, 4, 64, 0, 1);
            test_attention_docs(4, 512, 12, 4, 64, 1, 0.0f, 1);
            test_attention_docs(4, 512, 12, 12, 64, 1, 0.1f, 1);
            test_attention_docs(2, 512, 8, 2, 128, 1, 0.0f, 1);
            test_decode(1000, 12, 4, 64);
            test_activations(4 * 256, 4 * 768);
            test_dropout(4, 256, 768, 0.1f);
            test_xent(256, 50304, 50257, 0, 50257);
            test_xent(256, 25152, 25152, 25152, 50257);
            test_adamw(1 << 20);
            test_residual_norm(4 * 256, 768, 0);
            test_residual_norm(4 * 256, 768, 1);
            test_linear_gelu(LOOM_GELU_TANH, 4 * 256, 768, 3072, 1);
        }
        printf("\n");
        st = ct_finish();
    } else {
        bench();
    }
    loom_backend_destroy(g_cpu);
    loom_backend_destroy(g_gpu);
    return st;
}

#endif /* LOOM_HAVE_CUDA */

int main(int argc, char **argv) {
#ifdef LOOM_HAVE_CUDA
    return run(argc, argv);
#else
    (void)argc;
    (void)argv;
    printf("skipped: built without CUDA\n");
    return 77;
#endif
}
