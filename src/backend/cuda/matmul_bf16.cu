/* bf16 matrix products for the linear ops (set_matmul_dtype(LOOM_DTYPE_BF16)): the inputs of
 * each product are rounded to bf16 (round to nearest even), the tensor cores multiply them and
 * accumulate in fp32, and the result is written in fp32. Parameters, activations, gradients and
 * the optimizer state stay fp32; only the product inputs are narrowed. (The exception is the
 * typed activations below, which include the fused classifier's 16-bit logits.)
 *
 *   forward:  out[N,OC] = bf16(inp) . bf16(w)^T + b          (bias through cuBLASLt's epilogue)
 *   backward: dinp[N,C] = bf16(dout) . bf16(w)               (assigned)
 *             dw[OC,C] += bf16(dout)^T . bf16(inp)           db[OC] += sum over rows of dout
 *   The bias gradient of an fp32 dout is summed by a column-sum kernel in the same pass that
 *   converts dout to bf16 (in double over fixed row chunks, as loom_cuda_colsum_accumulate, so it
 *   equals the fp32 op's sum bit for bit); that of a bf16 dout (the typed activations) by one
 *   more product, dout^T . 1, accumulating in fp32 (colsum_convert). cuBLASLt's bias-gradient
 *   epilogues (BGRADB, DGELU_BGRAD) and its GELU
 *   forward epilogue (GELU_AUX_BIAS) measured 2-3x slower than the plain product plus a pass on
 *   an H200 at GPT-2's shapes (bench/bench_cuda_linear), so they are not used.
 *
 *   linear + GELU (linear_gelu_forward):  pre = bf16(inp) . bf16(w)^T + b, then out = gelu(pre)
 *             by the GELU kernel;
 *   its backward (linear_gelu_backward): dpre = (bf16(dout) . bf16(w)) * gelu'(pre) from one
 *             product (epilogue DGELU, reading pre as the auxiliary matrix, leading dimension C),
 *             dpre's column sums (the bias gradient of the product that made pre) by the
 *             column-sum kernel, then dw and db as above; one function for fp32 and for bf16
 *             activations (loom_cuda_linear_gelu_backward_16). Where cuBLASLt offers no
 *             algorithm for an epilogue (the heuristic decides, per shape and alignment; the
 *             auxiliary matrix needs a leading dimension divisible by 8), the product runs plain
 *             and the separate kernels follow (bias fill, gelu_backward).
 *
 * Weights inside the registered range [params, params + n) (the model's flat parameter buffer)
 * are converted once after they change: the backend notes the hull of what its own ops or the
 * `written` op touched there (loom_cuda_wrote) and converts that hull at the next product, which
 * in training is once per step, after the optimizer (AdamW writes the copy of what it updates
 * itself), or bucket by bucket as the distributed optimizer's overlapped gather completes. Other
 * operands (activations, gradients of activations, weights outside the range) are converted per
 * call into one reusable workspace, grown on demand (its size settles in the first step).
 *
 * The products go through cuBLASLt with column-major conventions as in matmul.cu. A plan (the
 * descriptors and the algorithm) is cached per shape, transposition, epilogue and operand
 * alignment (bias and auxiliary vectors included), so the heuristic runs once per distinct
 * product. Its first LT_CANDIDATES algorithms are timed on the first call's operands and the
 * fastest kept (plan_tune: 4 to 13% off some of GPT-2's products); under set_deterministic the
 * heuristic's first choice is kept instead, a function of the plan's key alone, so that a run
 * repeats bit for bit.
 *
 * Activations in bf16 (the ops with typed activations given LOOM_DTYPE_BF16, bf16 products only):
 * the GELU MLP's pre, act and dpre are stored in bf16 and never exist in fp32. The forward
 * product writes pre in bf16 (with its bias), and the GELU kernel reads it back and writes
 * out = gelu(pre) in bf16; the backward product writes dpre in bf16 (epilogue DGELU reading the
 * bf16 pre), whose column sums are then taken from the stored bf16 values; the products that
 * read them (fc2's forward and weight gradient, fc1's backward) take them as bf16 operands with
 * no conversion. cuBLASLt takes the auxiliary matrix and the bias in the type of D, so the
 * forward adds the bias's bf16 copy (rounded once, as the weights). Where cuBLASLt offers no
 * algorithm for such a product, or refuses it when called: a forward with a bias runs without
 * the epilogue and a kernel adds the fp32 bias to the 16-bit output (rounding it again); the
 * DGELU product runs in fp32 into the workspace and a kernel applies gelu' and rounds.
 *
 * set_matmul_dtype(LOOM_DTYPE_F16) takes the same path with fp16 operands (round to nearest even,
 * values beyond 65504 become infinite: that is for a loss scaler to notice); attention then stays
 * in fp32.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <string.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gelu.cuh"

#ifndef LT_CANDIDATES /* a build may ask for more (-DLT_CANDIDATES=N) to measure the trade */
#define LT_CANDIDATES 8
#endif

