/* The T5 model (loom/t5.h): its parameter table, buffers, and forward and backward pieces.
 *
 * Parameters (Megatron-Core's T5 names):
 *   embedding.word_embeddings.weight                      [Vp, C]  (tied to the LM head)
 *   embedding.position_embeddings.weight                  [P, C]   (learned positions)
 *   encoder_relative_pos_emb.relative_attention_bias.weight [buckets, NH] (relative bias)
 *   decoder_relative_pos_emb.relative_attention_bias.weight [buckets, NH]
 *   encoder.layers.{i}.{input_layernorm, self_attention.linear_qkv, self_attention.linear_proj,
 *                       pre_mlp_layernorm, mlp.linear_fc1, mlp.linear_fc2}.{weight,bias}
 *   encoder.final_layernorm.{weight,bias}
 *   decoder.layers.{i}.{input_layernorm, self_attention.linear_qkv, self_attention.linear_proj,
 *                       pre_cross_attn_layernorm, cross_attention.linear_q,
 *                       cross_attention.linear_kv, cross_attention.linear_proj,
 *                       pre_mlp_layernorm, mlp.linear_fc1, mlp.linear_fc2}.{weight,bias}
 *   decoder.final_layernorm.{weight,bias}
 *   lm_head.output_layer.bias                             [Vp]
 * linear_qkv's rows are per head [q | k | v] (HS each; Megatron's layout with one query per
 * key/value group), linear_kv's per head [k | v]. Pipeline units: the encoder's layers
 * 0 .. Le - 1, then the decoder's Le .. Le + Ld - 1.
 *
 * Gradients (residual stream x, a sublayer y = x + f(LN(x))): dx += d(LN)^T (df^T dy), so the
 * residual gradient runs through the layers in reverse, accumulating each sublayer's share; the
 * decoder's cross-attention adds its key/value projections' input gradient into d(enc_out), which
 * flows into the encoder's final norm when the last encoder layer's backward starts. The
 * relative bias's gradient is summed over the stack's layers and the samples as a [NH, T, T]
 * array, then into its table's rows by bucket. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/t5.h"
#include "loom/transformer.h"
#include "models/t5/t5_internal.h"

/* ---- relative position buckets ---- */

int64_t loom_t5_relative_bucket(int64_t rel, int bidirectional, int64_t num_buckets,
                                int64_t max_distance) { int64_t ret = 0, n = rel;
    if (bidirectional) {
        num_buckets /= 2;
        if (n > 0) ret += num_buckets;
        n = n < 0 ? -n : n;
    } else {
        n = n < 0 ? -n : 0; /* keys after the query (masked anyway) share bucket 0 */
    }
    const int64_t max_exact = num_buckets / 2;
    if (n < max_exact) return ret + n;
    /* the published rule's arithmetic, in float32 as its reference computes it */
    const float l = logf((float)n / (float)max_exact) / (float)log((double)max_distance / (double)max_exact) *
                    (float)(num_buckets - max_exact);
    int64_t large = max_exact + (int64_t)l;
    if (large > num_buckets - 1) large = num_buckets - 1;
    return ret + large;
}

/* ---- the table ---- */

#define TOP(f) offsetof(struct t5_ptrs, f)
#define LAY(f) offsetof(struct t5_layer_ptrs, f)

static struct loom_param *add(struct loom_param *tab, int *n, const char *name, int ndim,
                              int64_t d0, int64_t d1, int layer, enum loom_init init,
                              size_t field) {
    struct loom_param *q = &tab[(*n)++];
    memset(q, 0, sizeof *q);
    snprintf(q->name, sizeof q->name, "%s", name);
    q->ndim = ndim;
    q->shape[0] = q->local_shape[0] = d0;
    q->shape[1] = q->local_shape[1] = ndim > 1 ? d1 : 1;
    q->tp_dim = -1;
    q->tp_chunks = 1;
    q->layer = layer;
    q->init = init;
    q->roles = ndim >= 2 ? LOOM_ROLE_DECAY : 0;
    q->local = 1;
    q->field = field;
    return q;
}

/* a linear layer's weight [out, in] and (with biases) bias [out]; tensor parallelism splits a
 * column-parallel one (COL) by its outputs, weight and bias, a row-parallel one (ROW) by its
 * inputs, its bias replicated (added once) */
enum { COL = 0, ROW = 1 };
static void add_linear(struct t5 *m, struct loom_param *tab, int *n, const char *prefix, int l,
                       int64_t out, int64_t in, enum loom_init init, size_t wf, size_t bf,
                       int split) {
    char name[96];
    snprintf(name, sizeof name, "%.80s.weight", prefix);
    add(tab, n, name, 2, out, in, l, init, wf)->tp_dim = split;
    snprintf(name, sizeof name, "%.80s.bias", prefix);
    if (m->cfg.bias)
        add(tab, n, name, 1, out, 0, l, LOOM_INIT_ZEROS, bf)->tp_dim = split == COL ? 0 : -1;
}
static void add_norm(struct loom_param *tab, int *n, const char *prefix, int l, int64_t C,
                     size_t wf, size_t bf) {
    char name[96];
    snprintf(name, sizeof name, "%.80s.weight", prefix);
    add(tab, n, name, 1, C, 0, l, LOOM_INIT_ONES, wf);
    snprintf(name, sizeof name, "%.80s.bias", prefix);
    add(tab, n, name, 1, C, 0, l, LOOM_INIT_ZEROS, bf);
}

