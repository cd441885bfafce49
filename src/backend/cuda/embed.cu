/* Token and position embeddings.
 *
 *   forward:  out[b,t,:] = wte[tok - v0] (if v0 <= tok < v0 + Vl, else 0) + wpe[pos0 + p] (if wpe)
 *   backward: dwte[tok - v0] += dout[b,t,:] (owned tokens only),  dwpe[pos0 + p] += dout[b,t,:]
 * with p = pos[b,t] (per-token positions, restarting at each document) or t.
 *
 * Backward without atomics: the N = B*T token rows are sorted by (local token id, row) with a
 * stable radix sort, and each run of equal ids is added into its dwte row by one thread per
 * column, in ascending row order (the order a sequential loop over rows would use). dwpe: one
 * thread per (t, c) adds the B samples in order; with per-token positions, where any rows may
 * share a position, the rows are sorted by position as by token id and added the same way.
 */
#include <cub/device/device_radix_sort.cuh>
#include <limits.h>

#include "backend/cuda/common.cuh"

#define LOOM_EMB_THREADS 256

/* Columns c .. c+VEC-1 of a row: one access of VEC floats */
template <int VEC> using emb_vec = loom_vec<float, VEC>;

/* Row n of out per block (grid-stride), its VEC-column pieces per thread: with VEC = 4 (C a
 * multiple of 4, the arrays 16-byte aligned) one access a piece. The same arithmetic per element
 * either way: the token's row (or 0 outside the shard), plus the position's row. */
template <int VEC>
__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const int32_t *pos,
                                         const float *wte, const float *wpe, int64_t T, int64_t C,
                                         int64_t N, int64_t v0, int64_t Vl, int64_t pos0) {
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const int64_t tok = (int64_t)tokens[n] - v0;
        const int own = tok >= 0 && tok < Vl;
        const float *te = wte + (own ? tok : 0) * C;
        const float *pe = wpe ? wpe + (pos0 + (pos ? (int64_t)pos[n] : n % T)) * C : NULL;
        float *o = out + n * C;
        for (int64_t c = VEC * (int64_t)threadIdx.x; c < C; c += VEC * (int64_t)blockDim.x) {
            emb_vec<VEC> y = {}; /* 0 outside the shard */
            if (own) y = *reinterpret_cast<const emb_vec<VEC> *>(te + c);
            if (pe) {
                const emb_vec<VEC> p = *reinterpret_cast<const emb_vec<VEC> *>(pe + c);
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    y.v[j] += p.v[j];
            }
            *reinterpret_cast<emb_vec<VEC> *>(o + c) = y;
        }
    }
}

/* 1 or 4: whether rows of C floats move 4 columns an access */
static int emb_vec_width(int64_t C, const void *a, const void *b, const void *c) {
    return C % 4 == 0 && loom_aligned(16, a, b, c) ? 4 : 1;
}

/* threads of a block that has one row of C columns, VEC a thread */
static unsigned emb_threads(int64_t C, int vec) {
    const int64_t t = (C / vec + 31) / 32 * 32;
    return (unsigned)(t < LOOM_EMB_THREADS ? t : LOOM_EMB_THREADS);
}

void loom_cuda_embedding_forward(struct loom_backend *be, float *out, const int32_t *tokens,
                                 const int32_t *pos, const float *wte, const float *wpe, int64_t B,
                                 int64_t T, int64_t C, int64_t v0, int64_t Vl, int64_t pos0) {
    int64_t N = B * T;
    if (N <= 0 || C <= 0) return;
    const int vec = emb_vec_width(C, out, wte, wpe);
    const unsigned grid = (unsigned)(N < 65535 * 16 ? N : 65535 * 16);
    cudaStream_t s = loom_cuda_stream(be);
    if (vec == 4)
        embedding_forward_kernel<4>
            <<<grid, emb_threads(C, 4), 0, s>>>(out, tokens, pos, wte, wpe, T, C, N, v0, Vl, pos0);
    else
        embedding_forward_kernel<1>
            <<<grid, emb_threads(C, 1), 0, s>>>(out, tokens, pos, wte, wpe, T, C, N, v0, Vl, pos0);
    LOOM_CUDA_LAUNCHED();
}

