/* Attention and rotary embedding on the CPU (OpenMP + BLAS).
 *
 * Shapes: qkv[B,T,R] with R = (NH + 2*NKV)*HS; a row holds NKV groups, each
 * [NH/NKV query heads | 1 key head | 1 value head] of HS floats. out[B,T,NH*HS] (head h at
 * columns h*HS), lse[B,NH,T].
 *
 * Forward, per (b, h), with query head h reading kv group g = h / (NH/NKV):
 *   S = scale * q k^T (+ masks: key index <= query index under the causal mask, and
 *       doc_start[i] <= key index < key_end[i] where loom_attn gives them)
 *   P = softmax(S) row-wise, lse_i = log sum_j exp(S_ij)  (a row that sees no key: P = 0,
 *       lse = -inf, out = 0, and no gradient flows through it)
 *   Pd = P * M / (1 - p)      (M the dropout keep mask; Pd = P when p = 0)
 *   out = Pd v
 * Backward (probabilities recomputed from lse instead of stored):
 *   D_i = dout_i . out_i
 *   dPd = dout v^T;  dP = dPd * M / (1 - p)
 *   dS = P * (dP - D)          (since sum_j P_ij dP_ij = dout_i . out_i)
 *   dq = scale dS k;  dk = scale dS^T q;  dv = Pd^T dout
 *   dk, dv summed over the NH/NKV query heads of the group.
 * Rotary embedding is a rotation of each pair (x_i, x_{i+HS/2}); its gradient is the inverse
 * rotation, which is what inverse = 1 computes.
 *
 * Work split. Queries go in blocks of QBLK rows; a block meets only the keys from its rows'
 * earliest document start to their latest limit (causal or key_end; fully masked key blocks,
 * padded keys among them, are never touched), its scores live in a per-thread scratch
 * block, and the products run on the strided qkv rows in place (no copies but the key panels
 * below). The forward's tasks are the query blocks of one (b, h), all of them in one task when
 * there are heads enough for the threads. The backward runs one task per (b, kv group): the task
 * owns the group's dk and dv rows and accumulates them over its query heads and blocks in a
 * fixed order. So results are bit-identical run to run and for any thread count (no atomics, no
 * reductions across threads); the backward uses at most B*NKV threads.
 *
 * Products: with AVX-512 and HS % 16 == 0, register-tiled kernels (see "block products"), else
 * single-threaded sgemm (BLAS's own threads are held at 1 inside the parallel regions).
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_ops.h"
#include "loom/rng.h"

/* Query rows per task: a QBLK x T score block stays in L2 for T up to a few thousand. */
#define QBLK 64
/* Rows of a mix tile (see "block products"): a row of scores is read at most MIX_MR - 1 entries
 * past its causal limit. */
#define MIX_MR 6

/* ------------------------------------------------------------------------------------------ */
/* exp, max and sum over a row                                                                */

/* exp(x) for x <= ~88: Cody-Waite range reduction x = n ln2 + r, degree-6 polynomial for e^r,
 * then scale by 2^n through the exponent bits. Relative error about 1 ulp. Inputs below
 * -87.3 are clamped (result ~1e-38, not 0), which is harmless for softmax weights. */
static inline float exp_scalar(float in) {
    float x = in < -87.3f ? -87.3f : in;
    x = x > 88.3f ? 88.3f : x;
    x = x == x ? x : 0.0f; /* NaN: computed on 0 (a finite exponent), NaN returned below */
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23; /* n + 127 is in [1, 255] */
    float s;
    memcpy(&s, &e, sizeof s);
    return in == in ? p * s : in;
}

#if defined(__AVX512F__)
static inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)),
                                  23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline __m256 exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

/* max of x[0..n), n >= 1 */
static float row_max(const float *x, int64_t n) {
    int64_t j = 0;
    float m = x[0];
#if defined(__AVX512F__)
    if (n >= 16) {
        __m512 vm = _mm512_loadu_ps(x);
        for (j = 16; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + j));
        m = _mm512_reduce_max_ps(vm);
    }
#elif defined(__AVX2__)
    if (n >= 8) {
        __m256 vm = _mm256_loadu_ps(x);
        for (j = 8; j + 8 <= n; j += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + j));
        float t[8];
        _mm256_storeu_ps(t, vm);
        for (int l = 0; l < 8; l++) m = t[l] > m ? t[l] : m;
    }
#endif
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* x[j] = exp(x[j] - sub) for j < n; returns the sum of the results (fixed order). */
static float row_exp(float *x, int64_t n, float sub) {
    int64_t j = 0;
    float s = 0.0f;
#if defined(__AVX512F__)
    __m512 vs = _mm512_setzero_ps(), vsub = _mm512_set1_ps(sub);
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), vsub));
        _mm512_storeu_ps(x + j, e);
        vs = _mm512_add_ps(vs, e);
    }
    if (j < n) {
        __mmask16 k = (__mmask16)((1u << (n - j)) - 1u);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vsub));
        _mm512_mask_storeu_ps(x + j, k, e);
        vs = _mm512_add_ps(vs, _mm512_maskz_mov_ps(k, e));
        j = n;
    }
    s = _mm512_reduce_add_ps(vs);
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 vs = _mm256_setzero_ps(), vsub = _mm256_set1_ps(sub);
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vsub));
        _mm256_storeu_ps(x + j, e);
        vs = _mm256_add_ps(vs, e);
    }
    float t[8];
    _mm256_storeu_ps(t, vs);
    for (int l = 0; l < 8; l++) s += t[l];
