/* Query and key head norms (head_norm_forward, head_norm_backward; loom/backend.h): LayerNorm or
 * RMSNorm over each head vector of HS values (HS <= 256), in place on a qkv row of fp32 or bf16.
 *
 * The fp32 arithmetic of an element is the CPU backend's (src/backend/cpu/head_norm.c), operation
 * for operation: the vector's sums in double with separately rounded products and sums (no fused
 * multiply-adds, as the CPU's C), mean and rstd rounded to fp32, then each element's products and
 * sums rounded in fp32 in the CPU's order. Only the order in which a vector's values enter its
 * double sums differs, which reaches mean and rstd in rare last-bit roundings.
 *
 * Layout. A vector is held by a group of L lanes of a warp (L a power of two, the fewest that
 * hold it in chunks of VEC values, at most 32): lane s of the group owns chunks s, s + L, ... of
 * VEC consecutive values. With HS a multiple of VEC = 16 bytes / element size and qkv, keep 16-byte
 * aligned a chunk moves as one 16-byte access (8 bf16 or 4 fp32 values), else VEC = 1 and values
 * move one at a time. A lane holds at most HN_ELEMS values, so the vector is read once. A vector's
 * sum adds each lane's values in chunk order, then the lanes of the group by a butterfly (every
 * lane gets the same bits). The groups of a warp lie side by side, so that a warp's accesses cover
 * neighbouring head vectors of a row.
 *
 * Forward: one vector a group; the input is copied to keep as it is read (exact), the result
 * written over it. Backward: a block takes a run of VPB = HN_BWD_VECS x (its groups) query
 * vectors, or of key vectors (the query vectors' blocks first); group j of the block takes the
 * vectors j, j + groups, ... of its run. Each lane sums its columns' d * xhat and d in fp32 over
 * its vectors; the groups' sums are added in group order in double into the block's two partial
 * rows, and the partial rows of the query blocks, then of the key blocks, are added in block
 * order by a second kernel. The split depends on the problem alone: no atomics, the same bits on
 * every run and GPU. (These sums are not the CPU's, which adds each thread's rows in double: the
 * weight gradients agree to rounding, not bit for bit.)
 */
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"

#define HN_THREADS 256 /* threads of a block */
#define HN_ELEMS 8     /* values of a vector a lane holds, at most */
#define HN_MAX_HS (32 * HN_ELEMS)
#define HN_BWD_VECS 8 /* vectors a group takes in turn in the backward */

typedef __nv_bfloat16 bf16;

/* q / d for the nonnegative 64-bit values of the ops, in 32 bits where they fit */
__device__ __forceinline__ int64_t hn_div(int64_t q, int64_t d) {
    if ((uint64_t)q <= 0xffffffffull && (uint64_t)d <= 0xffffffffull)
        return (int64_t)((uint32_t)q / (uint32_t)d);
    return q / d;
}

/* Element offset in qkv of head vector v (the dense index of loom/backend.h) */
__device__ __forceinline__ int64_t hn_offset(int64_t v, int64_t N, int64_t NH, int64_t NKV,
                                             int64_t HS) {
    const int64_t R = hn_div(NH, NKV), G = (R + 2) * HS, row = (NH + 2 * NKV) * HS;
    if (v < N * NH) {
        const int64_t n = hn_div(v, NH), h = v - n * NH, g = hn_div(h, R);
        return n * row + g * G + (h - g * R) * HS;
    }
    v -= N * NH;
    const int64_t n = hn_div(v, NKV);
    return n * row + (v - n * NKV) * G + R * HS;
}

/* The sum over the L lanes of this lane's group (L a power of two, groups aligned to it); only
 * the group's lanes take part, so that groups of one warp may stop at different vectors. */
__device__ __forceinline__ double hn_group_sum(double v, int L) {
    const unsigned lane = threadIdx.x & 31u;
    const unsigned mask = L == 32 ? 0xffffffffu : ((1u << L) - 1u) << (lane & ~(unsigned)(L - 1));
    for (int o = L >> 1; o > 0; o >>= 1)
        v = __dadd_rn(v, __shfl_xor_sync(mask, v, o));
    return v;
}

/* xhat of one element, as the CPU computes it */
template <bool RMS> __device__ __forceinline__ float hn_xhat(float x, float m, float r) {
    return RMS ? __fmul_rn(x, r) : __fmul_rn(__fsub_rn(x, m), r);
}

