/* The BERT family: Megatron-LM's BERT, the transformer stack of src/models/gpt in its encoder
 * form (bidirectional attention with the padding mask, token-type embeddings; the configuration's
 * encoder, num_tokentypes, lm_head_transform, output_bias and binary_head) and BERT's heads,
 * here, on the last stage:
 *
 *   lnf  = final LayerNorm of the last layer's output            [B*T, H] (the sequence gathered)
 *   LM:  h1 = lnf W_d^T + b_d, g = GELU(h1), h2 = LayerNorm(g)   (lm_head.*, replicated)
 *        logits = h2 E^T + b_out                                 (E the word embedding, tied;
 *                                                                 split by vocabulary over TP)
 *        lm loss = mean over the positions with a label of their cross-entropy
 *   SOP: p = tanh(W_p lnf[b, 0] + b_p)                           (pooler.dense)
 *        s = p W_b^T + b_b [B, 2]                                (binary_head)
 *        sop loss = mean over the samples of the cross-entropy of s against the sop labels
 *
 * The loss is Megatron-LM's: each micro-batch's lm loss + sop loss, averaged over the global
 * batch's micro-batches (struct loom_family.micro_mean); "lm loss" and "sop loss" are reported as
 * those means, and beside them "lm accuracy" (a measure, not a loss): the share of the labelled
 * positions whose label's logit is the largest, by micro-batch likewise. The heads' replicated parts run alike on every tensor-parallel rank: the gradient
 * of h2 is summed over the vocabulary shards first, so every rank computes the same gradients of
 * the replicated weights and of lnf (of which a rank keeps its sequence shard under sequence
 * parallelism). The pooler's tanh and the sentence-order softmax (B x H and B x 2 values) run on
 * the host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/bert.h"
#include "loom/comm.h"
#include "loom/tp.h"
#include "models/gpt/gpt_internal.h"

/* One micro-batch's head activations */
struct head_slot {
    float *lnf_full;          /* [N, C] (the gpt slot's lnf_full, or its own under SP) */
    float *h1, *g, *h2;       /* [N, C] */
    float *h2_mean, *h2_rstd; /* [N] */
    float *logits;            /* [N, Vl] */
    float *stats, *gstats, *dloss; /* [N, 3], [N, 2], [N] */
    int32_t *targets;         /* [N] */
    float *cls, *pool;        /* [B, C]: lnf at the first position, tanh of the pooler */
    float *bin_grad;          /* [B, 2] d(loss)/d(s), host */
    float *host_pool;         /* [B, C] */
};

struct bert_heads {
    struct head_slot *slots;
    float *dlnf, *dh, *dg;    /* [N, C] backward scratch, shared */
    float *dsmall, *dsmall2;  /* [B, C] */
    float *dbin;              /* [B, 2] */
    float *host_stats, *host_g, *host_dloss; /* [N, 3], [N, 2], [N] */
    float *host_small;        /* [B, C] */
    int64_t N, B, T, C, Vl, v0, Vvalid;
};

static struct loom_gpt *G(struct loom_model *m) { return loom_gpt_of(m); }
static struct bert_heads *H(struct loom_gpt *g) { return g->heads; }

static void heads_free(struct loom_gpt *g) {
    struct bert_heads *h = g->heads;
    if (!h) return;
    struct loom_backend *be = g->base.be;
    for (int s = 0; h->slots && s < g->base.nslots; s++) {
        struct head_slot *q = &h->slots[s];
        float *dev[] = {q->h1, q->h2, q->g, q->h2_mean, q->h2_rstd, q->logits, q->stats,
                        q->gstats, q->dloss, (float *)q->targets, q->cls, q->pool};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
            if (dev[i]) be->ops->free(be, dev[i]);
        if (q->lnf_full && q->lnf_full != g->acts[s].lnf_full) be->ops->free(be, q->lnf_full);
        free(q->bin_grad);
        free(q->host_pool);
    }
    free(h->slots);
    float *dev[] = {h->dlnf, h->dh, h->dg, h->dsmall, h->dsmall2, h->dbin};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) be->ops->free(be, dev[i]);
    free(h->host_stats);
    free(h->host_g);
    free(h->host_dloss);
    free(h->host_small);
    free(h);
    g->heads = NULL;
}