struct loom_cuda_lt_plan {
    /* key */
    int64_t m, n, k, lda, ldb, ldc, aux_ld;
    int ta, tb, epi, f16, c16; /* c16: C and D in the 16-bit type (else fp32) */
    unsigned align_a, align_b, align_c, align_bias, align_aux;
    /* value */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    /* the heuristic's first LT_CANDIDATES algorithms, timed at the first call (plan_tune) */
    cublasLtMatmulAlgo_t cand[LT_CANDIDATES];
    int ncand, tuned;
};

#define LOOM_LT_CHECK(expr)                                                                   \
    do {                                                                                      \
        cublasStatus_t loom_l_ = (expr);                                                      \
        if (loom_l_ != CUBLAS_STATUS_SUCCESS)                                                 \
            loom_abort(__FILE__, __LINE__, "cuBLASLt error %d (%s): %s", (int)loom_l_,        \
                       cublasGetStatusString(loom_l_), #expr);                                \
    } while (0)

/* ---- fp32 -> bf16 ---- */

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] = __float2bfloat16_rn(src[i]);
}

/* four elements a thread: src 16-byte and dst 8-byte aligned, n a multiple of 4 */
__global__ void f32_to_bf16_x4_kernel(__nv_bfloat162 *dst, const float4 *src, int64_t n4) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n4; i += stride) {
        float4 v = src[i];
        dst[2 * i] = __floats2bfloat162_rn(v.x, v.y);
        dst[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

__global__ void f32_to_f16_kernel(__half *dst, const float *src, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] = __float2half_rn(src[i]);
}

__global__ void f32_to_f16_x4_kernel(__half2 *dst, const float4 *src, int64_t n4) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n4; i += stride) {
        float4 v = src[i];
        dst[2 * i] = __floats2half2_rn(v.x, v.y);
        dst[2 * i + 1] = __floats2half2_rn(v.z, v.w);
    }
}

/* fp32 -> the 16-bit type of the products (bf16, or fp16 with matmul_f16) */
void loom_cuda_to16(struct loom_backend *be, void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    cudaStream_t st = loom_cuda_stream(be);
    int blocks = 4 * loom_cuda_impl(be)->num_sms;
    if (loom_cuda_impl(be)->matmul_f16) {
        int64_t need;
        if (n % 4 == 0 && loom_aligned(16, src) && loom_aligned(8, dst)) {
            need = (n / 4 + 255) / 256;
            f32_to_f16_x4_kernel<<<(unsigned)(need < blocks ? need : blocks), 256, 0, st>>>(
                (__half2 *)dst, (const float4 *)src, n / 4);
        } else {
            need = (n + 255) / 256;
            f32_to_f16_kernel<<<(unsigned)(need < blocks ? need : blocks), 256, 0, st>>>(
                (__half *)dst, src, n);
        }
        LOOM_CUDA_LAUNCHED();
        return;
    }
    if (n % 4 == 0 && loom_aligned(16, src) && loom_aligned(8, dst)) {
        int64_t n4 = n / 4;
        int64_t need = (n4 + 255) / 256;
        f32_to_bf16_x4_kernel<<<(unsigned)(need < blocks ? need : blocks), 256, 0, st>>>(
            (__nv_bfloat162 *)dst, (const float4 *)src, n4);
    } else {
        int64_t need = (n + 255) / 256;
        f32_to_bf16_kernel<<<(unsigned)(need < blocks ? need : blocks), 256, 0, st>>>(
            (__nv_bfloat16 *)dst, src, n);
    }
    LOOM_CUDA_LAUNCHED();
}

/* ---- operands ---- */

static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

/* The workspace for `count` pieces of the given sizes in bytes (bf16 operands, fp32 bias-gradient
 * vectors); returns their places, each 256-byte aligned. */
static void workspace(struct loom_backend *be, int count, const size_t *bytes, void **out) {
    struct loom_cuda *c = loom_cuda_impl(be);
    size_t total = 0;
    for (int i = 0; i < count; i++) total += round256(bytes[i]);
    loom_cuda_grow(be, &c->act_ws, &c->act_ws_bytes, total, "bf16 workspace");
    char *p = (char *)c->act_ws;
    for (int i = 0; i < count; i++) {
        out[i] = p;
        p += round256(bytes[i]);
    }
}

/* bytes of n 16-bit elements, of n floats */
static size_t b16(int64_t n) { return (size_t)(n > 0 ? n : 0) * 2; }
static size_t b32(int64_t n) { return (size_t)(n > 0 ? n : 0) * sizeof(float); }

/* bf16 copy of the weight w[n]: the registered copy when w lies inside the range (refreshed when
 * stale), else NULL (the caller converts it into the workspace). */
