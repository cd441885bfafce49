/* Attention (fp32, flash-style) and rotary embeddings, and the choice of attention kernel:
 * bf16 arrays without grouped heads or dropout go to cuDNN's fused attention where it is built in
 * and has a plan (attention_cudnn.cu); otherwise, with 16-bit matrix products (bf16, or fp16 under
 * --fp16), head size 64 or 128 and no attention dropout, attention_bf16.cu's tensor-core kernels
 * run, in the products' 16-bit type (their backward makes Dv in its own conversion pass); the
 * fp32 kernels here take the rest.
 *
 * qkv[B,T,(NH+2*NKV)*HS]: a row holds NKV groups, each [G = NH/NKV query heads | k | v] of HS.
 * out[B,T,NH*HS], lse[B,NH,T]. Query head h reads the k/v head of its group, h / G.
 *
 *   S = scale * q k^T (+ causal mask j <= i, with a document mask j >= doc_start[b,i], with key
 *       ends j < key_end[b,i]),
 *   P = softmax(S) = exp(S - lse)   (a row that sees no key: out 0, lse -inf, P 0),
 *   Pd = P * keep / (1 - p),  out = Pd v
 * Dropout element (b, h, i, j) is kept when loom_rng_keep(seed, key,
 *   (((sample0 + b) * NH_global + head0 + h) * T + i) * T + j, p); lse is of the undropped S.
 * Backward (Dv_i = dout_i . out_i, which equals sum_j P_ij dP_ij also with dropout):
 *   dPd = dout v^T,  dP = dPd * keep / (1 - p),  dS = P * (dP - Dv),
 *   dq = scale dS k,  dk = scale dS^T q,  dv = Pd^T dout
 *
 * Forward: one block per (32 query rows, head, sample) streams 32-key tiles with an online
 * softmax and saves lse. Backward recomputes P from lse in two kernels, so no gradient needs
 * atomics: one per (32-key tile, kv head, sample) accumulates dk and dv over the G query heads
 * of its group and all query tiles; one per (32 query rows, head, sample) accumulates dq.
 * Document mask: document starts do not decrease along a sample, so a query tile's first row
 * has its earliest: the key loops start at the tile holding it, the query loop of dk/dv stops at
 * the first query tile whose first row starts after the key tile, and the tiles in between mask
 * element by element. Key ends (loom_attn.key_end) do not decrease either, so a query tile's last
 * row has its latest: the key loops stop there, the query loop of dk/dv skips the query tiles
 * whose last row ends before the key tile (padded keys cost no products), and the tiles that
 * cross an end mask element by element. Neither mask needs the causal one.
 * 128 threads: thread (r = tid/4, s = tid%4) owns row r of the tile and the float4 columns
 * s, s+4, s+8, ... of the head dimension, padded to D (a template constant, 16..256).
 */
#include <cuda_bf16.h>
#include <math.h>

#include "backend/cuda/common.cuh"

#define AT_TILE 32
#define AT_THREADS 128
#define AT_PLD (AT_TILE + 1) /* row stride of the 32x32 probability tiles */

/* Column offsets in a qkv row. */
__device__ __forceinline__ int64_t at_q_col(int64_t h, int64_t G, int64_t HS) {
    return ((h / G) * (G + 2) + h % G) * HS;
}
__device__ __forceinline__ int64_t at_k_col(int64_t kvh, int64_t G, int64_t HS) {
    return (kvh * (G + 2) + G) * HS;
}

/* dst[32][D+4] = rows row0.. of src (row stride `stride`, columns col..col+HS), zero padded. */
template <int D>
__device__ __forceinline__ void at_load_tile(float *dst, const float *src, int64_t row0, int64_t T,
                                             int64_t stride, int64_t col, int64_t HS) {
    const int LD = D + 4;
    for (int e = threadIdx.x; e < AT_TILE * D; e += AT_THREADS) {
        int r = e / D, c = e % D;
        int64_t row = row0 + r;
        dst[r * LD + c] = (row < T && c < HS) ? src[row * stride + col + c] : 0.0f;
    }
}

__device__ __forceinline__ float4 at_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float at_dot4(float4 a, float4 b) {
    return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}
__device__ __forceinline__ void at_fma4(float4 &acc, float w, float4 v) {
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
}

__device__ __forceinline__ uint64_t at_drop_index(const struct loom_attn &a, int64_t b, int64_t h,
                                                  int64_t i, int64_t j) {
    return (uint64_t)((((a.sample0 + b) * a.NH_global + a.head0 + h) * a.T + i) * a.T + j);
}