static enum loom_status build_table(struct t5 *m) {
    const struct loom_transformer_config *c = &m->cfg;
    const int64_t C = m->C, A = m->A * m->tp, F = m->F * m->tp, L = m->Le + m->Ld;
    struct loom_param *tab = calloc((size_t)(8 + 24 * L), sizeof *tab);
    if (!tab) return loom_fail(LOOM_ERR_OOM, "out of memory for the parameter table");
    int n = 0;
    struct loom_param *e = add(tab, &n, "embedding.word_embeddings.weight", 2, m->Vp, C,
                               LOOM_UNIT_FIRST, LOOM_INIT_NORMAL, TOP(wte));
    e->roles |= LOOM_ROLE_VOCAB_ROWS | LOOM_ROLE_DECOUPLED_LR;
    e->tp_dim = 0;
    if (c->posemb == LOOM_POSEMB_LEARNED)
        add(tab, &n, "embedding.position_embeddings.weight", 2, c->max_positions, C,
            LOOM_UNIT_FIRST, LOOM_INIT_NORMAL, TOP(wpe));
    if (c->posemb == LOOM_POSEMB_RELATIVE) {
        /* split by heads */
        add(tab, &n, "encoder_relative_pos_emb.relative_attention_bias.weight", 2,
            c->t5.rel_buckets, m->NHg, LOOM_UNIT_FIRST, LOOM_INIT_NORMAL, TOP(enc_rel))->tp_dim = 1;
        add(tab, &n, "decoder_relative_pos_emb.relative_attention_bias.weight", 2,
            c->t5.rel_buckets, m->NHg, LOOM_UNIT_FIRST, LOOM_INIT_NORMAL, TOP(dec_rel))->tp_dim = 1;
    }
    char p[96];
    for (int64_t l = 0; l < L; l++) {
        const int dec = l >= m->Le;
        const long long i = dec ? l - m->Le : l;
        const char *stack = dec ? "decoder" : "encoder";
#define PFX(s) (snprintf(p, sizeof p, "%s.layers.%lld.%s", stack, i, s), p)
        add_norm(tab, &n, PFX("input_layernorm"), (int)l, C, LAY(ln1_w), LAY(ln1_b));
        add_linear(m, tab, &n, PFX("self_attention.linear_qkv"), (int)l, 3 * A, C,
                   LOOM_INIT_NORMAL, LAY(qkv_w), LAY(qkv_b), COL);
        add_linear(m, tab, &n, PFX("self_attention.linear_proj"), (int)l, C, A,
                   LOOM_INIT_NORMAL_SCALED, LAY(proj_w), LAY(proj_b), ROW);
        if (dec) {
            add_norm(tab, &n, PFX("pre_cross_attn_layernorm"), (int)l, C, LAY(lnc_w), LAY(lnc_b));
            add_linear(m, tab, &n, PFX("cross_attention.linear_q"), (int)l, A, C,
                       LOOM_INIT_NORMAL, LAY(cq_w), LAY(cq_b), COL);
            add_linear(m, tab, &n, PFX("cross_attention.linear_kv"), (int)l, 2 * A, C,
                       LOOM_INIT_NORMAL, LAY(ckv_w), LAY(ckv_b), COL);
            add_linear(m, tab, &n, PFX("cross_attention.linear_proj"), (int)l, C, A,
                       LOOM_INIT_NORMAL_SCALED, LAY(cproj_w), LAY(cproj_b), ROW);
        }
        add_norm(tab, &n, PFX("pre_mlp_layernorm"), (int)l, C, LAY(ln2_w), LAY(ln2_b));
        add_linear(m, tab, &n, PFX("mlp.linear_fc1"), (int)l, F, C, LOOM_INIT_NORMAL, LAY(fc1_w),
                   LAY(fc1_b), COL);
        add_linear(m, tab, &n, PFX("mlp.linear_fc2"), (int)l, C, F, LOOM_INIT_NORMAL_SCALED,
                   LAY(fc2_w), LAY(fc2_b), ROW);
#undef PFX
    }
    add_norm(tab, &n, "encoder.final_layernorm", LOOM_UNIT_LAST, C, TOP(enc_lnf_w),
             TOP(enc_lnf_b));
    add_norm(tab, &n, "decoder.final_layernorm", LOOM_UNIT_LAST, C, TOP(dec_lnf_w),
             TOP(dec_lnf_b));
    struct loom_param *ob = add(tab, &n, "lm_head.output_layer.bias", 1, m->Vp, 0,
                                LOOM_UNIT_LAST, LOOM_INIT_ZEROS, TOP(out_b));
    ob->roles |= LOOM_ROLE_VOCAB_ROWS;
    ob->tp_dim = 0;
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        struct loom_param *q = &tab[i];
        if (q->tp_dim >= 0) {
            LOOM_ASSERT(q->shape[q->tp_dim] % m->tp == 0);
            q->local_shape[q->tp_dim] = q->shape[q->tp_dim] / m->tp;
        }
        /* under sequence parallelism a norm sees the rank's positions: its share of the
         * gradient, summed over the group (loom_model_sync_tp_partial) */
        if (m->Tp > 1 && q->tp_dim < 0 && strstr(q->name, "layernorm"))
            q->roles |= LOOM_ROLE_TP_PARTIAL;
        q->offset = off;
        off += (q->local_shape[0] * q->local_shape[1] + 15) / 16 * 16;
    }
    m->base.params = tab;
    m->base.nparams = n;
    m->base.num_local = off;
    return LOOM_OK;
}

/* each parameter's pointer into buffer mem, in ptrs */
static void set_ptrs(struct t5 *m, float *mem, struct t5_ptrs *ptrs) {
    for (int i = 0; i < m->base.nparams; i++) {
        const struct loom_param *p = &m->base.params[i];
        char *base = p->layer >= 0 ? (char *)&ptrs->layers[p->layer] : (char *)ptrs;
        *(float **)(base + p->field) = mem + p->offset;
    }
}

/* ---- buffers ---- */