template <typename T, int VEC> __device__ __forceinline__ loom_vec<T, VEC> hn_load(const T *p) {
    return *reinterpret_cast<const loom_vec<T, VEC> *>(p);
}
template <typename T, int VEC>
__device__ __forceinline__ void hn_store(T *p, const loom_vec<T, VEC> &u) {
    *reinterpret_cast<loom_vec<T, VEC> *>(p) = u;
}

/* One vector a group of L lanes: keep <- x, mean, rstd, x <- norm(x) w (+ b). Lanes past the last
 * vector take part in the group sums with zeros and write nothing. */
template <typename T, bool RMS, int VEC>
__global__ void __launch_bounds__(HN_THREADS)
    head_norm_forward_kernel(T *qkv, T *keep, float *mean, float *rstd, const float *wq,
                             const float *bq, const float *wk, const float *bk, int64_t N,
                             int64_t NH, int64_t NKV, int HS, int L, float eps) {
    constexpr int KM = HN_ELEMS / VEC;
    const int s = (int)threadIdx.x & (L - 1);
    const int64_t v = blockIdx.x * (int64_t)(HN_THREADS / L) + (int64_t)(threadIdx.x / L);
    const int64_t nq = N * NH, nv = N * (NH + NKV);
    const bool live = v < nv;
    const int64_t off = live ? hn_offset(v, N, NH, NKV, HS) : 0;
    T *p = qkv + off;
    loom_vec<T, VEC> u[KM];
    float x[KM][VEC];
#pragma unroll
    for (int k = 0; k < KM; k++) {
        const int c = (k * L + s) * VEC;
        const bool have = live && c < HS;
        if (have) {
            u[k] = hn_load<T, VEC>(p + c);
            if (keep) hn_store<T, VEC>(keep + v * HS + c, u[k]);
        }
#pragma unroll
        for (int j = 0; j < VEC; j++)
            x[k][j] = have ? loom_to_f32(u[k].v[j]) : 0.0f;
    }
    /* LayerNorm: sum of x, then of (x - mean)^2; RMSNorm: sum of x^2 (absent values add 0) */
    double s1 = 0.0;
#pragma unroll
    for (int k = 0; k < KM; k++)
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const double d = (double)x[k][j];
            s1 = RMS ? __dadd_rn(s1, __dmul_rn(d, d)) : __dadd_rn(s1, d);
        }
    s1 = hn_group_sum(s1, L);
    double q2 = s1;
    float m = 0.0f;
    if (!RMS) {
        const double md = s1 / (double)HS;
        m = (float)md;
        double s2 = 0.0;
#pragma unroll
        for (int k = 0; k < KM; k++)
#pragma unroll
            for (int j = 0; j < VEC; j++)
                if ((k * L + s) * VEC + j < HS) {
                    const double d = __dsub_rn((double)x[k][j], md);
                    s2 = __dadd_rn(s2, __dmul_rn(d, d));
                }
        q2 = hn_group_sum(s2, L);
    }
    const float r = (float)(1.0 / sqrt(q2 / (double)HS + (double)eps));
    if (!live) return;
    const bool isq = v < nq;
    const float *w = isq ? wq : wk, *b = RMS ? NULL : isq ? bq : bk;
#pragma unroll
    for (int k = 0; k < KM; k++) {
        const int c = (k * L + s) * VEC;
        if (c >= HS) continue;
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            float y = __fmul_rn(hn_xhat<RMS>(x[k][j], m, r), __ldg(w + c + j));
            if (b) y = __fadd_rn(y, __ldg(b + c + j));
            u[k].v[j] = loom_from_f32<T>(y);
        }
        hn_store<T, VEC>(p + c, u[k]);
    }
    if (s == 0) {
        if (!RMS && mean) mean[v] = m;
        if (rstd) rstd[v] = r;
    }
}

/* Blocks of the backward an SM should hold at once: the most whose registers need no spills
 * (ptxas, sm_90: 4 of the 16-byte paths but fp32 LayerNorm's, 3 of that, 2 of the scalar ones) */
template <typename T, bool RMS, int VEC> constexpr int hn_bwd_blocks() {
    return VEC == 1 ? 2 : (sizeof(T) == 2 || RMS) ? 4 : 3;
}

/* The input gradients of the vectors of block blockIdx.x in place in dqkv, and the block's two
 * partial rows: partial[2 blockIdx.x HS + c] the sum of d * xhat over its vectors,
 * partial[(2 blockIdx.x + 1) HS + c] that of d. Blocks [0, Gq) take the query vectors [0, nq) in
 * runs of VPB, blocks from Gq on the key vectors, so that a block sums for one weight alone. */
