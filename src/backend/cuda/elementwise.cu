/* Elementwise ops and the deterministic reductions the other families share.
 *
 * add:   y[n] = a + b          axpy: y[n] += alpha * x          scale: x[n] *= alpha
 * sumsq: sum of x^2 in double, returned on the host (waits for the stream).
 * Column sums over rows (bias and norm-weight gradients) run in fixed row chunks summed in
 * double, the chunk sums added in chunk order: no atomics, the same bits every run.
 */
#include "backend/cuda/common.cuh"

#define LOOM_EW_THREADS 256

__global__ void add_kernel(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i])); /* unfused, as the CPU backend */
}

__global__ void scale_kernel(float *x, float alpha, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= alpha;
}

void loom_cuda_add(struct loom_backend *be, float *y, const float *a, const float *b, int64_t n) {
    if (n <= 0) return;
    loom_cuda_wrote(be, y, (size_t)n * sizeof(float));
    add_kernel<<<loom_cuda_grid(n, LOOM_EW_THREADS), LOOM_EW_THREADS, 0, loom_cuda_stream(be)>>>(
        y, a, b, n);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_axpy(struct loom_backend *be, float *y, float alpha, const float *x, int64_t n) {
    if (n <= 0) return;
    loom_cuda_wrote(be, y, (size_t)n * sizeof(float));
    axpy_kernel<<<loom_cuda_grid(n, LOOM_EW_THREADS), LOOM_EW_THREADS, 0,
                  loom_cuda_stream(be)>>>(y, alpha, x, n);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_scale(struct loom_backend *be, float *x, float alpha, int64_t n) {
    if (n <= 0) return;
    loom_cuda_wrote(be, x, (size_t)n * sizeof(float));
    scale_kernel<<<loom_cuda_grid(n, LOOM_EW_THREADS), LOOM_EW_THREADS, 0,
                   loom_cuda_stream(be)>>>(x, alpha, n);
    LOOM_CUDA_LAUNCHED();
}

/* ---- sum of squares ---- */

#define LOOM_SUMSQ_THREADS 256
#define LOOM_SUMSQ_MAX_BLOCKS 1024

__global__ void sumsq_partial_kernel(double *partial, const float *x, int64_t n) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        double v = (double)x[i];
        acc += v * v;
    }
    acc = loom_block_sum_d(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_doubles_kernel(double *out, const double *partial, int n) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = loom_block_sum_d(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

double loom_cuda_sumsq(struct loom_backend *be, const float *x, int64_t n) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (n <= 0) return 0.0;
    int64_t blocks = (n + LOOM_SUMSQ_THREADS * 8 - 1) / (LOOM_SUMSQ_THREADS * 8);
    if (blocks > LOOM_SUMSQ_MAX_BLOCKS) blocks = LOOM_SUMSQ_MAX_BLOCKS;
    double *d = (double *)loom_cuda_scratch(be, (size_t)(blocks + 1) * sizeof(double));
    sumsq_partial_kernel<<<(unsigned)blocks, LOOM_SUMSQ_THREADS, 0, c->stream>>>(d + 1, x, n);
    LOOM_CUDA_LAUNCHED();
    sum_doubles_kernel<<<1, LOOM_SUMSQ_THREADS, 0, c->stream>>>(d, d + 1, (int)blocks);
    LOOM_CUDA_LAUNCHED();
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(c->host_double, d, sizeof(double), cudaMemcpyDeviceToHost, c->stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return *c->host_double;
}

/* ---- column sums ---- */

#define LOOM_COLSUM_THREADS 128

int64_t loom_cuda_row_chunks(int64_t N) {
    int64_t rows = (N + 127) / 128;
    if (rows < 64) rows = 64;
    int64_t chunks = (N + rows - 1) / rows;
    return chunks < 1 ? 1 : chunks;
}

/* partial[k, c] = the sum in double of in[r, c] over the rows r of chunk k, in row order
 * (rows_per_chunk consecutive rows), in of type TIN (fp32 or 16-bit). With CONVERT the same pass
 * writes dst[r, c] = in[r, c] rounded to T16 (an fp32 operand of the matrix products whose
 * column sums are a bias gradient is read once). VEC columns a thread (2 where C is even); R rows
 * are loaded before they are summed, in order. */
template <typename TIN, typename T16, int VEC, bool CONVERT>
__global__ void colsum_partial_kernel(double *__restrict__ partial, T16 *__restrict__ dst,
                                      const TIN *__restrict__ in, int64_t N, int64_t C,
                                      int64_t rows_per_chunk) {
    enum { R = 8 };
    const int64_t c = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * VEC;
    const int64_t k = blockIdx.y;
    if (c >= C) return;
    const int64_t r0 = k * rows_per_chunk;
    const int64_t r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    double acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) acc[j] = 0.0;
    for (int64_t r = r0; r < r1; r += R) {
        const int nr = r1 - r < R ? (int)(r1 - r) : R;
        loom_vec<TIN, VEC> x[R];
#pragma unroll
        for (int i = 0; i < R; i++)
            if (i < nr) x[i] = *(const loom_vec<TIN, VEC> *)(in + (r + i) * C + c);
#pragma unroll
        for (int i = 0; i < R; i++) {
            if (i >= nr) break;
            loom_vec<T16, VEC> y;
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float f = loom_to_f32(x[i].v[j]);
                acc[j] += (double)f;
                if (CONVERT) y.v[j] = loom_from_f32<T16>(f);
            }
            if (CONVERT) *(loom_vec<T16, VEC> *)(dst + (r + i) * C + c) = y;
        }
    }
#pragma unroll
    for (int j = 0; j < VEC; j++) partial[k * C + c + j] = acc[j];
}

template <typename TIN, typename T16, bool CONVERT>
static void colsum_partials(struct loom_backend *be, double *partial, void *dst, const void *in,
                            int64_t N, int64_t C, int64_t rows, int64_t chunks) {
    const int vec2 =
        C % 2 == 0 && loom_aligned(2 * sizeof(TIN), in) && loom_aligned(2 * sizeof(T16), dst);
    const int64_t threads = vec2 ? C / 2 : C;
    dim3 grid((unsigned)((threads + LOOM_COLSUM_THREADS - 1) / LOOM_COLSUM_THREADS),
              (unsigned)chunks);
    cudaStream_t st = loom_cuda_stream(be);
    if (vec2)
        colsum_partial_kernel<TIN, T16, 2, CONVERT><<<grid, LOOM_COLSUM_THREADS, 0, st>>>(
            partial, (T16 *)dst, (const TIN *)in, N, C, rows);
    else
        colsum_partial_kernel<TIN, T16, 1, CONVERT><<<grid, LOOM_COLSUM_THREADS, 0, st>>>(
            partial, (T16 *)dst, (const TIN *)in, N, C, rows);
    LOOM_CUDA_LAUNCHED();
}

/* A thread a column, adding its chunks in order. Few threads, each a long chain of loads: one
 * warp a block, so that the blocks spread over the SMs, and 16 loads in flight (an H200 at
 * C = 3072, 128 chunks: 23 -> 6 us; the same sums, so the same bits). */
#define LOOM_SUM_PARTIALS_THREADS 32
__global__ void sum_partials_kernel(float *out, const double *partial, int64_t chunks,
                                    int64_t C) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    double acc = 0.0;
#pragma unroll 16
    for (int64_t k = 0; k < chunks; k++) acc += partial[k * C + c];
    out[c] += (float)acc;
}

