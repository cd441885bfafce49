/* The GPT parameter table: one entry per parameter, driving everything else.
 *
 * Names follow Megatron-Core's GPT module paths, so users of that ecosystem recognise them:
 *   embedding.word_embeddings.weight             [Vp, C]        split over TP on dim 0
 *   embedding.position_embeddings.weight         [Tmax, C]      (learned positions only)
 *   decoder.layers.{i}.input_layernorm.{weight,bias}
 *   decoder.layers.{i}.self_attention.linear_qkv.{weight,bias}  [(NH+2NKV)HS, C]  dim 0
 *   decoder.layers.{i}.self_attention.{q,k}_layernorm.{weight,bias} [HS]  (--qk-layernorm)
 *   decoder.layers.{i}.self_attention.linear_proj.{weight,bias} [C, NH*HS]        dim 1
 *   decoder.layers.{i}.pre_mlp_layernorm.{weight,bias}
 *   decoder.layers.{i}.mlp.linear_fc1.{weight,bias}  [F or 2F, C]  dim 0 (2 chunks for SwiGLU)
 *   decoder.layers.{i}.mlp.linear_fc2.{weight,bias}  [C, F]        dim 1
 *   decoder.final_layernorm.{weight,bias}
 *   output_layer.weight                          [Vp, C]        (untied only) dim 0
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt/gpt_internal.h"

/* Where the model keeps its pointer to a parameter (struct loom_param.field, which set_ptrs of
 * gpt.c follows): a field of struct loom_gpt_ptrs, or of struct loom_gpt_layer_ptrs for a layer's
 * parameter. */
#define TOP(f) offsetof(struct loom_gpt_ptrs, f)
#define LAYER(f) offsetof(struct loom_gpt_layer_ptrs, f)

struct table_builder {
    struct loom_param *p;
    int n, cap;
    int oom;                 /* an entry did not fit: the table is dropped at the end */
    struct loom_param spare; /* what add returns then, for its caller to fill in vain */
};

static struct loom_param *add(struct table_builder *tb, const char *name, int ndim, int64_t d0,
                              int64_t d1, int tp_dim, int layer, enum loom_init init,
                              size_t field) {
    if (tb->n == tb->cap && !tb->oom) {
        const int cap = tb->cap ? tb->cap * 2 : 64;
        struct loom_param *p = realloc(tb->p, (size_t)cap * sizeof *p);
        if (p) {
            tb->p = p;
            tb->cap = cap;
        } else {
            tb->oom = 1;
        }
    }
    struct loom_param *q = tb->oom ? &tb->spare : &tb->p[tb->n++];
    memset(q, 0, sizeof *q);
    snprintf(q->name, sizeof q->name, "%s", name);
    q->ndim = ndim;
    q->shape[0] = d0;
    q->shape[1] = ndim > 1 ? d1 : 1;
    q->tp_dim = tp_dim;
    q->tp_chunks = 1;
    q->layer = layer;
    q->init = init;
    q->roles = ndim >= 2 ? LOOM_ROLE_DECAY : 0;
    q->offset = -1;
    q->field = field;
    return q;
}

void loom_gpt_chunk_layers(const struct loom_transformer_config *c, int pp, int vpp, int stage, int chunk,
                           int64_t *l0, int64_t *l1) {
    const int64_t L = c->num_layers, first = pp > 1 ? c->first_stage_layers : 0,
                  last = pp > 1 ? c->last_stage_layers : 0;
    if (!first && !last) { /* chunk `chunk` of every stage, then the next: Megatron's order */
        const int64_t n = L / ((int64_t)pp * vpp), k = (int64_t)chunk * pp + stage;
        *l0 = k * n;
        *l1 = *l0 + n;
        return;
    }
    /* without virtual chunks: the first and last stages' counts, the others equal shares */
    const int lo = first > 0, hi = last > 0;
    const int64_t mid = pp - lo - hi > 0 ? (L - first - last) / (pp - lo - hi) : 0;
    if (lo && stage == 0) {
        *l0 = 0;
        *l1 = first;
    } else if (hi && stage == pp - 1) {
        *l0 = L - last;
        *l1 = L;
    } else {
        *l0 = first + (int64_t)(stage - lo) * mid;
        *l1 = *l0 + mid;
    }
}

