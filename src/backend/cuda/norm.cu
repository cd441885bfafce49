/* LayerNorm and RMSNorm over the last dimension: N rows of C.
 *
 * LayerNorm:  xhat = (x - mean) * rstd,  out = xhat * w + b,  rstd = 1/sqrt(var + eps)
 *   dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * w
 *   dw += sum_rows dout * xhat,  db += sum_rows dout
 * RMSNorm:    xhat = x * rstd,  out = xhat * w,  rstd = 1/sqrt(mean(x^2) + eps)
 *   dinp += rstd * (g - xhat * mean(g * xhat)),  dw += sum_rows dout * xhat
 *
 * dinp accumulates (a norm's input is the residual stream). The fp32 arithmetic of an element of
 * out and dinp is the CPU backend's, operation for operation (no fused multiply-adds), and the row
 * sums are taken in double as there (a residual row can carry a large mean next to a small
 * spread).
 *
 * Layout. A row is handled by a group of tpr threads, the fewest warps (at most NORM_THREADS
 * threads) that hold it in K <= 8 chunks per thread in the forward; in the backward (x, dout and
 * the column sums) exactly 3 or 2 chunks a thread where that fits, else K <= 4 (norm_bwd_shape);
 * blockDim = (tpr, groups). Thread t of a group owns the chunks of 4 columns
 * c = 4 (k tpr + t), k = 0, 1, ... It keeps its first K chunks in registers, so the row is read
 * from memory once; chunks beyond (C over 4 NORM_THREADS K) are read again at each pass. A row sum
 * adds each thread's columns in chunk order, then the lanes of a warp (a butterfly: every lane gets
 * the same bits), then the warps of the group in order. With C a multiple of 4 and every row
 * pointer aligned, chunks move as one 16-byte access (8 bytes for 4 bf16); otherwise the same
 * columns move one at a time, with the same results.
 *
 * Forward: one row per group. out is fp32 or bf16, a bf16 out being the fp32 value rounded to
 * nearest even at the store (one kernel template for both). residual_*norm_forward forms xs = x + r
 * while loading the row, writes it, and normalises the values it holds: equal bit for bit to add
 * followed by the plain forward, which runs the same code on xs. r is fp32 or bf16 (a branch's
 * output in the activation type, widened exactly as it is loaded).
 *
 * Backward: block b owns rows [R b, R b + R) (R = 64, NORM_BWD_ROWS, or fewer when that leaves SMs
 * idle: norm_bwd_rows), taken in turn by its groups. One
 * pass over x and dout (fp32 or bf16, read as stored) gives the row sums and, in each thread, fp32
 * sums over its group's rows of dout * xhat and dout for its columns; a second pass updates dinp
 * from the registers. The groups of a block run independently: a row sum synchronises only its
 * own group (a named barrier), and with vector accesses each thread copies its chunks of x, dout
 * and dinp of the group's next row into shared memory (cp.async) while it works on the current
 * one, so the next row's reads are in flight through the row sums and the update (the same values
 * and arithmetic, so the same bits, as reading them directly). While the block's column sums fit
 * in shared memory and the row in registers (C up to 2944 for LayerNorm, 4096 for RMSNorm) the
 * groups add theirs there in double, in group order, and the block writes one partial row;
 * beyond, a second kernel makes the same partial rows from x and dout. The ceil(N / R) partial
 * rows are then added in a fixed order. No atomics: two runs give the same bits, on any GPU.
 */
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"

#define NORM_THREADS 256           /* threads of a block, and the most one row gets */
#define NORM_FWD_CHUNKS 8          /* float4 chunks a thread keeps: forward */
#define NORM_BWD_CHUNKS 4          /* backward (x and dout, plus the column sums) */
#define NORM_BWD_ROWS 64           /* rows of a backward block, and of one partial row, at most */
#define NORM_BWD_MIN_ROWS 16       /* ... and at least (norm_bwd_rows) */
#define NORM_FUSED_SMEM (46 * 1024) /* shared memory of the backward's column sums, at most */

typedef __nv_bfloat16 bf16;

/* 4 bf16, moved as one 8-byte access */
struct __align__(8) norm_bf16x4 {
    __nv_bfloat162 lo, hi;
};

__device__ __forceinline__ float norm_get(const float4 &v, int j) {
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}
__device__ __forceinline__ void norm_set(float4 &v, int j, float x) {
    if (j == 0) v.x = x;
    else if (j == 1) v.y = x;
    else if (j == 2) v.z = x;
    else v.w = x;
}

/* Columns c .. c+3 of row p (c < C): one access when vec, else those below C one at a time (the
 * others read as 0, never written). */
