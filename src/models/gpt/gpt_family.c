/* The GPT family's operations (struct loom_family): how the pipeline executor and the trainer
 * reach a GPT/Llama-style decoder. One layer input/output tensor crosses a stage, a micro-batch is
 * its tokens and next-token labels, and its one loss is the language model's. */
#include "models/gpt/gpt_internal.h"

static struct loom_gpt *G(struct loom_model *m) { return loom_gpt_of(m); }

enum loom_status loom_gpt_family_create(struct loom_model **out, const void *config,
                                   struct loom_parallel *par, struct loom_backend *be, int64_t B,
                                   int nslots) {
    struct loom_gpt *g = NULL;
    LOOM_CHECK(loom_gpt_create(&g, config, par, be, B, nslots));
    *out = &g->base;
    return LOOM_OK;
}

void loom_gpt_family_free(struct loom_model *m) { loom_gpt_free(G(m)); }

enum loom_status loom_gpt_family_init_weights(struct loom_model *m, uint64_t seed) {
    return loom_gpt_init_weights(G(m), seed);
}

void loom_gpt_family_chunk_layers(const struct loom_model *m, int stage, int chunk, int64_t *l0,
                             int64_t *l1) {
    const struct loom_parallel *par = m->par;
    loom_gpt_chunk_layers((const struct loom_transformer_config *)m->config, loom_pp_size(par),
                          par->vpp > 0 ? par->vpp : 1, stage, chunk, l0, l1);
}

void loom_gpt_family_prepare(struct loom_model *m) { loom_gpt_norm_weights(G(m)); }

enum loom_status loom_gpt_family_micro_begin(struct loom_model *m, int slot,
                                        const struct loom_micro *mb,
                                        const struct loom_step_ctx *ctx) {
    return loom_gpt_micro_begin(G(m), slot, mb, ctx);
}

enum loom_status loom_gpt_family_first_forward(struct loom_model *m, int slot,
                                          const struct loom_micro *mb,
                                          const struct loom_step_ctx *ctx) {
    return loom_gpt_embed_forward(G(m), slot, mb->tokens, ctx);
}

enum loom_status loom_gpt_family_layer_forward(struct loom_model *m, int slot, int64_t l,
                                          const struct loom_step_ctx *ctx) {
    return loom_gpt_layer_forward(G(m), slot, l, ctx);
}

/* The language-model loss of the micro-batch: its token losses over the labels >= 0. Under
 * per_micro_mean a token's dloss is ctx->dloss over the micro-batch's tokens that carry a loss
 * (0 for a wholly masked micro-batch). */
static enum loom_status gpt_last_forward(struct loom_model *m, int slot,
                                         const struct loom_micro *mb,
                                         const struct loom_step_ctx *ctx,
                                         struct loom_losses *losses) {
    struct loom_step_ctx mc = *ctx;
    if (ctx->per_micro_mean) {
        int64_t valid = 0;
        for (int64_t i = 0; i < mb->B * mb->T; i++) valid += mb->labels[i] >= 0;
        mc.dloss = valid > 0 ? (float)((double)ctx->dloss / (double)valid) : 0.0f;
    }
    double sum = 0.0;
    int64_t count = 0;
    LOOM_CHECK(loom_gpt_head_forward(G(m), slot, mb->labels, &mc, &sum, &count));
    losses->sum[0] += sum;
    losses->count[0] += (double)count;
    return LOOM_OK;
}

static enum loom_status gpt_last_backward(struct loom_model *m, int slot,
                                          const struct loom_micro *mb,
                                          const struct loom_step_ctx *ctx) {
    (void)mb;
    return loom_gpt_head_backward(G(m), slot, ctx);
}

enum loom_status loom_gpt_family_layer_backward(struct loom_model *m, int slot, int64_t l,
                                           const struct loom_step_ctx *ctx) {
    return loom_gpt_layer_backward(G(m), slot, l, ctx);
}