int loom_gpt_layer_stage(const struct loom_transformer_config *c, int pp, int vpp, int64_t l) {
    for (int chunk = 0; chunk < vpp; chunk++)
        for (int s = 0; s < pp; s++) {
            int64_t l0, l1;
            loom_gpt_chunk_layers(c, pp, vpp, s, chunk, &l0, &l1);
            if (l >= l0 && l < l1) return s;
        }
    return -1;
}

int loom_gpt_layer_is_local(const struct loom_transformer_config *c, const struct loom_parallel *par,
                            int64_t layer) {
    const int vpp = par->vpp > 0 ? par->vpp : 1;
    return loom_gpt_layer_stage(c, loom_pp_size(par), vpp, layer) == loom_pp_rank(par);
}

enum loom_status loom_gpt_build_table(struct loom_gpt *m) {
    const struct loom_transformer_config *c = &m->cfg;
    struct table_builder tb = {0};
    int64_t C = c->hidden, HS = loom_gpt_head_size(c), NH = c->heads, NKV = c->query_groups;
    int64_t F = c->ffn_hidden, QKV = (NH + 2 * NKV) * HS;
    int ln = c->norm == LOOM_NORM_LAYERNORM;
    char name[96];

    add(&tb, "embedding.word_embeddings.weight", 2, c->padded_vocab, C, 0, LOOM_UNIT_FIRST,
        LOOM_INIT_NORMAL, TOP(wte))->roles |=
        LOOM_ROLE_VOCAB_ROWS | LOOM_ROLE_DECOUPLED_LR | (c->untie ? 0 : LOOM_ROLE_TIED);
    if (c->posemb == LOOM_POSEMB_LEARNED)
        add(&tb, "embedding.position_embeddings.weight", 2, c->max_positions, C, -1,
            LOOM_UNIT_FIRST, LOOM_INIT_NORMAL, TOP(wpe));
    if (c->num_tokentypes > 0) /* BERT's segments */
        add(&tb, "embedding.tokentype_embeddings.weight", 2, c->num_tokentypes, C, -1,
            LOOM_UNIT_FIRST, LOOM_INIT_NORMAL, TOP(tte));
    /* the stack: Megatron-Core's decoder, or the encoder of the encoder form (BERT) */
    const char *stack = c->encoder ? "encoder" : "decoder";
    /* the norms' weights: 1, or with zero-centred weights (--apply-layernorm-1p) 0 */
    const enum loom_init gamma = c->layernorm_1p ? LOOM_INIT_ZEROS : LOOM_INIT_ONES;
    for (int64_t l = 0; l < c->num_layers; l++) {
#define LNAME(suffix) (snprintf(name, sizeof name, "%s.layers.%lld.%s", stack, (long long)l, suffix), name)
        add(&tb, LNAME("input_layernorm.weight"), 1, C, 0, -1, (int)l, gamma, LAYER(ln1_w));
        if (ln)
            add(&tb, LNAME("input_layernorm.bias"), 1, C, 0, -1, (int)l, LOOM_INIT_ZEROS,
                LAYER(ln1_b));
        add(&tb, LNAME("self_attention.linear_qkv.weight"), 2, QKV, C, 0, (int)l, LOOM_INIT_NORMAL,
            LAYER(qkv_w));
        if (c->bias || c->qkv_bias)
            add(&tb, LNAME("self_attention.linear_qkv.bias"), 1, QKV, 0, 0, (int)l, LOOM_INIT_ZEROS,
                LAYER(qkv_b));
        if (c->qk_layernorm) { /* replicated: every TP rank's heads use them */
            add(&tb, LNAME("self_attention.q_layernorm.weight"), 1, HS, 0, -1, (int)l, gamma,
                LAYER(q_ln_w));
            if (ln)
                add(&tb, LNAME("self_attention.q_layernorm.bias"), 1, HS, 0, -1, (int)l,
                    LOOM_INIT_ZEROS, LAYER(q_ln_b));
            add(&tb, LNAME("self_attention.k_layernorm.weight"), 1, HS, 0, -1, (int)l, gamma,
                LAYER(k_ln_w));
            if (ln)
                add(&tb, LNAME("self_attention.k_layernorm.bias"), 1, HS, 0, -1, (int)l,
                    LOOM_INIT_ZEROS, LAYER(k_ln_b));
        }
        add(&tb, LNAME("self_attention.linear_proj.weight"), 2, C, NH * HS, 1, (int)l,
            LOOM_INIT_NORMAL_SCALED, LAYER(proj_w));
        if (c->bias)
            add(&tb, LNAME("self_attention.linear_proj.bias"), 1, C, 0, -1, (int)l, LOOM_INIT_ZEROS,
                LAYER(proj_b));
        add(&tb, LNAME("pre_mlp_layernorm.weight"), 1, C, 0, -1, (int)l, gamma, LAYER(ln2_w));
        if (ln)
            add(&tb, LNAME("pre_mlp_layernorm.bias"), 1, C, 0, -1, (int)l, LOOM_INIT_ZEROS,
                LAYER(ln2_b));
        int64_t F1 = c->swiglu ? 2 * F : F;
        struct loom_param *fc1 =
            add(&tb, LNAME("mlp.linear_fc1.weight"), 2, F1, C, 0, (int)l, LOOM_INIT_NORMAL,
                LAYER(fc1_w));
        fc1->tp_chunks = c->swiglu ? 2 : 1;
        if (c->bias) {
            struct loom_param *b =
                add(&tb, LNAME("mlp.linear_fc1.bias"), 1, F1, 0, 0, (int)l, LOOM_INIT_ZEROS,
                    LAYER(fc1_b));
            b->tp_chunks = fc1->tp_chunks;
        }
        add(&tb, LNAME("mlp.linear_fc2.weight"), 2, C, F, 1, (int)l, LOOM_INIT_NORMAL_SCALED,
            LAYER(fc2_w));
        if (c->bias)
            add(&tb, LNAME("mlp.linear_fc2.bias"), 1, C, 0, -1, (int)l, LOOM_INIT_ZEROS,
                LAYER(fc2_b));
#undef LNAME
    }
    snprintf(name, sizeof name, "%s.final_layernorm.weight", stack);
    add(&tb, name, 1, C, 0, -1, LOOM_UNIT_LAST, gamma, TOP(lnf_w));
    snprintf(name, sizeof name, "%s.final_layernorm.bias", stack);
    if (ln) add(&tb, name, 1, C, 0, -1, LOOM_UNIT_LAST, LOOM_INIT_ZEROS, TOP(lnf_b));
    if (c->lm_head_transform) { /* BERT's LM head: dense, GELU, LayerNorm (replicated) */
        add(&tb, "lm_head.dense.weight", 2, C, C, -1, LOOM_UNIT_LAST, LOOM_INIT_NORMAL, TOP(lmh_w));
        add(&tb, "lm_head.dense.bias", 1, C, 0, -1, LOOM_UNIT_LAST, LOOM_INIT_ZEROS, TOP(lmh_b));
        add(&tb, "lm_head.layer_norm.weight", 1, C, 0, -1, LOOM_UNIT_LAST, LOOM_INIT_ONES,
            TOP(lmh_ln_w));
        add(&tb, "lm_head.layer_norm.bias", 1, C, 0, -1, LOOM_UNIT_LAST, LOOM_INIT_ZEROS,
            TOP(lmh_ln_b));
    }
    if (c->untie)
        add(&tb, "output_layer.weight", 2, c->padded_vocab, C, 0, LOOM_UNIT_LAST,
            LOOM_INIT_NORMAL, TOP(out_w))->roles |= LOOM_ROLE_VOCAB_ROWS | LOOM_ROLE_DECOUPLED_LR;
    if (c->output_bias) /* split with the vocabulary */
        add(&tb, "output_layer.bias", 1, c->padded_vocab, 0, 0, LOOM_UNIT_LAST,
            LOOM_INIT_ZEROS, TOP(out_b))->roles |= LOOM_ROLE_VOCAB_ROWS;
    if (c->binary_head) { /* the pooler and the sentence-order head (replicated) */
        add(&tb, "pooler.dense.weight", 2, C, C, -1, LOOM_UNIT_LAST, LOOM_INIT_NORMAL, TOP(pool_w));
        add(&tb, "pooler.dense.bias", 1, C, 0, -1, LOOM_UNIT_LAST, LOOM_INIT_ZEROS, TOP(pool_b));
        add(&tb, "binary_head.weight", 2, 2, C, -1, LOOM_UNIT_LAST, LOOM_INIT_NORMAL, TOP(bin_w));
        add(&tb, "binary_head.bias", 1, 2, 0, -1, LOOM_UNIT_LAST, LOOM_INIT_ZEROS, TOP(bin_b));
    }

