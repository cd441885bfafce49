/* Private to src/models: the activation layout of a GPT micro-batch and table helpers. */
#ifndef LOOM_GPT_INTERNAL_H
#define LOOM_GPT_INTERNAL_H

#include <math.h>

#include "loom/gpt.h"
#include "loom/rng.h"

/* Saved activations of one decoder layer for one micro-batch (N = B*T rows). */
struct loom_gpt_layer_acts {
    float *x;                 /* [N,C] layer input (residual stream) */
    void *ln1;                /* residual rows (the sequence shard under SP), of ln_dtype */
    float *ln1_mean, *ln1_rstd;
    void *ln1_full;           /* [N,C] ln1 gathered over the sequence (= ln1 without SP) */
    void *qkv;                /* [N, (NHl + 2 NKVl) HS], after rotary, of the attention's type */
    /* qk_layernorm: the query then the key head vectors before their norm, [(NHl + NKVl) N, HS]
     * of the attention's type (rows: the N x NHl query heads in qkv's order, then the N x NKVl
     * keys: head_norm_forward's keep), and their statistics [(NHl + NKVl) N] fp32 (mean with
     * LayerNorm only); NULL without it */
    void *qk_in;
    float *qk_mean, *qk_rstd;
    void *att;                /* [N, NHl HS], of the attention's type */
    float *lse;               /* [B, NHl, T] */
    float *xmid;              /* [N,C] residual after attention */
    void *ln2;
    float *ln2_mean, *ln2_rstd;
    void *ln2_full;
    void *fc1;                /* [N, F1l] (GELU: the pre-activation), of the MLP's type */
    void *act;                /* [N, Fl] the MLP's activation, of its type: the layer's own
                                 (kept for the backward) or the slot's shared one (remade) */
};

struct loom_gpt_acts {
    struct loom_gpt_layer_acts *layers; /* [L]; only local layers are allocated */
    float *x_out;             /* [N,C] output of the last local layer (input of the head) */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *lnf_full;
    /* the head under tensor parallelism (vocabulary shards) */
    float *logits;            /* [N, Vl] */
    float *stats;             /* [N,3] device */
    float *gstats;            /* [N,2] device */
    float *dloss;             /* [N] device */
    /* the head without it (the fused, chunked output layer and loss) */
    float *losses;            /* [N] device: loss of each row */
    float *dlnf;              /* [N,C] d(loss)/d(lnf), made by the head forward when training */
    int dlnf_ready;           /* dlnf holds this micro-batch's gradient, not yet consumed */
    float *xent_chunk;        /* acts[0] only: one chunk's logits, xent_bytes of them */
    int64_t xent_bytes;       /* acts[0] only: room for [xent_chunk_rows, Vl] of the logits'
                                 type when the model was made (linear_xent_dtype) */
    int32_t *tokens, *targets; /* [N] device */
    int32_t *token_types;     /* [N] device (the encoder form's token types) */
    /* the encoder's padding mask (loom_gpt_micro_begin): each query's end of keys, in doc_start's
     * place (an encoder has no document mask); NULL otherwise */
    const int32_t *key_end;
    /* documents (loom_gpt_micro_begin): the start of each token's document and its position
     * in it, [N] device each; the pieces read them through doc_mask and doc_pos, which are NULL
     * when attention is not masked or positions do not restart (then they are unused) */
    int32_t *doc_start, *doc_positions;
    const int32_t *doc_mask, *doc_pos;
    int32_t *host_docs;       /* [2N] host scratch */
    float *host_stats;        /* [N,3] host scratch */
    float *host_g;            /* [N,2] host scratch */
    float *host_dloss;        /* [N] host */
    float *host_losses;       /* [N] host copy of losses */
    int32_t *host_targets;    /* [N] host copy of the targets */
    /* backward scratch */
    float *dres;              /* [N,C] gradient of the residual stream */
    void *dres16;             /* dres in the 16-bit activation type, made by the norm backward
                                 that last wrote dres for the product that reads it next (in dc;
                                 NULL when not made), with that product's bias gradient */
    float *dc;                /* [N,C] */
    float *full;              /* [N,C] a full-sequence buffer for region transitions */
    float *sp_scratch;        /* [N,C] the sequence-parallel collectives' scratch */
    float *dwide;             /* [N, max(QKVl, F1l)]: dqkv, or the MLP's dpre (act_elem bytes an
                                 element) */
    void *act;                /* [N, Fl] the MLP's activation of the layers that remake it in the
                                 backward: shared by them and the slots */
    float *dwide2;            /* [N, max(NHl HS, Fl)]: d(att), or SwiGLU's d(act) (act_elem bytes
                                 an element) */
    size_t act_elem;          /* bytes an element the typed activations got (gpt.c act_dtype) */
    void *mem;                /* the one allocation everything above lives in */
};

enum loom_status loom_gpt_build_table(struct loom_gpt *m);