static const void *weight_copy(struct loom_backend *be, const float *w, int64_t n) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (!c->params_bf16 || w < c->params || w + n > c->params + c->nparams) return NULL;
    if (c->dirty_lo < c->dirty_hi) { /* the stale hull only */
        loom_cuda_to16(be, (char *)c->params_bf16 + (size_t)c->dirty_lo * 2,
                       c->params + c->dirty_lo, c->dirty_hi - c->dirty_lo);
        c->dirty_lo = c->dirty_hi = 0;
    }
    return (const __nv_bfloat16 *)c->params_bf16 + (w - c->params);
}

/* ---- cuBLASLt plans ---- */

/* What a product does after multiplying (cuBLASLt's epilogue). epi is a cublasLtEpilogue_t; bias
 * is the bias vector it adds (BIAS); aux is the GELU input matrix it reads (DGELU); both of the
 * type of the product's output (cuBLASLt's default), the matrix column-major with leading
 * dimension aux_ld. */
struct lt_epilogue {
    cublasLtEpilogue_t epi;
    const void *bias;
    const void *aux;
    int64_t aux_ld;
};

static int epi_has_bias(int epi) { return epi == CUBLASLT_EPILOGUE_BIAS; }
static int epi_has_aux(int epi) { return epi == CUBLASLT_EPILOGUE_DGELU; }

static unsigned alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && (a & (al - 1))) al >>= 1;
    return al;
}

static void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v,
                     size_t n) {
    LOOM_LT_CHECK(cublasLtMatmulDescSetAttribute(d, a, v, n));
}

/* The epilogue's vectors and matrices on the descriptor (also before the heuristic, which reads
 * their alignment from the pointers). */
static void set_epilogue_pointers(cublasLtMatmulDesc_t d, const struct lt_epilogue *ep) {
    if (epi_has_bias(ep->epi))
        set_attr(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep->bias, sizeof ep->bias);
    if (epi_has_aux(ep->epi)) {
        set_attr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ep->aux, sizeof ep->aux);
        set_attr(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ep->aux_ld, sizeof ep->aux_ld);
    }
}

static void plan_destroy(struct loom_cuda_lt_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
}

/* Descriptors for one product, with the epilogue ep (NULL: none). Returns 0 when the heuristic
 * offers no algorithm for the epilogue (the caller then runs without it). */
static int plan_build(struct loom_backend *be, struct loom_cuda_lt_plan *p,
                      const struct lt_epilogue *ep) {
    struct loom_cuda *c = loom_cuda_impl(be);
    LOOM_LT_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set_attr(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (ep) {
        set_attr(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep->epi, sizeof ep->epi);
        set_epilogue_pointers(p->desc, ep);
    }
    /* stored shapes: op(A) is m x k, op(B) is k x n */
    cudaDataType_t t16 = p->f16 ? CUDA_R_16F : CUDA_R_16BF;
    LOOM_LT_CHECK(cublasLtMatrixLayoutCreate(&p->la, t16, p->ta ? p->k : p->m,
                                             p->ta ? p->m : p->k, p->lda));
    LOOM_LT_CHECK(cublasLtMatrixLayoutCreate(&p->lb, t16, p->tb ? p->n : p->k,
                                             p->tb ? p->k : p->n, p->ldb));
    LOOM_LT_CHECK(cublasLtMatrixLayoutCreate(&p->lc, p->c16 ? t16 : CUDA_R_32F, p->m, p->n,
                                             p->ldc));
    cublasLtMatmulPreference_t pref;
    LOOM_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = c->cublas_ws_bytes;
    LOOM_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &ws, sizeof ws));
    uint32_t al[4] = {p->align_a, p->align_b, p->align_c, p->align_c};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++)
        LOOM_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &al[i], sizeof al[i]));
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref,
                                       c->deterministic ? 1 : LT_CANDIDATES, res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
        if (ep) return 0;
        loom_abort(__FILE__, __LINE__,
                   "cuBLASLt offers no %s algorithm for m %lld n %lld k %lld (status %d)",
                   p->f16 ? "fp16" : "bf16", (long long)p->m, (long long)p->n, (long long)p->k, (int)st);
    }
    p->algo = res[0].algo;
    p->ncand = 0;
    for (int i = 0; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS) p->cand[p->ncand++] = res[i].algo;
    p->tuned = p->ncand < 2;
    return 1;
}

/* Times the plan's candidate algorithms on the call's own operands (one warm-up and three timed
 * runs each, on the stream) and keeps the fastest: the first call of each distinct product, so in
 * the first training step. C is restored after the trials when beta is nonzero (a copy of up to
 * 64 MiB; a larger accumulating C keeps the heuristic's first choice). Which algorithm wins can
 * differ between runs of the program, and with it the rounding of the sums: set_deterministic
 * keeps the heuristic's first choice, a function of the shape alone. */
struct plan_trial {
    struct loom_backend *be;
    struct loom_cuda_lt_plan *p;
    const void *A, *B;
    float beta;
    void *C;
};

