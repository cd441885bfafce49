/* Softmax cross-entropy over a (possibly vocabulary-parallel) shard of the logits.
 *
 * logits[N,Vl] hold vocabulary columns [v0, v0 + Vl); the first Vvalid are real tokens, the rest
 * padding that never enters the softmax. targets[N] are global ids, -1 = ignore.
 *   forward:  stats[n] = (m = max_{j<Vvalid} x, sum_{j<Vvalid} exp(x - m), x[target - v0] or 0)
 *   backward: given global (max, sumexp) in gstats[n]:
 *             dlogits[n,j] = (exp(x - max) / sumexp - [j == target - v0]) * dloss[n]  (j < Vvalid)
 *             padded columns and ignored rows (target -1) get 0.
 * A shard with no valid column reports (-FLT_MAX, 0, 0). One block per row; max first, then the
 * sum of exponentials (both block reductions in a fixed order). Vvalid > Vl is clamped to Vl.
 *
 * Whole vocabulary in one shard (v0 = 0), fused: xent_fused computes each row's loss
 * log(sumexp) + max - x[target] and, with grad, writes the gradient above (dloss one scalar) over
 * the logits, which may be fp32, bf16 or fp16 (the statistics are fp32 whatever the type);
 * linear_xent wraps it between the output layer's products.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>
#include <math.h>

#include <type_traits>

#include "backend/cuda/common.cuh"

#define LOOM_XENT_THREADS 256

__device__ float block_reduce_max(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = loom_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -FLT_MAX;
    return loom_warp_max(v);
}

__device__ float block_reduce_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = loom_warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return loom_warp_sum(v);
}

__global__ void xent_forward_kernel(float *stats, const float *logits, const int32_t *targets,
                                    int64_t Vl, int64_t v0, int64_t Vvalid) {
    __shared__ float sh[32];
    int64_t n = blockIdx.x;
    const float *x = logits + n * Vl;
    float m = -FLT_MAX;
    for (int64_t j = threadIdx.x; j < Vvalid; j += blockDim.x) m = fmaxf(m, x[j]);
    m = block_reduce_max(m, sh);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < Vvalid; j += blockDim.x) s += expf(x[j] - m);
    s = block_reduce_sum(s, sh);
    if (threadIdx.x == 0) {
        int64_t t = targets[n];
        int64_t tl = t - v0;
        stats[n * 3 + 0] = m;
        stats[n * 3 + 1] = s;
        stats[n * 3 + 2] = (t >= 0 && tl >= 0 && tl < Vvalid) ? x[tl] : 0.0f;
    }
}

void loom_cuda_xent_forward(struct loom_backend *be, float *stats, const float *logits,
                            const int32_t *targets, int64_t N, int64_t Vl, int64_t v0,
                            int64_t Vvalid) {
    if (N <= 0) return;
    LOOM_ASSERT(N <= 0x7fffffffLL);
    if (Vvalid > Vl) Vvalid = Vl;
    if (Vvalid < 0) Vvalid = 0;
    xent_forward_kernel<<<(unsigned)N, LOOM_XENT_THREADS, 0, loom_cuda_stream(be)>>>(
        stats, logits, targets, Vl, v0, Vvalid);
    LOOM_CUDA_LAUNCHED();
}

__global__ void xent_backward_kernel(float *dlogits, const float *logits, const int32_t *targets,
                                     const float *gstats, const float *dloss, int64_t Vl,
                                     int64_t v0, int64_t Vvalid) {
    int64_t n = blockIdx.y;
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= Vl) return;
    int64_t t = targets[n];
    float g = 0.0f;
    if (t >= 0 && j < Vvalid) {
        float m = gstats[n * 2 + 0], scale = dloss[n] / gstats[n * 2 + 1];
        g = expf(logits[n * Vl + j] - m) * scale;
        if (j == t - v0) g -= dloss[n];
    }
    dlogits[n * Vl + j] = g;
}

void loom_cuda_xent_backward(struct loom_backend *be, float *dlogits, const float *logits,
                             const int32_t *targets, const float *gstats, const float *dloss,
                             int64_t N, int64_t Vl, int64_t v0, int64_t Vvalid) {
    if (N <= 0 || Vl <= 0) return;
    if (Vvalid > Vl) Vvalid = Vl;
    if (Vvalid < 0) Vvalid = 0;
    /* rows beyond gridDim.y's limit are issued in slices */
    const int64_t max_rows = 65535;
    for (int64_t r0 = 0; r0 < N; r0 += max_rows) {
        int64_t rows = N - r0 < max_rows ? N - r0 : max_rows;
        dim3 grid((unsigned)((Vl + LOOM_XENT_THREADS - 1) / LOOM_XENT_THREADS), (unsigned)rows);
        xent_backward_kernel<<<grid, LOOM_XENT_THREADS, 0, loom_cuda_stream(be)>>>(
            dlogits + r0 * Vl, logits + r0 * Vl, targets + r0, gstats + r0 * 2, dloss + r0, Vl,
            v0, Vvalid);
        LOOM_CUDA_LAUNCHED();
    }
}