/* qk_layernorm's forward, in place on qkv [N, (NHl + 2 NKVl) HS] of type dt (Megatron's grouped
 * rows): layer l's query and key head vectors normalised with the layer's q and k norms
 * (head_norm_forward), their inputs kept in keep (type dt, [(NHl + NKVl) N, HS]: the queries then
 * the keys; NULL: not kept) and their statistics in mean (LayerNorm only) and rstd
 * [(NHl + NKVl) N] (each NULL: not kept). */
void loom_gpt_qk_norm_forward(struct loom_gpt *m, int64_t l, void *qkv, enum loom_dtype dt,
                              void *keep, float *mean, float *rstd, int64_t N, int64_t NHl,
                              int64_t NKVl);
int loom_gpt_layer_is_local(const struct loom_transformer_config *c, const struct loom_parallel *par,
                            int64_t layer);

/* Dropout stream key for (iteration, layer, site). */
static inline uint64_t loom_gpt_dropout_key(int64_t iteration, int64_t layer, int site) {
    return loom_hash_mix(loom_hash_mix(loom_hash_mix(0x64726f70ull, (uint64_t)iteration),
                                       (uint64_t)(layer + 1)),
                         (uint64_t)site);
}
enum { LOOM_DROP_EMBED = 1, LOOM_DROP_ATTN_PROBS, LOOM_DROP_ATTN_OUT, LOOM_DROP_MLP_OUT };

/* The stack's ends, for the heads of a family built on it (the encoder form's, src/models/bert):
 * final_norm_forward: lnf = the final norm of the last layer's output x_out (residual rows);
 * gather_sequence: full [B*T, C] from the residual rows (the sequence shards gathered under
 *   sequence parallelism; a copy otherwise);
 * sequence_shard: the residual rows of this rank out of full rows (the inverse selection);
 * final_norm_backward: the residual gradient dres from d(lnf) (residual rows), where the last
 *   layer's backward takes it. */
void loom_gpt_final_norm_forward(struct loom_gpt *m, int slot);
enum loom_status loom_gpt_gather_sequence(struct loom_gpt *m, float *full, const float *shard);
void loom_gpt_sequence_shard(struct loom_gpt *m, float *shard, const float *full);
void loom_gpt_final_norm_backward(struct loom_gpt *m, int slot, const float *dlnf);

/* The MoE layers (gpt_moe.c): made after the parameters' pointers, freed with the model */
enum loom_status loom_gpt_moe_create(struct loom_gpt *m);
void loom_gpt_moe_free(struct loom_gpt *m);
/* whether layer l's MLP is an MoE layer */
int loom_gpt_moe_layer(const struct loom_gpt *m, int64_t l);
/* layer l's MoE MLP: y [N, C] (assigned) of its norm's output x [N, C]; training: its statistics
 * counted for the step */
enum loom_status loom_gpt_moe_forward(struct loom_gpt *m, int slot, int64_t l, float *y,
                                      const float *x, int training);
/* dx [N, C] (assigned) from dy; the balancing and z-losses weighted by scale */
enum loom_status loom_gpt_moe_backward(struct loom_gpt *m, int slot, int64_t l, float *dx,
                                       const float *dy, const float *x, double scale);
enum loom_status loom_gpt_moe_step_end(struct loom_model *m, int report,
                                       struct loom_step_report *r);

/* The GPT family's operations, which the families built on the same stack share */
enum loom_status loom_gpt_family_create(struct loom_model **out, const void *config,
                                        struct loom_parallel *par, struct loom_backend *be,
                                        int64_t B, int nslots);
void loom_gpt_family_free(struct loom_model *m);
enum loom_status loom_gpt_family_init_weights(struct loom_model *m, uint64_t seed);
void loom_gpt_family_chunk_layers(const struct loom_model *m, int stage, int chunk, int64_t *l0,
                                  int64_t *l1);
void loom_gpt_family_prepare(struct loom_model *m);
enum loom_status loom_gpt_family_micro_begin(struct loom_model *m, int slot,
                                             const struct loom_micro *mb,
                                             const struct loom_step_ctx *ctx);
enum loom_status loom_gpt_family_first_forward(struct loom_model *m, int slot,
                                               const struct loom_micro *mb,
                                               const struct loom_step_ctx *ctx);
enum loom_status loom_gpt_family_layer_forward(struct loom_model *m, int slot, int64_t l,
                                               const struct loom_step_ctx *ctx);
enum loom_status loom_gpt_family_layer_backward(struct loom_model *m, int slot, int64_t l,
                                                const struct loom_step_ctx *ctx);
enum loom_status loom_gpt_family_first_backward(struct loom_model *m, int slot,
                                                const struct loom_step_ctx *ctx);
int loom_gpt_family_boundary(struct loom_model *m, int slot, int64_t l,
                             enum loom_boundary_side side, struct loom_stage_tensor *t);
double loom_gpt_family_flops_per_sample(const struct loom_model *m);

#endif
