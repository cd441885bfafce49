/* GPT decoder: allocation, forward and backward of one micro-batch.
 *
 * Block (pre-norm, as GPT-2 and Megatron):
 *   h    = norm1(x);  qkv = rope(qknorm(h Wqkv^T + bqkv));  a = attention(qkv)
 *   xmid = x + dropout(a Wproj^T + bproj)
 *   h2   = norm2(xmid);  y = xmid + dropout(act(h2 Wfc1^T + bfc1) Wfc2^T + bfc2)
 * Gradient rule: the residual gradient dres flows through unchanged; each branch adds its input
 * gradient into dres through the norm backward (which accumulates). Parameter gradients
 * accumulate across micro-batches.
 *
 * qknorm (qk_layernorm only, else the identity) normalises each query and key head vector over
 * HS with the model's norm and the layer's q or k weights, shared by the heads.
 *
 * Without qknorm the key bias only adds q.b_k to every score of a row, which the softmax ignores:
 * its gradient is exactly zero, so it is set to zero rather than left as rounding noise (which
 * Adam would otherwise amplify into steps of size lr that depend on the summation order).
 *
 * Tensor parallelism (Megatron): qkv and fc1 are column-parallel (local heads / FFN columns);
 * proj and fc2 are row-parallel and their outputs are all-reduced over the TP group, the
 * replicated bias being added once (by TP rank 0) before the reduction; the inputs of the
 * column-parallel layers get their gradients all-reduced in backward. The embedding and the
 * output layer are vocabulary-parallel; the cross-entropy combines per-shard statistics so the
 * logits are never gathered. Without tensor parallelism the output layer and the loss run fused,
 * a chunk of rows at a time, and the head forward already makes the head's gradients
 * (head_forward_fused).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/tp.h"
#include "models/gpt/gpt_internal.h"

/* ---- local sizes ---- */
struct dims {
    int64_t B, T, N, C, HS, NHl, NKVl, QKVl, Fl, F1l, Vl, v0, Vvalid;
    int64_t Tl, Nr; /* residual-region rows: the sequence shard under sequence parallelism */
    int tp, tpr, sp;
};

static struct dims dims_of(const struct loom_gpt *m) {
    const struct loom_transformer_config *c = &m->cfg;
    struct dims d;
    d.tp = loom_tp_size(m->base.par);
    d.tpr = loom_tp_rank(m->base.par);
    d.B = m->base.B;
    d.T = c->seq_length;
    d.N = d.B * d.T;
    d.sp = m->base.par->sequence_parallel && d.tp > 1;
    d.Tl = d.sp ? d.T / d.tp : d.T;
    d.Nr = d.B * d.Tl;
    d.C = c->hidden;
    d.HS = loom_gpt_head_size(c);
    d.NHl = c->heads / d.tp;
    d.NKVl = c->query_groups / d.tp;
    d.QKVl = (d.NHl + 2 * d.NKVl) * d.HS;
    d.Fl = c->ffn_hidden / d.tp;
    d.F1l = c->swiglu ? 2 * d.Fl : d.Fl;
    d.Vl = c->padded_vocab / d.tp;
    d.v0 = d.tpr * d.Vl;
    int64_t valid = c->vocab_size - d.v0;
    d.Vvalid = valid < 0 ? 0 : valid > d.Vl ? d.Vl : valid;
    return d;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Megatron's paired regions. Entering a tensor-parallel region (the input of a column-parallel
 * linear): forward identity, or all-gather of the sequence shards; backward all-reduce, or
 * reduce-scatter. Leaving one (the output of a row-parallel linear): forward all-reduce, or
 * reduce-scatter; backward identity, or all-gather. */
static enum loom_status region_enter(struct loom_gpt *m, float *full, const float *shard) {
    struct dims d = dims_of(m);
    if (!d.sp) return LOOM_OK; /* full == shard */
    return loom_sp_allgather(m->base.par, full, shard, d.B, d.Tl, d.C, m->acts[0].sp_scratch);
}
static enum loom_status region_enter_backward(struct loom_gpt *m, float *dshard, float *dfull) {
    struct dims d = dims_of(m);
    if (!d.sp) return loom_tp_allreduce(m->base.par, dfull, d.N * d.C); /* dshard == dfull */
    return loom_sp_reduce_scatter(m->base.par, dshard, dfull, d.B, d.Tl, d.C, m->acts[0].sp_scratch);
}
static enum loom_status region_leave(struct loom_gpt *m, float *shard, float *full) {
    struct dims d = dims_of(m);
    if (!d.sp) return loom_tp_allreduce(m->base.par, full, d.N * d.C); /* shard == full */
    return loom_sp_reduce_scatter(m->base.par, shard, full, d.B, d.Tl, d.C, m->acts[0].sp_scratch);
}
static enum loom_status region_leave_backward(struct loom_gpt *m, float *dfull, const float *dshard) {
    struct dims d = dims_of(m);
    if (!d.sp) return LOOM_OK;
    return loom_sp_allgather(m->base.par, dfull, dshard, d.B, d.Tl, d.C, m->acts[0].sp_scratch);
}

static enum loom_status norm_weights_create(struct loom_gpt *m);

/* ---- pointers into the flat buffers ---- */
/* w's pointers into base (the parameters or the gradients): each local parameter of the table at
 * the field its entry names (struct loom_param.field, param_table.c); the others NULL. A tied
 * output layer is the word embedding. */
static enum loom_status set_ptrs(struct loom_gpt *m, float *base, struct loom_gpt_ptrs *w) {
    w->layers = calloc((size_t)m->cfg.num_layers, sizeof *w->layers);
    if (!w->layers) return loom_fail(LOOM_ERR_OOM, "out of memory for the parameters' pointers");
    for (int i = 0; i < m->base.nparams; i++) {
        const struct loom_param *p = &m->base.params[i];
        if (!p->local) continue;
        const int layer = p->layer >= 0;
        LOOM_ASSERT(p->field + sizeof(float *) <= (layer ? sizeof(struct loom_gpt_layer_ptrs)
                                                         : offsetof(struct loom_gpt_ptrs, layers)));
        char *owner = layer ? (char *)&w->layers[p->layer] : (char *)w;
        *(float **)(owner + p->field) = base + p->offset;
    }
    if (!m->cfg.untie) w->out_w = w->wte;
    return LOOM_OK;
}

/* The element type of the typed activations: the backend's 16-bit activation type under its
 * current matrix-product type (activation_dtype; bf16 with bf16 products on cuda), else fp32.
 * Which arrays take it: see ln_dtype below. */
static enum loom_dtype act_dtype_now(const struct loom_gpt *m) {
    struct loom_backend *be = m->base.be;
    return be->ops->activation_dtype ? be->ops->activation_dtype(be) : LOOM_DTYPE_F32;
}

/* The type now, which must fit the buffers: they are sized when the model is made, for the type
 * then (made after the backend's 16-bit matrix products are chosen, they take 2 bytes an
 * element, else 4: room for either type). */
static enum loom_dtype act_dtype(const struct loom_gpt *m) {
    enum loom_dtype dt = act_dtype_now(m);
    if (loom_dtype_size(dt) > m->acts[0].act_elem)
        loom_abort(__FILE__, __LINE__, "gpt: the activations were sized for %zu-byte elements, "
                   "the backend now wants %s (matrix-product type changed back)",
                   m->acts[0].act_elem, loom_dtype_name(dt));
    return dt;
}

/* The typed activations of the activation type act: the MLP's (fc1, act, dpre in dwide, SwiGLU's
 * d(act) in dwide2) and attention's (qkv, rotated in place with rotary embeddings, att, dqkv in
 * dwide, d(att) in dwide2). Two classes may differ from it: the layers' norm outputs ln1, ln2
 * (the products' inputs), which sequence parallelism gathers (fp32 then), and the products'
 * input gradients in `full` (the norms' output gradients), which tensor parallelism reduces
 * (fp32 then). The final norm's output, which the output layer reads, stays fp32. The buffers are
 * sized with act_dtype_now, the ops run with act_dtype. */
static enum loom_dtype ln_dtype(const struct loom_gpt *m, enum loom_dtype act) {
    return m->base.par->sequence_parallel && loom_tp_size(m->base.par) > 1 ? LOOM_DTYPE_F32 : act;
}
static enum loom_dtype dln_dtype(const struct loom_gpt *m, enum loom_dtype act) {
    return loom_tp_size(m->base.par) > 1 ? LOOM_DTYPE_F32 : act;
}

/* ---- activations: two passes over the same layout, first to size, then to carve ---- */
struct carver {
    char *base;
    size_t used;
};
static void *carve(struct carver *cv, size_t bytes) {
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += loom_arena_round(bytes);
    return p;
}
#define CF(cv, n) ((float *)carve((cv), (size_t)(n) * sizeof(float)))

