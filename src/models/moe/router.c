/* The MoE router on the host (loom/moe.h): logits, scores, top-k (group-limited), capacity, the
 * dispatch order, the balancing and z-losses, and the backward of all of it to the logits.
 *
 * Per token t with logits l [E]:
 *   softmax:      top-k of l (of the groups kept), p = softmax over the k chosen logits
 *   pre-softmax:  s = softmax(l), top-k of s, p = the chosen s (not renormalised)
 *   sigmoid:      s = sigmoid(l), top-k of s + expert bias, p = the chosen s / (their sum + 1e-20)
 *                 (k > 1; the chosen s itself for k = 1)
 *   p *= the top-k scaling factor when one is given.
 *   group-limited: the experts form G groups of E/G; a group's score is the sum of its top
 *   k / group_topk selection scores; the top group_topk groups are kept, the top-k taken in them.
 * Capacity (factor f): cap = ceil(N K / E * f) pairs an expert; the pairs of an expert beyond cap
 * are dropped: those of the lowest p (probs), or of the latest tokens (position).
 * Gradients: d(logits) through the chosen p (softmax / sigmoid Jacobians), plus the balancing
 * loss through the scores over all experts and the z-loss through logsumexp.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/moe.h"

static int64_t capacity(const struct loom_moe_config *c, int64_t N) {
    if (c->capacity_factor <= 0) return N * c->topk;
    return (int64_t)ceil((double)(N * c->topk) / (double)c->num_experts * c->capacity_factor);
}

int64_t loom_moe_max_rows(const struct loom_moe_config *c, int64_t N) {
    const int64_t pairs = N * c->topk, cap = capacity(c, N);
    if (c->capacity_factor <= 0) return pairs;
    if (c->pad_to_capacity) return c->num_experts * cap;
    return pairs < c->num_experts * cap ? pairs : c->num_experts * cap;
}

enum loom_status loom_moe_route_alloc(struct loom_moe_route *r, const struct loom_moe_config *c,
                                      int64_t N, int64_t nseq) {
    memset(r, 0, sizeof *r);
    const int64_t E = c->num_experts, K = c->topk, R = loom_moe_max_rows(c, N);
    r->N = N;
    r->E = E;
    r->K = K;
    r->nseq = nseq;
    r->cap = capacity(c, N);
    r->logits = malloc((size_t)(N * E) * sizeof(double));
    r->expert = malloc((size_t)(N * K) * sizeof(int32_t));
    r->prob = malloc((size_t)(N * K) * sizeof(double));
    r->kept = malloc((size_t)(N * K));
    r->count = malloc((size_t)E * sizeof(int64_t));
    r->rows = malloc((size_t)E * sizeof(int64_t));
    r->row_token = malloc((size_t)(R > 0 ? R : 1) * sizeof(int32_t));
    r->row_pair = malloc((size_t)(R > 0 ? R : 1) * sizeof(int32_t));
    r->bcount = malloc((size_t)(nseq * E) * sizeof(double));
    r->pairs = malloc((size_t)(N * K > 0 ? N * K : 1) * 2 * sizeof(int32_t));
    if (!r->logits || !r->expert || !r->prob || !r->kept || !r->count || !r->rows ||
        !r->row_token || !r->row_pair || !r->bcount || !r->pairs) {
        loom_moe_route_free(r);
        return loom_fail(LOOM_ERR_OOM, "out of memory for the MoE router (%lld tokens, %lld "
                         "experts)", (long long)N, (long long)E);
    }
    return LOOM_OK;
}

void loom_moe_route_free(struct loom_moe_route *r) {
    free(r->logits);
    free(r->expert);
    free(r->prob);
    free(r->kept);
    free(r->count);
    free(r->rows);
    free(r->row_token);
    free(r->row_pair);
    free(r->bcount);
    free(r->pairs);
    memset(r, 0, sizeof *r);
}

/* the k largest of v[n] (their indices, largest first; ties: the lower index), skipping
 * entries with skip[i] set (NULL: none) */
static void top_k(const double *v, int64_t n, int64_t k, const uint8_t *skip, int32_t *idx) {
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            if (skip && skip[i]) continue;
            int taken = 0;
            for (int64_t q = 0; q < j; q++) taken |= idx[q] == i;
            if (taken) continue;
            if (best < 0 || v[i] > v[best]) best = i;
        }
        idx[j] = (int32_t)best;
    }
}