/* ---- the loss and its gradient in one pass (xent_fused) ----
 * One block per row. The first pass reads the row's valid columns once, in vectors of VEC
 * elements, each thread keeping a running (max, sum of exp(x - max)) that it rescales when a
 * vector raises the maximum; the block then reduces the maxima and the rescaled sums (fixed
 * order). The second pass reads the row again, from the L2 cache where the first pass left it
 * (a row is Vl elements: 100 KB in bf16 at GPT-2's vocabulary, and a few hundred rows are in
 * flight at once), and writes the gradient over it. Thread 0 reads the target logit before the
 * first reduction, so before any thread writes. Exponentials are 2^(x log2(e) - m log2(e)) on
 * the special-function unit (ex2.approx, relative error about 2^-22): with the accurate expf the
 * kernel was bound by its arithmetic, 2.4x the time of its memory traffic on an H200. */

#define LOOM_XENT_FUSED_THREADS 1024

#define LOOM_XENT_LOG2E 1.4426950408889634f

/* 2^x (ex2.approx; results below 2^-126 flush to 0) */
__device__ __forceinline__ float xent_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(LOOM_XENT_FUSED_THREADS, 2)
    xent_fused_kernel(float *losses, T *logits, const int32_t *targets, float dloss, int grad,
                      int64_t Vl, int64_t Vvalid) {
    __shared__ float sh[32];
    typedef loom_vec<T, VEC> vec;
    const int64_t n = blockIdx.x;
    vec *xv = reinterpret_cast<vec *>(logits + n * Vl);
    const int64_t t = targets[n];
    const int64_t nvec = Vl / VEC;
    if (t < 0) {
        if (threadIdx.x == 0) losses[n] = 0.0f;
        if (grad) {
            vec z;
#pragma unroll
            for (int j = 0; j < VEC; j++) z.v[j] = loom_from_f32<T>(0.0f);
            for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) xv[i] = z;
        }
        return;
    }
    float xt = 0.0f;
    if (threadIdx.x == 0 && t < Vvalid) xt = loom_to_f32(logits[n * Vl + t]);

    /* Vectors wholly of valid columns (all but the row's last valid one) take the loops without
     * per-column tests: the same operations in the same order, fewer instructions (the kernel is
     * bound by their issue, not by memory). `guarded` (std::true_type or std::false_type) says at
     * compile time whether a vector's columns are tested against Vvalid. */
    const int64_t nvalid = (Vvalid + VEC - 1) / VEC; /* vectors holding a valid column */
    float m = -FLT_MAX, s = 0.0f;
    auto statistics = [&](const vec &r, int64_t c0, auto guarded) {
        float vm = -FLT_MAX;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            if (!decltype(guarded)::value || c0 + j < Vvalid) vm = fmaxf(vm, loom_to_f32(r.v[j]));
        if (vm > m) {
            s *= xent_exp2((m - vm) * LOOM_XENT_LOG2E);
            m = vm;
        }
        const float ml = m * LOOM_XENT_LOG2E;
#pragma unroll
        for (int j = 0; j < VEC; j++)
            if (!decltype(guarded)::value || c0 + j < Vvalid)
                s += xent_exp2(fmaf(loom_to_f32(r.v[j]), LOOM_XENT_LOG2E, -ml));
    };
    for (int64_t i = threadIdx.x; i < nvalid; i += blockDim.x) {
        const int64_t c0 = i * VEC;
        const vec r = xv[i];
        if (c0 + VEC <= Vvalid)
            statistics(r, c0, std::false_type());
        else
            statistics(r, c0, std::true_type());
    }
    const float M = block_reduce_max(m, sh);
    const float S = block_reduce_sum(s * xent_exp2((m - M) * LOOM_XENT_LOG2E), sh);
    if (threadIdx.x == 0) losses[n] = logf(S) + M - xt;
    if (!grad) return;

    /* the gradient; the target's column is written again after the barrier, by thread 0 from
     * the logit it read first: the same operations as the other columns', then - dloss */
    const float scale = dloss / S, Ml = M * LOOM_XENT_LOG2E;
    auto grad_of = [&](float x) { return xent_exp2(fmaf(x, LOOM_XENT_LOG2E, -Ml)) * scale; };
    auto gradient = [&](vec &r, int64_t c0, auto guarded) {
#pragma unroll
        for (int j = 0; j < VEC; j++)
            r.v[j] = loom_from_f32<T>(
                !decltype(guarded)::value || c0 + j < Vvalid ? grad_of(loom_to_f32(r.v[j])) : 0.0f);
    };
    for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        const int64_t c0 = i * VEC;
        vec r = xv[i];
        if (c0 + VEC <= Vvalid)
            gradient(r, c0, std::false_type());
        else
            gradient(r, c0, std::true_type());
        xv[i] = r;
    }
    __syncthreads();
    if (threadIdx.x == 0 && t < Vvalid) logits[n * Vl + t] = loom_from_f32<T>(grad_of(xt) - dloss);
}