#endif
    for (; j < n; j++) {
        x[j] = exp_scalar(x[j] - sub);
        s += x[j];
    }
    return s;
}

static float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    int64_t j = 0;
#if defined(__AVX512F__)
    __m512 vs = _mm512_setzero_ps();
    for (; j + 16 <= n; j += 16)
        vs = _mm512_fmadd_ps(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), vs);
    s = _mm512_reduce_add_ps(vs);
#endif
    for (; j < n; j++) s += a[j] * b[j];
    return s;
}

/* p[j] = exp(p[j] - lse) (the probabilities), dp[j] = p[j] * (dp[j] - D) (dS), for j < n */
static void row_softmax_grad(float *p, float *dp, int64_t n, float lse, float D) {
    int64_t j = 0;
#if defined(__AVX512F__)
    const __m512 vl = _mm512_set1_ps(lse), vd = _mm512_set1_ps(D);
    for (; j < n; j += 16) {
        const __mmask16 k = n - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j)) - 1u);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), vl));
        _mm512_mask_storeu_ps(p + j, k, e);
        const __m512 g = _mm512_mul_ps(e, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp + j), vd));
        _mm512_mask_storeu_ps(dp + j, k, g);
    }
#else
    row_exp(p, n, lse);
#endif
    for (; j < n; j++) dp[j] = p[j] * (dp[j] - D);
}

/* ------------------------------------------------------------------------------------------ */
/* dropout mask on attention probabilities                                                    */

/* x[j] = keep(idx0 + j) ? x[j] * mult : 0 for j < n, with keep = loom_rng_keep(seed, purpose,
 * idx, p): the same Philox4x32-10 words, 16 counters at a time, so the mask is bit for bit the
 * one loom_rng_keep draws element by element. */
#if defined(__AVX512F__)
/* 32 x 32 -> 64-bit products of every lane of a with m: high and low halves */
static inline void mul_hilo16(__m512i a, __m512i m, __m512i *hi, __m512i *lo) {
    const __m512i pe = _mm512_mul_epu32(a, m);                      /* even lanes */
    const __m512i po = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m); /* odd lanes */
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
    *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
}

static void row_dropout(float *x, int64_t n, uint64_t seed, uint64_t purpose, uint64_t idx0,
                        float p, float mult) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i M0 = _mm512_set1_epi32((int)0xD2511F53u), M1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    const __m512 vp = _mm512_set1_ps(p), vmult = _mm512_set1_ps(mult);
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const uint64_t base = idx0 + (uint64_t)j0;
        const __m512i blo = _mm512_set1_epi32((int)(uint32_t)base);
        __m512i c0 = _mm512_add_epi32(blo, iota);
        const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, blo);
        const __m512i bhi = _mm512_set1_epi32((int)(uint32_t)(base >> 32));
        __m512i c1 = _mm512_mask_add_epi32(bhi, carry, bhi, _mm512_set1_epi32(1));
        __m512i c2 = _mm512_set1_epi32((int)(uint32_t)purpose);
        __m512i c3 = _mm512_set1_epi32((int)(uint32_t)(purpose >> 32));
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int r = 0; r < 10; r++) {
            __m512i hi0, lo0, hi1, lo1;
            mul_hilo16(c0, M0, &hi0, &lo0);
            mul_hilo16(c2, M1, &hi1, &lo1);
            c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
            c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
            c1 = lo1;
            c3 = lo0;
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        /* uniform = ((w >> 8) + 1) / 2^24 exactly as loom_u32_to_unit computes it */
        const __m512 u = _mm512_mul_ps(
            _mm512_add_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(c0, 8)), _mm512_set1_ps(1.0f)),
            _mm512_set1_ps(1.0f / 16777216.0f));
        const __mmask16 in = n - j0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - j0)) - 1u);
        const __mmask16 keep = _mm512_mask_cmp_ps_mask(in, u, vp, _CMP_GT_OQ);
        const __m512 xv = _mm512_maskz_loadu_ps(in, x + j0);
        _mm512_mask_storeu_ps(x + j0, in, _mm512_maskz_mul_ps(keep, xv, vmult));
    }
}
#else
static void row_dropout(float *x, int64_t n, uint64_t seed, uint64_t purpose, uint64_t idx0,
                        float p, float mult) {
    for (int64_t j = 0; j < n; j++)
        x[j] = loom_rng_keep(seed, purpose, idx0 + (uint64_t)j, p) ? x[j] * mult : 0.0f;
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* block products                                                                             */

/* Two products cover the whole op, on a block of at most QBLK query rows:
 *   scores: C[i][j] = alpha * A_i . B_j     (A_i a query-side row, B_j a key-side row, j < ncols)
 *   mix:    C_i (=|+=) alpha * r_i * sum_k A(i,k) B_k  (B_k a row of HS, A(i,k) = A[i*ars+k*acs])
 * scores is q k^T and dout v^T; mix is P v, dS k (dq), dS^T q (dk) and Pd^T dout (dv).
 * With AVX-512 and HS % 16 == 0 both run on register-tiled kernels, the key-side rows of scores
 * packed once per (b, kv group) as 16-key panels [HS][16]; otherwise they go to sgemm.
 *
 * Causal limits let both skip work that only produces masked (zero) entries:
 *   scores, hi >= 0: row i needs columns j < hi + i + 1 only;
 *   mix, hi >= 0: row i needs k < hi + i + 1 only; mix, lo >= 0: row i needs k >= i - lo only.
 * Entries skipped by scores are left unwritten; the caller zeroes each row past its limit. */

#if defined(__AVX512F__)
#define ATTN_TILED 1
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* C[0:mr][0:16*nj] = alpha * A[0:mr] . panels, K = HS */
ALWAYS_INLINE void scores_tile(int mr, int nj, float *C, int64_t ldc, const float *A, int64_t lda,
                               const float *Bt, int64_t K, float alpha) {
    __m512 acc[8][2];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nj; j++) acc[i][j] = _mm512_setzero_ps();
    const int64_t ps = 16 * K; /* floats per panel */
    for (int64_t d = 0; d < K; d++) {
        __m512 b[2];
        for (int j = 0; j < nj; j++) b[j] = _mm512_load_ps(Bt + j * ps + d * 16);
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_set1_ps(A[i * lda + d]);
            for (int j = 0; j < nj; j++) acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nj; j++) _mm512_storeu_ps(C + i * ldc + 16 * j, _mm512_mul_ps(acc[i][j], va));
}