template <typename T, bool RMS, int VEC>
__global__ void __launch_bounds__(HN_THREADS, hn_bwd_blocks<T, RMS, VEC>())
    head_norm_backward_kernel(T *dqkv, double *partial, const T *keep, const float *mean,
                              const float *rstd, const float *wq, const float *wk, int64_t N,
                              int64_t NH, int64_t NKV, int HS, int L, int64_t Gq) {
    constexpr int KM = HN_ELEMS / VEC;
    __shared__ float sh[2 * 32 * HN_ELEMS * (HN_THREADS / 32)]; /* [group][2][HS] */
    const int s = (int)threadIdx.x & (L - 1), grp = (int)threadIdx.x / L;
    const int groups = HN_THREADS / L;
    const int64_t nq = N * NH, nv = N * (NH + NKV), vpb = (int64_t)groups * HN_BWD_VECS;
    const bool isq = blockIdx.x < Gq;
    const int64_t v0 = isq ? blockIdx.x * vpb : nq + (blockIdx.x - Gq) * vpb;
    const int64_t v1 = isq ? nq : nv;
    const float *w = isq ? wq : wk;
    /* this lane's sums of d * xhat and of d (its weights are read through the cache each time:
     * registers kept for them cost occupancy) */
    float aw[KM][VEC], ab[KM][VEC];
#pragma unroll
    for (int k = 0; k < KM; k++)
#pragma unroll
        for (int j = 0; j < VEC; j++)
            aw[k][j] = ab[k][j] = 0.0f;
    for (int i = 0; i < HN_BWD_VECS; i++) {
        const int64_t v = v0 + (int64_t)i * groups + grp;
        if (v >= v1 || v >= v0 + vpb) break; /* the same for every lane of the group */
        const int64_t off = hn_offset(v, N, NH, NKV, HS);
        T *p = dqkv + off;
        const T *kp = keep + v * HS;
        const float m = RMS ? 0.0f : mean[v], r = rstd[v];
        loom_vec<T, VEC> du[KM], xu[KM];
#pragma unroll
        for (int k = 0; k < KM; k++) {
            const int c = (k * L + s) * VEC;
            if (c < HS) {
                du[k] = hn_load<T, VEC>(p + c);
                xu[k] = hn_load<T, VEC>(kp + c);
            }
        }
        double sg = 0.0, sgx = 0.0;
#pragma unroll
        for (int k = 0; k < KM; k++) {
            const int c = (k * L + s) * VEC;
            if (c >= HS) continue;
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float g = __fmul_rn(loom_to_f32(du[k].v[j]), __ldg(w + c + j));
                const float xh = hn_xhat<RMS>(loom_to_f32(xu[k].v[j]), m, r);
                if (!RMS) sg = __dadd_rn(sg, (double)g);
                sgx = __dadd_rn(sgx, (double)__fmul_rn(g, xh));
            }
        }
        if (!RMS) sg = hn_group_sum(sg, L);
        sgx = hn_group_sum(sgx, L);
        const float a = (float)(sg / (double)HS), bx = (float)(sgx / (double)HS);
#pragma unroll
        for (int k = 0; k < KM; k++) {
            const int c = (k * L + s) * VEC;
            if (c >= HS) continue;
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float d = loom_to_f32(du[k].v[j]), g = __fmul_rn(d, __ldg(w + c + j));
                const float xh = hn_xhat<RMS>(loom_to_f32(xu[k].v[j]), m, r);
                const float u = __fsub_rn(RMS ? g : __fsub_rn(g, a), __fmul_rn(xh, bx));
                du[k].v[j] = loom_from_f32<T>(__fmul_rn(r, u));
                aw[k][j] = __fadd_rn(aw[k][j], __fmul_rn(d, xh));
                ab[k][j] = __fadd_rn(ab[k][j], d);
            }
            hn_store<T, VEC>(p + c, du[k]);
        }
    }
    /* the groups' sums, added in group order */
#pragma unroll
    for (int k = 0; k < KM; k++)
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const int c = (k * L + s) * VEC + j;
            if (c < HS) {
                sh[(grp * 2) * HS + c] = aw[k][j];
                sh[(grp * 2 + 1) * HS + c] = ab[k][j];
            }
        }
    __syncthreads();
    for (int t = (int)threadIdx.x; t < 2 * HS; t += HN_THREADS) {
        double acc = 0.0;
        for (int q = 0; q < groups; q++)
            acc += (double)sh[q * 2 * HS + t];
        partial[2 * (int64_t)blockIdx.x * HS + t] = acc;
    }
}

