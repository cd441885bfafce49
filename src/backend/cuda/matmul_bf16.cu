/* bf16 matrix products for the linear ops (set_matmul_dtype(LOOM_DTYPE_BF16)): the inputs of
 * each product are rounded to bf16 (round to nearest even), the tensor cores multiply them and
 * accumulate in fp32, and the result is written in fp32. Parameters, activations, gradients and
 * the optimizer state stay fp32; only the product inputs are narrowed. (The exception is the
 * fused classifier's logits, at the end of the file: written and read in the 16-bit type.)
 *
 *   forward:  out[N,OC] = bf16(inp) . bf16(w)^T + b          (bias through cuBLASLt's epilogue)
 *   backward: dinp[N,C] = bf16(dout) . bf16(w)               (assigned)
 *             dw[OC,C] += bf16(dout)^T . bf16(inp)           db[OC] += sum over rows of bf16(dout)
 *   The bias gradient comes out of the weight-gradient product (epilogue BGRADB, which sums the
 *   product's bf16 operand in fp32) into a scratch vector that is then added to db: the epilogue
 *   assigns, db accumulates.
 *
 *   linear + GELU (linear_gelu_forward):  pre = bf16(inp) . bf16(w)^T + b, out = gelu(pre),
 *             both written by one product (epilogue GELU_AUX_BIAS: cuBLASLt's tanh GELU, with
 *             the pre-activation as the auxiliary output, fp32, leading dimension OC);
 *   its backward (linear_gelu_backward): dpre = (bf16(dout) . bf16(w)) * gelu'(pre) from one
 *             product (epilogue DGELU_BGRAD, which also sums dpre over the rows in fp32 for the
 *             bias gradient of the product that made pre), then dw and db as above.
 *   Where cuBLASLt offers no algorithm for an epilogue (the heuristic decides, per shape and
 *   alignment; the auxiliary matrix needs a leading dimension divisible by 8), the product runs
 *   plain and the separate kernels follow (bias fill, gelu_forward / gelu_backward, column sums).
 *
 * Weights inside the registered range [params, params + n) (the model's flat parameter buffer)
 * are converted as a whole, once after they change: the backend marks the copy stale when one
 * of its own ops writes there (loom_cuda_wrote) and refreshes it at the next product, which in
 * training is once per step, after the optimizer. Other operands (activations, gradients of
 * activations, weights outside the range) are converted per call into one reusable workspace,
 * grown on demand (its size settles in the first step).
 *
 * The products go through cuBLASLt with column-major conventions as in matmul.cu. A plan (the
 * descriptors and the algorithm the heuristic picked) is cached per shape, transposition,
 * epilogue and operand alignment (bias and auxiliary vectors included), so the heuristic runs once
 * per distinct product; the choice is a function of those alone, so a run repeats bit for bit.
 *
 * Activations in bf16 (the ops with typed activations given LOOM_DTYPE_BF16, bf16 products only):
 * the GELU MLP's pre, act and dpre are stored in bf16 and never exist in fp32. The forward
 * product writes pre (the auxiliary output) and out = gelu(pre) in bf16 through the same
 * epilogue; the backward product writes dpre in bf16 (epilogue DGELU_BGRAD reading the bf16 pre;
 * the bias gradient, summed before the rounding, stays fp32); the products that read them (fc2's
 * forward and weight gradient, fc1's backward) take them as bf16 operands with no conversion.
 * cuBLASLt stores the auxiliary matrix in the type of D unless told otherwise, and bias vectors
 * too: the bias type is set to fp32 explicitly. Where cuBLASLt offers no algorithm for such an
 * epilogue, or refuses it when called, the product runs in fp32 into the workspace and a kernel
 * rounds what the epilogue would have written (pre and gelu(pre); dpre, whose column sums are
 * then taken from the fp32 values).
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

struct loom_cuda_lt_plan {
    /* key */
    int64_t m, n, k, lda, ldb, ldc, aux_ld;
    int ta, tb, epi, f16, c16; /* c16: C and D in the 16-bit type (else fp32) */
    unsigned align_a, align_b, align_c, align_bias, align_aux;
    /* value */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
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
static void to_bf16(struct loom_backend *be, void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    cudaStream_t st = loom_cuda_stream(be);
    int blocks = 4 * loom_cuda_impl(be)->num_sms;
    if (loom_cuda_impl(be)->matmul_f16) {
        int64_t need;
        if (n % 4 == 0 && ((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 7) == 0) {
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
    if (n % 4 == 0 && ((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 7) == 0) {
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
    if (c->params_dirty) {
        to_bf16(be, c->params_bf16, c->params, c->nparams);
        c->params_dirty = 0;
    }
    return (const __nv_bfloat16 *)c->params_bf16 + (w - c->params);
}

/* ---- cuBLASLt plans ---- */

/* What a product does after multiplying (cuBLASLt's epilogue). epi is a cublasLtEpilogue_t; bias
 * is the bias vector it reads (BIAS, GELU_AUX_BIAS) or the bias gradient it writes (BGRADB,
 * DGELU_BGRAD), fp32; aux is the fp32 GELU input matrix it writes (GELU_AUX, GELU_AUX_BIAS) or
 * reads (DGELU, DGELU_BGRAD), column-major with leading dimension aux_ld. */
struct lt_epilogue {
    cublasLtEpilogue_t epi;
    const void *bias;
    const void *aux;
    int64_t aux_ld;
};

static int epi_has_bias(int epi) {
    return epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           epi == CUBLASLT_EPILOGUE_BGRADB || epi == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
static int epi_has_aux(int epi) {
    return epi == CUBLASLT_EPILOGUE_GELU_AUX || epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           epi == CUBLASLT_EPILOGUE_DGELU || epi == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

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
        if (p->c16 && epi_has_bias(ep->epi)) { /* the default would be the 16-bit type of D */
            int32_t bt = CUDA_R_32F;
            set_attr(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
        }
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
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc,
                                                       pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
        if (ep) return 0;
        loom_abort(__FILE__, __LINE__,
                   "cuBLASLt offers no %s algorithm for m %lld n %lld k %lld (status %d)",
                   p->f16 ? "fp16" : "bf16", (long long)p->m, (long long)p->n, (long long)p->k, (int)st);
    }
    p->algo = res.algo;
    return 1;
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

/* Deterministic column sums of a 16-bit (bf16) matrix in[N,C] added to out[C]: the scheme of
 * loom_cuda_colsum_accumulate (double sums over the same row chunks). */
__global__ void colsum16_partial_kernel(double *partial, const __nv_bfloat16 *in, int64_t N,
                                        int64_t C, int64_t rows_per_chunk) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t k = blockIdx.y;
    if (c >= C) return;
    int64_t r0 = k * rows_per_chunk, r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    double acc = 0.0;
    for (int64_t r = r0; r < r1; r++) acc += (double)__bfloat162float(in[r * C + c]);
    partial[k * C + c] = acc;
}

static void colsum16_accumulate(struct loom_backend *be, float *out, const void *in, int64_t N,
                                int64_t C) {
    if (N <= 0 || C <= 0) return;
    int64_t chunks = loom_cuda_row_chunks(N);
    int64_t rows = (N + chunks - 1) / chunks;
    double *partial = (double *)loom_cuda_scratch(be, (size_t)(chunks * C) * sizeof(double));
    dim3 grid((unsigned)((C + 127) / 128), (unsigned)chunks);
    colsum16_partial_kernel<<<grid, 128, 0, loom_cuda_stream(be)>>>(
        partial, (const __nv_bfloat16 *)in, N, C, rows);
    LOOM_CUDA_LAUNCHED();
    loom_cuda_sum_partials(be, out, partial, chunks, C);
}

/* dw[OC,C] += doutb^T . xb; with db, db[OC] += the column sums of dout: from the product's
 * epilogue (BGRADB over doutb, into the fp32 scratch vector dbs[OC]) or, without an algorithm
 * for it, from dout itself (fp32, or bf16 with dout16). */
static void product_weight_grad(struct loom_backend *be, float *dw, float *db, float *dbs,
                                const void *doutb, const void *xb, const void *dout, int dout16,
                                int64_t N, int64_t C, int64_t OC) {
    struct lt_epilogue ep = {CUBLASLT_EPILOGUE_BGRADB, dbs, NULL, 0};
    if (db && lt_gemm(be, 0, 1, C, OC, N, xb, C, doutb, OC, 1.0f, dw, C, &ep)) {
        loom_cuda_axpy(be, db, 1.0f, dbs, OC);
        return;
    }
    lt_gemm(be, 0, 1, C, OC, N, xb, C, doutb, OC, 1.0f, dw, C, NULL);
    if (db && dout16)
        colsum16_accumulate(be, db, dout, N, OC);
    else if (db)
        loom_cuda_colsum_accumulate(be, db, (const float *)dout, N, OC);
}

/* ---- the linear ops ---- */

void loom_cuda_linear_forward_bf16(struct loom_backend *be, float *out, const float *inp,
                                   const float *w, const float *b, int64_t N, int64_t C,
                                   int64_t OC) {
    const void *wb = weight_copy(be, w, OC * C);
    size_t bytes[2] = {b16(N * C), wb ? 0 : b16(OC * C)};
    void *ws[2];
    workspace(be, 2, bytes, ws);
    to_bf16(be, ws[0], inp, N * C);
    if (!wb) {
        to_bf16(be, ws[1], w, OC * C);
        wb = ws[1];
    }
    product_forward(be, out, ws[0], wb, b, N, C, OC);
}

void loom_cuda_linear_backward_bf16(struct loom_backend *be, float *dinp, float *dw, float *db,
                                    const float *dout, const float *inp, const float *w,
                                    int64_t N, int64_t C, int64_t OC) {
    int want_dinp = dinp && C > 0, want_dw = dw && C > 0;
    const void *wb = want_dinp ? weight_copy(be, w, OC * C) : NULL;
    size_t bytes[4] = {b16(N * OC), want_dw ? b16(N * C) : 0, want_dinp && !wb ? b16(OC * C) : 0,
                       want_dw && db ? b32(OC) : 0};
    void *ws[4];
    workspace(be, 4, bytes, ws);
    if (want_dinp || want_dw) to_bf16(be, ws[0], dout, N * OC);
    if (want_dinp) {
        if (!wb) {
            to_bf16(be, ws[2], w, OC * C);
            wb = ws[2];
        }
        lt_gemm(be, 0, 0, C, N, OC, wb, C, ws[0], OC, 0.0f, dinp, C, NULL);
    }
    if (want_dw) {
        to_bf16(be, ws[1], inp, N * C);
        product_weight_grad(be, dw, db, (float *)ws[3], ws[0], ws[1], dout, 0, N, C, OC);
    } else if (db) {
        loom_cuda_colsum_accumulate(be, db, dout, N, OC);
    }
}

void loom_cuda_linear_gelu_forward_bf16(struct loom_backend *be, float *out, float *pre,
                                        const float *inp, const float *w, const float *b,
                                        int64_t N, int64_t C, int64_t OC) {
    const void *wb = weight_copy(be, w, OC * C);
    size_t bytes[2] = {b16(N * C), wb ? 0 : b16(OC * C)};
    void *ws[2];
    workspace(be, 2, bytes, ws);
    to_bf16(be, ws[0], inp, N * C);
    if (!wb) {
        to_bf16(be, ws[1], w, OC * C);
        wb = ws[1];
    }
    struct lt_epilogue ep = {b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, b,
                             pre, OC};
    if (lt_gemm(be, 1, 0, OC, N, C, wb, C, ws[0], C, 0.0f, out, OC, &ep)) return;
    product_forward(be, pre, ws[0], wb, b, N, C, OC);
    loom_cuda_gelu_forward(be, out, pre, N * OC);
}

void loom_cuda_linear_gelu_backward_bf16(struct loom_backend *be, float *dpre, float *dpre_b,
                                         float *dw, float *db, const float *dout,
                                         const float *act, const float *pre, const float *w,
                                         int64_t N, int64_t C, int64_t OC) {
    int want_dw = dw != NULL;
    const void *wb = weight_copy(be, w, OC * C);
    size_t bytes[5] = {b16(N * OC), want_dw ? b16(N * C) : 0, wb ? 0 : b16(OC * C),
                       want_dw && db ? b32(OC) : 0, dpre_b ? b32(C) : 0};
    void *ws[5];
    workspace(be, 5, bytes, ws);
    to_bf16(be, ws[0], dout, N * OC);
    if (!wb) {
        to_bf16(be, ws[2], w, OC * C);
        wb = ws[2];
    }
    /* dpre = (dout . w) * gelu'(pre), with its column sums when dpre_b is wanted */
    struct lt_epilogue ep = {dpre_b ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU,
                             ws[4], pre, C};
    if (lt_gemm(be, 0, 0, C, N, OC, wb, C, ws[0], OC, 0.0f, dpre, C, &ep)) {
        if (dpre_b) loom_cuda_axpy(be, dpre_b, 1.0f, (const float *)ws[4], C);
    } else {
        lt_gemm(be, 0, 0, C, N, OC, wb, C, ws[0], OC, 0.0f, dpre, C, NULL);
        loom_cuda_gelu_backward(be, dpre, dpre, pre, N * C);
        if (dpre_b) loom_cuda_colsum_accumulate(be, dpre_b, dpre, N, C);
    }
    if (want_dw) {
        to_bf16(be, ws[1], act, N * C);
        product_weight_grad(be, dw, db, (float *)ws[3], ws[0], ws[1], dout, 0, N, C, OC);
    } else if (db) {
        loom_cuda_colsum_accumulate(be, db, dout, N, OC);
    }
}

/* ---- activations in bf16 ---- */

#define LOOM_GELU16_K 0.7978845608028654f /* sqrt(2/pi) */
#define LOOM_GELU16_A 0.044715f

/* What the GELU epilogue writes, from an fp32 product x: pre = bf16(x), out = bf16(gelu(x)),
 * the tanh GELU written as x sigmoid(2u) as in act.cu. */
__global__ void gelu16_forward_kernel(__nv_bfloat16 *out, __nv_bfloat16 *pre, const float *x,
                                      int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        float u = LOOM_GELU16_K * (v + LOOM_GELU16_A * v * v * v);
        pre[i] = __float2bfloat16_rn(v);
        out[i] = __float2bfloat16_rn(v / (1.0f + expf(-2.0f * u)));
    }
}

/* What the DGELU epilogue writes, from an fp32 product d: d = d * gelu'(pre) (kept in fp32 for
 * the column sums) and dpre = bf16(d). */
__global__ void gelu16_backward_kernel(__nv_bfloat16 *dpre, float *d, const __nv_bfloat16 *pre,
                                       int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float x = __bfloat162float(pre[i]);
        float u = LOOM_GELU16_K * (x + LOOM_GELU16_A * x * x * x);
        float du = LOOM_GELU16_K * (1.0f + 3.0f * LOOM_GELU16_A * x * x);
        float s = 1.0f / (1.0f + expf(-2.0f * u));
        float g = d[i] * (s + 2.0f * x * s * (1.0f - s) * du);
        d[i] = g;
        dpre[i] = __float2bfloat16_rn(g);
    }
}

/* Typed activations other than fp32 must be bf16, with bf16 products (activation_dtype). */
static void need_act16(struct loom_backend *be, enum loom_dtype dt, const char *op) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (dt != LOOM_DTYPE_BF16 || !c->matmul_bf16 || c->matmul_f16)
        loom_abort(__FILE__, __LINE__,
                   "cuda: %s with %s activations needs bf16 matrix products (activation_dtype)",
                   op, loom_dtype_name(dt));
}

/* The workspace with the given pieces; x[nx] converted into piece 0 and, when wreg is NULL (w
 * has no registered copy), w[nw] into piece 1. Returns the bf16 w. */
static const void *operands16(struct loom_backend *be, int count, const size_t *bytes, void **ws,
                              const float *x, int64_t nx, const float *w, int64_t nw,
                              const void *wreg) {
    workspace(be, count, bytes, ws);
    to_bf16(be, ws[0], x, nx);
    if (wreg) return wreg;
    to_bf16(be, ws[1], w, nw);
    return ws[1];
}

enum loom_dtype loom_cuda_activation_dtype(struct loom_backend *be) {
    struct loom_cuda *c = loom_cuda_impl(be);
    return c->matmul_bf16 && !c->matmul_f16 ? LOOM_DTYPE_BF16 : LOOM_DTYPE_F32;
}

void loom_cuda_linear_gelu_forward_act16(struct loom_backend *be, void *out, void *pre,
                                         enum loom_dtype act_dt, const float *inp, const float *w,
                                         const float *b, int64_t N, int64_t C, int64_t OC) {
    need_act16(be, act_dt, "linear_gelu_forward");
    LOOM_ASSERT(N > 0 && C > 0 && OC > 0);
    const void *wreg = weight_copy(be, w, OC * C);
    size_t bytes[3] = {b16(N * C), wreg ? 0 : b16(OC * C), 0};
    void *ws[3];
    const void *wb = operands16(be, 3, bytes, ws, inp, N * C, w, OC * C, wreg);
    struct lt_epilogue ep = {b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX, b,
                             pre, OC};
    if (lt_gemm_any(be, 1, 0, OC, N, C, wb, C, ws[0], C, 0.0f, out, 1, OC, &ep)) return;
    /* without the epilogue: the fp32 product in the workspace (grown: the operands again) */
    bytes[2] = b32(N * OC);
    wb = operands16(be, 3, bytes, ws, inp, N * C, w, OC * C, wreg);
    product_forward(be, (float *)ws[2], ws[0], wb, b, N, C, OC);
    int64_t n = N * OC;
    gelu16_forward_kernel<<<loom_cuda_grid(n, 256), 256, 0, loom_cuda_stream(be)>>>(
        (__nv_bfloat16 *)out, (__nv_bfloat16 *)pre, (const float *)ws[2], n);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_linear_gelu_backward_act16(struct loom_backend *be, void *dpre,
                                          enum loom_dtype act_dt, float *dpre_b, float *dw,
                                          float *db, const float *dout, const void *act,
                                          const void *pre, const float *w, int64_t N, int64_t C,
                                          int64_t OC) {
    need_act16(be, act_dt, "linear_gelu_backward");
    LOOM_ASSERT(N > 0 && C > 0 && OC > 0);
    const void *wreg = weight_copy(be, w, OC * C);
    size_t bytes[5] = {b16(N * OC), wreg ? 0 : b16(OC * C), dw && db ? b32(OC) : 0,
                       dpre_b ? b32(C) : 0, 0};
    void *ws[5];
    const void *wb = operands16(be, 5, bytes, ws, dout, N * OC, w, OC * C, wreg);
    /* dpre = (dout . w) * gelu'(pre) in bf16, with its fp32 column sums when dpre_b is wanted */
    struct lt_epilogue ep = {dpre_b ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU,
                             ws[3], pre, C};
    if (lt_gemm_any(be, 0, 0, C, N, OC, wb, C, ws[0], OC, 0.0f, dpre, 1, C, &ep)) {
        if (dpre_b) loom_cuda_axpy(be, dpre_b, 1.0f, (const float *)ws[3], C);
    } else {
        bytes[4] = b32(N * C);
        wb = operands16(be, 5, bytes, ws, dout, N * OC, w, OC * C, wreg);
        float *d = (float *)ws[4];
        lt_gemm(be, 0, 0, C, N, OC, wb, C, ws[0], OC, 0.0f, d, C, NULL);
        int64_t n = N * C;
        gelu16_backward_kernel<<<loom_cuda_grid(n, 256), 256, 0, loom_cuda_stream(be)>>>(
            (__nv_bfloat16 *)dpre, d, (const __nv_bfloat16 *)pre, n);
        LOOM_CUDA_LAUNCHED();
        if (dpre_b) loom_cuda_colsum_accumulate(be, dpre_b, d, N, C);
    }
    if (dw)
        product_weight_grad(be, dw, db, (float *)ws[2], ws[0], act, dout, 0, N, C, OC);
    else if (db)
        loom_cuda_colsum_accumulate(be, db, dout, N, OC);
}

void loom_cuda_linear_forward_in16(struct loom_backend *be, float *out, const void *inp16,
                                   enum loom_dtype inp_dt, const float *w, const float *b,
                                   int64_t N, int64_t C, int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    need_act16(be, inp_dt, "linear_forward_typed");
    LOOM_ASSERT(C > 0);
    const void *wb = weight_copy(be, w, OC * C);
    size_t bytes[1] = {wb ? 0 : b16(OC * C)};
    void *ws[1];
    workspace(be, 1, bytes, ws);
    if (!wb) {
        to_bf16(be, ws[0], w, OC * C);
        wb = ws[0];
    }
    product_forward(be, out, inp16, wb, b, N, C, OC);
}

void loom_cuda_linear_backward_dout16(struct loom_backend *be, float *dinp, float *dw, float *db,
                                      const void *dout16, enum loom_dtype dout_dt,
                                      const float *inp, const float *w, int64_t N, int64_t C,
                                      int64_t OC) {
    if (N <= 0) return;
    need_act16(be, dout_dt, "linear_backward_typed");
    LOOM_ASSERT(C > 0 && OC > 0);
    loom_cuda_linear_backward_in16(be, dinp, dw, db, dout16, inp, w, N, C, OC);
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
        c->params_dirty = 1;
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

/* ---- 16-bit logits of the fused classifier (linear_xent, loss.cu) ----
 *   forward:  out16[N,OC] = bf16(inp) . bf16(w)^T, written in the 16-bit type (no bias)
 *   backward: dinp[N,C] = dout16 . bf16(w)            (assigned; skipped if NULL)
 *             dw[OC,C] += dout16^T . bf16(inp)         (skipped if NULL)
 * dout16 is in the 16-bit type already: both products read it as it is, with no conversion. */

/* C[m,n] (col-major, ld ldc) = op(A) op(B), written in the 16-bit type. */
static void lt_gemm_out16(struct loom_backend *be, int ta, int tb, int64_t m, int64_t n, int64_t k,
                          const void *A, int64_t lda, const void *B, int64_t ldb, void *C,
                          int64_t ldc) {
    lt_gemm_any(be, ta, tb, m, n, k, A, lda, B, ldb, 0.0f, C, 1, ldc, NULL);
}

void loom_cuda_linear_forward_out16(struct loom_backend *be, void *out16, const float *inp,
                                    const float *w, int64_t N, int64_t C, int64_t OC) {
    const void *wb = weight_copy(be, w, OC * C);
    size_t bytes[2] = {b16(N * C), wb ? 0 : b16(OC * C)};
    void *ws[2];
    workspace(be, 2, bytes, ws);
    to_bf16(be, ws[0], inp, N * C);
    if (!wb) {
        to_bf16(be, ws[1], w, OC * C);
        wb = ws[1];
    }
    lt_gemm_out16(be, 1, 0, OC, N, C, wb, C, ws[0], C, out16, OC);
}

void loom_cuda_linear_backward_in16(struct loom_backend *be, float *dinp, float *dw, float *db,
                                    const void *dout16, const float *inp, const float *w,
                                    int64_t N, int64_t C, int64_t OC) {
    if (N <= 0) return;
    int want_dinp = dinp && C > 0, want_dw = dw && C > 0;
    const void *wb = want_dinp ? weight_copy(be, w, OC * C) : NULL;
    size_t bytes[3] = {want_dw ? b16(N * C) : 0, want_dinp && !wb ? b16(OC * C) : 0,
                       want_dw && db ? b32(OC) : 0};
    void *ws[3];
    workspace(be, 3, bytes, ws);
    if (want_dinp) {
        if (!wb) {
            to_bf16(be, ws[1], w, OC * C);
            wb = ws[1];
        }
        lt_gemm(be, 0, 0, C, N, OC, wb, C, dout16, OC, 0.0f, dinp, C, NULL);
    }
    if (want_dw) {
        to_bf16(be, ws[0], inp, N * C);
        product_weight_grad(be, dw, db, (float *)ws[2], dout16, ws[0], dout16, 1, N, C, OC);
    } else if (db) {
        colsum16_accumulate(be, db, dout16, N, OC);
    }
}
