/* CUDA backend: shared state, error checks and the op declarations behind the vtable in cuda.cu
 * (one .cu file per op family, as on the CPU side). Compiled by nvcc as C++; the loom headers
 * are C, so they are included with C linkage here. Only loom_backend_cuda_create is exported.
 *
 * Every op runs on the one stream held in be->impl and returns without waiting for it, except
 * the ops whose contract hands data to the host (to_host, to_device, sumsq, synchronize).
 * Nothing here uses floating-point atomics: every reduction runs in a fixed order, so a run
 * repeats bit for bit.
 */
#ifndef LOOM_CUDA_COMMON_CUH
#define LOOM_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* C11's _Noreturn is not C++; the loom headers use it on declarations only. */
#define _Noreturn __attribute__((noreturn))
extern "C" {
#include "loom/backend.h"
#include "loom/comm.h"
#include "loom/log.h"
#include "loom/status.h"
}
#undef _Noreturn
#include "loom/rng.h"

struct loom_cuda_alloc {
    void *p;
    size_t bytes;
};
struct loom_cuda_lt_plan; /* matmul_bf16.cu */

/* Backend-private state (be->impl). */
struct loom_cuda {
    int device;
    int num_sms;
    cudaStream_t stream;
    cublasHandle_t cublas;
    void *cublas_ws; /* fixed cuBLAS workspace: results do not depend on allocation luck */
    size_t cublas_ws_bytes;
    void *scratch; /* grows on demand; used by one op at a time on the stream */
    size_t scratch_bytes;
    double *host_double; /* pinned, two slots: sumsq's results (sumsq_ranges: and its zeros) */
    /* every device allocation, for memory_stats (cuda.cu) */
    struct loom_cuda_alloc *allocs;
    int nallocs, cap_allocs;
    size_t mem_in_use, mem_peak;
    int64_t alloc_calls;
    /* 16-bit matrix products (matmul_bf16.cu): matmul_bf16 set for bf16 and for fp16, with
     * matmul_f16 set for fp16 */
    int matmul_bf16, matmul_f16;
    cublasLtHandle_t lt;
    const float *params;  /* registered weights [params, params + nparams) */
    int64_t nparams;
    void *params_bf16;    /* their bf16 copy */
    int64_t dirty_lo, dirty_hi; /* the parameters written since the copy was made: their hull
                                   [dirty_lo, dirty_hi), empty when dirty_lo >= dirty_hi */
    void *act_ws;         /* bf16 copies of the other operands of one product */
    size_t act_ws_bytes;
    struct loom_cuda_lt_plan *plans;
    int nplans, cap_plans;
    int deterministic;    /* set_deterministic: no timed GEMM algorithms, no cuDNN attention */
    void *attn_ws;        /* 16-bit q, k, v, dout of the attention_bf16.cu kernels */
    size_t attn_ws_bytes;
    void *ones16; /* a column of ones in the products' 16-bit type (matmul_bf16.cu) */
    size_t ones16_bytes;
    int ones16_f16;       /* its type: fp16 (1) or bf16 (0) */
    void *cudnn;          /* cuDNN handle and attention plans (attention_cudnn.cu), made on use */
    enum loom_attn_backend attn_backend; /* set_attention_backend */
};

static inline struct loom_cuda *loom_cuda_impl(struct loom_backend *be) {
    return (struct loom_cuda *)be->impl;
}
static inline cudaStream_t loom_cuda_stream(struct loom_backend *be) {
    return loom_cuda_impl(be)->stream;
}