/* Bytes an element of the typed activations (the MLP's and attention's) and of the norm
 * outputs, for the activation type now. */
static void typed_elems(const struct loom_gpt *m, size_t *act_elem, size_t *ln_elem) {
    const enum loom_dtype act = act_dtype_now(m);
    *act_elem = loom_dtype_size(act);
    *ln_elem = loom_dtype_size(ln_dtype(m, act));
}

static void layout_slot(struct loom_gpt *m, struct loom_gpt_acts *a, struct carver *cv) {
    const struct loom_transformer_config *c = &m->cfg;
    struct dims d = dims_of(m);
    int ln = c->norm == LOOM_NORM_LAYERNORM;
    size_t elem, ln_elem;
    typed_elems(m, &elem, &ln_elem);
    a->act_elem = elem;
    int64_t nlocal = 0, seen = 0;
    for (int64_t l = 0; l < c->num_layers; l++)
        nlocal += loom_gpt_layer_is_local(c, m->base.par, l);
    for (int64_t l = 0; l < c->num_layers; l++) {
        if (!loom_gpt_layer_is_local(c, m->base.par, l)) continue;
        struct loom_gpt_layer_acts *la = &a->layers[l];
        /* the last kept_act_layers local layers keep their MLP activation (the rest get the
         * shared one, layout_shared) */
        la->act =
            seen++ >= nlocal - c->kept_act_layers ? carve(cv, (size_t)(d.N * d.Fl) * elem) : NULL;
        la->x = CF(cv, d.Nr * d.C);
        la->ln1 = carve(cv, (size_t)(d.Nr * d.C) * ln_elem);
        la->ln1_full = d.sp ? CF(cv, d.N * d.C) : la->ln1;
        la->ln1_mean = ln ? CF(cv, d.Nr) : NULL;
        la->ln1_rstd = CF(cv, d.Nr);
        la->qkv = carve(cv, (size_t)(d.N * d.QKVl) * elem);
        if (c->qk_layernorm) {
            const int64_t rows = d.N * (d.NHl + d.NKVl);
            la->qk_in = carve(cv, (size_t)(rows * d.HS) * elem);
            la->qk_mean = ln ? CF(cv, rows) : NULL;
            la->qk_rstd = CF(cv, rows);
        }
        la->att = carve(cv, (size_t)(d.N * d.NHl * d.HS) * elem);
        la->lse = CF(cv, d.B * d.NHl * d.T);
        la->xmid = CF(cv, d.Nr * d.C);
        la->ln2 = carve(cv, (size_t)(d.Nr * d.C) * ln_elem);
        la->ln2_full = d.sp ? CF(cv, d.N * d.C) : la->ln2;
        la->ln2_mean = ln ? CF(cv, d.Nr) : NULL;
        la->ln2_rstd = CF(cv, d.Nr);
        la->fc1 = carve(cv, (size_t)(d.N * d.F1l) * elem);
    }
    a->x_out = CF(cv, d.Nr * d.C);
    a->tokens = (int32_t *)carve(cv, (size_t)d.N * sizeof(int32_t));
    if (c->num_tokentypes > 0)
        a->token_types = (int32_t *)carve(cv, (size_t)d.N * sizeof(int32_t));
    if (m->base.last_stage) {
        a->lnf = CF(cv, d.Nr * d.C);
        a->lnf_full = d.sp ? CF(cv, d.N * d.C) : a->lnf;
        a->lnf_mean = ln ? CF(cv, d.Nr) : NULL;
        a->lnf_rstd = CF(cv, d.Nr);
        if (d.tp > 1) {
            a->logits = CF(cv, d.N * d.Vl);
            a->stats = CF(cv, d.N * 3);
            a->gstats = CF(cv, d.N * 2);
            a->dloss = CF(cv, d.N);
        } else {
            a->losses = CF(cv, d.N);
            a->dlnf = CF(cv, d.N * d.C);
        }
        a->targets = (int32_t *)carve(cv, (size_t)d.N * sizeof(int32_t));
    }
}

/* Without tensor parallelism the output layer and the loss run over chunks of rows
 * (loom_gpt_head_forward), so that the logits of one chunk only exist at a time: as few chunks
 * as keep a chunk's logits within XENT_CHUNK_BYTES as elements of `elem` bytes, of equal rows
 * rounded up to a multiple of 64 (the last chunk takes what is left). At GPT-2 124M's 16384 rows
 * and 50304 columns: 7 chunks of 2368 rows in fp32, 4 of 4096 in a 16-bit type. */
#define XENT_CHUNK_BYTES ((int64_t)512 << 20)

/* Bytes an element of linear_xent's logits under the backend's current product type */
static int64_t xent_elem(const struct loom_gpt *m) {
    struct loom_backend *be = m->base.be;
    const enum loom_dtype dt =
        be->ops->linear_xent_dtype ? be->ops->linear_xent_dtype(be) : LOOM_DTYPE_F32;
    return (int64_t)loom_dtype_size(dt);
}

static int64_t xent_chunk_rows(const struct dims *d, int64_t elem) {
    int64_t bytes = d->N * d->Vl * elem;
    int64_t chunks = (bytes + XENT_CHUNK_BYTES - 1) / XENT_CHUNK_BYTES;
    int64_t rows = (d->N + chunks - 1) / (chunks > 0 ? chunks : 1);
    rows = (rows + 63) / 64 * 64;
    return rows < d->N ? rows : d->N;
}

static void layout_shared(struct loom_gpt *m, struct loom_gpt_acts *a, struct carver *cv) {
    struct dims d = dims_of(m);
    a->dres = CF(cv, d.Nr * d.C);
    a->dc = CF(cv, d.N * d.C);
    a->full = CF(cv, d.N * d.C);
    a->sp_scratch = d.sp ? CF(cv, d.N * d.C) : NULL;
    /* dwide: dqkv or the MLP's dpre; dwide2: d(att), or SwiGLU's d(act) */
    size_t elem, ln_elem;
    typed_elems(m, &elem, &ln_elem);
    a->dwide = (float *)carve(cv, (size_t)(d.N * max64(d.QKVl, d.F1l)) * elem);
    a->act = carve(cv, (size_t)(d.N * d.Fl) * elem);
    for (int64_t l = 0; l < m->cfg.num_layers; l++)
        if (loom_gpt_layer_is_local(&m->cfg, m->base.par, l))
            for (int s = 0; s < m->base.nslots; s++)
                if (!m->acts[s].layers[l].act) m->acts[s].layers[l].act = a->act;
    a->dwide2 =
        (float *)carve(cv, (size_t)(d.N * max64(d.NHl * d.HS, m->cfg.swiglu ? d.Fl : 0)) * elem);
    if (m->base.last_stage && d.tp == 1) { /* for the logits' type now (set before the model) */
        const int64_t elem = xent_elem(m);
        a->xent_bytes = xent_chunk_rows(&d, elem) * d.Vl * elem;
        a->xent_chunk = (float *)carve(cv, (size_t)a->xent_bytes);
    }
}

/* The documents' arrays of every slot, after everything else (so that the buffers above sit
 * where they would without them) */
static void layout_docs(struct loom_gpt *m, struct carver *cv) {
    struct dims d = dims_of(m);
    for (int s = 0; s < m->base.nslots; s++) {
        m->acts[s].doc_start = (int32_t *)carve(cv, (size_t)d.N * sizeof(int32_t));
        m->acts[s].doc_positions = (int32_t *)carve(cv, (size_t)d.N * sizeof(int32_t));
    }
}

float *loom_gpt_layer_input(struct loom_gpt *m, int slot, int64_t l) {
    return m->acts[slot].layers[l].x;
}
float *loom_gpt_layer_output(struct loom_gpt *m, int slot, int64_t l) {
    if (l + 1 < m->cfg.num_layers && loom_gpt_layer_is_local(&m->cfg, m->base.par, l + 1))
        return m->acts[slot].layers[l + 1].x;
    return m->acts[slot].x_out;
}
float *loom_gpt_dres(struct loom_gpt *m) { return m->acts[0].dres; }

/* Everything of loom_gpt_create after the struct: on an error what it made so far stays in m,
 * for loom_gpt_free. */