/* C[0:mr][0:16*nv] (=|+=) alpha * r_i * sum_{k0<=k<k1} A(i,k) B_k[0:16*nv] */
ALWAYS_INLINE void mix_tile(int mr, int nv, float *C, int64_t ldc, int accumulate, float alpha,
                            const float *r, const float *A, int64_t ars, int64_t acs, int64_t k0,
                            int64_t k1, const float *B, int64_t ldb) {
    __m512 acc[MIX_MR][4];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; k++) {
        const float *b = B + k * ldb;
        __m512 bv[4];
        for (int v = 0; v < nv; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);
        for (int i = 0; i < mr; i++) {
            __m512 a = _mm512_set1_ps(A[i * ars + k * acs]);
            for (int v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(a, bv[v], acc[i][v]);
        }
    }
    for (int i = 0; i < mr; i++) {
        const __m512 f = _mm512_set1_ps(r ? alpha * r[i] : alpha);
        for (int v = 0; v < nv; v++) {
            __m512 x = _mm512_mul_ps(acc[i][v], f);
            if (accumulate) x = _mm512_add_ps(x, _mm512_loadu_ps(C + i * ldc + 16 * v));
            _mm512_storeu_ps(C + i * ldc + 16 * v, x);
        }
    }
}

/* specialisations with constant tile sizes, so the accumulators live in registers */
#define SCORES_CASE(MR)                                                                        \
    case MR:                                                                                   \
        if (nj == 2) scores_tile(MR, 2, C, ldc, A, lda, Bt, K, alpha);                         \
        else scores_tile(MR, 1, C, ldc, A, lda, Bt, K, alpha);                                 \
        break;
static void scores_tile_any(int mr, int nj, float *C, int64_t ldc, const float *A, int64_t lda,
                            const float *Bt, int64_t K, float alpha) {
    switch (mr) {
        SCORES_CASE(1) SCORES_CASE(2) SCORES_CASE(3) SCORES_CASE(4)
        SCORES_CASE(5) SCORES_CASE(6) SCORES_CASE(7) SCORES_CASE(8)
    }
}
#define MIX_CASE(MR)                                                                           \
    case MR:                                                                                   \
        switch (nv) {                                                                          \
        case 4: mix_tile(MR, 4, C, ldc, accumulate, alpha, r, A, ars, acs, k0, k1, B, ldb); break; \
        case 3: mix_tile(MR, 3, C, ldc, accumulate, alpha, r, A, ars, acs, k0, k1, B, ldb); break; \
        case 2: mix_tile(MR, 2, C, ldc, accumulate, alpha, r, A, ars, acs, k0, k1, B, ldb); break; \
        default: mix_tile(MR, 1, C, ldc, accumulate, alpha, r, A, ars, acs, k0, k1, B, ldb); break; \
        }                                                                                      \
        break;
static void mix_tile_any(int mr, int nv, float *C, int64_t ldc, int accumulate, float alpha,
                         const float *r, const float *A, int64_t ars, int64_t acs, int64_t k0,
                         int64_t k1, const float *B, int64_t ldb) {
    switch (mr) { MIX_CASE(1) MIX_CASE(2) MIX_CASE(3) MIX_CASE(4) MIX_CASE(5) MIX_CASE(6) }
}
#else
#define ATTN_TILED 0
#endif

