/* The fused cross-entropy (xent_fused) and the fused output layer (linear_xent) of the CUDA
 * backend against the CPU backend's.
 *
 * fp32: on the same inputs the CUDA losses equal the CPU's within 1e-5 (elementwise) and the
 * gradients within 1e-5 (normwise: the largest difference over the largest value); padded
 * columns and ignored rows (target -1) get exactly 0, ignored rows loss 0; without grad the
 * logits are left as they were and the losses are the same bits; two runs give the same bits.
 * Rows of every vector width the kernel picks (16 bytes, two elements, one: odd lengths and an
 * unaligned buffer) and GPT-2's vocabulary (50257 of 50304 columns).
 * bf16 and fp16 logits: against the CPU's fp32 pass on the logits rounded to the type, the
 * losses (fp32 statistics of the same values) within 1e-5 and the gradient, rounded to the
 * type, within 1e-2 (elementwise, below 1e-3 of the largest value absolutely); nothing past
 * the N x Vl 16-bit elements is written.
 * linear_xent: in fp32 the losses, dinp (assigned) and dw (accumulated) within 1e-5 of the
 * CPU's; with bf16 (fp16) matrix products, where the logits are kept in 16 bits, within 1e-2 of
 * the CPU's fp32 linear_xent on inputs rounded to the type (normwise), the weight inside the
 * registered parameter range or outside it.
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

#define CT_SEED 31 /* the stream of the random inputs */
#include "cuda_test_util.h"

static struct loom_backend *g_cpu, *g_gpu;

/* targets < Vvalid, every seventh ignored, the first and last valid columns among them */
static int32_t *make_targets(int64_t N, int64_t Vvalid) {
    int32_t *t = ct_alloc((size_t)N * sizeof *t);
    for (int64_t n = 0; n < N; n++) t[n] = (int32_t)((n * 7919 + 13) % Vvalid);
    if (N > 1) t[1] = 0;
    if (N > 2) t[2] = (int32_t)(Vvalid - 1);
    for (int64_t n = 3; n < N; n += 7) t[n] = -1;
    return t;
}

/* padded columns and ignored rows exactly 0, ignored rows loss 0 */
static int zeros_where_due(const float *g, const float *loss, const int32_t *t, int64_t N,
                           int64_t Vl, int64_t Vvalid) {
    int ok = 1;
    for (int64_t n = 0; n < N; n++) {
        if (t[n] < 0) ok &= loss[n] == 0.0f;
        for (int64_t c = 0; c < Vl; c++)
            if (t[n] < 0 || c >= Vvalid) ok &= g[n * Vl + c] == 0.0f;
    }
    return ok;
}

/* The CPU's fused pass on host logits x (overwritten with the gradient), losses out. */
static void cpu_fused(float *losses, float *x, const int32_t *t, float dloss, int64_t N,
                      int64_t Vl, int64_t Vvalid) {
    loom_op(g_cpu, xent_fused, losses, x, LOOM_DTYPE_F32, t, dloss, 1, N, Vl, Vvalid);
}

/* ---- xent_fused, fp32 ---- */