static enum loom_status gpt_build(struct loom_gpt *m) {
    struct loom_backend *be = m->base.be;
    struct loom_parallel *par = m->base.par;
    const int nslots = m->base.nslots;
    LOOM_CHECK(loom_gpt_build_table(m));
    const int64_t grain = 16 * (int64_t)loom_dp_size(par);
    m->base.num_alloc = (m->base.num_local + grain - 1) / grain * grain;
    size_t pbytes = (size_t)m->base.num_alloc * sizeof(float);
    m->base.param_mem = be->ops->malloc(be, pbytes);
    m->base.grad_mem = be->ops->malloc(be, pbytes);
    if (!m->base.param_mem || !m->base.grad_mem)
        return loom_fail(LOOM_ERR_OOM,
                         "out of memory: %zu MiB of parameters and as much of "
                         "gradients on %s (the model's size: --num-layers, --hidden-size, "
                         "--ffn-hidden-size, the vocabulary, --max-position-embeddings (by default "
                         "--seq-length); or more "
                         "tensor- or pipeline-parallel ranks)",
                         pbytes >> 20, be->ops->name);
    be->ops->zero(be, m->base.param_mem, pbytes);
    be->ops->zero(be, m->base.grad_mem, pbytes);
    LOOM_CHECK(set_ptrs(m, m->base.param_mem, &m->w));
    LOOM_CHECK(set_ptrs(m, m->base.grad_mem, &m->g));
    LOOM_CHECK(norm_weights_create(m));
    LOOM_CHECK(loom_gpt_moe_create(m));
    if (m->moe && act_dtype_now(m) != LOOM_DTYPE_F32)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--num-experts: MoE layers run with fp32 "
                         "activations only for now (leave out --bf16 / --fp16)");

    m->acts = calloc((size_t)nslots, sizeof *m->acts);
    if (!m->acts) return loom_fail(LOOM_ERR_OOM, "out of memory for the activations' layout");
    for (int s = 0; s < nslots; s++) {
        m->acts[s].layers = calloc((size_t)m->cfg.num_layers, sizeof(struct loom_gpt_layer_acts));
        if (!m->acts[s].layers)
            return loom_fail(LOOM_ERR_OOM, "out of memory for the activations' layout");
    }
    /* size, allocate, carve */
    struct carver cv = {0};
    for (int s = 0; s < nslots; s++) layout_slot(m, &m->acts[s], &cv);
    layout_shared(m, &m->acts[0], &cv);
    layout_docs(m, &cv);
    size_t abytes = cv.used;
    void *mem = be->ops->malloc(be, abytes);
    if (!mem)
        return loom_fail(LOOM_ERR_OOM, "out of memory: %zu MiB of activations on %s "
                         "(lower --micro-batch-size)", abytes >> 20, be->ops->name);
    m->acts[0].mem = mem;
    be->ops->zero(be, mem, abytes);
    cv.base = mem;
    cv.used = 0;
    for (int s = 0; s < nslots; s++) layout_slot(m, &m->acts[s], &cv);
    layout_shared(m, &m->acts[0], &cv);
    layout_docs(m, &cv);
    for (int s = 1; s < nslots; s++) {
        m->acts[s].dres = m->acts[0].dres;
        m->acts[s].dc = m->acts[0].dc;
        m->acts[s].dwide = m->acts[0].dwide;
        m->acts[s].dwide2 = m->acts[0].dwide2;
        m->acts[s].act = m->acts[0].act;
        m->acts[s].full = m->acts[0].full;
        m->acts[s].sp_scratch = m->acts[0].sp_scratch;
    }
    struct dims d = dims_of(m);
    for (int s = 0; s < nslots; s++) {
        struct loom_gpt_acts *a = &m->acts[s];
        int ok;
        if (d.tp > 1) {
            a->host_stats = malloc((size_t)d.N * 3 * sizeof(float));
            a->host_g = malloc((size_t)d.N * 2 * sizeof(float));
            a->host_dloss = malloc((size_t)d.N * sizeof(float));
            ok = a->host_stats && a->host_g && a->host_dloss;
        } else {
            a->host_losses = malloc((size_t)d.N * sizeof(float));
            ok = a->host_losses != NULL;
        }
        a->host_targets = malloc((size_t)d.N * sizeof(int32_t));
        a->host_docs = malloc((size_t)(2 * d.N) * sizeof(int32_t));
        if (!ok || !a->host_targets || !a->host_docs)
            return loom_fail(LOOM_ERR_OOM, "out of memory for loss buffers");
    }
    return LOOM_OK;
}

enum loom_status loom_gpt_create(struct loom_gpt **out, const struct loom_transformer_config *cfg,
                                 struct loom_parallel *par, struct loom_backend *be, int64_t B,
                                 int nslots) {
    struct loom_gpt *m = calloc(1, sizeof *m);
    if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory creating the model");
    m->cfg = *cfg;
    m->base.par = par;
    m->base.be = be;
    m->base.B = B;
    m->base.nslots = nslots;
    m->base.family = &loom_gpt_family;
    m->base.config = &m->cfg;
    m->base.num_layers = cfg->num_layers;
    m->base.vocab_size = cfg->vocab_size;
    m->base.prepare_reads_all = cfg->layernorm_1p;
    m->base.first_stage = loom_pp_rank(par) == 0;
    m->base.last_stage = loom_pp_rank(par) == loom_pp_size(par) - 1;
    const enum loom_status s = gpt_build(m);
    if (s != LOOM_OK) {
        loom_gpt_free(m);
        return s;
    }
    *out = m;
    return LOOM_OK;
}

void loom_gpt_free(struct loom_gpt *m) {
    if (!m) return;
    struct loom_backend *be = m->base.be;
    if (m->heads_free) m->heads_free(m);
    loom_gpt_moe_free(m);
    if (m->acts) {
        if (m->acts[0].mem) be->ops->free(be, m->acts[0].mem);
        for (int s = 0; s < m->base.nslots; s++) {
            free(m->acts[s].layers);
            free(m->acts[s].host_stats);
            free(m->acts[s].host_g);
            free(m->acts[s].host_dloss);
            free(m->acts[s].host_losses);
            free(m->acts[s].host_targets);
            free(m->acts[s].host_docs);
        }
        free(m->acts);
    }
    if (m->base.param_mem) be->ops->free(be, m->base.param_mem);
    if (m->base.grad_mem) be->ops->free(be, m->base.grad_mem);
    if (m->norm_eff) be->ops->free(be, m->norm_eff);
    free(m->w.layers);
    free(m->g.layers);
    free(m->wn.layers);
    free(m->base.params);
    free(m);
}

/* ---- the norms' weights (loom_gpt.wn) ---- */

/* wn: the parameters' norm weights, or with layernorm_1p places in norm_eff for 1 + w: the layers'
 * ln1 and ln2 and the final norm's (C each), C ones (the addend), then with qk_layernorm the
 * layers' q and k norms' (HS each) */
static enum loom_status norm_weights_create(struct loom_gpt *m) {
    const int64_t L = m->cfg.num_layers, C = m->cfg.hidden, HS = loom_gpt_head_size(&m->cfg);
    m->wn.layers = calloc((size_t)L, sizeof *m->wn.layers);
    if (!m->wn.layers) return loom_fail(LOOM_ERR_OOM, "out of memory for the norms' weights");
    m->wn.lnf_w = m->w.lnf_w;
    for (int64_t l = 0; l < L; l++) {
        m->wn.layers[l].ln1_w = m->w.layers[l].ln1_w;
        m->wn.layers[l].ln2_w = m->w.layers[l].ln2_w;
        m->wn.layers[l].q_ln_w = m->w.layers[l].q_ln_w;
        m->wn.layers[l].k_ln_w = m->w.layers[l].k_ln_w;
    }
    if (!m->cfg.layernorm_1p) return LOOM_OK;
    struct loom_backend *be = m->base.be;
    const size_t n = (size_t)(2 * L + 2) * (size_t)C + (size_t)(2 * L) * (size_t)HS;
    m->norm_eff = be->ops->malloc(be, n * sizeof(float));
    float *ones = malloc((size_t)C * sizeof(float));
    if (!m->norm_eff || !ones) {
        free(ones);
        return loom_fail(LOOM_ERR_OOM,
                         "out of memory for the norms' weights (--apply-layernorm-1p)");
    }
    for (int64_t i = 0; i < C; i++)
        ones[i] = 1.0f;
    be->ops->to_device(be, m->norm_eff + (2 * L + 1) * C, ones, (size_t)C * sizeof(float));
    free(ones);
    for (int64_t l = 0; l < L; l++) {
        if (m->w.layers[l].ln1_w) m->wn.layers[l].ln1_w = m->norm_eff + 2 * l * C;
        if (m->w.layers[l].ln2_w) m->wn.layers[l].ln2_w = m->norm_eff + (2 * l + 1) * C;
    }
    if (m->w.lnf_w) m->wn.lnf_w = m->norm_eff + 2 * L * C;
    float *qk_eff = m->norm_eff + (2 * L + 2) * C;
    for (int64_t l = 0; l < L; l++) {
        if (m->w.layers[l].q_ln_w) m->wn.layers[l].q_ln_w = qk_eff + 2 * l * HS;
        if (m->w.layers[l].k_ln_w) m->wn.layers[l].k_ln_w = qk_eff + (2 * l + 1) * HS;
    }
    return LOOM_OK;
}