/* loom_cuda_fastest's run: candidate algorithm i of the plan */
static int plan_trial_run(void *ctx, int i) {
    const struct plan_trial *t = (const struct plan_trial *)ctx;
    struct loom_cuda *c = loom_cuda_impl(t->be);
    const struct loom_cuda_lt_plan *p = t->p;
    const float alpha = 1.0f;
    return cublasLtMatmul(c->lt, p->desc, &alpha, t->A, p->la, t->B, p->lb, &t->beta, t->C, p->lc,
                          t->C, p->lc, &p->cand[i], c->cublas_ws, c->cublas_ws_bytes,
                          loom_cuda_stream(t->be)) == CUBLAS_STATUS_SUCCESS;
}

static void plan_tune(struct loom_backend *be, struct loom_cuda_lt_plan *p, const void *A,
                      const void *B, float beta, void *C) {
    cudaStream_t st = loom_cuda_stream(be);
    p->tuned = 1;
    /* C's extent: n columns of m, ldc apart (no bytes past the last column's m) */
    const size_t cbytes = ((size_t)(p->n - 1) * (size_t)p->ldc + (size_t)p->m) * (p->c16 ? 2 : 4);
    void *saved = NULL;
    if (beta != 0.0f) {
        if (cbytes > ((size_t)64 << 20)) return;
        saved = loom_cuda_alloc(be, cbytes);
        if (!saved) return;
        LOOM_CUDA_CHECK(cudaMemcpyAsync(saved, C, cbytes, cudaMemcpyDeviceToDevice, st));
    }
    struct plan_trial trial = {be, p, A, B, beta, C};
    const int besti = loom_cuda_fastest(be, p->ncand, plan_trial_run, &trial);
    if (besti >= 0) p->algo = p->cand[besti];
    if (saved) {
        LOOM_CUDA_CHECK(cudaMemcpyAsync(C, saved, cbytes, cudaMemcpyDeviceToDevice, st));
        loom_cuda_release(be, saved); /* waits for the copy */
    }
}

static int same_key(const struct loom_cuda_lt_plan *p, const struct loom_cuda_lt_plan *key) {
    return p->m == key->m && p->n == key->n && p->k == key->k && p->lda == key->lda &&
           p->ldb == key->ldb && p->ldc == key->ldc && p->aux_ld == key->aux_ld &&
           p->ta == key->ta && p->tb == key->tb && p->epi == key->epi && p->f16 == key->f16 &&
           p->c16 == key->c16 && p->align_a == key->align_a && p->align_b == key->align_b &&
           p->align_c == key->align_c && p->align_bias == key->align_bias &&
           p->align_aux == key->align_aux;
}

static struct loom_cuda_lt_plan *plan_for(struct loom_backend *be,
                                          const struct loom_cuda_lt_plan *key,
                                          const struct lt_epilogue *ep) {
    struct loom_cuda *c = loom_cuda_impl(be);
    for (int i = 0; i < c->nplans; i++) {
        struct loom_cuda_lt_plan *p = &c->plans[i];
        /* an entry without descriptors: no algorithm */
        if (same_key(p, key)) return p->desc ? p : NULL;
    }
    if (c->nplans == c->cap_plans) {
        int cap = c->cap_plans ? 2 * c->cap_plans : 32;
        struct loom_cuda_lt_plan *np =
            (struct loom_cuda_lt_plan *)realloc(c->plans, (size_t)cap * sizeof *np);
        LOOM_ASSERT(np);
        c->plans = np;
        c->cap_plans = cap;
    }
    struct loom_cuda_lt_plan *p = &c->plans[c->nplans++];
    *p = *key;
    p->desc = NULL;
    p->la = p->lb = p->lc = NULL;
    if (!plan_build(be, p, ep)) {
        plan_destroy(p);
        p->desc = NULL;
        p->la = p->lb = p->lc = NULL;
        return NULL;
    }
    return p;
}

/* C[m,n] (col-major, ld ldc; fp32, or the 16-bit type of the products with c16) =
 * op(A) op(B) + beta C, then the epilogue ep (NULL: none). With an epilogue returns 0, having
 * done nothing, when cuBLASLt has no algorithm for it or refuses it when called (the plan is
 * then dropped, so every later call falls back alike); without one it always runs. */
