/* Attention and rotary embedding on the CPU (OpenMP + BLAS).
 *
 * Shapes: qkv[B,T,R] with R = (NH + 2*NKV)*HS; a row holds NKV groups, each
 * [NH/NKV query heads | 1 key head | 1 value head] of HS floats. out[B,T,NH*HS] (head h at
 * columns h*HS), lse[B,NH,T].
 *
 * Forward, per (b, h), with query head h reading kv group g = h / (NH/NKV):
 *   S = scale * q k^T (+ causal mask: key index <= query index)
 *   P = softmax(S) row-wise, lse_i = log sum_j exp(S_ij)
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
 * Work split: the forward runs one task per (b, h, query block of QBLK rows); each task does
 * S = scale q k^T for its block against the keys up to the causal limit (fully masked key
 * blocks are never touched), the softmax in a per-thread scratch row block, and out = P v, with
 * single-threaded sgemm calls on the strided qkv rows (leading dimension R, no copies). The
 * backward runs one task per (b, kv group): the task owns the group's dk and dv rows and
 * accumulates them over its query heads and query blocks in a fixed order, so results are
 * bit-identical run to run and independent of the thread count (no atomics, no reductions
 * across threads).
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_ops.h"
#include "loom/rng.h"

/* Query rows per task: a QBLK x T score block stays in L2 for T up to a few thousand. */
#define QBLK 64

/* ------------------------------------------------------------------------------------------ */
/* exp, max and sum over a row                                                                */

/* exp(x) for x <= ~88: Cody-Waite range reduction x = n ln2 + r, degree-6 polynomial for e^r,
 * then scale by 2^n through the exponent bits. Relative error about 1 ulp. Inputs below
 * -87.3 are clamped (result ~1e-38, not 0), which is harmless for softmax weights. */
static inline float exp_scalar(float x) {
    if (x < -87.3f) x = -87.3f;
    if (x > 88.3f) x = 88.3f;
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
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, sizeof s);
    return p * s;
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

/* ------------------------------------------------------------------------------------------ */
/* dropout mask on attention probabilities                                                    */

/* x[j] = keep(idx0 + j) ? x[j] * mult : 0 for j < n, with keep = loom_rng_keep(seed, purpose,
 * idx, p). Philox is run on 16 counters at once in lane arrays the compiler vectorises; the
 * result is the same bit pattern loom_rng_keep computes one element at a time. */