void loom_gpt_norm_weights(struct loom_gpt *m) {
    if (!m->cfg.layernorm_1p) return;
    const int64_t L = m->cfg.num_layers, C = m->cfg.hidden, HS = loom_gpt_head_size(&m->cfg);
    const float *ones = m->norm_eff + (2 * L + 1) * C; /* C >= HS of them */
    for (int64_t l = 0; l < L; l++) {
        const struct loom_gpt_layer_ptrs *w = &m->w.layers[l], *wn = &m->wn.layers[l];
        if (w->ln1_w) loom_op(m->base.be, add, wn->ln1_w, w->ln1_w, ones, C);
        if (w->ln2_w) loom_op(m->base.be, add, wn->ln2_w, w->ln2_w, ones, C);
        if (w->q_ln_w) loom_op(m->base.be, add, wn->q_ln_w, w->q_ln_w, ones, HS);
        if (w->k_ln_w) loom_op(m->base.be, add, wn->k_ln_w, w->k_ln_w, ones, HS);
    }
    if (m->w.lnf_w) loom_op(m->base.be, add, m->wn.lnf_w, m->w.lnf_w, ones, C);
}

/* ---- pieces ---- */
/* The model's norm over N rows of the hidden size */
static void norm_forward(struct loom_gpt *m, void *out, enum loom_dtype out_dt, float *mean,
                         float *rstd, const float *x, const float *w, const float *b, int64_t N) {
    struct loom_backend *be = m->base.be;
    const int64_t C = m->cfg.hidden;
    if (m->cfg.norm == LOOM_NORM_LAYERNORM)
        loom_op(be, layernorm_forward, out, out_dt, mean, rstd, x, w, b, N, C,
                (float)m->cfg.norm_eps);
    else
        loom_op(be, rmsnorm_forward, out, out_dt, rstd, x, w, N, C, (float)m->cfg.norm_eps);
}

/* ---- query-key normalisation (qk_layernorm) ----
 * A qkv row holds NKVl groups of [R = NHl/NKVl query heads | key | value] of HS each. The backend's
 * head norms normalise every query and key head vector in place there by the model's norm over HS
 * with the layer's q or k weights, keeping the vectors as they were (of qkv's type) and their
 * statistics for the backward; the backward turns the gradient of the normalised vectors in dqkv
 * into that of their inputs in place, the weight gradients summing over every vector of the
 * rank's heads. */
void loom_gpt_qk_norm_forward(struct loom_gpt *m, int64_t l, void *qkv, enum loom_dtype dt,
                              void *keep, float *mean, float *rstd, int64_t N, int64_t NHl,
                              int64_t NKVl) {
    const int rms = m->cfg.norm != LOOM_NORM_LAYERNORM;
    const struct loom_gpt_layer_ptrs *w = &m->w.layers[l], *wn = &m->wn.layers[l];
    loom_op(m->base.be, head_norm_forward, rms, qkv, dt, keep, rms ? NULL : mean, rstd, wn->q_ln_w,
            w->q_ln_b, wn->k_ln_w, w->k_ln_b, N, NHl, NKVl, loom_gpt_head_size(&m->cfg),
            (float)m->cfg.norm_eps);
}

/* dqkv (of type dt, the gradient of the normalised q and k) becomes that of their inputs; the
 * layer's q and k norm weight (and bias) gradients accumulate this rank's heads' share */
static void qk_norm_backward(struct loom_gpt *m, struct loom_gpt_acts *a, int64_t l, void *dqkv,
                             enum loom_dtype dt) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    const struct loom_gpt_layer_acts *la = &a->layers[l];
    const struct loom_gpt_layer_ptrs *g = &m->g.layers[l], *wn = &m->wn.layers[l];
    const int rms = m->cfg.norm != LOOM_NORM_LAYERNORM;
    loom_op(be, head_norm_backward, rms, dqkv, dt, g->q_ln_w, g->q_ln_b, g->k_ln_w, g->k_ln_b,
            la->qk_in, la->qk_mean, la->qk_rstd, wn->q_ln_w, wn->k_ln_w, d.N, d.NHl, d.NKVl, d.HS);
    /* the key norm's bias adds q.b to every score of a query's row, which the softmax ignores:
     * its gradient is exactly zero (as the key bias's without the norm), kept so rather than as
     * rounding noise */
    if (g->k_ln_b) be->ops->zero(be, g->k_ln_b, (size_t)d.HS * sizeof(float));
}

/* dx (the residual gradient a->dres) += the norm's input gradient. With next_b (a product's bias
 * gradient, or NULL for a product without one) and next_ok, the norm also writes dres in the
 * 16-bit activation type to a->dres16 and sums dres into next_b: the output gradient of that
 * product, which runs next and reads dres as it is (next_ok: see dres16_for). */
static void norm_backward(struct loom_gpt *m, struct loom_gpt_acts *a, float *dw, float *db,
                          const void *dout, enum loom_dtype dout_dt, const float *x, const float *w,
                          const float *mean, const float *rstd, int64_t N, int next_ok,
                          float *next_b) {
    struct loom_backend *be = m->base.be;
    const int64_t C = m->cfg.hidden;
    a->dres16 = next_ok ? (void *)a->dc : NULL;
    float *dsum = next_ok ? next_b : NULL;
    if (m->cfg.norm == LOOM_NORM_LAYERNORM)
        loom_op(be, layernorm_backward, a->dres, a->dres16, dsum, dw, db, dout, dout_dt, x, w, mean,
                rstd, N, C);
    else
        loom_op(be, rmsnorm_backward, a->dres, a->dres16, dsum, dw, dout, dout_dt, x, w, rstd, N,
                C);
}

static struct loom_dropout hidden_dropout(const struct loom_gpt *m, const struct loom_step_ctx *ctx,
                                          int64_t layer, int site) {
    struct dims dm = dims_of(m);
    struct loom_dropout d = {0};
    d.p = ctx->training ? (float)m->cfg.hidden_dropout : 0.0f;
    d.seed = ctx->seed;
    d.key = loom_gpt_dropout_key(ctx->iteration, layer, site);
    d.sample0 = ctx->sample0;
    d.pos0 = dm.sp ? (int64_t)dm.tpr * dm.Tl : 0; /* the sequence shard's first position */
    d.T_global = m->cfg.seq_length;
    d.feat0 = 0;
    d.C_global = m->cfg.hidden;
    return d;
}

static struct loom_attn attn_problem(const struct loom_gpt *m, const struct loom_gpt_acts *acts,
                                     const struct loom_step_ctx *ctx, int64_t layer) {
    struct dims d = dims_of(m);
    struct loom_attn a = {0};
    a.B = d.B;
    a.T = d.T;
    a.NH = d.NHl;
    a.NKV = d.NKVl;
    a.HS = d.HS;
    a.causal = !m->cfg.encoder;
    a.scale = (float)(1.0 / sqrt((double)d.HS));
    a.dropout_p = ctx->training ? (float)m->cfg.attention_dropout : 0.0f;
    a.seed = ctx->seed;
    a.key = loom_gpt_dropout_key(ctx->iteration, layer, LOOM_DROP_ATTN_PROBS);
    a.sample0 = ctx->sample0;
    a.head0 = (int64_t)d.tpr * d.NHl;
    a.NH_global = m->cfg.heads;
    a.dt = act_dtype(m);
    a.doc_start = acts->doc_mask; /* the full sequence: sequence parallelism gathers it first */
    a.key_end = acts->key_end;    /* the encoder's padding mask */
    return a;
}

/* Row-parallel linear leaving the TP region: out (residual rows) = sum over TP of
 * inp w^T, the replicated bias added once (by TP rank 0, before the sum). */
static enum loom_status row_parallel_forward(struct loom_gpt *m, float *out, const void *inp,
                                             enum loom_dtype inp_dt, const float *w,
                                             const float *b, int64_t K) {
    struct dims d = dims_of(m);
    float *full = d.sp ? m->acts[0].full : out;
    loom_op(m->base.be, linear_forward_typed, full, LOOM_DTYPE_F32, inp, inp_dt, w,
            d.tpr == 0 ? b : NULL, d.N, K, d.C);
    return region_leave(m, out, full);
}

/* A branch's output (attention's proj, the MLP's fc2) on its way to the residual add fused with
 * the next norm: in the 16-bit activation type act, into the shared buffer acts[0].full, where
 * nothing else needs it in fp32 (one tensor-parallel rank, no sequence parallelism, no dropout
 * on the branch; the norm widens it as it adds). Otherwise fp32 into out (the residual stream's
 * buffer) through row_parallel_forward. Returns the output and its type in *r, *r_dt. */
