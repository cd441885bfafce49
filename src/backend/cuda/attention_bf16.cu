/* Attention on the tensor cores in 16-bit precision (flash-attention style), used by the
 * attention ops when the backend's matrix products are 16-bit (set_matmul_dtype BF16 or F16:
 * the matmul_bf16 flag, after which the functions here are named), the head size is 64 or 128,
 * the scale is positive and there is no attention dropout; everything else takes the fp32
 * kernels of attention.cu. Same contract: out and lse (natural log, of the unscaled-by-dropout
 * scores), dqkv assigned. The op's own arrays qkv, out, dout and dqkv are of type X: fp32, or
 * bf16 (loom_attn.dt, with bf16 products), read as stored and written rounded; lse is fp32.
 *
 * Element type E: bf16 with bf16 products, fp16 (__half) with fp16 products (matmul_f16). The
 * kernels are templates over E; the two instantiations differ only in the rounding of fp32
 * values to E (fa_pack) and in the mma.sync variant (fa_mma).
 *
 * Rounding: q, k, v, dout, the probabilities P (for P.V and its gradients) and dS (for dq and
 * dk) are rounded to E; every product accumulates in fp32; scores, softmax statistics, lse and
 * D = rowsum(dout * out) are fp32. Scores use exp2 with log2(e) folded into the scale. In fp16
 * (range +-65504) a larger input overflows to infinity, and dS = P (dP - D) below 6.1e-5 keeps
 * fewer bits as an fp16 subnormal (zero below 6e-8): --fp16 scales the loss so that gradients
 * sit in fp16's range, and skips the steps that overflow.
 *
 * Layout: a conversion pass writes E head-major copies [B, heads, T, D] of what the kernels
 * stream tile by tile out of qkv[B,T,(NH+2NKV)*D] (Megatron's grouped order) and dout[B,T,NH*D]:
 * k and v for the forward, which reads its own q rows straight from qkv; q, k, v and dout for
 * the backward, whose pass also makes D from dout and out as stored.
 *
 * Kernels: blocks of 8 warps; a warp owns 16 rows (queries, or keys in the dk/dv pass) and
 * multiplies with mma.sync m16n8k16 (E in, fp32 accumulate). The warp's own operand (q; or
 * k and v) stays in registers as A fragments for the whole pass (head size 64; at 128 it is read
 * from shared memory at each use), and score tiles go from accumulators to A fragments in
 * registers. Streamed tiles come in with cp.async into FA_STAGES buffers, FA_STAGES - 1 tiles
 * ahead of the one being multiplied, with one barrier per tile, and are read with ldmatrix (.trans
 * for the operands that the mma wants transposed) from rows padded by 16 bytes, so the 8 rows of an
 * 8x8 matrix hit 8 distinct 16-byte bank groups. Causal: the key loops stop at the diagonal, a warp
 * whose rows see none of a tile skips it, only tiles that cross the diagonal (or T) are masked, and
 * the blocks with the longest loops are launched first. A document mask (loom_attn.doc_start:
 * query i sees keys from doc_start[i] on) works alike from the other end, since document starts
 * do not decrease along a sample: the key loops start at the tile of the block's first row's
 * document start, the dk/dv pass stops at the first query tile that starts after the block's
 * keys, a warp skips the tiles its rows see none of, and the tiles that cross a start are masked
 * element by element. Key ends (loom_attn.key_end: query i sees keys before key_end[i]; they do
 * not decrease either) work like the causal limit: the key loops stop at the block's last row's
 * end, the dk/dv pass starts at the first query tile whose last row ends after the block's first
 * key (padded keys cost no products), warps skip and mask likewise. Either mask goes with or
 * without the causal one (kernels instantiated with MASK when either is given). A row that sees
 * no key gets out 0 and lse -inf; its P is masked to 0 wherever the backward meets it.
 *
 *   forward: block (128 queries, head, sample) over 64-key tiles with an online softmax.
 *   backward (no atomics, so a run repeats bit for bit):
 *     dk/dv: block (128 keys, kv head, sample) over the G query heads of its group and the query
 *            tiles (QT rows) from its first key on: S^T = K Q^T, dP^T = V dO^T,
 *            P^T = exp(S^T - lse), dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q;
 *     dq:    block (128 queries, head, sample) over 64-key tiles, S and dP recomputed:
 *            dQ += dS K.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "backend/cuda/common.cuh"

#define FA_WARPS 8
#define FA_THREADS (32 * FA_WARPS)
#define FA_ROWS (16 * FA_WARPS) /* rows of a block: queries (forward, dq) or keys (dk/dv) */
#define FA_KT 64                /* keys of a streamed tile (forward, dq) */
#define FA_STAGES 3             /* shared buffers of streamed tiles: loads run 2 tiles ahead */
#define FA_LOG2E 1.4426950408889634f

typedef __nv_bfloat16 bf16;
typedef __half f16;
static_assert(sizeof(bf16) == 2 && sizeof(f16) == 2, "byte offsets count 2 bytes an element");

/* Geometry for head size D: shared rows of LD elements (D plus 16 bytes of padding); KS 16-wide k
 * steps and NT 8-wide n tiles over the head dimension; QT queries per tile of the dk/dv pass;
 * RES: a warp keeps its own operand in registers. */
template <int D>
struct fa_geom {
    static constexpr int LD = D + 8;
    static constexpr int KS = D / 16;
    static constexpr int NT = D / 8;
    static constexpr int QT = D <= 64 ? 64 : 32;
    static constexpr bool RES = D <= 64;
};

/* Arguments of the kernels (those of one pass are set). X is the element type of the op's own
 * arrays qkv, out, dout and dqkv (loom_attn.dt): fp32, or E itself. */
template <class E, class X>
struct fa_args {
    const X *qkv;            /* forward: the q rows */
    const float *lse, *Dv;   /* backward inputs [B, NH, T] */
    X *out;                  /* forward output */
    float *lse_out;          /* forward output */
    X *dqkv;                 /* backward output */
    const E *q, *k, *v, *dout; /* head-major 16-bit copies */
    const int32_t *doc;        /* document starts [B, T] (loom_attn.doc_start), or NULL */
    const int32_t *kend;       /* key ends [B, T] (loom_attn.key_end), or NULL */
    int B, T, NH, NKV, causal;
    float sl2;   /* scale * log2(e) */
    float scale;
};

/* ---- device primitives ---- */

/* c (16 x 8, fp32) += a (16 x 16) . b (16 x 8), operands of element type E (mma.sync
 * m16n8k16; fragments as below). */