static void *dev(struct t5 *m, int64_t n, int *ok) {
    if (!*ok) return NULL;
    struct loom_backend *be = m->base.be;
    if (m->nallocs == m->cap_allocs) {
        const int cap = m->cap_allocs ? 2 * m->cap_allocs : 64;
        void **a = realloc(m->allocs, (size_t)cap * sizeof *a);
        if (!a) return (void *)(intptr_t)(*ok = 0);
        m->allocs = a;
        m->cap_allocs = cap;
    }
    void *p = be->ops->malloc(be, (size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) return (void *)(intptr_t)(*ok = 0);
    be->ops->zero(be, p, (size_t)(n > 0 ? n : 1) * sizeof(float));
    m->allocs[m->nallocs++] = p;
    return p;
}

static enum loom_status alloc_acts(struct t5 *m) {
    const int64_t B = m->base.B, Ne = B * m->Te, Nd = B * m->Td, C = m->C, A = m->A, F = m->F;
    const int64_t L = m->Le + m->Ld, NH = m->NH, Nmax = Ne > Nd ? Ne : Nd, P = m->Tp;
    const int sp = P > 1;
    int ok = 1;
#define D(n) dev(m, (n), &ok)
    /* a stack's gathered copy of a rank's rows: its own buffer under sequence parallelism */
#define FULL(shard, n) (sp ? D(n) : (shard))
    m->slots = calloc((size_t)m->base.nslots, sizeof *m->slots);
    if (!m->slots) return loom_fail(LOOM_ERR_OOM, "out of memory for the T5 activations");
    for (int s = 0; s < m->base.nslots && ok; s++) {
        struct t5_slot *q = &m->slots[s];
        q->layers = calloc((size_t)L, sizeof *q->layers);
        q->host_targets = malloc((size_t)Nd * sizeof(int32_t));
        q->host_losses = malloc((size_t)Nd * sizeof(float));
        if (!q->layers || !q->host_targets || !q->host_losses) ok = 0;
        for (int64_t l = 0; l < L && ok; l++) {
            struct t5_layer_acts *a = &q->layers[l];
            const int dec = l >= m->Le;
            const int64_t N = dec ? Nd : Ne, Nl = N / P, T = dec ? m->Td : m->Te;
            a->x = D(Nl * C), a->ln1 = D(Nl * C), a->ln1_m = D(Nl), a->ln1_r = D(Nl);
            a->ln1f = FULL(a->ln1, N * C);
            a->qkv = D(N * 3 * A), a->att = D(N * A), a->lse = D(B * NH * T), a->xmid = D(Nl * C);
            if (dec) {
                a->lnc = D(Nl * C), a->lnc_m = D(Nl), a->lnc_r = D(Nl), a->cq = D(N * A);
                a->lncf = FULL(a->lnc, N * C);
                a->ckv = D(Ne * 2 * A), a->catt = D(N * A), a->clse = D(B * NH * T);
                a->xmid2 = D(Nl * C);
            }
            a->ln2 = D(Nl * C), a->ln2_m = D(Nl), a->ln2_r = D(Nl), a->pre = D(N * F);
            a->ln2f = FULL(a->ln2, N * C);
            a->act = D(N * F);
        }
        q->enc_xout = D(Ne / P * C), q->enc_out = D(Ne / P * C), q->enc_m = D(Ne / P);
        q->enc_r = D(Ne / P), q->enc_outf = FULL(q->enc_out, Ne * C);
        q->dec_xout = D(Nd / P * C), q->lnf = D(Nd / P * C), q->lnf_m = D(Nd / P);
        q->lnf_r = D(Nd / P), q->lnff = FULL(q->lnf, Nd * C);
        q->logits = D(Nd * m->Vl), q->losses = D(Nd);
        if (m->tp > 1) q->stats = D(Nd * 3), q->gstats = D(Nd * 2), q->dloss = D(Nd);
        q->enc_tok = D(Ne), q->dec_tok = D(Nd), q->targets = D(Nd), q->enc_len = D(B);
    }
    if (m->cfg.posemb == LOOM_POSEMB_RELATIVE) {
        m->enc_bias = D(NH * m->Te * m->Te), m->denc_bias = D(NH * m->Te * m->Te);
        m->dec_bias = D(NH * m->Td * m->Td), m->ddec_bias = D(NH * m->Td * m->Td);
    }
    m->dres_enc = D(Ne / P * C), m->dres_dec = D(Nd / P * C), m->denc_out = D(Ne * C);
    m->dtmp_enc = D(Ne * C), m->dln = D(Nmax * C), m->datt = D(Nmax * A);
    m->dqkv = D(Nmax * 3 * A), m->dwide = D(Nmax * F), m->dckv = D(Ne * 2 * A);
    m->dresf = D(Nmax * C), m->tmps = D(Nmax / P * C); /* also dropout's */
    if (sp) m->dlns = D(Nmax / P * C), m->sp_scratch = D(Nmax * C);
    if (m->tp > 1) {
        m->host_stats = malloc((size_t)Nd * 3 * sizeof(float));
        m->host_g = malloc((size_t)Nd * 2 * sizeof(float));
        m->host_dloss = malloc((size_t)Nd * sizeof(float));
        if (!m->host_stats || !m->host_g || !m->host_dloss) ok = 0;
    }
#undef FULL
#undef D
    if (!ok)
        return loom_fail(LOOM_ERR_OOM, "out of memory: the T5 activations on %s (lower "
                         "--micro-batch-size)", m->base.be->ops->name);
    return LOOM_OK;
}

static void t5_free(struct loom_model *mm) {
    struct t5 *m = T5(mm);
    if (!m) return;
    struct loom_backend *be = m->base.be;
    for (int i = 0; i < m->nallocs; i++) be->ops->free(be, m->allocs[i]);
    free(m->allocs);
    for (int s = 0; m->slots && s < m->base.nslots; s++) {
        free(m->slots[s].layers);
        free(m->slots[s].host_targets);
        free(m->slots[s].host_losses);
    }
    free(m->slots);
    if (m->base.param_mem) be->ops->free(be, m->base.param_mem);
    if (m->base.grad_mem) be->ops->free(be, m->base.grad_mem);
    free(m->w.layers);
    free(m->g.layers);
    free(m->enc_bucket);
    free(m->dec_bucket);
    free(m->host_stats);
    free(m->host_g);
    free(m->host_dloss);
    free(m->base.params);
    free(m);
}

static enum loom_status t5_build(struct t5 *m) {
    struct loom_backend *be = m->base.be;
    LOOM_CHECK(build_table(m));
    const int64_t grain = 16 * (int64_t)loom_dp_size(m->base.par);
    m->base.num_alloc = (m->base.num_local + grain - 1) / grain * grain;
    const size_t bytes = (size_t)m->base.num_alloc * sizeof(float);
    m->base.param_mem = be->ops->malloc(be, bytes);
    m->base.grad_mem = be->ops->malloc(be, bytes);
    const int64_t L = m->Le + m->Ld;
    m->w.layers = calloc((size_t)L, sizeof *m->w.layers);
    m->g.layers = calloc((size_t)L, sizeof *m->g.layers);
    if (!m->base.param_mem || !m->base.grad_mem || !m->w.layers || !m->g.layers)
        return loom_fail(LOOM_ERR_OOM, "out of memory: %zu MiB of parameters and as much of "
                         "gradients on %s", bytes >> 20, be->ops->name);
    be->ops->zero(be, m->base.param_mem, bytes);
    be->ops->zero(be, m->base.grad_mem, bytes);
    set_ptrs(m, m->base.param_mem, &m->w);
    set_ptrs(m, m->base.grad_mem, &m->g);
    if (m->cfg.posemb == LOOM_POSEMB_RELATIVE) {
        const int64_t nb = m->cfg.t5.rel_buckets, md = m->cfg.t5.rel_max_distance;
        m->enc_bucket = malloc((size_t)(m->Te * m->Te) * sizeof(int64_t));
        m->dec_bucket = malloc((size_t)(m->Td * m->Td) * sizeof(int64_t));
        if (!m->enc_bucket || !m->dec_bucket)
            return loom_fail(LOOM_ERR_OOM, "out of memory for the relative position buckets");
        for (int64_t i = 0; i < m->Te; i++) /* query i, key j: the bucket of j - i */
            for (int64_t j = 0; j < m->Te; j++)
                m->enc_bucket[i * m->Te + j] = loom_t5_relative_bucket(j - i, 1, nb, md);
        for (int64_t i = 0; i < m->Td; i++)
            for (int64_t j = 0; j < m->Td; j++)
                m->dec_bucket[i * m->Td + j] = loom_t5_relative_bucket(j - i, 0, nb, md);
    }
    return alloc_acts(m);
}

static enum loom_status t5_create(struct loom_model **out, const void *config,
                                  struct loom_parallel *par, struct loom_backend *be, int64_t B,
                                  int nslots) {
    const struct loom_transformer_config *c = config;
    const int tp = loom_tp_size(par), sp = par->sequence_parallel && tp > 1;
    if (loom_pp_size(par) > 1)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--model t5 runs without pipeline parallelism for now "
                         "(--pipeline-model-parallel-size 1; tensor, sequence and data "
                         "parallelism work)");
    if (c->heads % tp || c->ffn_hidden % tp || c->padded_vocab % tp)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--tensor-model-parallel-size %d must divide --num-attention-heads "
                         "%lld, --ffn-hidden-size %lld and the padded vocabulary %lld", tp,
                         (long long)c->heads, (long long)c->ffn_hidden,
                         (long long)c->padded_vocab);
    if (sp && (c->t5.enc_seq % tp || c->t5.dec_seq % tp))
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--sequence-parallel: --tensor-model-parallel-size %d must divide the "
                         "encoder's --seq-length %lld and --decoder-seq-length %lld", tp,
                         (long long)c->t5.enc_seq, (long long)c->t5.dec_seq);
    struct t5 *m = calloc(1, sizeof *m);
    if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory for the T5 model");
    m->base.family = &loom_t5_family;
    m->cfg = *c;
    m->base.config = &m->cfg;
    m->base.par = par;
    m->base.be = be;
    m->base.B = B;
    m->base.nslots = nslots;
    m->base.first_stage = m->base.last_stage = 1;
    m->Le = c->t5.enc_layers, m->Ld = c->t5.dec_layers;
    m->Te = c->t5.enc_seq, m->Td = c->t5.dec_seq;
    m->tp = tp, m->tpr = loom_tp_rank(par), m->Tp = sp ? tp : 1;
    m->C = c->hidden, m->NHg = c->heads, m->NH = c->heads / tp;
    m->HS = loom_transformer_head_size(c);
    m->A = m->NH * m->HS, m->F = c->ffn_hidden / tp, m->Vp = c->padded_vocab, m->V = c->vocab_size;
    m->Vl = m->Vp / tp, m->v0 = m->tpr * m->Vl;
    m->Vvalid = m->V - m->v0 < 0 ? 0 : m->V - m->v0 > m->Vl ? m->Vl : m->V - m->v0;
    m->base.num_layers = m->Le + m->Ld;
    m->base.vocab_size = m->V;
    enum loom_status s = t5_build(m);
    if (s != LOOM_OK) {
        t5_free(&m->base);
        return s;
    }
    *out = &m->base;
    return LOOM_OK;
}