template <int D>
static size_t at_fwd_smem() {
    return (size_t)(3 * AT_TILE * (D + 4) + AT_TILE * AT_PLD) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(AT_THREADS)
    attention_forward_kernel(float *out, float *lse, const float *qkv, struct loom_attn a) {
    constexpr int LD = D + 4, NC = D / 16;
    extern __shared__ float4 at_smem4[];
    float *Qs = (float *)at_smem4, *Ks = Qs + AT_TILE * LD, *Vs = Ks + AT_TILE * LD,
          *Ps = Vs + AT_TILE * LD;
    const int64_t T = a.T, HS = a.HS, G = a.NH / a.NKV, stride = (a.NH + 2 * a.NKV) * a.HS;
    const int64_t h = blockIdx.y, b = blockIdx.z, i0 = (int64_t)blockIdx.x * AT_TILE;
    const int r = threadIdx.x >> 2, s = threadIdx.x & 3;
    const int64_t i = i0 + r;
    const int64_t qc = at_q_col(h, G, HS), kc = at_k_col(h / G, G, HS), vc = kc + HS;
    const float *base = qkv + b * T * stride;
    const bool drop = a.dropout_p > 0.0f;
    const float inv_keep = drop ? 1.0f / (1.0f - a.dropout_p) : 1.0f;
    /* document mask: row i sees keys from di on; the block's keys start at its first row's */
    const int32_t *doc = a.doc_start ? a.doc_start + b * T : NULL;
    const int64_t di = doc && i < T ? doc[i] : 0;
    const int64_t kbeg = doc ? doc[i0] / AT_TILE * AT_TILE : 0;
    /* key ends: row i sees keys before ei; the block's keys end at its last row's */
    const int32_t *kend_b = a.key_end ? a.key_end + b * T : NULL;
    const int64_t ei = kend_b && i < T ? kend_b[i] : T;

    at_load_tile<D>(Qs, base, i0, T, stride, qc, HS);
    float m = -INFINITY, l = 0.0f;
    float4 acc[NC];
#pragma unroll
    for (int k = 0; k < NC; k++) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);

    int64_t kend = a.causal ? (i0 + AT_TILE < T ? i0 + AT_TILE : T) : T;
    if (kend_b && kend_b[(i0 + AT_TILE < T ? i0 + AT_TILE : T) - 1] < kend)
        kend = kend_b[(i0 + AT_TILE < T ? i0 + AT_TILE : T) - 1];
    for (int64_t k0 = kbeg; k0 < kend; k0 += AT_TILE) {
        __syncthreads();
        at_load_tile<D>(Ks, base, k0, T, stride, kc, HS);
        at_load_tile<D>(Vs, base, k0, T, stride, vc, HS);
        __syncthreads();
        float sc[8];
#pragma unroll
        for (int jj = 0; jj < 8; jj++) sc[jj] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            float4 q = at_ld4(Qs + r * LD + d);
#pragma unroll
            for (int jj = 0; jj < 8; jj++) sc[jj] += at_dot4(q, at_ld4(Ks + (s + 4 * jj) * LD + d));
        }
        float mt = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            int64_t j = k0 + s + 4 * jj;
            bool valid = i < T && j < T && (!a.causal || j <= i) && j >= di && j < ei;
            sc[jj] = valid ? sc[jj] * a.scale : -INFINITY;
            mt = fmaxf(mt, sc[jj]);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        float mnew = fmaxf(m, mt);
        float ref = mnew == -INFINITY ? 0.0f : mnew;
        float alpha = expf(m - ref);
        float ps = 0.0f;
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            float p = expf(sc[jj] - ref);
            ps += p;
            if (drop && p != 0.0f)
                p = loom_rng_keep(a.seed, a.key, at_drop_index(a, b, h, i, k0 + s + 4 * jj),
                                  a.dropout_p)
                        ? p * inv_keep
                        : 0.0f;
            Ps[r * AT_PLD + s + 4 * jj] = p;
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        ps += __shfl_xor_sync(0xffffffffu, ps, 2);
        l = l * alpha + ps;
        m = mnew;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            acc[k].x *= alpha;
            acc[k].y *= alpha;
            acc[k].z *= alpha;
            acc[k].w *= alpha;
        }
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < AT_TILE; j++) {
            float p = Ps[r * AT_PLD + j];
#pragma unroll
            for (int k = 0; k < NC; k++) at_fma4(acc[k], p, at_ld4(Vs + j * LD + 4 * (s + 4 * k)));
        }
    }
    if (i < T) {
        /* a row that sees no key (l == 0): out 0, lse -inf */
        const bool seen = l > 0.0f;
        float *o = out + (b * T + i) * a.NH * HS + h * HS;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            int d = 4 * (s + 4 * k);
            float v[4] = {seen ? acc[k].x / l : 0.0f, seen ? acc[k].y / l : 0.0f,
                          seen ? acc[k].z / l : 0.0f, seen ? acc[k].w / l : 0.0f};
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (d + e < HS) o[d + e] = v[e];
        }
        if (s == 0) lse[(b * a.NH + h) * T + i] = seen ? m + logf(l) : -INFINITY;
    }
}