/* top-k of the selection scores sel[E], group-limited when the config says (mask: [E] scratch) */
static void select_experts(const struct loom_moe_config *c, const double *sel, uint8_t *mask,
                           int32_t *idx) {
    const int64_t E = c->num_experts, K = c->topk;
    if (c->num_groups <= 0) {
        top_k(sel, E, K, NULL, idx);
        return;
    }
    const int64_t G = c->num_groups, per = E / G, kg = K / c->group_topk;
    double gscore[G];
    int32_t tmp[per > 0 ? per : 1], gsel[G];
    for (int64_t g = 0; g < G; g++) {
        top_k(sel + g * per, per, kg, NULL, tmp);
        double s = 0;
        for (int64_t j = 0; j < kg; j++) s += sel[g * per + tmp[j]];
        gscore[g] = s;
    }
    top_k(gscore, G, c->group_topk, NULL, gsel);
    memset(mask, 1, (size_t)E);
    for (int64_t j = 0; j < c->group_topk; j++)
        memset(mask + gsel[j] * per, 0, (size_t)per);
    top_k(sel, E, K, mask, idx);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* softmax of l[E] into s, returns logsumexp */
static double softmax(const double *l, int64_t E, double *s) {
    double mx = l[0];
    for (int64_t e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0;
    for (int64_t e = 0; e < E; e++) sum += (s[e] = exp(l[e] - mx));
    for (int64_t e = 0; e < E; e++) s[e] /= sum;
    return mx + log(sum);
}

/* the scores over all experts the balancing loss reads: softmax, or sigmoid normalised */
static void balance_scores(const struct loom_moe_config *c, const double *l, int64_t E, double *s) {
    if (c->score == LOOM_MOE_SCORE_SOFTMAX) {
        softmax(l, E, s);
        return;
    }
    double sum = 0;
    for (int64_t e = 0; e < E; e++) sum += (s[e] = sigmoid(l[e]));
    for (int64_t e = 0; e < E; e++) s[e] /= sum + 1e-20;
}

/* one token: the chosen experts and their probabilities from its logits l */
static void route_token(const struct loom_moe_config *c, const double *l, const float *bias,
                        int32_t *idx, double *p) {
    const int64_t E = c->num_experts, K = c->topk;
    double s[E], sel[E];
    uint8_t mask[E];
    if (c->score == LOOM_MOE_SCORE_SIGMOID) {
        for (int64_t e = 0; e < E; e++) {
            s[e] = sigmoid(l[e]);
            sel[e] = s[e] + (bias ? (double)bias[e] : 0.0);
        }
        select_experts(c, sel, mask, idx);
        double sum = 0;
        for (int64_t k = 0; k < K; k++) sum += (p[k] = s[idx[k]]);
        if (K > 1)
            for (int64_t k = 0; k < K; k++) p[k] /= sum + 1e-20;
    } else if (c->pre_softmax) {
        softmax(l, E, s);
        select_experts(c, s, mask, idx);
        for (int64_t k = 0; k < K; k++) p[k] = s[idx[k]];
    } else {
        select_experts(c, l, mask, idx);
        double mx = l[idx[0]], sum = 0;
        for (int64_t k = 0; k < K; k++) sum += (p[k] = exp(l[idx[k]] - mx));
        for (int64_t k = 0; k < K; k++) p[k] /= sum;
    }
    if (c->topk_scaling > 0)
        for (int64_t k = 0; k < K; k++) p[k] *= c->topk_scaling;
}

/* The pairs routed to one expert, in the order the capacity keeps them: by probability (highest
 * first, ties by pair), or by position (pair order) */
static int before(const struct loom_moe_route *r, int by_prob, int32_t x, int32_t y) {
    if (by_prob && r->prob[x] != r->prob[y]) return r->prob[x] > r->prob[y];
    return x < y;
}
/* merge sort of v[n] by `before`, with tmp[n] as scratch (stable, n log n) */
static void sort_pairs(const struct loom_moe_route *r, int by_prob, int32_t *v, int32_t *tmp,
                       int64_t n) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            const int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = before(r, by_prob, v[j], v[i]) ? v[j++] : v[i++];
            while (i < mid) tmp[k++] = v[i++];
            while (j < hi) tmp[k++] = v[j++];
        }
        memcpy(v, tmp, (size_t)n * sizeof *v);
    }
}

