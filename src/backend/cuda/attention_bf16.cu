/* Attention on the tensor cores in bf16 (flash-attention style), used by the attention ops when
 * the backend's matrix products are bf16 (set_matmul_dtype), the head size is 64 and there is
 * no attention dropout; everything else takes the fp32 kernels of attention.cu. Same contract:
 * out and lse (natural log, of the unscaled-by-dropout scores) in fp32, dqkv assigned.
 *
 * Rounding: q, k, v, dout and the probabilities P (for P.V and its gradients) are rounded to
 * bf16; every product accumulates in fp32; softmax statistics, lse and D = rowsum(dout * out)
 * are fp32. Scores use exp2 with log2(e) folded into the scale.
 *
 * Layout: one pass converts the q, k and v heads of qkv[B,T,(NH+2NKV)*64] (Megatron's grouped
 * order) to bf16 head-major [B,heads,T,64] arrays, and dout[B,T,NH*64] likewise, so that tiles
 * are contiguous 64 x 64 blocks. Blocks of 4 warps; a warp owns 16 rows of a 64-row tile and
 * multiplies with mma.sync m16n8k16 (bf16 in, fp32 accumulate). Operands that the mma wants
 * transposed are transposed while a tile is copied into shared memory; rows are padded by 8
 * elements, so the 32-bit fragment loads of a warp hit 32 different banks.
 *
 *   forward: block (64 queries, head, sample) streams 64-key tiles with an online softmax.
 *   backward (FA2, no atomics, so a run repeats bit for bit):
 *     dk/dv: block (64 keys, kv head, sample) over the G query heads of its group and every
 *            query tile: S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - lse), dS^T = P^T (dP^T - D),
 *            dV += P^T dO, dK += dS^T Q;
 *     dq:    block (64 queries, head, sample) over key tiles: dQ += dS K.
 */
#include <cuda_bf16.h>
#include <math.h>

#include "backend/cuda/common.cuh"

#define FA_D 64      /* head size */
#define FA_TILE 64   /* rows of a tile (queries or keys) */
#define FA_LD 72     /* padded row of a tile in shared memory, in bf16 elements */
#define FA_THREADS 128
#define FA_LOG2E 1.4426950408889634f

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* two consecutive bf16 of tile row r at column c (c even) */
__device__ __forceinline__ uint32_t fa_ld(const bf16 *s, int r, int c) {
    return *(const uint32_t *)(s + r * FA_LD + c);
}

/* The A fragments (16 rows from row0, all 64 columns in four 16-wide steps) of a tile. */
__device__ __forceinline__ void fa_afrag(uint32_t f[4][4], const bf16 *s, int row0, int g, int t4) {
#pragma unroll
    for (int st = 0; st < 4; st++) {
        f[st][0] = fa_ld(s, row0 + g, 16 * st + 2 * t4);
        f[st][1] = fa_ld(s, row0 + g + 8, 16 * st + 2 * t4);
        f[st][2] = fa_ld(s, row0 + g, 16 * st + 8 + 2 * t4);
        f[st][3] = fa_ld(s, row0 + g + 8, 16 * st + 8 + 2 * t4);
    }
}

/* acc[8][4] (16 x 64) += A (16 x 64, fragments) . B^T where B is a 64 x 64 tile stored by rows
 * of the output's columns (row n holds the 64 k values of output column n). */
__device__ __forceinline__ void fa_mm_rows(float acc[8][4], const uint32_t a[4][4], const bf16 *b,
                                           int g, int t4) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int st = 0; st < 4; st++)
            fa_mma(acc[j], a[st], fa_ld(b, 8 * j + g, 16 * st + 2 * t4),
                   fa_ld(b, 8 * j + g, 16 * st + 8 + 2 * t4));
}

/* acc (16 x 64) += P (16 x 64 accumulator layout, rounded to bf16) . B^T, B as above. */
__device__ __forceinline__ void fa_mm_acc(float acc[8][4], const float p[8][4], const bf16 *b,
                                          int g, int t4) {
#pragma unroll
    for (int st = 0; st < 4; st++) {
        uint32_t a[4] = {fa_pack(p[2 * st][0], p[2 * st][1]), fa_pack(p[2 * st][2], p[2 * st][3]),
                         fa_pack(p[2 * st + 1][0], p[2 * st + 1][1]),
                         fa_pack(p[2 * st + 1][2], p[2 * st + 1][3])};
#pragma unroll
        for (int j = 0; j < 8; j++)
            fa_mma(acc[j], a, fa_ld(b, 8 * j + g, 16 * st + 2 * t4),
                   fa_ld(b, 8 * j + g, 16 * st + 8 + 2 * t4));
    }
}