static enum loom_status branch_forward(struct loom_gpt *m, float *out, const void **r,
                                       enum loom_dtype *r_dt, enum loom_dtype act,
                                       const struct loom_dropout *dr, const void *inp,
                                       enum loom_dtype inp_dt, const float *w, const float *b,
                                       int64_t K) {
    struct dims d = dims_of(m);
    if (act != LOOM_DTYPE_F32 && d.tp == 1 && !d.sp && dr->p <= 0) {
        loom_op(m->base.be, linear_forward_typed, m->acts[0].full, act, inp, inp_dt, w, b, d.N, K, d.C);
        *r = m->acts[0].full;
        *r_dt = act;
        return LOOM_OK;
    }
    LOOM_CHECK(row_parallel_forward(m, out, inp, inp_dt, w, b, K));
    if (dr->p > 0) loom_op(m->base.be, dropout_forward, out, out, d.B, d.Tl, d.C, dr);
    *r = out;
    *r_dt = LOOM_DTYPE_F32;
    return LOOM_OK;
}

enum loom_status loom_gpt_embed_forward(struct loom_gpt *m, int slot, const int32_t *tokens,
                                        const struct loom_step_ctx *ctx) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    struct loom_gpt_acts *a = &m->acts[slot];
    float *x0 = a->layers[0].x;
    float *full = d.sp ? a->full : x0;
    be->ops->to_device(be, a->tokens, tokens, (size_t)d.N * sizeof(int32_t));
    /* vocabulary-parallel: each rank embeds the tokens of its shard, the sum leaves the region */
    const float *wpe = (m->w.wpe && d.tpr == 0) ? m->w.wpe : NULL;
    loom_op(be, embedding_forward, full, a->tokens, a->doc_pos, m->w.wte, wpe, d.B, d.T, d.C, d.v0,
            d.Vl, 0);
    if (m->w.tte && d.tpr == 0) { /* token types (replicated: added once, before the sum) */
        float *tt = m->acts[0].dc;
        loom_op(be, embedding_forward, tt, a->token_types, NULL, m->w.tte, NULL, d.B, d.T, d.C, 0,
                m->cfg.num_tokentypes, 0);
        be->ops->add(be, full, full, tt, d.N * d.C);
    }
    LOOM_CHECK(region_leave(m, x0, full));
    struct loom_dropout dr = hidden_dropout(m, ctx, -1, LOOM_DROP_EMBED);
    if (dr.p > 0) loom_op(be, dropout_forward, x0, x0, d.B, d.Tl, d.C, &dr);
    return LOOM_OK;
}

/* A residual add and the norm after it in one op: xs = x + r, out = norm(xs) (rows local). */
static void residual_norm_forward(struct loom_gpt *m, float *xs, void *out, enum loom_dtype out_dt,
                                  float *mean, float *rstd, const float *x, const void *r,
                                  enum loom_dtype r_dt, const float *w, const float *b, int64_t N) {
    struct loom_backend *be = m->base.be;
    if (m->cfg.norm == LOOM_NORM_LAYERNORM)
        loom_op(be, residual_layernorm_forward, xs, out, out_dt, mean, rstd, x, r, r_dt, w, b, N,
                m->cfg.hidden, (float)m->cfg.norm_eps);
    else
        loom_op(be, residual_rmsnorm_forward, xs, out, out_dt, rstd, x, r, r_dt, w, N,
                m->cfg.hidden, (float)m->cfg.norm_eps);
}

/* Whether layers l and l + 1 are both on this rank, so that l's output is l + 1's input (as
 * loom_gpt_layer_output decides). Then layer l, which runs just before l + 1 on the same slot
 * (both are in one pipeline chunk), also makes l + 1's first norm, fused with its last residual
 * add; layer l + 1 finds it made. */
static int feeds_local_layer(const struct loom_gpt *m, int64_t l) {
    const struct loom_transformer_config *c = &m->cfg;
    return l >= 0 && l + 1 < c->num_layers && loom_gpt_layer_is_local(c, m->base.par, l) &&
           loom_gpt_layer_is_local(c, m->base.par, l + 1);
}

/* Both residual adds are fused with the norm that follows them: the one after attention with
 * norm2, the one after the MLP with the next layer's norm1 when that layer is local (else the
 * plain add; the head or the next stage takes the output). A branch's dropout runs before, on its
 * own. With 16-bit activations the branch's product writes its output in that type where the fused
 * add is all that reads it (branch_forward). The sums and norms are computed on the residual rows
 * (the sequence shard under sequence parallelism), where every operand is local. The GELU MLP's
 * first product carries the GELU (linear_gelu_forward, keeping the pre-activation in fc1); the
 * MLP's pre-activation and activation are of the activation type (bf16 with bf16 products on cuda),
 * which fc2 reads as it is. The activation (GELU or SwiGLU of fc1) of a layer that does not keep
 * it (all but the last --kept-activation-layers) goes to one buffer that every layer shares, and
 * the backward makes it again from fc1 (the same op on the same values: the same bits) for fc2's
 * weight gradient. That pass costs about 2% of a step and saves N x Fl elements a layer (1.1 GB at
 * GPT-2 124M, 2.9 GB at 350M, with micro-batch 16). */
static enum loom_status moe_branch_forward(struct loom_gpt *m, int slot, int64_t l,
                                           const struct loom_step_ctx *ctx, float *y);

enum loom_status loom_gpt_layer_forward(struct loom_gpt *m, int slot, int64_t l,
                                        const struct loom_step_ctx *ctx) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    const struct loom_transformer_config *c = &m->cfg;
    struct loom_gpt_acts *a = &m->acts[slot];
    struct loom_gpt_layer_acts *la = &a->layers[l];
    const struct loom_gpt_layer_ptrs *w = &m->w.layers[l], *wn = &m->wn.layers[l];
    float *y = loom_gpt_layer_output(m, slot, l);

    /* attention branch */
    const enum loom_dtype act = act_dtype(m), ln_dt = ln_dtype(m, act);
    if (!feeds_local_layer(m, l - 1))
        norm_forward(m, la->ln1, ln_dt, la->ln1_mean, la->ln1_rstd, la->x, wn->ln1_w, w->ln1_b,
                     d.Nr);
    LOOM_CHECK(region_enter(m, la->ln1_full, la->ln1));
    struct loom_attn ap = attn_problem(m, a, ctx, l);
    loom_op(be, linear_forward_typed, la->qkv, ap.dt, la->ln1_full, ln_dt, w->qkv_w, w->qkv_b, d.N,
            d.C, d.QKVl);
    if (c->qk_layernorm)
        loom_gpt_qk_norm_forward(m, l, la->qkv, ap.dt, la->qk_in, la->qk_mean, la->qk_rstd, d.N,
                                 d.NHl, d.NKVl);
    if (c->posemb == LOOM_POSEMB_ROPE) {
        const struct loom_rope rot = loom_gpt_rope(c);
        loom_op(be, rope, la->qkv, ap.dt, a->doc_pos, d.B, d.T, d.NHl, d.NKVl, d.HS, 0, &rot, 0);
    }
    loom_op(be, attention_forward, la->att, la->lse, la->qkv, &ap);
    struct loom_dropout dr = hidden_dropout(m, ctx, l, LOOM_DROP_ATTN_OUT);
    const void *r;
    enum loom_dtype r_dt;
    LOOM_CHECK(branch_forward(m, la->xmid, &r, &r_dt, act, &dr, la->att, ap.dt, w->proj_w,
                              w->proj_b, d.NHl * d.HS));
    residual_norm_forward(m, la->xmid, la->ln2, ln_dt, la->ln2_mean, la->ln2_rstd, la->x, r, r_dt,
                          wn->ln2_w, w->ln2_b, d.Nr);

    /* MLP branch: the activation goes to the layer's own buffer where it keeps it
     * (kept_act_layers), else to the shared one, which the backward remakes */
    LOOM_CHECK(region_enter(m, la->ln2_full, la->ln2));
    if (loom_gpt_moe_layer(m, l)) return moe_branch_forward(m, slot, l, ctx, y);
    if (c->swiglu) {
        loom_op(be, linear_forward_typed, la->fc1, act, la->ln2_full, ln_dt, w->fc1_w, w->fc1_b,
                d.N, d.C, d.F1l);
        loom_op(be, swiglu_forward, la->act, la->fc1, act, d.N, d.Fl);
    } else {
        loom_op(be, linear_gelu_forward, c->gelu, la->act, la->fc1, act, la->ln2_full, ln_dt,
                w->fc1_w, w->fc1_b, d.N, d.C, d.Fl);
    }
    dr = hidden_dropout(m, ctx, l, LOOM_DROP_MLP_OUT);
    if (feeds_local_layer(m, l)) {
        struct loom_gpt_layer_acts *nx = &m->acts[slot].layers[l + 1];
        const struct loom_gpt_layer_ptrs *nw = &m->w.layers[l + 1], *nwn = &m->wn.layers[l + 1];
        LOOM_CHECK(
            branch_forward(m, y, &r, &r_dt, act, &dr, la->act, act, w->fc2_w, w->fc2_b, d.Fl));
        residual_norm_forward(m, y, nx->ln1, ln_dt, nx->ln1_mean, nx->ln1_rstd, la->xmid, r, r_dt,
                              nwn->ln1_w, nw->ln1_b, d.Nr);
    } else { /* the stage's last layer: its output stays fp32 (the final norm, a send) */
        LOOM_CHECK(branch_forward(m, y, &r, &r_dt, LOOM_DTYPE_F32, &dr, la->act, act, w->fc2_w,
                                  w->fc2_b, d.Fl));
        loom_op(be, add, y, y, la->xmid, d.Nr * d.C);
    }
    return LOOM_OK;
}

