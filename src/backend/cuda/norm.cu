/* LayerNorm and RMSNorm over the last dimension: N rows of C.
 *
 * LayerNorm:  xhat = (x - mean) * rstd,  out = xhat * w + b,  rstd = 1/sqrt(var + eps)
 *   dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * w
 *   dw += sum_rows dout * xhat,  db += sum_rows dout
 * RMSNorm:    xhat = x * rstd,  out = xhat * w,  rstd = 1/sqrt(mean(x^2) + eps)
 *   dinp += rstd * (g - xhat * mean(g * xhat)),  dw += sum_rows dout * xhat
 *
 * dinp accumulates (a norm's input is the residual stream). Row statistics: one warp per row,
 * summed in double (a residual row can carry a large mean next to a small spread). Weight
 * gradients: fixed row chunks summed column-wise in double, the chunk sums added in order.
 *
 * residual_*norm_forward: the row is first formed as xs = x + r (fp32, as the add op) and
 * written; the same warp then reads it back and normalises it with the code of the plain
 * forward (one kernel template for both), so the results equal add + norm bit for bit.
 */
#include "backend/cuda/common.cuh"

#define LOOM_NORM_WARPS 4
#define LOOM_NORM_COL_THREADS 128

static unsigned norm_row_blocks(int64_t N) {
    return (unsigned)((N + LOOM_NORM_WARPS - 1) / LOOM_NORM_WARPS);
}

/* Row `row` of the norm's input: inp's, or with RESID xs = inp + res formed and written first.
 * Each lane writes and later reads only its columns lane, lane + 32, ..., so xs may alias inp
 * or res. */
template <bool RESID>
__device__ __forceinline__ const float *norm_input_row(float *xs, const float *inp,
                                                       const float *res, int64_t row, int64_t C,
                                                       int lane) {
    if (!RESID) return inp + row * C;
    float *s = xs + row * C;
    const float *a = inp + row * C, *d = res + row * C;
    for (int64_t c = lane; c < C; c += 32) s[c] = a[c] + d[c];
    return s;
}

template <bool RESID>
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, float *xs,
                                         const float *inp, const float *res, const float *w,
                                         const float *b, int64_t N, int64_t C, float eps) {
    int64_t row = blockIdx.x * (int64_t)LOOM_NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = norm_input_row<RESID>(xs, inp, res, row, C, lane);
    double s = 0.0;
    for (int64_t c = lane; c < C; c += 32) s += (double)x[c];
    const double md = loom_warp_sum_d(s) / (double)C;
    double v = 0.0;
    for (int64_t c = lane; c < C; c += 32) {
        double d = (double)x[c] - md;
        v += d * d;
    }
    v = loom_warp_sum_d(v) / (double)C;
    const float m = (float)md;
    const float r = (float)(1.0 / sqrt(v + (double)eps));
    float *o = out + row * C;
    for (int64_t c = lane; c < C; c += 32) {
        float y = (x[c] - m) * r * w[c];
        o[c] = b ? y + b[c] : y;
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                               const float *w, const float *mean,
                                               const float *rstd, int64_t N, int64_t C) {
    int64_t row = blockIdx.x * (int64_t)LOOM_NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + row * C, *dy = dout + row * C;
    float m = mean[row], r = rstd[row];
    double sgd = 0.0, sgxd = 0.0;
    for (int64_t c = lane; c < C; c += 32) {
        float g = dy[c] * w[c];
        sgd += (double)g;
        sgxd += (double)(g * ((x[c] - m) * r));
    }
    const float sg = (float)(loom_warp_sum_d(sgd) / (double)C);
    const float sgx = (float)(loom_warp_sum_d(sgxd) / (double)C);
    float *dx = dinp + row * C;
    for (int64_t c = lane; c < C; c += 32) {
        float g = dy[c] * w[c];
        float xh = (x[c] - m) * r;
        dx[c] += r * (g - sg - xh * sgx);
    }
}

/* partial_dw[k, c], partial_db[k, c] over the rows of chunk k; mean may be NULL (RMSNorm). */
__global__ void norm_weight_partial_kernel(double *partial_dw, double *partial_db,
                                           const float *dout, const float *inp,
                                           const float *mean, const float *rstd, int64_t N,
                                           int64_t C, int64_t rows_per_chunk) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    int64_t k = blockIdx.y;
    if (c >= C) return;
    int64_t r0 = k * rows_per_chunk, r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    double aw = 0.0, ab = 0.0;
    for (int64_t r = r0; r < r1; r++) {
        float dy = dout[r * C + c];
        float xh = mean ? (inp[r * C + c] - mean[r]) * rstd[r] : inp[r * C + c] * rstd[r];
        aw += (double)(dy * xh);
        ab += (double)dy;
    }
    partial_dw[k * C + c] = aw;
    if (partial_db) partial_db[k * C + c] = ab;
}