/* Copy rows [row0, row0 + 64) of a head-major [T, 64] bf16 array into a tile `dst` (zeros past
 * T; NULL: none) and/or its transpose `tr` (tr[c][r] = src[r][c]; NULL: none). */
__device__ __forceinline__ void fa_load(bf16 *dst, bf16 *tr, const bf16 *src, int64_t row0,
                                        int64_t T) {
    for (int e = threadIdx.x; e < FA_TILE * (FA_D / 8); e += FA_THREADS) {
        int r = e / (FA_D / 8), c8 = e % (FA_D / 8);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < T) v = *(const uint4 *)(src + (row0 + r) * FA_D + c8 * 8);
        if (dst) *(uint4 *)(dst + r * FA_LD + c8 * 8) = v;
        if (tr) {
            const bf16 *x = (const bf16 *)&v;
#pragma unroll
            for (int u = 0; u < 8; u++) tr[(c8 * 8 + u) * FA_LD + r] = x[u];
        }
    }
}

/* ---- layout conversion ---- */

/* qkv[B,T,(NH+2NKV)*64] -> q[B,NH,T,64], k[B,NKV,T,64], v[B,NKV,T,64] in bf16; with NKV = 0 and
 * G = 1 the same maps dout[B,T,NH*64] -> q (every slot a query head). */
__global__ void fa_convert_kernel(bf16 *q, bf16 *k, bf16 *v, const float *src, int64_t B,
                                  int64_t T, int64_t NH, int64_t NKV) {
    const int64_t slots = NKV ? NH + 2 * NKV : NH, G = NKV ? NH / NKV : 1;
    const int64_t total = B * T * slots * (FA_D / 8);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c8 = i % (FA_D / 8), rest = i / (FA_D / 8);
        int64_t slot = rest % slots, bt = rest / slots, b = bt / T, t = bt % T;
        const float4 *s = (const float4 *)(src + (bt * slots + slot) * FA_D + c8 * 8);
        float4 x = s[0], y = s[1];
        uint4 o;
        o.x = fa_pack(x.x, x.y);
        o.y = fa_pack(x.z, x.w);
        o.z = fa_pack(y.x, y.y);
        o.w = fa_pack(y.z, y.w);
        bf16 *dst;
        if (!NKV) {
            dst = q + ((b * NH + slot) * T + t) * FA_D;
        } else {
            int64_t grp = slot / (G + 2), in = slot % (G + 2);
            if (in < G)
                dst = q + ((b * NH + grp * G + in) * T + t) * FA_D;
            else
                dst = (in == G ? k : v) + ((b * NKV + grp) * T + t) * FA_D;
        }
        *(uint4 *)(dst + c8 * 8) = o;
    }
}

/* ---- forward ---- */

__global__ void __launch_bounds__(FA_THREADS)
    fa_forward_kernel(float *out, float *lse, const bf16 *qb, const bf16 *kb, const bf16 *vb,
                      int64_t T, int64_t NH, int64_t NKV, float sl2, int causal) {
    extern __shared__ uint4 fa_smem[];
    bf16 *Qs = (bf16 *)fa_smem, *Ks = Qs + FA_TILE * FA_LD, *Vt = Ks + FA_TILE * FA_LD;
    const int64_t h = blockIdx.y, b = blockIdx.z, i0 = (int64_t)blockIdx.x * FA_TILE;
    const int64_t kvh = h / (NH / NKV);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const bf16 *qh = qb + (b * NH + h) * T * FA_D;
    const bf16 *kh = kb + (b * NKV + kvh) * T * FA_D, *vh = vb + (b * NKV + kvh) * T * FA_D;

    fa_load(Qs, NULL, qh, i0, T);
    __syncthreads();
    uint32_t qf[4][4];
    fa_afrag(qf, Qs, 16 * w, g, t4);
    float o[8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    const int64_t row[2] = {i0 + 16 * w + g, i0 + 16 * w + g + 8};
    const int64_t kend = causal ? (i0 + FA_TILE < T ? i0 + FA_TILE : T) : T;

    for (int64_t k0 = 0; k0 < kend; k0 += FA_TILE) {
        __syncthreads();
        fa_load(Ks, NULL, kh, k0, T);
        fa_load(NULL, Vt, vh, k0, T);
        __syncthreads();
        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
        fa_mm_rows(s, qf, Ks, g, t4);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int hi = e >> 1;
                int64_t key = k0 + 8 * j + 2 * t4 + (e & 1);
                bool ok = key < T && (!causal || key <= row[hi]);
                s[j][e] = ok ? s[j][e] * sl2 : -INFINITY;
                mx[hi] = fmaxf(mx[hi], s[j][e]);
            }
        float alpha[2], ref[2];
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 1));
            mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 2));
            float mn = fmaxf(m[hi], mx[hi]);
            ref[hi] = mn == -INFINITY ? 0.f : mn;
            alpha[hi] = exp2f(m[hi] - ref[hi]);
            m[hi] = mn;
            l[hi] *= alpha[hi];
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int hi = e >> 1;
                float p = exp2f(s[j][e] - ref[hi]);
                s[j][e] = p;
                l[hi] += p;
                o[j][e] *= alpha[hi];
            }
        fa_mm_acc(o, s, Vt, g, t4);
    }
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 1);
        l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 2);
        if (row[hi] >= T) continue;
        float inv = 1.0f / l[hi];
        float *orow = out + ((b * T + row[hi]) * NH + h) * FA_D;