static enum loom_status t5_init_weights(struct loom_model *mm, uint64_t seed) {
    struct t5 *m = T5(mm);
    const struct loom_transformer_config *c = &m->cfg;
    return loom_model_init_params(mm, seed, c->init_std,
                                  c->init_std / sqrt(2.0 * (double)(m->Le + m->Ld)),
                                  c->xavier_init);
}

static void t5_chunk_layers(const struct loom_model *mm, int stage, int chunk, int64_t *l0,
                            int64_t *l1) {
    (void)stage, (void)chunk;
    *l0 = 0;
    *l1 = mm->num_layers;
}

/* the relative bias of each stack from its table: bias[h, i, j] = table[bucket(i, j), h] */
static void make_bias(struct t5 *m, float *bias, const float *table, const int64_t *bucket,
                      int64_t T) {
    struct loom_backend *be = m->base.be;
    const int64_t NH = m->NH, nb = m->cfg.t5.rel_buckets;
    float *ht = malloc((size_t)(nb * NH) * sizeof(float));
    float *hb = malloc((size_t)(NH * T * T) * sizeof(float));
    LOOM_ASSERT(ht && hb);
    be->ops->to_host(be, ht, table, (size_t)(nb * NH) * sizeof(float));
    for (int64_t h = 0; h < NH; h++)
        for (int64_t ij = 0; ij < T * T; ij++) hb[h * T * T + ij] = ht[bucket[ij] * NH + h];
    be->ops->to_device(be, bias, hb, (size_t)(NH * T * T) * sizeof(float));
    free(ht);
    free(hb);
}

