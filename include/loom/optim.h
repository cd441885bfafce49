/* Optimizer: AdamW over the parameter table, learning-rate schedule, global-norm clipping. */
#ifndef LOOM_OPTIM_H
#define LOOM_OPTIM_H

#include <stdint.h>

#include "loom/model.h"

enum loom_lr_decay {
    LOOM_LR_CONSTANT = 0,
    LOOM_LR_LINEAR,
    LOOM_LR_COSINE,
    LOOM_LR_INVERSE_SQRT,
    LOOM_LR_WSD /* warmup, stable, decay: max_lr until the last wsd_decay_steps of the decay */
};
/* the shape of WSD's final decay */
enum loom_lr_wsd {
    LOOM_WSD_EXPONENTIAL = 0,
    LOOM_WSD_LINEAR,
    LOOM_WSD_COSINE,
    LOOM_WSD_MINUS_SQRT
};

/* The schedule counts samples: each optimizer step advances it by the global batch, whether
 * training is counted in iterations or in samples (--train-samples), as Megatron's
 * OptimizerParamScheduler. */
struct loom_lr_schedule {
    double max_lr, min_lr;
    double init_lr;      /* where the warmup starts (--lr-warmup-init) */
    double warmup_steps; /* fractional with --lr-warmup-fraction */
    int64_t decay_steps;
    enum loom_lr_decay style;
    int64_t wsd_decay_steps; /* LOOM_LR_WSD */
    enum loom_lr_wsd wsd_style;
    /* Megatron-LM's --decoupled-lr and --decoupled-min-lr: the word embedding's and the output
     * layer's own peak and final rates on the same warmup and decay (decoupled_max_lr < 0: none) */
    double decoupled_max_lr, decoupled_min_lr;
};

/* Learning rate after `steps_done` steps, as Megatron's scheduler: the linear warmup
 * init_lr + (max_lr - init_lr) * steps / warmup for steps <= warmup; then constant max_lr; else
 * min_lr after decay_steps; before, inverse-square-root max_lr * sqrt(max(warmup, 1) /
 * max(steps, 1)) (at least min_lr), or min_lr + coeff (max_lr - min_lr) with coeff the linear or
 * cosine decay over [warmup, decay_steps], or for WSD 1 until decay_steps - wsd_decay_steps and
 * then the WSD shape of r = (steps - that start) / wsd_decay_steps: 2 * 0.5^r - 1, 1 - r,
 * (cos(pi r) + 1) / 2 or 1 - sqrt(r). */
double loom_lr_at(const struct loom_lr_schedule *s, int64_t steps_done);
/* The same for the word embedding and the output layer: their decoupled rates when there are, else
 * loom_lr_at's. */
double loom_lr_decoupled_at(const struct loom_lr_schedule *s, int64_t steps_done);
/* Weight decay over training (Megatron's get_wd): start_wd + coeff (end_wd - start_wd) with
 * r = steps / incr_steps and coeff = r (linear) or (cos(pi (1 - r)) + 1) / 2 (cosine); end_wd
 * when constant and after incr_steps. */
enum loom_wd_incr { LOOM_WD_CONSTANT = 0, LOOM_WD_LINEAR, LOOM_WD_COSINE };
struct loom_wd_schedule {
    double start_wd, end_wd;
    int64_t incr_steps;
    enum loom_wd_incr style;
};
double loom_wd_at(const struct loom_wd_schedule *s, int64_t steps_done);
/* The global batch ramp-up (--rampup-batch-size START INCREMENT SAMPLES; Megatron's batch-size
 * ramp-up calculator): with n = (final_batch - start) / increment ramp steps of SAMPLES / n
 * samples each, the batch after `consumed` samples is start + increment * floor(consumed /
 * (SAMPLES / n)), and final_batch once more than SAMPLES are consumed (or when n = 0). start = 0:
 * no ramp, final_batch throughout. */
struct loom_batch_ramp {
    int64_t start, increment, samples;
    int64_t final_batch;
};
int64_t loom_batch_at(const struct loom_batch_ramp *r, int64_t consumed);
/* Iterations of a training of train_samples samples, as Megatron counts them: the ramp's (until
 * more than SAMPLES are consumed) and then as many whole final batches as the rest holds.
 * *consumed_end gets what they consume. 0 when the ramp alone needs more than train_samples. */
int64_t loom_batch_ramp_iters(const struct loom_batch_ramp *r, int64_t train_samples,
                              int64_t *consumed_end);
/* A style's name as its flag spells it (--lr-decay-style, --lr-wsd-decay-style,
 * --weight-decay-incr-style), and back (-1: not a style; NULL names none). */
const char *loom_lr_style_name(enum loom_lr_decay style);
int loom_lr_style_parse(const char *name);
const char *loom_wsd_style_name(enum loom_lr_wsd style);
int loom_wsd_style_parse(const char *name);
const char *loom_wd_style_name(enum loom_wd_incr style);
int loom_wd_style_parse(const char *name);