enum loom_status loom_gpt_family_first_backward(struct loom_model *m, int slot,
                                           const struct loom_step_ctx *ctx) {
    return loom_gpt_embed_backward(G(m), slot, ctx);
}

/* One tensor crosses: the residual stream [rows, hidden] (the sequence shard under sequence
 * parallelism), forward into the next layer's input, backward through the shared residual
 * gradient. */
int loom_gpt_family_boundary(struct loom_model *m, int slot, int64_t l, enum loom_boundary_side side,
                        struct loom_stage_tensor *t) {
    struct loom_gpt *g = G(m);
    t->count = loom_gpt_residual_rows(g) * g->cfg.hidden;
    switch (side) {
    case LOOM_RECV_ACT: t->name = "hidden"; t->data = loom_gpt_layer_input(g, slot, l); break;
    case LOOM_SEND_ACT: t->name = "hidden"; t->data = loom_gpt_layer_output(g, slot, l - 1); break;
    default: t->name = "hidden grad"; t->data = loom_gpt_dres(g); break;
    }
    return 1;
}

/* 6 N per token for the products (N the parameters a token uses: loom_gpt_num_active_params) and 12 L NH HS T for attention's scores and
 * mixing, forward and backward (Megatron-LM's count with causal masking ignored) */
double loom_gpt_family_flops_per_sample(const struct loom_model *m) {
    const struct loom_transformer_config *c = m->config;
    const double T = (double)c->seq_length;
    const double per_token = 6.0 * loom_gpt_num_active_params(c) +
                             12.0 * (double)c->num_layers * (double)c->heads *
                                 (double)loom_gpt_head_size(c) * T;
    return per_token * T;
}

/* Decoding (`loom generate`): no dropout, one position per step; learned position embeddings
 * bound the positions, rotary ones do not */
static void gpt_decode_config(void *config, int64_t *vocab, int64_t *max_positions) {
    struct loom_transformer_config *c = config;
    *vocab = c->vocab_size;
    *max_positions = c->posemb == LOOM_POSEMB_LEARNED ? c->max_positions : 0;
    c->hidden_dropout = c->attention_dropout = 0;
    c->seq_length = 1;
}

static enum loom_status gpt_decoder_create(void **dec, struct loom_model *m, int64_t positions) {
    struct loom_gpt_decoder *d = NULL;
    LOOM_CHECK(loom_gpt_decoder_create(&d, G(m), positions));
    *dec = d;
    return LOOM_OK;
}

static enum loom_status gpt_decoder_step(void *dec, int32_t token, float *logits) {
    return loom_gpt_decoder_step(dec, token, logits);
}

static void gpt_decoder_free(void *dec) { loom_gpt_decoder_free(dec); }

const struct loom_family loom_gpt_family = {
    .name = "gpt",
    .num_losses = 1,
    .loss_names = {"lm loss"},
    .create = loom_gpt_family_create,
    .free = loom_gpt_family_free,
    .init_weights = loom_gpt_family_init_weights,
    .chunk_layers = loom_gpt_family_chunk_layers,
    .prepare = loom_gpt_family_prepare,
    .micro_begin = loom_gpt_family_micro_begin,
    .first_forward = loom_gpt_family_first_forward,
    .layer_forward = loom_gpt_family_layer_forward,
    .last_forward = gpt_last_forward,
    .last_backward = gpt_last_backward,
    .layer_backward = loom_gpt_family_layer_backward,
    .first_backward = loom_gpt_family_first_backward,
    .boundary = loom_gpt_family_boundary,
    .flops_per_sample = loom_gpt_family_flops_per_sample,
    .step_end = loom_gpt_moe_step_end,
    .decode_config = gpt_decode_config,
    .decoder_create = gpt_decoder_create,
    .decoder_step = gpt_decoder_step,
    .decoder_free = gpt_decoder_free,
};