static enum loom_status heads_create(struct loom_gpt *g) {
    struct bert_heads *h = calloc(1, sizeof *h);
    if (!h) return loom_fail(LOOM_ERR_OOM, "out of memory for the BERT heads");
    g->heads = h;
    g->heads_free = heads_free;
    if (!g->base.last_stage) return LOOM_OK;
    struct loom_backend *be = g->base.be;
    const struct loom_transformer_config *c = &g->cfg;
    const int tp = loom_tp_size(g->base.par), tpr = loom_tp_rank(g->base.par);
    h->B = g->base.B;
    h->T = c->seq_length;
    h->N = h->B * h->T;
    h->C = c->hidden;
    h->Vl = c->padded_vocab / tp;
    h->v0 = (int64_t)tpr * h->Vl;
    const int64_t valid = c->vocab_size - h->v0;
    h->Vvalid = valid < 0 ? 0 : valid > h->Vl ? h->Vl : valid;
    const int sp = g->base.par->sequence_parallel && tp > 1;
    const int64_t N = h->N, C = h->C, B = h->B;
    int ok = 1;
#define DEV(n) (ok && (p = be->ops->malloc(be, (size_t)(n) * sizeof(float))) ? p : (ok = 0, NULL))
    void *p = NULL;
    h->slots = calloc((size_t)g->base.nslots, sizeof *h->slots);
    if (!h->slots) return loom_fail(LOOM_ERR_OOM, "out of memory for the BERT heads");
    for (int s = 0; s < g->base.nslots && ok; s++) {
        struct head_slot *q = &h->slots[s];
        q->lnf_full = sp ? DEV(N * C) : g->acts[s].lnf_full;
        if (c->lm_head_transform) {
            q->h1 = DEV(N * C);
            q->g = DEV(N * C);
            q->h2 = DEV(N * C);
            q->h2_mean = DEV(N);
            q->h2_rstd = DEV(N);
            q->logits = DEV(N * h->Vl);
            q->stats = DEV(N * 3);
            q->gstats = DEV(N * 2);
            q->dloss = DEV(N);
            q->targets = (int32_t *)DEV(N);
        }
        if (c->binary_head) {
            q->cls = DEV(B * C);
            q->pool = DEV(B * C);
            q->bin_grad = malloc((size_t)(B * 2) * sizeof(float));
            q->host_pool = malloc((size_t)(B * C) * sizeof(float));
            ok = ok && q->bin_grad && q->host_pool;
        }
    }
    h->dlnf = DEV(N * C);
    h->dh = DEV(N * C);
    h->dg = DEV(N * C);
    h->dsmall = DEV(B * C);
    h->dsmall2 = DEV(B * C);
    h->dbin = DEV(B * 2);
#undef DEV
    h->host_stats = malloc((size_t)(N * 3) * sizeof(float));
    h->host_g = malloc((size_t)(N * 2) * sizeof(float));
    h->host_dloss = malloc((size_t)N * sizeof(float));
    h->host_small = malloc((size_t)(B * C) * sizeof(float));
    if (!ok || !h->host_stats || !h->host_g || !h->host_dloss || !h->host_small)
        return loom_fail(LOOM_ERR_OOM, "out of memory: the BERT heads' activations on %s (lower "
                         "--micro-batch-size)", be->ops->name);
    return LOOM_OK;
}

