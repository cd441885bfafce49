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
 * Fused (the whole vocabulary in one shard, v0 = 0): per row the statistics of the forward, the
 * loss log s + m - x[target] formed in double from them as the caller of the forward does (then
 * rounded to float), and, with grad, the backward's gradient written over the logits from the
 * row's own (m, s): the same bits as xent_backward after xent_forward. linear_xent puts the
 * output layer's products (matmul.c) around it, in fp32.
 */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_ops.h"

/* The forward reads each row once, in blocks of this many columns (2 KiB, which stay in the L1
 * cache between the block's two loops): the block's maximum, then the sum of exp(x - m) over
 * the block in float against the running maximum m, added in double to the row's sum, which is
 * rescaled by exp(m_old - m_new) whenever a block raises the maximum. */
#define CPU_XENT_BLOCK 512

/* The maximum m and sum of exp(x - m) (in double) over the columns [0, V) of one row. */
static void row_max_sumexp(const float *restrict x, int64_t V, float *m_out, double *s_out) {
    float m = -FLT_MAX;
    double s = 0.0;
    for (int64_t c0 = 0; c0 < V; c0 += CPU_XENT_BLOCK) {
        const int64_t c1 = c0 + CPU_XENT_BLOCK < V ? c0 + CPU_XENT_BLOCK : V;
        float bm = m;
#pragma omp simd reduction(max : bm)
        for (int64_t c = c0; c < c1; c++) bm = x[c] > bm ? x[c] : bm;
        if (bm > m) {
            if (s > 0.0) s *= exp((double)m - (double)bm);
            m = bm;
        }
        float bs = 0.0f;
#pragma omp simd reduction(+ : bs)
        for (int64_t c = c0; c < c1; c++) bs += loom_cpu_expf(x[c] - m);
        s += (double)bs;
    }
    *m_out = m;
    *s_out = s;
}

void loom_cpu_xent_forward(struct loom_backend *be, float *stats, const float *logits,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0,
                           int64_t Vvalid) {
    (void)be;
    if (Vvalid > Vl) Vvalid = Vl;
#pragma omp parallel for schedule(static) if (N * Vvalid >= 16384)
    for (int64_t n = 0; n < N; n++) {
        const float *x = logits + n * Vl;
        float m;
        double s;
        row_max_sumexp(x, Vvalid, &m, &s);
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
        for (int64_t c = 0; c < Vvalid; c++) d[c] = loom_cpu_expf(x[c] - m) * scale;
        if (Vl > Vvalid) memset(d + Vvalid, 0, (size_t)(Vl - Vvalid) * sizeof *d);
        const int64_t t = (int64_t)targets[n] - v0;
        if (t >= 0 && t < Vvalid) d[t] -= dloss[n];
    }
}

void loom_cpu_xent_fused(struct loom_backend *be, float *losses, void *logits, enum loom_dtype dt,
                         const int32_t *targets, float dloss, int grad, int64_t N, int64_t Vl,
                         int64_t Vvalid) {
    (void)be;
    LOOM_ASSERT(dt == LOOM_DTYPE_F32);
    if (Vvalid > Vl) Vvalid = Vl;
    if (Vvalid < 0) Vvalid = 0;
#pragma omp parallel for schedule(static) if (N * Vl >= 16384)
    for (int64_t n = 0; n < N; n++) {
        float *x = (float *)logits + n * Vl;
        const int64_t t = targets[n];
        if (t < 0) {
            losses[n] = 0.0f;
            if (grad) memset(x, 0, (size_t)Vl * sizeof *x);
            continue;
        }
        float m;
        double s;
        row_max_sumexp(x, Vvalid, &m, &s);
        const float xt = t < Vvalid ? x[t] : 0.0f;
        /* as the unfused path: the sum rounded to float, the loss formed in double */
        const float sf = (float)s;
        losses[n] = (float)((double)logf(sf) + (double)m - (double)xt);
        if (!grad) continue;
        const float scale = dloss / sf;
#pragma omp simd
        for (int64_t c = 0; c < Vvalid; c++) x[c] = loom_cpu_expf(x[c] - m) * scale;
        if (Vl > Vvalid) memset(x + Vvalid, 0, (size_t)(Vl - Vvalid) * sizeof *x);
        if (t < Vvalid) x[t] -= dloss;
    }
}

void loom_cpu_linear_xent(struct loom_backend *be, float *losses, float *dinp, float *dw,
                          void *logits, const float *inp, const float *w, const int32_t *targets,
                          float dloss, int64_t N, int64_t C, int64_t Vl, int64_t Vvalid) {
    float *x = logits;
    const int grad = dinp || dw;
    loom_cpu_linear_forward(be, x, inp, w, NULL, N, C, Vl);
    loom_cpu_xent_fused(be, losses, x, LOOM_DTYPE_F32, targets, dloss, grad, N, Vl, Vvalid);
    if (grad) loom_cpu_linear_backward(be, dinp, dw, NULL, x, inp, w, N, C, Vl);
}