void loom_moe_route(struct loom_moe_route *r, const struct loom_moe_config *c, const float *x,
                    const float *w, const float *bias, int64_t C) {
    const int64_t N = r->N, E = r->E, K = r->K;
    const int fp64 = c->router_dtype == LOOM_MOE_ROUTER_FP64;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++) {
        const float *xt = x + t * C;
        for (int64_t e = 0; e < E; e++) {
            const float *we = w + e * C;
            if (fp64) {
                double acc = 0;
                for (int64_t i = 0; i < C; i++) acc += (double)xt[i] * (double)we[i];
                r->logits[t * E + e] = acc;
            } else {
                float acc = 0;
                for (int64_t i = 0; i < C; i++) acc += xt[i] * we[i];
                r->logits[t * E + e] = acc;
            }
        }
        route_token(c, r->logits + t * E, bias, r->expert + t * K, r->prob + t * K);
    }
    /* counts, the balancing measure and the z-loss */
    memset(r->count, 0, (size_t)E * sizeof(int64_t));
    for (int64_t n = 0; n < N * K; n++) r->count[r->expert[n]]++;
    const int64_t S = N / r->nseq;
    const int seq = c->balance == LOOM_MOE_SEQ_AUX_LOSS;
    const int64_t nb = seq ? r->nseq : 1;
    memset(r->bcount, 0, (size_t)(nb * E) * sizeof(double));
    for (int64_t n = 0; n < N * K; n++) r->bcount[(seq ? n / K / S : 0) * E + r->expert[n]] += 1;
    double aux = 0, z = 0, s[E], P[E];
    for (int64_t b = 0; b < nb; b++) {
        const int64_t t0 = seq ? b * S : 0, t1 = seq ? t0 + S : N;
        memset(P, 0, sizeof P);
        for (int64_t t = t0; t < t1; t++) {
            balance_scores(c, r->logits + t * E, E, s);
            for (int64_t e = 0; e < E; e++) P[e] += s[e];
        }
        const double T = (double)(t1 - t0);
        double sum = 0;
        for (int64_t e = 0; e < E; e++) sum += P[e] * r->bcount[b * E + e];
        aux += sum * (double)E / ((double)K * T * T);
    }
    r->aux = c->balance == LOOM_MOE_BALANCE_NONE ? 0 : aux / (double)nb;
    for (int64_t t = 0; t < N; t++) {
        const double lse = softmax(r->logits + t * E, E, s);
        z += lse * lse;
    }
    r->z = z / (double)N;
    /* capacity and the dispatch order: each expert's kept pairs in token order */
    memset(r->kept, 1, (size_t)(N * K));
    int32_t *pairs = r->pairs, *tmp = r->pairs + (N * K > 0 ? N * K : 1);
    int64_t row = 0;
    for (int64_t e = 0; e < E; e++) {
        int64_t np = 0;
        for (int64_t n = 0; n < N * K; n++)
            if (r->expert[n] == e) pairs[np++] = (int32_t)n;
        if (c->capacity_factor > 0 && np > r->cap) {
            if (c->drop_policy == LOOM_MOE_DROP_PROBS) sort_pairs(r, 1, pairs, tmp, np);
            for (int64_t j = r->cap; j < np; j++) {
                r->kept[pairs[j]] = 0;
                r->prob[pairs[j]] = 0;
            }
            np = r->cap;
            sort_pairs(r, 0, pairs, tmp, np);
        }
        const int64_t nrows = c->pad_to_capacity ? r->cap : np;
        for (int64_t j = 0; j < nrows; j++, row++) {
            r->row_pair[row] = j < np ? pairs[j] : -1;
            r->row_token[row] = j < np ? (int32_t)(pairs[j] / K) : -1;
        }
        r->rows[e] = nrows;
    }
    r->R = row;
}