static void fused_f32(int64_t N, int64_t Vl, int64_t Vvalid, int misalign, uint64_t seed) {
    char what[256], tag[96];
    snprintf(tag, sizeof tag, "N=%lld Vl=%lld Vvalid=%lld%s", (long long)N, (long long)Vl,
             (long long)Vvalid, misalign ? " (buffer 4 bytes off 16)" : "");
    const float dloss = 0.25f;
    const int64_t nx = N * Vl;
    float *x = ct_randn(nx, seed, 3.0f, 0.0f);
    int32_t *t = make_targets(N, Vvalid);
    float *ref = ct_alloc((size_t)nx * sizeof *ref),
          *ref_loss = ct_alloc((size_t)N * sizeof *ref_loss);
    memcpy(ref, x, (size_t)nx * sizeof *x);
    cpu_fused(ref_loss, ref, t, dloss, N, Vl, Vvalid);

    int32_t *dt = ct_dput(g_gpu, t, (size_t)N * sizeof *t);
    float *bufs[3], *losses[3];
    for (int k = 0; k < 3; k++) {
        float *b = ct_dput(g_gpu, NULL, (size_t)(nx + 4) * sizeof(float));
        bufs[k] = b;
        g_gpu->ops->to_device(g_gpu, b + misalign, x, (size_t)nx * sizeof(float));
        losses[k] = ct_dput(g_gpu, NULL, (size_t)N * sizeof(float));
        loom_op(g_gpu, xent_fused, losses[k], b + misalign, LOOM_DTYPE_F32, dt, dloss, k < 2, N,
                Vl, Vvalid); /* runs 0 and 1 with grad, run 2 without */
    }
    float *g0 = ct_dget(g_gpu, bufs[0] + misalign, (size_t)nx * sizeof(float));
    float *g1 = ct_dget(g_gpu, bufs[1] + misalign, (size_t)nx * sizeof(float));
    float *x2 = ct_dget(g_gpu, bufs[2] + misalign, (size_t)nx * sizeof(float));
    float *l0 = ct_dget(g_gpu, losses[0], (size_t)N * sizeof(float));
    float *l1 = ct_dget(g_gpu, losses[1], (size_t)N * sizeof(float));
    float *l2 = ct_dget(g_gpu, losses[2], (size_t)N * sizeof(float));
    snprintf(what, sizeof what, "xent_fused fp32 %s: losses", tag);
    ct_check_elem(what, l0, ref_loss, N, 1e-6, 1e-5);
    snprintf(what, sizeof what, "xent_fused fp32 %s: gradient (normwise)", tag);
    ct_check_norm(what, g0, ref, nx, 1e-5);
    snprintf(what, sizeof what, "xent_fused fp32 %s: zeros in padding and ignored rows", tag);
    ct_check_true(what, zeros_where_due(g0, l0, t, N, Vl, Vvalid));
    snprintf(what, sizeof what, "xent_fused fp32 %s: two runs, same bits", tag);
    ct_check_true(what, !memcmp(g0, g1, (size_t)nx * sizeof *g0) && !memcmp(l0, l1, (size_t)N * 4));
    snprintf(what, sizeof what, "xent_fused fp32 %s: without grad logits kept, same losses", tag);
    ct_check_true(what, !memcmp(x2, x, (size_t)nx * sizeof *x) && !memcmp(l2, l0, (size_t)N * 4));
    for (int k = 0; k < 3; k++) {
        g_gpu->ops->free(g_gpu, bufs[k]);
        g_gpu->ops->free(g_gpu, losses[k]);
    }
    g_gpu->ops->free(g_gpu, dt);
    free(x), free(t), free(ref), free(ref_loss), free(g0), free(g1), free(x2), free(l0), free(l1);
    free(l2);
}

/* ---- xent_fused, 16-bit logits ---- */

