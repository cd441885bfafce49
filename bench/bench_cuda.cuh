/* What the CUDA microbenchmarks (bench/bench_cuda_*.cu) share: device buffers of normal random
 * numbers (the repository's counter-based generator, so every run fills the same values) and
 * the timing of an op: 3 calls to warm up, then `calls` calls between two CUDA events on the
 * backend's stream, the mean in microseconds. */
#ifndef LOOM_BENCH_CUDA_CUH
#define LOOM_BENCH_CUDA_CUH

#include <stdio.h>
#include <stdlib.h>

#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"

/* x[i] = mean + sd * normal(seed 7, purpose, i), in fp32 or rounded to bf16 */
template <typename T>
static __global__ void bench_fill_kernel(T *x, int64_t n, uint64_t purpose, float sd, float mean) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = (T)(mean + sd * loom_rng_normal(7, purpose, (uint64_t)i));
}

template <typename T>
static void bench_fill(struct loom_backend *be, T *x, int64_t n, uint64_t purpose, float sd,
                       float mean = 0.0f) {
    bench_fill_kernel<T><<<1024, 256, 0, loom_cuda_stream(be)>>>(x, n, purpose, sd, mean);
    LOOM_CUDA_LAUNCHED();
}

/* bytes of zeroed device memory; out of memory ends the program */
static void *bench_alloc(struct loom_backend *be, size_t bytes) {
    void *p = be->ops->malloc(be, bytes);
    if (!p) {
        fprintf(stderr, "benchmark: out of device memory for %zu bytes\n", bytes);
        exit(1);
    }
    be->ops->zero(be, p, bytes);
    return p;
}

/* The mean time of `call` in microseconds into us (a double lvalue). */
#define BENCH_US(be, calls, us, call)                                                         \
    do {                                                                                      \
        cudaStream_t st_ = loom_cuda_stream(be);                                              \
        cudaEvent_t e0_, e1_;                                                                 \
        LOOM_CUDA_CHECK(cudaEventCreate(&e0_));                                               \
        LOOM_CUDA_CHECK(cudaEventCreate(&e1_));                                               \
        for (int i_ = 0; i_ < 3 + (calls); i_++) {                                            \
            if (i_ == 3) LOOM_CUDA_CHECK(cudaEventRecord(e0_, st_));                          \
            call;                                                                             \
        }                                                                                     \
        LOOM_CUDA_CHECK(cudaEventRecord(e1_, st_));                                           \
        LOOM_CUDA_CHECK(cudaEventSynchronize(e1_));                                           \
        float ms_;                                                                            \
        LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms_, e0_, e1_));                                \
        LOOM_CUDA_CHECK(cudaEventDestroy(e0_));                                               \
        LOOM_CUDA_CHECK(cudaEventDestroy(e1_));                                               \
        (us) = 1000.0 * ms_ / (calls);                                                        \
    } while (0)

#endif