static int lt_gemm_any(struct loom_backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
                       const void *A, int64_t lda, const void *B, int64_t ldb, float beta,
                       void *C, int c16, int64_t ldc, const struct lt_epilogue *ep) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (ep && epi_has_aux(ep->epi) && ep->aux_ld % 8 != 0) return 0; /* cuBLASLt's requirement */
    struct loom_cuda_lt_plan key;
    memset(&key, 0, sizeof key);
    key.m = m;
    key.n = n;
    key.k = k;
    key.lda = lda;
    key.ldb = ldb;
    key.ldc = ldc;
    key.ta = ta;
    key.tb = tb;
    key.f16 = c->matmul_f16;
    key.c16 = c16;
    key.align_a = alignment(A);
    key.align_b = alignment(B);
    key.align_c = alignment(C);
    if (ep) {
        key.epi = (int)ep->epi;
        if (epi_has_bias(ep->epi)) key.align_bias = alignment(ep->bias);
        if (epi_has_aux(ep->epi)) {
            key.align_aux = alignment(ep->aux);
            key.aux_ld = ep->aux_ld;
        }
    }
    struct loom_cuda_lt_plan *p = plan_for(be, &key, ep);
    if (!p) return 0;
    if (ep) set_epilogue_pointers(p->desc, ep);
    if (!p->tuned) plan_tune(be, p, A, B, beta, C);
    const float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(c->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, C, p->lc,
                                       C, p->lc, &p->algo, c->cublas_ws, c->cublas_ws_bytes,
                                       loom_cuda_stream(be));
    if (ep && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) {
        plan_destroy(p); /* the entry stays, without descriptors: no algorithm */
        p->desc = NULL;
        p->la = p->lb = p->lc = NULL;
        return 0;
    }
    LOOM_LT_CHECK(st);
    return 1;
}

/* lt_gemm_any with an fp32 C */
static int lt_gemm(struct loom_backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
                   const void *A, int64_t lda, const void *B, int64_t ldb, float beta, float *C,
                   int64_t ldc, const struct lt_epilogue *ep) {
    return lt_gemm_any(be, ta, tb, m, n, k, A, lda, B, ldb, beta, C, 0, ldc, ep);
}

/* ---- column sums (bias gradients), fused with the conversion of an operand ---- */

template <typename T16> __global__ void ones16_kernel(T16 *p, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = loom_from_f32<T16>(1.0f);
}

/* N ones in the products' 16-bit type: c->ones16, made (grown) at the first call that needs
 * them, or when the type changes */
static const void *ones16(struct loom_backend *be, int64_t N) {
    struct loom_cuda *c = loom_cuda_impl(be);
    const size_t bytes = (size_t)N * 2;
    if (c->ones16_bytes >= bytes && c->ones16_f16 == c->matmul_f16) return c->ones16;
    loom_cuda_grow(be, &c->ones16, &c->ones16_bytes, bytes, "column of ones");
    const int64_t n = (int64_t)(c->ones16_bytes / 2);
    if (c->matmul_f16)
        ones16_kernel<<<loom_cuda_grid(n, 256), 256, 0, c->stream>>>((__half *)c->ones16, n);
    else
        ones16_kernel<<<loom_cuda_grid(n, 256), 256, 0, c->stream>>>((__nv_bfloat16 *)c->ones16, n);
    LOOM_CUDA_LAUNCHED();
    c->ones16_f16 = c->matmul_f16;
    return c->ones16;
}

/* out[C] += the column sums of in[N,C], in fp32 (in16 = 0) or in the products' 16-bit type
 * (in16 = 1). A 16-bit in is summed by the tensor cores, as the product in^T . 1 with a column of
 * ones, accumulated in fp32 onto out (cuBLASLt reads in at 3.2-3.8 TB/s on an H200 where the
 * column-sum kernel reaches 2.2-2.6: bench_cuda_linear colsum / aug); an fp32 in by the
 * column-sum kernel (in double over fixed row chunks, as loom_cuda_colsum_accumulate, so it
 * equals the fp32 op's sum bit for bit). With dst (fp32 in only), that kernel's pass also
 * converts in into dst in the 16-bit type, as loom_cuda_to16. out NULL: only that conversion. */
static void colsum_convert(struct loom_backend *be, float *out, void *dst, const void *in,
                           int in16, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    if (!out) {
        if (dst) loom_cuda_to16(be, dst, (const float *)in, N * C);
        return;
    }
    if (in16 && lt_gemm(be, 0, 0, C, 1, N, in, C, ones16(be, N), N, 1.0f, out, C, NULL)) return;
    const enum loom_dtype t16 = loom_cuda_impl(be)->matmul_f16 ? LOOM_DTYPE_F16 : LOOM_DTYPE_BF16;
    loom_cuda_colsum_convert(be, out, dst, t16, in, in16 ? t16 : LOOM_DTYPE_F32, N, C);
}

/* ---- the products of the linear ops, on converted operands ---- */

/* out[N,OC] = xb . wb^T + b (b may be NULL): the bias through the epilogue, or filled in first
 * when cuBLASLt has no algorithm with it. */
static void product_forward(struct loom_backend *be, float *out, const void *xb, const void *wb,
                            const float *b, int64_t N, int64_t C, int64_t OC) {
    struct lt_epilogue ep = {CUBLASLT_EPILOGUE_BIAS, b, NULL, 0};
    if (lt_gemm(be, 1, 0, OC, N, C, wb, C, xb, C, 0.0f, out, OC, b ? &ep : NULL)) return;
    loom_cuda_fill_bias(be, out, b, N, OC);
    lt_gemm(be, 1, 0, OC, N, C, wb, C, xb, C, 1.0f, out, OC, NULL);
}

