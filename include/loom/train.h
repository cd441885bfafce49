/* The training loop: schedule -> model -> loss -> gradient sync -> optimizer; eval; metrics;
 * checkpoints. Configured by `loom train` flags (src/cli/cmd_train.c). */
#ifndef LOOM_TRAIN_H
#define LOOM_TRAIN_H

#include <stdint.h>

#include "loom/optim.h"
#include "loom/transformer.h"

struct loom_family_config_desc; /* loom/settings.h */

/* The most T5 sentinel ids --vocab-extra-ids may add */
#define LOOM_MAX_VOCAB_EXTRA_IDS 10000

struct loom_train_config {
    /* the model family (--model, or the checkpoint's): its settings' description, whose name is
     * that of the model family (loom_family_find) the trainer builds; NULL: the default (gpt) */
    const struct loom_family_config_desc *family;
    /* the model's configuration (the families on loom's transformer stack: GPT's, BERT's) */
    struct loom_transformer_config model;
    /* parallel layout */
    int64_t tp, pp, vpp_layers; /* vpp_layers: --num-layers-per-virtual-pipeline-stage, 0 = off */
    int sequence_parallel;
    /* fp16: matrix products with fp16 inputs, loss scaling (Megatron's flags) */
    int fp16;
    double loss_scale;          /* --loss-scale: static scale; 0 = dynamic */
    double initial_loss_scale, min_loss_scale;
    int64_t loss_scale_window, hysteresis;
    int64_t dp_bucket_bytes;   /* data-parallel gradient bucket size (bytes of fp32 gradients) */
    int dp_sharding; /* enum loom_dp_sharding: what the data-parallel ranks shard
                        (--data-parallel-sharding-strategy; --use-distributed-optimizer: optim) */
    int onebit_adam;            /* --optimizer onebit-adam: 1-bit Adam instead of AdamW */
    int64_t onebit_freeze_step; /* --onebit-freeze-step: its warmup steps */
    int overlap_param_gather;  /* --overlap-param-gather: its gather overlaps the next forward */
    int64_t eod_mask_id; /* --eod-mask-loss: no loss where the input is this token (-1: off) */
    /* documents packed into samples, split after each input token equal to doc_eod (the
     * tokenizer's end-of-document id): --reset-position-ids (positions restart at each
     * document), --reset-attention-mask (attention stays within each document); see
     * struct loom_step_ctx. Data options, not the model's: checkpoints do not keep them. */
    int reset_position_ids, reset_attention_mask;
    int64_t doc_eod;
    /* batch and schedule: training counted in iterations (train_iters) or in samples
     * (train_samples > 0: train_iters becomes train_samples / global_batch, or the count of
     * the batch ramp-up below, and the learning-rate schedule counts samples, with
     * lr_*_samples); lr's max_lr, min_lr, init_lr and style are set
     * by the caller, its warmup_steps and decay_steps by the trainer from these: */
    int64_t micro_batch, global_batch, train_iters, train_samples;
    /* --rampup-batch-size START INCREMENT SAMPLES (with train_samples): the global batch grows
     * from START to global_batch (struct loom_batch_ramp); START 0: a constant global batch */
    int64_t rampup[3];
    int64_t lr_warmup_iters, lr_decay_iters;     /* iteration-based; decay 0 = train_iters */
    int64_t lr_warmup_samples, lr_decay_samples; /* sample-based; decay 0 = train_samples */
    int64_t lr_wsd_decay_iters, lr_wsd_decay_samples; /* WSD's final decay (one of them) */
    double lr_warmup_fraction; /* warmup as a fraction of the decay (< 0: not given) */
    int64_t exit_interval; /* stop (after saving) when the iteration is a multiple; 0 = off */
    /* compare the data-parallel replicas' weights (a hash) every this many iterations; 0 = off */
    int64_t weight_hash_interval;
    double exit_duration_mins; /* stop (after saving) once training has run this long; 0 = off */
    int exit_signal_handler;   /* stop (after saving) at the end of the iteration that SIGTERM
                                  reached, on every rank alike */
    int skip_train; /* --skip-train: evaluate the loaded weights on the validation data only */
    struct loom_lr_schedule lr;
    double weight_decay, beta1, beta2, adam_eps, clip_grad;
    int check_nan; /* --check-for-nan-in-loss-and-grad: each rank's loss share and the gradient
                      norm checked before the optimizer step, an error naming the rank */
    /* weight decay over training (--start-weight-decay, --end-weight-decay,
     * --weight-decay-incr-style); the trainer sets its incr_steps: the training length in samples
     */
    struct loom_wd_schedule wd;
    uint64_t seed;
    /* data */
    int mock_data;
    const char *data_path, *split;
    /* the tokenizer (--tokenizer-type, --vocab-file, --merge-file): BERT's dataset reads its
     * special ids and word pieces */
    const char *tokenizer_type, *vocab_file, *merge_file;
    /* BERT's and T5's samples (Megatron-LM's --mask-prob, --short-seq-prob; loom/bert_dataset.h) */
    double mask_prob, short_seq_prob;
    /* T5's sentinels (--vocab-extra-ids, at most LOOM_MAX_VOCAB_EXTRA_IDS): ids after the
     * WordPiece vocabulary's [BOS] and [EOS] */
    int64_t vocab_extra_ids;
    /* or a train and (may be NULL) a valid dataset of their own, each whole (Megatron-LM's
     * --train-data-path and --valid-data-path; --split unused) */
    const char *train_data_path, *valid_data_path, *test_data_path;
    const char *data_cache_path; /* --data-cache-path: Megatron's dataset index cache (NULL: none) */
    int per_token_loss; /* --calculate-per-token-loss: with a loss mask, the mean over the global
                           batch's tokens, not over micro-batches of their means */
    /* evaluation and logging */
    int64_t eval_interval, eval_iters, log_interval;
    int log_params_norm; /* --log-params-norm */
    int log_num_zeros;   /* --log-num-zeros-in-grad: the gradient's elements equal to zero */
    const char *metrics_file;
    /* TensorBoard event files (NULL: none): Megatron-LM's training scalars every
     * tensorboard_log_interval iterations and its validation ones, the tb_* ones by its switches
     * (--log-validation-ppl-to-tensorboard, ...; loss scale and learning rate on by default) */
    const char *tensorboard_dir;
    int64_t tensorboard_log_interval;
    int tb_validation_ppl, tb_memory, tb_world_size, tb_timers, tb_loss_scale, tb_learning_rate;
    double peak_tflops; /* 0 = default for the device */
    /* checkpoints */
    const char *save, *load;
    int64_t save_interval;
    int64_t save_retain_interval; /* keep only multiples of it and the latest (0 = keep all) */
    int finetune, no_load_optim, no_save_optim;
    /* on resume, a schedule that differs from the checkpoint's: an error, unless one of these
     * (Megatron-LM's --override-opt_param-scheduler, --use-checkpoint-opt_param-scheduler) */
    int override_lr_schedule, use_checkpoint_lr_schedule;
    /* device */
    const char *save_grads; /* the reduced gradients of the first iteration this run trains
                               (testing); a run that trains none is an error */
    const char *device;
    const char *comm;   /* "auto" | "self" | "mpi" | "nccl" */
    int bf16;           /* matrix products with bf16 inputs (cuda) */
    enum loom_attn_backend attention_backend; /* --attention-backend */
    int deterministic;  /* --deterministic-mode */
    const char *notes;  /* logged at the start as "loom: note: ..." (may be NULL) */
    int samples_only;   /* `loom samples`: print the training samples in consumption order */
};