#define LOOM_CUDA_CHECK(expr)                                                                 \
    do {                                                                                      \
        cudaError_t loom_e_ = (expr);                                                         \
        if (loom_e_ != cudaSuccess)                                                           \
            loom_abort(__FILE__, __LINE__, "CUDA error %s: %s (%s)", cudaGetErrorName(loom_e_), \
                       cudaGetErrorString(loom_e_), #expr);                                   \
    } while (0)

#define LOOM_CUBLAS_CHECK(expr)                                                               \
    do {                                                                                      \
        cublasStatus_t loom_b_ = (expr);                                                      \
        if (loom_b_ != CUBLAS_STATUS_SUCCESS)                                                 \
            loom_abort(__FILE__, __LINE__, "cuBLAS error %d (%s)", (int)loom_b_, #expr);      \
    } while (0)

/* After a kernel launch: catches bad launch configurations at once (asynchronous faults show at
 * the next synchronising call). */
#define LOOM_CUDA_LAUNCHED() LOOM_CUDA_CHECK(cudaGetLastError())

/* Scratch device memory of at least `bytes`, valid until the next call of this function. */
void *loom_cuda_scratch(struct loom_backend *be, size_t bytes);
/* The fastest of n candidates of one operation, on the stream: run(ctx, i) enqueues candidate i
 * on the call's own operands and returns nonzero when it ran; each runs once to warm up, then
 * three times between two events. Returns the fastest that ran every time, or -1. (The first
 * call of a product or an attention plan: matmul_bf16.cu, attention_cudnn.cu.) */
int loom_cuda_fastest(struct loom_backend *be, int n, int (*run)(void *ctx, int i), void *ctx);
/* Device memory counted by memory_stats (cudaMalloc; NULL on failure) and its release. */
void *loom_cuda_alloc(struct loom_backend *be, size_t bytes);
void loom_cuda_release(struct loom_backend *be, void *p);
/* A buffer *buf of at least `bytes` (grown like the scratch: waits for the stream first). */
void loom_cuda_grow(struct loom_backend *be, void **buf, size_t *have, size_t bytes,
                    const char *what);

/* Note a write to [p, p + bytes): the bf16 copy of the registered weights it touches is stale
 * (the hull of the stale parameters grows to hold them). */
static inline void loom_cuda_wrote(struct loom_backend *be, const void *p, size_t bytes) {
    struct loom_cuda *c = (struct loom_cuda *)be->impl;
    if (!c->params_bf16 || !bytes) return;
    const char *lo = (const char *)c->params, *hi = lo + (size_t)c->nparams * sizeof(float);
    const char *q = (const char *)p, *e = q + bytes;
    if (q >= hi || e <= lo) return;
    const int64_t a = q > lo ? (int64_t)((q - lo) / sizeof(float)) : 0;
    const int64_t z = e < hi ? (int64_t)((e - lo + sizeof(float) - 1) / sizeof(float)) : c->nparams;
    if (c->dirty_lo >= c->dirty_hi) {
        c->dirty_lo = a;
        c->dirty_hi = z;
        return;
    }
    if (a < c->dirty_lo) c->dirty_lo = a;
    if (z > c->dirty_hi) c->dirty_hi = z;
}

/* Whether every pointer is a multiple of `bytes` (a power of two): the condition of the vector
 * paths that move 8 or 16 bytes an access. */
template <typename... P>
__host__ __device__ __forceinline__ bool loom_aligned(unsigned bytes, const P *...p) {
    return (((uintptr_t)0 | ... | (uintptr_t)p) & (bytes - 1)) == 0;
}

/* Blocks for a grid-stride kernel over n elements. */
static inline unsigned loom_cuda_grid(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32;
    return (unsigned)b;
}

/* Deterministic column sums over rows: out[c] += sum_{r<N} in[r*C + c], summed in double over
 * chunks of rows whose partial sums are then added in chunk order (elementwise.cu). */
void loom_cuda_colsum_accumulate(struct loom_backend *be, float *out, const float *in, int64_t N,
                                 int64_t C);
/* The same sums of in[N,C] of type in_dt (LOOM_DTYPE_F32, _BF16 or _F16), the same bits for the
 * same values; with dst (fp32 in only), the same pass also writes in rounded to dst_dt (BF16 or
 * F16) into dst. */
void loom_cuda_colsum_convert(struct loom_backend *be, float *out, void *dst,
                              enum loom_dtype dst_dt, const void *in, enum loom_dtype in_dt,
                              int64_t N, int64_t C);
/* The number of row chunks the column reductions use for N rows (a function of N only). */
int64_t loom_cuda_row_chunks(int64_t N);
/* out[c] += (float) sum over chunks k of partial[k*C + c], in chunk order. */
void loom_cuda_sum_partials(struct loom_backend *be, float *out, const double *partial,
                            int64_t chunks, int64_t C);

/* profile.cu: a vtable that times every op of `base` (LOOM_CUDA_PROFILE=1), and the report. */
const struct loom_backend_ops *loom_cuda_profile_ops(const struct loom_backend_ops *base);
void loom_cuda_profile_report(void);

/* ---- ops (signatures of struct loom_backend_ops) ---- */

/* elementwise.cu */
void loom_cuda_add(struct loom_backend *be, float *y, const float *a, const float *b, int64_t n);
void loom_cuda_axpy(struct loom_backend *be, float *y, float alpha, const float *x, int64_t n);
void loom_cuda_scale(struct loom_backend *be, float *x, float alpha, int64_t n);
double loom_cuda_sumsq(struct loom_backend *be, const float *x, int64_t n);

/* embed.cu */
void loom_cuda_embedding_forward(struct loom_backend *be, float *out, const int32_t *tokens,
                                 const int32_t *pos, const float *wte, const float *wpe, int64_t B,
                                 int64_t T, int64_t C, int64_t v0, int64_t Vl, int64_t pos0);
void loom_cuda_embedding_backward(struct loom_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int32_t *tokens, const int32_t *pos,
                                  int64_t B, int64_t T, int64_t C, int64_t v0, int64_t Vl,
                                  int64_t pos0);

/* norm.cu */
/* The norm ops (the vtable's), with the normalised output out[N,C] of type out_dt, or the output
 * gradient dout[N,C] of type dout_dt: LOOM_DTYPE_F32 (the fp32 ops) or
 * LOOM_DTYPE_BF16 (out: the fp32 op's values rounded to nearest even; dout: read as stored);
 * any other type aborts. mean, rstd, xs, dinp, dw, db stay fp32. */
void loom_cuda_layernorm_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                       float *mean, float *rstd, const float *inp, const float *w,
                                       const float *b, int64_t N, int64_t C, float eps);
void loom_cuda_residual_layernorm_forward_typed(struct loom_backend *be, float *xs, void *out,
                                                enum loom_dtype out_dt, float *mean, float *rstd,
                                                const float *x, const void *r, enum loom_dtype r_dt,
                                                const float *w, const float *b, int64_t N,
                                                int64_t C, float eps);
void loom_cuda_rmsnorm_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                     float *rstd, const float *inp, const float *w, int64_t N,
                                     int64_t C, float eps);