static void fused_16(int64_t N, int64_t Vl, int64_t Vvalid, int f16, uint64_t seed) {
    char what[256], tag[96];
    const char *ty = f16 ? "fp16" : "bf16";
    snprintf(tag, sizeof tag, "%s N=%lld Vl=%lld Vvalid=%lld", ty, (long long)N, (long long)Vl,
             (long long)Vvalid);
    const float dloss = 0.25f;
    const int64_t nx = N * Vl, guard = 64; /* 16-bit elements past the logits */
    float *x = ct_randn(nx, seed, 3.0f, 0.0f);
    float *xr = ct_rounded(x, nx, f16);
    int32_t *t = make_targets(N, Vvalid);
    float *ref_loss = ct_alloc((size_t)N * sizeof *ref_loss);
    float *ref = ct_alloc((size_t)nx * sizeof *ref);
    memcpy(ref, xr, (size_t)nx * sizeof *ref);
    cpu_fused(ref_loss, ref, t, dloss, N, Vl, Vvalid);

    uint16_t *h = ct_alloc((size_t)(nx + guard) * 2);
    for (int64_t i = 0; i < nx; i++) h[i] = ct_to16(x[i], f16);
    for (int64_t i = nx; i < nx + guard; i++) h[i] = 0x5a5a;
    const enum loom_dtype dt16 = f16 ? LOOM_DTYPE_F16 : LOOM_DTYPE_BF16;
    int32_t *dt = ct_dput(g_gpu, t, (size_t)N * sizeof *t);
    void *b = ct_dput(g_gpu, h, (size_t)(nx + guard) * 2),
         *b0 = ct_dput(g_gpu, h, (size_t)(nx + guard) * 2);
    float *dl = ct_dput(g_gpu, NULL, (size_t)N * sizeof(float));
    float *dl0 = ct_dput(g_gpu, NULL, (size_t)N * sizeof(float));
    loom_op(g_gpu, xent_fused, dl, b, dt16, dt, dloss, 1, N, Vl, Vvalid);
    loom_op(g_gpu, xent_fused, dl0, b0, dt16, dt, dloss, 0, N, Vl, Vvalid);
    uint16_t *gh = ct_dget(g_gpu, b, (size_t)(nx + guard) * 2);
    uint16_t *kept = ct_dget(g_gpu, b0, (size_t)(nx + guard) * 2);
    float *l = ct_dget(g_gpu, dl, (size_t)N * sizeof(float)),
          *l0 = ct_dget(g_gpu, dl0, (size_t)N * sizeof(float));
    float *g = ct_alloc((size_t)nx * sizeof *g);
    for (int64_t i = 0; i < nx; i++) g[i] = ct_from16(gh[i], f16);
    snprintf(what, sizeof what, "xent_fused %s: losses against fp32 on the rounded logits", tag);
    ct_check_elem(what, l, ref_loss, N, 1e-6, 1e-5);
    snprintf(what, sizeof what, "xent_fused %s: gradient (elementwise, floor 1e-3 of max)", tag);
    ct_check_elem(what, g, ref, nx, 1e-3, 1e-2);
    snprintf(what, sizeof what, "xent_fused %s: zeros in padding and ignored rows", tag);
    ct_check_true(what, zeros_where_due(g, l, t, N, Vl, Vvalid));
    snprintf(what, sizeof what, "xent_fused %s: nothing written past the logits", tag);
    ct_check_true(what, !memcmp(gh + nx, h + nx, (size_t)guard * 2));
    snprintf(what, sizeof what, "xent_fused %s: without grad logits kept, same losses", tag);
    ct_check_true(what,
                  !memcmp(kept, h, (size_t)(nx + guard) * 2) && !memcmp(l0, l, (size_t)N * 4));
    void *bufs[] = {dt, b, b0, dl, dl0};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) g_gpu->ops->free(g_gpu, bufs[i]);
    free(x), free(xr), free(t), free(ref_loss), free(ref), free(h), free(gh), free(kept), free(l);
    free(l0), free(g);
}

/* ---- linear_xent ---- */

struct lx_result {
    float *losses, *dinp, *dw;
};

/* linear_xent on backend be from host inputs; w lives at offset 16 of a parameter buffer of
 * Vl*C + 32 floats, registered for 16-bit products when dt16 is set and `registered`. */