/* The widest vector that the row length and the buffer's alignment allow: 16 bytes, else two
 * elements, else one. */
template <typename T>
static void xent_fused_launch(struct loom_backend *be, float *losses, T *x,
                              const int32_t *targets, float dloss, int grad, int64_t N,
                              int64_t Vl, int64_t Vvalid) {
    constexpr int wide = (int)(16 / sizeof(T));
    cudaStream_t st = loom_cuda_stream(be);
    const unsigned blocks = (unsigned)N;
    if (Vl % wide == 0 && loom_aligned(16, x))
        xent_fused_kernel<T, wide><<<blocks, LOOM_XENT_FUSED_THREADS, 0, st>>>(
            losses, x, targets, dloss, grad, Vl, Vvalid);
    else if (Vl % 2 == 0 && loom_aligned(2 * sizeof(T), x))
        xent_fused_kernel<T, 2><<<blocks, LOOM_XENT_FUSED_THREADS, 0, st>>>(
            losses, x, targets, dloss, grad, Vl, Vvalid);
    else
        xent_fused_kernel<T, 1><<<blocks, LOOM_XENT_FUSED_THREADS, 0, st>>>(
            losses, x, targets, dloss, grad, Vl, Vvalid);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_xent_fused(struct loom_backend *be, float *losses, void *logits,
                          enum loom_dtype dt, const int32_t *targets, float dloss, int grad,
                          int64_t N, int64_t Vl, int64_t Vvalid) {
    if (N <= 0) return;
    LOOM_ASSERT(N <= 0x7fffffffLL);
    if (Vvalid > Vl) Vvalid = Vl;
    if (Vvalid < 0) Vvalid = 0;
    switch (dt) {
    case LOOM_DTYPE_F32:
        xent_fused_launch(be, losses, (float *)logits, targets, dloss, grad, N, Vl, Vvalid);
        break;
    case LOOM_DTYPE_BF16:
        xent_fused_launch(be, losses, (__nv_bfloat16 *)logits, targets, dloss, grad, N, Vl,
                          Vvalid);
        break;
    case LOOM_DTYPE_F16:
        xent_fused_launch(be, losses, (__half *)logits, targets, dloss, grad, N, Vl, Vvalid);
        break;
    default:
        loom_abort(__FILE__, __LINE__, "cuda xent_fused: logits of type %s are not supported",
                   loom_dtype_name(dt));
    }
}

/* ---- the output layer fused with the loss (linear_xent) ----
 * With 16-bit products the logits are made and consumed in that type (matmul_bf16.cu): the
 * forward product writes them, the fused pass turns them into the gradient in place, and the
 * two backward products read it as their 16-bit operand. In fp32 the ops of matmul.cu. */
enum loom_dtype loom_cuda_linear_xent_dtype(struct loom_backend *be) {
    const struct loom_cuda *c = loom_cuda_impl(be);
    if (!c->matmul_bf16) return LOOM_DTYPE_F32;
    return c->matmul_f16 ? LOOM_DTYPE_F16 : LOOM_DTYPE_BF16;
}

void loom_cuda_linear_xent(struct loom_backend *be, float *losses, float *dinp, float *dw,
                           void *logits, const float *inp, const float *w,
                           const int32_t *targets, float dloss, int64_t N, int64_t C, int64_t Vl,
                           int64_t Vvalid) {
    if (N <= 0) return;
    const int grad = dinp || dw;
    const enum loom_dtype dt = loom_cuda_linear_xent_dtype(be);
    if (dt != LOOM_DTYPE_F32 && C > 0 && Vl > 0) {
        loom_cuda_linear_forward_16(be, logits, 1, inp, 0, w, NULL, N, C, Vl);
        loom_cuda_xent_fused(be, losses, logits, dt, targets, dloss, grad, N, Vl, Vvalid);
        if (grad) loom_cuda_linear_backward_16(be, dinp, 0, dw, NULL, logits, 1, inp, 0, w, N, C, Vl);
        return;
    }
    float *x = (float *)logits;
    loom_cuda_linear_forward(be, x, inp, w, NULL, N, C, Vl);
    loom_cuda_xent_fused(be, losses, x, LOOM_DTYPE_F32, targets, dloss, grad, N, Vl, Vvalid);
    if (grad) loom_cuda_linear_backward(be, dinp, dw, NULL, x, inp, w, N, C, Vl);
}