void loom_cuda_residual_rmsnorm_forward_typed(struct loom_backend *be, float *xs, void *out,
                                              enum loom_dtype out_dt, float *rstd, const float *x,
                                              const void *r, enum loom_dtype r_dt, const float *w,
                                              int64_t N, int64_t C, float eps);
void loom_cuda_layernorm_backward_typed(struct loom_backend *be, float *dinp, void *dinp_copy,
                                        float *dinp_sum, float *dw, float *db, const void *dout,
                                        enum loom_dtype dout_dt, const float *inp, const float *w,
                                        const float *mean, const float *rstd, int64_t N, int64_t C);
void loom_cuda_rmsnorm_backward_typed(struct loom_backend *be, float *dinp, void *dinp_copy,
                                      float *dinp_sum, float *dw, const void *dout,
                                      enum loom_dtype dout_dt, const float *inp, const float *w,
                                      const float *rstd, int64_t N, int64_t C);

/* head_norm.cu: the query and key head norms (fp32 or bf16 qkv; HS up to 256) */
void loom_cuda_head_norm_forward(struct loom_backend *be, int rms, void *qkv, enum loom_dtype dt,
                                 void *keep, float *mean, float *rstd, const float *wq,
                                 const float *bq, const float *wk, const float *bk, int64_t N,
                                 int64_t NH, int64_t NKV, int64_t HS, float eps);