/* out[c] += the sum over blocks k in [k0, k1) of partial[(2 k + j) HS + c], for blockIdx.y
 * = 0: dwq (j 0) and dbq (j 1) over the query blocks [0, Gq), 1: dwk, dbk over the key blocks
 * [Gq, G); a NULL one skipped. Block (32, 16): thread (tx, ty) adds k = k0 + ty, + 16, ... in
 * double, then the 16 sums are added in ty order. */
__global__ void head_norm_fold_kernel(float *dwq, float *dbq, float *dwk, float *dbk,
                                      const double *partial, int64_t Gq, int64_t G, int HS) {
    __shared__ double sh[16][33];
    const int y = (int)blockIdx.y, j = y & 1;
    float *out = y == 0 ? dwq : y == 1 ? dbq : y == 2 ? dwk : dbk;
    if (!out) return;
    const int64_t k0 = y < 2 ? 0 : Gq, k1 = y < 2 ? Gq : G;
    const int tx = threadIdx.x, ty = threadIdx.y, c = (int)blockIdx.x * 32 + tx;
    double acc = 0.0;
    if (c < HS)
        for (int64_t k = k0 + ty; k < k1; k += 16)
            acc += partial[(2 * k + j) * HS + c];
    sh[ty][tx] = acc;
    __syncthreads();
    if (ty != 0 || c >= HS) return;
    for (int i = 1; i < 16; i++)
        acc += sh[i][tx];
    out[c] += (float)acc;
}

/* ---- host side ---- */

/* The lanes of a group (L) and the values a chunk (vec) for vectors of HS values of T at the
 * pointers p, q */
template <typename T>
static void hn_shape(int64_t HS, const void *p, const void *q, int *L, int *vec) {
    const int v16 = 16 / (int)sizeof(T);
    *vec = HS % v16 == 0 && loom_aligned(16, (const char *)p, (const char *)q) ? v16 : 1;
    const int64_t chunks = (HS + *vec - 1) / *vec;
    int l = 1;
    while (l < chunks && l < 32)
        l <<= 1;
    *L = l;
}

/* Aborts unless the type, the head counts and the head size fit the kernels. */
static void hn_check(enum loom_dtype dt, int64_t NH, int64_t NKV, int64_t HS, const char *op) {
    if (dt != LOOM_DTYPE_F32 && dt != LOOM_DTYPE_BF16)
        loom_abort(__FILE__, __LINE__, "cuda %s: element type %s is not supported (f32, bf16)", op,
                   loom_dtype_name(dt));
    if (NKV < 1 || NH % NKV != 0)
        loom_abort(__FILE__, __LINE__, "cuda %s: %lld query heads in %lld groups", op,
                   (long long)NH, (long long)NKV);
    if (HS < 1 || HS > HN_MAX_HS)
        loom_abort(__FILE__, __LINE__, "cuda %s: head size %lld (1 to %d)", op, (long long)HS,
                   HN_MAX_HS);
}

template <typename T, bool RMS>
static void hn_forward(struct loom_backend *be, T *qkv, T *keep, float *mean, float *rstd,
                       const float *wq, const float *bq, const float *wk, const float *bk,
                       int64_t N, int64_t NH, int64_t NKV, int64_t HS, float eps) {
    int L, vec;
    hn_shape<T>(HS, qkv, keep, &L, &vec);
    const int64_t nv = N * (NH + NKV), groups = HN_THREADS / L;
    const int64_t grid = (nv + groups - 1) / groups;
    LOOM_ASSERT(grid <= 0x7fffffffLL);
    cudaStream_t st = loom_cuda_stream(be);
    if (vec > 1)
        head_norm_forward_kernel<T, RMS, (int)(16 / sizeof(T))>
            <<<(unsigned)grid, HN_THREADS, 0, st>>>(qkv, keep, mean, rstd, wq, bq, wk, bk, N, NH,
                                                    NKV, (int)HS, L, eps);
    else
        head_norm_forward_kernel<T, RMS, 1><<<(unsigned)grid, HN_THREADS, 0, st>>>(
            qkv, keep, mean, rstd, wq, bq, wk, bk, N, NH, NKV, (int)HS, L, eps);
    LOOM_CUDA_LAUNCHED();
}

