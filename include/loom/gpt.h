/* The GPT family: GPT-2 and Llama-style decoders (Qwen2/3 forms too). Its configuration, model
 * and pieces; the rest of loom reaches it through struct loom_family (loom/model.h, the family
 * `loom_gpt_family`), tests and the family's own tools through this header.
 */
#ifndef LOOM_GPT_H
#define LOOM_GPT_H

#include <stdint.h>

#include "loom/model.h"
#include "loom/transformer.h"

/* Fill GPT-2-like defaults (12 layers, 768 hidden, ...): the settings table's defaults
 * (src/models/gpt/gpt_settings.c) and a vocabulary of 50257. */
void loom_gpt_config_default(struct loom_transformer_config *c);
/* Check the configuration against itself and the layout; derive padded_vocab. Errors name the
 * flag and what is valid (LOOM_ERR_INVALID_ARG). */
enum loom_status loom_gpt_config_finalize(struct loom_transformer_config *c, int tp, int pp);
/* Head size HS: head_size, or hidden / heads when it is 0 (loom_transformer_head_size). */
static inline int64_t loom_gpt_head_size(const struct loom_transformer_config *c) {
    return loom_transformer_head_size(c);
}
/* The rotary embedding's settings for the rope op (loom/rope.h): rotated values HS *
 * rotary_percent (rounded down, as Megatron-LM's int()) */
static inline struct loom_rope loom_gpt_rope(const struct loom_transformer_config *c) {
    struct loom_rope r = {c->rope_theta,
                          (int64_t)((double)loom_gpt_head_size(c) * c->rotary_percent),
                          c->rope_factor,
                          c->rope_low_freq_factor,
                          c->rope_high_freq_factor,
                          c->rope_original_max_positions,
                          c->rope_interpolation};
    return r;
}
/* Row r of the qkv projection (self_attention.linear_qkv, Megatron's order: for each key/value
 * group its query heads, then its key head, then its value head, HS rows each) as
 * (*part 0 query / 1 key / 2 value, *head: the query head, or the group for a key or value, *d:
 * the row within the head) */
static inline void loom_gpt_qkv_row(const struct loom_transformer_config *c, int64_t r, int *part,
                                    int64_t *head, int64_t *d) {
    const int64_t HS = loom_gpt_head_size(c), R = c->heads / c->query_groups;
    const int64_t g = r / ((R + 2) * HS), slot = r % ((R + 2) * HS) / HS;
    *d = r % HS;
    if (slot < R) {
        *part = 0;
        *head = g * R + slot;
    } else {
        *part = slot == R ? 1 : 2;
        *head = g;
    }
}
/* The layers [*l0, *l1) of pipeline stage `stage`'s virtual chunk `chunk` (pp stages of vpp
 * chunks; an equal share each, or the first and last stages' own counts without chunks) */
void loom_gpt_chunk_layers(const struct loom_transformer_config *c, int pp, int vpp, int stage, int chunk,
                           int64_t *l0, int64_t *l1);
/* The pipeline stage that holds layer l */
int loom_gpt_layer_stage(const struct loom_transformer_config *c, int pp, int vpp, int64_t l);
/* Parameter count N (tied embedding counted once, padded vocabulary rows included). */
int64_t loom_gpt_num_params(const struct loom_transformer_config *c);
/* The same count in double precision (never overflows: the bound check of finalize) */
double loom_gpt_num_params_approx(const struct loom_transformer_config *c);
/* The parameters a token's forward uses (with MoE layers: the router, its k experts and the
 * shared experts of each; otherwise loom_gpt_num_params): FLOPs are counted on these */
double loom_gpt_num_active_params(const struct loom_transformer_config *c);
/* Bounds finalize puts on the configuration: layers, each other size, the parameter count */
#define LOOM_GPT_MAX_LAYERS ((int64_t)1 << 16)
#define LOOM_GPT_MAX_DIM ((int64_t)1 << 31)
#define LOOM_GPT_MAX_PARAMS 1e12

struct loom_gpt_layer_ptrs {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    float *q_ln_w, *q_ln_b, *k_ln_w, *k_ln_b; /* qk_layernorm only */
    /* an MoE layer's router, expert bias, shared experts and their gate (the experts' own
     * pointers are the MoE layer's, struct loom_moe_layer) */
    float *router_w, *expert_bias, *sh_fc1_w, *sh_fc1_b, *sh_fc2_w, *sh_fc2_b, *sh_gate_w;
    /* the field the experts' own table entries name; each expert's pointers are the MoE
     * layer's (gpt_moe.c finds them by name), so what is left here is unused */
    float *experts;
};
struct loom_gpt_ptrs {
    float *wte, *wpe, *lnf_w, *lnf_b, *out_w;
    /* the encoder form's (NULL otherwise): token types, the LM head's transform, the output
     * bias, the pooler and the sentence-order head */
    float *tte, *lmh_w, *lmh_b, *lmh_ln_w, *lmh_ln_b, *out_b, *pool_w, *pool_b, *bin_w, *bin_b;
    struct loom_gpt_layer_ptrs *layers; /* [L], NULL entries for layers this rank lacks */
};

struct loom_gpt_acts; /* private: activation and scratch buffers for one micro-batch */
struct loom_gpt_moe;  /* private: the MoE layers (src/models/gpt/gpt_moe.c) */