static enum loom_status bert_create(struct loom_model **out, const void *config,
                                    struct loom_parallel *par, struct loom_backend *be, int64_t B,
                                    int nslots) {
    struct loom_model *m = NULL;
    LOOM_CHECK(loom_gpt_family_create(&m, config, par, be, B, nslots));
    m->family = &loom_bert_family;
    enum loom_status s = heads_create(G(m));
    if (s != LOOM_OK) {
        loom_gpt_free(G(m));
        return s;
    }
    *out = m;
    return LOOM_OK;
}

/* The language-model head: logits, the loss of the positions with a label (their mean: the
 * micro-batch's lm loss), and when training the per-row scale of the logits' gradient */
static enum loom_status lm_forward(struct loom_gpt *g, struct head_slot *q, const int32_t *labels,
                                   const struct loom_step_ctx *ctx, double *lm, double *acc) {
    struct bert_heads *h = H(g);
    struct loom_backend *be = g->base.be;
    const int64_t N = h->N, C = h->C;
    loom_op(be, linear_forward, q->h1, q->lnf_full, g->w.lmh_w, g->w.lmh_b, N, C, C);
    loom_op(be, gelu_forward, g->cfg.head_gelu, q->g, q->h1, N * C);
    loom_op(be, layernorm_forward, q->h2, LOOM_DTYPE_F32, q->h2_mean, q->h2_rstd, q->g,
            g->w.lmh_ln_w, g->w.lmh_ln_b, N, C, (float)g->cfg.norm_eps);
    loom_op(be, linear_forward, q->logits, q->h2, g->w.out_w, g->w.out_b, N, C, h->Vl);
    be->ops->to_device(be, q->targets, labels, (size_t)N * sizeof(int32_t));
    loom_op(be, xent_forward, q->stats, q->logits, q->targets, N, h->Vl, h->v0, h->Vvalid);
    float *hs = h->host_stats, *hg = h->host_g;
    be->ops->to_host(be, hs, q->stats, (size_t)N * 3 * sizeof(float));
    struct loom_comm *tpg = g->base.par->group[LOOM_PDIM_TP];
    if (tpg && loom_comm_size(tpg) > 1) { /* combine the vocabulary shards */
        float *mx = malloc((size_t)N * 3 * sizeof(float));
        if (!mx) return loom_fail(LOOM_ERR_OOM, "out of memory in the BERT loss");
        float *se = mx + N, *tl = mx + 2 * N;
        for (int64_t n = 0; n < N; n++) mx[n] = hs[3 * n];
        enum loom_status s = loom_comm_allreduce(tpg, mx, N, LOOM_DTYPE_F32, LOOM_REDOP_MAX);
        for (int64_t n = 0; n < N; n++) {
            se[n] = hs[3 * n + 1] * expf(hs[3 * n] - mx[n]);
            tl[n] = hs[3 * n + 2];
        }
        if (s == LOOM_OK)
            s = loom_comm_allreduce(tpg, se, 2 * N, LOOM_DTYPE_F32, LOOM_REDOP_SUM);
        for (int64_t n = 0; n < N; n++) {
            hs[3 * n] = mx[n];
            hs[3 * n + 1] = se[n];
            hs[3 * n + 2] = tl[n];
        }
        free(mx);
        LOOM_CHECK(s);
    }
    double sum = 0.0;
    int64_t cnt = 0, right = 0;
    for (int64_t n = 0; n < N; n++) {
        hg[2 * n] = hs[3 * n];
        hg[2 * n + 1] = hs[3 * n + 1];
        if (labels[n] < 0) continue;
        sum += (double)logf(hs[3 * n + 1]) + (double)hs[3 * n] - (double)hs[3 * n + 2];
        right += hs[3 * n + 2] == hs[3 * n]; /* the label's logit is the largest */
        cnt++;
    }
    const float d = cnt > 0 ? (float)((double)ctx->dloss / (double)cnt) : 0.0f;
    for (int64_t n = 0; n < N; n++) h->host_dloss[n] = labels[n] >= 0 ? d : 0.0f;
    be->ops->to_device(be, q->gstats, hg, (size_t)N * 2 * sizeof(float));
    be->ops->to_device(be, q->dloss, h->host_dloss, (size_t)N * sizeof(float));
    *lm = cnt > 0 ? sum / (double)cnt : 0.0;
    *acc = cnt > 0 ? (double)right / (double)cnt : 0.0;
    return LOOM_OK;
}