__device__ __forceinline__ float4 norm_load(const float *p, int64_t c, int64_t C, int vec) {
    if (vec) return *reinterpret_cast<const float4 *>(p + c);
    float4 v = make_float4(p[c], 0.0f, 0.0f, 0.0f);
    if (c + 1 < C) v.y = p[c + 1];
    if (c + 2 < C) v.z = p[c + 2];
    if (c + 3 < C) v.w = p[c + 3];
    return v;
}
__device__ __forceinline__ float4 norm_unpack(const float4 &v) { return v; }
__device__ __forceinline__ float4 norm_unpack(const norm_bf16x4 &u) {
    const float2 a = __bfloat1622float2(u.lo), b = __bfloat1622float2(u.hi);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 norm_load(const bf16 *p, int64_t c, int64_t C, int vec) {
    if (vec) return norm_unpack(*reinterpret_cast<const norm_bf16x4 *>(p + c));
    float4 v = make_float4(__bfloat162float(p[c]), 0.0f, 0.0f, 0.0f);
    if (c + 1 < C) v.y = __bfloat162float(p[c + 1]);
    if (c + 2 < C) v.z = __bfloat162float(p[c + 2]);
    if (c + 3 < C) v.w = __bfloat162float(p[c + 3]);
    return v;
}
__device__ __forceinline__ void norm_store(float *p, int64_t c, int64_t C, int vec, float4 v) {
    if (vec) {
        *reinterpret_cast<float4 *>(p + c) = v;
        return;
    }
    p[c] = v.x;
    if (c + 1 < C) p[c + 1] = v.y;
    if (c + 2 < C) p[c + 2] = v.z;
    if (c + 3 < C) p[c + 3] = v.w;
}
/* rounded to nearest even */
__device__ __forceinline__ void norm_store(bf16 *p, int64_t c, int64_t C, int vec, float4 v) {
    if (vec) {
        norm_bf16x4 u;
        u.lo = __floats2bfloat162_rn(v.x, v.y);
        u.hi = __floats2bfloat162_rn(v.z, v.w);
        *reinterpret_cast<norm_bf16x4 *>(p + c) = u;
        return;
    }
    p[c] = __float2bfloat16_rn(v.x);
    if (c + 1 < C) p[c + 1] = __float2bfloat16_rn(v.y);
    if (c + 2 < C) p[c + 2] = __float2bfloat16_rn(v.z);
    if (c + 3 < C) p[c + 3] = __float2bfloat16_rn(v.w);
}

/* 4 elements of T as one access: a chunk */
template <typename T> struct norm_chunk;
template <> struct norm_chunk<float> {
    typedef float4 type;
};
template <> struct norm_chunk<bf16> {
    typedef norm_bf16x4 type;
};

/* Asynchronous copy of one chunk (16 or 8 bytes, both addresses aligned to it) from global memory
 * to this thread's shared slot dst; complete for this thread after loom_cp_async_wait_all. */
__device__ __forceinline__ void norm_async_copy(float4 *dst, const float *src) {
    loom_cp_async16(dst, src);
}
__device__ __forceinline__ void norm_async_copy(norm_bf16x4 *dst, const bf16 *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)),
                 "l"(src)
                 : "memory");
}
/* A chunk from this thread's shared slot, as fp32; kept in program order with the copies. */
__device__ __forceinline__ float4 norm_slot_load(const float4 *src) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"((unsigned)__cvta_generic_to_shared(src)));
    return v;
}
__device__ __forceinline__ float4 norm_slot_load(const norm_bf16x4 *src) {
    unsigned lo, hi;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                 : "=r"(lo), "=r"(hi)
                 : "r"((unsigned)__cvta_generic_to_shared(src)));
    norm_bf16x4 u;
    memcpy(&u.lo, &lo, 4);
    memcpy(&u.hi, &hi, 4);
    return norm_unpack(u);
}

/* Barrier of the threads of this thread's group (row y of the block) alone: named barrier 1 + y
 * over blockDim.x threads, so the groups of a block run independently. */
__device__ __forceinline__ void norm_group_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + (int)threadIdx.y), "r"((int)blockDim.x)
                 : "memory");
}

/* The sums of a and b over the threads of the group, in the fixed order described above; every
 * thread of the group gets the same bits. sh: NORM_THREADS / 32 slots shared by the block. A group
 * of several warps synchronises its own threads (norm_group_sync): every thread of the group calls
 * this. */
__device__ __forceinline__ double2 norm_row_sum(double a, double b, double2 *sh) {
    a = loom_warp_sum_d(a);
    b = loom_warp_sum_d(b);
    if (blockDim.x == 32) return make_double2(a, b);
    const int nw = (int)blockDim.x >> 5;
    double2 *s = sh + threadIdx.y * nw;
    norm_group_sync(); /* the previous sum has been read */
    if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = make_double2(a, b);
    norm_group_sync();
    double2 r = s[0];
    for (int i = 1; i < nw; i++) {
        r.x += s[i].x;
        r.y += s[i].y;
    }
    return r;
}

/* xhat of one element, as the CPU computes it */
template <bool RMS>
__device__ __forceinline__ float norm_xhat(float x, float m, float r) {
    return RMS ? __fmul_rn(x, r) : __fmul_rn(__fsub_rn(x, m), r);
}

/* One row per group: out = norm(x) * w (+ b), with RESID x = xs = inp + res formed and written
 * first (xs may alias inp or res: each element is read, then written, by one thread). mean (not
 * RMS), rstd, b may be NULL. A group of several warps is alone in its block. */