template <class E>
__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void fa_mma<bf16>(float c[4], const uint32_t a[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void fa_mma<f16>(float c[4], const uint32_t a[4], uint32_t b0,
                                            uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* lo and hi rounded to E (to nearest even; fp16 overflows to infinity) in one register, lo in
 * the low half. */
template <class E>
__device__ __forceinline__ uint32_t fa_pack(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t fa_pack<bf16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}
template <>
__device__ __forceinline__ uint32_t fa_pack<f16>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* The op's arrays of type X (fp32 or E): two or eight values read as fp32, two written rounded
 * to X (a value of type E read and packed again keeps its bits). */
template <class X> struct fa_io;
template <> struct fa_io<float> {
    static __device__ __forceinline__ float2 ld2(const float *p) { return *(const float2 *)p; }
    static __device__ __forceinline__ void ld8(const float *p, float v[8]) {
        const float4 x = ((const float4 *)p)[0], z = ((const float4 *)p)[1];
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = z.x, v[5] = z.y, v[6] = z.z,
        v[7] = z.w;
    }
    static __device__ __forceinline__ void st2(float *p, float lo, float hi) {
        *(float2 *)p = make_float2(lo, hi);
    }
};
template <class E> struct fa_io16 {
    static __device__ __forceinline__ float2 unpack(uint32_t u);
    static __device__ __forceinline__ float2 ld2(const E *p) { return unpack(*(const uint32_t *)p); }
    static __device__ __forceinline__ void ld8(const E *p, float v[8]) {
        const uint4 u = *(const uint4 *)p;
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = unpack(w[i]);
            v[2 * i] = f.x;
            v[2 * i + 1] = f.y;
        }
    }
    static __device__ __forceinline__ void st2(E *p, float lo, float hi) {
        *(uint32_t *)p = fa_pack<E>(lo, hi);
    }
};
template <> __device__ __forceinline__ float2 fa_io16<bf16>::unpack(uint32_t u) {
    return __bfloat1622float2(*(const __nv_bfloat162 *)&u);
}
template <> __device__ __forceinline__ float2 fa_io16<f16>::unpack(uint32_t u) {
    return __half22float2(*(const __half2 *)&u);
}
template <> struct fa_io<bf16> : fa_io16<bf16> {};
template <> struct fa_io<f16> : fa_io16<f16> {};

/* 2^x (ex2.approx: relative error about 2^-22; results below 2^-126 flush to 0) */
__device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ uint32_t fa_sptr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Asynchronous copy of 16 (4) bytes from global memory to shared address dst; zeros when !ok
 * (src is then not read). */
__device__ __forceinline__ void fa_cp16(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void fa_cp4(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void fa_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/* Wait until at most N groups of this thread's copies are in flight. */
template <int N>
__device__ __forceinline__ void fa_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Four 8x8 16-bit matrices from shared memory (lane l gives the row address of matrix l / 8);
 * lane l receives row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 of each, or with _t the
 * transposed matrices (column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1). */
__device__ __forceinline__ void fa_ldsm(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void fa_ldsm_t(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* ---- tiles and products ----
 * Fragments of mma m16n8k16 (g = lane / 4, t = lane % 4): A (16 x 16) a[0] = (row g, columns
 * 2t, 2t+1), a[1] = row g+8, a[2] = columns + 8, a[3] = both; B (16 x 8) b0 = (rows 2t, 2t+1,
 * column g), b1 = rows + 8; C (16 x 8) c[0..1] = (row g, columns 2t, 2t+1), c[2..3] = row g+8. */

/* Start copying rows [row0, row0 + R) of a head-major [T, D] E array into the shared tile at
 * dst (rows of LD; rows at or past T are zeros). Every thread of the block takes part. */
template <int D, int R, class E>
__device__ __forceinline__ void fa_load(uint32_t dst, const E *src, int row0, int T) {
    constexpr int CH = D / 8, LD = fa_geom<D>::LD;
    static_assert(R * CH % FA_THREADS == 0, "a tile's 16-byte chunks divide among the threads");
#pragma unroll
    for (int it = 0; it < R * CH / FA_THREADS; it++) {
        const int e = threadIdx.x + it * FA_THREADS, r = e / CH, c = e % CH;
        const bool ok = row0 + r < T;
        fa_cp16(dst + (uint32_t)(r * LD + c * 8) * 2, src + (int64_t)(ok ? row0 + r : 0) * D + c * 8,
                ok);
    }
}

/* The A fragment of k step st (columns 16 st ..) of the 16 rows of a row-major shared tile at
 * `rows` (rows of LD). */
template <int LD>
__device__ __forceinline__ void fa_afrag(uint32_t f[4], uint32_t rows, int st, int lane) {
    fa_ldsm(f, rows + (uint32_t)(((lane & 7) + (lane & 8)) * LD + (lane >> 4) * 8 + 16 * st) * 2);
}

/* acc (16 x N) += A . B^T: A (16 x 16 KS) given k step by k step by af(st, f); B an N x 16 KS
 * shared tile at b whose row n holds the k values of output column n (rows of LD). */
template <class E, int KS, int N, int LD, class AF>
__device__ __forceinline__ void fa_mm_nt(float (&acc)[N / 8][4], AF af, uint32_t b, int lane) {
    const uint32_t base = b + (uint32_t)(((lane & 7) + ((lane >> 4) << 3)) * LD + (lane & 8)) * 2;
#pragma unroll
    for (int st = 0; st < KS; st++) {
        uint32_t a[4];
        af(st, a);
#pragma unroll
        for (int np = 0; np < N / 16; np++) {
            uint32_t r[4];
            fa_ldsm(r, base + (uint32_t)(np * 16 * LD + st * 16) * 2);
            fa_mma<E>(acc[2 * np], a, r[0], r[1]);
            fa_mma<E>(acc[2 * np + 1], a, r[2], r[3]);
        }
    }
}

/* acc (16 x N) += A . B: A (16 x 16 KS) in fragments a; B a 16 KS x N shared tile at b whose row
 * k holds the n values (rows of LD), read transposed. */
template <class E, int KS, int N, int LD>
__device__ __forceinline__ void fa_mm_nn(float (&acc)[N / 8][4], const uint32_t (&a)[KS][4],
                                         uint32_t b, int lane) {
    const uint32_t base = b + (uint32_t)(((lane & 7) + (lane & 8)) * LD + (lane >> 4) * 8) * 2;
#pragma unroll
    for (int st = 0; st < KS; st++)
#pragma unroll
        for (int np = 0; np < N / 16; np++) {
            uint32_t r[4];
            fa_ldsm_t(r, base + (uint32_t)(st * 16 * LD + np * 16) * 2);
            fa_mma<E>(acc[2 * np], a[st], r[0], r[1]);
            fa_mma<E>(acc[2 * np + 1], a[st], r[2], r[3]);
        }
}

/* The A fragments (16 x N, rounded to E) of an accumulator tile p (16 x N). */
template <class E, int N>
__device__ __forceinline__ void fa_tofrag(uint32_t (&a)[N / 16][4], const float (&p)[N / 8][4]) {
#pragma unroll
    for (int st = 0; st < N / 16; st++) {
        a[st][0] = fa_pack<E>(p[2 * st][0], p[2 * st][1]);
        a[st][1] = fa_pack<E>(p[2 * st][2], p[2 * st][3]);
        a[st][2] = fa_pack<E>(p[2 * st + 1][0], p[2 * st + 1][1]);
        a[st][3] = fa_pack<E>(p[2 * st + 1][2], p[2 * st + 1][3]);
    }
}

template <int N>
__device__ __forceinline__ void fa_zero(float (&x)[N][4]) {
#pragma unroll
    for (int j = 0; j < N; j++) x[j][0] = x[j][1] = x[j][2] = x[j][3] = 0.f;
}

/* Column of query head h and of kv head kvh in a qkv row (Megatron's grouped order). */
__device__ __forceinline__ int fa_qcol(int h, int G, int D) { return ((h / G) * (G + 2) + h % G) * D; }
__device__ __forceinline__ int fa_kcol(int kvh, int G, int D) { return (kvh * (G + 2) + G) * D; }

/* ---- layout conversion ---- */

/* Slot blockIdx.y of E head-major copies: first the slots of qkv[B,T,(NH+2NKV)*D] in
 * grouped order, with q set all of them (q heads to q[B,NH,T,D], k and v heads to
 * k, v[B,NKV,T,D]), with q NULL only the k and v slots; then, with dout set, the NH heads of
 * dout[B,T,NH*D] to d[B,NH,T,D], and Dv[B,NH,T] = rowsum(dout * out) over each head's D columns
 * in fp32 (out[B,T,NH*D]). A thread takes 8 columns of a row; the D / 8 threads of a row are
 * aligned lanes of one warp (blocks are whole warps, so lane = i % 32, and D / 8 divides 32),
 * which add their partial sums in a fixed butterfly: Dv does not depend on the launch shape. */
template <class E, class X, int D>
__global__ void fa_convert_kernel(E *q, E *k, E *v, E *d, float *Dv, const X *qkv, const X *dout,
                                  const X *out, int B, int T, int NH, int NKV) {
    static_assert(D % 8 == 0 && D / 8 <= 16, "a row's threads are at most half a warp");
    const int G = NH / NKV, qslots = q ? NH + 2 * NKV : 2 * NKV, y = blockIdx.y;
    int slots, slot, head, heads;
    const X *src;
    E *dst;
    if (y < qslots) {
        const int grp = q ? y / (G + 2) : y / 2, in = q ? y % (G + 2) : G + y % 2;
        src = qkv;
        slots = NH + 2 * NKV;
        slot = grp * (G + 2) + in;
        head = in < G ? grp * G + in : grp;
        heads = in < G ? NH : NKV;
        dst = in < G ? q : in == G ? k : v;
    } else {
        src = dout;
        slots = heads = NH;
        slot = head = y - qslots;
        dst = d;
    }
    const bool dot = y >= qslots; /* the block's slot is a head of dout */
    const int lane = threadIdx.x & 31;
    const unsigned row_lanes = ((1u << (D / 8)) - 1) << (lane & ~(D / 8 - 1));
    const int64_t n = (int64_t)B * T * (D / 8);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int c8 = (int)(i % (D / 8)), bt = (int)(i / (D / 8)), b = bt / T, t = bt - b * T;
        const int64_t off = ((int64_t)bt * slots + slot) * D + c8 * 8;
        float x[8];
        fa_io<X>::ld8(src + off, x);
        uint4 o;
        o.x = fa_pack<E>(x[0], x[1]);
        o.y = fa_pack<E>(x[2], x[3]);
        o.z = fa_pack<E>(x[4], x[5]);
        o.w = fa_pack<E>(x[6], x[7]);
        *(uint4 *)(dst + (((int64_t)b * heads + head) * T + t) * D + c8 * 8) = o;
        if (dot) {
            float u[8];
            fa_io<X>::ld8(out + off, u);
            float s = x[0] * u[0];
#pragma unroll
            for (int j = 1; j < 8; j++) s = fmaf(x[j], u[j], s);
#pragma unroll
            for (int m = D / 16; m > 0; m >>= 1) s += __shfl_xor_sync(row_lanes, s, m);
            if (c8 == 0) Dv[((int64_t)b * heads + head) * T + t] = s;
        }
    }
}

/* ---- forward ---- */

template <class E, class X, int D, bool MASK>
__global__ void __launch_bounds__(FA_THREADS, D <= 64 ? 2 : 1)
    fa_forward_kernel(const fa_args<E, X> a) {
    constexpr int LD = fa_geom<D>::LD, KS = fa_geom<D>::KS, NT = fa_geom<D>::NT;
    constexpr uint32_t TILE = FA_KT * LD * 2; /* bytes of a K or V tile */
    extern __shared__ uint4 fa_smem[];
    const uint32_t sm = fa_sptr(fa_smem); /* buffer s: K tile at sm + 2 s TILE, V tile after it */
    const int T = a.T, NH = a.NH, G = NH / a.NKV;
    const int nqt = (T + FA_ROWS - 1) / FA_ROWS;
    int idx = blockIdx.x;
    const int h = idx % NH;
    idx /= NH;
    const int b = idx % a.B, i0 = (nqt - 1 - idx / a.B) * FA_ROWS;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int r0 = i0 + 16 * w; /* the warp's first query */
    const int64_t kvoff = ((int64_t)b * a.NKV + h / G) * T * D;
    const E *kh = a.k + kvoff, *vh = a.v + kvoff;
    /* document mask: the block's keys start at the tile of its first row's document start; the
     * warp's rows start at dw0 (the earliest) .. dw1, rows g and g + 8 at drow[0], drow[1] */
    const int32_t *doc = MASK && a.doc ? a.doc + (int64_t)b * T : nullptr;
    const int tb = doc ? doc[i0] / FA_KT : 0;
    const int dw0 = doc && r0 < T ? doc[r0] : 0, dw1 = doc && r0 < T ? doc[min(r0 + 15, T - 1)] : 0;
    const int drow[2] = {doc && r0 + g < T ? doc[r0 + g] : 0,
                         doc && r0 + g + 8 < T ? doc[r0 + g + 8] : 0};
    /* key ends, alike from the other end: the block's keys end at its last row's; the warp's rows
     * end at ew0 (the earliest) .. ew1, rows g and g + 8 at erow[0], erow[1] */
    const int32_t *ke = MASK && a.kend ? a.kend + (int64_t)b * T : nullptr;
    const int kend =
        min(a.causal ? min(i0 + FA_ROWS, T) : T, ke ? ke[min(i0 + FA_ROWS, T) - 1] : T);
    const int ew0 = ke && r0 < T ? ke[r0] : T, ew1 = ke && r0 < T ? ke[min(r0 + 15, T - 1)] : T;
    const int erow[2] = {ke && r0 + g < T ? ke[r0 + g] : T,
                         ke && r0 + g + 8 < T ? ke[r0 + g + 8] : T};
    const int nt = (kend + FA_KT - 1) / FA_KT - tb; /* key tiles tb .. tb + nt - 1 */

    /* K and V tile tb + t into buffer t % FA_STAGES (nothing past the last tile); one group each */
    auto load_kv = [&](int t) {
        if (t < nt) {
            const uint32_t st = sm + (uint32_t)(t % FA_STAGES) * 2 * TILE;
            fa_load<D, FA_KT>(st, kh, (tb + t) * FA_KT, T);
            fa_load<D, FA_KT>(st + TILE, vh, (tb + t) * FA_KT, T);
        }
        fa_commit();
    };
#pragma unroll
    for (int t = 0; t < FA_STAGES - 1; t++) load_kv(t);

    /* the warp's q rows as E A fragments, straight from qkv (zeros past T) */
    uint32_t qf[KS][4];
    {
        const int64_t stride = (int64_t)(NH + 2 * a.NKV) * D;
        const X *qb = a.qkv + (int64_t)b * T * stride + fa_qcol(h, G, D);
        const int ra = r0 + g, rb = ra + 8;
        const X *pa = qb + (int64_t)min(ra, T - 1) * stride,
                *pb = qb + (int64_t)min(rb, T - 1) * stride;
#pragma unroll
        for (int st = 0; st < KS; st++) {
            const int c = 16 * st + 2 * t4;
            float2 x0 = make_float2(0.f, 0.f), x1 = x0, x2 = x0, x3 = x0;
            if (ra < T) {
                x0 = fa_io<X>::ld2(pa + c);
                x2 = fa_io<X>::ld2(pa + c + 8);
            }
            if (rb < T) {
                x1 = fa_io<X>::ld2(pb + c);
                x3 = fa_io<X>::ld2(pb + c + 8);
            }
            qf[st][0] = fa_pack<E>(x0.x, x0.y);
            qf[st][1] = fa_pack<E>(x1.x, x1.y);
            qf[st][2] = fa_pack<E>(x2.x, x2.y);
            qf[st][3] = fa_pack<E>(x3.x, x3.y);
        }
    }
    auto qfrag = [&](int st, uint32_t f[4]) {
#pragma unroll
        for (int e = 0; e < 4; e++) f[e] = qf[st][e];
    };

    float o[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    fa_zero(o);
    for (int t = 0; t < nt; t++) {
        /* tile t is in; after the barrier every warp is done with tile t - 1, whose buffer the
         * load of tile t + FA_STAGES - 1 takes */
        fa_wait<FA_STAGES - 2>();
        __syncthreads();
        load_kv(t + FA_STAGES - 1);
        const uint32_t ks = sm + (uint32_t)(t % FA_STAGES) * 2 * TILE, vs = ks + TILE;
        const int k0 = (tb + t) * FA_KT;
        if (r0 < T && (!a.causal || k0 <= r0 + 15) && k0 + FA_KT > dw0 && k0 < ew1) {
            float s[FA_KT / 8][4];
            fa_zero(s);
            fa_mm_nt<E, KS, FA_KT, LD>(s, qfrag, ks, lane); /* S = Q K^T */
            if ((a.causal && k0 + FA_KT - 1 > r0) || k0 + FA_KT > T || k0 < dw1 ||
                k0 + FA_KT > ew0) {
#pragma unroll
                for (int j = 0; j < FA_KT / 8; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int key = k0 + 8 * j + 2 * t4 + (e & 1), row = r0 + g + 8 * (e >> 1);
                        if (key >= T || (a.causal && key > row) || key < drow[e >> 1] ||
                            key >= erow[e >> 1])
                            s[j][e] = -INFINITY;
                    }
            }
            float mx[2] = {-INFINITY, -INFINITY}, ref[2];
#pragma unroll
            for (int j = 0; j < FA_KT / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
#pragma unroll
            for (int hi = 0; hi < 2; hi++) {
                mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 1));
                mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 2));
                const float mn = fmaxf(m[hi], mx[hi] * a.sl2);
                ref[hi] = mn == -INFINITY ? 0.f : mn;
                const float alpha = fa_exp2(m[hi] - ref[hi]);
                m[hi] = mn;
                l[hi] *= alpha;
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    o[j][2 * hi] *= alpha;
                    o[j][2 * hi + 1] *= alpha;
                }
            }
#pragma unroll
            for (int j = 0; j < FA_KT / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float p = fa_exp2(fmaf(s[j][e], a.sl2, -ref[e >> 1]));
                    l[e >> 1] += p;
                    s[j][e] = p;
                }
            uint32_t pf[FA_KT / 16][4];
            fa_tofrag<E, FA_KT>(pf, s);
            fa_mm_nn<E, FA_KT / 16, D, LD>(o, pf, vs, lane); /* O += P V */
        }
    }
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 1);
        l[hi] += __shfl_xor_sync(0xffffffffu, l[hi], 2);
        const int row = r0 + g + 8 * hi;
        if (row >= T) continue;
        /* a row that sees no key (l == 0): out 0, lse -inf */
        const bool seen = l[hi] > 0.f;
        const float inv = seen ? 1.0f / l[hi] : 0.f;
        X *orow = a.out + (((int64_t)b * T + row) * NH + h) * D;
#pragma unroll
        for (int j = 0; j < NT; j++)
            fa_io<X>::st2(orow + 8 * j + 2 * t4, o[j][2 * hi] * inv, o[j][2 * hi + 1] * inv);
        if (t4 == 0)
            a.lse_out[((int64_t)b * NH + h) * T + row] =
                seen ? (m[hi] + log2f(l[hi])) / FA_LOG2E : -INFINITY;
    }
}