    if (tb.oom) {
        free(tb.p);
        return loom_fail(LOOM_ERR_OOM, "out of memory for the parameter table");
    }

    /* ownership and local shapes */
    int tp = loom_tp_size(m->base.par);
    int first = loom_pp_rank(m->base.par) == 0, last = loom_pp_rank(m->base.par) == loom_pp_size(m->base.par) - 1;
    int64_t off = 0;
    const int sp = m->base.par->sequence_parallel && tp > 1;
    for (int i = 0; i < tb.n; i++) {
        struct loom_param *p = &tb.p[i];
        /* replicated over TP with a rank's share of the gradient: under sequence parallelism
         * the norms' weights (the rank's rows), the query and key norms always (its heads); the
         * row-parallel biases and position embeddings see the gathered gradient */
        if (tp > 1 && p->tp_dim < 0 && strstr(p->name, "layernorm") &&
            (sp || strstr(p->name, "self_attention.q_layernorm.") ||
             strstr(p->name, "self_attention.k_layernorm.")))
            p->roles |= LOOM_ROLE_TP_PARTIAL;
        if (p->layer >= 0)
            p->local = loom_gpt_layer_is_local(c, m->base.par, p->layer);
        else if (p->layer == LOOM_UNIT_FIRST)
            /* the last stage holds its own copy of a tied word embedding for the output layer */
            p->local = first || (last && (p->roles & LOOM_ROLE_TIED));
        else
            p->local = last;
        p->local_shape[0] = p->shape[0];
        p->local_shape[1] = p->shape[1];
        if (p->tp_dim >= 0) {
            LOOM_ASSERT(p->shape[p->tp_dim] % ((int64_t)tp * p->tp_chunks) == 0);
            p->local_shape[p->tp_dim] = p->shape[p->tp_dim] / tp;
        }
        if (p->local) {
            p->offset = off;
            /* keep every tensor 16-float aligned for vector loads */
            off += (p->local_shape[0] * p->local_shape[1] + 15) / 16 * 16;
        }
    }
    m->base.params = tb.p;
    m->base.nparams = tb.n;
    m->base.num_local = off;
    return LOOM_OK;
}

enum loom_status loom_gpt_init_weights(struct loom_gpt *m, uint64_t seed) {
    const struct loom_transformer_config *c = &m->cfg;
    return loom_model_init_params(&m->base, seed, c->init_std,
                                  c->init_std / sqrt(2.0 * (double)c->num_layers), c->xavier_init);
}