#if ATTN_TILED
/* r[j] <- column j of the 16 x 16 block whose rows are r[0..15] */
ALWAYS_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) { /* per 128-bit lane: columns (0,1) and (2,3) of row pairs */
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) { /* u[4g + c]: column c of each lane, rows 4g..4g+3 */
        __m512d a0 = _mm512_castps_pd(t[4 * g]), a1 = _mm512_castps_pd(t[4 * g + 1]);
        __m512d a2 = _mm512_castps_pd(t[4 * g + 2]), a3 = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    for (int c = 0; c < 4; c++) { /* gather lane l of the four row groups: column c + 4l */
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
        __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
        r[c + 4] = _mm512_shuffle_f32x4(v1, w1, 0x88);
        r[c + 12] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
}

/* Key-side rows src[n][ld] -> panels dst[ceil(n/16)][HS][16], zero-padded to 16 keys
 * (HS % 16 == 0, dst 64-byte aligned). */
static void pack_panels(float *dst, const float *src, int64_t ld, int64_t n, int64_t HS) {
    for (int64_t p = 0; p * 16 < n; p++) {
        float *pan = dst + p * 16 * HS;
        const int64_t nr = n - p * 16 < 16 ? n - p * 16 : 16;
        for (int64_t d0 = 0; d0 < HS; d0 += 16) {
            __m512 r[16];
            for (int jj = 0; jj < 16; jj++)
                r[jj] = jj < nr ? _mm512_loadu_ps(src + (p * 16 + jj) * ld + d0) : _mm512_setzero_ps();
            transpose16(r);
            for (int c = 0; c < 16; c++) _mm512_store_ps(pan + (d0 + c) * 16, r[c]);
        }
    }
}
#else
static void pack_panels(float *dst, const float *src, int64_t ld, int64_t n, int64_t HS) {
    for (int64_t p = 0; p * 16 < n; p++)
        for (int64_t jj = 0; jj < 16; jj++)
            for (int64_t d = 0; d < HS; d++)
                dst[(p * 16 + d) * 16 + jj] = p * 16 + jj < n ? src[(p * 16 + jj) * ld + d] : 0.0f;
}
#endif

/* key-side operand of scores: rows (for sgemm) and, on the tiled path, their panels */
struct keys {
    const float *rows;
    int64_t ld;
    const float *panels;
};

/* C[m x ncols] (ldc) = alpha * A[m x HS] (lda) . keys^T */
static void scores(float *C, int64_t ldc, const float *A, int64_t lda, int64_t m, struct keys k,
                   int64_t ncols, int64_t HS, float alpha, int64_t hi) {
#if ATTN_TILED
    if (k.panels) {
        const int64_t ncv = (ncols + 15) / 16;
        for (int64_t jv = 0; jv < ncv; jv += 2) {
            const int nj = ncv - jv >= 2 ? 2 : 1;
            for (int64_t i0 = 0; i0 < m; i0 += 8) {
                const int mr = m - i0 >= 8 ? 8 : (int)(m - i0);
                if (hi >= 0 && 16 * jv >= hi + i0 + mr) continue; /* all masked */
                scores_tile_any(mr, nj, C + i0 * ldc + 16 * jv, ldc, A + i0 * lda, lda,
                                k.panels + jv * 16 * HS, HS, alpha);
            }
        }
        return;
    }
#endif
    (void)hi;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)ncols, (int)HS, alpha, A,
                (int)lda, k.rows, (int)k.ld, 0.0f, C, (int)ldc);
}

/* C[m x HS] (ldc) (=|+=) alpha * r_i * sum_{k<K} A(i,k) B[k] (ldb); A(i,k) = A[i*ars + k*acs],
 * one of ars, acs being 1. r may be NULL (all ones); with r the product is assigned. */
static void mix(float *C, int64_t ldc, int accumulate, float alpha, const float *r, const float *A,
                int64_t ars, int64_t acs, int64_t m, int64_t K, const float *B, int64_t ldb,
                int64_t HS, int64_t lo, int64_t hi, int tiled) {
    if (m <= 0) return;
#if ATTN_TILED
    if (tiled) {
        for (int64_t d0 = 0; d0 < HS; d0 += 64) {
            const int nv = HS - d0 >= 64 ? 4 : (int)((HS - d0) / 16);
            /* rows split evenly into tiles of MIX_MR or MIX_MR - 1 (a short last tile is slow) */
            const int64_t ntile = (m + MIX_MR - 1) / MIX_MR, base = m / ntile, extra = m % ntile;
            for (int64_t t = 0, i0 = 0; t < ntile; t++) {
                const int mr = (int)(base + (t < extra));
                int64_t k0 = 0, k1 = K;
                if (lo >= 0 && i0 - lo > k0) k0 = i0 - lo;
                if (hi >= 0 && hi + i0 + mr < k1) k1 = hi + i0 + mr;
                if (k1 < k0) k1 = k0;
                mix_tile_any(mr, nv, C + i0 * ldc + d0, ldc, accumulate, alpha, r ? r + i0 : NULL,
                             A + i0 * ars, ars, acs, k0, k1, B + d0, ldb);
                i0 += mr;
            }
        }
        return;
    }
#endif
    (void)lo, (void)hi, (void)tiled;
    LOOM_ASSERT(!(r && accumulate));
    if (acs == 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)HS, (int)K, alpha, A,
                    (int)ars, B, (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)HS, (int)K, alpha, A,
                    (int)acs, B, (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)ldc);
    if (r)
        for (int64_t i = 0; i < m; i++)
            for (int64_t d = 0; d < HS; d++) C[i * ldc + d] *= r[i];
}

/* Key-side gradient rows C[j] for j < m: C[j] (+)= alpha * sum_i S[i][j] B[i] over the query
 * rows i < K of a block (S with row stride ldS), accumulating into rows j < done and assigning
 * rows j >= done. lo as in mix (a causal block starting at query lo). */