/* Dv[b, h, i] = dout[b, i, h, :] . out[b, i, h, :]; one warp per (b, i, h). */
__global__ void attention_dot_kernel(float *Dv, const float *dout, const float *out, int64_t B,
                                     int64_t T, int64_t NH, int64_t HS) {
    int64_t w = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (w >= B * T * NH) return;
    int64_t h = w % NH, bt = w / NH;
    int64_t b = bt / T, t = bt % T;
    const float *x = dout + w * HS, *y = out + w * HS;
    float acc = 0.0f;
    for (int64_t d = lane; d < HS; d += 32) acc += x[d] * y[d];
    acc = loom_warp_sum(acc);
    if (lane == 0) Dv[(b * NH + h) * T + t] = acc;
}

template <int D>
static size_t at_dkdv_smem() {
    return (size_t)(4 * AT_TILE * (D + 4) + 2 * AT_TILE * AT_PLD + 4 * AT_TILE) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(AT_THREADS)
    attention_backward_dkdv_kernel(float *dqkv, const float *dout, const float *lse,
                                   const float *Dv, const float *qkv, struct loom_attn a) {
    constexpr int LD = D + 4, NC = D / 16;
    extern __shared__ float4 at_smem4[];
    float *Ks = (float *)at_smem4, *Vs = Ks + AT_TILE * LD, *Qs = Vs + AT_TILE * LD,
          *dOs = Qs + AT_TILE * LD, *Ps = dOs + AT_TILE * LD, *dSs = Ps + AT_TILE * AT_PLD,
          *ls = dSs + AT_TILE * AT_PLD, *ds = ls + AT_TILE;
    int *dq0 = (int *)(ds + AT_TILE); /* the query tile's document starts */
    int *de0 = dq0 + AT_TILE;         /* and key ends */
    const int64_t T = a.T, HS = a.HS, NH = a.NH, G = a.NH / a.NKV;
    const int64_t stride = (a.NH + 2 * a.NKV) * a.HS, ostride = a.NH * a.HS;
    const int64_t kvh = blockIdx.y, b = blockIdx.z, k0 = (int64_t)blockIdx.x * AT_TILE;
    const int c = threadIdx.x >> 2, s = threadIdx.x & 3;
    const int64_t j = k0 + c;
    const int64_t kc = at_k_col(kvh, G, HS), vc = kc + HS;
    const float *base = qkv + b * T * stride;
    const float *obase = dout + b * T * ostride;
    const bool drop = a.dropout_p > 0.0f;
    const float inv_keep = drop ? 1.0f / (1.0f - a.dropout_p) : 1.0f;
    const int32_t *doc = a.doc_start ? a.doc_start + b * T : NULL;
    const int32_t *kend_b = a.key_end ? a.key_end + b * T : NULL;
    const int64_t klast = (k0 + AT_TILE < T ? k0 + AT_TILE : T) - 1; /* the tile's last key */

    at_load_tile<D>(Ks, base, k0, T, stride, kc, HS);
    at_load_tile<D>(Vs, base, k0, T, stride, vc, HS);
    float4 dk[NC], dv[NC];
#pragma unroll
    for (int k = 0; k < NC; k++) {
        dk[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        dv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int64_t g = 0; g < G; g++) {
        const int64_t h = kvh * G + g, qc = at_q_col(h, G, HS);
        for (int64_t i0 = a.causal ? k0 : 0; i0 < T; i0 += AT_TILE) {
            /* every query from here on belongs to a document that starts after this key tile */
            if (doc && doc[i0] > klast) break;
            /* every query of the tile ends before this key tile (the last one ends latest) */
            if (kend_b && kend_b[(i0 + AT_TILE < T ? i0 + AT_TILE : T) - 1] <= k0) continue;
            __syncthreads();
            at_load_tile<D>(Qs, base, i0, T, stride, qc, HS);
            at_load_tile<D>(dOs, obase, i0, T, ostride, h * HS, HS);
            if (threadIdx.x < AT_TILE) {
                int64_t iq = i0 + threadIdx.x;
                ls[threadIdx.x] = iq < T ? lse[(b * NH + h) * T + iq] : 0.0f;
                ds[threadIdx.x] = iq < T ? Dv[(b * NH + h) * T + iq] : 0.0f;
                dq0[threadIdx.x] = doc && iq < T ? doc[iq] : 0;
                de0[threadIdx.x] = !kend_b ? (int)T : iq < T ? kend_b[iq] : 0;
            }
            __syncthreads();
            float sc[8], dp[8];
#pragma unroll
            for (int ii = 0; ii < 8; ii++) sc[ii] = dp[ii] = 0.0f;
#pragma unroll 2
            for (int d = 0; d < D; d += 4) {
                float4 kd = at_ld4(Ks + c * LD + d), vd = at_ld4(Vs + c * LD + d);
#pragma unroll
                for (int ii = 0; ii < 8; ii++) {
                    sc[ii] += at_dot4(at_ld4(Qs + (s + 4 * ii) * LD + d), kd);
                    dp[ii] += at_dot4(at_ld4(dOs + (s + 4 * ii) * LD + d), vd);
                }
            }
#pragma unroll
            for (int ii = 0; ii < 8; ii++) {
                int q = s + 4 * ii;
                int64_t iq = i0 + q;
                bool valid = iq < T && j < T && (!a.causal || j <= iq) && j >= dq0[q] && j < de0[q];
                float p = 0.0f, pd = 0.0f, dS = 0.0f;
                if (valid) {
                    p = expf(sc[ii] * a.scale - ls[q]);
                    float dpp = dp[ii];
                    pd = p;
                    if (drop) {
                        bool keep = loom_rng_keep(a.seed, a.key, at_drop_index(a, b, h, iq, j),
                                                  a.dropout_p);
                        pd = keep ? p * inv_keep : 0.0f;
                        dpp = keep ? dpp * inv_keep : 0.0f;
                    }
                    dS = p * (dpp - ds[q]);
                }
                Ps[c * AT_PLD + q] = pd;
                dSs[c * AT_PLD + q] = dS;
            }
            __syncthreads();
#pragma unroll 4
            for (int q = 0; q < AT_TILE; q++) {
                float pq = Ps[c * AT_PLD + q], sq = dSs[c * AT_PLD + q];
#pragma unroll
                for (int k = 0; k < NC; k++) {
                    int d = 4 * (s + 4 * k);
                    at_fma4(dv[k], pq, at_ld4(dOs + q * LD + d));
                    at_fma4(dk[k], sq, at_ld4(Qs + q * LD + d));
                }
            }
        }
    }
    if (j < T) {
        float *row = dqkv + (b * T + j) * stride;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            int d = 4 * (s + 4 * k);
            float kv[4] = {dk[k].x, dk[k].y, dk[k].z, dk[k].w};
            float vv[4] = {dv[k].x, dv[k].y, dv[k].z, dv[k].w};
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (d + e < HS) {
                    row[kc + d + e] = kv[e] * a.scale;
                    row[vc + d + e] = vv[e];
                }
        }
    }
}

template <int D>
static size_t at_dq_smem() {
    return (size_t)(4 * AT_TILE * (D + 4) + AT_TILE * AT_PLD) * sizeof(float);
}

template <int D>
__global__ void __launch_bounds__(AT_THREADS)
    attention_backward_dq_kernel(float *dqkv, const float *dout, const float *lse,
                                 const float *Dv, const float *qkv, struct loom_attn a) {
    constexpr int LD = D + 4, NC = D / 16;
    extern __shared__ float4 at_smem4[];
    float *Qs = (float *)at_smem4, *dOs = Qs + AT_TILE * LD, *Ks = dOs + AT_TILE * LD,
          *Vs = Ks + AT_TILE * LD, *dSs = Vs + AT_TILE * LD;
    const int64_t T = a.T, HS = a.HS, NH = a.NH, G = a.NH / a.NKV;
    const int64_t stride = (a.NH + 2 * a.NKV) * a.HS, ostride = a.NH * a.HS;
    const int64_t h = blockIdx.y, b = blockIdx.z, i0 = (int64_t)blockIdx.x * AT_TILE;
    const int r = threadIdx.x >> 2, s = threadIdx.x & 3;
    const int64_t i = i0 + r;
    const int64_t qc = at_q_col(h, G, HS), kc = at_k_col(h / G, G, HS), vc = kc + HS;
    const float *base = qkv + b * T * stride;
    const bool drop = a.dropout_p > 0.0f;
    const float inv_keep = drop ? 1.0f / (1.0f - a.dropout_p) : 1.0f;

    at_load_tile<D>(Qs, base, i0, T, stride, qc, HS);
    at_load_tile<D>(dOs, dout + b * T * ostride, i0, T, ostride, h * HS, HS);
    const float lr = i < T ? lse[(b * NH + h) * T + i] : 0.0f;
    const float dr = i < T ? Dv[(b * NH + h) * T + i] : 0.0f;
    /* document mask, as in the forward */
    const int32_t *doc = a.doc_start ? a.doc_start + b * T : NULL;
    const int64_t di = doc && i < T ? doc[i] : 0;
    const int64_t kbeg = doc ? doc[i0] / AT_TILE * AT_TILE : 0;
    const int32_t *kend_b = a.key_end ? a.key_end + b * T : NULL;
    const int64_t ei = kend_b && i < T ? kend_b[i] : T;
    float4 dq[NC];
#pragma unroll
    for (int k = 0; k < NC; k++) dq[k] = make_float4(0.f, 0.f, 0.f, 0.f);

    int64_t kend = a.causal ? (i0 + AT_TILE < T ? i0 + AT_TILE : T) : T;
    if (kend_b && kend_b[(i0 + AT_TILE < T ? i0 + AT_TILE : T) - 1] < kend)
        kend = kend_b[(i0 + AT_TILE < T ? i0 + AT_TILE : T) - 1];
    for (int64_t k0 = kbeg; k0 < kend; k0 += AT_TILE) {
        __syncthreads();
        at_load_tile<D>(Ks, base, k0, T, stride, kc, HS);
        at_load_tile<D>(Vs, base, k0, T, stride, vc, HS);
        __syncthreads();
        float sc[8], dp[8];
#pragma unroll
        for (int jj = 0; jj < 8; jj++) sc[jj] = dp[jj] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < D; d += 4) {
            float4 q = at_ld4(Qs + r * LD + d), o = at_ld4(dOs + r * LD + d);
#pragma unroll
            for (int jj = 0; jj < 8; jj++) {
                sc[jj] += at_dot4(q, at_ld4(Ks + (s + 4 * jj) * LD + d));
                dp[jj] += at_dot4(o, at_ld4(Vs + (s + 4 * jj) * LD + d));
            }
        }
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            int64_t j = k0 + s + 4 * jj;
            bool valid = i < T && j < T && (!a.causal || j <= i) && j >= di && j < ei;
            float dS = 0.0f;
            if (valid) {
                float p = expf(sc[jj] * a.scale - lr);
                float dpp = dp[jj];
                if (drop)
                    dpp = loom_rng_keep(a.seed, a.key, at_drop_index(a, b, h, i, j), a.dropout_p)
                              ? dpp * inv_keep
                              : 0.0f;
                dS = p * (dpp - dr);
            }
            dSs[r * AT_PLD + s + 4 * jj] = dS;
        }
        __syncthreads();
#pragma unroll 4
        for (int jt = 0; jt < AT_TILE; jt++) {
            float w = dSs[r * AT_PLD + jt];
#pragma unroll
            for (int k = 0; k < NC; k++) at_fma4(dq[k], w, at_ld4(Ks + jt * LD + 4 * (s + 4 * k)));
        }
    }
    if (i < T) {
        float *row = dqkv + (b * T + i) * stride + qc;
#pragma unroll
        for (int k = 0; k < NC; k++) {
            int d = 4 * (s + 4 * k);
            float v[4] = {dq[k].x, dq[k].y, dq[k].z, dq[k].w};
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (d + e < HS) row[d + e] = v[e] * a.scale;
        }
    }
}

