/* The GPT family: GPT-2 and Llama-style decoders (Qwen2/3 forms too). Its configuration, model
 * and pieces; the rest of loom reaches it through struct loom_family (loom/model.h, the family
 * `loom_gpt_family`), tests and the family's own tools through this header.
 */
#ifndef LOOM_GPT_H
#define LOOM_GPT_H

#include <stdint.h>

#include "loom/model.h"

enum loom_norm { LOOM_NORM_LAYERNORM = 0, LOOM_NORM_RMSNORM };
enum loom_posemb { LOOM_POSEMB_LEARNED = 0, LOOM_POSEMB_ROPE, LOOM_POSEMB_NONE };

struct loom_gpt_config {
    int64_t num_layers;      /* L */
    int64_t hidden;          /* C */
    int64_t heads;           /* NH */
    /* HS, the size of each query/key/value head (Megatron-LM's --kv-channels); 0 = hidden / heads.
     * The qkv projection is (NH + 2 NKV) HS wide and the output projection takes NH HS inputs,
     * which need not equal C. */
    int64_t head_size;
    int64_t query_groups;    /* NKV (= NH without grouped-query attention) */
    int64_t ffn_hidden;      /* F */
    int64_t seq_length;      /* T */
    int64_t max_positions;   /* rows of the learned position table */
    int64_t vocab_size;      /* real vocabulary */
    int64_t padded_vocab;    /* vocab_size rounded up to divisible_by * TP */
    int64_t divisible_by;    /* --make-vocab-size-divisible-by */
    enum loom_norm norm;
    double norm_eps;
    /* Megatron-LM's --apply-layernorm-1p (zero-centred gamma): each norm's weight parameter w is
     * initialised to 0 and the norm scales by 1 + w */
    int layernorm_1p;
    /* Megatron-LM's --qk-layernorm (Qwen3's q_norm, k_norm): each head's query and key vectors
     * normalised over the head size by the model's norm (its epsilon, layernorm_1p's weights),
     * with one weight (and LayerNorm bias) of HS for the queries and one for the keys per layer,
     * shared by the heads; after the qkv product, before the rotary embedding */
    int qk_layernorm;
    int swiglu;
    enum loom_gelu gelu; /* the GELU MLP's form (not used with swiglu) */
    enum loom_posemb posemb;
    double rope_theta;
    /* Megatron-LM's --rotary-percent: the share of each head's values that rotate (the first
     * HS * rotary_percent of them, an even count; 1 = all) */
    double rotary_percent;
    /* Llama 3.1's rescaling of the rotary frequencies (loom/rope.h): rope_factor 0 = none;
     * Megatron-LM's --use-rope-scaling takes --rope-scaling-factor (8) with low 1, high 4 and an
     * original context of 8192, Hugging Face's rope_scaling gives all four */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_positions;
    /* Megatron-LM's --rotary-seq-len-interpolation-factor: rotary positions divided by it (every
     * frequency, after the scaling above); 0 = none */
    double rope_interpolation;
    int bias;                /* biases on linear layers */
    int qkv_bias;            /* the qkv product's bias even without the others (--add-qkv-bias,
                                Qwen2's attention) */
    int xavier_init;         /* matrices drawn uniform in +-sqrt(6 / (rows + columns)) instead of
                                normal (--init-method-xavier-uniform; initialisation only) */
    int untie;               /* separate output layer */
    /* The encoder form (the BERT family; 0 for GPT's decoders). The transformer stack is the
     * same code; these change what is around it and how attention sees the keys:
     * encoder: bidirectional self-attention with the micro-batch's padding mask (a query sees
     *   the keys of its sample's real tokens) instead of the causal mask; layer names
     *   encoder.layers.{i}.*, encoder.final_layernorm.*;
     * num_tokentypes: rows of embedding.tokentype_embeddings.weight added to the word and
     *   position embeddings (BERT: 2; 0: none);
     * lm_head_transform: lm_head.dense (H -> H, bias), a GELU of form head_gelu and
     *   lm_head.layer_norm between the final norm and the output layer;
     * output_bias: output_layer.bias [padded vocabulary] added to the logits;
     * binary_head: pooler.dense (tanh of it at the first position of the final norm's output)
     *   and binary_head [2, H], the sentence-order loss (BERT without --bert-no-binary-head). */
    int encoder;
    int64_t num_tokentypes;
    int lm_head_transform, output_bias, binary_head;
    enum loom_gelu head_gelu;
    double hidden_dropout, attention_dropout;
    double init_std;
    /* Flags that give settings above without being one of their own (rows of GPT's settings
     * table, src/models/gpt/gpt_settings.c, whose from_flags hook turns them into the settings):
     * what `loom train` was given; not kept in checkpoints. */
    struct loom_gpt_flag_inputs {
        int gqa;                    /* --group-query-attention (query_groups counts only with it) */
        int64_t encoder_seq;        /* --encoder-seq-length (0: not given) */
        int use_rope, no_posemb;    /* --use-rotary-position-embeddings, --no-position-embedding */
        int openai_gelu, no_gelu_fusion; /* the GELU's form by Megatron-LM's rule */
        int rope_scaling;           /* --use-rope-scaling */
        double rope_scaling_factor; /* --rope-scaling-factor */
    } in;
    /* memory, not architecture: local layers (the last ones of the stage) that keep the MLP's
     * activation for the backward instead of remaking it from the pre-activation
     * (--kept-activation-layers; 0: remade in every layer) */
    int64_t kept_act_layers;
    /* layout, not architecture: the layers of the first and of the last pipeline stage
     * (Megatron-LM's --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers),
     * the other stages sharing the rest equally; 0: an equal share */
    int64_t first_stage_layers, last_stage_layers;
};

