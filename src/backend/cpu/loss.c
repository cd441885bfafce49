/* CPU softmax cross-entropy over a vocabulary shard.
 *
 * Shapes: logits/dlogits[N,Vl] hold vocabulary columns [v0, v0+Vl), of which the first Vvalid
 * are real tokens and the rest padding; targets[N] global ids (negative = ignored row);
 * stats[N,3]; gstats[N,2]; dloss[N].
 * Forward (local to the shard): stats[n] = (m = max_{c<Vvalid} x[n,c],
 *                                           s = sum_{c<Vvalid} exp(x[n,c] - m),
 *                                           x[n, target-v0] if the shard owns the target else 0)
 *   A shard with no valid column reports m = -FLT_MAX, s = 0. The caller combines shards:
 *   M = max_r m_r, S = sum_r s_r exp(m_r - M), loss = log S + M - target logit.
 * Backward, given the global (M, S) of each row:
 *   dlogits[n,c] = (exp(x[n,c] - M) / S - [c == target - v0]) * dloss[n] for c < Vvalid,
 *   0 for padded columns and for every column of an ignored row.
 * dlogits may alias logits (each column is read once and then written), so no pointer to them
 * is `restrict`.
 */
#include <float.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* exp(x) in float, written so that loops over it vectorise (libm's expf does not without
 * -ffast-math). x = k ln2 + r with |r| <= ln2/2; exp(r) by its Taylor series to degree 7
 * (truncation below 1e-8 relative); 2^k through the exponent bits. 0 below -87.33 (where the
 * result would be subnormal); the argument is clamped at 88.37 (just below FLT_MAX). */
static inline float cpu_loss_expf(float x) {
    const float lo = -87.33f;
    float xc = x < lo ? lo : x;
    xc = xc > 88.37f ? 88.37f : xc;
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float k = (xc * 1.44269504088896341f + shift) - shift;
    float r = xc - k * 0.693145751953125f; /* ln2 split in a short high part and the rest */
    r = r - k * 1.42860682030941723e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)k + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return x < lo ? 0.0f : p * s;
}

/* Sums of exp are taken in float over blocks of this many columns, the block sums in double. */
#define CPU_XENT_BLOCK 512

void loom_cpu_xent_forward(struct loom_backend *be, float *stats, const float *logits,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0,
                           int64_t Vvalid) {
    (void)be;
    if (Vvalid > Vl) Vvalid = Vl;
#pragma omp parallel for schedule(static) if (N * Vvalid >= 16384)
    for (int64_t n = 0; n < N; n++) {
        const float *restrict x = logits + n * Vl;
        float m = -FLT_MAX;
#pragma omp simd reduction(max : m)
        for (int64_t c = 0; c < Vvalid; c++) m = x[c] > m ? x[c] : m;
        double s = 0.0;
        for (int64_t c0 = 0; c0 < Vvalid; c0 += CPU_XENT_BLOCK) {
            const int64_t c1 = c0 + CPU_XENT_BLOCK < Vvalid ? c0 + CPU_XENT_BLOCK : Vvalid;
            float bs = 0.0f;
#pragma omp simd reduction(+ : bs)
            for (int64_t c = c0; c < c1; c++) bs += cpu_loss_expf(x[c] - m);
            s += (double)bs;
        }
        const int64_t t = (int64_t)targets[n] - v0;
        stats[3 * n + 0] = m;
        stats[3 * n + 1] = (float)s;
        stats[3 * n + 2] = targets[n] >= 0 && t >= 0 && t < Vvalid ? x[t] : 0.0f;
    }
}

void loom_cpu_xent_backward(struct loom_backend *be, float *dlogits, const float *logits,
                            const int32_t *targets, const float *gstats, const float *dloss,
                            int64_t N, int64_t Vl, int64_t v0, int64_t Vvalid) {
    (void)be;
    if (Vvalid > Vl) Vvalid = Vl;
    if (Vvalid < 0) Vvalid = 0;
#pragma omp parallel for schedule(static) if (N * Vl >= 16384)
    for (int64_t n = 0; n < N; n++) {
        const float *x = logits + n * Vl;
        float *d = dlogits + n * Vl;
        if (targets[n] < 0) {
            memset(d, 0, (size_t)Vl * sizeof *d);
            continue;
        }
        const float m = gstats[2 * n + 0];
        const float scale = dloss[n] / gstats[2 * n + 1];
#pragma omp simd
        for (int64_t c = 0; c < Vvalid; c++) d[c] = cpu_loss_expf(x[c] - m) * scale;
        if (Vl > Vvalid) memset(d + Vvalid, 0, (size_t)(Vl - Vvalid) * sizeof *d);
        const int64_t t = (int64_t)targets[n] - v0;
        if (t >= 0 && t < Vvalid) d[t] -= dloss[n];
    }
}