/* ---- dispatch on the padded head size ---- */

template <int D>
static void at_forward(struct loom_backend *be, float *out, float *lse, const float *qkv,
                       const struct loom_attn *a) {
    size_t smem = at_fwd_smem<D>();
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((a->T + AT_TILE - 1) / AT_TILE), (unsigned)a->NH, (unsigned)a->B);
    attention_forward_kernel<D><<<grid, AT_THREADS, smem, loom_cuda_stream(be)>>>(out, lse, qkv,
                                                                                 *a);
    LOOM_CUDA_LAUNCHED();
}

template <int D>
static void at_backward(struct loom_backend *be, float *dqkv, const float *dout, const float *lse,
                        const float *Dv, const float *qkv, const struct loom_attn *a) {
    cudaStream_t st = loom_cuda_stream(be);
    unsigned tiles = (unsigned)((a->T + AT_TILE - 1) / AT_TILE);
    size_t smem = at_dkdv_smem<D>();
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dkdv_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_backward_dkdv_kernel<D><<<dim3(tiles, (unsigned)a->NKV, (unsigned)a->B), AT_THREADS,
                                        smem, st>>>(dqkv, dout, lse, Dv, qkv, *a);
    LOOM_CUDA_LAUNCHED();
    smem = at_dq_smem<D>();
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(attention_backward_dq_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_backward_dq_kernel<D><<<dim3(tiles, (unsigned)a->NH, (unsigned)a->B), AT_THREADS,
                                      smem, st>>>(dqkv, dout, lse, Dv, qkv, *a);
    LOOM_CUDA_LAUNCHED();
}

static void at_check(const struct loom_attn *a) {
    LOOM_ASSERT(a->NKV > 0 && a->NH % a->NKV == 0);
    LOOM_ASSERT(a->HS > 0 && a->HS <= 256);
    LOOM_ASSERT(a->NH <= 65535 && a->B <= 65535 && a->NKV <= 65535);
    LOOM_ASSERT(a->dropout_p >= 0.0f && a->dropout_p < 1.0f);
}

static void at_forward_f32(struct loom_backend *be, float *out, float *lse, const float *qkv,
                           const struct loom_attn *a) {
    if (a->HS <= 16)
        at_forward<16>(be, out, lse, qkv, a);
    else if (a->HS <= 32)
        at_forward<32>(be, out, lse, qkv, a);
    else if (a->HS <= 64)
        at_forward<64>(be, out, lse, qkv, a);
    else if (a->HS <= 128)
        at_forward<128>(be, out, lse, qkv, a);
    else
        at_forward<256>(be, out, lse, qkv, a);
}

static void at_backward_f32(struct loom_backend *be, float *dqkv, const float *dout,
                            const float *out, const float *lse, const float *qkv,
                            const struct loom_attn *a) {
    int64_t rows = a->B * a->T * a->NH;
    float *Dv = (float *)loom_cuda_scratch(be, (size_t)rows * sizeof(float));
    attention_dot_kernel<<<(unsigned)((rows + 3) / 4), 128, 0, loom_cuda_stream(be)>>>(
        Dv, dout, out, a->B, a->T, a->NH, a->HS);
    LOOM_CUDA_LAUNCHED();
    if (a->HS <= 16)
        at_backward<16>(be, dqkv, dout, lse, Dv, qkv, a);
    else if (a->HS <= 32)
        at_backward<32>(be, dqkv, dout, lse, Dv, qkv, a);
    else if (a->HS <= 64)
        at_backward<64>(be, dqkv, dout, lse, Dv, qkv, a);
    else if (a->HS <= 128)
        at_backward<128>(be, dqkv, dout, lse, Dv, qkv, a);
    else
        at_backward<256>(be, dqkv, dout, lse, Dv, qkv, a);
}

/* bf16 -> fp32 copies for typed arrays that take the fp32 kernels (loom_cuda_to16 goes back) */
__global__ void at_widen_kernel(float *dst, const __nv_bfloat16 *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}
static void at_widen(struct loom_backend *be, float *dst, const void *src, int64_t n) {
    at_widen_kernel<<<loom_cuda_grid(n, 256), 256, 0, loom_cuda_stream(be)>>>(
        dst, (const __nv_bfloat16 *)src, n);
    LOOM_CUDA_LAUNCHED();
}

/* Masked problems (loom_attn.doc_start, key_end) never go to cuDNN (it is given no such mask:
 * loom_cuda_attention_cudnn_ok). Typed arrays on a problem the tensor-core kernels do not take
 * (head size other than 64 or 128, attention dropout) go through fp32 copies in the attention
 * workspace and the fp32 kernels: the results are those of the fp32 op on the stored values,
 * rounded at the end. */
void loom_cuda_attention_forward(struct loom_backend *be, void *out, float *lse, const void *qkv,
                                 const struct loom_attn *a) {
    if (a->B <= 0 || a->T <= 0 || a->NH <= 0) return;
    at_check(a);
    const int typed = loom_cuda_typed16(be, a->dt, "attention_forward");
    if (loom_cuda_attention_cudnn_ok(be, a) &&
        loom_cuda_attention_forward_cudnn(be, out, lse, qkv, a))
        return;
    if (loom_cuda_attention_bf16_ok(be, a)) {
        loom_cuda_attention_forward_bf16(be, out, lse, qkv, a);
        return;
    }
    if (!typed) {
        at_forward_f32(be, (float *)out, lse, (const float *)qkv, a);
        return;
    }
    struct loom_cuda *c = loom_cuda_impl(be);
    const int64_t nqkv = a->B * a->T * (a->NH + 2 * a->NKV) * a->HS, nout = a->B * a->T * a->NH * a->HS;
    loom_cuda_grow(be, &c->attn_ws, &c->attn_ws_bytes, (size_t)(nqkv + nout) * sizeof(float),
                   "attention workspace");
    float *q32 = (float *)c->attn_ws, *o32 = q32 + nqkv;
    at_widen(be, q32, qkv, nqkv);
    at_forward_f32(be, o32, lse, q32, a);
    loom_cuda_to16(be, out, o32, nout);
}

void loom_cuda_attention_backward(struct loom_backend *be, void *dqkv, const void *dout,
                                  const void *out, const float *lse, const void *qkv,
                                  const struct loom_attn *a) {
    if (a->B <= 0 || a->T <= 0 || a->NH <= 0) return;
    at_check(a);
    const int typed = loom_cuda_typed16(be, a->dt, "attention_backward");
    if (loom_cuda_attention_cudnn_ok(be, a) &&
        loom_cuda_attention_backward_cudnn(be, dqkv, dout, out, lse, qkv, a))
        return;
    if (loom_cuda_attention_bf16_ok(be, a)) {
        loom_cuda_attention_backward_bf16(be, dqkv, dout, out, lse, qkv, a);
        return;
    }
    if (!typed) {
        at_backward_f32(be, (float *)dqkv, (const float *)dout, (const float *)out, lse,
                        (const float *)qkv, a);
        return;
    }
    struct loom_cuda *c = loom_cuda_impl(be);
    const int64_t nqkv = a->B * a->T * (a->NH + 2 * a->NKV) * a->HS, nout = a->B * a->T * a->NH * a->HS;
    loom_cuda_grow(be, &c->attn_ws, &c->attn_ws_bytes,
                   (size_t)(2 * nqkv + 2 * nout) * sizeof(float), "attention workspace");
    float *q32 = (float *)c->attn_ws, *dq32 = q32 + nqkv, *d32 = dq32 + nqkv, *o32 = d32 + nout;
    at_widen(be, q32, qkv, nqkv);
    at_widen(be, d32, dout, nout);
    at_widen(be, o32, out, nout);
    at_backward_f32(be, dq32, d32, o32, lse, q32, a);
    loom_cuda_to16(be, dqkv, dq32, nqkv);
}

/* ---- one query position against a key/value cache (generation) ----
 * q[NH*HS], kcache/vcache [L, NKV, HS]; out[h] = softmax_j(scale q[h] . k[j, h/G]) v[j, h/G].
 * One block per head: scores into scratch, max, exp and sum (in double), then one thread per
 * output column adds p_j v[j] in j order. */
#define AT_DEC_THREADS 256

__global__ void attention_decode_kernel(float *out, float *scores, const float *q,
                                        const float *kcache, const float *vcache, int64_t L,
                                        int64_t NH, int64_t NKV, int64_t HS, float scale) {
    __shared__ double shd[32];
    __shared__ float shf[32];
    const int64_t h = blockIdx.x, g = h / (NH / NKV);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float *qh = q + h * HS;
    float *s = scores + h * L;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        const float *k = kcache + (j * NKV + g) * HS;
        float dot = 0.0f;
        for (int64_t d = 0; d < HS; d++) dot += qh[d] * k[d];
        s[j] = dot * scale;
        mx = fmaxf(mx, s[j]);
    }
    mx = loom_warp_max(mx);
    if (lane == 0) shf[warp] = mx;
    __syncthreads();
    mx = loom_warp_max(lane < nw ? shf[lane] : -INFINITY);
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        float e = expf(s[j] - mx);
        s[j] = e;
        sum += (double)e;
    }
    sum = loom_warp_sum_d(sum);
    if (lane == 0) shd[warp] = sum;
    __syncthreads();
    sum = loom_warp_sum_d(lane < nw ? shd[lane] : 0.0);
    for (int64_t d = threadIdx.x; d < HS; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < L; j++)
            acc += (float)((double)s[j] / sum) * vcache[(j * NKV + g) * HS + d];
        out[h * HS + d] = acc;
    }
}