/* Fill GPT-2-like defaults (12 layers, 768 hidden, ...): the settings table's defaults
 * (src/models/gpt/gpt_settings.c) and a vocabulary of 50257. */
void loom_gpt_config_default(struct loom_gpt_config *c);
/* Check the configuration against itself and the layout; derive padded_vocab. Errors name the
 * flag and what is valid (LOOM_ERR_INVALID_ARG). */
enum loom_status loom_gpt_config_finalize(struct loom_gpt_config *c, int tp, int pp);
/* Head size HS: head_size, or hidden / heads when it is 0. */
static inline int64_t loom_gpt_head_size(const struct loom_gpt_config *c) {
    return c->head_size > 0 ? c->head_size : c->hidden / c->heads;
}
/* The rotary embedding's settings for the rope op (loom/rope.h): rotated values HS *
 * rotary_percent (rounded down, as Megatron-LM's int()) */
static inline struct loom_rope loom_gpt_rope(const struct loom_gpt_config *c) {
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
static inline void loom_gpt_qkv_row(const struct loom_gpt_config *c, int64_t r, int *part,
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
void loom_gpt_chunk_layers(const struct loom_gpt_config *c, int pp, int vpp, int stage, int chunk,
                           int64_t *l0, int64_t *l1);
/* The pipeline stage that holds layer l */
int loom_gpt_layer_stage(const struct loom_gpt_config *c, int pp, int vpp, int64_t l);
/* Parameter count N (tied embedding counted once, padded vocabulary rows included). */
int64_t loom_gpt_num_params(const struct loom_gpt_config *c);

struct loom_gpt_layer_ptrs {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    float *q_ln_w, *q_ln_b, *k_ln_w, *k_ln_b; /* qk_layernorm only */
};
struct loom_gpt_ptrs {
    float *wte, *wpe, *lnf_w, *lnf_b, *out_w;
    /* the encoder form's (NULL otherwise): token types, the LM head's transform, the output
     * bias, the pooler and the sentence-order head */
    float *tte, *lmh_w, *lmh_b, *lmh_ln_w, *lmh_ln_b, *out_b, *pool_w, *pool_b, *bin_w, *bin_b;
    struct loom_gpt_layer_ptrs *layers; /* [L], NULL entries for layers this rank lacks */
};

struct loom_gpt_acts; /* private: activation and scratch buffers for one micro-batch */

struct loom_gpt {
    struct loom_model base; /* first: a struct loom_model * of the family is a struct loom_gpt * */
    struct loom_gpt_config cfg;
    struct loom_gpt_ptrs w, g;
    /* the norms' weights as the norms use them: w's, or with layernorm_1p 1 + w's, remade in
     * norm_eff (device) by loom_gpt_norm_weights; only the ln*_w, q_ln_w and k_ln_w entries are
     * set */
    struct loom_gpt_ptrs wn;
    float *norm_eff;
    int64_t layer_begin, layer_end; /* decoder layers held by this rank */
    struct loom_gpt_acts *acts; /* [nslots] */
    /* state of the heads of a family built on this stack (the encoder form's), freed with it */
    void *heads;
    void (*heads_free)(struct loom_gpt *m);
};

/* Build the table and allocate parameters, gradients and activations for micro-batch B, with
 * room for `nslots` micro-batches in flight (1 without pipeline parallelism). */
enum loom_status loom_gpt_create(struct loom_gpt **out, const struct loom_gpt_config *cfg,
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
