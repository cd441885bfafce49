/* Token and position embeddings.
 *
 *   forward:  out[b,t,:] = wte[tok - v0] (if v0 <= tok < v0 + Vl, else 0) + wpe[pos0 + t] (if wpe)
 *   backward: dwte[tok - v0] += dout[b,t,:] (owned tokens only),  dwpe[pos0 + t] += dout[b,t,:]
 *
 * Backward without atomics: the N = B*T token rows are sorted by (local token id, row) with a
 * stable radix sort, and each run of equal ids is added into its dwte row by one thread per
 * column, in ascending row order (the order a sequential loop over rows would use). dwpe: one
 * thread per (t, c) adds the B samples in order.
 */
#include <cub/device/device_radix_sort.cuh>
#include <limits.h>

#include "backend/cuda/common.cuh"

#define LOOM_EMB_THREADS 256

__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte,
                                         const float *wpe, int64_t T, int64_t C, int64_t N,
                                         int64_t v0, int64_t Vl, int64_t pos0) {
    int64_t total = N * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = i / C, c = i - n * C;
        int64_t tok = (int64_t)tokens[n] - v0;
        float y = (tok >= 0 && tok < Vl) ? wte[tok * C + c] : 0.0f;
        if (wpe) y += wpe[(pos0 + n % T) * C + c];
        out[i] = y;
    }
}

void loom_cuda_embedding_forward(struct loom_backend *be, float *out, const int32_t *tokens,
                                 const float *wte, const float *wpe, int64_t B, int64_t T,
                                 int64_t C, int64_t v0, int64_t Vl, int64_t pos0) {
    int64_t N = B * T;
    if (N <= 0 || C <= 0) return;
    embedding_forward_kernel<<<loom_cuda_grid(N * C, LOOM_EMB_THREADS), LOOM_EMB_THREADS, 0,
                               loom_cuda_stream(be)>>>(out, tokens, wte, wpe, T, C, N, v0, Vl,
                                                       pos0);
    LOOM_CUDA_LAUNCHED();
}

/* keys[n] = local id (tokens outside the shard get Vl, sorted last and skipped); vals[n] = n */
__global__ void embedding_keys_kernel(uint32_t *keys, uint32_t *vals, const int32_t *tokens,
                                      int64_t N, int64_t v0, int64_t Vl) {
    int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (n >= N) return;
    int64_t tok = (int64_t)tokens[n] - v0;
    keys[n] = (uint32_t)((tok >= 0 && tok < Vl) ? tok : Vl);
    vals[n] = (uint32_t)n;
}

/* Block (i, column chunk): if sorted position i starts a run of one id, add that run's rows. */
__global__ void embedding_wte_backward_kernel(float *dwte, const float *dout,
                                              const uint32_t *keys, const uint32_t *rows,
                                              int64_t N, int64_t C, int64_t Vl) {
    int64_t i = blockIdx.x;
    uint32_t id = keys[i];
    if ((int64_t)id >= Vl) return;
    if (i > 0 && keys[i - 1] == id) return;
    int64_t c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = dwte[(int64_t)id * C + c];
    for (int64_t j = i; j < N && keys[j] == id; j++) acc += dout[(int64_t)rows[j] * C + c];
    dwte[(int64_t)id * C + c] = acc;
}

__global__ void embedding_wpe_backward_kernel(float *dwpe, const float *dout, int64_t B,
                                              int64_t T, int64_t C, int64_t pos0) {
    int64_t total = T * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / C, c = i - t * C;
        float acc = dwpe[(pos0 + t) * C + c];
        for (int64_t b = 0; b < B; b++) acc += dout[(b * T + t) * C + c];
        dwpe[(pos0 + t) * C + c] = acc;
    }
}

static int key_bits(int64_t Vl) {
    int bits = 1;
    while (bits < 32 && ((int64_t)1 << bits) <= Vl) bits++;
    return bits;
}

void loom_cuda_embedding_backward(struct loom_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int32_t *tokens, int64_t B, int64_t T,
                                  int64_t C, int64_t v0, int64_t Vl, int64_t pos0) {
    int64_t N = B * T;
    if (N <= 0 || C <= 0) return;
    cudaStream_t s = loom_cuda_stream(be);
    if (dwpe) {
        embedding_wpe_backward_kernel<<<loom_cuda_grid(T * C, LOOM_EMB_THREADS), LOOM_EMB_THREADS,
                                        0, s>>>(dwpe, dout, B, T, C, pos0);
        LOOM_CUDA_LAUNCHED();
    }
    if (!dwte || Vl <= 0) return;
    LOOM_ASSERT(N <= INT_MAX && Vl < UINT32_MAX);

    /* scratch: keys_in, vals_in, keys_out, vals_out (N each), then cub's temporary storage */
    int bits = key_bits(Vl);
    size_t temp_bytes = 0;
    LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const uint32_t *)NULL,
                                                    (uint32_t *)NULL, (const uint32_t *)NULL,
                                                    (uint32_t *)NULL, (int)N, 0, bits, s));
    size_t arr = ((size_t)N * sizeof(uint32_t) + 255) & ~(size_t)255;
    char *base = (char *)loom_cuda_scratch(be, 4 * arr + temp_bytes);
    uint32_t *keys_in = (uint32_t *)base, *vals_in = (uint32_t *)(base + arr);
    uint32_t *keys_out = (uint32_t *)(base + 2 * arr), *vals_out = (uint32_t *)(base + 3 * arr);
    void *temp = base + 4 * arr;

    embedding_keys_kernel<<<(unsigned)((N + LOOM_EMB_THREADS - 1) / LOOM_EMB_THREADS),
                            LOOM_EMB_THREADS, 0, s>>>(keys_in, vals_in, tokens, N, v0, Vl);
    LOOM_CUDA_LAUNCHED();
    LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in,
                                                    vals_out, (int)N, 0, bits, s));
    dim3 grid((unsigned)N, (unsigned)((C + LOOM_EMB_THREADS - 1) / LOOM_EMB_THREADS));
    embedding_wte_backward_kernel<<<grid, LOOM_EMB_THREADS, 0, s>>>(dwte, dout, keys_out,
                                                                    vals_out, N, C, Vl);
    LOOM_CUDA_LAUNCHED();
}