static void mix_keys(float *C, int64_t ldc, int64_t done, float alpha, const float *S,
                     int64_t ldS, int64_t m, int64_t K, const float *B, int64_t ldb, int64_t HS,
                     int64_t lo, int tiled) {
    if (done > m) done = m;
    mix(C, ldc, 1, alpha, NULL, S, 1, ldS, done, K, B, ldb, HS, lo, -1, tiled);
    if (done < m) {
        LOOM_ASSERT(lo < 0 || done <= lo);
        mix(C + done * ldc, ldc, 0, alpha, NULL, S + done, 1, ldS, m - done, K, B, ldb, HS,
            lo < 0 ? -1 : lo - done, -1, tiled);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* geometry, threads, scratch                                                                 */

struct geom {
    int64_t B, T, NH, NKV, HS, Q, R, C; /* Q query heads per group, R qkv row, C out row */
    int64_t ldS, npan;                  /* score-row stride (T rounded to 16), key panels */
    int tiled;
};

static struct geom geom_of(const struct loom_attn *a) {
    struct geom g = {a->B, a->T, a->NH, a->NKV, a->HS, 0, 0, 0, 0, 0, 0};
    LOOM_ASSERT(a->NKV > 0 && a->NH % a->NKV == 0 && a->HS > 0);
    g.Q = a->NH / a->NKV;
    g.R = (a->NH + 2 * a->NKV) * a->HS;
    g.C = a->NH * a->HS;
    g.npan = (a->T + 15) / 16;
    g.ldS = 16 * g.npan;
    g.tiled = ATTN_TILED && a->HS % 16 == 0;
    return g;
}
/* column offsets within a qkv row */
static inline int64_t q_col(const struct geom *g, int64_t h) {
    return ((h / g->Q) * (g->Q + 2) + h % g->Q) * g->HS;
}
static inline int64_t k_col(const struct geom *g, int64_t kv) {
    return (kv * (g->Q + 2) + g->Q) * g->HS;
}

static int num_threads(const struct loom_backend *be) {
    int n = be && be->num_threads > 0 ? be->num_threads : omp_get_max_threads();
    return n > 0 ? n : 1;
}

/* The sgemm fallback is called from inside OpenMP threads: BLAS must not spawn its own threads
 * there (oversubscription, and its pool would serialise the concurrent calls). */
static int blas_single_begin(void) {
    int n = openblas_get_num_threads();
    if (n != 1) openblas_set_num_threads(1);
    return n;
}
static void blas_single_end(int n) {
    if (n != 1) openblas_set_num_threads(n);
}

static inline int64_t round16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* The masks of one sample: query i sees keys [key_lo(i), key_hi(i)) (loom_attn.doc_start,
 * key_end and the causal mask; doc, end: that sample's rows, or NULL). */
struct rowmask {
    const int32_t *doc, *end;
    int causal;
    int64_t T;
};
static struct rowmask rowmask_of(const struct loom_attn *a, int64_t b) {
    const struct rowmask m = {a->doc_start ? a->doc_start + b * a->T : NULL,
                              a->key_end ? a->key_end + b * a->T : NULL, a->causal, a->T};
    return m;
}
static inline int64_t key_lo(const struct rowmask *m, int64_t i) { return m->doc ? m->doc[i] : 0; }
static inline int64_t key_hi(const struct rowmask *m, int64_t i) {
    const int64_t h = m->causal ? i + 1 : m->T;
    return m->end && m->end[i] < h ? m->end[i] : h;
}

/* The keys [*ks, *ke) a block of queries [q0, q0 + n) of one sample needs: *ks the earliest
 * first key of the rows that see any, rounded down to a multiple of 16 (a key panel), and under
 * the causal mask at most q0; *ke the latest end. Key blocks outside are masked for every row
 * (padded keys cost no work); *ke <= *ks when no row sees a key. Checks the mask rows' contract
 * (in [0, T], non-decreasing) on the way. */
static void block_keys(const struct rowmask *m, int64_t q0, int64_t n, int64_t *ks, int64_t *ke) {
    int64_t lo = m->causal ? q0 : m->T, hi = 0;
    for (int64_t i = q0; i < q0 + n; i++) {
        if (m->doc)
            LOOM_ASSERT(m->doc[i] >= 0 && m->doc[i] <= m->T &&
                        (i == 0 || m->doc[i - 1] <= m->doc[i]));
        if (m->end)
            LOOM_ASSERT(m->end[i] >= 0 && m->end[i] <= m->T &&
                        (i == 0 || m->end[i - 1] <= m->end[i]));
        const int64_t l = key_lo(m, i), h = key_hi(m, i);
        if (h <= l) continue; /* the row sees no key */
        if (l < lo) lo = l;
        if (h > hi) hi = h;
    }
    *ks = lo & ~(int64_t)15;
    *ke = hi;
}

/* End of the part of a score row that products read, given its causal limit lim: up to kmax for
 * sgemm, only MIX_MR - 1 entries past lim on the tiled path. Entries in [lim, end) must be 0. */
static inline int64_t row_end(int64_t lim, int64_t kmax, int tiled) {
#if ATTN_TILED
    if (tiled && lim + MIX_MR - 1 < kmax) return lim + MIX_MR - 1;
#else
    (void)lim, (void)tiled;
#endif
    return kmax;
}
static inline void zero_range(float *s, int64_t from, int64_t to) {
    for (int64_t j = from; j < to; j++) s[j] = 0.0f;
}

static float *falloc(int64_t n) {
    void *p = NULL;
    LOOM_ASSERT(posix_memalign(&p, 64, (size_t)(n > 0 ? n : 16) * sizeof(float)) == 0);
    return p;
}

/* Workspace kept from call to call: fresh pages cost a fault each (dearly so in a VM), and the
 * forward's key panels are as large as k itself. Grow-only; a call that finds it taken (two
 * attention calls at once) allocates its own. */
static atomic_flag g_ws_busy = ATOMIC_FLAG_INIT;
static float *g_ws;
static int64_t g_ws_cap;

struct ws {
    float *p;
    int own; /* allocated for this call only */
};
static struct ws ws_get(int64_t n) {
    if (atomic_flag_test_and_set_explicit(&g_ws_busy, memory_order_acquire))
        return (struct ws){falloc(n), 1};
    if (g_ws_cap < n) {
        free(g_ws);
        g_ws = falloc(n);
        g_ws_cap = n;
    }
    return (struct ws){g_ws, 0};
}
static void ws_put(struct ws w) {
    if (w.own) free(w.p);
    else atomic_flag_clear_explicit(&g_ws_busy, memory_order_release);
}

/* ------------------------------------------------------------------------------------------ */
/* rotary embedding                                                                           */

void loom_cpu_rope(struct loom_backend *be, void *qkv_, enum loom_dtype dt, const int32_t *pos,
                   int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                   const struct loom_rope *rope, int inverse) {
    const int64_t D = loom_rope_dims(rope, HS);
    LOOM_ASSERT(NKV > 0 && NH % NKV == 0 && D % 2 == 0 && D <= HS);
    loom_cpu_need_f32(dt, "rope");
    float *qkv = qkv_;
    if (B <= 0 || T <= 0 || D == 0) return;
    const int64_t half = D / 2, Q = NH / NKV, R = (NH + 2 * NKV) * HS;
    if (pos)
        for (int64_t bt = 0; bt < B * T; bt++)
            LOOM_ASSERT(pos[bt] >= 0 && pos[bt] < T);
    /* cos/sin table [T][2][half] of positions pos0 + p, p < T; angles in double. The first D
     * values of a head rotate, pairs (i, i + D/2); the rest pass through. */
    float *tab = falloc(2 * T * half);
    double *inv_freq = malloc((size_t)half * sizeof(double));
    LOOM_ASSERT(inv_freq);
    for (int64_t i = 0; i < half; i++)
        inv_freq[i] = loom_rope_freq(rope, HS, i);
    const double sgn = inverse ? -1.0 : 1.0;
    const int nt = num_threads(be);
#pragma omp parallel num_threads(nt)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < T; t++) {
            const double pos = (double)(pos0 + t);
            for (int64_t i = 0; i < half; i++) {
                const double ang = pos * inv_freq[i];
                tab[(2 * t) * half + i] = (float)cos(ang);
                tab[(2 * t + 1) * half + i] = (float)(sgn * sin(ang));
            }
        }
#pragma omp for schedule(static)
        for (int64_t bt = 0; bt < B * T; bt++) {
            const int64_t t = pos ? pos[bt] : bt % T;
            const float *cs = tab + (2 * t) * half, *sn = tab + (2 * t + 1) * half;
            float *row = qkv + bt * R;
            for (int64_t g = 0; g < NKV; g++) {
                /* the group's Q query heads and its key head are contiguous */
                for (int64_t j = 0; j <= Q; j++) {
                    float *x1 = row + (g * (Q + 2) + j) * HS, *x2 = x1 + half;
                    for (int64_t i = 0; i < half; i++) {
                        const float a = x1[i], b = x2[i];
                        x1[i] = a * cs[i] - b * sn[i];
                        x2[i] = b * cs[i] + a * sn[i];
                    }
                }
            }
        }
    }
    free(inv_freq);
    free(tab);
}

/* ------------------------------------------------------------------------------------------ */
/* forward                                                                                    */

static void attention_forward_f32(struct loom_backend *be, float *out, float *lse,
                                  const float *qkv, const struct loom_attn *a) {
    const struct geom g = geom_of(a);
    const int64_t B = g.B, T = g.T, NH = g.NH, NKV = g.NKV, HS = g.HS, R = g.R, C = g.C;
    if (B <= 0 || T <= 0) return;
    const int64_t nqb = (T + QBLK - 1) / QBLK;
    const int nt = num_threads(be);
    /* A task is a run of query blocks of one (b, h): all of them (keys and values stay in cache
     * from block to block) when there are heads enough to keep every thread busy, else single
     * blocks, largest (latest, under the causal mask) first. */
    const int64_t nchunk = B * NH >= 4 * (int64_t)nt ? 1 : nqb;
    const int64_t ntask = B * NH * nchunk;
    const int64_t ldS = g.ldS, per = round16(QBLK * ldS + QBLK);
    /* key panels of every (b, kv group), packed once and shared by all query blocks and heads */
    const int64_t pan_sz = g.npan * 16 * HS;
    const struct ws ws = ws_get(nt * per + (g.tiled ? B * NKV * pan_sz : 0));
    float *scratch = ws.p;
    float *panels = g.tiled ? scratch + nt * per : NULL;
    const float drop = a->dropout_p > 0.0f ? a->dropout_p : 0.0f;
    const float keep_mult = drop > 0.0f ? 1.0f / (1.0f - drop) : 1.0f;
    const int blas_nt = blas_single_begin();

#pragma omp parallel num_threads(nt)
    {
        if (panels) {
#pragma omp for schedule(static)
            for (int64_t bk = 0; bk < B * NKV; bk++)
                pack_panels(panels + bk * pan_sz, qkv + (bk / NKV) * T * R + k_col(&g, bk % NKV), R,
                            T, HS);
        }
        float *S = scratch + (int64_t)omp_get_thread_num() * per;
        float *inv = S + QBLK * ldS;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            const int64_t chunk = nchunk - 1 - task / (B * NH);
            const int64_t bh = task % (B * NH), b = bh / NH, h = bh % NH, kv = h / g.Q;
            const int64_t qb0 = chunk * nqb / nchunk, qb1 = (chunk + 1) * nqb / nchunk;
            const struct rowmask rm = rowmask_of(a, b);
            for (int64_t qb = qb0; qb < qb1; qb++) {
                const int64_t q0 = qb * QBLK, n = (T - q0 < QBLK) ? T - q0 : QBLK;
                float *o = out + (b * T + q0) * C + h * HS;
                float *lse_b = lse + (b * NH + h) * T + q0;
                /* keys [ks, ke): columns of S are keys - ks */
                int64_t ks, ke;
                block_keys(&rm, q0, n, &ks, &ke);
                if (ke <= ks) { /* no row of the block sees a key */
                    for (int64_t i = 0; i < n; i++) {
                        zero_range(o + i * C, 0, HS);
                        lse_b[i] = -INFINITY;
                    }
                    continue;
                }
                const int64_t K = ke - ks, hi = a->causal ? q0 - ks : -1;
                const float *q = qkv + (b * T + q0) * R + q_col(&g, h);
                const float *k = qkv + (b * T + ks) * R + k_col(&g, kv);
                const float *v = k + HS;
                const struct keys keys = {
                    k, R, panels ? panels + (b * NKV + kv) * pan_sz + ks * HS : NULL};

                scores(S, ldS, q, R, n, keys, K, HS, a->scale, hi);
                for (int64_t i = 0; i < n; i++) {
                    float *s = S + i * ldS;
                    /* the row's keys: [d0, lim) of its columns; the products read it up to end */
                    const int64_t clim = a->causal ? q0 + i + 1 - ks : K;
                    const int64_t lim = key_hi(&rm, q0 + i) - ks, d0 = key_lo(&rm, q0 + i) - ks;
                    const int64_t end = row_end(clim, K, g.tiled);
                    if (lim <= d0) { /* no key: out 0, lse -inf */
                        zero_range(s, 0, end);
                        inv[i] = 0.0f;
                        lse_b[i] = -INFINITY;
                        continue;
                    }
                    const float m = row_max(s + d0, lim - d0);
                    const float sum = row_exp(s + d0, lim - d0, m);
                    zero_range(s, 0, d0);
                    zero_range(s, lim, end);
                    if (drop > 0.0f) {
                        const int64_t row =
                            ((a->sample0 + b) * a->NH_global + a->head0 + h) * T + q0 + i;
                        const uint64_t idx0 = (uint64_t)(row * T + ks);
                        row_dropout(s, lim, a->seed, a->key, idx0, drop, keep_mult);
                    }
                    inv[i] = 1.0f / sum;
                    lse_b[i] = m + logf(sum);
                }
                /* out = (exp(S - m) * mask) v / sum */
                mix(o, C, 0, 1.0f, inv, S, ldS, 1, n, K, v, R, HS, -1, hi, g.tiled);
            }
        }
    }
    blas_single_end(blas_nt);
    ws_put(ws);
}