/* ---- backward: dk, dv ---- */

template <class E, class X, int D, bool MASK>
__global__ void __launch_bounds__(FA_THREADS, 1) fa_dkdv_kernel(const fa_args<E, X> a) {
    constexpr int LD = fa_geom<D>::LD, KS = fa_geom<D>::KS, NT = fa_geom<D>::NT;
    constexpr int QT = fa_geom<D>::QT;
    constexpr bool RES = fa_geom<D>::RES;
    constexpr uint32_t BLK = FA_ROWS * LD * 2;            /* bytes of the block's K or V rows */
    constexpr uint32_t QTILE = QT * LD * 2;               /* bytes of a q or dout tile */
    /* q, dout, lse, D (, the rows' document starts and key ends) */
    constexpr uint32_t STAGE = 2 * QTILE + (MASK ? 4 : 2) * QT * 4;
    extern __shared__ uint4 fa_smem[];
    const char *smc = (const char *)fa_smem;
    const uint32_t sm = fa_sptr(fa_smem); /* K rows, V rows, then FA_STAGES stages */
    const int T = a.T, NH = a.NH, NKV = a.NKV, G = NH / NKV;
    int idx = blockIdx.x;
    const int kvh = idx % NKV;
    idx /= NKV;
    const int b = idx % a.B, k0 = idx / a.B * FA_ROWS;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int kw = k0 + 16 * w; /* the warp's first key */
    const int64_t kvoff = ((int64_t)b * NKV + kvh) * T * D;
    int qstart = a.causal ? k0 : 0; /* a multiple of QT */
    /* key ends: the query tiles whose last row ends at or before the block's first key see none
     * of its keys; key ends do not decrease, so they come first (found by bisection) */
    const int32_t *ke = MASK && a.kend ? a.kend + (int64_t)b * T : nullptr;
    if (ke) {
        int lo = qstart / QT, hi = (T + QT - 1) / QT;
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (ke[min((mid + 1) * QT, T) - 1] > k0)
                hi = mid;
            else
                lo = mid + 1;
        }
        qstart = lo * QT;
    }
    /* document mask: the query tiles from the first whose first row's document starts after the
     * block's last key on see none of its keys (document starts do not decrease) */
    const int32_t *doc = MASK && a.doc ? a.doc + (int64_t)b * T : nullptr;
    int nq = qstart < T ? (T - qstart + QT - 1) / QT : 0;
    if (doc) {
        const int klast = min(k0 + FA_ROWS, T) - 1;
        int q = 0;
        while (q < nq && doc[qstart + q * QT] <= klast)
            q++;
        nq = q;
    }
    const int n = G * nq;

    /* tile it (query rows qstart + (it % nq) QT .. of query head kvh G + it / nq) into stage
     * it % FA_STAGES (nothing past the last tile); one group each */
    auto load_tile = [&](int it) {
        if (it < n) {
            const int i0 = qstart + (it % nq) * QT;
            const int64_t hq = (int64_t)b * NH + kvh * G + it / nq;
            const uint32_t st = sm + 2 * BLK + (uint32_t)(it % FA_STAGES) * STAGE;
            fa_load<D, QT>(st, a.q + hq * T * D, i0, T);
            fa_load<D, QT>(st + QTILE, a.dout + hq * T * D, i0, T);
            if (threadIdx.x < 2 * QT) {
                const int c = threadIdx.x % QT;
                const bool ok = i0 + c < T;
                fa_cp4(st + 2 * QTILE + threadIdx.x * 4,
                       (threadIdx.x < QT ? a.lse : a.Dv) + hq * T + (ok ? i0 + c : 0), ok);
            } else if (doc && threadIdx.x < 3 * QT) { /* the rows' document starts */
                const int c = threadIdx.x - 2 * QT;
                const bool ok = i0 + c < T;
                fa_cp4(st + 2 * QTILE + threadIdx.x * 4, doc + (ok ? i0 + c : 0), ok);
            } else if (ke && threadIdx.x >= 3 * QT && threadIdx.x < 4 * QT) { /* key ends */
                const int c = threadIdx.x - 3 * QT;
                const bool ok = i0 + c < T;
                fa_cp4(st + 2 * QTILE + threadIdx.x * 4, ke + (ok ? i0 + c : 0), ok);
            }
        }
        fa_commit();
    };

    fa_load<D, FA_ROWS>(sm, a.k + kvoff, k0, T); /* in the group of tile 0 */
    fa_load<D, FA_ROWS>(sm + BLK, a.v + kvoff, k0, T);