/* the table's gradient from the bias's: dtable[bucket(i, j), h] += dbias[h, i, j] */
static void bias_backward(struct t5 *m, float *dtable, const float *dbias, const int64_t *bucket,
                          int64_t T) {
    struct loom_backend *be = m->base.be;
    const int64_t NH = m->NH, nb = m->cfg.t5.rel_buckets;
    float *ht = calloc((size_t)(nb * NH), sizeof(float));
    float *hb = malloc((size_t)(NH * T * T) * sizeof(float));
    LOOM_ASSERT(ht && hb);
    be->ops->to_host(be, hb, dbias, (size_t)(NH * T * T) * sizeof(float));
    for (int64_t h = 0; h < NH; h++)
        for (int64_t ij = 0; ij < T * T; ij++) ht[bucket[ij] * NH + h] += hb[h * T * T + ij];
    float *cur = malloc((size_t)(nb * NH) * sizeof(float));
    LOOM_ASSERT(cur);
    be->ops->to_host(be, cur, dtable, (size_t)(nb * NH) * sizeof(float));
    for (int64_t k = 0; k < nb * NH; k++) cur[k] += ht[k];
    be->ops->to_device(be, dtable, cur, (size_t)(nb * NH) * sizeof(float));
    free(cur);
    free(ht);
    free(hb);
}

static void t5_prepare(struct loom_model *mm) {
    struct t5 *m = T5(mm);
    if (m->cfg.posemb != LOOM_POSEMB_RELATIVE) return;
    make_bias(m, m->enc_bias, m->w.enc_rel, m->enc_bucket, m->Te);
    make_bias(m, m->dec_bias, m->w.dec_rel, m->dec_bucket, m->Td);
}

static enum loom_status t5_micro_begin(struct loom_model *mm, int slot,
                                       const struct loom_micro *mb,
                                       const struct loom_step_ctx *ctx) {
    (void)ctx;
    struct t5 *m = T5(mm);
    struct t5_slot *q = &m->slots[slot];
    struct loom_backend *be = m->base.be;
    const int64_t B = m->base.B, Te = m->Te, Td = m->Td, T = Te + Td;
    LOOM_ASSERT(mb->B == B && mb->T == T);
    int32_t *enc = malloc((size_t)(B * (Te + Td) + B) * sizeof(int32_t));
    if (!enc) return loom_fail(LOOM_ERR_OOM, "out of memory in the T5 micro-batch");
    int32_t *dec = enc + B * Te, *len = dec + B * Td;
    for (int64_t b = 0; b < B; b++) {
        const int32_t *row = mb->tokens + b * T, *pm = mb->padding_mask + b * T;
        memcpy(enc + b * Te, row, (size_t)Te * sizeof(int32_t));
        memcpy(dec + b * Td, row + Te, (size_t)Td * sizeof(int32_t));
        memcpy(q->host_targets + b * Td, mb->labels + b * T + Te, (size_t)Td * sizeof(int32_t));
        int64_t n = 0;
        while (n < Te && pm[n]) n++;
        for (int64_t t = n; t < Te; t++)
            if (pm[t])
                return free(enc), loom_fail(LOOM_ERR_INVALID_ARG,
                                            "a T5 sample's encoder padding is not at its end "
                                            "(sample %lld, position %lld)",
                                            (long long)(mb->sample0 + b), (long long)t);
        len[b] = (int32_t)n;
    }
    for (int64_t i = 0; i < B * (Te + Td); i++)
        if (enc[i] < 0 || enc[i] >= m->V) {
            int32_t id = enc[i];
            free(enc);
            return loom_fail(LOOM_ERR_INVALID_ARG, "token id %d outside the vocabulary [0, %lld)",
                             id, (long long)m->V);
        }
    for (int64_t i = 0; i < B * Td; i++)
        if (q->host_targets[i] >= m->V)
            return free(enc), loom_fail(LOOM_ERR_INVALID_ARG,
                                        "label id %d outside the vocabulary [0, %lld)",
                                        q->host_targets[i], (long long)m->V);
    be->ops->to_device(be, q->enc_tok, enc, (size_t)(B * Te) * sizeof(int32_t));
    be->ops->to_device(be, q->dec_tok, dec, (size_t)(B * Td) * sizeof(int32_t));
    be->ops->to_device(be, q->enc_len, len, (size_t)B * sizeof(int32_t));
    be->ops->to_device(be, q->targets, q->host_targets, (size_t)(B * Td) * sizeof(int32_t));
    free(enc);
    return LOOM_OK;
}

static enum loom_status t5_first_forward(struct loom_model *mm, int slot,
                                         const struct loom_micro *mb,
                                         const struct loom_step_ctx *ctx) {
    (void)mb, (void)ctx;
    struct t5 *m = T5(mm);
    struct t5_slot *q = &m->slots[slot];
    const struct loom_dropout de = loom_t5_hidden_dropout(m, ctx, 0, DROP_EMBED, m->Te);
    const struct loom_dropout dd = loom_t5_hidden_dropout(m, ctx, m->Le, DROP_EMBED, m->Td);
    LOOM_CHECK(loom_t5_embed_forward(m, q->layers[0].x, q->enc_tok, m->Te, &de));
    return loom_t5_embed_forward(m, q->layers[m->Le].x, q->dec_tok, m->Td, &dd);
}