void loom_cuda_sum_partials(struct loom_backend *be, float *out, const double *partial,
                            int64_t chunks, int64_t C) {
    unsigned gx = (unsigned)((C + LOOM_SUM_PARTIALS_THREADS - 1) / LOOM_SUM_PARTIALS_THREADS);
    sum_partials_kernel<<<gx, LOOM_SUM_PARTIALS_THREADS, 0, loom_cuda_stream(be)>>>(out, partial,
                                                                                   chunks, C);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_colsum_convert(struct loom_backend *be, float *out, void *dst,
                              enum loom_dtype dst_dt, const void *in, enum loom_dtype in_dt,
                              int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    const int64_t chunks = loom_cuda_row_chunks(N), rows = (N + chunks - 1) / chunks;
    double *partial = (double *)loom_cuda_scratch(be, (size_t)(chunks * C) * sizeof(double));
    if (dst) {
        LOOM_ASSERT(in_dt == LOOM_DTYPE_F32);
        if (dst_dt == LOOM_DTYPE_F16)
            colsum_partials<float, __half, true>(be, partial, dst, in, N, C, rows, chunks);
        else if (dst_dt == LOOM_DTYPE_BF16)
            colsum_partials<float, __nv_bfloat16, true>(be, partial, dst, in, N, C, rows, chunks);
        else
            loom_abort(__FILE__, __LINE__, "cuda colsum: conversion to %s", loom_dtype_name(dst_dt));
    } else if (in_dt == LOOM_DTYPE_F16) {
        colsum_partials<__half, __half, false>(be, partial, NULL, in, N, C, rows, chunks);
    } else if (in_dt == LOOM_DTYPE_BF16) {
        colsum_partials<__nv_bfloat16, __nv_bfloat16, false>(be, partial, NULL, in, N, C, rows,
                                                             chunks);
    } else {
        LOOM_ASSERT(in_dt == LOOM_DTYPE_F32);
        colsum_partials<float, float, false>(be, partial, NULL, in, N, C, rows, chunks);
    }
    loom_cuda_sum_partials(be, out, partial, chunks, C);
}

void loom_cuda_colsum_accumulate(struct loom_backend *be, float *out, const float *in, int64_t N,
                                 int64_t C) {
    loom_cuda_colsum_convert(be, out, NULL, LOOM_DTYPE_F32, in, LOOM_DTYPE_F32, N, C);
}