/* An MoE layer's MLP branch (gpt_moe.c) on its norm's output, in fp32: y = xmid +
 * dropout(moe(ln2)), and the next local layer's first norm fused with that add as the dense
 * branch does */
static enum loom_status moe_branch_forward(struct loom_gpt *m, int slot, int64_t l,
                                           const struct loom_step_ctx *ctx, float *y) {
    struct dims d = dims_of(m);
    struct loom_gpt_layer_acts *la = &m->acts[slot].layers[l];
    if (act_dtype(m) != LOOM_DTYPE_F32)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--num-experts: MoE layers run with fp32 "
                         "activations only for now (leave out --bf16 / --fp16)");
    /* under tensor parallelism each rank's output is its share, summed (or reduce-scattered
     * over the sequence) as a row-parallel product's */
    float *full = d.sp ? m->acts[0].full : y;
    LOOM_CHECK(loom_gpt_moe_forward(m, slot, l, full, la->ln2_full, ctx->training));
    LOOM_CHECK(region_leave(m, y, full));
    struct loom_dropout dr = hidden_dropout(m, ctx, l, LOOM_DROP_MLP_OUT);
    if (dr.p > 0) loom_op(m->base.be, dropout_forward, y, y, d.B, d.Tl, d.C, &dr);
    if (feeds_local_layer(m, l)) {
        struct loom_gpt_layer_acts *nx = &m->acts[slot].layers[l + 1];
        const struct loom_gpt_layer_ptrs *nw = &m->w.layers[l + 1], *nwn = &m->wn.layers[l + 1];
        residual_norm_forward(m, y, nx->ln1, LOOM_DTYPE_F32, nx->ln1_mean, nx->ln1_rstd, la->xmid,
                              y, LOOM_DTYPE_F32, nwn->ln1_w, nw->ln1_b, d.Nr);
    } else {
        loom_op(m->base.be, add, y, y, la->xmid, d.Nr * d.C);
    }
    return LOOM_OK;
}

/* Rows of a chunk of the fused head for the type that linear_xent stores its logits in now:
 * xent_chunk_rows for that type, and never more than the chunk buffer holds (it was sized for the
 * type at the model's making; a product type set later may change it). */
static int64_t xent_rows_now(const struct loom_gpt *m, const struct dims *d) {
    const int64_t elem = xent_elem(m);
    const int64_t rows = xent_chunk_rows(d, elem);
    const int64_t fit = m->acts[0].xent_bytes / (d->Vl * elem);
    return rows < fit ? rows : fit;
}

/* The head with the whole vocabulary on this rank (no tensor parallelism), after the final norm:
 * the output layer and the loss fused (linear_xent), chunk by chunk of rows. When training, each
 * chunk's gradient is finished at once, while its logits exist: d(lnf) of its rows into
 * a->dlnf, and the output weight's gradient accumulated (the head backward of this micro-batch
 * always follows on this rank, and parameter gradients only accumulate, so doing that part
 * early changes nothing but the order of the sums). Evaluation (ctx->training == 0) computes the
 * losses alone and leaves every gradient untouched. */
static enum loom_status head_forward_fused(struct loom_gpt *m, int slot, const int32_t *targets,
                                           const struct loom_step_ctx *ctx, double *loss_sum,
                                           int64_t *count) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    struct loom_gpt_acts *a = &m->acts[slot];
    const int64_t rows = xent_rows_now(m, &d);
    const int grad = ctx->training;
    for (int64_t r0 = 0; r0 < d.N; r0 += rows) {
        const int64_t nr = d.N - r0 < rows ? d.N - r0 : rows;
        loom_op(be, linear_xent, a->losses + r0, grad ? a->dlnf + r0 * d.C : NULL,
                grad ? m->g.out_w : NULL, m->acts[0].xent_chunk, a->lnf + r0 * d.C, m->w.out_w,
                a->targets + r0, ctx->dloss, nr, d.C, d.Vl, d.Vvalid);
    }
    a->dlnf_ready = grad;
    be->ops->to_host(be, a->host_losses, a->losses, (size_t)d.N * sizeof(float));
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t n = 0; n < d.N; n++) {
        if (targets[n] < 0) continue;
        sum += (double)a->host_losses[n];
        cnt++;
    }
    *loss_sum = sum;
    *count = cnt;
    return LOOM_OK;
}

enum loom_status loom_gpt_head_forward(struct loom_gpt *m, int slot, const int32_t *targets,
                                       const struct loom_step_ctx *ctx, double *loss_sum,
                                       int64_t *count) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    struct loom_gpt_acts *a = &m->acts[slot];
    float *x = a->x_out;
    norm_forward(m, a->lnf, LOOM_DTYPE_F32, a->lnf_mean, a->lnf_rstd, x, m->wn.lnf_w, m->w.lnf_b,
                 d.Nr);
    be->ops->to_device(be, a->targets, targets, (size_t)d.N * sizeof(int32_t));
    memcpy(a->host_targets, targets, (size_t)d.N * sizeof(int32_t));
    if (d.tp == 1) return head_forward_fused(m, slot, targets, ctx, loss_sum, count);

    /* vocabulary-parallel: the logits of every row, per-shard statistics combined over TP */
    LOOM_CHECK(region_enter(m, a->lnf_full, a->lnf));
    loom_op(be, linear_forward, a->logits, a->lnf_full, m->w.out_w, NULL, d.N, d.C, d.Vl);
    loom_op(be, xent_forward, a->stats, a->logits, a->targets, d.N, d.Vl, d.v0, d.Vvalid);
    be->ops->to_host(be, a->host_stats, a->stats, (size_t)d.N * 3 * sizeof(float));

    /* combine the vocabulary shards: global max, rescaled sum of exponentials, target logit */
    float *hs = a->host_stats, *hg = a->host_g;
    float *mx = malloc((size_t)d.N * 3 * sizeof(float));
    if (!mx) return loom_fail(LOOM_ERR_OOM, "out of memory in the loss");
    for (int64_t n = 0; n < d.N; n++) mx[n] = hs[3 * n];
    struct loom_comm *g = m->base.par->group[LOOM_PDIM_TP];
    LOOM_CHECK(loom_comm_allreduce(g, mx, d.N, LOOM_DTYPE_F32, LOOM_REDOP_MAX));
    float *se = mx + d.N, *tl = mx + 2 * d.N;
    for (int64_t n = 0; n < d.N; n++) {
        se[n] = hs[3 * n + 1] * expf(hs[3 * n] - mx[n]);
        tl[n] = hs[3 * n + 2];
    }
    LOOM_CHECK(loom_comm_allreduce(g, se, 2 * d.N, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    for (int64_t n = 0; n < d.N; n++) {
        hs[3 * n] = mx[n];
        hs[3 * n + 1] = se[n];
        hs[3 * n + 2] = tl[n];
    }
    free(mx);
    double sum = 0;
    int64_t cnt = 0;
    for (int64_t n = 0; n < d.N; n++) {
        hg[2 * n] = hs[3 * n];
        hg[2 * n + 1] = hs[3 * n + 1];
        if (targets[n] < 0) {
            a->host_dloss[n] = 0.0f;
            continue;
        }
        sum += (double)logf(hs[3 * n + 1]) + (double)hs[3 * n] - (double)hs[3 * n + 2];
        cnt++;
        a->host_dloss[n] = ctx->dloss;
    }
    be->ops->to_device(be, a->gstats, hg, (size_t)d.N * 2 * sizeof(float));
    be->ops->to_device(be, a->dloss, a->host_dloss, (size_t)d.N * sizeof(float));
    *loss_sum = sum;
    *count = cnt;
    return LOOM_OK;
}

/* Whether the product that reads the residual gradient after site (layer, site) of the backward
 * can take it from the norm backward before it (norm_backward's dres16): with 16-bit activations,
 * when that product reads dres as it is (no dropout on the branch, no sequence parallelism) on
 * one tensor-parallel rank. */
static int dres16_for(const struct loom_gpt *m, const struct loom_step_ctx *ctx, int64_t layer,
                      int site) {
    struct dims d = dims_of(m);
    return act_dtype(m) != LOOM_DTYPE_F32 && d.tp == 1 && !d.sp &&
           hidden_dropout(m, ctx, layer, site).p <= 0;
}

enum loom_status loom_gpt_head_backward(struct loom_gpt *m, int slot,
                                        const struct loom_step_ctx *ctx) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    struct loom_gpt_acts *a = &m->acts[slot];
    if (d.tp == 1) {
        /* the head forward made d(lnf) already (head_forward_fused) */
        LOOM_ASSERT(a->dlnf_ready);
        a->dlnf_ready = 0;
        be->ops->zero(be, a->dres, (size_t)d.Nr * d.C * sizeof(float));
        const int64_t last = m->cfg.num_layers - 1; /* its fc2 reads dres next, when local */
        const int next_ok = loom_gpt_layer_is_local(&m->cfg, m->base.par, last) &&
                            dres16_for(m, ctx, last, LOOM_DROP_MLP_OUT);
        norm_backward(m, a, m->g.lnf_w, m->g.lnf_b, a->dlnf, LOOM_DTYPE_F32, a->x_out, m->wn.lnf_w,
                      a->lnf_mean, a->lnf_rstd, d.Nr, next_ok,
                      next_ok ? m->g.layers[last].fc2_b : NULL);
        return LOOM_OK;
    }
    loom_op(be, xent_backward, a->logits, a->logits, a->targets, a->gstats, a->dloss, d.N, d.Vl,
            d.v0, d.Vvalid);
    /* output layer (column-parallel over the vocabulary): d(lnf) all-reduced over TP */
    loom_op(be, linear_backward, a->dc, m->g.out_w, NULL, a->logits, a->lnf_full, m->w.out_w, d.N,
            d.C, d.Vl);
    LOOM_CHECK(region_enter_backward(m, a->dc, a->dc));
    be->ops->zero(be, a->dres, (size_t)d.Nr * d.C * sizeof(float));
    norm_backward(m, a, m->g.lnf_w, m->g.lnf_b, a->dc, LOOM_DTYPE_F32, a->x_out, m->wn.lnf_w,
                  a->lnf_mean, a->lnf_rstd, d.Nr, 0, NULL);
    return LOOM_OK;
}

