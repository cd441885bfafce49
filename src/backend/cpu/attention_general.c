/* The general attention op on the CPU (struct loom_attn_general): queries and keys of different
 * lengths, a key padding mask, the causal mask and an additive per-head bias; q, k and v strided
 * slices of their projections. The cross-attention of encoder-decoder models and their
 * self-attention with a relative position bias run on it.
 *
 * Forward, per sample b, query head h (key/value head g = h / (NH/NKV)), query i, over its
 * visible keys j < lim(i) = min(key_len[b], causal ? i + 1 : Tk):
 *   s_j = scale q_i . k_j + bias[h, i, j],  m = max_j s_j,  sum = sum_j exp(s_j - m)
 *   out_i = sum_j exp(s_j - m) v_j / sum,   lse_i = m + log(sum)
 * Backward (the probabilities remade from lse):
 *   p_j = exp(s_j - lse_i),  D_i = dout_i . out_i,  ds_j = p_j (dout_i . v_j - D_i)
 *   dq_i = scale sum_j ds_j k_j,  dk_j += scale ds_j q_i,  dv_j += p_j dout_i,
 *   dbias[h, i, j] += ds_j
 * With dropout the probabilities that weigh v are pd_j = p_j M_j / (1 - p) (M remade from the
 * counter-based stream in the backward): out_i = sum_j pd_j v_j, dv_j += pd_j dout_i and
 * ds_j = p_j (M_j / (1 - p) dout_i . v_j - D_i), D_i = dout_i . out_i as before.
 * Work split: the forward's tasks are the (b, h) pairs; the backward's the key/value heads g
 * (with a bias gradient, which sums over the samples) or the (b, g) pairs (without): a task owns
 * every row it writes and adds in a fixed order, so results are the same for any thread count.
 * Plain loops with fp32 sums: the op is written for clarity and exactness, not speed. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "loom/rng.h"

static int nthreads(const struct loom_backend *be) {
    int n = be && be->num_threads > 0 ? be->num_threads : omp_get_max_threads();
    return n > 0 ? n : 1;
}

static float dotf(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* keys visible to query i of sample b */
static int64_t visible(const struct loom_attn_general *a, int64_t b, int64_t i) {
    int64_t lim = a->key_len ? a->key_len[b] : a->Tk;
    LOOM_ASSERT(lim >= 0 && lim <= a->Tk);
    if (a->causal && i + 1 < lim) lim = i + 1;
    return lim;
}

/* the dropout multiplier of probability (b, h, i, j): 0 or 1 / (1 - p); 1 without dropout */
static float keep_mult(const struct loom_attn_general *a, int64_t b, int64_t h, int64_t i,
                       int64_t j) {
    if (!(a->dropout_p > 0.0f)) return 1.0f;
    const int64_t row = ((a->sample0 + b) * a->NH_global + a->head0 + h) * a->Tq + i;
    return loom_rng_keep(a->seed, a->key, (uint64_t)(row * a->Tk + j), a->dropout_p)
               ? 1.0f / (1.0f - a->dropout_p)
               : 0.0f;
}

/* s[j] = scale q . k_j + bias for j < lim */
static void score_row(const struct loom_attn_general *a, float *s, const float *q, const float *k,
                      const float *bias_row, int64_t lim) {
    for (int64_t j = 0; j < lim; j++) {
        s[j] = a->scale * dotf(q, k + j * a->k_ld, a->HS);
        if (bias_row) s[j] += bias_row[j];
    }
}

void loom_cpu_attention_general_forward(struct loom_backend *be, float *out, float *lse,
                                        const float *q, const float *k, const float *v,
                                        const struct loom_attn_general *a) {
    const int64_t B = a->B, Tq = a->Tq, Tk = a->Tk, NH = a->NH, HS = a->HS;
    LOOM_ASSERT(a->NKV > 0 && NH % a->NKV == 0 && HS > 0);
    const int64_t G = NH / a->NKV, C = NH * HS;
    if (B <= 0 || Tq <= 0) return;
    const int nt = nthreads(be);
    float *scratch = malloc((size_t)nt * (size_t)(Tk > 0 ? Tk : 1) * sizeof(float));
    LOOM_ASSERT(scratch);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * NH; bh++) {
        const int64_t b = bh / NH, h = bh % NH, g = h / G;
        float *s = scratch + (int64_t)omp_get_thread_num() * (Tk > 0 ? Tk : 1);
        const float *kb = k + b * Tk * a->k_ld + g * a->k_hs;
        const float *vb = v + b * Tk * a->v_ld + g * a->v_hs;
        for (int64_t i = 0; i < Tq; i++) {
            float *o = out + (b * Tq + i) * C + h * HS;
            const int64_t lim = visible(a, b, i);
            memset(o, 0, (size_t)HS * sizeof(float));
            if (lim <= 0) {
                lse[bh * Tq + i] = -INFINITY;
                continue;
            }
            score_row(a, s, q + (b * Tq + i) * a->q_ld + h * a->q_hs, kb,
                      a->bias ? a->bias + (h * Tq + i) * Tk : NULL, lim);
            float m = s[0];
            for (int64_t j = 1; j < lim; j++) m = s[j] > m ? s[j] : m;
            float sum = 0.0f;
            for (int64_t j = 0; j < lim; j++) {
                s[j] = expf(s[j] - m);
                sum += s[j];
            }
            const float inv = 1.0f / sum;
            for (int64_t j = 0; j < lim; j++) {
                const float p = s[j] * inv * keep_mult(a, b, h, i, j);
                const float *vj = vb + j * a->v_ld;
                for (int64_t d = 0; d < HS; d++) o[d] += p * vj[d];
            }
            lse[bh * Tq + i] = m + logf(sum);
        }
    }
    free(scratch);
}