/* the self-attention problem of layer l */
static struct loom_attn_general self_problem(const struct t5 *m, const struct t5_slot *q,
                                             const struct loom_step_ctx *ctx, int64_t l) {
    const int dec = l >= m->Le;
    const int64_t T = dec ? m->Td : m->Te, A = m->A, HS = m->HS;
    struct loom_attn_general a = {0};
    a.B = m->base.B, a.Tq = a.Tk = T, a.NH = a.NKV = m->NH, a.HS = HS;
    a.q_ld = a.k_ld = a.v_ld = 3 * A, a.q_hs = a.k_hs = a.v_hs = 3 * HS;
    a.causal = dec, a.scale = 1.0f / sqrtf((float)HS), a.key_len = dec ? NULL : q->enc_len;
    if (m->cfg.posemb == LOOM_POSEMB_RELATIVE) a.bias = dec ? m->dec_bias : m->enc_bias;
    loom_t5_attn_dropout(m, &a, ctx, l, DROP_ATTN);
    return a;
}
/* the cross-attention problem of decoder layer l */
static struct loom_attn_general cross_problem(const struct t5 *m, const struct t5_slot *q,
                                              const struct loom_step_ctx *ctx, int64_t l) {
    const int64_t A = m->A, HS = m->HS;
    struct loom_attn_general a = {0};
    a.B = m->base.B, a.Tq = m->Td, a.Tk = m->Te, a.NH = a.NKV = m->NH, a.HS = HS;
    a.q_ld = A, a.q_hs = HS, a.k_ld = a.v_ld = 2 * A, a.k_hs = a.v_hs = 2 * HS;
    a.scale = 1.0f / sqrtf((float)HS), a.key_len = q->enc_len;
    loom_t5_attn_dropout(m, &a, ctx, l, DROP_XATTN);
    return a;
}

static enum loom_status t5_layer_forward(struct loom_model *mm, int slot, int64_t l,
                                         const struct loom_step_ctx *ctx) {
    (void)ctx;
    struct t5 *m = T5(mm);
    struct t5_slot *q = &m->slots[slot];
    struct loom_backend *be = m->base.be;
    const struct t5_layer_ptrs *w = &m->w.layers[l];
    struct t5_layer_acts *a = &q->layers[l];
    const int dec = l >= m->Le;
    const int64_t T = dec ? m->Td : m->Te, N = m->base.B * T, C = m->C, A = m->A, F = m->F;
    /* self-attention */
    LOOM_CHECK(loom_t5_norm_enter(m, a->ln1, a->ln1_m, a->ln1_r, a->ln1f, a->x, w->ln1_w, w->ln1_b,
                                  T));
    loom_op(be, linear_forward, a->qkv, a->ln1f, w->qkv_w, w->qkv_b, N, C, 3 * A);
    const struct loom_attn_general sa = self_problem(m, q, ctx, l);
    loom_op(be, attention_general_forward, a->att, a->lse, a->qkv, a->qkv + m->HS,
            a->qkv + 2 * m->HS, &sa);
    const struct loom_dropout d_attn = loom_t5_hidden_dropout(m, ctx, l, DROP_ATTN_OUT, T);
    LOOM_CHECK(loom_t5_row_parallel_add(m, a->xmid, a->x, a->att, w->proj_w, w->proj_b, T, A,
                                        &d_attn));
    const float *xm = a->xmid;
    if (dec) { /* cross-attention over the encoder's output */
        LOOM_CHECK(loom_t5_norm_enter(m, a->lnc, a->lnc_m, a->lnc_r, a->lncf, a->xmid, w->lnc_w,
                                      w->lnc_b, T));
        loom_op(be, linear_forward, a->cq, a->lncf, w->cq_w, w->cq_b, N, C, A);
        loom_op(be, linear_forward, a->ckv, q->enc_outf, w->ckv_w, w->ckv_b, m->base.B * m->Te, C,
                2 * A);
        const struct loom_attn_general ca = cross_problem(m, q, ctx, l);
        loom_op(be, attention_general_forward, a->catt, a->clse, a->cq, a->ckv, a->ckv + m->HS,
                &ca);
        const struct loom_dropout d_x = loom_t5_hidden_dropout(m, ctx, l, DROP_XATTN_OUT, T);
        LOOM_CHECK(loom_t5_row_parallel_add(m, a->xmid2, a->xmid, a->catt, w->cproj_w, w->cproj_b,
                                            T, A, &d_x));
        xm = a->xmid2;
    }
    /* MLP */
    LOOM_CHECK(loom_t5_norm_enter(m, a->ln2, a->ln2_m, a->ln2_r, a->ln2f, xm, w->ln2_w, w->ln2_b,
                                  T));
    loom_op(be, linear_forward, a->pre, a->ln2f, w->fc1_w, w->fc1_b, N, C, F);
    loom_op(be, gelu_forward, m->cfg.gelu, a->act, a->pre, N * F);
    const int last_enc = l == m->Le - 1, last = l == m->Le + m->Ld - 1;
    float *y = last_enc ? q->enc_xout : last ? q->dec_xout : q->layers[l + 1].x;
    const struct loom_dropout d_mlp = loom_t5_hidden_dropout(m, ctx, l, DROP_MLP_OUT, T);
    LOOM_CHECK(loom_t5_row_parallel_add(m, y, xm, a->act, w->fc2_w, w->fc2_b, T, F, &d_mlp));
    if (last_enc) /* the encoder's output: its final norm, every position's for cross-attention */
        LOOM_CHECK(loom_t5_norm_enter(m, q->enc_out, q->enc_m, q->enc_r, q->enc_outf, q->enc_xout,
                                      m->w.enc_lnf_w, m->w.enc_lnf_b, m->Te));
    return LOOM_OK;
}