template <bool RMS, bool RESID, typename OT, typename RT, int K>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_forward_kernel(OT *out, float *mean, float *rstd, float *xs, const float *inp,
                        const RT *res, const float *w, const float *b, int64_t N, int64_t C,
                        float eps, int vec) {
    __shared__ double2 sh[NORM_THREADS / 32];
    const int t = threadIdx.x;
    const int64_t row = blockIdx.x * (int64_t)blockDim.y + threadIdx.y;
    if (row >= N) return;
    const int64_t off = row * C, step = 4 * (int64_t)blockDim.x;
    const float *x = RESID ? xs + off : inp + off; /* the row once formed */
    /* RESID: xs = a + d at columns c .. c+3, written and returned */
    auto form = [&](float4 a, float4 d, int64_t c) {
        const float4 s = make_float4(a.x + d.x, a.y + d.y, a.z + d.z, a.w + d.w);
        norm_store(xs + off, c, C, vec, s);
        return s;
    };
    auto input = [&](int64_t c) {
        const float4 a = norm_load(inp + off, c, C, vec);
        return RESID ? form(a, norm_load(res + off, c, C, vec), c) : a;
    };
    /* LayerNorm: sum of x; RMSNorm: sum of x^2 */
    double s1 = 0.0;
    auto sum1 = [&](float4 v, int64_t c) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (c + j < C) {
                const double d = (double)norm_get(v, j);
                s1 = RMS ? fma(d, d, s1) : s1 + d;
            }
    };
    /* The kept chunks are all loaded before any is written (with RESID, xs may alias inp or res,
     * so the compiler would not move a load above an earlier chunk's store: one chunk in flight
     * a thread), then formed, written and summed in order. */
    float4 v[K], rv[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t c = k * step + 4 * t;
        v[k] = rv[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (c < C) {
            v[k] = norm_load(inp + off, c, C, vec);
            if (RESID) rv[k] = norm_load(res + off, c, C, vec);
        }
    }
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t c = k * step + 4 * t;
        if (c < C) {
            if (RESID) v[k] = form(v[k], rv[k], c);
            sum1(v[k], c);
        }
    }
    for (int64_t c = K * step + 4 * t; c < C; c += step) sum1(input(c), c);
    const double q1 = norm_row_sum(s1, 0.0, sh).x / (double)C;

    double q2 = q1; /* mean square (RMSNorm) or variance (LayerNorm) */
    if (!RMS) {
        double s2 = 0.0;
        auto sum2 = [&](float4 u, int64_t c) {
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c + j < C) {
                    const double d = (double)norm_get(u, j) - q1;
                    s2 = fma(d, d, s2);
                }
        };
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t c = k * step + 4 * t;
            if (c < C) sum2(v[k], c);
        }
        for (int64_t c = K * step + 4 * t; c < C; c += step) sum2(norm_load(x, c, C, vec), c);
        q2 = norm_row_sum(s2, 0.0, sh).x / (double)C;
    }
    const float m = RMS ? 0.0f : (float)q1;
    const float r = (float)(1.0 / sqrt(q2 + (double)eps));

    OT *o = out + off;
    auto emit = [&](float4 u, int64_t c) {
        const float4 wv = norm_load(w, c, C, vec);
        const float4 bv = b ? norm_load(b, c, C, vec) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float4 y;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float z = __fmul_rn(norm_xhat<RMS>(norm_get(u, j), m, r), norm_get(wv, j));
            if (b) z = __fadd_rn(z, norm_get(bv, j));
            norm_set(y, j, z);
        }
        norm_store(o, c, C, vec, y);
    };
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t c = k * step + 4 * t;
        if (c < C) emit(v[k], c);
    }
    for (int64_t c = K * step + 4 * t; c < C; c += step) emit(norm_load(x, c, C, vec), c);
    if (t == 0) {
        if (!RMS && mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

/* dinp += ... (skipped if NULL) for the rows of block b, and with WGRAD the block's partial
 * column sums: partial[b*C + c] = sum over its rows of dout * xhat, and (LayerNorm)
 * partial[(G + b)*C + c] = sum of dout, G = gridDim.x. Dynamic shared memory: with WGRAD the
 * column sums, (RMS ? 1 : 2) * C doubles rounded up to an even count (the row within K chunks per
 * thread), then with vec the copy slots, K chunks of x, of dinp and of dout for every thread of
 * the block (norm_bwd_smem). */
template <bool RMS, typename DT, int K, bool WGRAD>
__global__ void __launch_bounds__(NORM_THREADS, 2)
    norm_backward_kernel(float *dinp, bf16 *dcopy, int dsum, double *partial, const DT *dout,
                         const float *inp, const float *w, const float *mean, const float *rstd,
                         int64_t N, int64_t C, int vec, int R) {
    typedef typename norm_chunk<DT>::type chunk;
    extern __shared__ __align__(16) double colsum[];
    __shared__ double2 sh[NORM_THREADS / 32];
    const int t = threadIdx.x, groups = blockDim.y;
    const int64_t step = 4 * (int64_t)blockDim.x;
    const int64_t r0 = blockIdx.x * (int64_t)R;
    const int rows = N - r0 < R ? (int)(N - r0) : R;
    /* WGRAD: this thread's sums of dout * xhat, of dout and (dsum) of the updated dinp */
    float4 aw[K], ab[K], ay[K];
#pragma unroll
    for (int k = 0; k < K; k++)
        aw[k] = ab[k] = ay[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

    /* vec: this thread's slots, chunk k at [k * nthr] */
    const int nthr = (int)blockDim.x * groups, tid = (int)threadIdx.y * (int)blockDim.x + t;
    const int64_t Ce = (C + 1) & ~1; /* a column-sum row in shared memory */
    float4 *sx = reinterpret_cast<float4 *>(colsum + (WGRAD ? (dsum ? 3 : RMS ? 1 : 2) * Ce : 0));
    chunk *sd = reinterpret_cast<chunk *>(sx + 2 * K * nthr) + tid;
    float4 *sy = sx + K * nthr + tid;
    sx += tid;
    /* copies of row i's first K chunks of this thread into its slots */
    auto stage = [&](int i) {
        const int64_t off = (r0 + i) * C;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t c = k * step + 4 * t;
            if (c < C) {
                norm_async_copy(sx + k * nthr, inp + off + c);
                norm_async_copy(sd + k * nthr, dout + off + c);
                if (dinp) norm_async_copy(sy + k * nthr, dinp + off + c);
            }
        }
        loom_cp_async_commit();
    };

    /* Each group takes rows threadIdx.y, + groups, ... The statistics of its next row, and with
     * vec its chunks (copied to shared memory), are fetched while it works on this one: read from
     * the slots, then the next copies issued. */
    float mn = 0.0f, rn = 0.0f;
    auto fetch = [&](int i) {
        if (!RMS) mn = mean[r0 + i];
        rn = rstd[r0 + i];
        if (vec) stage(i);
    };
    if ((int)threadIdx.y < rows) fetch(threadIdx.y);
    for (int i = threadIdx.y; i < rows; i += groups) {
        const int64_t row = r0 + i, off = row * C;
        const float m = mn, r = rn;
        float4 xv[K], dv[K], yv[K]; /* x, dout, dinp */
        if (vec) loom_cp_async_wait_all();
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t c = k * step + 4 * t;
            xv[k] = dv[k] = yv[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (c < C) {
                if (vec) {
                    xv[k] = norm_slot_load(sx + k * nthr);
                    dv[k] = norm_slot_load(sd + k * nthr);
                    if (dinp) yv[k] = norm_slot_load(sy + k * nthr);
                } else {
                    xv[k] = norm_load(inp + off, c, C, 0);
                    dv[k] = norm_load(dout + off, c, C, 0);
                    if (dinp) yv[k] = norm_load(dinp + off, c, C, 0);
                }
            }
        }
        if (i + groups < rows) fetch(i + groups);

        double sg = 0.0, sgx = 0.0;
        /* the row sums of g and g * xhat */
        auto sums = [&](float4 xq, float4 dq, float4 wv, int64_t c) {
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (c + j < C) {
                    const float g = __fmul_rn(norm_get(dq, j), norm_get(wv, j));
                    if (!RMS) sg += (double)g;
                    sgx += (double)__fmul_rn(g, norm_xhat<RMS>(norm_get(xq, j), m, r));
                }
        };
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t c = k * step + 4 * t;
            if (c < C) {
                if (dinp) sums(xv[k], dv[k], norm_load(w, c, C, vec), c);
                if (WGRAD) {
                    /* columns past C hold dout 0 and add nothing */
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const float d = norm_get(dv[k], j);
                        const float xh = norm_xhat<RMS>(norm_get(xv[k], j), m, r);
                        norm_set(aw[k], j, __fmaf_rn(d, xh, norm_get(aw[k], j)));
                        if (!RMS) norm_set(ab[k], j, __fadd_rn(norm_get(ab[k], j), d));
                    }
                }
            }
        }
        if (!dinp) continue;
        for (int64_t c = K * step + 4 * t; c < C; c += step)
            sums(norm_load(inp + off, c, C, vec), norm_load(dout + off, c, C, vec),
                 norm_load(w, c, C, vec), c);
        const double2 s = norm_row_sum(sg, sgx, sh);
        const float a = (float)(s.x / (double)C), bx = (float)(s.y / (double)C);
        float *dx = dinp + off;
        auto update = [&](float4 xq, float4 dq, float4 y, float4 wv, int64_t c) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float g = __fmul_rn(norm_get(dq, j), norm_get(wv, j));
                const float xh = norm_xhat<RMS>(norm_get(xq, j), m, r);
                const float u = __fsub_rn(RMS ? g : __fsub_rn(g, a), __fmul_rn(xh, bx));
                norm_set(y, j, __fadd_rn(norm_get(y, j), __fmul_rn(r, u)));
            }
            norm_store(dx, c, C, vec, y);
            if (dcopy) norm_store(dcopy + off, c, C, vec, y);
            return y;
        };
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t c = k * step + 4 * t;
            if (c < C) {
                const float4 y = update(xv[k], dv[k], yv[k], norm_load(w, c, C, vec), c);
                if (WGRAD && dsum) /* columns past C are never updated: ay stays 0 there */
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        if (c + j < C)
                            norm_set(ay[k], j, __fadd_rn(norm_get(ay[k], j), norm_get(y, j)));
            }
        }
        for (int64_t c = K * step + 4 * t; c < C; c += step)
            update(norm_load(inp + off, c, C, vec), norm_load(dout + off, c, C, vec),
                   norm_load(dx, c, C, vec), norm_load(w, c, C, vec), c);
    }

    if (WGRAD) {
        /* the groups' column sums, added in group order */
        for (int grp = 0; grp < groups; grp++) {
            if ((int)threadIdx.y == grp) {
#pragma unroll
                for (int k = 0; k < K; k++) {
                    const int64_t c = k * step + 4 * t;
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        if (c + j < C) {
                            double *pw = colsum + c + j;
                            *pw = (grp ? *pw : 0.0) + (double)norm_get(aw[k], j);
                            if (!RMS) {
                                double *pb = colsum + Ce + c + j;
                                *pb = (grp ? *pb : 0.0) + (double)norm_get(ab[k], j);
                            }
                            if (dsum) {
                                double *py = colsum + 2 * Ce + c + j;
                                *py = (grp ? *py : 0.0) + (double)norm_get(ay[k], j);
                            }
                        }
                }
            }
            __syncthreads();
        }
        const int64_t G = gridDim.x;
        for (int64_t i = threadIdx.y * (int64_t)blockDim.x + t; i < C;
             i += (int64_t)blockDim.x * groups) {
            partial[blockIdx.x * C + i] = colsum[i];
            if (!RMS) partial[(G + blockIdx.x) * C + i] = colsum[Ce + i];
            if (dsum) partial[(2 * G + blockIdx.x) * C + i] = colsum[2 * Ce + i];
        }
    }
}