#pragma unroll
        for (int j = 0; j < 8; j++)
            *(float2 *)(orow + 8 * j + 2 * t4) =
                make_float2(o[j][2 * hi] * inv, o[j][2 * hi + 1] * inv);
        if (t4 == 0) lse[(b * NH + h) * T + row[hi]] = (m[hi] + log2f(l[hi])) / FA_LOG2E;
    }
}

/* ---- backward: dk, dv ---- */

__global__ void __launch_bounds__(FA_THREADS)
    fa_backward_dkdv_kernel(float *dqkv, const bf16 *qb, const bf16 *kb, const bf16 *vb,
                            const bf16 *dob, const float *lse, const float *Dv, int64_t T,
                            int64_t NH, int64_t NKV, float sl2, float scale, int causal) {
    extern __shared__ uint4 fa_smem[];
    bf16 *Ks = (bf16 *)fa_smem, *Vs = Ks + FA_TILE * FA_LD, *Qs = Vs + FA_TILE * FA_LD,
         *Qt = Qs + FA_TILE * FA_LD, *dOs = Qt + FA_TILE * FA_LD, *dOt = dOs + FA_TILE * FA_LD;
    float *ls = (float *)(dOt + FA_TILE * FA_LD), *ds = ls + FA_TILE;
    const int64_t kvh = blockIdx.y, b = blockIdx.z, k0 = (int64_t)blockIdx.x * FA_TILE;
    const int64_t G = NH / NKV;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int64_t key[2] = {k0 + 16 * w + g, k0 + 16 * w + g + 8};

    fa_load(Ks, NULL, kb + (b * NKV + kvh) * T * FA_D, k0, T);
    fa_load(Vs, NULL, vb + (b * NKV + kvh) * T * FA_D, k0, T);
    __syncthreads();
    uint32_t kf[4][4], vf[4][4];
    fa_afrag(kf, Ks, 16 * w, g, t4);
    fa_afrag(vf, Vs, 16 * w, g, t4);
    float dk[8][4], dv[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[j][e] = dv[j][e] = 0.f;

    for (int64_t gq = 0; gq < G; gq++) {
        const int64_t h = kvh * G + gq;
        const bf16 *qh = qb + (b * NH + h) * T * FA_D, *doh = dob + (b * NH + h) * T * FA_D;
        for (int64_t i0 = causal ? k0 : 0; i0 < T; i0 += FA_TILE) {
            __syncthreads();
            fa_load(Qs, Qt, qh, i0, T);
            fa_load(dOs, dOt, doh, i0, T);
            if (threadIdx.x < FA_TILE) {
                int64_t i = i0 + threadIdx.x;
                ls[threadIdx.x] = i < T ? lse[(b * NH + h) * T + i] * FA_LOG2E : 0.f;
                ds[threadIdx.x] = i < T ? Dv[(b * NH + h) * T + i] : 0.f;
            }
            __syncthreads();
            float s[8][4], dp[8][4];
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.f;
            fa_mm_rows(s, kf, Qs, g, t4);   /* S^T = K Q^T */
            fa_mm_rows(dp, vf, dOs, g, t4); /* dP^T = V dO^T */
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int hi = e >> 1, qc = 8 * j + 2 * t4 + (e & 1);
                    int64_t i = i0 + qc;
                    bool ok = i < T && key[hi] < T && (!causal || key[hi] <= i);
                    float p = ok ? exp2f(s[j][e] * sl2 - ls[qc]) : 0.f;
                    s[j][e] = p;
                    dp[j][e] = p * (dp[j][e] - ds[qc]);
                }
            fa_mm_acc(dv, s, dOt, g, t4); /* dV += P^T dO */
            fa_mm_acc(dk, dp, Qt, g, t4); /* dK += dS^T Q */
        }
    }
    const int64_t stride = (NH + 2 * NKV) * FA_D, kc = (kvh * (G + 2) + G) * FA_D, vc = kc + FA_D;
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        if (key[hi] >= T) continue;
        float *r = dqkv + (b * T + key[hi]) * stride;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            *(float2 *)(r + kc + 8 * j + 2 * t4) =
                make_float2(dk[j][2 * hi] * scale, dk[j][2 * hi + 1] * scale);
            *(float2 *)(r + vc + 8 * j + 2 * t4) = make_float2(dv[j][2 * hi], dv[j][2 * hi + 1]);
        }
    }
}