static enum loom_status t5_last_forward(struct loom_model *mm, int slot,
                                        const struct loom_micro *mb,
                                        const struct loom_step_ctx *ctx,
                                        struct loom_losses *losses) {
    (void)mb;
    struct t5 *m = T5(mm);
    struct t5_slot *q = &m->slots[slot];
    struct loom_backend *be = m->base.be;
    const int64_t Nd = m->base.B * m->Td, C = m->C;
    LOOM_CHECK(loom_t5_norm_enter(m, q->lnf, q->lnf_m, q->lnf_r, q->lnff, q->dec_xout,
                                  m->w.dec_lnf_w, m->w.dec_lnf_b, m->Td));
    loom_op(be, linear_forward, q->logits, q->lnff, m->w.wte, m->w.out_b, Nd, C, m->Vl);
    int64_t cnt = 0;
    for (int64_t n = 0; n < Nd; n++) cnt += q->host_targets[n] >= 0;
    const float d = cnt > 0 ? (float)((double)ctx->dloss / (double)cnt) : 0.0f;
    double sum = 0.0;
    if (m->tp > 1) {
        LOOM_CHECK(loom_t5_vocab_parallel_loss(m, q, d, ctx->training, &sum));
    } else {
        loom_op(be, xent_fused, q->losses, q->logits, LOOM_DTYPE_F32, q->targets, d,
                ctx->training, Nd, m->Vp, m->V);
        be->ops->to_host(be, q->host_losses, q->losses, (size_t)Nd * sizeof(float));
        for (int64_t n = 0; n < Nd; n++)
            if (q->host_targets[n] >= 0) sum += (double)q->host_losses[n];
    }
    q->grad_ready = ctx->training;
    losses->sum[0] += cnt > 0 ? sum / (double)cnt : 0.0;
    losses->count[0] += 1.0;
    return LOOM_OK;
}

static enum loom_status t5_last_backward(struct loom_model *mm, int slot,
                                         const struct loom_micro *mb,
                                         const struct loom_step_ctx *ctx) {
    (void)mb, (void)ctx;
    struct t5 *m = T5(mm);
    struct t5_slot *q = &m->slots[slot];
    struct loom_backend *be = m->base.be;
    const int64_t Nd = m->base.B * m->Td, Ne = m->base.B * m->Te, C = m->C, P = m->Tp;
    LOOM_ASSERT(q->grad_ready);
    q->grad_ready = 0;
    /* logits = lnf E^T + b: d(lnf) (this rank's vocabulary columns' share, summed over the
     * group as it leaves the region), and E's and b's gradients */
    loom_op(be, linear_backward, m->dln, m->g.wte, m->g.out_b, q->logits, q->lnff, m->w.wte, Nd,
            C, m->Vl);
    be->ops->zero(be, m->dres_dec, (size_t)(Nd / P * C) * sizeof(float));
    LOOM_CHECK(loom_t5_norm_backward(m, m->dres_dec, m->dln, m->g.dec_lnf_w, m->g.dec_lnf_b,
                                     q->dec_xout, m->w.dec_lnf_w, q->lnf_m, q->lnf_r, m->Td));
    /* what the decoder's cross-attention sends back to the encoder's output, summed over its
     * layers; the relative bias's gradients, over their stacks' layers */
    be->ops->zero(be, m->denc_out, (size_t)(Ne * C) * sizeof(float));
    if (m->cfg.posemb == LOOM_POSEMB_RELATIVE) {
        be->ops->zero(be, m->denc_bias, (size_t)(m->NH * m->Te * m->Te) * sizeof(float));
        be->ops->zero(be, m->ddec_bias, (size_t)(m->NH * m->Td * m->Td) * sizeof(float));
    }
    return LOOM_OK;
}