#pragma unroll
    for (int it = 0; it < FA_STAGES - 1; it++) load_tile(it);
    const uint32_t kws = sm + (uint32_t)(16 * w * LD) * 2, vws = kws + BLK;
    uint32_t kf[RES ? KS : 1][4], vf[RES ? KS : 1][4];
    if constexpr (RES) {
        fa_wait<FA_STAGES - 2>();
        __syncthreads();
#pragma unroll
        for (int st = 0; st < KS; st++) {
            fa_afrag<LD>(kf[st], kws, st, lane);
            fa_afrag<LD>(vf[st], vws, st, lane);
        }
    }
    auto kfrag = [&](int st, uint32_t f[4]) {
        if constexpr (RES) {
#pragma unroll
            for (int e = 0; e < 4; e++) f[e] = kf[st][e];
        } else {
            fa_afrag<LD>(f, kws, st, lane);
        }
    };
    auto vfrag = [&](int st, uint32_t f[4]) {
        if constexpr (RES) {
#pragma unroll
            for (int e = 0; e < 4; e++) f[e] = vf[st][e];
        } else {
            fa_afrag<LD>(f, vws, st, lane);
        }
    };

    float dk[NT][4], dv[NT][4];
    fa_zero(dk);
    fa_zero(dv);
    for (int it = 0; it < n; it++) {
        fa_wait<FA_STAGES - 2>(); /* as in the forward */
        __syncthreads();
        load_tile(it + FA_STAGES - 1);
        const int i0 = qstart + (it % nq) * QT;
        const uint32_t qs = sm + 2 * BLK + (uint32_t)(it % FA_STAGES) * STAGE, dos = qs + QTILE;
        const float *ls = (const float *)(smc + 2 * BLK + (it % FA_STAGES) * STAGE + 2 * QTILE);
        const float *ds = ls + QT;
        const int *dq0 = (const int *)(ds + QT); /* document starts of the tile's rows (doc) */
        const int *de0 = dq0 + QT;               /* key ends of the tile's rows (ke) */
        /* with documents: the warp's keys lie before every row's document (skipped), or some
         * row's document starts after the warp's first key (masked); with key ends: every row
         * ends at or before the warp's first key (skipped), or some row ends before its last
         * key (masked) */
        const bool docs_skip = doc && doc[i0] > kw + 15;
        const bool docs_mask = doc && doc[min(i0 + QT - 1, T - 1)] > kw;
        const bool ends_skip = ke && ke[min(i0 + QT, T) - 1] <= kw;
        const bool ends_mask = ke && ke[i0] < kw + 16;
        if (kw < T && (!a.causal || kw <= i0 + QT - 1) && !docs_skip && !ends_skip) {
            float s[QT / 8][4], dp[QT / 8][4];
            fa_zero(s);
            fa_zero(dp);
            fa_mm_nt<E, KS, QT, LD>(s, kfrag, qs, lane);   /* S^T = K Q^T */
            fa_mm_nt<E, KS, QT, LD>(dp, vfrag, dos, lane); /* dP^T = V dO^T */
            const bool mask = a.causal && kw + 15 > i0;
#pragma unroll
            for (int j = 0; j < QT / 8; j++) {
                const float2 lq = *(const float2 *)(ls + 8 * j + 2 * t4);
                const float2 dq = *(const float2 *)(ds + 8 * j + 2 * t4);
                const int2 d0 = docs_mask ? *(const int2 *)(dq0 + 8 * j + 2 * t4) : make_int2(0, 0);
                const int2 e0 = ends_mask ? *(const int2 *)(de0 + 8 * j + 2 * t4) : make_int2(T, T);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float lv = (e & 1) ? lq.y : lq.x, dd = (e & 1) ? dq.y : dq.x;
                    float p = fa_exp2(fmaf(s[j][e], a.sl2, -lv * FA_LOG2E));
                    const int key = kw + g + 8 * (e >> 1);
                    if (mask && key > i0 + 8 * j + 2 * t4 + (e & 1)) p = 0.f;
                    if (docs_mask && key < ((e & 1) ? d0.y : d0.x)) p = 0.f;
                    if (ends_mask && key >= ((e & 1) ? e0.y : e0.x)) p = 0.f;
                    s[j][e] = p;
                    dp[j][e] = p * (dp[j][e] - dd);
                }
            }
            uint32_t pf[QT / 16][4], sf[QT / 16][4];
            fa_tofrag<E, QT>(pf, s);
            fa_tofrag<E, QT>(sf, dp);
            fa_mm_nn<E, QT / 16, D, LD>(dv, pf, dos, lane); /* dV += P^T dO */
            fa_mm_nn<E, QT / 16, D, LD>(dk, sf, qs, lane);  /* dK += dS^T Q */
        }
    }
    const int64_t stride = (int64_t)(NH + 2 * NKV) * D;
    const int kc = fa_kcol(kvh, G, D), vc = kc + D;
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int key = kw + g + 8 * hi;
        if (key >= T) continue;
        X *r = a.dqkv + ((int64_t)b * T + key) * stride;
