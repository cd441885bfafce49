/* The CPU's general attention op (struct loom_attn_general) with dropout on the probabilities,
 * against a double-precision reference written from the definition in loom/backend.h: scores
 * scale q.k + bias over the visible keys (key padding, causal), softmax, the dropout multiplier
 * M / (1 - p) with M = loom_rng_keep(seed, key, row * Tk + j, p), out = (P * M/(1-p)) v.
 *  - the forward's out within 1e-5 of the reference (self-attention with bias and padding,
 *    causal self-attention, cross-attention of another length), and a share of the
 *    probabilities actually dropped (so the mask acts);
 *  - the backward's dq, dk, dv and dbias equal the central differences of the reference's
 *    loss sum(out * W) (relative 1e-3), with dropout 0.3;
 *  - the same for a head slice (head0 2 of NH_global 4: tensor parallelism's), whose mask is
 *    that of the global heads; and without dropout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/rng.h"
#include "ops/ops_ref.h"

static struct loom_backend *g_be;

struct problem {
    struct loom_attn_general a;
    int32_t key_len[4];
    double *q, *k, *v, *bias, *W; /* dense: q [B, Tq, NH, HS], k, v [B, Tk, NH, HS] */
};

static double mult(const struct loom_attn_general *a, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!(a->dropout_p > 0.0f)) return 1.0;
    const int64_t row = ((a->sample0 + b) * a->NH_global + a->head0 + h) * a->Tq + i;
    return loom_rng_keep(a->seed, a->key, (uint64_t)(row * a->Tk + j), a->dropout_p)
               ? 1.0 / (1.0 - (double)a->dropout_p)
               : 0.0;
}

/* out [B, Tq, NH, HS] of the reference; returns sum(out * W) */
static double ref_forward(const struct problem *pr, double *out, int64_t *dropped,
                          int64_t *visible) {
    const struct loom_attn_general *a = &pr->a;
    const int64_t HS = a->HS, NH = a->NH;
    double loss = 0.0, s[64];
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t i = 0; i < a->Tq; i++) {
                int64_t lim = pr->key_len[b];
                if (a->causal && i + 1 < lim) lim = i + 1;
                double *o = out + ((b * a->Tq + i) * NH + h) * HS;
                memset(o, 0, (size_t)HS * sizeof *o);
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < lim; j++) {
                    double d = 0.0;
                    for (int64_t c = 0; c < HS; c++)
                        d += pr->q[((b * a->Tq + i) * NH + h) * HS + c] *
                             pr->k[((b * a->Tk + j) * NH + h) * HS + c];
                    s[j] = a->scale * d + (pr->bias ? pr->bias[(h * a->Tq + i) * a->Tk + j] : 0);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int64_t j = 0; j < lim; j++) sum += exp(s[j] - mx);
                for (int64_t j = 0; j < lim; j++) {
                    const double mj = mult(a, b, h, i, j), p = exp(s[j] - mx) / sum * mj;
                    if (dropped) *dropped += mj == 0.0, *visible += 1;
                    for (int64_t c = 0; c < HS; c++)
                        o[c] += p * pr->v[((b * a->Tk + j) * NH + h) * HS + c];
                }
                for (int64_t c = 0; c < HS; c++)
                    loss += o[c] * pr->W[((b * a->Tq + i) * NH + h) * HS + c];
            }
    return loss;
}

static double ref_loss(void *ctx) {
    struct problem *pr = ctx;
    const struct loom_attn_general *a = &pr->a;
    double *out = malloc((size_t)(a->B * a->Tq * a->NH * a->HS) * sizeof *out);
    const double l = ref_forward(pr, out, NULL, NULL);
    free(out);
    return l;
}

static float *to_f(const double *x, int64_t n) {
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)x[i];
    return f;
}
static double *rnd(int64_t n, uint64_t seed, double sd) {
    double *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = sd * loom_rng_normal(seed, 99, (uint64_t)i);
    return x;
}