/* The partial rows of norm_backward_kernel made from x and dout alone, for rows too long for its
 * shared memory: block (x, y) of (32, 8) threads takes the 64 rows of chunk blockIdx.x and the
 * 128 columns of blockIdx.y; thread (tx, ty) sums rows ty, ty + 8, ... of the chunk for columns
 * c .. c+3, c = 4 (32 blockIdx.y + tx), and the 8 sums are added in ty order. */
template <bool RMS, typename DT>
__global__ void __launch_bounds__(NORM_THREADS)
    norm_weight_partial_kernel(double *partial, const DT *dout, const float *inp,
                               const float *mean, const float *rstd, int64_t N, int64_t C,
                               int vec, int R) {
    __shared__ float4 sw[8][32], sb[8][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = 4 * (blockIdx.y * (int64_t)32 + tx);
    const int64_t r0 = blockIdx.x * (int64_t)R;
    const int64_t r1 = r0 + R < N ? r0 + R : N;
    float4 aw = make_float4(0.0f, 0.0f, 0.0f, 0.0f), ab = aw;
    if (c < C)
        for (int64_t row = r0 + ty; row < r1; row += 8) {
            const float m = RMS ? 0.0f : mean[row], r = rstd[row];
            const float4 xv = norm_load(inp + row * C, c, C, vec);
            const float4 dv = norm_load(dout + row * C, c, C, vec);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float d = norm_get(dv, j), xh = norm_xhat<RMS>(norm_get(xv, j), m, r);
                norm_set(aw, j, __fmaf_rn(d, xh, norm_get(aw, j)));
                if (!RMS) norm_set(ab, j, __fadd_rn(norm_get(ab, j), d));
            }
        }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty != 0 || c >= C) return;
    const int64_t G = gridDim.x;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (c + j < C) {
            double pw = 0.0, pb = 0.0;
            for (int i = 0; i < 8; i++) {
                pw += (double)norm_get(sw[i][tx], j);
                pb += (double)norm_get(sb[i][tx], j);
            }
            partial[blockIdx.x * C + c + j] = pw;
            if (!RMS) partial[(G + blockIdx.x) * C + c + j] = pb;
        }
}