void loom_cuda_attention_decode(struct loom_backend *be, float *out, const float *q,
                                const float *kcache, const float *vcache, int64_t L, int64_t NH,
                                int64_t NKV, int64_t HS, float scale) {
    if (NH <= 0 || HS <= 0) return;
    LOOM_ASSERT(NKV > 0 && NH % NKV == 0 && L > 0);
    float *scores = (float *)loom_cuda_scratch(be, (size_t)(NH * L) * sizeof(float));
    attention_decode_kernel<<<(unsigned)NH, AT_DEC_THREADS, 0, loom_cuda_stream(be)>>>(
        out, scores, q, kcache, vcache, L, NH, NKV, HS, scale);
    LOOM_CUDA_LAUNCHED();
}

/* ---- rotary embeddings ----
 * Pairs (i, i + D/2) of the first D = loom_rope_dims values of every q and k head of token (b, t)
 * at position pos0 + p, p = pos[b,t] (per-token positions, 0 <= p < T) or t, rotate by angle =
 * (pos0 + p) f_i, f_i = loom_rope_freq (loom/rope.h): (x1, x2) -> (x1 cos - x2 sin, x1 sin +
 * x2 cos); inverse rotates by -angle. The angles and their sines and cosines are computed in
 * double, once a call, into a table of T x D/2 (cos, sin) pairs rounded to fp32 for the positions
 * pos0 .. pos0 + T - 1 (rope_table_kernel); the rotation reads row p of it. qkv is fp32 or bf16
 * (the rotation in fp32, each result rounded once). */