/* Where a run's samples come from: global sample `index` -> one row of a micro-batch. */
struct loom_sample_source {
    void *ctx;
    int64_t num_samples; /* 0 = unbounded */
    /* 1: every position of every sample carries a loss (GPT's next-token labels; the trainer
     * then counts B x T without reading the samples, unless --eod-mask-loss) */
    int all_labels;
    /* row b of mb (B x T) from global sample `index`: tokens, labels (-1: no loss), token_types
     * and padding_mask (T each), and sop_labels[b]; every field set */
    enum loom_status (*fill)(void *ctx, int64_t index, struct loom_micro *mb, int64_t b);
    void (*free)(void *ctx);
};

/* Row b of mb from a sample's T + 1 tokens: the first T the input, the next T the labels; token
 * types 0, every position real, SOP label 0 (GPT's rows) */
void loom_micro_row_next_tokens(struct loom_micro *mb, int64_t b, const int32_t *tokens);

/* GPT's synthetic data (--mock-data): arithmetic token sequences with random start and stride,
 * so a model can learn them (keyed by seed and split, like every random number in loom); the
 * labels are the next tokens, token types 0, every position real, SOP label 0. */
enum loom_status loom_mock_source(struct loom_sample_source *s, int64_t vocab, int64_t T,
                                  uint64_t seed, int split);

/* The families' own sample sources (GPT's dataset, BERT's dataset and synthetic data) are
 * declared in loom/data.h; the trainer reaches them through the family's settings description
 * (struct loom_family_config_desc's open_source, mock_source). */

/* Run training; returns LOOM_OK or an error with its message recorded. *collective tells
 * whether the error is one every rank met alike (configuration and layout checks) or may be this
 * rank's alone (devices, files, memory, numerics). */
enum loom_status loom_train_run(struct loom_train_config *cfg, int *argc, char ***argv,
                                int *collective);

#endif