template <typename T, bool RMS>
static void hn_backward(struct loom_backend *be, T *dqkv, float *dwq, float *dbq, float *dwk,
                        float *dbk, const T *keep, const float *mean, const float *rstd,
                        const float *wq, const float *wk, int64_t N, int64_t NH, int64_t NKV,
                        int64_t HS) {
    int L, vec;
    hn_shape<T>(HS, dqkv, keep, &L, &vec);
    const int64_t vpb = (int64_t)(HN_THREADS / L) * HN_BWD_VECS;
    const int64_t Gq = (N * NH + vpb - 1) / vpb, G = Gq + (N * NKV + vpb - 1) / vpb;
    LOOM_ASSERT(G <= 0x7fffffffLL);
    double *partial = (double *)loom_cuda_scratch(be, (size_t)(2 * G * HS) * sizeof(double));
    cudaStream_t st = loom_cuda_stream(be);
    if (vec > 1)
        head_norm_backward_kernel<T, RMS, (int)(16 / sizeof(T))>
            <<<(unsigned)G, HN_THREADS, 0, st>>>(dqkv, partial, keep, mean, rstd, wq, wk, N, NH,
                                                 NKV, (int)HS, L, Gq);
    else
        head_norm_backward_kernel<T, RMS, 1><<<(unsigned)G, HN_THREADS, 0, st>>>(
            dqkv, partial, keep, mean, rstd, wq, wk, N, NH, NKV, (int)HS, L, Gq);
    LOOM_CUDA_LAUNCHED();
    if (!dwq && !dbq && !dwk && !dbk) return;
    head_norm_fold_kernel<<<dim3((unsigned)((HS + 31) / 32), 4), dim3(32, 16), 0, st>>>(
        dwq, dbq, dwk, dbk, partial, Gq, G, (int)HS);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_head_norm_forward(struct loom_backend *be, int rms, void *qkv, enum loom_dtype dt,
                                 void *keep, float *mean, float *rstd, const float *wq,
                                 const float *bq, const float *wk, const float *bk, int64_t N,
                                 int64_t NH, int64_t NKV, int64_t HS, float eps) {
    hn_check(dt, NH, NKV, HS, "head_norm_forward");
    if (N <= 0) return;
    if (dt == LOOM_DTYPE_BF16) {
        if (rms)
            hn_forward<bf16, true>(be, (bf16 *)qkv, (bf16 *)keep, mean, rstd, wq, NULL, wk, NULL, N,
                                   NH, NKV, HS, eps);
        else
            hn_forward<bf16, false>(be, (bf16 *)qkv, (bf16 *)keep, mean, rstd, wq, bq, wk, bk, N,
                                    NH, NKV, HS, eps);
    } else {
        if (rms)
            hn_forward<float, true>(be, (float *)qkv, (float *)keep, mean, rstd, wq, NULL, wk, NULL,
                                    N, NH, NKV, HS, eps);
        else
            hn_forward<float, false>(be, (float *)qkv, (float *)keep, mean, rstd, wq, bq, wk, bk, N,
                                     NH, NKV, HS, eps);
    }
}

void loom_cuda_head_norm_backward(struct loom_backend *be, int rms, void *dqkv, enum loom_dtype dt,
                                  float *dwq, float *dbq, float *dwk, float *dbk, const void *keep,
                                  const float *mean, const float *rstd, const float *wq,
                                  const float *wk, int64_t N, int64_t NH, int64_t NKV, int64_t HS) {
    hn_check(dt, NH, NKV, HS, "head_norm_backward");
    if (N <= 0) return;
    if (rms) dbq = dbk = NULL;
    if (dt == LOOM_DTYPE_BF16) {
        if (rms)
            hn_backward<bf16, true>(be, (bf16 *)dqkv, dwq, dbq, dwk, dbk, (const bf16 *)keep, mean,
                                    rstd, wq, wk, N, NH, NKV, HS);
        else
            hn_backward<bf16, false>(be, (bf16 *)dqkv, dwq, dbq, dwk, dbk, (const bf16 *)keep, mean,
                                     rstd, wq, wk, N, NH, NKV, HS);
    } else {
        if (rms)
            hn_backward<float, true>(be, (float *)dqkv, dwq, dbq, dwk, dbk, (const float *)keep,
                                     mean, rstd, wq, wk, N, NH, NKV, HS);
        else
            hn_backward<float, false>(be, (float *)dqkv, dwq, dbq, dwk, dbk, (const float *)keep,
                                      mean, rstd, wq, wk, N, NH, NKV, HS);
    }
}