__global__ void rope_table_kernel(float2 *tab, int64_t T, int64_t HS, int64_t pos0,
                                  struct loom_rope rope, int inverse) {
    const int64_t half = loom_rope_dims(&rope, HS) / 2;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < T * half;
         e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % half, t = e / half;
        const double freq = loom_rope_freq(&rope, HS, i);
        double sd, cd;
        sincos((double)(pos0 + t) * freq, &sd, &cd);
        const float sn = (float)sd;
        tab[e] = make_float2((float)cd, inverse ? -sn : sn);
    }
}

/* V adjacent pairs a thread (16-byte accesses where half = D/2 and HS are multiples of V and qkv
 * aligned, else V = 1): the (NH + NKV) rotated heads' half / V chunks of a row over x, rows over y
 * with a stride of gridDim.y. */
template <typename X, int V>
__global__ void rope_kernel(X *qkv, const float2 *tab, const int32_t *pos, int64_t BT, int64_t T,
                            int64_t NH, int64_t NKV, int64_t HS, int64_t half) {
    typedef loom_vec<X, V> vec;
    const int64_t G = NH / NKV, stride = (NH + 2 * NKV) * HS;
    const int chunks = (int)(half / V), idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int)(NH + NKV) * chunks) return;
    const int hh = idx / chunks, i0 = V * (idx - hh * chunks);
    const int64_t col = hh < NH ? at_q_col(hh, G, HS) : at_k_col(hh - NH, G, HS);
    for (int64_t bt = blockIdx.y; bt < BT; bt += gridDim.y) {
        X *x = qkv + bt * stride + col + i0;
        const float2 *cs = tab + (pos ? (int64_t)pos[bt] : bt % T) * half + i0;
        vec a = *reinterpret_cast<const vec *>(x), b = *reinterpret_cast<const vec *>(x + half);
#pragma unroll
        for (int j = 0; j < V; j++) {
            const float x1 = loom_to_f32(a.v[j]), x2 = loom_to_f32(b.v[j]);
            const float c = cs[j].x, sn = cs[j].y;
            a.v[j] = loom_from_f32<X>(x1 * c - x2 * sn);
            b.v[j] = loom_from_f32<X>(x1 * sn + x2 * c);
        }
        *reinterpret_cast<vec *>(x) = a;
        *reinterpret_cast<vec *>(x + half) = b;
    }
}