/* dw[c] += sum over k < G of partial[k*C + c], db[c] += likewise of partial[(G + k)*C + c], dy[c]
 * of partial[(2G + k)*C + c] (blockIdx.y 0: dw, 1: db, 2: dy; a NULL one is skipped). Block
 * (32, 16): thread (tx, ty) adds rows ty, ty + 16, ... in double, then the 16 sums are added in
 * ty order. */
__global__ void norm_sum_partials_kernel(float *dw, float *db, float *dy, const double *partial,
                                         int64_t G, int64_t C) {
    __shared__ double sh[16][33];
    float *out = blockIdx.y == 2 ? dy : blockIdx.y ? db : dw;
    if (!out) return;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = blockIdx.x * (int64_t)32 + tx;
    const double *p = partial + blockIdx.y * G * C;
    double s = 0.0;
    if (c < C)
#pragma unroll 8
        for (int64_t k = ty; k < G; k += 16) s += p[k * C + c];
    sh[ty][tx] = s;
    __syncthreads();
    if (ty != 0 || c >= C) return;
    for (int i = 1; i < 16; i++) s += sh[i][tx];
    out[c] += (float)s;
}

/* ---- host side ---- */

/* Threads per row (tpr) and float4 chunks kept per thread (k, at most kmax) for rows of C: the
 * fewest warps, up to NORM_THREADS / 32, whose threads hold the row in kmax chunks, then the
 * fewest chunks among 1, 2, 3, 4, 6, 8 that hold it. Longer rows keep kmax chunks in registers and
 * read the rest again. */
static void norm_shape(int64_t C, int kmax, int *tpr, int *k) {
    const int64_t q = (C + 3) / 4;
    int64_t warps = (q + 32 * kmax - 1) / (32 * kmax);
    if (warps > NORM_THREADS / 32) warps = NORM_THREADS / 32;
    const int64_t need = (q + 32 * warps - 1) / (32 * warps);
    const int kk = need <= 4 ? (int)need : need <= 6 ? 6 : 8;
    *k = kk < kmax ? kk : kmax;
    *tpr = (int)(32 * warps);
}

