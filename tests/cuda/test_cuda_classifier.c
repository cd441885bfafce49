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
#include "loom/rng.h"

static struct loom_backend *g_cpu, *g_gpu;
static int g_fail, g_pass;

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    return p;
}

/* n values sd * N(0,1) from stream `purpose` */
static float *hrand(int64_t n, uint64_t purpose, float sd) {
    float *p = xmalloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = sd * loom_rng_normal(31, purpose, (uint64_t)i);
    return p;
}

/* targets < Vvalid, every seventh ignored, the first and last valid columns among them */
static int32_t *make_targets(int64_t N, int64_t Vvalid) {
    int32_t *t = xmalloc((size_t)N * sizeof *t);
    for (int64_t n = 0; n < N; n++) t[n] = (int32_t)((n * 7919 + 13) % Vvalid);
    if (N > 1) t[1] = 0;
    if (N > 2) t[2] = (int32_t)(Vvalid - 1);
    for (int64_t n = 3; n < N; n += 7) t[n] = -1;
    return t;
}

static void *dput(struct loom_backend *be, const void *h, size_t bytes) {
    void *d = be->ops->malloc(be, bytes ? bytes : 4);
    if (!d) {
        fprintf(stderr, "%s: allocation of %zu bytes failed\n", be->ops->name, bytes);
        exit(2);
    }
    if (h && bytes) be->ops->to_device(be, d, h, bytes);
    return d;
}
static void *dget(struct loom_backend *be, const void *d, size_t bytes) {
    void *h = xmalloc(bytes);
    be->ops->to_host(be, h, d, bytes);
    return h;
}

/* ---- 16-bit values ---- */

