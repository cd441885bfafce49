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
 */
#include <float.h>
#include <math.h>

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
