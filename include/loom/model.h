/* Models: the parameter table, the model object every family shares, and the family interface.
 *
 * A model family (GPT/Llama-style decoders in src/models/gpt/, ...) builds one table of
 * parameters (struct loom_param): name, full logical shape, the dimension tensor parallelism
 * splits, the pipeline unit that owns it, how it is initialised and its roles. The table drives
 * allocation, gradient buffers, initialisation, the optimizer, data-parallel buckets, checkpoints
 * and export. Every consumer outside the family reads the roles; none decides from a name.
 *
 * The pipeline executor, the trainer and the tools reach a model only through struct
 * loom_family's operations (the `family` pointer of struct loom_model): its pipeline pieces
 * (the first stage's embedding, a layer, the last stage's heads and losses, and the backward of
 * each), the tensors that cross a pipeline stage, and its micro-batch, losses and FLOPs.
 */
#ifndef LOOM_MODEL_H
#define LOOM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "loom/backend.h"
#include "loom/parallel.h"
#include "loom/status.h"

enum loom_init { LOOM_INIT_NORMAL = 0, LOOM_INIT_NORMAL_SCALED, LOOM_INIT_ONES, LOOM_INIT_ZEROS };

/* What a parameter is, for the code outside the family (flags of struct loom_param.roles). */
enum loom_param_role {
    /* weight decay applies (the matrices) */
    LOOM_ROLE_DECAY = 1u << 0,
    /* replicated over tensor parallelism, but each rank's gradient is its share only (a norm's
     * weight under sequence parallelism sees the rank's rows; a query-key norm the rank's heads):
     * summed over the tensor-parallel group once its unit's backward is final
     * (loom_model_sync_tp_partial) */
    LOOM_ROLE_TP_PARTIAL = 1u << 1,
    /* trained at --decoupled-lr (Megatron-LM's embedding-or-output parameters: the word
     * embedding and the output layer) */
    LOOM_ROLE_DECOUPLED_LR = 1u << 2,
    /* rows are the padded vocabulary (checkpoints of another padding load its first rows) */
    LOOM_ROLE_VOCAB_ROWS = 1u << 3,
    /* owned by the first stage and also used by the last (a word embedding tied to the output
     * layer): with several stages both hold a copy, their gradients summed over the embedding
     * group; norms count the first stage's copy only */
    LOOM_ROLE_TIED = 1u << 4,
};

/* Pipeline units a parameter can belong to: a layer 0 .. num_layers - 1, or one of these. */
#define LOOM_UNIT_FIRST (-1) /* the first stage's (embeddings) */
#define LOOM_UNIT_LAST (-2)  /* the last stage's (final norm, heads, output layer) */

struct loom_param {
    char name[96];
    int ndim;
    int64_t shape[2];       /* full logical shape */
    int tp_dim;             /* dimension split by tensor parallelism, -1 = replicated */
    int tp_chunks;          /* the split dimension is this many equal blocks, each split (1 usually;
                               2 for SwiGLU's [gate | up] fc1) */
    int layer;              /* the owning unit: a layer, LOOM_UNIT_FIRST or LOOM_UNIT_LAST */
    enum loom_init init;
    unsigned roles;         /* enum loom_param_role flags */
    int local;              /* held by this rank (pipeline stage owns it) */
    int64_t local_shape[2]; /* this rank's slice */
    int64_t offset;         /* in floats, into the flat parameter/gradient buffers (-1 if !local) */
    size_t field;           /* the family's own: where its model keeps its pointer to the
                               parameter (GPT: the offset of the field in struct loom_gpt_ptrs, or
                               for a layer's parameter in struct loom_gpt_layer_ptrs) */
};

/* Map element `i` (row-major) of this rank's slice of `p` to its index in the full logical
 * tensor. */
int64_t loom_param_global_index(const struct loom_param *p, int tp_rank, int tp_size, int64_t i);

/* What a micro-batch step needs besides the micro-batch. */
struct loom_step_ctx {
    uint64_t seed;
    int64_t iteration;  /* 1-based; keys dropout masks */
    int64_t sample0;    /* global index of the micro-batch's first sample within the step */
    int training;       /* 0: no dropout */
    /* d(total loss)/d(one loss term): with per_micro_mean 1 / the step's micro-batches (over all
     * data-parallel ranks), else 1 / the global batch's terms (tokens that carry a loss) */
    float dloss;
    /* 1: the loss is the mean over the step's micro-batches of each one's mean over its terms
     * (Megatron-LM's default with a loss mask): the family's last piece divides dloss by the
     * micro-batch's count */
    int per_micro_mean;
    /* Documents packed into a sample (Megatron-LM's --reset-position-ids and
     * --reset-attention-mask): the token after an input token equal to doc_eod starts a new
     * document. reset_position_ids: positions restart at 0 there; reset_attention_mask: no
     * query attends to a key of an earlier document. */
    int32_t doc_eod;
    int reset_position_ids, reset_attention_mask;
};

