/* The T5 model's parallel and dropout pieces (see t5_internal.h): Megatron's paired regions over
 * each stack, the vocabulary-parallel embedding and loss, row-parallel outputs and the norms
 * that feed column-parallel inputs, and the counter-based dropout of the hidden states and of
 * the attention probabilities. With one tensor-parallel rank every region is the identity. */
#include <math.h>
#include <stdlib.h>

#include "loom/comm.h"
#include "loom/rng.h"
#include "loom/tp.h"
#include "models/t5/t5_internal.h"

/* Dropout (training only), counter-based as GPT's: each site's stream keyed by the iteration,
 * the layer (0 .. Le + Ld - 1 over both stacks) and the site; a mask element by its sample,
 * position and feature (or head and key), so any layout draws the same masks. */
static uint64_t drop_key(const struct loom_step_ctx *ctx, int64_t l, int site) {
    return loom_hash_mix(loom_hash_mix(loom_hash_mix(loom_hash_str("t5-dropout"),
                                                     (uint64_t)ctx->iteration),
                                       (uint64_t)l),
                         (uint64_t)site);
}
/* the hidden dropout of a stack of T positions (the rank's rows) */
struct loom_dropout loom_t5_hidden_dropout(const struct t5 *m, const struct loom_step_ctx *ctx,
                                           int64_t l, int site, int64_t T) {
    struct loom_dropout d = {0};
    d.p = ctx->training ? (float)m->cfg.hidden_dropout : 0.0f;
    d.seed = ctx->seed;
    d.key = drop_key(ctx, l, site);
    d.sample0 = ctx->sample0;
    d.pos0 = m->Tp > 1 ? m->tpr * (T / m->Tp) : 0;
    d.T_global = T;
    d.C_global = m->C;
    return d;
}
void loom_t5_attn_dropout(const struct t5 *m, struct loom_attn_general *a,
                          const struct loom_step_ctx *ctx, int64_t l, int site) {
    a->dropout_p = ctx->training ? (float)m->cfg.attention_dropout : 0.0f;
    a->seed = ctx->seed;
    a->key = drop_key(ctx, l, site);
    a->sample0 = ctx->sample0;
    a->head0 = m->tpr * m->NH;
    a->NH_global = m->NHg;
}

/* Megatron's paired regions over a stack of T positions per sample (loom/tp.h). Entering a
 * tensor-parallel region (a column-parallel linear's input): forward identity, or the all-gather
 * of the rank's positions; backward all-reduce, or reduce-scatter. Leaving one (a row-parallel
 * linear's output): forward all-reduce, or reduce-scatter; backward identity, or all-gather.
 * Without sequence parallelism full and shard are one buffer. */
static enum loom_status enter(struct t5 *m, int64_t T, float *full, const float *shard) {
    if (m->Tp == 1) return LOOM_OK;
    return loom_sp_allgather(m->base.par, full, shard, m->base.B, T / m->Tp, m->C, m->sp_scratch);
}
static enum loom_status enter_backward(struct t5 *m, int64_t T, float *dshard, float *dfull) {
    if (m->Tp == 1) return loom_tp_allreduce(m->base.par, dfull, m->base.B * T * m->C);
    return loom_sp_reduce_scatter(m->base.par, dshard, dfull, m->base.B, T / m->Tp, m->C,
                                  m->sp_scratch);
}
static enum loom_status leave(struct t5 *m, int64_t T, float *shard, float *full) {
    return enter_backward(m, T, shard, full);
}
static enum loom_status leave_backward(struct t5 *m, int64_t T, float *dfull, const float *dshard) {
    return enter(m, T, dfull, dshard);
}

/* a stack's embedding: wte's rows of this rank's vocabulary shard (the positions added once,
 * by tensor-parallel rank 0), summed over the group as it leaves the region */
enum loom_status loom_t5_embed_forward(struct t5 *m, float *x0, const int32_t *tok, int64_t T,
                                       const struct loom_dropout *d) {
    float *full = m->Tp > 1 ? m->dln : x0;
    loom_op(m->base.be, embedding_forward, full, tok, NULL, m->w.wte,
            m->tpr == 0 ? m->w.wpe : NULL, m->base.B, T, m->C, m->v0, m->Vl, 0);
    LOOM_CHECK(leave(m, T, x0, full));
    if (d->p > 0) loom_op(m->base.be, dropout_forward, x0, x0, m->base.B, T / m->Tp, m->C, d);
    return LOOM_OK;
}
enum loom_status loom_t5_embed_backward(struct t5 *m, float *dx0, const int32_t *tok, int64_t T,
                                        const struct loom_dropout *d) {
    if (d->p > 0) loom_op(m->base.be, dropout_backward, dx0, dx0, m->base.B, T / m->Tp, m->C, d);
    float *full = m->Tp > 1 ? m->dresf : dx0;
    LOOM_CHECK(leave_backward(m, T, full, dx0));
    loom_op(m->base.be, embedding_backward, m->g.wte, m->g.wpe, full, tok, NULL, m->base.B, T,
            m->C, m->v0, m->Vl, 0);
    return LOOM_OK;
}

/* a row-parallel linear's output leaving the region, added to the residual: y = x + sum over
 * the group of inp w^T (+ the bias, added once by tensor-parallel rank 0) */