static void norm_weight_grads(struct loom_backend *be, float *dw, float *db, const float *dout,
                              const float *inp, const float *mean, const float *rstd, int64_t N,
                              int64_t C) {
    if (!dw && !db) return;
    int64_t chunks = loom_cuda_row_chunks(N);
    int64_t rows = (N + chunks - 1) / chunks;
    double *partial = (double *)loom_cuda_scratch(be, (size_t)(2 * chunks * C) * sizeof(double));
    double *pdw = partial, *pdb = db ? partial + chunks * C : NULL;
    dim3 grid((unsigned)((C + LOOM_NORM_COL_THREADS - 1) / LOOM_NORM_COL_THREADS),
              (unsigned)chunks);
    norm_weight_partial_kernel<<<grid, LOOM_NORM_COL_THREADS, 0, loom_cuda_stream(be)>>>(
        pdw, pdb, dout, inp, mean, rstd, N, C, rows);
    LOOM_CUDA_LAUNCHED();
    if (dw) loom_cuda_sum_partials(be, dw, pdw, chunks, C);
    if (db) loom_cuda_sum_partials(be, db, pdb, chunks, C);
}

void loom_cuda_layernorm_forward(struct loom_backend *be, float *out, float *mean, float *rstd,
                                 const float *inp, const float *w, const float *b, int64_t N,
                                 int64_t C, float eps) {
    if (N <= 0 || C <= 0) return;
    layernorm_forward_kernel<false><<<norm_row_blocks(N), LOOM_NORM_WARPS * 32, 0,
                                      loom_cuda_stream(be)>>>(out, mean, rstd, NULL, inp, NULL, w,
                                                              b, N, C, eps);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_residual_layernorm_forward(struct loom_backend *be, float *xs, float *out,
                                          float *mean, float *rstd, const float *x,
                                          const float *r, const float *w, const float *b,
                                          int64_t N, int64_t C, float eps) {
    if (N <= 0 || C <= 0) return;
    loom_cuda_wrote(be, xs, (size_t)(N * C) * sizeof(float));
    layernorm_forward_kernel<true><<<norm_row_blocks(N), LOOM_NORM_WARPS * 32, 0,
                                     loom_cuda_stream(be)>>>(out, mean, rstd, xs, x, r, w, b, N,
                                                             C, eps);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_layernorm_backward(struct loom_backend *be, float *dinp, float *dw, float *db,
                                  const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        layernorm_backward_dinp_kernel<<<norm_row_blocks(N), LOOM_NORM_WARPS * 32, 0,
                                         loom_cuda_stream(be)>>>(dinp, dout, inp, w, mean, rstd,
                                                                 N, C);
        LOOM_CUDA_LAUNCHED();
    }
    norm_weight_grads(be, dw, db, dout, inp, mean, rstd, N, C);
}

template <bool RESID>
__global__ void rmsnorm_forward_kernel(float *out, float *rstd, float *xs, const float *inp,
                                       const float *res, const float *w, int64_t N, int64_t C,
                                       float eps) {
    int64_t row = blockIdx.x * (int64_t)LOOM_NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = norm_input_row<RESID>(xs, inp, res, row, C, lane);
    double s = 0.0;
    for (int64_t c = lane; c < C; c += 32) s += (double)x[c] * (double)x[c];
    const float r = (float)(1.0 / sqrt(loom_warp_sum_d(s) / (double)C + (double)eps));
    float *o = out + row * C;
    for (int64_t c = lane; c < C; c += 32) o[c] = x[c] * r * w[c];
    if (lane == 0 && rstd) rstd[row] = r;
}

__global__ void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                             const float *w, const float *rstd, int64_t N,
                                             int64_t C) {
    int64_t row = blockIdx.x * (int64_t)LOOM_NORM_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + row * C, *dy = dout + row * C;
    float r = rstd[row];
    double sgxd = 0.0;
    for (int64_t c = lane; c < C; c += 32) sgxd += (double)((dy[c] * w[c]) * (x[c] * r));
    const float sgx = (float)(loom_warp_sum_d(sgxd) / (double)C);
    float *dx = dinp + row * C;
    for (int64_t c = lane; c < C; c += 32) {
        float g = dy[c] * w[c];
        dx[c] += r * (g - (x[c] * r) * sgx);
    }
}

void loom_cuda_rmsnorm_forward(struct loom_backend *be, float *out, float *rstd, const float *inp,
                               const float *w, int64_t N, int64_t C, float eps) {
    if (N <= 0 || C <= 0) return;
    rmsnorm_forward_kernel<false><<<norm_row_blocks(N), LOOM_NORM_WARPS * 32, 0,
                                    loom_cuda_stream(be)>>>(out, rstd, NULL, inp, NULL, w, N, C,
                                                            eps);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_residual_rmsnorm_forward(struct loom_backend *be, float *xs, float *out,
                                        float *rstd, const float *x, const float *r,
                                        const float *w, int64_t N, int64_t C, float eps) {
    if (N <= 0 || C <= 0) return;
    loom_cuda_wrote(be, xs, (size_t)(N * C) * sizeof(float));
    rmsnorm_forward_kernel<true><<<norm_row_blocks(N), LOOM_NORM_WARPS * 32, 0,
                                   loom_cuda_stream(be)>>>(out, rstd, xs, x, r, w, N, C, eps);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_rmsnorm_backward(struct loom_backend *be, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, const float *rstd, int64_t N,
                                int64_t C) {
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        rmsnorm_backward_dinp_kernel<<<norm_row_blocks(N), LOOM_NORM_WARPS * 32, 0,
                                       loom_cuda_stream(be)>>>(dinp, dout, inp, w, rstd, N, C);
        LOOM_CUDA_LAUNCHED();
    }
    norm_weight_grads(be, dw, NULL, dout, inp, NULL, rstd, N, C);
}
