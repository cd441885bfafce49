/* Checkpoints: a directory holding model.safetensors (parameters, full logical tensors, so any
 * parallel layout can load them), optim.safetensors (AdamW moments, same names) and meta.json
 * (model configuration, iteration, consumed samples, seed, optimizer step). Written to a
 * temporary directory and renamed into place; `latest` names the newest complete checkpoint. */
#ifndef LOOM_CKPT_H
#define LOOM_CKPT_H

#include <stdint.h>

#include "loom/model.h"
#include "loom/optim.h"

struct loom_train_state {
    int64_t iteration;        /* completed iterations */
    int64_t consumed_samples; /* training samples consumed */
    int64_t consumed_valid_samples; /* validation samples the evaluations have consumed (they
                                       take successive batches, as Megatron-LM's do; -1: not
                                       recorded) */
    uint64_t seed;
    int64_t skipped;          /* iterations skipped by the fp16 loss scaler (no optimizer step) */
    int64_t scheduler_samples; /* samples of the optimizer steps taken: where the learning-rate
                                  and weight-decay schedules stand (-1: not recorded) */
    double loss_scale;        /* fp16 loss scaler state (0 when unused) */
    int64_t growth_tracker, hysteresis_tracker;
    /* the learning-rate schedule in force (has_lr 0: none recorded, e.g. a converted checkpoint) */
    int has_lr;
    struct loom_lr_schedule lr;
    struct loom_wd_schedule wd;
};

/* Save under ROOT/iter_NNNNNNN and point ROOT/latest at it. Collective over the world. The
 * optimizer's moments are saved whole whether or not they are sharded (the distributed
 * optimizer's shares are gathered through the model's gradient buffer, which this overwrites:
 * save between steps). */
enum loom_status loom_ckpt_save(const char *root, struct loom_model *m, struct loom_adamw *opt,
                                const struct loom_train_state *st);
/* Megatron-LM's --save-retain-interval: rank 0 deletes root's checkpoints iter_N of iterations
 * N < latest that are not multiples of every (the latest, which the pointer file names, stays).
 * Nothing else in root is touched. */
enum loom_status loom_ckpt_prune(const char *root, int64_t every, int64_t latest, int rank);
/* Read the model configuration and state stored under ROOT (latest, or ROOT itself if it holds
 * meta.json): fam must be the checkpoint's family (else an error naming both; see
 * loom_ckpt_read_family); cfg is fam's configuration struct. */
struct loom_family_config_desc;
enum loom_status loom_ckpt_read_config(const char *root, const struct loom_family_config_desc *fam,
                                       void *cfg, struct loom_train_state *st, int *has_optim);
/* The model family of the checkpoint under ROOT: meta.json's "family", or for checkpoints from
 * before it was recorded the family whose "format" it names (gpt when none). */
enum loom_status loom_ckpt_read_family(const char *root,
                                       const struct loom_family_config_desc **fam);
/* The checkpoint directory ROOT names: ROOT itself when it holds meta.json, else the iteration
 * that ROOT/latest_checkpointed_iteration.txt points at. */
enum loom_status loom_ckpt_resolve(const char *root, char *dir, size_t cap);
/* The iteration ROOT/latest_checkpointed_iteration.txt names (1 to 18 decimal digits and at most
 * one line end), or -1 when there is no such file; a file that is not regular or not of that form
 * is a one-line error naming it. */
enum loom_status loom_ckpt_read_pointer(const char *root, long long *it);
/* Load parameters (and the optimizer state when opt is non-NULL). The checkpoint's model must be
 * m's (the architecture rows of the family's settings table agree; else a one-line error naming
 * the first that differs). Collective over the world. */
enum loom_status loom_ckpt_load(const char *root, struct loom_model *m, struct loom_adamw *opt);

/* Write `buf` (a device buffer laid out like the model's parameters, e.g. the gradients) as a
 * checkpoint-shaped directory DIR/{model.safetensors, meta.json}, so the conversion tools read
 * it like weights. Collective over the world. */
enum loom_status loom_ckpt_save_buffer(const char *dir, struct loom_model *m, const float *buf);

/* meta.json for a model of family fam, cfg its configuration (st may be NULL: a converted
 * checkpoint with no training state). */
enum loom_status loom_ckpt_write_meta(const char *path, const struct loom_family_config_desc *fam,
                                      const void *cfg, const struct loom_train_state *st,
                                      int64_t optim_step);

/* LOOM_OK when the n values of x (tensor `name` of `file`) are all finite; else an error naming
 * the tensor, the element and what it holds (NaN or Inf). */
enum loom_status loom_ckpt_check_finite(const char *file, const char *name, const float *x,
                                        int64_t n);

#endif