static uint16_t to16(float x, int f16) {
    if (f16) {
        _Float16 h = (_Float16)x;
        uint16_t b;
        memcpy(&b, &h, 2);
        return b;
    }
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u); /* nearest even */
    return (uint16_t)(u >> 16);
}
static float from16(uint16_t b, int f16) {
    if (f16) {
        _Float16 h;
        memcpy(&h, &b, 2);
        return (float)h;
    }
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static float *rounded(const float *x, int64_t n, int f16) {
    float *r = xmalloc((size_t)n * sizeof *r);
    for (int64_t i = 0; i < n; i++) r[i] = from16(to16(x[i], f16), f16);
    return r;
}

/* ---- comparisons ---- */

static void tally(int ok) { ok ? g_pass++ : g_fail++; }

/* elementwise: max |got - ref| / max(|ref|, floor_frac * max |ref|) */
static double elem_err(const float *got, const float *ref, int64_t n, double floor_frac) {
    double mx = 0.0, e = 0.0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)ref[i]));
    double fl = floor_frac * mx > 1e-30 ? floor_frac * mx : 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]) / fmax(fabs((double)ref[i]), fl);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e;
}
/* normwise: max |got - ref| / max |ref| */
static double norm_err(const float *got, const float *ref, int64_t n) {
    double mx = 0.0, e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        mx = fmax(mx, fabs((double)ref[i]));
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= e)) e = d;
    }
    return mx > 0.0 ? e / mx : e;
}
static void check(const char *what, double err, double tol) {
    int ok = err <= tol;
    printf("%s %-72s err %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", what, err, tol);
    tally(ok);
}
static void check_true(const char *what, int cond) {
    printf("%s %s\n", cond ? "ok  " : "FAIL", what);
    tally(cond);
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
    float *x = hrand(nx, seed, 3.0f);
    int32_t *t = make_targets(N, Vvalid);
    float *ref = xmalloc((size_t)nx * sizeof *ref), *ref_loss = xmalloc((size_t)N * sizeof *ref_loss);
    memcpy(ref, x, (size_t)nx * sizeof *x);
    cpu_fused(ref_loss, ref, t, dloss, N, Vl, Vvalid);

    int32_t *dt = dput(g_gpu, t, (size_t)N * sizeof *t);
    float *bufs[3], *losses[3];
    for (int k = 0; k < 3; k++) {
        float *b = dput(g_gpu, NULL, (size_t)(nx + 4) * sizeof(float));
        bufs[k] = b;
        g_gpu->ops->to_device(g_gpu, b + misalign, x, (size_t)nx * sizeof(float));
        losses[k] = dput(g_gpu, NULL, (size_t)N * sizeof(float));
        loom_op(g_gpu, xent_fused, losses[k], b + misalign, LOOM_DTYPE_F32, dt, dloss, k < 2, N,
                Vl, Vvalid); /* runs 0 and 1 with grad, run 2 without */
    }
    float *g0 = dget(g_gpu, bufs[0] + misalign, (size_t)nx * sizeof(float));
    float *g1 = dget(g_gpu, bufs[1] + misalign, (size_t)nx * sizeof(float));
    float *x2 = dget(g_gpu, bufs[2] + misalign, (size_t)nx * sizeof(float));
    float *l0 = dget(g_gpu, losses[0], (size_t)N * sizeof(float));
    float *l1 = dget(g_gpu, losses[1], (size_t)N * sizeof(float));
    float *l2 = dget(g_gpu, losses[2], (size_t)N * sizeof(float));
    snprintf(what, sizeof what, "xent_fused fp32 %s: losses", tag);
    check(what, elem_err(l0, ref_loss, N, 1e-6), 1e-5);
    snprintf(what, sizeof what, "xent_fused fp32 %s: gradient (normwise)", tag);
    check(what, norm_err(g0, ref, nx), 1e-5);
    snprintf(what, sizeof what, "xent_fused fp32 %s: zeros in padding and ignored rows", tag);
    check_true(what, zeros_where_due(g0, l0, t, N, Vl, Vvalid));
    snprintf(what, sizeof what, "xent_fused fp32 %s: two runs, same bits", tag);
    check_true(what, !memcmp(g0, g1, (size_t)nx * sizeof *g0) && !memcmp(l0, l1, (size_t)N * 4));
    snprintf(what, sizeof what, "xent_fused fp32 %s: without grad logits kept, same losses", tag);
    check_true(what, !memcmp(x2, x, (size_t)nx * sizeof *x) && !memcmp(l2, l0, (size_t)N * 4));
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
    float *x = hrand(nx, seed, 3.0f);
    float *xr = rounded(x, nx, f16);
    int32_t *t = make_targets(N, Vvalid);
    float *ref_loss = xmalloc((size_t)N * sizeof *ref_loss);
    float *ref = xmalloc((size_t)nx * sizeof *ref);
    memcpy(ref, xr, (size_t)nx * sizeof *ref);
    cpu_fused(ref_loss, ref, t, dloss, N, Vl, Vvalid);

    uint16_t *h = xmalloc((size_t)(nx + guard) * 2);
    for (int64_t i = 0; i < nx; i++) h[i] = to16(x[i], f16);
    for (int64_t i = nx; i < nx + guard; i++) h[i] = 0x5a5a;
    const enum loom_dtype dt16 = f16 ? LOOM_DTYPE_F16 : LOOM_DTYPE_BF16;
    int32_t *dt = dput(g_gpu, t, (size_t)N * sizeof *t);
    void *b = dput(g_gpu, h, (size_t)(nx + guard) * 2), *b0 = dput(g_gpu, h, (size_t)(nx + guard) * 2);
    float *dl = dput(g_gpu, NULL, (size_t)N * sizeof(float));
    float *dl0 = dput(g_gpu, NULL, (size_t)N * sizeof(float));
    loom_op(g_gpu, xent_fused, dl, b, dt16, dt, dloss, 1, N, Vl, Vvalid);
    loom_op(g_gpu, xent_fused, dl0, b0, dt16, dt, dloss, 0, N, Vl, Vvalid);
    uint16_t *gh = dget(g_gpu, b, (size_t)(nx + guard) * 2);
    uint16_t *kept = dget(g_gpu, b0, (size_t)(nx + guard) * 2);
    float *l = dget(g_gpu, dl, (size_t)N * sizeof(float)), *l0 = dget(g_gpu, dl0, (size_t)N * sizeof(float));
    float *g = xmalloc((size_t)nx * sizeof *g);
    for (int64_t i = 0; i < nx; i++) g[i] = from16(gh[i], f16);
    snprintf(what, sizeof what, "xent_fused %s: losses against fp32 on the rounded logits", tag);
    check(what, elem_err(l, ref_loss, N, 1e-6), 1e-5);
    snprintf(what, sizeof what, "xent_fused %s: gradient (elementwise, floor 1e-3 of max)", tag);
    check(what, elem_err(g, ref, nx, 1e-3), 1e-2);
    snprintf(what, sizeof what, "xent_fused %s: zeros in padding and ignored rows", tag);
    check_true(what, zeros_where_due(g, l, t, N, Vl, Vvalid));
    snprintf(what, sizeof what, "xent_fused %s: nothing written past the logits", tag);
    check_true(what, !memcmp(gh + nx, h + nx, (size_t)guard * 2));
    snprintf(what, sizeof what, "xent_fused %s: without grad logits kept, same losses", tag);
    check_true(what, !memcmp(kept, h, (size_t)(nx + guard) * 2) && !memcmp(l0, l, (size_t)N * 4));
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
    float *params = dput(be, ph, (size_t)np * sizeof(float));
    if (dt16 != LOOM_DTYPE_F32 &&
        be->ops->set_matmul_dtype(be, dt16, registered ? params : NULL, registered ? np : 0) !=
            LOOM_OK) {
        loom_print_error();
        exit(1);
    }
    float *di = dput(be, inp, (size_t)(N * C) * sizeof(float));
    float *gi = dput(be, NULL, (size_t)(N * C) * sizeof(float));
    float *gw = dput(be, dw0, (size_t)(Vl * C) * sizeof(float));
    int32_t *dt = dput(be, t, (size_t)N * sizeof *t);
    float *dl = dput(be, NULL, (size_t)N * sizeof(float));
    void *ws = dput(be, NULL, (size_t)(N * Vl) * sizeof(float));
    loom_op(be, linear_xent, dl, gi, gw, ws, di, params + 16, dt, dloss, N, C, Vl, Vvalid);
    struct lx_result r;
    r.losses = dget(be, dl, (size_t)N * sizeof(float));
    r.dinp = dget(be, gi, (size_t)(N * C) * sizeof(float));
    r.dw = dget(be, gw, (size_t)(Vl * C) * sizeof(float));
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
    float *inp = hrand(N * C, seed + 1, 1.0f), *w = hrand(Vl * C, seed + 2, 1.5f / sqrtf((float)C));
    float *dw0 = hrand(Vl * C, seed + 3, 1e-3f);
    int32_t *t = make_targets(N, Vvalid);
    const double tol = dt16 == LOOM_DTYPE_F32 ? 1e-5 : 1e-2;
    struct lx_result ref, got;
    if (dt16 == LOOM_DTYPE_F32) {
        ref = run_linear_xent(g_cpu, inp, w, dw0, t, dloss, N, C, Vl, Vvalid, LOOM_DTYPE_F32, 0);
    } else {
        float *ir = rounded(inp, N * C, f16), *wr = rounded(w, Vl * C, f16);
        ref = run_linear_xent(g_cpu, ir, wr, dw0, t, dloss, N, C, Vl, Vvalid, LOOM_DTYPE_F32, 0);
        free(ir), free(wr);
    }
    got = run_linear_xent(g_gpu, inp, w, dw0, t, dloss, N, C, Vl, Vvalid, dt16, registered);
    snprintf(what, sizeof what, "linear_xent %s: losses", tag);
    check(what, dt16 == LOOM_DTYPE_F32 ? elem_err(got.losses, ref.losses, N, 1e-6)
                                       : norm_err(got.losses, ref.losses, N), tol);
    snprintf(what, sizeof what, "linear_xent %s: dinp (normwise)", tag);
    check(what, norm_err(got.dinp, ref.dinp, N * C), tol);
    snprintf(what, sizeof what, "linear_xent %s: dw accumulated (normwise)", tag);
    check(what, norm_err(got.dw, ref.dw, Vl * C), tol);
    lx_free(&ref);
    lx_free(&got);
    free(inp), free(w), free(dw0), free(t);
}