enum loom_status loom_t5_row_parallel_add(struct t5 *m, float *y, const float *x, const float *inp,
                                          const float *w, const float *b, int64_t T, int64_t K,
                                          const struct loom_dropout *d) {
    struct loom_backend *be = m->base.be;
    const int64_t N = m->base.B * T;
    float *full = m->dln, *shard = m->Tp > 1 ? m->tmps : full;
    loom_op(be, linear_forward, full, inp, w, m->tpr == 0 ? b : NULL, N, K, m->C);
    LOOM_CHECK(leave(m, T, shard, full));
    if (d->p > 0) loom_op(be, dropout_forward, shard, shard, m->base.B, T / m->Tp, m->C, d);
    be->ops->add(be, y, x, shard, N / m->Tp * m->C);
    return LOOM_OK;
}

/* a norm of the rank's rows, gathered for the column-parallel linear that reads it */
enum loom_status loom_t5_norm_enter(struct t5 *m, float *out, float *mean, float *rstd,
                                    float *full, const float *x, const float *w, const float *b,
                                    int64_t T) {
    loom_op(m->base.be, layernorm_forward, out, LOOM_DTYPE_F32, mean, rstd, x, w, b,
            m->base.B * T / m->Tp, m->C, (float)m->cfg.norm_eps);
    return enter(m, T, full, out);
}

/* The gradient of a row-parallel linear's output (residual rows dres, gathered), then of its
 * input into dinp: dinp = dy w, w's and b's gradients accumulated */
enum loom_status loom_t5_row_parallel_backward(struct t5 *m, float *dinp, float *dw, float *db,
                                               const float *dres, const float *inp, const float *w,
                                               int64_t T, int64_t K, const struct loom_dropout *d) {
    const float *dshard = dres;
    if (d->p > 0) { /* the branch's share of the residual gradient, through its dropout */
        loom_op(m->base.be, dropout_backward, m->tmps, dres, m->base.B, T / m->Tp, m->C, d);
        dshard = m->tmps;
    }
    float *dy = m->Tp > 1 || d->p > 0 ? m->dresf : (float *)dres;
    if (m->Tp == 1 && d->p > 0)
        m->base.be->ops->copy(m->base.be, dy, dshard,
                              (size_t)(m->base.B * T * m->C) * sizeof(float));
    LOOM_CHECK(leave_backward(m, T, dy, dshard));
    loom_op(m->base.be, linear_backward, dinp, dw, db, dy, inp, w, m->base.B * T, K, m->C);
    return LOOM_OK;
}

/* The gradient of a norm's gathered output (dfull, the column-parallel linears' input gradient,
 * this rank's share) summed over the group as it leaves the region, through the norm into the
 * residual rows dres (accumulated) */
enum loom_status loom_t5_norm_backward(struct t5 *m, float *dres, float *dfull, float *dw,
                                       float *db, const float *x, const float *w,
                                       const float *mean, const float *rstd, int64_t T) {
    float *dout = m->Tp > 1 ? m->dlns : dfull;
    LOOM_CHECK(enter_backward(m, T, dout, dfull));
    loom_op(m->base.be, layernorm_backward, dres, NULL, NULL, dw, db, dout, LOOM_DTYPE_F32, x, w,
            mean, rstd, m->base.B * T / m->Tp, m->C);
    return LOOM_OK;
}

/* The loss of a vocabulary-parallel head: each rank's (max, sum of exponentials, target logit)
 * over its columns, combined over the group into every row's loss; when training the logits
 * become their gradient, dloss d on each labelled row. Returns the labelled rows' loss sum. */
enum loom_status loom_t5_vocab_parallel_loss(struct t5 *m, struct t5_slot *q, float d,
                                             int training, double *sum) {
    struct loom_backend *be = m->base.be;
    const int64_t Nd = m->base.B * m->Td;
    loom_op(be, xent_forward, q->stats, q->logits, q->targets, Nd, m->Vl, m->v0, m->Vvalid);
    float *hs = m->host_stats, *mx = m->host_g, *se = m->host_dloss;
    be->ops->to_host(be, hs, q->stats, (size_t)Nd * 3 * sizeof(float));
    struct loom_comm *g = m->base.par->group[LOOM_PDIM_TP];
    for (int64_t n = 0; n < Nd; n++) mx[n] = hs[3 * n];
    LOOM_CHECK(loom_comm_allreduce(g, mx, Nd, LOOM_DTYPE_F32, LOOM_REDOP_MAX));
    /* [sum of exponentials | target logit] of the rank's columns, then of all */
    float *part = malloc((size_t)Nd * 2 * sizeof(float));
    if (!part) return loom_fail(LOOM_ERR_OOM, "out of memory in the T5 loss");
    for (int64_t n = 0; n < Nd; n++) {
        part[n] = hs[3 * n + 1] * expf(hs[3 * n] - mx[n]);
        part[Nd + n] = hs[3 * n + 2];
    }
    enum loom_status st = loom_comm_allreduce(g, part, 2 * Nd, LOOM_DTYPE_F32, LOOM_REDOP_SUM);
    *sum = 0.0;
    for (int64_t n = 0; st == LOOM_OK && n < Nd; n++) {
        const int lab = q->host_targets[n] >= 0;
        if (lab) *sum += (double)logf(part[n]) + (double)mx[n] - (double)part[Nd + n];
        hs[2 * n] = mx[n];
        hs[2 * n + 1] = part[n];
        se[n] = lab ? d : 0.0f;
    }
    free(part);
    LOOM_CHECK(st);
    if (!training) return LOOM_OK;
    be->ops->to_device(be, q->gstats, hs, (size_t)Nd * 2 * sizeof(float));
    be->ops->to_device(be, q->dloss, se, (size_t)Nd * sizeof(float));
    loom_op(be, xent_backward, q->logits, q->logits, q->targets, q->gstats, q->dloss, Nd, m->Vl,
            m->v0, m->Vvalid);
    return LOOM_OK;
}