struct loom_gpt {
    struct loom_model base; /* first: a struct loom_model * of the family is a struct loom_gpt * */
    struct loom_transformer_config cfg;
    struct loom_gpt_ptrs w, g;
    /* the norms' weights as the norms use them: w's, or with layernorm_1p 1 + w's, remade in
     * norm_eff (device) by loom_gpt_norm_weights; only the ln*_w, q_ln_w and k_ln_w entries are
     * set */
    struct loom_gpt_ptrs wn;
    float *norm_eff;
    int64_t layer_begin, layer_end; /* decoder layers held by this rank */
    struct loom_gpt_acts *acts; /* [nslots] */
    struct loom_gpt_moe *moe;   /* the MoE layers' state (NULL without --num-experts) */
    /* state of the heads of a family built on this stack (the encoder form's), freed with it */
    void *heads;
    void (*heads_free)(struct loom_gpt *m);
};

/* Build the table and allocate parameters, gradients and activations for micro-batch B, with
 * room for `nslots` micro-batches in flight (1 without pipeline parallelism). */
enum loom_status loom_gpt_create(struct loom_gpt **out, const struct loom_transformer_config *cfg,
                                 struct loom_parallel *par, struct loom_backend *be, int64_t B,
                                 int nslots);
void loom_gpt_free(struct loom_gpt *m);
/* Initialise every parameter from the counter-based RNG keyed by (seed, name, global index). */
enum loom_status loom_gpt_init_weights(struct loom_gpt *m, uint64_t seed);
/* The family's operations (loom/model.h); a struct loom_model of the family is a struct loom_gpt */
extern const struct loom_family loom_gpt_family;
static inline struct loom_gpt *loom_gpt_of(struct loom_model *m) { return (struct loom_gpt *)m; }

/* Stage pieces, for pipeline schedules. A micro-batch's activations live in `slot`.
 * embed: tokens -> input of the first layer (first stage only).
 * layer l: its input buffer (loom_gpt_layer_input) -> its output (loom_gpt_layer_output). When
 *   layer l + 1 is on this rank, layer l also computes its first norm (fused with the residual
 *   add), so the local layers of a micro-batch run forward in order, l + 1 after l.
 * head: output of the last layer -> per-token losses (last stage only).
 * Backward runs in reverse on the shared residual-gradient buffer (loom_gpt_dres): head_backward
 * sets it to d(loss)/d(output of the last layer); layer_backward(l) turns d(output of l) into
 * d(input of l); embed_backward consumes it. */
enum loom_status loom_gpt_embed_forward(struct loom_gpt *m, int slot, const int32_t *tokens,
                                        const struct loom_step_ctx *ctx);
/* What a micro-batch needs before its first forward piece on this rank; every stage calls it:
 * the documents of the micro-batch in `slot`, from its input tokens [B*T] (host), for every
 * piece that runs on the slot until the next call (embedding, rotary embeddings and attention of
 * every stage, forward and backward): with ctx's reset_position_ids or reset_attention_mask, the
 * start of each token's document, from which its position (t - start) and the attention mask
 * (keys from the start on) follow; without them nothing (positions t, causal attention). */
enum loom_status loom_gpt_micro_begin(struct loom_gpt *m, int slot, const struct loom_micro *mb,
                                      const struct loom_step_ctx *ctx);
/* With layernorm_1p, the norms' weights 1 + w (m->wn) from the parameters as they are now: before
 * the model runs on parameters that changed (the pipeline's run of a batch, loom_gpt_forward,
 * decoding). */
void loom_gpt_norm_weights(struct loom_gpt *m);
enum loom_status loom_gpt_layer_forward(struct loom_gpt *m, int slot, int64_t l,
                                        const struct loom_step_ctx *ctx);
enum loom_status loom_gpt_head_forward(struct loom_gpt *m, int slot, const int32_t *targets,
                                       const struct loom_step_ctx *ctx, double *loss_sum,
                                       int64_t *count);
enum loom_status loom_gpt_head_backward(struct loom_gpt *m, int slot, const struct loom_step_ctx *ctx);
enum loom_status loom_gpt_layer_backward(struct loom_gpt *m, int slot, int64_t l,
                                         const struct loom_step_ctx *ctx);
enum loom_status loom_gpt_embed_backward(struct loom_gpt *m, int slot, const struct loom_step_ctx *ctx);
float *loom_gpt_layer_input(struct loom_gpt *m, int slot, int64_t l);
float *loom_gpt_layer_output(struct loom_gpt *m, int slot, int64_t l);
float *loom_gpt_dres(struct loom_gpt *m);
/* Rows of the residual stream a stage holds for one micro-batch (B*T, or B*T/TP under sequence
 * parallelism): the size, times hidden, of what travels between pipeline stages. */
int64_t loom_gpt_residual_rows(const struct loom_gpt *m);

/* Forward over the whole micro-batch (tokens/targets [B,T] on the host): returns the sum of the
 * per-token losses over non-ignored targets in *loss_sum (and their count in *count). */
enum loom_status loom_gpt_forward(struct loom_gpt *m, const int32_t *tokens,
                                  const int32_t *targets, const struct loom_step_ctx *ctx,
                                  double *loss_sum, int64_t *count);
/* Backward of the last forward; gradients accumulate into m->grad_mem. */
enum loom_status loom_gpt_backward(struct loom_gpt *m, const struct loom_step_ctx *ctx);
/* Incremental decoding for generation (one rank): each step feeds one token at the next position,
 * appends its keys and values to a per-layer cache and returns the next-token logits, so a new
 * token costs one position's work. */
struct loom_gpt_decoder;
enum loom_status loom_gpt_decoder_create(struct loom_gpt_decoder **out, struct loom_gpt *m,
                                         int64_t max_len);
void loom_gpt_decoder_free(struct loom_gpt_decoder *d);
/* Feed `token` at the next position; logits[vocab_size] (host) for the position after it. */
enum loom_status loom_gpt_decoder_step(struct loom_gpt_decoder *d, int32_t token, float *logits);
int64_t loom_gpt_decoder_position(const struct loom_gpt_decoder *d);

#endif