static void row_dropout(float *x, int64_t n, uint64_t seed, uint64_t purpose, uint64_t idx0,
                        float p, float mult) {
    enum { L = 16 };
    for (int64_t j0 = 0; j0 < n; j0 += L) {
        uint32_t c0[L], c1[L], c2[L], c3[L];
        for (int l = 0; l < L; l++) {
            uint64_t idx = idx0 + (uint64_t)j0 + (uint64_t)l;
            c0[l] = (uint32_t)idx;
            c1[l] = (uint32_t)(idx >> 32);
            c2[l] = (uint32_t)purpose;
            c3[l] = (uint32_t)(purpose >> 32);
        }
        uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
        for (int r = 0; r < 10; r++) {
            for (int l = 0; l < L; l++) {
                uint64_t p0 = (uint64_t)0xD2511F53u * c0[l];
                uint64_t p1 = (uint64_t)0xCD9E8D57u * c2[l];
                uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
                uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
                c1[l] = (uint32_t)p1;
                c3[l] = (uint32_t)p0;
                c0[l] = n0;
                c2[l] = n2;
            }
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        int64_t m = n - j0 < L ? n - j0 : L;
        for (int64_t l = 0; l < m; l++) {
            int keep = loom_u32_to_unit(c0[l]) > p;
            x[j0 + l] = keep ? x[j0 + l] * mult : 0.0f;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* geometry and BLAS threading                                                                */

struct geom {
    int64_t B, T, NH, NKV, HS, Q, R, C; /* Q query heads per group, R qkv row, C out row */
};

static struct geom geom_of(const struct loom_attn *a) {
    struct geom g = {a->B, a->T, a->NH, a->NKV, a->HS, 0, 0, 0};
    LOOM_ASSERT(a->NKV > 0 && a->NH % a->NKV == 0 && a->HS > 0);
    g.Q = a->NH / a->NKV;
    g.R = (a->NH + 2 * a->NKV) * a->HS;
    g.C = a->NH * a->HS;
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

/* The tasks call sgemm from inside OpenMP threads: BLAS must not spawn its own threads there
 * (oversubscription, and its pool would serialise the concurrent calls). */
static int blas_single_begin(void) {
    int n = openblas_get_num_threads();
    if (n != 1) openblas_set_num_threads(1);
    return n;
}
static void blas_single_end(int n) {
    if (n != 1) openblas_set_num_threads(n);
}

static float *scratch_alloc(int64_t nthreads, int64_t per_thread) {
    per_thread = (per_thread + 15) & ~(int64_t)15; /* keep each slice 64-byte aligned */
    void *p = NULL;
    size_t bytes = (size_t)(nthreads * per_thread) * sizeof(float);
    LOOM_ASSERT(posix_memalign(&p, 64, bytes ? bytes : 64) == 0);
    return p;
}
static inline int64_t scratch_stride(int64_t per_thread) { return (per_thread + 15) & ~(int64_t)15; }

/* ------------------------------------------------------------------------------------------ */
/* rotary embedding                                                                           */

void loom_cpu_rope(struct loom_backend *be, float *qkv, int64_t B, int64_t T, int64_t NH,
                   int64_t NKV, int64_t HS, int64_t pos0, float theta, int inverse) {
    LOOM_ASSERT(NKV > 0 && NH % NKV == 0 && HS % 2 == 0);
    if (B <= 0 || T <= 0 || HS == 0) return;
    const int64_t half = HS / 2, Q = NH / NKV, R = (NH + 2 * NKV) * HS;
    /* cos/sin table [T, half], angles in double */
    float *tab = malloc((size_t)(2 * T * half) * sizeof(float));
    LOOM_ASSERT(tab);
    double *inv_freq = malloc((size_t)half * sizeof(double));
    LOOM_ASSERT(inv_freq);
    for (int64_t i = 0; i < half; i++) inv_freq[i] = pow((double)theta, -2.0 * (double)i / (double)HS);
    const double sgn = inverse ? -1.0 : 1.0;
    const int nt = num_threads(be);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < T; t++) {
        double pos = (double)(pos0 + t);
        for (int64_t i = 0; i < half; i++) {
            double ang = pos * inv_freq[i];
            tab[(2 * t) * half + i] = (float)cos(ang);
            tab[(2 * t + 1) * half + i] = (float)(sgn * sin(ang));
        }
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bt = 0; bt < B * T; bt++) {
        const int64_t t = bt % T;
        const float *cs = tab + (2 * t) * half, *sn = tab + (2 * t + 1) * half;
        float *row = qkv + bt * R;
        for (int64_t g = 0; g < NKV; g++) {
            /* the group's Q query heads and its key head are contiguous */
            for (int64_t j = 0; j <= Q; j++) {
                float *x1 = row + (g * (Q + 2) + j) * HS, *x2 = x1 + half;
                for (int64_t i = 0; i < half; i++) {
                    float a = x1[i], b = x2[i];
                    x1[i] = a * cs[i] - b * sn[i];
                    x2[i] = b * cs[i] + a * sn[i];
                }
            }
        }
    }
    free(inv_freq);
    free(tab);
}

/* ------------------------------------------------------------------------------------------ */
/* forward                                                                                    */

void loom_cpu_attention_forward(struct loom_backend *be, float *out, float *lse, const float *qkv,
                                const struct loom_attn *a) {
    const struct geom g = geom_of(a);
    const int64_t B = g.B, T = g.T, NH = g.NH, HS = g.HS, R = g.R, C = g.C;
    if (B <= 0 || T <= 0) return;
    const int64_t nqb = (T + QBLK - 1) / QBLK;
    const int64_t ntask = B * NH * nqb;
    const int nt = num_threads(be);
    const int64_t per = QBLK * T + QBLK;
    const int64_t stride = scratch_stride(per);
    float *scratch = scratch_alloc(nt, per);
    const float drop = a->dropout_p > 0.0f ? a->dropout_p : 0.0f;
    const float keep_mult = drop > 0.0f ? 1.0f / (1.0f - drop) : 1.0f;
    const int blas_nt = blas_single_begin();

#pragma omp parallel num_threads(nt)
    {
        float *S = scratch + (int64_t)omp_get_thread_num() * stride;
        float *inv = S + QBLK * T;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            /* largest (latest) query blocks first: under the causal mask they cost the most */
            const int64_t qb = nqb - 1 - task / (B * NH);
            const int64_t bh = task % (B * NH), b = bh / NH, h = bh % NH;
            const int64_t q0 = qb * QBLK, n = (T - q0 < QBLK) ? T - q0 : QBLK;
            const int64_t kmax = a->causal ? q0 + n : T;
            const float *q = qkv + (b * T + q0) * R + q_col(&g, h);
            const float *k = qkv + b * T * R + k_col(&g, h / g.Q);
            const float *v = k + HS;
            float *o = out + (b * T + q0) * C + h * HS;

            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)kmax, (int)HS,
                        a->scale, q, (int)R, k, (int)R, 0.0f, S, (int)kmax);
            for (int64_t i = 0; i < n; i++) {
                float *s = S + i * kmax;
                const int64_t lim = a->causal ? q0 + i + 1 : T;
                const float m = row_max(s, lim);
                const float sum = row_exp(s, lim, m);
                if (lim < kmax) memset(s + lim, 0, (size_t)(kmax - lim) * sizeof(float));
                if (drop > 0.0f) {
                    uint64_t idx0 = (uint64_t)((((a->sample0 + b) * a->NH_global + a->head0 + h) *
                                                    T + q0 + i) * T);
                    row_dropout(s, lim, a->seed, a->key, idx0, drop, keep_mult);
                }
                inv[i] = 1.0f / sum;
                lse[(b * NH + h) * T + q0 + i] = m + logf(sum);
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)HS, (int)kmax,
                        1.0f, S, (int)kmax, v, (int)R, 0.0f, o, (int)C);
            for (int64_t i = 0; i < n; i++) {
                float *oi = o + i * C;
                const float f = inv[i];
                for (int64_t d = 0; d < HS; d++) oi[d] *= f;
            }
        }
    }
    blas_single_end(blas_nt);
    free(scratch);
}