#pragma unroll
        for (int j = 0; j < NT; j++) {
            fa_io<X>::st2(r + kc + 8 * j + 2 * t4, dk[j][2 * hi] * a.scale,
                          dk[j][2 * hi + 1] * a.scale);
            fa_io<X>::st2(r + vc + 8 * j + 2 * t4, dv[j][2 * hi], dv[j][2 * hi + 1]);
        }
    }
}

/* ---- backward: dq ---- */

template <class E, class X, int D, bool MASK>
__global__ void __launch_bounds__(FA_THREADS, 1) fa_dq_kernel(const fa_args<E, X> a) {
    constexpr int LD = fa_geom<D>::LD, KS = fa_geom<D>::KS, NT = fa_geom<D>::NT;
    constexpr bool RES = fa_geom<D>::RES;
    constexpr uint32_t BLK = FA_ROWS * LD * 2; /* bytes of the block's q or dout rows */
    constexpr uint32_t TILE = FA_KT * LD * 2;  /* bytes of a K or V tile */
    extern __shared__ uint4 fa_smem[];
    const uint32_t sm = fa_sptr(fa_smem); /* q rows, dout rows, then FA_STAGES buffers of K, V */
    const int T = a.T, NH = a.NH, G = NH / a.NKV;
    const int nqt = (T + FA_ROWS - 1) / FA_ROWS;
    int idx = blockIdx.x;
    const int h = idx % NH;
    idx /= NH;
    const int b = idx % a.B, i0 = (nqt - 1 - idx / a.B) * FA_ROWS;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int r0 = i0 + 16 * w;
    const int64_t hq = (int64_t)b * NH + h, kvoff = ((int64_t)b * a.NKV + h / G) * T * D;
    const E *kh = a.k + kvoff, *vh = a.v + kvoff;
    /* document mask and key ends, as in the forward */
    const int32_t *doc = MASK && a.doc ? a.doc + (int64_t)b * T : nullptr;
    const int tb = doc ? doc[i0] / FA_KT : 0;
    const int dw0 = doc && r0 < T ? doc[r0] : 0, dw1 = doc && r0 < T ? doc[min(r0 + 15, T - 1)] : 0;
    const int drow[2] = {doc && r0 + g < T ? doc[r0 + g] : 0,
                         doc && r0 + g + 8 < T ? doc[r0 + g + 8] : 0};
    const int32_t *ke = MASK && a.kend ? a.kend + (int64_t)b * T : nullptr;
    const int kend =
        min(a.causal ? min(i0 + FA_ROWS, T) : T, ke ? ke[min(i0 + FA_ROWS, T) - 1] : T);
    const int ew0 = ke && r0 < T ? ke[r0] : T, ew1 = ke && r0 < T ? ke[min(r0 + 15, T - 1)] : T;
    const int erow[2] = {ke && r0 + g < T ? ke[r0 + g] : T,
                         ke && r0 + g + 8 < T ? ke[r0 + g + 8] : T};
    const int nt = (kend + FA_KT - 1) / FA_KT - tb;

    /* as in the forward, after the q and dout rows */
    auto load_kv = [&](int t) {
        if (t < nt) {
            const uint32_t st = sm + 2 * BLK + (uint32_t)(t % FA_STAGES) * 2 * TILE;
            fa_load<D, FA_KT>(st, kh, (tb + t) * FA_KT, T);
            fa_load<D, FA_KT>(st + TILE, vh, (tb + t) * FA_KT, T);
        }
        fa_commit();
    };
    fa_load<D, FA_ROWS>(sm, a.q + hq * T * D, i0, T); /* in the group of tile 0 */
    fa_load<D, FA_ROWS>(sm + BLK, a.dout + hq * T * D, i0, T);
#pragma unroll
    for (int t = 0; t < FA_STAGES - 1; t++) load_kv(t);
    float lr[2], dr[2];
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int row = r0 + g + 8 * hi;
        lr[hi] = row < T ? a.lse[hq * T + row] * FA_LOG2E : 0.f;
        dr[hi] = row < T ? a.Dv[hq * T + row] : 0.f;
    }
    const uint32_t qws = sm + (uint32_t)(16 * w * LD) * 2, ows = qws + BLK;
    uint32_t qf[RES ? KS : 1][4], of[RES ? KS : 1][4];
    if constexpr (RES) {
        fa_wait<FA_STAGES - 2>();
        __syncthreads();
#pragma unroll
        for (int st = 0; st < KS; st++) {
            fa_afrag<LD>(qf[st], qws, st, lane);
            fa_afrag<LD>(of[st], ows, st, lane);
        }
    }
    auto qfrag = [&](int st, uint32_t f[4]) {
        if constexpr (RES) {
#pragma unroll
            for (int e = 0; e < 4; e++) f[e] = qf[st][e];
        } else {
            fa_afrag<LD>(f, qws, st, lane);
        }
    };
    auto ofrag = [&](int st, uint32_t f[4]) {
        if constexpr (RES) {
#pragma unroll
            for (int e = 0; e < 4; e++) f[e] = of[st][e];
        } else {
            fa_afrag<LD>(f, ows, st, lane);
        }
    };

    float dq[NT][4];
    fa_zero(dq);
    for (int t = 0; t < nt; t++) {
        fa_wait<FA_STAGES - 2>(); /* as in the forward */
        __syncthreads();
        load_kv(t + FA_STAGES - 1);
        const uint32_t ks = sm + 2 * BLK + (uint32_t)(t % FA_STAGES) * 2 * TILE, vs = ks + TILE;
        const int k0 = (tb + t) * FA_KT;
        if (r0 < T && (!a.causal || k0 <= r0 + 15) && k0 + FA_KT > dw0 && k0 < ew1) {
            float s[FA_KT / 8][4], dp[FA_KT / 8][4];
            fa_zero(s);
            fa_zero(dp);
            fa_mm_nt<E, KS, FA_KT, LD>(s, qfrag, ks, lane);  /* S = Q K^T */
            fa_mm_nt<E, KS, FA_KT, LD>(dp, ofrag, vs, lane); /* dP = dO V^T */
            const bool mask = (a.causal && k0 + FA_KT - 1 > r0) || k0 + FA_KT > T || k0 < dw1 ||
                              k0 + FA_KT > ew0;
#pragma unroll
            for (int j = 0; j < FA_KT / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hi = e >> 1;
                    float p = fa_exp2(fmaf(s[j][e], a.sl2, -lr[hi]));
                    if (mask) {
                        const int key = k0 + 8 * j + 2 * t4 + (e & 1), row = r0 + g + 8 * hi;
                        if (key >= T || (a.causal && key > row) || key < drow[hi] ||
                            key >= erow[hi])
                            p = 0.f;
                    }
                    dp[j][e] = p * (dp[j][e] - dr[hi]);
                }
            uint32_t sf[FA_KT / 16][4];
            fa_tofrag<E, FA_KT>(sf, dp);
            fa_mm_nn<E, FA_KT / 16, D, LD>(dq, sf, ks, lane); /* dQ += dS K */
        }
    }
    const int64_t stride = (int64_t)(NH + 2 * a.NKV) * D;
    const int qc = fa_qcol(h, G, D);