/* One micro-batch of B samples of T positions, on the host. Fields a family does not read may be
 * left as they are; every array is allocated by the trainer. */
struct loom_micro {
    int64_t B, T;
    int32_t *tokens;       /* [B*T] input ids */
    int32_t *labels;       /* [B*T] target ids, -1: no loss at the position */
    int32_t *token_types;  /* [B*T] segment ids (BERT: 0 for A, 1 for B) */
    int32_t *padding_mask; /* [B*T] 1: a real position, 0: padding */
    int32_t *sop_labels;   /* [B] sentence-order labels (1: the segments were swapped) */
    int64_t sample0;       /* global index of its first sample (dropout keys) */
};

/* The losses of a family, by name (the log line, the metrics file and TensorBoard report them
 * under these names): sums of terms and their counts; a loss's value is sum / count. */
#define LOOM_MAX_LOSSES 4
struct loom_losses {
    double sum[LOOM_MAX_LOSSES];
    double count[LOOM_MAX_LOSSES];
};

/* A tensor that crosses a pipeline stage boundary (fp32, device memory). */
struct loom_stage_tensor {
    const char *name;
    float *data;
    int64_t count; /* floats */
};

/* Which side of the boundary before layer l a tensor list is for (loom_family.boundary). */
enum loom_boundary_side {
    LOOM_RECV_ACT = 0,  /* the forward's input of layer l, received from the previous stage */
    LOOM_SEND_ACT,      /* the forward's output of layer l - 1, sent to the next stage */
    LOOM_RECV_GRAD,     /* the gradient of layer l - 1's output, received from the next stage */
    LOOM_SEND_GRAD,     /* the gradient of layer l's input, sent to the previous stage */
};
#define LOOM_MAX_STAGE_TENSORS 4

struct loom_family;

/* The part of a model every family shares; a family's own model struct begins with it. */
struct loom_model {
    const struct loom_family *family;
    const void *config;  /* the family's configuration struct */
    struct loom_parallel *par;
    struct loom_backend *be;
    int nparams;
    struct loom_param *params;
    int64_t num_layers;  /* pipeline units that are layers (the table's layer indices) */
    int64_t vocab_size;  /* real rows of the LOOM_ROLE_VOCAB_ROWS parameters (0: none) */
    int64_t num_local;   /* floats of the parameters in the flat buffers */
    int64_t num_alloc;   /* floats allocated: num_local rounded up to 16 x the data-parallel
                            ranks (equal shards of the distributed optimizer), the rest zero */
    float *param_mem;    /* device: this rank's parameters, fp32 master copy */
    float *grad_mem;     /* device: gradients, same layout */
    int first_stage, last_stage;
    int64_t B;           /* micro-batch size the activations are sized for */
    int nslots;          /* micro-batches whose activations can be held at once (pipeline) */
    /* the run's first piece reads every parameter (the family's `prepare` derives from all of
     * them): an overlapped parameter gather is completed before it */
    int prepare_reads_all;
};

/* A model family's operations. Every piece returns LOOM_OK or an error recorded with loom_fail.
 * A micro-batch's activations live in `slot` (0 .. nslots - 1). */
struct loom_family {
    const char *name;
    /* names of the losses the last piece reports, in the order of struct loom_losses */
    int num_losses;
    const char *loss_names[LOOM_MAX_LOSSES];
    /* 1: the loss is always the mean over the step's micro-batches of each one's own mean
     * (ctx.per_micro_mean; Megatron-LM's BERT); 0: as the flags say (GPT: with a loss mask and
     * without --calculate-per-token-loss) */
    int micro_mean;
    /* bit i set: entry i of the losses is a measure reported beside them (an accuracy), not a
     * loss: not part of the total the model minimises, no perplexity */
    unsigned measures;