/* ---- backward: dq ---- */

__global__ void __launch_bounds__(FA_THREADS)
    fa_backward_dq_kernel(float *dqkv, const bf16 *qb, const bf16 *kb, const bf16 *vb,
                          const bf16 *dob, const float *lse, const float *Dv, int64_t T,
                          int64_t NH, int64_t NKV, float sl2, float scale, int causal) {
    extern __shared__ uint4 fa_smem[];
    bf16 *Qs = (bf16 *)fa_smem, *dOs = Qs + FA_TILE * FA_LD, *Ks = dOs + FA_TILE * FA_LD,
         *Kt = Ks + FA_TILE * FA_LD, *Vs = Kt + FA_TILE * FA_LD;
    const int64_t h = blockIdx.y, b = blockIdx.z, i0 = (int64_t)blockIdx.x * FA_TILE;
    const int64_t G = NH / NKV, kvh = h / G;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int64_t row[2] = {i0 + 16 * w + g, i0 + 16 * w + g + 8};
    const bf16 *kh = kb + (b * NKV + kvh) * T * FA_D, *vh = vb + (b * NKV + kvh) * T * FA_D;

    fa_load(Qs, NULL, qb + (b * NH + h) * T * FA_D, i0, T);
    fa_load(dOs, NULL, dob + (b * NH + h) * T * FA_D, i0, T);
    __syncthreads();
    uint32_t qf[4][4], df[4][4];
    fa_afrag(qf, Qs, 16 * w, g, t4);
    fa_afrag(df, dOs, 16 * w, g, t4);
    float lr[2], dr[2];
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        lr[hi] = row[hi] < T ? lse[(b * NH + h) * T + row[hi]] * FA_LOG2E : 0.f;
        dr[hi] = row[hi] < T ? Dv[(b * NH + h) * T + row[hi]] : 0.f;
    }
    float dq[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.f;
    const int64_t kend = causal ? (i0 + FA_TILE < T ? i0 + FA_TILE : T) : T;
    for (int64_t k0 = 0; k0 < kend; k0 += FA_TILE) {
        __syncthreads();
        fa_load(Ks, Kt, kh, k0, T);
        fa_load(Vs, NULL, vh, k0, T);
        __syncthreads();
        float s[8][4], dp[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[j][e] = dp[j][e] = 0.f;
        fa_mm_rows(s, qf, Ks, g, t4);  /* S = Q K^T */
        fa_mm_rows(dp, df, Vs, g, t4); /* dP = dO V^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int hi = e >> 1;
                int64_t key = k0 + 8 * j + 2 * t4 + (e & 1);
                bool ok = row[hi] < T && key < T && (!causal || key <= row[hi]);
                float p = ok ? exp2f(s[j][e] * sl2 - lr[hi]) : 0.f;
                dp[j][e] = p * (dp[j][e] - dr[hi]);
            }
        fa_mm_acc(dq, dp, Kt, g, t4); /* dQ += dS K */
    }
    const int64_t stride = (NH + 2 * NKV) * FA_D;
    const int64_t qc = ((h / G) * (G + 2) + h % G) * FA_D;
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        if (row[hi] >= T) continue;
        float *r = dqkv + (b * T + row[hi]) * stride + qc;
#pragma unroll
        for (int j = 0; j < 8; j++)
            *(float2 *)(r + 8 * j + 2 * t4) =
                make_float2(dq[j][2 * hi] * scale, dq[j][2 * hi + 1] * scale);
    }
}