/* The sentence-order head: the pooler at each sample's first position, the two logits, their
 * cross-entropy against the labels (mean over the samples), and its gradient kept for the
 * backward */
static void sop_forward(struct loom_gpt *g, struct head_slot *q, const int32_t *sop,
                        const struct loom_step_ctx *ctx, double *loss) {
    struct bert_heads *h = H(g);
    struct loom_backend *be = g->base.be;
    const int64_t B = h->B, T = h->T, C = h->C;
    for (int64_t b = 0; b < B; b++)
        be->ops->copy(be, q->cls + b * C, q->lnf_full + b * T * C, (size_t)C * sizeof(float));
    loom_op(be, linear_forward, q->pool, q->cls, g->w.pool_w, g->w.pool_b, B, C, C);
    be->ops->to_host(be, q->host_pool, q->pool, (size_t)(B * C) * sizeof(float));
    for (int64_t i = 0; i < B * C; i++) q->host_pool[i] = tanhf(q->host_pool[i]);
    be->ops->to_device(be, q->pool, q->host_pool, (size_t)(B * C) * sizeof(float));
    double sum = 0.0;
    /* the two logits on the device, read back */
    loom_op(be, linear_forward, h->dbin, q->pool, g->w.bin_w, g->w.bin_b, B, C, 2);
    float *sb = q->bin_grad;
    be->ops->to_host(be, sb, h->dbin, (size_t)(B * 2) * sizeof(float));
    const double scale = (double)ctx->dloss / (double)B;
    for (int64_t b = 0; b < B; b++) {
        const double x0 = sb[2 * b], x1 = sb[2 * b + 1], mx = x0 > x1 ? x0 : x1;
        const double lse = mx + log(exp(x0 - mx) + exp(x1 - mx));
        const int y = sop[b] != 0;
        sum += lse - (y ? x1 : x0);
        const double p1 = exp(x1 - lse);
        sb[2 * b] = (float)(((1.0 - p1) - (y == 0)) * scale);
        sb[2 * b + 1] = (float)((p1 - (y == 1)) * scale);
    }
    *loss = sum / (double)B;
}

static enum loom_status bert_last_forward(struct loom_model *m, int slot,
                                          const struct loom_micro *mb,
                                          const struct loom_step_ctx *ctx,
                                          struct loom_losses *losses) {
    struct loom_gpt *g = G(m);
    struct head_slot *q = &H(g)->slots[slot];
    loom_gpt_final_norm_forward(g, slot);
    LOOM_CHECK(loom_gpt_gather_sequence(g, q->lnf_full, g->acts[slot].lnf));
    double lm = 0.0, sop = 0.0, acc = 0.0;
    if (g->cfg.lm_head_transform) {
        LOOM_CHECK(lm_forward(g, q, mb->labels, ctx, &lm, &acc));
        losses->sum[0] += lm;
        losses->count[0] += 1.0;
        losses->sum[2] += acc;
        losses->count[2] += 1.0;
    }
    if (g->cfg.binary_head) {
        sop_forward(g, q, mb->sop_labels, ctx, &sop);
        losses->sum[1] += sop;
        losses->count[1] += 1.0;
    }
    return LOOM_OK;
}