/* ------------------------------------------------------------------------------------------ */
/* backward                                                                                   */

void loom_cpu_attention_backward(struct loom_backend *be, float *dqkv, const float *dout,
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
    /* P, dP (then dS), Pd (dropout only), D */
    const int64_t blk = QBLK * T;
    const int64_t per = (drop > 0.0f ? 3 : 2) * blk + QBLK;
    const int64_t stride = scratch_stride(per);
    float *scratch = scratch_alloc(nt, per);
    const int blas_nt = blas_single_begin();

#pragma omp parallel num_threads(nt)
    {
        float *P = scratch + (int64_t)omp_get_thread_num() * stride;
        float *dP = P + blk;
        float *Pd = drop > 0.0f ? dP + blk : P;
        float *D = (drop > 0.0f ? Pd : dP) + blk;
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntask; task++) {
            const int64_t b = task / NKV, kv = task % NKV;
            const float *k = qkv + b * T * R + k_col(&g, kv);
            const float *v = k + HS;
            float *dk = dqkv + b * T * R + k_col(&g, kv);
            float *dv = dk + HS;
            for (int64_t t = 0; t < T; t++) memset(dk + t * R, 0, (size_t)(2 * HS) * sizeof(float));

            for (int64_t h = kv * g.Q; h < (kv + 1) * g.Q; h++) {
                const float *lse_h = lse + (b * NH + h) * T;
                for (int64_t qb = 0; qb < nqb; qb++) {
                    const int64_t q0 = qb * QBLK, n = (T - q0 < QBLK) ? T - q0 : QBLK;
                    const int64_t kmax = a->causal ? q0 + n : T;
                    const float *q = qkv + (b * T + q0) * R + q_col(&g, h);
                    float *dq = dqkv + (b * T + q0) * R + q_col(&g, h);
                    const float *o = out + (b * T + q0) * C + h * HS;
                    const float *dO = dout + (b * T + q0) * C + h * HS;

                    /* P = exp(scale q k^T - lse), zero above the diagonal */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)kmax,
                                (int)HS, a->scale, q, (int)R, k, (int)R, 0.0f, P, (int)kmax);
                    /* dPd = dout v^T */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)kmax,
                                (int)HS, 1.0f, dO, (int)C, v, (int)R, 0.0f, dP, (int)kmax);
                    for (int64_t i = 0; i < n; i++) {
                        float *p = P + i * kmax, *dp = dP + i * kmax;
                        const int64_t lim = a->causal ? q0 + i + 1 : T;
                        row_exp(p, lim, lse_h[q0 + i]);
                        if (lim < kmax) {
                            memset(p + lim, 0, (size_t)(kmax - lim) * sizeof(float));
                            memset(dp + lim, 0, (size_t)(kmax - lim) * sizeof(float));
                        }
                        D[i] = dot(dO + i * C, o + i * C, HS);
                        if (drop > 0.0f) {
                            float *pd = Pd + i * kmax;
                            memcpy(pd, p, (size_t)kmax * sizeof(float));
                            uint64_t idx0 =
                                (uint64_t)((((a->sample0 + b) * a->NH_global + a->head0 + h) * T +
                                            q0 + i) * T);
                            row_dropout(pd, lim, a->seed, a->key, idx0, drop, keep_mult);
                            /* dS = P (dPd M/(1-p) - D); Pd == 0 marks a dropped entry (or
                             * P == 0, where dS is 0 anyway) */
                            const float Di = D[i];
                            for (int64_t j = 0; j < lim; j++)
                                dp[j] = p[j] * ((pd[j] != 0.0f ? dp[j] * keep_mult : 0.0f) - Di);
                        } else {
                            const float Di = D[i];
                            for (int64_t j = 0; j < lim; j++) dp[j] = p[j] * (dp[j] - Di);
                        }
                    }
                    /* dv += Pd^T dout */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)kmax, (int)HS,
                                (int)n, 1.0f, Pd, (int)kmax, dO, (int)C, 1.0f, dv, (int)R);
                    /* dq = scale dS k (assigned) */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)HS,
                                (int)kmax, a->scale, dP, (int)kmax, k, (int)R, 0.0f, dq, (int)R);
                    /* dk += scale dS^T q */
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)kmax, (int)HS,
                                (int)n, a->scale, dP, (int)kmax, q, (int)R, 1.0f, dk, (int)R);
                }
            }
        }
    }
    blas_single_end(blas_nt);
    free(scratch);
}