/* Gradient of a branch's output (the residual gradient dres, through the branch's dropout),
 * gathered over the sequence under SP: what a row-parallel linear or the embedding needs. */
static enum loom_status branch_output_grad(struct loom_gpt *m, struct loom_gpt_acts *a,
                                           const struct loom_step_ctx *ctx, int64_t layer,
                                           int site, float **out) {
    struct dims d = dims_of(m);
    float *dy = a->dres;
    struct loom_dropout dr = hidden_dropout(m, ctx, layer, site);
    if (dr.p > 0) {
        loom_op(m->base.be, dropout_backward, a->dc, a->dres, d.B, d.Tl, d.C, &dr);
        dy = a->dc;
    }
    if (d.sp) {
        LOOM_CHECK(region_leave_backward(m, a->full, dy));
        dy = a->full;
    }
    *out = dy;
    return LOOM_OK;
}

/* The output gradient of the product after the residual gradient: dres16 where the norm made it
 * (the bias gradient summed then: *db becomes NULL), else the branch's gradient in fp32. */
static enum loom_status next_output_grad(struct loom_gpt *m, struct loom_gpt_acts *a,
                                         const struct loom_step_ctx *ctx, int64_t layer, int site,
                                         const void **dy, enum loom_dtype *dy_dt, float **db) {
    if (a->dres16) {
        *dy = a->dres16;
        *dy_dt = act_dtype(m);
        *db = NULL;
        a->dres16 = NULL;
        return LOOM_OK;
    }
    float *f;
    LOOM_CHECK(branch_output_grad(m, a, ctx, layer, site, &f));
    *dy = f;
    *dy_dt = LOOM_DTYPE_F32;
    return LOOM_OK;
}

enum loom_status loom_gpt_layer_backward(struct loom_gpt *m, int slot, int64_t l,
                                         const struct loom_step_ctx *ctx) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    const struct loom_transformer_config *c = &m->cfg;
    struct loom_gpt_acts *a = &m->acts[slot];
    struct loom_gpt_layer_acts *la = &a->layers[l];
    const struct loom_gpt_layer_ptrs *w = &m->w.layers[l], *wn = &m->wn.layers[l];
    const struct loom_gpt_layer_ptrs *g = &m->g.layers[l];

    /* MLP branch: dres is d(y). GELU: fc2's input gradient comes through the GELU already, with
     * fc1's bias gradient (linear_gelu_backward), as dpre in dwide, read so by fc1's backward;
     * SwiGLU: d(act) in dwide2, then dpre in dwide (swiglu_backward); all of the activation
     * type. Each product after a norm's backward (fc2 here, proj below) takes dres from that norm
     * in 16 bits where it made it, with its bias gradient summed (next_output_grad). */
    const void *dy;
    enum loom_dtype dy_dt;
    float *db = g->fc2_b;
    const enum loom_dtype act = act_dtype(m);
    const enum loom_dtype ln_dt = ln_dtype(m, act), dln_dt = dln_dtype(m, act);
    if (loom_gpt_moe_layer(m, l)) { /* the MoE MLP, fp32: its input gradient into full */
        float *dmoe;
        LOOM_ASSERT(!a->dres16);
        LOOM_CHECK(branch_output_grad(m, a, ctx, l, LOOM_DROP_MLP_OUT, &dmoe));
        /* under sequence parallelism d(output) is the gathered one in full: dx goes to dc */
        float *dxm = d.sp ? a->dc : a->full;
        LOOM_CHECK(loom_gpt_moe_backward(m, slot, l, dxm, dmoe, la->ln2_full, ctx->aux_scale));
        if (d.sp) be->ops->copy(be, a->full, a->dc, (size_t)(d.N * d.C) * sizeof(float));
    } else {
    LOOM_CHECK(next_output_grad(m, a, ctx, l, LOOM_DROP_MLP_OUT, &dy, &dy_dt, &db));
    if (c->swiglu) {
        if (la->act == a->act) /* remade: see the forward */
            loom_op(be, swiglu_forward, la->act, la->fc1, act, d.N, d.Fl);
        loom_op(be, linear_backward_typed, a->dwide2, act, g->fc2_w, db, dy, dy_dt, la->act, act,
                w->fc2_w, d.N, d.Fl, d.C);
        loom_op(be, swiglu_backward, a->dwide, a->dwide2, la->fc1, act, d.N, d.Fl);
        loom_op(be, linear_backward_typed, a->full, dln_dt, g->fc1_w, g->fc1_b, a->dwide, act,
                la->ln2_full, ln_dt, w->fc1_w, d.N, d.C, d.F1l);
    } else {
        if (la->act == a->act) /* remade */
            loom_op(be, gelu_forward_typed, c->gelu, la->act, la->fc1, act, d.N * d.Fl);
        loom_op(be, linear_gelu_backward, c->gelu, a->dwide, act, g->fc1_b, g->fc2_w, db, dy, dy_dt,
                la->act, la->fc1, w->fc2_w, d.N, d.Fl, d.C);
        loom_op(be, linear_backward_typed, a->full, dln_dt, g->fc1_w, NULL, a->dwide, act,
                la->ln2_full, ln_dt, w->fc1_w, d.N, d.C, d.Fl);
    }
    }
    LOOM_CHECK(region_enter_backward(m, a->dc, a->full));
    norm_backward(m, a, g->ln2_w, g->ln2_b, d.sp ? a->dc : a->full, dln_dt, la->xmid, wn->ln2_w,
                  la->ln2_mean, la->ln2_rstd, d.Nr, dres16_for(m, ctx, l, LOOM_DROP_ATTN_OUT),
                  g->proj_b);

    /* attention branch: dres is now d(xmid) */
    db = g->proj_b;
    LOOM_CHECK(next_output_grad(m, a, ctx, l, LOOM_DROP_ATTN_OUT, &dy, &dy_dt, &db));
    struct loom_attn ap = attn_problem(m, a, ctx, l);
    loom_op(be, linear_backward_typed, a->dwide2, ap.dt, g->proj_w, db, dy, dy_dt, la->att, ap.dt,
            w->proj_w, d.N, d.NHl * d.HS, d.C);
    loom_op(be, attention_backward, a->dwide, a->dwide2, la->att, la->lse, la->qkv, &ap);
    if (c->posemb == LOOM_POSEMB_ROPE) {
        const struct loom_rope rot = loom_gpt_rope(c);
        loom_op(be, rope, a->dwide, ap.dt, a->doc_pos, d.B, d.T, d.NHl, d.NKVl, d.HS, 0, &rot, 1);
    }
    if (c->qk_layernorm) qk_norm_backward(m, a, l, a->dwide, ap.dt);
    loom_op(be, linear_backward_typed, a->full, dln_dt, g->qkv_w, g->qkv_b, a->dwide, ap.dt,
            la->ln1_full, ln_dt, w->qkv_w, d.N, d.C, d.QKVl);
    /* the key bias of every group ([R query heads | k | v] of HS each): its gradient is zero,
     * except through a key norm, which does not just shift the scores */
    if (g->qkv_b && !c->qk_layernorm) {
        const int64_t R = d.NHl / d.NKVl;
        loom_op(be, zero_strided, g->qkv_b + R * d.HS, d.NKVl, d.HS, (R + 2) * d.HS);
    }
    LOOM_CHECK(region_enter_backward(m, a->dc, a->full));
    /* the previous layer's fc2 reads dres next, when it is on this rank */
    const int next_ok = feeds_local_layer(m, l - 1) && dres16_for(m, ctx, l - 1, LOOM_DROP_MLP_OUT);
    norm_backward(m, a, g->ln1_w, g->ln1_b, d.sp ? a->dc : a->full, dln_dt, la->x, wn->ln1_w,
                  la->ln1_mean, la->ln1_rstd, d.Nr, next_ok,
                  next_ok ? m->g.layers[l - 1].fc2_b : NULL);
    return LOOM_OK;
}