static struct lx_result run_linear_xent(struct loom_backend *be, const float *inp, const float *w,
                                        const float *dw0, const int32_t *t, float dloss,
                                        int64_t N, int64_t C, int64_t Vl, int64_t Vvalid,
                                        enum loom_dtype dt16, int registered) {
    const int64_t np = Vl * C + 32;
    float *ph = calloc((size_t)np, sizeof *ph);
    if (!ph) exit(2);
    memcpy(ph + 16, w, (size_t)(Vl * C) * sizeof *w);
    float *params = ct_dput(be, ph, (size_t)np * sizeof(float));
    if (dt16 != LOOM_DTYPE_F32 &&
        be->ops->set_matmul_dtype(be, dt16, registered ? params : NULL, registered ? np : 0) !=
            LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    float *di = ct_dput(be, inp, (size_t)(N * C) * sizeof(float));
    float *gi = ct_dput(be, NULL, (size_t)(N * C) * sizeof(float));
    float *gw = ct_dput(be, dw0, (size_t)(Vl * C) * sizeof(float));
    int32_t *dt = ct_dput(be, t, (size_t)N * sizeof *t);
    float *dl = ct_dput(be, NULL, (size_t)N * sizeof(float));
    void *ws = ct_dput(be, NULL, (size_t)(N * Vl) * sizeof(float));
    loom_op(be, linear_xent, dl, gi, gw, ws, di, params + 16, dt, dloss, N, C, Vl, Vvalid);
    struct lx_result r;
    r.losses = ct_dget(be, dl, (size_t)N * sizeof(float));
    r.dinp = ct_dget(be, gi, (size_t)(N * C) * sizeof(float));
    r.dw = ct_dget(be, gw, (size_t)(Vl * C) * sizeof(float));
    if (dt16 != LOOM_DTYPE_F32) be->ops->set_matmul_dtype(be, LOOM_DTYPE_F32, NULL, 0);
    void *bufs[] = {params, di, gi, gw, dt, dl, ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->ops->free(be, bufs[i]);
    free(ph);
    return r;
}

static void lx_free(struct lx_result *r) { free(r->losses), free(r->dinp), free(r->dw); }

static void linear_xent_case(int64_t N, int64_t C, int64_t Vl, int64_t Vvalid,
                             enum loom_dtype dt16, int registered, uint64_t seed) {
    char what[320], tag[128];
    const int f16 = dt16 == LOOM_DTYPE_F16;
    snprintf(tag, sizeof tag, "%s N=%lld C=%lld Vl=%lld Vvalid=%lld%s",
             dt16 == LOOM_DTYPE_F32 ? "fp32" : f16 ? "fp16" : "bf16", (long long)N, (long long)C,
             (long long)Vl, (long long)Vvalid,
             dt16 == LOOM_DTYPE_F32 ? "" : registered ? ", registered w" : ", w outside the range");
    const float dloss = 1.0f / (float)N;
    float *inp = ct_randn(N * C, seed + 1, 1.0f, 0.0f),
          *w = ct_randn(Vl * C, seed + 2, 1.5f / sqrtf((float)C), 0.0f);
    float *dw0 = ct_randn(Vl * C, seed + 3, 1e-3f, 0.0f);
    int32_t *t = make_targets(N, Vvalid);
    const double tol = dt16 == LOOM_DTYPE_F32 ? 1e-5 : 1e-2;
    struct lx_result ref, got;
    if (dt16 == LOOM_DTYPE_F32) {
        ref = run_linear_xent(g_cpu, inp, w, dw0, t, dloss, N, C, Vl, Vvalid, LOOM_DTYPE_F32, 0);
    } else {
        float *ir = ct_rounded(inp, N * C, f16), *wr = ct_rounded(w, Vl * C, f16);
        ref = run_linear_xent(g_cpu, ir, wr, dw0, t, dloss, N, C, Vl, Vvalid, LOOM_DTYPE_F32, 0);
        free(ir), free(wr);
    }
    got = run_linear_xent(g_gpu, inp, w, dw0, t, dloss, N, C, Vl, Vvalid, dt16, registered);
    snprintf(what, sizeof what, "linear_xent %s: losses", tag);
    ct_check(what,
             dt16 == LOOM_DTYPE_F32 ? ct_elem_err(got.losses, ref.losses, N, 1e-6)
                                    : ct_norm_err(got.losses, ref.losses, N),
             tol);
    snprintf(what, sizeof what, "linear_xent %s: dinp (normwise)", tag);
    ct_check_norm(what, got.dinp, ref.dinp, N * C, tol);
    snprintf(what, sizeof what, "linear_xent %s: dw accumulated (normwise)", tag);
    ct_check_norm(what, got.dw, ref.dw, Vl * C, tol);
    lx_free(&ref);
    lx_free(&got);
    free(inp), free(w), free(dw0), free(t);
}

/* Loss only (dinp and dw NULL) gives the losses of the run with gradients, and no gradient. */
static void linear_xent_loss_only(int64_t N, int64_t C, int64_t Vl, int64_t Vvalid, uint64_t seed) {
    float *inp = ct_randn(N * C, seed + 1, 1.0f, 0.0f), *w = ct_randn(Vl * C, seed + 2, 0.2f, 0.0f);
    int32_t *t = make_targets(N, Vvalid);
    float *di = ct_dput(g_gpu, inp, (size_t)(N * C) * sizeof(float));
    float *dw_ = ct_dput(g_gpu, w, (size_t)(Vl * C) * sizeof(float));
    float *gi = ct_dput(g_gpu, NULL, (size_t)(N * C) * sizeof(float));
    float *gw = ct_dput(g_gpu, NULL, (size_t)(Vl * C) * sizeof(float));
    int32_t *dt = ct_dput(g_gpu, t, (size_t)N * sizeof *t);
    float *l1 = ct_dput(g_gpu, NULL, (size_t)N * sizeof(float)),
          *l2 = ct_dput(g_gpu, NULL, (size_t)N * sizeof(float));
    void *ws = ct_dput(g_gpu, NULL, (size_t)(N * Vl) * sizeof(float));
    loom_op(g_gpu, linear_xent, l1, gi, gw, ws, di, dw_, dt, 0.5f, N, C, Vl, Vvalid);
    loom_op(g_gpu, linear_xent, l2, NULL, NULL, ws, di, dw_, dt, 0.5f, N, C, Vl, Vvalid);
    float *h1 = ct_dget(g_gpu, l1, (size_t)N * sizeof(float)),
          *h2 = ct_dget(g_gpu, l2, (size_t)N * sizeof(float));
    ct_check_true(
        "linear_xent fp32 loss only (dinp, dw NULL): the losses of the run with gradients",
        !memcmp(h1, h2, (size_t)N * sizeof *h1));
    void *bufs[] = {di, dw_, gi, gw, dt, l1, l2, ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) g_gpu->ops->free(g_gpu, bufs[i]);
    free(inp), free(w), free(t), free(h1), free(h2);
}

static int run(void) {
    int st = ct_open(&g_gpu, &g_cpu);
    if (st) return st;
    fused_f32(131, 1000, 990, 0, 10);   /* 16-byte vectors */
    fused_f32(37, 1001, 1001, 0, 20);   /* odd rows: one element at a time */
    fused_f32(33, 998, 990, 0, 30);     /* two elements */
    fused_f32(29, 1000, 997, 1, 40);    /* 16-byte rows in a buffer 4 bytes off */
    fused_f32(64, 50304, 50257, 0, 50); /* GPT-2's vocabulary */
    fused_16(131, 1000, 990, 0, 60);
    fused_16(33, 998, 997, 0, 70);
    fused_16(37, 1001, 1001, 0, 80);
    fused_16(64, 50304, 50257, 0, 90);
    fused_16(131, 1000, 990, 1, 100);
    fused_16(64, 50304, 50257, 1, 110);
    linear_xent_case(150, 96, 1000, 990, LOOM_DTYPE_F32, 0, 200);
    linear_xent_case(64, 768, 50304, 50257, LOOM_DTYPE_F32, 0, 300);
    linear_xent_loss_only(70, 64, 500, 480, 400);
    linear_xent_case(150, 96, 1000, 990, LOOM_DTYPE_BF16, 1, 500);
    linear_xent_case(150, 96, 1000, 990, LOOM_DTYPE_BF16, 0, 600);
    linear_xent_case(33, 70, 1001, 1001, LOOM_DTYPE_BF16, 0, 700); /* unaligned rows */
    linear_xent_case(256, 768, 50304, 50257, LOOM_DTYPE_BF16, 1, 800);
    linear_xent_case(150, 96, 1000, 990, LOOM_DTYPE_F16, 1, 900);
    loom_backend_destroy(g_gpu);
    loom_backend_destroy(g_cpu);
    return ct_finish();
}

#endif /* LOOM_HAVE_CUDA */

int main(void) {
#ifdef LOOM_HAVE_CUDA
    return run();
#else
    printf("skipped: built without CUDA\n");
    return 77;
#endif
}