void loom_cuda_head_norm_backward(struct loom_backend *be, int rms, void *dqkv, enum loom_dtype dt,
                                  float *dwq, float *dbq, float *dwk, float *dbk, const void *keep,
                                  const float *mean, const float *rstd, const float *wq,
                                  const float *wk, int64_t N, int64_t NH, int64_t NKV, int64_t HS);

/* matmul_bf16.cu: the bf16 path of the linear ops (inputs rounded to bf16, fp32 accumulation
 * and outputs, cuBLASLt), and the backend op that selects it. */
enum loom_status loom_cuda_set_matmul_dtype(struct loom_backend *be, enum loom_dtype dt,
                                            const float *params, int64_t n);
/* The plain linear ops on arrays each fp32 or of the products' 16-bit type (the x16 flags):
 * fp32 operands converted per call, 16-bit ones read as stored, a 16-bit output written by the
 * product (with the bias's 16-bit copy); db sums dout as stored. */
void loom_cuda_linear_forward_16(struct loom_backend *be, void *out, int out16, const void *inp,
                                 int inp16, const float *w, const float *b, int64_t N, int64_t C,
                                 int64_t OC);
void loom_cuda_linear_backward_16(struct loom_backend *be, void *dinp, int dinp16, float *dw,
                                  float *db, const void *dout, int dout16, const void *inp,
                                  int inp16, const float *w, int64_t N, int64_t C, int64_t OC);
/* linear_gelu_backward with 16-bit products (C and OC > 0): dpre, act and pre fp32, or (act16)
 * stored in bf16, written and read by the products directly. */
void loom_cuda_linear_gelu_backward_16(struct loom_backend *be, enum loom_gelu form, void *dpre,
                                       int act16, float *dpre_b, float *dw, float *db,
                                       const void *dout, int dout16, const void *act,
                                       const void *pre, const float *w, int64_t N, int64_t C,
                                       int64_t OC);
/* activation_dtype: LOOM_DTYPE_BF16 with bf16 products, else LOOM_DTYPE_F32. typed16: whether
 * an op's typed array of type dt is 16-bit (0 for fp32); any type other than fp32 and the
 * activation type aborts, naming the op. */
enum loom_dtype loom_cuda_activation_dtype(struct loom_backend *be);
int loom_cuda_typed16(struct loom_backend *be, enum loom_dtype dt, const char *op);
/* dst[n] = src[n] rounded to the products' 16-bit type (bf16, or fp16 with fp16 products) */
void loom_cuda_to16(struct loom_backend *be, void *dst, const float *src, int64_t n);
/* linear_gelu_forward with bf16 activations (C and OC > 0): pre written in bf16 by the product,
 * out = gelu(pre) in bf16 by a kernel. */
void loom_cuda_linear_gelu_forward_act16(struct loom_backend *be, enum loom_gelu form, void *out,
                                         void *pre, const void *inp, int inp16, const float *w,
                                         const float *b, int64_t N, int64_t C, int64_t OC);
void loom_cuda_matmul_free(struct loom_backend *be);

/* matmul.cu */
/* out[n, oc] = b[oc] for a row-major [N, OC] block */
void loom_cuda_fill_bias(struct loom_backend *be, float *out, const float *b, int64_t N,
                         int64_t OC);
void loom_cuda_linear_forward(struct loom_backend *be, float *out, const float *inp,
                              const float *w, const float *b, int64_t N, int64_t C, int64_t OC);
void loom_cuda_linear_backward(struct loom_backend *be, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w, int64_t N,
                               int64_t C, int64_t OC);
void loom_cuda_linear_gelu_forward(struct loom_backend *be, enum loom_gelu form, void *out,
                                   void *pre, enum loom_dtype act_dt, const void *inp,
                                   enum loom_dtype inp_dt, const float *w, const float *b,
                                   int64_t N, int64_t C, int64_t OC);