#pragma unroll
    for (int hi = 0; hi < 2; hi++) {
        const int row = r0 + g + 8 * hi;
        if (row >= T) continue;
        X *r = a.dqkv + ((int64_t)b * T + row) * stride + qc;
#pragma unroll
        for (int j = 0; j < NT; j++)
            fa_io<X>::st2(r + 8 * j + 2 * t4, dq[j][2 * hi] * a.scale,
                          dq[j][2 * hi + 1] * a.scale);
    }
}

/* ---- host side ---- */

int loom_cuda_attention_bf16_ok(struct loom_backend *be, const struct loom_attn *a) {
    return loom_cuda_impl(be)->matmul_bf16 && (a->HS == 64 || a->HS == 128) &&
           a->dropout_p == 0.0f && a->scale > 0.0f && a->NKV > 0 && a->NH % a->NKV == 0 &&
           a->NH + 2 * a->NKV <= 65535 && a->B <= 65535 && a->B * a->T <= INT32_MAX;
}

template <class E, class X>
static fa_args<E, X> fa_make_args(const struct loom_attn *a) {
    fa_args<E, X> p = {};
    p.B = (int)a->B;
    p.T = (int)a->T;
    p.NH = (int)a->NH;
    p.NKV = (int)a->NKV;
    p.causal = a->causal;
    p.doc = a->doc_start;
    p.kend = a->key_end;
    p.sl2 = a->scale * FA_LOG2E;
    p.scale = a->scale;
    return p;
}