void loom_moe_route_backward(const struct loom_moe_route *r, const struct loom_moe_config *c,
                             const double *dprob, double scale, double *dlogits) {
    const int64_t N = r->N, E = r->E, K = r->K, S = N / r->nseq;
    const int seq = c->balance == LOOM_MOE_SEQ_AUX_LOSS;
    const double aux_w = c->balance == LOOM_MOE_BALANCE_NONE ? 0.0 : scale * c->aux_coeff;
    const double z_w = scale * c->z_coeff;
    /* the tokens per expert the balancing loss weighs the scores with: of the micro-batch, or
     * of each sequence */
    const int64_t nb = seq ? r->nseq : 1;
    const double *cnt = r->bcount;
    const double T = seq ? (double)S : (double)N;
    const double aux_k = aux_w * (double)E / ((double)K * T * T * (double)nb);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++) {
        const double *l = r->logits + t * E;
        const int32_t *idx = r->expert + t * K;
        const double *dp = dprob + t * K;
        double *dl = dlogits + t * E;
        double s[E], ds[E], dpk[K];
        memset(dl, 0, (size_t)E * sizeof(double));
        const double sf = c->topk_scaling > 0 ? c->topk_scaling : 1.0;
        for (int64_t k = 0; k < K; k++) dpk[k] = r->kept[t * K + k] ? dp[k] * sf : 0.0;
        if (c->score == LOOM_MOE_SCORE_SIGMOID) {
            double sum = 0, dot = 0;
            for (int64_t k = 0; k < K; k++) {
                const double sk = sigmoid(l[idx[k]]);
                sum += sk;
                dot += dpk[k] * sk;
            }
            const double D = sum + 1e-20;
            for (int64_t k = 0; k < K; k++) {
                const double sk = sigmoid(l[idx[k]]);
                const double dsk = K > 1 ? dpk[k] / D - dot / (D * D) : dpk[k];
                dl[idx[k]] += dsk * sk * (1 - sk);
            }
        } else if (c->pre_softmax) {
            softmax(l, E, s);
            memset(ds, 0, (size_t)E * sizeof(double));
            for (int64_t k = 0; k < K; k++) ds[idx[k]] = dpk[k];
            double dot = 0;
            for (int64_t e = 0; e < E; e++) dot += s[e] * ds[e];
            for (int64_t e = 0; e < E; e++) dl[e] += s[e] * (ds[e] - dot);
        } else {
            double mx = l[idx[0]], sum = 0, pk[K];
            for (int64_t k = 0; k < K; k++) sum += (pk[k] = exp(l[idx[k]] - mx));
            double dot = 0;
            for (int64_t k = 0; k < K; k++) {
                pk[k] /= sum;
                dot += pk[k] * dpk[k];
            }
            for (int64_t k = 0; k < K; k++) dl[idx[k]] += pk[k] * (dpk[k] - dot);
        }
        if (aux_k != 0) { /* d(aux)/d(s_te) = aux_k * count_e */
            const double *ce = cnt + (seq ? t / S : 0) * E;
            balance_scores(c, l, E, s);
            if (c->score == LOOM_MOE_SCORE_SOFTMAX) {
                double dot = 0;
                for (int64_t e = 0; e < E; e++) dot += s[e] * aux_k * ce[e];
                for (int64_t e = 0; e < E; e++) dl[e] += s[e] * (aux_k * ce[e] - dot);
            } else { /* s = g / (sum g + 1e-20), g = sigmoid(l) */
                double sum = 0, dot = 0;
                for (int64_t e = 0; e < E; e++) sum += sigmoid(l[e]);
                const double D = sum + 1e-20;
                for (int64_t e = 0; e < E; e++) dot += aux_k * ce[e] * sigmoid(l[e]);
                for (int64_t e = 0; e < E; e++) {
                    const double g = sigmoid(l[e]);
                    dl[e] += (aux_k * ce[e] / D - dot / (D * D)) * g * (1 - g);
                }
            }
        }
        if (z_w != 0) { /* d(mean_t lse_t^2)/d(l_te) = 2 lse_t softmax_te / N */
            const double lse = softmax(l, E, s);
            for (int64_t e = 0; e < E; e++) dl[e] += z_w * 2.0 * lse * s[e] / (double)N;
        }
    }
}

void loom_moe_bias_update(float *bias, const double *counts, int64_t E, double rate) {
    double mean = 0;
    for (int64_t e = 0; e < E; e++) mean += counts[e];
    mean /= (double)E;
    for (int64_t e = 0; e < E; e++) {
        const double off = mean - counts[e];
        const float step = off > 0 ? (float)rate : off < 0 ? -(float)rate : 0.0f;
        bias[e] = bias[e] + step;
    }
}