/* dk, dv rows of key/value head g of sample b zeroed */
static void zero_kv(float *dk, float *dv, const struct loom_attn_general *a, int64_t b, int64_t g) {
    for (int64_t j = 0; j < a->Tk; j++) {
        memset(dk + (b * a->Tk + j) * a->k_ld + g * a->k_hs, 0, (size_t)a->HS * sizeof(float));
        memset(dv + (b * a->Tk + j) * a->v_ld + g * a->v_hs, 0, (size_t)a->HS * sizeof(float));
    }
}

/* The backward of the query heads of key/value head g in sample b, added to dk, dv (and dbias) */
static void backward_bg(const struct loom_attn_general *a, int64_t b, int64_t g, float *p,
                        float *dq, float *dk, float *dv, float *dbias, const float *dout,
                        const float *out, const float *lse, const float *q, const float *k,
                        const float *v) {
    const int64_t Tq = a->Tq, Tk = a->Tk, NH = a->NH, HS = a->HS, G = NH / a->NKV, C = NH * HS;
    const float *kb = k + b * Tk * a->k_ld + g * a->k_hs;
    const float *vb = v + b * Tk * a->v_ld + g * a->v_hs;
    float *dkb = dk + b * Tk * a->k_ld + g * a->k_hs;
    float *dvb = dv + b * Tk * a->v_ld + g * a->v_hs;
    for (int64_t h = g * G; h < (g + 1) * G; h++)
        for (int64_t i = 0; i < Tq; i++) {
            const float *qi = q + (b * Tq + i) * a->q_ld + h * a->q_hs;
            float *dqi = dq + (b * Tq + i) * a->q_ld + h * a->q_hs;
            const float *doi = dout + (b * Tq + i) * C + h * HS;
            const int64_t lim = visible(a, b, i);
            memset(dqi, 0, (size_t)HS * sizeof(float));
            if (lim <= 0) continue;
            const float *bias_row = a->bias ? a->bias + (h * Tq + i) * Tk : NULL;
            score_row(a, p, qi, kb, bias_row, lim);
            const float l = lse[(b * NH + h) * Tq + i];
            const float D = dotf(doi, out + (b * Tq + i) * C + h * HS, HS);
            for (int64_t j = 0; j < lim; j++) {
                const float pj = expf(p[j] - l), mj = keep_mult(a, b, h, i, j);
                const float ds = pj * (mj * dotf(doi, vb + j * a->v_ld, HS) - D);
                const float *kj = kb + j * a->k_ld;
                float *dkj = dkb + j * a->k_ld, *dvj = dvb + j * a->v_ld;
                for (int64_t d = 0; d < HS; d++) {
                    dqi[d] += a->scale * ds * kj[d];
                    dkj[d] += a->scale * ds * qi[d];
                    dvj[d] += pj * mj * doi[d];
                }
                if (dbias) dbias[(h * Tq + i) * Tk + j] += ds;
            }
        }
}

void loom_cpu_attention_general_backward(struct loom_backend *be, float *dq, float *dk, float *dv,
                                         float *dbias, const float *dout, const float *out,
                                         const float *lse, const float *q, const float *k,
                                         const float *v, const struct loom_attn_general *a) {
    const int64_t B = a->B, Tk = a->Tk, NKV = a->NKV;
    LOOM_ASSERT(NKV > 0 && a->NH % NKV == 0 && a->HS > 0);
    if (B <= 0 || a->Tq <= 0) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t g = 0; g < NKV; g++) zero_kv(dk, dv, a, b, g);
        return;
    }
    const int nt = nthreads(be);
    const int64_t per = Tk > 0 ? Tk : 1;
    float *scratch = malloc((size_t)nt * (size_t)per * sizeof(float));
    LOOM_ASSERT(scratch);
    /* with dbias, a task sums over every sample of its heads, in sample order */
    const int64_t nsplit = dbias ? 1 : B, ntask = NKV * nsplit;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t task = 0; task < ntask; task++) {
        float *p = scratch + (int64_t)omp_get_thread_num() * per;
        const int64_t g = task / nsplit;
        const int64_t b0 = dbias ? 0 : task % nsplit, b1 = dbias ? B : b0 + 1;
        for (int64_t b = b0; b < b1; b++) {
            zero_kv(dk, dv, a, b, g);
            backward_bg(a, b, g, p, dq, dk, dv, dbias, dout, out, lse, q, k, v);
        }
    }
    free(scratch);
}