/* ---- host side ---- */

static size_t fa_tile_bytes(int tiles) { return (size_t)tiles * FA_TILE * FA_LD * sizeof(bf16); }

int loom_cuda_attention_bf16_ok(struct loom_backend *be, const struct loom_attn *a) {
    return loom_cuda_impl(be)->matmul_bf16 && !loom_cuda_impl(be)->matmul_f16 && a->HS == FA_D && a->dropout_p == 0.0f &&
           a->NKV > 0 && a->NH % a->NKV == 0 && a->NH <= 65535 && a->B <= 65535;
}

/* bf16 copies of q, k, v (and dout when given) in the attention workspace. */
static void fa_convert(struct loom_backend *be, const float *qkv, const float *dout,
                       const struct loom_attn *a, bf16 **q, bf16 **k, bf16 **v, bf16 **d) {
    struct loom_cuda *c = loom_cuda_impl(be);
    size_t nq = (size_t)(a->B * a->NH * a->T * FA_D), nk = (size_t)(a->B * a->NKV * a->T * FA_D);
    size_t need = (2 * nq + 2 * nk) * sizeof(bf16);
    loom_cuda_grow(be, &c->attn_ws, &c->attn_ws_bytes, need, "bf16 attention workspace");
    *q = (bf16 *)c->attn_ws;
    *k = *q + nq;
    *v = *k + nk;
    *d = *v + nk;
    cudaStream_t st = loom_cuda_stream(be);
    int blocks = 8 * c->num_sms;
    LOOM_ASSERT(((uintptr_t)qkv & 15) == 0 && (!dout || ((uintptr_t)dout & 15) == 0));
    fa_convert_kernel<<<blocks, 256, 0, st>>>(*q, *k, *v, qkv, a->B, a->T, a->NH, a->NKV);
    LOOM_CUDA_LAUNCHED();
    if (dout) {
        fa_convert_kernel<<<blocks, 256, 0, st>>>(*d, NULL, NULL, dout, a->B, a->T, a->NH, 0);
        LOOM_CUDA_LAUNCHED();
    }
}

void loom_cuda_attention_forward_bf16(struct loom_backend *be, float *out, float *lse,
                                      const float *qkv, const struct loom_attn *a) {
    bf16 *q, *k, *v, *d;
    fa_convert(be, qkv, NULL, a, &q, &k, &v, &d);
    size_t smem = fa_tile_bytes(3); /* Q, K, V^T */
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(fa_forward_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((a->T + FA_TILE - 1) / FA_TILE), (unsigned)a->NH, (unsigned)a->B);
    fa_forward_kernel<<<grid, FA_THREADS, smem, loom_cuda_stream(be)>>>(
        out, lse, q, k, v, a->T, a->NH, a->NKV, a->scale * FA_LOG2E, a->causal);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_attention_backward_bf16(struct loom_backend *be, float *dqkv, const float *dout,
                                       const float *lse, const float *Dv, const float *qkv,
                                       const struct loom_attn *a) {
    bf16 *q, *k, *v, *d;
    fa_convert(be, qkv, dout, a, &q, &k, &v, &d);
    cudaStream_t st = loom_cuda_stream(be);
    unsigned tiles = (unsigned)((a->T + FA_TILE - 1) / FA_TILE);
    float sl2 = a->scale * FA_LOG2E;
    size_t smem = fa_tile_bytes(6) + 2 * FA_TILE * sizeof(float);
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(fa_backward_dkdv_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    fa_backward_dkdv_kernel<<<dim3(tiles, (unsigned)a->NKV, (unsigned)a->B), FA_THREADS, smem,
                              st>>>(dqkv, q, k, v, d, lse, Dv, a->T, a->NH, a->NKV, sl2, a->scale,
                                    a->causal);
    LOOM_CUDA_LAUNCHED();
    smem = fa_tile_bytes(5);
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(fa_backward_dq_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    fa_backward_dq_kernel<<<dim3(tiles, (unsigned)a->NH, (unsigned)a->B), FA_THREADS, smem, st>>>(
        dqkv, q, k, v, d, lse, Dv, a->T, a->NH, a->NKV, sl2, a->scale, a->causal);
    LOOM_CUDA_LAUNCHED();
}