/* keys[n] = local id (tokens outside the shard get Vl, sorted last and skipped); vals[n] = n.
 * With tokens NULL: keys[n] = pos[n] (the rows of the position table, Vl = T of them). */
__global__ void embedding_keys_kernel(uint32_t *keys, uint32_t *vals, const int32_t *tokens,
                                      const int32_t *pos, int64_t N, int64_t v0, int64_t Vl) {
    int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (n >= N) return;
    int64_t tok = tokens ? (int64_t)tokens[n] - v0 : (int64_t)pos[n];
    keys[n] = (uint32_t)((tok >= 0 && tok < Vl) ? tok : Vl);
    vals[n] = (uint32_t)n;
}

/* Block (i, column chunk): if sorted position i starts a run of one id (a token's or a
 * position's), add that run's rows into row id of dst, VEC columns a thread (one access each with
 * VEC = 4), each column in ascending row order. */
template <int VEC>
__global__ void embedding_rows_backward_kernel(float *dst, const float *dout, const uint32_t *keys,
                                               const uint32_t *rows, int64_t N, int64_t C,
                                               int64_t Vl) {
    int64_t i = blockIdx.x;
    uint32_t id = keys[i];
    if ((int64_t)id >= Vl) return;
    if (i > 0 && keys[i - 1] == id) return;
    int64_t c = VEC * (blockIdx.y * (int64_t)blockDim.x + threadIdx.x);
    if (c >= C) return;
    emb_vec<VEC> *row = reinterpret_cast<emb_vec<VEC> *>(dst + (int64_t)id * C + c);
    emb_vec<VEC> acc = *row;
    for (int64_t j = i; j < N && keys[j] == id; j++) {
        const emb_vec<VEC> d = *reinterpret_cast<const emb_vec<VEC> *>(dout + rows[j] * C + c);
#pragma unroll
        for (int k = 0; k < VEC; k++)
            acc.v[k] += d.v[k];
    }
    *row = acc;
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

/* Tables of few rows (token types: Vl <= EMB_FEW_IDS) make runs of thousands of rows that one
 * block per id would add alone (BERT-large's 4096 token types took 0.9 ms so). Instead block
 * (segment s, column chunk) adds the EMB_SEG_ROWS rows of its segment into one partial sum per id,
 * partial[(s Vl + k) C + c], in ascending row order, and embedding_few_sum_kernel adds them to dst
 * in segment order: a fixed order, so two runs give the same bits. */
#define EMB_FEW_IDS 8
#define EMB_SEG_ROWS 64
__global__ void embedding_few_partial_kernel(float *partial, const float *dout, const int32_t *ids,
                                             int64_t N, int64_t C, int64_t v0, int64_t Vl) {
    const int64_t s = blockIdx.x, c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc[EMB_FEW_IDS];
#pragma unroll
    for (int k = 0; k < EMB_FEW_IDS; k++) acc[k] = 0.0f;
    const int64_t r1 = (s + 1) * EMB_SEG_ROWS < N ? (s + 1) * EMB_SEG_ROWS : N;
    for (int64_t n = s * EMB_SEG_ROWS; n < r1; n++) {
        const int64_t id = (int64_t)ids[n] - v0;
        const float d = dout[n * C + c];
#pragma unroll
        for (int k = 0; k < EMB_FEW_IDS; k++)
            if (k == id) acc[k] += d;
    }
    for (int64_t k = 0; k < Vl; k++) partial[(s * Vl + k) * C + c] = acc[k];
}

__global__ void embedding_few_sum_kernel(float *dst, const float *partial, int64_t S, int64_t C,
                                         int64_t Vl) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= Vl * C) return;
    float a = dst[i];
    for (int64_t s = 0; s < S; s++) a += partial[s * Vl * C + i];
    dst[i] = a;
}

