/* Incremental GPT decoding with a key/value cache (see loom/model.h). The block is the one of
 * gpt.c applied to a single row at position `pos`, without dropout; keys and values of every
 * position are kept per layer as [max_len, NKV, HS]. */
#include <stdlib.h>
#include <string.h>

#include "models/gpt/gpt_internal.h"

struct loom_gpt_decoder {
    struct loom_gpt *m;
    int64_t max_len, pos;
    float **kcache, **vcache; /* [L] -> [max_len, NKV, HS] on the device */
    float *x, *h, *qkv, *q, *att, *tmp, *fc1, *act, *logits; /* device rows */
    float *qk_stats; /* qk_layernorm: 2 (NH + NKV), the statistics of one row's heads */
    int32_t *tok;                                            /* device [1] */
    void *mem;
};

enum loom_status loom_gpt_decoder_create(struct loom_gpt_decoder **out, struct loom_gpt *m,
                                         int64_t max_len) {
    const struct loom_transformer_config *c = &m->cfg;
    if (loom_tp_size(m->base.par) != 1 || loom_pp_size(m->base.par) != 1)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "generation runs on one rank (TP = PP = 1)");
    if (c->moe.num_experts > 0)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "generation with MoE layers (--num-experts %lld) "
                         "is not supported yet", (long long)c->moe.num_experts);
    if (c->posemb == LOOM_POSEMB_LEARNED && max_len > c->max_positions)
        return loom_fail(LOOM_ERR_INVALID_ARG, "prompt + --max-new-tokens = %lld exceeds the "
                         "model's %lld learned positions", (long long)max_len,
                         (long long)c->max_positions);
    struct loom_gpt_decoder *d = calloc(1, sizeof *d);
    if (!d) return loom_fail(LOOM_ERR_OOM, "out of memory");
    d->m = m;
    loom_gpt_norm_weights(m); /* the weights are fixed while it decodes */
    d->max_len = max_len;
    int64_t C = c->hidden, HS = loom_gpt_head_size(c), NH = c->heads, NKV = c->query_groups;
    int64_t QKV = (NH + 2 * NKV) * HS, F = c->ffn_hidden, F1 = c->swiglu ? 2 * F : F;
    int64_t L = c->num_layers, cache = max_len * NKV * HS;
    const size_t qk_stats = c->qk_layernorm ? (size_t)(2 * (NH + NKV)) : 1;
    size_t floats[] = {
        (size_t)C, (size_t)C,  (size_t)QKV, (size_t)(NH * HS),       (size_t)(NH * HS),
        (size_t)C, (size_t)F1, (size_t)F,   (size_t)c->padded_vocab, qk_stats};
    size_t total = 64 + 2 * (size_t)L * loom_arena_round((size_t)cache * sizeof(float));
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        total += loom_arena_round(floats[i] * sizeof(float));
    struct loom_backend *be = m->base.be;
    d->mem = be->ops->malloc(be, total);
    d->kcache = calloc((size_t)L, sizeof(float *));
    d->vcache = calloc((size_t)L, sizeof(float *));
    if (!d->mem || !d->kcache || !d->vcache) {
        loom_gpt_decoder_free(d);
        return loom_fail(LOOM_ERR_OOM, "out of memory for the key/value cache");
    }
    struct loom_arena a;
    loom_arena_init(&a, d->mem, total);
    for (int64_t l = 0; l < L; l++) {
        d->kcache[l] = loom_arena_alloc(&a, (size_t)cache * sizeof(float));
        d->vcache[l] = loom_arena_alloc(&a, (size_t)cache * sizeof(float));
    }
    float **rows[] = {&d->x,   &d->h,   &d->qkv, &d->q,      &d->att,
                      &d->tmp, &d->fc1, &d->act, &d->logits, &d->qk_stats};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        *rows[i] = loom_arena_alloc(&a, floats[i] * sizeof(float));
    d->tok = loom_arena_alloc(&a, 64);
    *out = d;
    return LOOM_OK;
}

void loom_gpt_decoder_free(struct loom_gpt_decoder *d) {
    if (!d) return;
    if (d->mem) d->m->base.be->ops->free(d->m->base.be, d->mem);
    free(d->kcache);
    free(d->vcache);
    free(d);
}

int64_t loom_gpt_decoder_position(const struct loom_gpt_decoder *d) { return d->pos; }