enum loom_status loom_gpt_embed_backward(struct loom_gpt *m, int slot,
                                         const struct loom_step_ctx *ctx) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    struct loom_gpt_acts *a = &m->acts[slot];
    float *dx;
    LOOM_CHECK(branch_output_grad(m, a, ctx, -1, LOOM_DROP_EMBED, &dx));
    loom_op(be, embedding_backward, m->g.wte, m->g.wpe, dx, a->tokens, a->doc_pos, d.B, d.T, d.C,
            d.v0, d.Vl, 0);
    if (m->g.tte)
        loom_op(be, embedding_backward, m->g.tte, NULL, dx, a->token_types, NULL, d.B, d.T, d.C, 0,
                m->cfg.num_tokentypes, 0);
    return LOOM_OK;
}

/* Megatron-LM's get_ltor_masks_and_position_ids: in each sample, the tokens after an input token
 * equal to the end-of-document id start a new document (the end-of-document token belongs to the
 * document it ends). doc_start[t] = the first position of t's document, position = t - that. */
enum loom_status loom_gpt_micro_begin(struct loom_gpt *m, int slot, const struct loom_micro *mb,
                                      const struct loom_step_ctx *ctx) {
    struct loom_gpt_acts *a = &m->acts[slot];
    struct loom_backend *be = m->base.be;
    struct dims d = dims_of(m);
    a->doc_mask = a->doc_pos = NULL;
    a->key_end = NULL;
    if (m->cfg.num_tokentypes > 0 && m->base.first_stage)
        be->ops->to_device(be, a->token_types, mb->token_types, (size_t)d.N * sizeof(int32_t));
    if (m->cfg.encoder) { /* the padding mask: every query of sample b sees its real tokens */
        int32_t *end = a->host_docs;
        for (int64_t b = 0; b < d.B; b++) {
            int32_t len = 0;
            for (int64_t t = 0; t < d.T; t++) len += mb->padding_mask[b * d.T + t] != 0;
            for (int64_t t = 0; t < d.T; t++) end[b * d.T + t] = len;
        }
        be->ops->to_device(be, a->doc_start, end, (size_t)d.N * sizeof(int32_t));
        a->key_end = a->doc_start;
        return LOOM_OK;
    }
    if (!ctx->reset_position_ids && !ctx->reset_attention_mask) return LOOM_OK;
    const int32_t *tokens = mb->tokens;
    int32_t *start = a->host_docs, *pos = a->host_docs + d.N;
    for (int64_t b = 0; b < d.B; b++) {
        int64_t s = 0;
        for (int64_t t = 0; t < d.T; t++) {
            start[b * d.T + t] = (int32_t)s;
            pos[b * d.T + t] = (int32_t)(t - s);
            if (tokens[b * d.T + t] == ctx->doc_eod) s = t + 1;
        }
    }
    if (ctx->reset_attention_mask) {
        be->ops->to_device(be, a->doc_start, start, (size_t)d.N * sizeof(int32_t));
        a->doc_mask = a->doc_start;
    }
    if (ctx->reset_position_ids) {
        be->ops->to_device(be, a->doc_positions, pos, (size_t)d.N * sizeof(int32_t));
        a->doc_pos = a->doc_positions;
    }
    return LOOM_OK;
}

enum loom_status loom_gpt_forward(struct loom_gpt *m, const int32_t *tokens,
                                  const int32_t *targets, const struct loom_step_ctx *ctx,
                                  double *loss_sum, int64_t *count) {
    LOOM_ASSERT(loom_pp_size(m->base.par) == 1);
    loom_gpt_norm_weights(m);
    const struct loom_micro mb = {m->base.B, m->cfg.seq_length, (int32_t *)tokens,
                                  (int32_t *)targets, NULL, NULL, NULL, ctx->sample0};
    LOOM_CHECK(loom_gpt_micro_begin(m, 0, &mb, ctx));
    LOOM_CHECK(loom_gpt_embed_forward(m, 0, tokens, ctx));
    for (int64_t l = 0; l < m->cfg.num_layers; l++) LOOM_CHECK(loom_gpt_layer_forward(m, 0, l, ctx));
    return loom_gpt_head_forward(m, 0, targets, ctx, loss_sum, count);
}

enum loom_status loom_gpt_backward(struct loom_gpt *m, const struct loom_step_ctx *ctx) {
    LOOM_ASSERT(loom_pp_size(m->base.par) == 1);
    LOOM_CHECK(loom_gpt_head_backward(m, 0, ctx));
    for (int64_t l = m->cfg.num_layers - 1; l >= 0; l--)
        LOOM_CHECK(loom_gpt_layer_backward(m, 0, l, ctx));
    return loom_gpt_embed_backward(m, 0, ctx);
}

int64_t loom_gpt_residual_rows(const struct loom_gpt *m) { return dims_of(m).Nr; }

/* ---- the stack's ends, for the heads of a family built on it (loom/gpt_internal.h) ---- */

void loom_gpt_final_norm_forward(struct loom_gpt *m, int slot) {
    struct dims d = dims_of(m);
    struct loom_gpt_acts *a = &m->acts[slot];
    norm_forward(m, a->lnf, LOOM_DTYPE_F32, a->lnf_mean, a->lnf_rstd, a->x_out, m->wn.lnf_w,
                 m->w.lnf_b, d.Nr);
}

enum loom_status loom_gpt_gather_sequence(struct loom_gpt *m, float *full, const float *shard) {
    struct dims d = dims_of(m);
    if (!d.sp) {
        if (full != shard)
            m->base.be->ops->copy(m->base.be, full, shard, (size_t)(d.N * d.C) * sizeof(float));
        return LOOM_OK;
    }
    return region_enter(m, full, shard);
}

void loom_gpt_sequence_shard(struct loom_gpt *m, float *shard, const float *full) {
    struct dims d = dims_of(m);
    struct loom_backend *be = m->base.be;
    if (!d.sp) {
        if (shard != full) be->ops->copy(be, shard, full, (size_t)(d.N * d.C) * sizeof(float));
        return;
    }
    for (int64_t b = 0; b < d.B; b++)
        be->ops->copy(be, shard + b * d.Tl * d.C, full + (b * d.T + (int64_t)d.tpr * d.Tl) * d.C,
                      (size_t)(d.Tl * d.C) * sizeof(float));
}

void loom_gpt_final_norm_backward(struct loom_gpt *m, int slot, const float *dlnf) {
    struct dims d = dims_of(m);
    struct loom_gpt_acts *a = &m->acts[slot];
    m->base.be->ops->zero(m->base.be, a->dres, (size_t)d.Nr * d.C * sizeof(float));
    norm_backward(m, a, m->g.lnf_w, m->g.lnf_b, dlnf, LOOM_DTYPE_F32, a->x_out, m->wn.lnf_w,
                  a->lnf_mean, a->lnf_rstd, d.Nr, 0, NULL);
}