    /* the model of `config` (the family's configuration struct, finalized) for this rank of
     * `par`: its table, parameters, gradients and activations for micro-batches of B, with room
     * for `nslots` micro-batches in flight (1 without pipeline parallelism) */
    enum loom_status (*create)(struct loom_model **out, const void *config,
                               struct loom_parallel *par, struct loom_backend *be, int64_t B,
                               int nslots);
    void (*free)(struct loom_model *m);
    /* every parameter from the counter-based RNG keyed by (seed, name, global index) */
    enum loom_status (*init_weights)(struct loom_model *m, uint64_t seed);
    /* the layers [*l0, *l1) of pipeline stage `stage`'s virtual chunk `chunk` */
    void (*chunk_layers)(const struct loom_model *m, int stage, int chunk, int64_t *l0,
                         int64_t *l1);
    /* the parameters changed: whatever the model derives from them is remade (before a run of
     * micro-batches) */
    void (*prepare)(struct loom_model *m);
    /* before the micro-batch's first piece on this rank, every stage */
    enum loom_status (*micro_begin)(struct loom_model *m, int slot, const struct loom_micro *mb,
                                    const struct loom_step_ctx *ctx);
    /* the first stage's piece (embeddings) */
    enum loom_status (*first_forward)(struct loom_model *m, int slot, const struct loom_micro *mb,
                                      const struct loom_step_ctx *ctx);
    enum loom_status (*layer_forward)(struct loom_model *m, int slot, int64_t l,
                                      const struct loom_step_ctx *ctx);
    /* the last stage's piece: heads and losses, added to *losses; when training it also makes
     * the gradient the backward starts from (scaled by ctx->dloss, or per_micro_mean) */
    enum loom_status (*last_forward)(struct loom_model *m, int slot, const struct loom_micro *mb,
                                     const struct loom_step_ctx *ctx, struct loom_losses *losses);
    enum loom_status (*last_backward)(struct loom_model *m, int slot, const struct loom_micro *mb,
                                      const struct loom_step_ctx *ctx);
    enum loom_status (*layer_backward)(struct loom_model *m, int slot, int64_t l,
                                       const struct loom_step_ctx *ctx);
    enum loom_status (*first_backward)(struct loom_model *m, int slot,
                                       const struct loom_step_ctx *ctx);
    /* The tensors crossing the boundary before layer l (l in 1 .. num_layers - 1) on the given
     * side, in an order both sides agree on; returns how many (at most LOOM_MAX_STAGE_TENSORS). */
    int (*boundary)(struct loom_model *m, int slot, int64_t l, enum loom_boundary_side side,
                    struct loom_stage_tensor *t);
    /* model FLOPs of one sample's forward and backward (6 N per token plus attention) */
    double (*flops_per_sample)(const struct loom_model *m);

    /* Text generation, one position at a time with a key/value cache (`loom generate`); NULL
     * for a family that does not generate text. decode_config: a checkpoint's configuration
     * (not yet finalized) made the one to decode with (no dropout, one position per step);
     * *vocab: the real vocabulary, *max_positions: the most positions the model can see (0: no
     * limit). */
    void (*decode_config)(void *config, int64_t *vocab, int64_t *max_positions);
    /* a decoder over model m (created from such a configuration, on one rank) for up to
     * `positions` positions */
    enum loom_status (*decoder_create)(void **dec, struct loom_model *m, int64_t positions);
    /* feed the next token; logits[vocab] of the position after it */
    enum loom_status (*decoder_step)(void *dec, int32_t token, float *logits);
    void (*decoder_free)(void *dec);
};

/* Every local parameter from the counter-based RNG keyed by (seed, name, global index), by its
 * init: LOOM_INIT_NORMAL N(0, std), LOOM_INIT_NORMAL_SCALED N(0, scaled_std), with xavier_init
 * every matrix of those two uniform in +-sqrt(6 / (rows + columns)) instead; ones; zeros. */
enum loom_status loom_model_init_params(struct loom_model *m, uint64_t seed, double std,
                                        double scaled_std, int xavier_init);
/* The family of that name ("gpt"), or NULL. */
const struct loom_family *loom_family_find(const char *name);
/* The parameter of that name, or NULL. */
const struct loom_param *loom_model_find_param(const struct loom_model *m, const char *name);
void loom_model_free(struct loom_model *m);
/* Elements of the whole model (every rank's, a tied parameter once, padded rows included) */
int64_t loom_model_num_params(const struct loom_model *m);
/* Sum over the tensor-parallel group the gradients of unit `unit`'s LOOM_ROLE_TP_PARTIAL
 * parameters (a layer, or LOOM_UNIT_LAST / LOOM_UNIT_FIRST). Once per step, after the unit's
 * last backward. */
enum loom_status loom_model_sync_tp_partial(struct loom_model *m, int64_t unit);
/* The pipeline stage that holds parameter p (the first stage for LOOM_UNIT_FIRST, the last for
 * LOOM_UNIT_LAST). */
int loom_model_param_stage(const struct loom_model *m, const struct loom_param *p);

#endif