static void norm(struct loom_gpt *m, float *out, const float *x, const float *w, const float *b,
                 float *scratch) {
    struct loom_backend *be = m->base.be;
    /* mean/rstd of the single row go to scratch (two floats) */
    if (m->cfg.norm == LOOM_NORM_LAYERNORM)
        loom_op(be, layernorm_forward, out, LOOM_DTYPE_F32, scratch, scratch + 1, x, w, b, 1,
                m->cfg.hidden, (float)m->cfg.norm_eps);
    else
        loom_op(be, rmsnorm_forward, out, LOOM_DTYPE_F32, scratch, x, w, 1, m->cfg.hidden,
                (float)m->cfg.norm_eps);
}

enum loom_status loom_gpt_decoder_step(struct loom_gpt_decoder *d, int32_t token, float *logits) {
    struct loom_gpt *m = d->m;
    struct loom_backend *be = m->base.be;
    const struct loom_transformer_config *c = &m->cfg;
    if (d->pos >= d->max_len)
        return loom_fail(LOOM_ERR_INVALID_ARG, "generation exceeded %lld positions", (long long)d->max_len);
    if (token < 0 || token >= c->vocab_size)
        return loom_fail(LOOM_ERR_INVALID_ARG, "token %d outside the vocabulary [0, %lld)", token,
                         (long long)c->vocab_size);
    int64_t C = c->hidden, HS = loom_gpt_head_size(c), NH = c->heads, NKV = c->query_groups;
    int64_t R = NH / NKV, QKV = (NH + 2 * NKV) * HS, F = c->ffn_hidden, F1 = c->swiglu ? 2 * F : F;
    int64_t pos = d->pos;
    float *scratch = d->tmp; /* C floats; reused below only after the norm's stats are dead */
    be->ops->to_device(be, d->tok, &token, sizeof token);
    loom_op(be, embedding_forward, d->x, d->tok, NULL, m->w.wte, m->w.wpe, 1, 1, C, 0,
            c->padded_vocab, pos);
    for (int64_t l = 0; l < c->num_layers; l++) {
        const struct loom_gpt_layer_ptrs *w = &m->w.layers[l];
        norm(m, d->h, d->x, m->wn.layers[l].ln1_w, w->ln1_b, scratch);
        loom_op(be, linear_forward, d->qkv, d->h, w->qkv_w, w->qkv_b, 1, C, QKV);
        if (c->qk_layernorm) /* the statistics: mean (LayerNorm), then rstd */
            loom_gpt_qk_norm_forward(m, l, d->qkv, LOOM_DTYPE_F32, NULL, d->qk_stats,
                                     d->qk_stats + NH + NKV, 1, NH, NKV);
        if (c->posemb == LOOM_POSEMB_ROPE) {
            const struct loom_rope rot = loom_gpt_rope(c);
            loom_op(be, rope, d->qkv, LOOM_DTYPE_F32, NULL, 1, 1, NH, NKV, HS, pos, &rot, 0);
        }
        for (int64_t g = 0; g < NKV; g++) {
            const float *grp = d->qkv + g * (R + 2) * HS;
            be->ops->copy(be, d->q + g * R * HS, grp, (size_t)(R * HS) * sizeof(float));
            be->ops->copy(be, d->kcache[l] + (pos * NKV + g) * HS, grp + R * HS, (size_t)HS * sizeof(float));
            be->ops->copy(be, d->vcache[l] + (pos * NKV + g) * HS, grp + (R + 1) * HS, (size_t)HS * sizeof(float));
        }
        loom_op(be, attention_decode, d->att, d->q, d->kcache[l], d->vcache[l], pos + 1, NH, NKV, HS,
                (float)(1.0 / sqrt((double)HS)));
        loom_op(be, linear_forward, d->tmp, d->att, w->proj_w, w->proj_b, 1, NH * HS, C);
        loom_op(be, add, d->x, d->x, d->tmp, C);
        norm(m, d->h, d->x, m->wn.layers[l].ln2_w, w->ln2_b, scratch);
        loom_op(be, linear_forward, d->fc1, d->h, w->fc1_w, w->fc1_b, 1, C, F1);
        if (c->swiglu)
            loom_op(be, swiglu_forward, d->act, d->fc1, LOOM_DTYPE_F32, 1, F);
        else
            loom_op(be, gelu_forward, c->gelu, d->act, d->fc1, F);
        loom_op(be, linear_forward, d->tmp, d->act, w->fc2_w, w->fc2_b, 1, F, C);
        loom_op(be, add, d->x, d->x, d->tmp, C);
    }
    norm(m, d->h, d->x, m->wn.lnf_w, m->w.lnf_b, scratch);
    loom_op(be, linear_forward, d->logits, d->h, m->w.out_w, NULL, 1, C, c->padded_vocab);
    be->ops->to_host(be, logits, d->logits, (size_t)c->vocab_size * sizeof(float));
    d->pos++;
    return LOOM_OK;
}