/* Loss only (dinp and dw NULL) gives the losses of the run with gradients, and no gradient. */
static void linear_xent_loss_only(int64_t N, int64_t C, int64_t Vl, int64_t Vvalid, uint64_t seed) {
    float *inp = hrand(N * C, seed + 1, 1.0f), *w = hrand(Vl * C, seed + 2, 0.2f);
    int32_t *t = make_targets(N, Vvalid);
    float *di = dput(g_gpu, inp, (size_t)(N * C) * sizeof(float));
    float *dw_ = dput(g_gpu, w, (size_t)(Vl * C) * sizeof(float));
    float *gi = dput(g_gpu, NULL, (size_t)(N * C) * sizeof(float));
    float *gw = dput(g_gpu, NULL, (size_t)(Vl * C) * sizeof(float));
    g_gpu->ops->zero(g_gpu, gw, (size_t)(Vl * C) * sizeof(float));
    int32_t *dt = dput(g_gpu, t, (size_t)N * sizeof *t);
    float *l1 = dput(g_gpu, NULL, (size_t)N * sizeof(float)), *l2 = dput(g_gpu, NULL, (size_t)N * sizeof(float));
    void *ws = dput(g_gpu, NULL, (size_t)(N * Vl) * sizeof(float));
    loom_op(g_gpu, linear_xent, l1, gi, gw, ws, di, dw_, dt, 0.5f, N, C, Vl, Vvalid);
    loom_op(g_gpu, linear_xent, l2, NULL, NULL, ws, di, dw_, dt, 0.5f, N, C, Vl, Vvalid);
    float *h1 = dget(g_gpu, l1, (size_t)N * sizeof(float)), *h2 = dget(g_gpu, l2, (size_t)N * sizeof(float));
    check_true("linear_xent fp32 loss only (dinp, dw NULL): the losses of the run with gradients",
               !memcmp(h1, h2, (size_t)N * sizeof *h1));
    void *bufs[] = {di, dw_, gi, gw, dt, l1, l2, ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) g_gpu->ops->free(g_gpu, bufs[i]);
    free(inp), free(w), free(t), free(h1), free(h2);
}

static int run(void) {
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
    printf("%d passed, %d failed\n", g_pass, g_fail);
    loom_backend_destroy(g_gpu);
    loom_backend_destroy(g_cpu);
    return g_fail ? 1 : 0;
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
