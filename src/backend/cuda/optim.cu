/* The optimizer's kernels: AdamW and the gradient norm's sum of squares over parameter ranges.
 *
 * AdamW (torch.optim.AdamW semantics), one thread per element:
 *   g = grad * grad_scale
 *   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / (1 - beta1^step),
 *                                                    vhat = v / (1 - beta2^step)
 * evaluated as torch does: p = p (1 - lr wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
 * The decay uses p before the update (decoupled weight decay); step is 1-based. The constants
 * are computed once on the host in double.
 *
 * sumsq_ranges: every range is cut into pieces of LOOM_SUMSQ_PIECE elements, one block per
 * piece writes its sum in double, and one block adds the pieces in order: a fixed summation
 * order (the same bits every run) and a single wait for the device.
 */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/common.cuh"

#define LOOM_ADAMW_THREADS 256

__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, int64_t n,
                             float beta1, float beta2, float eps, float decay, float step_size,
                             float inv_sqrt_bc2, float grad_scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        /* explicit roundings (no fused multiply-add): the same bits as the CPU backend */
        float g = __fmul_rn(grad[i], grad_scale);
        float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, g));
        float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
        m[i] = mi;
        v[i] = vi;
        float den = __fadd_rn(__fmul_rn(sqrtf(vi), inv_sqrt_bc2), eps);
        param[i] = __fsub_rn(__fmul_rn(param[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), den));
    }
}

void loom_cuda_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                     int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                     int64_t step, float grad_scale) {
    if (n <= 0) return;
    LOOM_ASSERT(step >= 1);
    loom_cuda_wrote(be, param, (size_t)n * sizeof(float));
    const double bc1 = 1.0 - pow((double)beta1, (double)step);
    const double bc2 = 1.0 - pow((double)beta2, (double)step);
    const float step_size = (float)((double)lr / bc1);
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float decay = (float)(1.0 - (double)lr * (double)wd);
    adamw_kernel<<<loom_cuda_grid(n, LOOM_ADAMW_THREADS), LOOM_ADAMW_THREADS, 0,
                   loom_cuda_stream(be)>>>(param, grad, m, v, n, beta1, beta2, eps, decay,
                                           step_size, inv_sqrt_bc2, grad_scale);
    LOOM_CUDA_LAUNCHED();
}

#define LOOM_SUMSQ_PIECE 16384
#define LOOM_SUMSQ_RANGE_THREADS 256

/* desc holds, per range, (offset, length, first piece); piece p belongs to the last range whose
 * first piece is <= p. */
__global__ void sumsq_pieces_kernel(double *partial, const float *x, const int64_t *desc,
                                    int nranges) {
    __shared__ double sh[32];
    int64_t p = blockIdx.x;
    int lo = 0, hi = nranges - 1;
    while (lo < hi) { /* binary search for the range of piece p */
        int mid = (lo + hi + 1) / 2;
        if (desc[3 * mid + 2] <= p) lo = mid;
        else hi = mid - 1;
    }
    int64_t start = (p - desc[3 * lo + 2]) * LOOM_SUMSQ_PIECE;
    int64_t n = desc[3 * lo + 1] - start < LOOM_SUMSQ_PIECE ? desc[3 * lo + 1] - start : LOOM_SUMSQ_PIECE;
    const float *xp = x + desc[3 * lo] + start;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double v = (double)xp[i];
        acc += v * v;
    }
    acc = loom_block_sum_d(acc, sh);
    if (threadIdx.x == 0) partial[p] = acc;
}

/* out[0] = sum of partial[0..n) by one block: thread t adds t, t + blockDim, ... in order, then the
 * warps' sums are added in order. */
__global__ void sumsq_total_kernel(double *out, const double *partial, int64_t n) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = loom_block_sum_d(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

double loom_cuda_sumsq_ranges(struct loom_backend *be, const float *x, const int64_t *off,
                              const int64_t *len, int nranges) {
    struct loom_cuda *c = loom_cuda_impl(be);
    int64_t pieces = 0, used = 0;
    int64_t *desc = (int64_t *)malloc((size_t)(nranges > 0 ? nranges : 1) * 3 * sizeof(int64_t));
    LOOM_ASSERT(desc);
    for (int k = 0; k < nranges; k++) {
        if (len[k] <= 0) continue;
        desc[3 * used] = off[k];
        desc[3 * used + 1] = len[k];
        desc[3 * used + 2] = pieces;
        pieces += (len[k] + LOOM_SUMSQ_PIECE - 1) / LOOM_SUMSQ_PIECE;
        used++;
    }
    if (used == 0) {
        free(desc);
        return 0.0;
    }
    LOOM_ASSERT(pieces < (int64_t)1 << 31);
    /* scratch: [total | partial[pieces] | desc[3 * used]] */
    size_t bytes = (size_t)(1 + pieces) * sizeof(double) + (size_t)used * 3 * sizeof(int64_t);
    double *d = (double *)loom_cuda_scratch(be, bytes);
    int64_t *ddesc = (int64_t *)(d + 1 + pieces);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(ddesc, desc, (size_t)used * 3 * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, c->stream));
    sumsq_pieces_kernel<<<(unsigned)pieces, LOOM_SUMSQ_RANGE_THREADS, 0, c->stream>>>(
        d + 1, x, ddesc, (int)used);
    LOOM_CUDA_LAUNCHED();
    sumsq_total_kernel<<<1, 1024, 0, c->stream>>>(d, d + 1, pieces);
    LOOM_CUDA_LAUNCHED();
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(c->host_double, d, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* also keeps desc alive for the copy */
    free(desc);
    return *c->host_double;
}