/* The backward's shape: a row held whole by up to NORM_THREADS threads of 3 chunks, else of 2
 * (no thread with a partial share), else norm_shape's. Four chunks a thread reach the register cap
 * of two blocks an SM and spill; at C = 1024 (4 warps of 2 chunks against 2 of 4) the LayerNorm
 * backward takes 87 us instead of 106, at C = 768 (2 warps of 3) 69 against 74 with 3 of 2. */
static void norm_bwd_shape(int64_t C, int *tpr, int *k) {
    const int64_t q = (C + 3) / 4;
    for (int kk = 3; kk >= 2; kk--)
        if (q % (32 * kk) == 0 && q / (32 * kk) <= NORM_THREADS / 32) {
            *tpr = (int)(q / kk);
            *k = kk;
            return;
        }
    norm_shape(C, NORM_BWD_CHUNKS, tpr, k);
}

template <bool RMS, bool RESID, typename OT, typename RT = float>
static void norm_forward(struct loom_backend *be, OT *out, float *mean, float *rstd, float *xs,
                         const float *inp, const RT *res, const float *w, const float *b, int64_t N,
                         int64_t C, float eps) {
    int tpr, k;
    norm_shape(C, NORM_FWD_CHUNKS, &tpr, &k);
    const int groups = tpr == 32 ? NORM_THREADS / 32 : 1;
    const dim3 block((unsigned)tpr, (unsigned)groups);
    const unsigned grid = (unsigned)((N + groups - 1) / groups);
    const int vec = C % 4 == 0 && loom_aligned(16, inp, xs, w, b) &&
                    loom_aligned(4 * sizeof(RT), res) && loom_aligned(4 * sizeof(OT), out);
    cudaStream_t st = loom_cuda_stream(be);
#define NORM_FWD_CASE(KK)                                                                          \
    case KK:                                                                                       \
        norm_forward_kernel<RMS, RESID, OT, RT, KK>                                                \
            <<<grid, block, 0, st>>>(out, mean, rstd, xs, inp, res, w, b, N, C, eps, vec);         \
        break;
    switch (k) {
        NORM_FWD_CASE(1)
        NORM_FWD_CASE(2)
        NORM_FWD_CASE(3)
        NORM_FWD_CASE(4)
        NORM_FWD_CASE(6)
        NORM_FWD_CASE(8)
    }
#undef NORM_FWD_CASE
    LOOM_CUDA_LAUNCHED();
}

/* Rows of a backward block: NORM_BWD_ROWS, halved (down to NORM_BWD_MIN_ROWS) while the grid
 * would give fewer than two blocks an SM (the kernel's occupancy): BERT-large's N = 4096 rows of
 * C = 1024 made 64 blocks on 132 SMs, and its LayerNorm backward took 78 us. A function of N and
 * the GPU alone, so two runs still give the same bits. */
static int norm_bwd_rows(int64_t N, int sms) {
    int R = NORM_BWD_ROWS;
    while (R > NORM_BWD_MIN_ROWS && (N + R - 1) / R < 2 * (int64_t)sms) R /= 2;
    return R;
}

/* Column-sum rows of the backward: dw, then db (LayerNorm), then with dsum the updated dinp's (in
 * the third row for both norms) */
template <bool RMS> static int norm_sum_rows(int dsum) {
    return dsum ? 3 : RMS ? 1 : 2;
}

/* Dynamic shared memory of norm_backward_kernel: the column sums (wgrad), then the copy slots
 * (vec) for threads of k chunks each. */
template <bool RMS, typename DT>
static size_t norm_bwd_smem(int64_t C, int k, int threads, int wgrad, int dsum, int vec) {
    const size_t sums =
        wgrad ? (size_t)norm_sum_rows<RMS>(dsum) * (size_t)((C + 1) & ~(int64_t)1) : 0;
    const size_t slot = 2 * sizeof(float4) + sizeof(typename norm_chunk<DT>::type);
    return sums * sizeof(double) + (vec ? (size_t)k * (size_t)threads * slot : 0);
}