/* dw[OC,C] += doutb^T . xb */
static void product_weight_grad(struct loom_backend *be, float *dw, const void *doutb,
                                const void *xb, int64_t N, int64_t C, int64_t OC) {
    lt_gemm(be, 0, 1, C, OC, N, xb, C, doutb, OC, 1.0f, dw, C, NULL);
}

/* ---- the linear ops ---- */

/* b[OC] added to the rows of a 16-bit out[N,OC], rounded again: where cuBLASLt has no algorithm
 * for a 16-bit output with the bias epilogue. */
template <typename T16>
__global__ void bias16_add_kernel(T16 *out, const float *b, int64_t N, int64_t OC) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N * OC;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = loom_from_f32<T16>(loom_to_f32(out[i]) + b[i % OC]);
}

/* The linear ops on arrays that are each fp32 or of the products' 16-bit type (the flags x16:
 * bf16, or fp16 with fp16 products). An fp32 operand is converted into the workspace, a 16-bit
 * one read as it is; a 16-bit output is written by the product itself.
 *   forward:  out[N,OC] = x . w^T + b        (b may be NULL; with out16 the bias's 16-bit copy
 *                                           is added by the epilogue)
 *   backward: dinp[N,C] = dout . w (assigned, if dinp), dw[OC,C] += dout^T . inp (if dw),
 *             db[OC] += sum over rows of dout as stored (if db; in the pass that converts an
 *             fp32 dout). */