/* ------------------------------------------------------------------------------------------ */
/* backward                                                                                   */

static void attention_backward_f32(struct loom_backend *be, float *dqkv, const float *dout,
                                   const float *out, const float *lse, const float *qkv,
                                   const struct loom_attn *a) {
    const struct geom g = geom_of(a);
    const int64_t B = g.B, T = g.T, NH = g.NH, NKV = g.NKV, HS = g.HS, R = g.R, C = g.C;
    if (B <= 0 || T <= 0) return;
    const int64_t nqb = (T + QBLK - 1) / QBLK;
    const int64_t ntask = B * NKV;
    const int nt = num_threads(be);
    const float drop = a->dropout_p > 0.0f ? a->dropout_p : 0.0f;
    const float keep_mult = drop > 0.0f ? 1.0f / (1.0f - drop) : 1.0f;
    /* per thread: P, dP (then dS), Pd (dropout only), and the k and v panels */
    const int64_t ldS = g.ldS, blk = QBLK * ldS, pan_sz = g.tiled ? g.npan * 16 * HS : 0;
    const int64_t per = (drop > 0.0f ? 3 : 2) * blk + 2 * pan_sz; /* blk, pan_sz: multiples of 16 */
    const struct ws ws = ws_get(nt * per);
    float *scratch = ws.p;
    const int blas_nt = blas_single_begin();

#pragma omp parallel num_threads(nt)
    {
        float *P = scratch + (int64_t)omp_get_thread_num() * per;
        float *dP = P + blk;
        float *Pd = drop > 0.0f ? dP + blk : P;
        float *kpan = P + (drop > 0.0f ? 3 : 2) * blk, *vpan = kpan + pan_sz;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            const int64_t b = task / NKV, kv = task % NKV;
            const float *k = qkv + b * T * R + k_col(&g, kv);
            const float *v = k + HS;
            float *dk = dqkv + b * T * R + k_col(&g, kv);
            float *dv = dk + HS;
            if (g.tiled) {
                pack_panels(kpan, k, R, T, HS);
                pack_panels(vpan, v, R, T, HS);
            }

            const struct rowmask rm = rowmask_of(a, b);
            /* key rows [0, wr) of dk and dv hold sums from earlier blocks or heads of the group
             * (or zeros); the rest are written for the first time when a block reaches them */
            int64_t wr = 0;
            for (int64_t h = kv * g.Q; h < (kv + 1) * g.Q; h++) {
                const float *lse_h = lse + (b * NH + h) * T;
                for (int64_t qb = 0; qb < nqb; qb++) {
                    const int64_t q0 = qb * QBLK, n = (T - q0 < QBLK) ? T - q0 : QBLK;
                    const float *q = qkv + (b * T + q0) * R + q_col(&g, h);
                    float *dq = dqkv + (b * T + q0) * R + q_col(&g, h);
                    /* keys [ks, ke), as in the forward: columns of P and dP are keys - ks */
                    int64_t ks, ke;
                    block_keys(&rm, q0, n, &ks, &ke);
                    if (ke <= ks) { /* no row of the block sees a key: dq 0, nothing for dk, dv */
                        for (int64_t i = 0; i < n; i++) zero_range(dq + i * R, 0, HS);
                        continue;
                    }
                    const int64_t K = ke - ks, hi = a->causal ? q0 - ks : -1;
                    const struct keys kk = {k + ks * R, R, g.tiled ? kpan + ks * HS : NULL};
                    const struct keys vk = {v + ks * R, R, g.tiled ? vpan + ks * HS : NULL};
                    const float *o = out + (b * T + q0) * C + h * HS;
                    const float *dO = dout + (b * T + q0) * C + h * HS;

                    {   /* out and dout rows of the next block (read first by the D dot) */
                        const int64_t nq0 = qb + 1 < nqb ? q0 + QBLK : 0;
                        const int64_t nh = qb + 1 < nqb ? h : h + 1;
                        if (nh < (kv + 1) * g.Q)
                            for (int64_t i = 0; i < QBLK && nq0 + i < T; i++)
                                for (int64_t d = 0; d < HS; d += 16) {
                                    __builtin_prefetch(out + (b * T + nq0 + i) * C + nh * HS + d);
                                    __builtin_prefetch(dout + (b * T + nq0 + i) * C + nh * HS + d);
                                }
                    }
                    scores(P, ldS, q, R, n, kk, K, HS, a->scale, hi); /* scale q k^T */
                    scores(dP, ldS, dO, C, n, vk, K, HS, 1.0f, hi);   /* dPd = dout v^T */
                    for (int64_t i = 0; i < n; i++) {
                        float *p = P + i * ldS, *dp = dP + i * ldS;
                        /* the row's keys: [d0, lim) of its columns; the products read it up to
                         * end */
                        const int64_t clim = a->causal ? q0 + i + 1 - ks : K;
                        const int64_t lim = key_hi(&rm, q0 + i) - ks, d0 = key_lo(&rm, q0 + i) - ks;
                        const int64_t end = row_end(clim, K, g.tiled);
                        if (lim <= d0) { /* no key: no gradient through this row */
                            zero_range(p, 0, end);
                            zero_range(dp, 0, end);
                            if (drop > 0.0f) zero_range(Pd + i * ldS, 0, end);
                            continue;
                        }
                        const float Di = dot(dO + i * C, o + i * C, HS);
                        if (drop > 0.0f) {
                            row_exp(p + d0, lim - d0, lse_h[q0 + i]); /* P = exp(S - lse) */
                            zero_range(p, 0, d0);
                            zero_range(dp, 0, d0);
                            zero_range(p, lim, end);
                            zero_range(dp, lim, end);
                            float *pd = Pd + i * ldS;
                            memcpy(pd, p, (size_t)end * sizeof(float));
                            const int64_t row =
                                ((a->sample0 + b) * a->NH_global + a->head0 + h) * T + q0 + i;
                            const uint64_t idx0 = (uint64_t)(row * T + ks);
                            row_dropout(pd, lim, a->seed, a->key, idx0, drop, keep_mult);
                            /* dS = P (dPd M/(1-p) - D); Pd == 0 marks a dropped entry (or
                             * P == 0, where dS is 0 anyway) */
                            for (int64_t j = d0; j < lim; j++)
                                dp[j] = p[j] * ((pd[j] != 0.0f ? dp[j] * keep_mult : 0.0f) - Di);
                        } else {
                            row_softmax_grad(p + d0, dp + d0, lim - d0, lse_h[q0 + i], Di);
                            zero_range(p, 0, d0);
                            zero_range(dp, 0, d0);
                            zero_range(p, lim, end);
                            zero_range(dp, lim, end);
                        }
                    }
                    /* dv += Pd^T dout;  dq = scale dS k;  dk += scale dS^T q */
                    /* key rows [ks, wr) accumulate, [wr, ke) are assigned; rows [wr, ks) that no
                     * block reached yet are zeroed first (under the causal mask wr <= q0) */
                    for (; wr < ks; wr++) {
                        zero_range(dk + wr * R, 0, HS);
                        zero_range(dv + wr * R, 0, HS);
                    }
                    const int64_t done = wr - ks;
                    mix_keys(dv + ks * R, R, done, 1.0f, Pd, ldS, K, n, dO, C, HS, hi, g.tiled);
                    mix(dq, R, 0, a->scale, NULL, dP, ldS, 1, n, K, k + ks * R, R, HS, -1, hi,
                        g.tiled);
                    mix_keys(dk + ks * R, R, done, a->scale, dP, ldS, K, n, q, R, HS, hi, g.tiled);
                    if (ke > wr) wr = ke;
                }
            }
            for (; wr < T; wr++) { /* key rows that no query sees */
                zero_range(dk + wr * R, 0, HS);
                zero_range(dv + wr * R, 0, HS);
            }
        }
    }
    blas_single_end(blas_nt);
    ws_put(ws);
}

/* The ops: the cpu keeps its activations in fp32. */
void loom_cpu_attention_forward(struct loom_backend *be, void *out, float *lse, const void *qkv,
                                const struct loom_attn *a) {
    loom_cpu_need_f32(a->dt, "attention_forward");
    attention_forward_f32(be, (float *)out, lse, (const float *)qkv, a);
}

void loom_cpu_attention_backward(struct loom_backend *be, void *dqkv, const void *dout,
                                 const void *out, const float *lse, const void *qkv,
                                 const struct loom_attn *a) {
    loom_cpu_need_f32(a->dt, "attention_backward");
    attention_backward_f32(be, (float *)dqkv, (const float *)dout, (const float *)out, lse,
                           (const float *)qkv, a);
}