static void run(const char *name, int64_t B, int64_t Tq, int64_t Tk, int64_t NH, int causal,
                int with_bias, const int32_t *lens, float p, int64_t head0, int64_t NHg) {
    struct problem pr;
    memset(&pr, 0, sizeof pr);
    const int64_t HS = 4, nq = B * Tq * NH * HS, nk = B * Tk * NH * HS, nb = NH * Tq * Tk;
    struct loom_attn_general *a = &pr.a;
    a->B = B, a->Tq = Tq, a->Tk = Tk, a->NH = a->NKV = NH, a->HS = HS;
    a->q_ld = NH * HS, a->k_ld = a->v_ld = NH * HS, a->q_hs = a->k_hs = a->v_hs = HS;
    a->causal = causal, a->scale = 0.5f;
    a->dropout_p = p, a->seed = 11, a->key = 0x1234, a->sample0 = 3, a->head0 = head0;
    a->NH_global = NHg;
    for (int64_t b = 0; b < B; b++) pr.key_len[b] = lens[b];
    pr.q = rnd(nq, 1, 1.0), pr.k = rnd(nk, 2, 1.0), pr.v = rnd(nk, 3, 1.0), pr.W = rnd(nq, 4, 1.0);
    pr.bias = with_bias ? rnd(nb, 5, 0.5) : NULL;
    float *q = to_f(pr.q, nq), *k = to_f(pr.k, nk), *v = to_f(pr.v, nk);
    float *bias = pr.bias ? to_f(pr.bias, nb) : NULL, *dout = to_f(pr.W, nq);
    float *out = malloc((size_t)nq * sizeof *out), *lse = malloc((size_t)(B * NH * Tq) * 4);
    float *dq = malloc((size_t)nq * 4), *dk = malloc((size_t)nk * 4), *dv = malloc((size_t)nk * 4);
    float *dbias = bias ? calloc((size_t)nb, 4) : NULL;
    struct loom_attn_general fa = *a;
    int32_t *klen = malloc((size_t)B * sizeof *klen);
    memcpy(klen, pr.key_len, (size_t)B * sizeof *klen);
    fa.key_len = klen;
    fa.bias = bias;
    loom_op(g_be, attention_general_forward, out, lse, q, k, v, &fa);
    loom_op(g_be, attention_general_backward, dq, dk, dv, dbias, dout, out, lse, q, k, v, &fa);
    double *ref = malloc((size_t)nq * sizeof *ref);
    int64_t dropped = 0, visible = 0;
    ref_forward(&pr, ref, &dropped, &visible);
    char what[160];
    snprintf(what, sizeof what, "%s: forward", name);
    ops_check(what, ops_max_abs_err(out, ref, nq), 1e-5);
    if (p > 0) {
        snprintf(what, sizeof what, "%s: %lld of %lld probabilities dropped (p %.2f)", name,
                 (long long)dropped, (long long)visible, p);
        ops_check_true(what, fabs((double)dropped / (double)visible - p) < 0.12);
    }
    snprintf(what, sizeof what, "%s: dq", name);
    ops_check(what, ops_grad_check(ref_loss, &pr, pr.q, nq, dq, 1e-5), 1e-3);
    snprintf(what, sizeof what, "%s: dk", name);
    ops_check(what, ops_grad_check(ref_loss, &pr, pr.k, nk, dk, 1e-5), 1e-3);
    snprintf(what, sizeof what, "%s: dv", name);
    ops_check(what, ops_grad_check(ref_loss, &pr, pr.v, nk, dv, 1e-5), 1e-3);
    if (bias) {
        snprintf(what, sizeof what, "%s: dbias", name);
        ops_check(what, ops_grad_check(ref_loss, &pr, pr.bias, nb, dbias, 1e-5), 1e-3);
    }
    free(pr.q), free(pr.k), free(pr.v), free(pr.W), free(pr.bias), free(q), free(k), free(v);
    free(bias), free(dout), free(out), free(lse), free(dq), free(dk), free(dv), free(dbias);
    free(klen), free(ref);
}

int main(void) {
    if (loom_backend_create(&g_be, "cpu", 0) != LOOM_OK) return 2;
    const int32_t pad[2] = {7, 5}, full[2] = {6, 6};
    run("self-attention, bias, padding, dropout 0.3", 2, 7, 7, 2, 0, 1, pad, 0.3f, 0, 2);
    run("causal self-attention, bias, dropout 0.3", 2, 6, 6, 2, 1, 1, full, 0.3f, 0, 2);
    run("cross-attention 5 x 7, padding, dropout 0.3", 2, 5, 7, 2, 0, 0, pad, 0.3f, 0, 2);
    run("heads 2-3 of 4 (a slice), dropout 0.3", 2, 5, 7, 2, 0, 1, pad, 0.3f, 2, 4);
    run("no dropout", 2, 5, 7, 2, 0, 1, pad, 0.0f, 0, 2);
    loom_backend_destroy(g_be);
    return ops_finish();
}