static enum loom_status t5_layer_backward(struct loom_model *mm, int slot, int64_t l,
                                          const struct loom_step_ctx *ctx) {
    (void)ctx;
    struct t5 *m = T5(mm);
    struct t5_slot *q = &m->slots[slot];
    struct loom_backend *be = m->base.be;
    const struct t5_layer_ptrs *w = &m->w.layers[l], *g = &m->g.layers[l];
    struct t5_layer_acts *a = &q->layers[l];
    const int dec = l >= m->Le;
    const int64_t T = dec ? m->Td : m->Te, Ne = m->base.B * m->Te, N = m->base.B * T;
    const int64_t C = m->C, A = m->A, F = m->F, HS = m->HS;
    float *dres = dec ? m->dres_dec : m->dres_enc;
    if (l == m->Le - 1) { /* the encoder's final norm, from what the decoder sent back */
        be->ops->zero(be, m->dres_enc, (size_t)(Ne / m->Tp * C) * sizeof(float));
        LOOM_CHECK(loom_t5_norm_backward(m, m->dres_enc, m->denc_out, m->g.enc_lnf_w,
                                         m->g.enc_lnf_b, q->enc_xout, m->w.enc_lnf_w, q->enc_m,
                                         q->enc_r, m->Te));
    }
    /* MLP: y = xm + fc2(gelu(fc1(LN2(xm)))) */
    const float *xm = dec ? a->xmid2 : a->xmid;
    const struct loom_dropout d_mlp = loom_t5_hidden_dropout(m, ctx, l, DROP_MLP_OUT, T);
    LOOM_CHECK(loom_t5_row_parallel_backward(m, m->dwide, g->fc2_w, g->fc2_b, dres, a->act,
                                             w->fc2_w, T, F, &d_mlp));
    loom_op(be, gelu_backward, m->cfg.gelu, m->dwide, m->dwide, a->pre, N * F);
    loom_op(be, linear_backward, m->dln, g->fc1_w, g->fc1_b, m->dwide, a->ln2f, w->fc1_w, N, C, F);
    LOOM_CHECK(loom_t5_norm_backward(m, dres, m->dln, g->ln2_w, g->ln2_b, xm, w->ln2_w, a->ln2_m,
                                     a->ln2_r, T));
    if (dec) { /* cross-attention: xmid2 = xmid + cproj(xattn(LNc(xmid), enc_out)) */
        const struct loom_dropout d_x = loom_t5_hidden_dropout(m, ctx, l, DROP_XATTN_OUT, T);
        LOOM_CHECK(loom_t5_row_parallel_backward(m, m->datt, g->cproj_w, g->cproj_b, dres, a->catt,
                                                 w->cproj_w, T, A, &d_x));
        const struct loom_attn_general ca = cross_problem(m, q, ctx, l);
        loom_op(be, attention_general_backward, m->dqkv, m->dckv, m->dckv + HS, NULL, m->datt,
                a->catt, a->clse, a->cq, a->ckv, a->ckv + HS, &ca);
        loom_op(be, linear_backward, m->dln, g->cq_w, g->cq_b, m->dqkv, a->lncf, w->cq_w, N, C, A);
        loom_op(be, linear_backward, m->dtmp_enc, g->ckv_w, g->ckv_b, m->dckv, q->enc_outf,
                w->ckv_w, Ne, C, 2 * A);
        be->ops->axpy(be, m->denc_out, 1.0f, m->dtmp_enc, Ne * C);
        LOOM_CHECK(loom_t5_norm_backward(m, dres, m->dln, g->lnc_w, g->lnc_b, a->xmid, w->lnc_w,
                                         a->lnc_m, a->lnc_r, T));
    }
    /* self-attention: xmid = x + proj(attn(LN1(x))) */
    const struct loom_dropout d_attn = loom_t5_hidden_dropout(m, ctx, l, DROP_ATTN_OUT, T);
    LOOM_CHECK(loom_t5_row_parallel_backward(m, m->datt, g->proj_w, g->proj_b, dres, a->att,
                                             w->proj_w, T, A, &d_attn));
    const struct loom_attn_general sa = self_problem(m, q, ctx, l);
    float *dbias = sa.bias ? (dec ? m->ddec_bias : m->denc_bias) : NULL;
    loom_op(be, attention_general_backward, m->dqkv, m->dqkv + HS, m->dqkv + 2 * HS, dbias,
            m->datt, a->att, a->lse, a->qkv, a->qkv + HS, a->qkv + 2 * HS, &sa);
    loom_op(be, linear_backward, m->dln, g->qkv_w, g->qkv_b, m->dqkv, a->ln1f, w->qkv_w, N, C,
            3 * A);
    LOOM_CHECK(loom_t5_norm_backward(m, dres, m->dln, g->ln1_w, g->ln1_b, a->x, w->ln1_w, a->ln1_m,
                                     a->ln1_r, T));
    /* the key biases (of every head: [q | k | v] and [k | v] of HS each) only add q . b_k to every
     * score of a query's row, which the softmax ignores: their gradient is exactly zero, kept so
     * rather than as rounding noise (which AdamW would turn into steps) */
    if (g->qkv_b) loom_op(be, zero_strided, g->qkv_b + HS, m->NH, HS, 3 * HS);
    if (g->ckv_b) loom_op(be, zero_strided, g->ckv_b, m->NH, HS, 2 * HS);
    return LOOM_OK;
}

static enum loom_status t5_first_backward(struct loom_model *mm, int slot,
                                          const struct loom_step_ctx *ctx) {
    (void)ctx;
    struct t5 *m = T5(mm);
    struct t5_slot *q = &m->slots[slot];
    const struct loom_dropout de = loom_t5_hidden_dropout(m, ctx, 0, DROP_EMBED, m->Te);
    const struct loom_dropout dd = loom_t5_hidden_dropout(m, ctx, m->Le, DROP_EMBED, m->Td);
    LOOM_CHECK(loom_t5_embed_backward(m, m->dres_enc, q->enc_tok, m->Te, &de));
    LOOM_CHECK(loom_t5_embed_backward(m, m->dres_dec, q->dec_tok, m->Td, &dd));
    if (m->cfg.posemb == LOOM_POSEMB_RELATIVE) {
        bias_backward(m, m->g.enc_rel, m->denc_bias, m->enc_bucket, m->Te);
        bias_backward(m, m->g.dec_rel, m->ddec_bias, m->dec_bucket, m->Td);
    }
    return LOOM_OK;
}

static int t5_boundary(struct loom_model *mm, int slot, int64_t l, enum loom_boundary_side side,
                       struct loom_stage_tensor *t) {
    (void)mm, (void)slot, (void)l, (void)side, (void)t;
    return 0; /* one pipeline stage */
}

/* 6 N per token of each stack (the embedding's product counted once, for the LM head) plus
 * attention's 12 L C T per token (self-attention in both stacks, cross-attention in the decoder) */
static double t5_flops_per_sample(const struct loom_model *mm) {
    const struct t5 *m = (const struct t5 *)mm;
    /* the whole model's (A and F are this tensor-parallel rank's shares) */
    const double C = (double)m->C, A = (double)(m->A * m->tp), F = (double)(m->F * m->tp);
    const double enc_layer = 4 * A * C + 2 * F * C, dec_layer = enc_layer + 4 * A * C;
    const double Te = (double)m->Te, Td = (double)m->Td;
    return 6.0 * ((double)m->Le * enc_layer * Te +
                  (double)m->Ld * (dec_layer - 2 * A * C) * Td + (double)m->Ld * 2 * A * C * Te +
                  (double)m->Vp * C * Td) +
           12.0 * A * ((double)m->Le * Te * Te + (double)m->Ld * (Td * Td + Td * Te));
}

const struct loom_family loom_t5_family = {
    .name = "t5",
    .num_losses = 1,
    .loss_names = {"lm loss"},
    .micro_mean = 1,
    .create = t5_create,
    .free = t5_free,
    .init_weights = t5_init_weights,
    .chunk_layers = t5_chunk_layers,
    .prepare = t5_prepare,
    .micro_begin = t5_micro_begin,
    .first_forward = t5_first_forward,
    .layer_forward = t5_layer_forward,
    .last_forward = t5_last_forward,
    .last_backward = t5_last_backward,
    .layer_backward = t5_layer_backward,
    .first_backward = t5_first_backward,
    .boundary = t5_boundary,
    .flops_per_sample = t5_flops_per_sample,
};