template <bool RMS, typename DT, int K, bool WGRAD>
static void norm_backward_launch(cudaStream_t st, unsigned grid, dim3 block, size_t smem,
                                 float *dinp, bf16 *dcopy, int dsum, double *partial,
                                 const DT *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int64_t N, int64_t C,
                                 int vec, int R) {
    LOOM_CUDA_CHECK(cudaFuncSetAttribute(norm_backward_kernel<RMS, DT, K, WGRAD>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    norm_backward_kernel<RMS, DT, K, WGRAD><<<grid, block, smem, st>>>(
        dinp, dcopy, dsum, partial, dout, inp, w, mean, rstd, N, C, vec, R);
    LOOM_CUDA_LAUNCHED();
}

/* dinp += the norm's input gradient; then, when asked, dcopy = bf16(dinp) and dsum += dinp's
 * column sums (the output gradient and the bias gradient of the product that reads dinp next).
 * Those two come from the fused kernel where it runs with dinp (its own sums, in the order of the
 * weight sums), else from a pass over dinp after it (loom_cuda_colsum_convert's sums). */
template <bool RMS, typename DT>
static void norm_backward(struct loom_backend *be, float *dinp, bf16 *dcopy, float *dsum, float *dw,
                          float *db, const DT *dout, const float *inp, const float *w,
                          const float *mean, const float *rstd, int64_t N, int64_t C) {
    if (RMS) db = NULL;
    if (!dinp) dcopy = NULL, dsum = NULL;
    const int wgrad = dw || db;
    if (!dinp && !wgrad) return;
    int tpr, k;
    norm_bwd_shape(C, &tpr, &k);
    const int groups = NORM_THREADS / tpr;
    const dim3 block((unsigned)tpr, (unsigned)groups);
    const int R = norm_bwd_rows(N, loom_cuda_impl(be)->num_sms);
    const int64_t G = (N + R - 1) / R;
    /* fused: the weight sums in the kernel's shared memory; fsum: dsum's sums there too */
    const size_t row = (size_t)C * sizeof(double);
    const int fused =
        wgrad && norm_sum_rows<RMS>(0) * row <= NORM_FUSED_SMEM && (C + 3) / 4 <= (int64_t)tpr * k;
    const int fsum = fused && dsum && norm_sum_rows<RMS>(1) * row <= NORM_FUSED_SMEM;
    bf16 *fcopy = fused ? dcopy : NULL; /* the copy in the fused kernel */
    double *partial = wgrad ? (double *)loom_cuda_scratch(
                                  be, (size_t)(norm_sum_rows<RMS>(fsum) * G * C) * sizeof(double))
                            : NULL;
    const int vec = C % 4 == 0 && loom_aligned(16, inp, w, dinp) &&
                    loom_aligned(4 * sizeof(DT), dout) && loom_aligned(8, fcopy);
    const size_t smem = norm_bwd_smem<RMS, DT>(C, k, tpr * groups, fused, fsum, vec);
    cudaStream_t st = loom_cuda_stream(be);
    if (dinp || fused) {
#define NORM_BWD_CASE(KK)                                                                          \
    case KK:                                                                                       \
        if (fused)                                                                                 \
            norm_backward_launch<RMS, DT, KK, true>(st, (unsigned)G, block, smem, dinp, fcopy,     \
                                                    fsum, partial, dout, inp, w, mean, rstd, N, C, \
                                                    vec, R);                                       \
        else                                                                                       \
            norm_backward_launch<RMS, DT, KK, false>(st, (unsigned)G, block, smem, dinp, NULL, 0,  \
                                                     partial, dout, inp, w, mean, rstd, N, C,      \
                                                     vec, R);                                      \
        break;
        switch (k) {
            NORM_BWD_CASE(1)
            NORM_BWD_CASE(2)
            NORM_BWD_CASE(3)
            NORM_BWD_CASE(4)
        }
#undef NORM_BWD_CASE
    }
    if (wgrad) {
        if (!fused) {
            const dim3 grid((unsigned)G, (unsigned)((C + 127) / 128));
            norm_weight_partial_kernel<RMS, DT>
                <<<grid, dim3(32, 8), 0, st>>>(partial, dout, inp, mean, rstd, N, C, vec, R);
            LOOM_CUDA_LAUNCHED();
        }
        const dim3 grid((unsigned)((C + 31) / 32), fsum ? 3u : db ? 2u : 1u);
        norm_sum_partials_kernel<<<grid, dim3(32, 16), 0, st>>>(dw, db, fsum ? dsum : NULL, partial,
                                                                G, C);
        LOOM_CUDA_LAUNCHED();
    }
    /* what the fused kernel did not do */
    bf16 *pcopy = fcopy ? NULL : dcopy;
    if (!fsum && dsum)
        loom_cuda_colsum_convert(be, dsum, pcopy, LOOM_DTYPE_BF16, dinp, LOOM_DTYPE_F32, N, C);
    else if (pcopy) {
        LOOM_ASSERT(!loom_cuda_impl(be)->matmul_f16); /* loom_cuda_to16 rounds to bf16 then */
        loom_cuda_to16(be, pcopy, dinp, N * C);
    }
}

/* Aborts unless dt is fp32 or bf16. */
static void norm_check_type(enum loom_dtype dt, const char *op) {
    if (dt != LOOM_DTYPE_F32 && dt != LOOM_DTYPE_BF16)
        loom_abort(__FILE__, __LINE__, "cuda %s: element type %s is not supported (f32, bf16)", op,
                   loom_dtype_name(dt));
}

void loom_cuda_layernorm_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                       float *mean, float *rstd, const float *inp, const float *w,
                                       const float *b, int64_t N, int64_t C, float eps) {
    norm_check_type(out_dt, "layernorm_forward");
    if (N <= 0 || C <= 0) return;
    if (out_dt == LOOM_DTYPE_BF16)
        norm_forward<false, false>(be, (bf16 *)out, mean, rstd, NULL, inp, (const float *)NULL, w,
                                   b, N, C, eps);
    else
        norm_forward<false, false>(be, (float *)out, mean, rstd, NULL, inp, (const float *)NULL, w,
                                   b, N, C, eps);
}

/* the residual forward for out of type OT, r of r_dt */
template <bool RMS, typename OT>
static void residual_norm_forward(struct loom_backend *be, OT *out, float *mean, float *rstd,
                                  float *xs, const float *x, const void *r, enum loom_dtype r_dt,
                                  const float *w, const float *b, int64_t N, int64_t C, float eps) {
    if (r_dt == LOOM_DTYPE_BF16)
        norm_forward<RMS, true>(be, out, mean, rstd, xs, x, (const bf16 *)r, w, b, N, C, eps);
    else
        norm_forward<RMS, true>(be, out, mean, rstd, xs, x, (const float *)r, w, b, N, C, eps);
}

void loom_cuda_residual_layernorm_forward_typed(struct loom_backend *be, float *xs, void *out,
                                                enum loom_dtype out_dt, float *mean, float *rstd,
                                                const float *x, const void *r, enum loom_dtype r_dt,
                                                const float *w, const float *b, int64_t N,
                                                int64_t C, float eps) {
    norm_check_type(out_dt, "residual_layernorm_forward");
    norm_check_type(r_dt, "residual_layernorm_forward");
    if (N <= 0 || C <= 0) return;
    loom_cuda_wrote(be, xs, (size_t)(N * C) * sizeof(float));
    if (out_dt == LOOM_DTYPE_BF16)
        residual_norm_forward<false>(be, (bf16 *)out, mean, rstd, xs, x, r, r_dt, w, b, N, C, eps);
    else
        residual_norm_forward<false>(be, (float *)out, mean, rstd, xs, x, r, r_dt, w, b, N, C, eps);
}

void loom_cuda_rmsnorm_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                     float *rstd, const float *inp, const float *w, int64_t N,
                                     int64_t C, float eps) {
    norm_check_type(out_dt, "rmsnorm_forward");
    if (N <= 0 || C <= 0) return;
    if (out_dt == LOOM_DTYPE_BF16)
        norm_forward<true, false>(be, (bf16 *)out, NULL, rstd, NULL, inp, (const float *)NULL, w,
                                  NULL, N, C, eps);
    else
        norm_forward<true, false>(be, (float *)out, NULL, rstd, NULL, inp, (const float *)NULL, w,
                                  NULL, N, C, eps);
}