template <typename X>
static void rope(struct loom_backend *be, X *qkv, const float2 *tab, const int32_t *pos, int64_t B,
                 int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t half) {
    const int v = 16 / (int)sizeof(X);
    const int wide = half % v == 0 && HS % v == 0 && loom_aligned(16, qkv);
    const int64_t chunks = (NH + NKV) * half / (wide ? v : 1), BT = B * T;
    const dim3 grid((unsigned)((chunks + 255) / 256), (unsigned)(BT < 65535 ? BT : 65535));
    cudaStream_t st = loom_cuda_stream(be);
    if (wide)
        rope_kernel<X, 16 / sizeof(X)>
            <<<grid, 256, 0, st>>>(qkv, tab, pos, BT, T, NH, NKV, HS, half);
    else
        rope_kernel<X, 1><<<grid, 256, 0, st>>>(qkv, tab, pos, BT, T, NH, NKV, HS, half);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_rope(struct loom_backend *be, void *qkv, enum loom_dtype dt, const int32_t *pos,
                    int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                    const struct loom_rope *r, int inverse) {
    const int64_t half = loom_rope_dims(r, HS) / 2;
    if (B <= 0 || T <= 0 || half < 1) return;
    LOOM_ASSERT(NKV > 0 && NH % NKV == 0 && 2 * half == loom_rope_dims(r, HS) && 2 * half <= HS);
    LOOM_ASSERT((NH + NKV) * half <= INT32_MAX);
    const int typed = loom_cuda_typed16(be, dt, "rope");
    float2 *tab = (float2 *)loom_cuda_scratch(be, (size_t)(T * half) * sizeof(float2));
    rope_table_kernel<<<loom_cuda_grid(T * half, 256), 256, 0, loom_cuda_stream(be)>>>(
        tab, T, HS, pos0, *r, inverse);
    LOOM_CUDA_LAUNCHED();
    if (typed)
        rope(be, (__nv_bfloat16 *)qkv, tab, pos, B, T, NH, NKV, HS, half);
    else
        rope(be, (float *)qkv, tab, pos, B, T, NH, NKV, HS, half);
}