static enum loom_status bert_last_backward(struct loom_model *m, int slot,
                                           const struct loom_micro *mb,
                                           const struct loom_step_ctx *ctx) {
    (void)mb;
    (void)ctx;
    struct loom_gpt *g = G(m);
    struct bert_heads *h = H(g);
    struct head_slot *q = &h->slots[slot];
    struct loom_backend *be = g->base.be;
    const int64_t N = h->N, B = h->B, T = h->T, C = h->C;
    be->ops->zero(be, h->dlnf, (size_t)(N * C) * sizeof(float));
    if (g->cfg.lm_head_transform) {
        loom_op(be, xent_backward, q->logits, q->logits, q->targets, q->gstats, q->dloss, N, h->Vl,
                h->v0, h->Vvalid);
        /* d(h2): this rank's vocabulary shard's share, summed over the shards */
        loom_op(be, linear_backward, h->dh, g->g.out_w, g->g.out_b, q->logits, q->h2, g->w.out_w,
                N, C, h->Vl);
        LOOM_CHECK(loom_tp_allreduce(g->base.par, h->dh, N * C));
        be->ops->zero(be, h->dg, (size_t)(N * C) * sizeof(float));
        loom_op(be, layernorm_backward, h->dg, NULL, NULL, g->g.lmh_ln_w, g->g.lmh_ln_b, h->dh,
                LOOM_DTYPE_F32, q->g, g->w.lmh_ln_w, q->h2_mean, q->h2_rstd, N, C);
        loom_op(be, gelu_backward, g->cfg.head_gelu, h->dh, h->dg, q->h1, N * C);
        loom_op(be, linear_backward, h->dlnf, g->g.lmh_w, g->g.lmh_b, h->dh, q->lnf_full,
                g->w.lmh_w, N, C, C);
    }
    if (g->cfg.binary_head) {
        be->ops->to_device(be, h->dbin, q->bin_grad, (size_t)(B * 2) * sizeof(float));
        loom_op(be, linear_backward, h->dsmall, g->g.bin_w, g->g.bin_b, h->dbin, q->pool,
                g->w.bin_w, B, C, 2);
        /* through the tanh: d(pre) = d(p) (1 - p^2) */
        be->ops->to_host(be, h->host_small, h->dsmall, (size_t)(B * C) * sizeof(float));
        for (int64_t i = 0; i < B * C; i++)
            h->host_small[i] *= 1.0f - q->host_pool[i] * q->host_pool[i];
        be->ops->to_device(be, h->dsmall, h->host_small, (size_t)(B * C) * sizeof(float));
        loom_op(be, linear_backward, h->dsmall2, g->g.pool_w, g->g.pool_b, h->dsmall, q->cls,
                g->w.pool_w, B, C, C);
        for (int64_t b = 0; b < B; b++)
            be->ops->axpy(be, h->dlnf + b * T * C, 1.0f, h->dsmall2 + b * C, C);
    }
    /* this rank's rows of d(lnf) (every rank holds the same whole one), into the final norm */
    float *dlnf = h->dh;
    loom_gpt_sequence_shard(g, dlnf, h->dlnf);
    loom_gpt_final_norm_backward(g, slot, dlnf);
    return LOOM_OK;
}

/* 6 N per token and attention's 12 L H T, as GPT's count (the heads are in N) */
const struct loom_family loom_bert_family = {
    .name = "bert",
    .num_losses = 3,
    .loss_names = {"lm loss", "sop loss", "lm accuracy"},
    .micro_mean = 1,
    .measures = 1u << 2, /* the share of masked positions whose label has the largest logit */
    .create = bert_create,
    .free = loom_gpt_family_free,
    .init_weights = loom_gpt_family_init_weights,
    .chunk_layers = loom_gpt_family_chunk_layers,
    .prepare = loom_gpt_family_prepare,
    .micro_begin = loom_gpt_family_micro_begin,
    .first_forward = loom_gpt_family_first_forward,
    .layer_forward = loom_gpt_family_layer_forward,
    .last_forward = bert_last_forward,
    .last_backward = bert_last_backward,
    .layer_backward = loom_gpt_family_layer_backward,
    .first_backward = loom_gpt_family_first_backward,
    .boundary = loom_gpt_family_boundary,
    .flops_per_sample = loom_gpt_family_flops_per_sample,
};