void loom_cuda_residual_rmsnorm_forward_typed(struct loom_backend *be, float *xs, void *out,
                                              enum loom_dtype out_dt, float *rstd, const float *x,
                                              const void *r, enum loom_dtype r_dt, const float *w,
                                              int64_t N, int64_t C, float eps) {
    norm_check_type(out_dt, "residual_rmsnorm_forward");
    norm_check_type(r_dt, "residual_rmsnorm_forward");
    if (N <= 0 || C <= 0) return;
    loom_cuda_wrote(be, xs, (size_t)(N * C) * sizeof(float));
    if (out_dt == LOOM_DTYPE_BF16)
        residual_norm_forward<true>(be, (bf16 *)out, NULL, rstd, xs, x, r, r_dt, w, NULL, N, C,
                                    eps);
    else
        residual_norm_forward<true>(be, (float *)out, NULL, rstd, xs, x, r, r_dt, w, NULL, N, C,
                                    eps);
}

/* The 16-bit copy of dinp the norm backward may write (dinp_copy): of the activation type */
static bf16 *norm_copy_of(struct loom_backend *be, void *dinp_copy, const char *op) {
    if (dinp_copy && loom_cuda_activation_dtype(be) != LOOM_DTYPE_BF16)
        loom_abort(__FILE__, __LINE__, "cuda %s: a 16-bit copy of dinp needs bf16 activations", op);
    return (bf16 *)dinp_copy;
}

void loom_cuda_layernorm_backward_typed(struct loom_backend *be, float *dinp, void *dinp_copy,
                                        float *dinp_sum, float *dw, float *db, const void *dout,
                                        enum loom_dtype dout_dt, const float *inp, const float *w,
                                        const float *mean, const float *rstd, int64_t N,
                                        int64_t C) {
    norm_check_type(dout_dt, "layernorm_backward");
    if (N <= 0 || C <= 0) return;
    bf16 *cp = norm_copy_of(be, dinp_copy, "layernorm_backward");
    if (dout_dt == LOOM_DTYPE_BF16)
        norm_backward<false>(be, dinp, cp, dinp_sum, dw, db, (const bf16 *)dout, inp, w, mean, rstd,
                             N, C);
    else
        norm_backward<false>(be, dinp, cp, dinp_sum, dw, db, (const float *)dout, inp, w, mean,
                             rstd, N, C);
}

void loom_cuda_rmsnorm_backward_typed(struct loom_backend *be, float *dinp, void *dinp_copy,
                                      float *dinp_sum, float *dw, const void *dout,
                                      enum loom_dtype dout_dt, const float *inp, const float *w,
                                      const float *rstd, int64_t N, int64_t C) {
    norm_check_type(dout_dt, "rmsnorm_backward");
    if (N <= 0 || C <= 0) return;
    bf16 *cp = norm_copy_of(be, dinp_copy, "rmsnorm_backward");
    if (dout_dt == LOOM_DTYPE_BF16)
        norm_backward<true>(be, dinp, cp, dinp_sum, dw, NULL, (const bf16 *)dout, inp, w, NULL,
                            rstd, N, C);
    else
        norm_backward<true>(be, dinp, cp, dinp_sum, dw, NULL, (const float *)dout, inp, w, NULL,
                            rstd, N, C);
}