void loom_cuda_linear_gelu_backward(struct loom_backend *be, enum loom_gelu form, void *dpre,
                                    enum loom_dtype act_dt, float *dpre_b, float *dw, float *db,
                                    const void *dout, enum loom_dtype dout_dt, const void *act,
                                    const void *pre, const float *w, int64_t N, int64_t C,
                                    int64_t OC);
void loom_cuda_linear_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                    const void *inp, enum loom_dtype inp_dt, const float *w,
                                    const float *b, int64_t N, int64_t C, int64_t OC);
void loom_cuda_linear_backward_typed(struct loom_backend *be, void *dinp, enum loom_dtype dinp_dt,
                                     float *dw, float *db, const void *dout,
                                     enum loom_dtype dout_dt, const void *inp,
                                     enum loom_dtype inp_dt, const float *w, int64_t N, int64_t C,
                                     int64_t OC);

/* attention.cu */
void loom_cuda_rope(struct loom_backend *be, void *qkv, enum loom_dtype dt, const int32_t *pos,
                    int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                    const struct loom_rope *rope, int inverse);
void loom_cuda_attention_forward(struct loom_backend *be, void *out, float *lse, const void *qkv,
                                 const struct loom_attn *a);
void loom_cuda_attention_backward(struct loom_backend *be, void *dqkv, const void *dout,
                                  const void *out, const float *lse, const void *qkv,
                                  const struct loom_attn *a);
void loom_cuda_attention_decode(struct loom_backend *be, float *out, const float *q,
                                const float *kcache, const float *vcache, int64_t L, int64_t NH,
                                int64_t NKV, int64_t HS, float scale);

/* attention_bf16.cu: tensor-core attention for 16-bit products (matmul_bf16: in bf16, or in fp16
 * with matmul_f16), head size 64 or 128, no dropout; the backward computes Dv = rowsum(dout * out)
 * itself. Arrays of type a->dt (fp32, or bf16 with bf16 products). */
int loom_cuda_attention_bf16_ok(struct loom_backend *be, const struct loom_attn *a);
/* cuDNN's fused attention (attention_cudnn.cu): _ok says whether a may take it; forward and
 * backward return 0 when cuDNN has no plan for the shape or an array is not 16-byte aligned (the
 * caller then takes loom's kernel). */
int loom_cuda_attention_cudnn_ok(struct loom_backend *be, const struct loom_attn *a);
int loom_cuda_attention_forward_cudnn(struct loom_backend *be, void *out, float *lse,
                                      const void *qkv, const struct loom_attn *a);
int loom_cuda_attention_backward_cudnn(struct loom_backend *be, void *dqkv, const void *dout,
                                       const void *out, const float *lse, const void *qkv,
                                       const struct loom_attn *a);
void loom_cuda_cudnn_free(struct loom_backend *be);
enum loom_status loom_cuda_set_attention_backend(struct loom_backend *be,
                                                 enum loom_attn_backend kind);
enum loom_status loom_cuda_set_deterministic(struct loom_backend *be, int on);
void loom_cuda_attention_forward_bf16(struct loom_backend *be, void *out, float *lse,
                                      const void *qkv, const struct loom_attn *a);
void loom_cuda_attention_backward_bf16(struct loom_backend *be, void *dqkv, const void *dout,
                                       const void *out, const float *lse, const void *qkv,
                                       const struct loom_attn *a);

/* act.cu */
void loom_cuda_gelu_forward(struct loom_backend *be, enum loom_gelu form, float *out,
                            const float *inp, int64_t n);
/* gelu_forward on bf16 arrays (each value rounded once, at the store), and the typed op */
void loom_cuda_gelu16_forward(struct loom_backend *be, enum loom_gelu form, void *out,
                              const void *inp, int64_t n);
void loom_cuda_gelu_forward_typed(struct loom_backend *be, enum loom_gelu form, void *out,
                                  const void *inp, enum loom_dtype dt, int64_t n);