/* E copies in the attention workspace: k and v of qkv, and q when with_q; dout's heads when
 * dout is given, with Dv[B,NH,T] = rowsum(dout * out) per head (fp32). One launch. */
template <class E, class X, int D>
static void fa_convert(struct loom_backend *be, const X *qkv, const X *dout, const X *out,
                       float *Dv, int with_q, const struct loom_attn *a, fa_args<E, X> *p) {
    struct loom_cuda *c = loom_cuda_impl(be);
    size_t nq = (size_t)(a->B * a->NH * a->T * D), nk = (size_t)(a->B * a->NKV * a->T * D);
    loom_cuda_grow(be, &c->attn_ws, &c->attn_ws_bytes, (2 * nq + 2 * nk) * sizeof(E),
                   "16-bit attention workspace");
    E *q = (E *)c->attn_ws, *k = q + nq, *v = k + nk, *d = v + nk;
    p->q = q;
    p->k = k;
    p->v = v;
    p->dout = d;
    LOOM_ASSERT(loom_aligned(16, qkv));
    LOOM_ASSERT(!dout || (out && Dv && loom_aligned(16, dout, out)));
    int64_t chunks = a->B * a->T * (D / 8);
    unsigned bx = (unsigned)((chunks + 255) / 256);
    if (bx > 4096) bx = 4096;
    unsigned slots = (unsigned)((with_q ? a->NH + 2 * a->NKV : 2 * a->NKV) + (dout ? a->NH : 0));
    fa_convert_kernel<E, X, D><<<dim3(bx, slots), 256, 0, loom_cuda_stream(be)>>>(
        with_q ? q : NULL, k, v, d, Dv, qkv, dout, out, p->B, p->T, p->NH, p->NKV);
    LOOM_CUDA_LAUNCHED();
}