static void add_rows_few_ids(struct loom_backend *be, float *dst, const float *dout,
                             const int32_t *ids, int64_t N, int64_t C, int64_t v0, int64_t Vl) {
    cudaStream_t s = loom_cuda_stream(be);
    const int64_t S = (N + EMB_SEG_ROWS - 1) / EMB_SEG_ROWS;
    float *partial = (float *)loom_cuda_scratch(be, (size_t)(S * Vl * C) * sizeof(float));
    const unsigned threads = 256;
    const dim3 grid((unsigned)S, (unsigned)((C + threads - 1) / threads));
    embedding_few_partial_kernel<<<grid, threads, 0, s>>>(partial, dout, ids, N, C, v0, Vl);
    LOOM_CUDA_LAUNCHED();
    embedding_few_sum_kernel<<<(unsigned)((Vl * C + threads - 1) / threads), threads, 0, s>>>(
        dst, partial, S, C, Vl);
    LOOM_CUDA_LAUNCHED();
}

static int key_bits(int64_t Vl) {
    int bits = 1;
    while (bits < 32 && ((int64_t)1 << bits) <= Vl) bits++;
    return bits;
}

/* dst[k] += the rows n of dout[N,C] whose key is k < Vl, in ascending n: the keys (local token
 * ids of tokens, or with tokens NULL the positions pos) sorted with their rows by a stable radix
 * sort, then one block per run of equal keys (keys Vl and above are skipped); a table of few rows
 * through add_rows_few_ids instead. */
static void add_rows_by_key(struct loom_backend *be, float *dst, const float *dout,
                            const int32_t *tokens, const int32_t *pos, int64_t N, int64_t C,
                            int64_t v0, int64_t Vl) {
    if (tokens && Vl <= EMB_FEW_IDS) {
        add_rows_few_ids(be, dst, dout, tokens, N, C, v0, Vl);
        return;
    }
    cudaStream_t s = loom_cuda_stream(be);
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
                            LOOM_EMB_THREADS, 0, s>>>(keys_in, vals_in, tokens, pos, N, v0, Vl);
    LOOM_CUDA_LAUNCHED();
    LOOM_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, vals_in,
                                                    vals_out, (int)N, 0, bits, s));
    const int vec = emb_vec_width(C, dst, dout, NULL);
    const unsigned threads = emb_threads(C, vec);
    const dim3 grid((unsigned)N, (unsigned)((C / vec + threads - 1) / threads));
    if (vec == 4)
        embedding_rows_backward_kernel<4>
            <<<grid, threads, 0, s>>>(dst, dout, keys_out, vals_out, N, C, Vl);
    else
        embedding_rows_backward_kernel<1>
            <<<grid, threads, 0, s>>>(dst, dout, keys_out, vals_out, N, C, Vl);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_embedding_backward(struct loom_backend *be, float *dwte, float *dwpe,
                                  const float *dout, const int32_t *tokens, const int32_t *pos,
                                  int64_t B, int64_t T, int64_t C, int64_t v0, int64_t Vl,
                                  int64_t pos0) {
    int64_t N = B * T;
    if (N <= 0 || C <= 0) return;
    if (dwpe && pos) {
        add_rows_by_key(be, dwpe + pos0 * C, dout, NULL, pos, N, C, 0, T);
    } else if (dwpe) {
        embedding_wpe_backward_kernel<<<loom_cuda_grid(T * C, LOOM_EMB_THREADS), LOOM_EMB_THREADS,
                                        0, loom_cuda_stream(be)>>>(dwpe, dout, B, T, C, pos0);
        LOOM_CUDA_LAUNCHED();
    }
    if (!dwte || Vl <= 0) return;
    add_rows_by_key(be, dwte, dout, tokens, NULL, N, C, v0, Vl);
}