void loom_cuda_gelu_backward(struct loom_backend *be, enum loom_gelu form, float *dinp,
                             const float *dout, const float *inp, int64_t n);
void loom_cuda_swiglu_forward(struct loom_backend *be, void *out, const void *inp,
                              enum loom_dtype dt, int64_t N, int64_t F);
void loom_cuda_swiglu_backward(struct loom_backend *be, void *dinp, const void *dout,
                               const void *inp, enum loom_dtype dt, int64_t N, int64_t F);
void loom_cuda_dropout_forward(struct loom_backend *be, float *out, const float *inp, int64_t B,
                               int64_t T, int64_t C, const struct loom_dropout *d);
void loom_cuda_dropout_backward(struct loom_backend *be, float *dinp, const float *dout,
                                int64_t B, int64_t T, int64_t C, const struct loom_dropout *d);

/* loss.cu */
void loom_cuda_xent_forward(struct loom_backend *be, float *stats, const float *logits,
                            const int32_t *targets, int64_t N, int64_t Vl, int64_t v0,
                            int64_t Vvalid);
void loom_cuda_xent_backward(struct loom_backend *be, float *dlogits, const float *logits,
                             const int32_t *targets, const float *gstats, const float *dloss,
                             int64_t N, int64_t Vl, int64_t v0, int64_t Vvalid);
void loom_cuda_xent_fused(struct loom_backend *be, float *losses, void *logits,
                          enum loom_dtype dt, const int32_t *targets, float dloss, int grad,
                          int64_t N, int64_t Vl, int64_t Vvalid);
void loom_cuda_linear_xent(struct loom_backend *be, float *losses, float *dinp, float *dw,
                           void *logits, const float *inp, const float *w,
                           const int32_t *targets, float dloss, int64_t N, int64_t C, int64_t Vl,
                           int64_t Vvalid);
enum loom_dtype loom_cuda_linear_xent_dtype(struct loom_backend *be);

/* optim.cu */
void loom_cuda_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                     int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                     int64_t step, float grad_scale);
void loom_cuda_adamw_ranges(struct loom_backend *be, float *param, const float *grad, float *m,
                            float *v, const int64_t *off, const int64_t *soff, const int64_t *len,
                            const uint8_t *decay, int nranges, float lr, float beta1, float beta2,
                            float eps, float wd, int64_t step, float grad_scale);
double loom_cuda_sumsq_ranges(struct loom_backend *be, const float *x, const int64_t *off,
                              const int64_t *len, int nranges, int64_t *zeros);

/* ---- device helpers ---- */

__device__ __forceinline__ float loom_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double loom_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* Block sum in double, the warps' sums added in warp order; every thread gets the result.
 * blockDim.x is a multiple of 32; shared32 holds 32 doubles. */
__device__ __forceinline__ double loom_block_sum_d(double v, double *shared32) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = loom_warp_sum_d(v);
    __syncthreads();
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    v = lane < nw ? shared32[lane] : 0.0;
    return loom_warp_sum_d(v);
}
/* Elements of fp32 or 16-bit arrays as fp32, and fp32 values rounded to nearest even into them. */
__device__ __forceinline__ float loom_to_f32(float x) { return x; }
__device__ __forceinline__ float loom_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float loom_to_f32(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T loom_from_f32(float x);
template <> __device__ __forceinline__ float loom_from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 loom_from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half loom_from_f32<__half>(float x) {
    return __float2half_rn(x);
}
/* cp.async: 16 bytes from global memory into shared memory (both addresses 16-byte aligned),
 * grouped by commit and complete for the issuing thread after wait_all. */
__device__ __forceinline__ void loom_cp_async16(void *shared_dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(shared_dst)),
                 "l"(src)
                 : "memory");
}
__device__ __forceinline__ void loom_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void loom_cp_async_wait_all() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}
/* VEC consecutive elements, loaded and stored as one access */
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) loom_vec {
    T v[VEC];
};
__device__ __forceinline__ float loom_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#endif