void loom_cuda_linear_forward_16(struct loom_backend *be, void *out, int out16, const void *inp,
                                 int inp16, const float *w, const float *b, int64_t N, int64_t C,
                                 int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    LOOM_ASSERT(C > 0);
    const void *wb = weight_copy(be, w, OC * C);
    const void *bb = b && out16 ? weight_copy(be, b, OC) : NULL;
    size_t bytes[3] = {inp16 ? 0 : b16(N * C), wb ? 0 : b16(OC * C), b && out16 && !bb ? b16(OC) : 0};
    void *ws[3];
    workspace(be, 3, bytes, ws);
    const void *x = inp;
    if (!inp16) {
        loom_cuda_to16(be, ws[0], (const float *)inp, N * C);
        x = ws[0];
    }
    if (!wb) {
        loom_cuda_to16(be, ws[1], w, OC * C);
        wb = ws[1];
    }
    if (!out16) {
        product_forward(be, (float *)out, x, wb, b, N, C, OC);
        return;
    }
    if (b && !bb) {
        loom_cuda_to16(be, ws[2], b, OC);
        bb = ws[2];
    }
    struct lt_epilogue ep = {CUBLASLT_EPILOGUE_BIAS, bb, NULL, 0};
    if (lt_gemm_any(be, 1, 0, OC, N, C, wb, C, x, C, 0.0f, out, 1, OC, b ? &ep : NULL)) return;
    lt_gemm_any(be, 1, 0, OC, N, C, wb, C, x, C, 0.0f, out, 1, OC, NULL);
    cudaStream_t st = loom_cuda_stream(be);
    if (loom_cuda_impl(be)->matmul_f16)
        bias16_add_kernel<__half><<<loom_cuda_grid(N * OC, 256), 256, 0, st>>>((__half *)out, b,
                                                                              N, OC);
    else
        bias16_add_kernel<__nv_bfloat16><<<loom_cuda_grid(N * OC, 256), 256, 0, st>>>(
            (__nv_bfloat16 *)out, b, N, OC);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_linear_backward_16(struct loom_backend *be, void *dinp, int dinp16, float *dw,
                                  float *db, const void *dout, int dout16, const void *inp,
                                  int inp16, const float *w, int64_t N, int64_t C, int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    const int want_dinp = dinp && C > 0, want_dw = dw && C > 0;
    const void *wb = want_dinp ? weight_copy(be, w, OC * C) : NULL;
    size_t bytes[3] = {!dout16 && (want_dinp || want_dw) ? b16(N * OC) : 0,
                       want_dw && !inp16 ? b16(N * C) : 0, want_dinp && !wb ? b16(OC * C) : 0};
    void *ws[3];
    workspace(be, 3, bytes, ws);
    const void *d = dout;
    if (dout16) {
        colsum_convert(be, db, NULL, dout, 1, N, OC);
    } else if (want_dinp || want_dw) {
        colsum_convert(be, db, ws[0], dout, 0, N, OC);
        d = ws[0];
    } else {
        colsum_convert(be, db, NULL, dout, 0, N, OC);
    }
    if (want_dinp) {
        if (!wb) {
            loom_cuda_to16(be, ws[2], w, OC * C);
            wb = ws[2];
        }
        lt_gemm_any(be, 0, 0, C, N, OC, wb, C, d, OC, 0.0f, dinp, dinp16, C, NULL);
    }
    if (want_dw) {
        const void *x = inp;
        if (!inp16) {
            loom_cuda_to16(be, ws[1], (const float *)inp, N * C);
            x = ws[1];
        }
        product_weight_grad(be, dw, d, x, N, C, OC);
    }
}

/* ---- linear + GELU backward ---- */

/* What the DGELU epilogue writes, from an fp32 product d: dpre = bf16(d * gelu'(pre)); V
 * elements a thread (V = 8: 16-byte accesses of pre and dpre, two of d, where all are aligned) */
template <bool ERF, int V>
__global__ void gelu16_backward_kernel(__nv_bfloat16 *dpre, const float *d,
                                       const __nv_bfloat16 *pre, int64_t n) {
    typedef loom_vec<__nv_bfloat16, V> vec16;
    typedef loom_vec<float, V> vec32;
    for (int64_t i = V * (blockIdx.x * (int64_t)blockDim.x + threadIdx.x); i < n;
         i += V * (int64_t)gridDim.x * blockDim.x) {
        const vec32 dv = *reinterpret_cast<const vec32 *>(d + i);
        const vec16 pv = *reinterpret_cast<const vec16 *>(pre + i);
        vec16 o;
#pragma unroll
        for (int j = 0; j < V; j++)
            o.v[j] = __float2bfloat16_rn(dv.v[j] * gelu_grad_of<ERF>(__bfloat162float(pv.v[j])));
        *reinterpret_cast<vec16 *>(dpre + i) = o;
    }
}

template <bool ERF>
static void gelu16_backward(cudaStream_t st, __nv_bfloat16 *dpre, const float *d,
                            const __nv_bfloat16 *pre, int64_t n) {
    if (n % 8 == 0 && loom_aligned(32, d) && loom_aligned(16, dpre, pre))
        gelu16_backward_kernel<ERF, 8><<<loom_cuda_grid(n / 8, 256), 256, 0, st>>>(dpre, d, pre, n);
    else
        gelu16_backward_kernel<ERF, 1><<<loom_cuda_grid(n, 256), 256, 0, st>>>(dpre, d, pre, n);
}

/* The workspace with the given pieces; x[rows, cols] converted into piece 0 (x16: 16-bit
 * already, not converted), its column sums added to xsum when that is set, and, when wreg is NULL
 * (w has no registered copy), w[nw] into piece 1. Returns the bf16 w, and in *xb the 16-bit x. */
static const void *operands16(struct loom_backend *be, int count, const size_t *bytes, void **ws,
                              const void *x, int x16, int64_t rows, int64_t cols, float *xsum,
                              const void **xb, const float *w, int64_t nw, const void *wreg) {
    workspace(be, count, bytes, ws);
    colsum_convert(be, xsum, x16 ? NULL : ws[0], x, x16, rows, cols);
    *xb = x16 ? x : ws[0];
    if (wreg) return wreg;
    loom_cuda_to16(be, ws[1], w, nw);
    return ws[1];
}

/* linear_gelu_backward with 16-bit products: dpre from one product with cuBLASLt's DGELU
 * epilogue (reading pre, writing dpre: both fp32, or both bf16 with act16); its column sums
 * (dpre_b) and those of dout (db) by the column-sum kernels, dout's in the pass that converts it
 * (the epilogues that sum in the product measured 2-3x slower on an H200); dw from the 16-bit
 * dout and act (an fp32 act converted first). The epilogue is the tanh form's: with the erf form,
 * or without an algorithm for DGELU, the product runs plain in fp32 (into dpre, or with act16 into
 * the workspace) and a kernel applies gelu' (gelu_backward, or with act16 gelu16_backward_kernel,
 * which rounds). */
void loom_cuda_linear_gelu_backward_16(struct loom_backend *be, enum loom_gelu form, void *dpre,
                                       int act16, float *dpre_b, float *dw, float *db,
                                       const void *dout, int dout16, const void *act,
                                       const void *pre, const float *w, int64_t N, int64_t C,
                                       int64_t OC) {
    LOOM_ASSERT(N > 0 && C > 0 && OC > 0);
    const void *wreg = weight_copy(be, w, OC * C);
    /* pieces: an fp32 dout and w in 16 bits, an fp32 act in 16 bits (for dw), and the fp32
     * product of the bf16 fallback (sized only when it runs) */
    size_t bytes[4] = {dout16 ? 0 : b16(N * OC), wreg ? 0 : b16(OC * C),
                       dw && !act16 ? b16(N * C) : 0, 0};
    void *ws[4];
    const void *d16;
    const void *wb = operands16(be, 4, bytes, ws, dout, dout16, N, OC, db, &d16, w, OC * C, wreg);
    struct lt_epilogue ep = {CUBLASLT_EPILOGUE_DGELU, NULL, pre, C};
    if (form == LOOM_GELU_ERF ||
        !lt_gemm_any(be, 0, 0, C, N, OC, wb, C, d16, OC, 0.0f, dpre, act16, C, &ep)) {
        float *d = (float *)dpre;
        if (act16) {
            bytes[3] = b32(N * C); /* the workspace grows: the operands again (db has its sums) */
            wb = operands16(be, 4, bytes, ws, dout, dout16, N, OC, NULL, &d16, w, OC * C, wreg);
            d = (float *)ws[3];
        }
        lt_gemm(be, 0, 0, C, N, OC, wb, C, d16, OC, 0.0f, d, C, NULL);
        int64_t n = N * C;
        if (act16) {
            cudaStream_t st = loom_cuda_stream(be);
            __nv_bfloat16 *o = (__nv_bfloat16 *)dpre;
            const __nv_bfloat16 *p = (const __nv_bfloat16 *)pre;
            if (form == LOOM_GELU_ERF) gelu16_backward<true>(st, o, d, p, n);
            else gelu16_backward<false>(st, o, d, p, n);
            LOOM_CUDA_LAUNCHED();
        } else {
            loom_cuda_gelu_backward(be, form, d, d, (const float *)pre, n);
        }
    }
    if (dpre_b) colsum_convert(be, dpre_b, NULL, dpre, act16, N, C);
    if (!dw) return;
    const void *a = act;
    if (!act16) {
        loom_cuda_to16(be, ws[2], (const float *)act, N * C);
        a = ws[2];
    }
    product_weight_grad(be, dw, d16, a, N, C, OC);
}

/* ---- activations in bf16 ---- */

enum loom_dtype loom_cuda_activation_dtype(struct loom_backend *be) {
    struct loom_cuda *c = loom_cuda_impl(be);
    return c->matmul_bf16 && !c->matmul_f16 ? LOOM_DTYPE_BF16 : LOOM_DTYPE_F32;
}

int loom_cuda_typed16(struct loom_backend *be, enum loom_dtype dt, const char *op) {
    if (dt == LOOM_DTYPE_F32) return 0;
    if (dt != loom_cuda_activation_dtype(be))
        loom_abort(__FILE__, __LINE__,
                   "cuda: %s with %s activations needs bf16 matrix products (activation_dtype)",
                   op, loom_dtype_name(dt));
    return 1;
}

/* pre = the product with its bias (the bias's bf16 copy), written in bf16 by the product itself
 * (linear_forward_16); out = gelu(pre) by a kernel that reads it back (a product with cuBLASLt's
 * GELU epilogue measured 2.7x slower on an H200 at GPT-2's fc1). */
void loom_cuda_linear_gelu_forward_act16(struct loom_backend *be, enum loom_gelu form, void *out,
                                         void *pre, const void *inp, int inp16, const float *w,
                                         const float *b, int64_t N, int64_t C, int64_t OC) {
    LOOM_ASSERT(N > 0 && C > 0 && OC > 0);
    loom_cuda_linear_forward_16(be, pre, 1, inp, inp16, w, b, N, C, OC);
    loom_cuda_gelu16_forward(be, form, out, pre, N * OC);
}

/* ---- selection ---- */

enum loom_status loom_cuda_set_matmul_dtype(struct loom_backend *be, enum loom_dtype dt,
                                            const float *params, int64_t n) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (dt != LOOM_DTYPE_F32 && dt != LOOM_DTYPE_BF16 && dt != LOOM_DTYPE_F16)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "cuda: matrix products in %s are not supported; valid: f32, bf16, f16",
                         loom_dtype_name(dt));
    if (c->params_bf16) {
        LOOM_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        loom_cuda_release(be, c->params_bf16);
        c->params_bf16 = NULL;
    }
    c->params = NULL;
    c->nparams = 0;
    c->matmul_bf16 = dt == LOOM_DTYPE_BF16 || dt == LOOM_DTYPE_F16;
    c->matmul_f16 = dt == LOOM_DTYPE_F16;
    if (!c->matmul_bf16) return LOOM_OK;
    if (!c->lt) {
        cublasStatus_t st = cublasLtCreate(&c->lt);
        if (st != CUBLAS_STATUS_SUCCESS) {
            c->lt = NULL;
            c->matmul_bf16 = c->matmul_f16 = 0;
            return loom_fail(LOOM_ERR_UNSUPPORTED, "cuda: cublasLtCreate failed: %s",
                             cublasGetStatusString(st));
        }
    }
    if (params && n > 0) {
        c->params_bf16 = loom_cuda_alloc(be, (size_t)n * 2);
        if (!c->params_bf16) {
            c->matmul_bf16 = c->matmul_f16 = 0;
            return loom_fail(LOOM_ERR_OOM, "cuda: out of device memory for the bf16 copy of %lld "
                             "parameters", (long long)n);
        }
        c->params = params;
        c->nparams = n;
        c->dirty_lo = 0;
        c->dirty_hi = n;
    }
    return LOOM_OK;
}

void loom_cuda_matmul_free(struct loom_backend *be) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (!c) return;
    for (int i = 0; i < c->nplans; i++) plan_destroy(&c->plans[i]);
    free(c->plans);
    c->plans = NULL;
    c->nplans = c->cap_plans = 0;
    if (c->lt) cublasLtDestroy(c->lt);
    c->lt = NULL;
}