template <class E, class X, int D>
static void fa_forward(struct loom_backend *be, void *out, float *lse, const void *qkv,
                       const struct loom_attn *a) {
    fa_args<E, X> p = fa_make_args<E, X>(a);
    fa_convert<E, X, D>(be, (const X *)qkv, NULL, NULL, NULL, 0, a, &p);
    p.qkv = (const X *)qkv;
    p.out = (X *)out;
    p.lse_out = lse;
    size_t smem = (size_t)FA_STAGES * 2 * FA_KT * fa_geom<D>::LD * sizeof(E); /* K, V */
    /* the kernel without document or key-end masks is compiled without their code */
    auto kernel = a->doc_start || a->key_end ? fa_forward_kernel<E, X, D, true>
                                             : fa_forward_kernel<E, X, D, false>;
    LOOM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    unsigned blocks = (unsigned)((a->T + FA_ROWS - 1) / FA_ROWS * a->NH * a->B);
    kernel<<<blocks, FA_THREADS, smem, loom_cuda_stream(be)>>>(p);
    LOOM_CUDA_LAUNCHED();
}

template <class E, class X, int D>
static void fa_backward(struct loom_backend *be, void *dqkv, const void *dout, const void *out,
                        const float *lse, const void *qkv, const struct loom_attn *a) {
    typedef fa_geom<D> geo;
    fa_args<E, X> p = fa_make_args<E, X>(a);
    float *Dv = (float *)loom_cuda_scratch(be, (size_t)(a->B * a->NH * a->T) * sizeof(float));
    fa_convert<E, X, D>(be, (const X *)qkv, (const X *)dout, (const X *)out, Dv, 1, a, &p);
    p.lse = lse;
    p.Dv = Dv;
    p.dqkv = (X *)dqkv;
    cudaStream_t st = loom_cuda_stream(be);
    unsigned tiles = (unsigned)((a->T + FA_ROWS - 1) / FA_ROWS);
    /* K, V rows; stages of q, dout, lse, D and with masks the rows' document starts and key
     * ends (the kernels without masks are compiled without their code) */
    const bool masked = a->doc_start || a->key_end;
    size_t smem = (size_t)2 * FA_ROWS * geo::LD * sizeof(E) +
                  FA_STAGES * ((size_t)2 * geo::QT * geo::LD * sizeof(E) +
                               (masked ? 4 : 2) * geo::QT * sizeof(float));
    auto dkdv = masked ? fa_dkdv_kernel<E, X, D, true> : fa_dkdv_kernel<E, X, D, false>;
    LOOM_CUDA_CHECK(
        cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dkdv<<<(unsigned)(tiles * a->NKV * a->B), FA_THREADS, smem, st>>>(p);
    LOOM_CUDA_LAUNCHED();
    /* q, dout rows; buffers of K, V */
    smem = (size_t)(2 * FA_ROWS + FA_STAGES * 2 * FA_KT) * geo::LD * sizeof(E);
    auto dq = masked ? fa_dq_kernel<E, X, D, true> : fa_dq_kernel<E, X, D, false>;
    LOOM_CUDA_CHECK(
        cudaFuncSetAttribute(dq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dq<<<(unsigned)(tiles * a->NH * a->B), FA_THREADS, smem, st>>>(p);
    LOOM_CUDA_LAUNCHED();
}

/* The instantiation for the backend's 16-bit type E (fp16 with matmul_f16, else bf16), the
 * op's array type X (fp32, or bf16 when loom_attn.dt is bf16: typed activations come with bf16
 * products only, activation_dtype) and head size (64 or 128). */
template <class E, class X>
static void fa_forward_d(struct loom_backend *be, void *out, float *lse, const void *qkv,
                         const struct loom_attn *a) {
    if (a->HS == 64)
        fa_forward<E, X, 64>(be, out, lse, qkv, a);
    else
        fa_forward<E, X, 128>(be, out, lse, qkv, a);
}

template <class E, class X>
static void fa_backward_d(struct loom_backend *be, void *dqkv, const void *dout, const void *out,
                          const float *lse, const void *qkv, const struct loom_attn *a) {
    if (a->HS == 64)
        fa_backward<E, X, 64>(be, dqkv, dout, out, lse, qkv, a);
    else
        fa_backward<E, X, 128>(be, dqkv, dout, out, lse, qkv, a);
}

void loom_cuda_attention_forward_bf16(struct loom_backend *be, void *out, float *lse,
                                      const void *qkv, const struct loom_attn *a) {
    if (loom_cuda_impl(be)->matmul_f16) {
        LOOM_ASSERT(a->dt == LOOM_DTYPE_F32);
        fa_forward_d<f16, float>(be, out, lse, qkv, a);
    } else if (a->dt == LOOM_DTYPE_BF16) {
        fa_forward_d<bf16, bf16>(be, out, lse, qkv, a);
    } else {
        fa_forward_d<bf16, float>(be, out, lse, qkv, a);
    }
}

void loom_cuda_attention_backward_bf16(struct loom_backend *be, void *dqkv, const void *dout,
                                       const void *out, const float *lse, const void *qkv,
                                       const struct loom_attn *a) {
    if (loom_cuda_impl(be)->matmul_f16) {
        LOOM_ASSERT(a->dt == LOOM_DTYPE_F32);
        fa_backward_d<f16, float>(be, dqkv, dout, out, lse, qkv, a);
    } else if (a->dt == LOOM_DTYPE_BF16) {
        fa_backward_d<bf16, bf16>(be, dqkv, dout, out, lse, qkv, a);
    } else {
        fa_backward_d<bf16, float>(be, dqkv, dout, out, lse, qkv, a);
    }
}