struct loom_grad_sync;
struct loom_adamw {
    double beta1, beta2, eps, weight_decay;
    int64_t step;  /* completed optimizer steps */
    /* device: the moments of the parameters this rank updates, packed: all the local ones
     * (shard_len num_local, in the flat buffers' layout), or with the distributed optimizer
     * (Megatron-LM's --use-distributed-optimizer) this data-parallel rank's pieces of the gradient
     * buckets (loom_grad_sync_shard), one after the other: each rank updates its pieces, then
     * every rank's are gathered to all */
    float *m, *v;
    int64_t shard_len;
    int distributed;               /* the pieces above are split over the data-parallel group */
    struct loom_grad_sync *shards; /* distributed: the buckets, their reduction and gathering */
    int overlap_gather;            /* distributed: the step starts the gather (the next forward
                                      waits for each bucket where it reads it) */
    /* the ranges of the flat buffers one step updates (host; made by loom_adamw_init from the
     * parameter table): runs of neighbouring parameters with the same weight decay within a
     * piece, at run_off of the parameters and run_soff of the moments; the first nruns_main at
     * the learning rate, the others (the word embedding and the output layer, when they have a
     * decoupled one) at theirs */
    int64_t *run_off, *run_soff, *run_len;
    uint8_t *run_decay;
    int nruns, nruns_main;
    /* --optimizer onebit-adam (loom/onebit.h; loom_onebit_adam_init): the step is 1-bit Adam's,
     * whose steps after freeze_step take the ranks' own gradients (loom_adamw_local_grads) */
    struct loom_onebit_adam *onebit;
    int64_t freeze_step;
};
/* 1-bit Adam instead of AdamW from the next step on (after loom_adamw_init; every local
 * parameter: not with the distributed optimizer). */
enum loom_status loom_onebit_adam_init(struct loom_adamw *o, struct loom_model *model,
                                       int64_t freeze_step);
/* Whether the coming step takes each data-parallel rank's own gradients, unreduced (1-bit Adam
 * after its warmup). */
int loom_adamw_local_grads(const struct loom_adamw *o);

/* shards: the data-parallel gradient reduction; when it reduce-scatters (the distributed
 * optimizer) the moments and the update are this rank's pieces of its buckets, else (or NULL)
 * every local parameter's. decoupled: the word embedding and the output layer take their own
 * learning rate (loom_adamw_step's lr_decoupled). */
enum loom_status loom_adamw_init(struct loom_adamw *o, struct loom_model *model,
                                 struct loom_grad_sync *shards, int decoupled);
void loom_adamw_free(struct loom_adamw *o, struct loom_model *model);
/* One step on every local parameter; weight decay only on parameters with weight_decay set.
 * grad_scale multiplies the gradients first (clipping). The distributed optimizer updates this
 * rank's pieces from their reduced gradients and gathers the others' (collective over the
 * data-parallel group); the values are those of the whole update, bit for bit. */
enum loom_status loom_adamw_step(struct loom_adamw *o, struct loom_model *model, double lr,
                                 double lr_decoupled, double grad_scale);
/* The moment `which` (0: m, 1: v) over all the local parameters, in the model's layout: o->m or
 * o->v, or with the distributed optimizer every rank's pieces gathered into the model's
 * gradient buffer (which it overwrites: for checkpoints, between steps). Collective then. */
enum loom_status loom_adamw_moment(struct loom_adamw *o, struct loom_model *model, int which,
                                   const float **out);
/* Set the moment `which` from full, laid out as the model's parameters (this rank's pieces of
 * it with the distributed optimizer). */
void loom_adamw_set_moment(struct loom_adamw *o, struct loom_model *model, int which,
                           const float *full);

/* Global L2 norm of a device buffer laid out like the model's parameters (the parameters, the
 * gradients), counting every parameter exactly once across tensor, pipeline and data-parallel
 * ranks (replicated parameters are counted on TP rank 0 only; the last stage's copy of a tied
 * embedding is not counted; data-parallel ranks hold the same values and are not summed).
 * Collective over the TP and PP groups. With zeros set, also the number of elements equal to
 * zero among those counted. */
enum loom_status loom_param_buffer_norm(struct loom_model *model, const float *buf, double *norm,
                                        int64_t *zeros);
/* loom_param_buffer_norm of the (reduced) gradients; zeros (may be NULL): the number of gradient
 * elements equal to zero over the same parameters (--log-num-zeros-in-grad). With the
 * distributed optimizer each rank holds the reduced gradients of its pieces only: it sums
 * those, and the data-parallel group adds the ranks' sums (collective over it too). */
enum loom_status loom_grad_norm(const struct loom_adamw *o, struct loom_model *model, double *norm,
                                int64_t *zeros);
/* Dynamic loss scaling for fp16 (Megatron's DynamicGradScaler rules): the loss is multiplied
 * by `scale` before backward; a step whose gradients hold an inf/nan is skipped, and after
 * `hysteresis` such steps in a row (counted since the last growth) the scale is halved, never
 * below min_scale; after `window` clean steps in a row it doubles. A static scaler (window 0)
 * never changes. */
struct loom_loss_scaler {
    double scale, min_scale;
    int64_t window, hysteresis;
    int64_t growth_tracker, hysteresis_tracker;
};

void loom_loss_scaler_init(struct loom_loss_scaler *s, double initial, double min_scale,
                           int64_t window, int64_t hysteresis);
/* Record the outcome of a step; returns 1 when the step must be skipped (found_inf). */
int loom_loss_scaler_update(struct loom_loss_scaler *s, int found_inf);

#endif
