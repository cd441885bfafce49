/* `loom train`: Megatron-LM flag names -> struct loom_train_config -> loom_train_run. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "loom/args.h"
#include "loom/ckpt.h"
#include "loom/comm.h"
#include "loom/fileio.h"
#include "loom/grad_sync.h"
#include "loom/log.h"
#include "loom/settings.h"
#include "loom/tokenizer.h"
#include "loom/train.h"

/* What `loom train` reads besides the model's settings (those are the model family's table,
 * loom/settings.h, parsed straight into the model's configuration). */
struct train_flags {
    int mock, finetune, no_load_optim, no_save_optim, override_sched, use_ckpt_sched,
        log_params_norm, log_num_zeros, sequence_parallel, bf16, fp16, deterministic, dist_opt,
        overlap_gather, eod_mask, exit_signal, skip_train, per_token_loss, tb_ppl, tb_memory,
        tb_world_size, tb_timers, tb_no_loss_scale, tb_no_lr, reset_pos, reset_mask,
        embed_in_split;
    int check_nan; /* --check-for-nan-in-loss-and-grad */
    const char *decay_style, *wsd_style, *wd_style, *device, *data_path, *split,
        *data_cache_path, *train_data_path, *valid_data_path, *test_data_path, *save, *load,
        *metrics, *comm, *attention_backend, *save_grads, *tokenizer_type, *vocab_file,
        *merge_file, *rampup, *tb_dir, *tokenizer_model, *tiktoken_pattern, *sharding, *optimizer;
    int64_t tiktoken_specials, onebit_freeze;
    double start_wd, end_wd, decoupled_lr, decoupled_min_lr;
    double mask_prob, short_seq_prob; /* BERT's and T5's samples */
    int64_t vocab_extra_ids;          /* T5's sentinels */
    double lr, min_lr, warmup_init, warmup_fraction, wd, b1, b2, eps, clip, peak, loss_scale,
        initial_loss_scale, min_loss_scale, exit_mins;
    int64_t micro, global, iters, samples, warmup, decay_iters, warmup_samples, decay_samples,
        wsd_iters, wsd_samples, seed, save_interval, eval_interval, eval_iters, log_interval,
        tb_interval, tp, pp, cp, ep, vpp_layers, kept_act, exit_interval, bucket_mb, bucket_size,
        loss_scale_window, hysteresis;
    int64_t ramp[3]; /* --rampup-batch-size, parsed */
    int64_t save_retain, hash_interval;
    int64_t first_stage_layers, last_stage_layers; /* --decoder-first/last-pipeline-num-layers */
    int64_t ckpt_step;
    char ckpt_dir[4200]; /* --load's iteration --ckpt-step */
};

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Megatron-LM flags that have no setting of their own in loom. With `effect` the flag is taken
 * and changes nothing, because loom always does what it asks or has no such switch: it is named,
 * with the effect, in one note at the start of the log. With `missing` it asks for something loom
 * does not do: an error naming it. `value`: the flag takes no value (0), one (1), or every value
 * up to the next flag (2). `only` (a flag with one value): the one value that has that effect,
 * any other value being an error with `missing`. */
struct megatron_flag {
    const char *name;
    int value;
    const char *effect, *missing;
    const char *only;
};

/* the reasons given by more than one of megatron_flags */
#define ONE_MODEL "loom has one model implementation"
#define NO_FUSION_SWITCHES "loom's kernels have no fusion switches"
#define COUNTER_RNG                                                                              \
    "random numbers are counter-based, from the seed and position, with no generator state to " \
    "save or load"
#define MLP_RECOMPUTE_ONLY                                                                   \
    "activation recomputation is limited to the MLP's activation: --kept-activation-layers " \
    "says which layers keep it"
/* Megatron-LM's selective recomputation (--recompute-activations, --recompute-granularity
 * selective) recomputes the core attention: the probabilities that flash-style kernels never keep */
#define SELECTIVE_RECOMPUTE                                                                        \
    "attention keeps no probabilities for its backward (its kernels are flash-style), which is "   \
    "what selective recomputation saves"
#define JSON_METRICS "--metrics-file writes one JSON object per logged iteration"
#define WANDB_ONLY "it adds to Weights & Biases logs, which loom does not write"
#define FP32_STATE "parameters, gradients and optimizer moments are fp32"
#define FP32_STATE_ONLY "only fp32: " FP32_STATE
#define SAFETENSORS_CKPT "checkpoints are safetensors with meta.json"
#define SYNC_SAVE "checkpoints are saved synchronously"
#define NO_PROFILER "no profiler ranges: LOOM_CUDA_PROFILE=1 prints the device time of each op"

static const struct megatron_flag megatron_flags[] = {
    {"--use-flash-attn", 0, "attention is always one fused kernel, chosen by --attention-backend",
     NULL, NULL},
    {"--use-mcore-models", 0, ONE_MODEL, NULL, NULL},
    {"--transformer-impl", 1, ONE_MODEL, NULL, NULL},
    {"--overlap-grad-reduce", 0, "data-parallel gradients are always reduced in buckets while the "
     "backward runs, sized by --ddp-bucket-size-mb", NULL, NULL},
    {"--attention-softmax-in-fp32", 0, "the softmax is always computed in fp32", NULL, NULL},
    {"--accumulate-allreduce-grads-in-fp32", 0, "gradients are always accumulated and reduced in "
     "fp32", NULL, NULL},
    {"--no-masked-softmax-fusion", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--no-bias-swiglu-fusion", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--no-bias-dropout-fusion", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--no-gradient-accumulation-fusion", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--no-rope-fusion", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--no-persist-layer-norm", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--no-async-tensor-model-parallel-allreduce", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--log-throughput", 0, "tokens/s, TFLOP/s and MFU are always logged", NULL, NULL},
    {"--no-load-rng", 0, COUNTER_RNG, NULL, NULL},
    {"--no-save-rng", 0, COUNTER_RNG, NULL, NULL},
    {"--data-impl", 1, "indexed datasets are always memory-mapped", NULL, NULL},
    {"--num-workers", 1, "samples are read in the training process", NULL, NULL},
    {"--distributed-backend", 1, "--comm chooses the communication backend, auto taking NCCL with "
     "--device cuda under mpirun", NULL, NULL},
    {"--fp32-residual-connection", 0, "the residual stream is always fp32 (with --bf16 too)",
     NULL, NULL},
    {"--use-checkpoint-args", 0, "--load always takes the model's shape from the checkpoint",
     NULL, NULL},
    {"--recompute-activations", 0, SELECTIVE_RECOMPUTE, NULL, NULL},
    {"--recompute-granularity", 1, SELECTIVE_RECOMPUTE, MLP_RECOMPUTE_ONLY, "selective"},
    {"--recompute-modules", 2, NULL, MLP_RECOMPUTE_ONLY, NULL},
    {"--recompute-method", 1, NULL, MLP_RECOMPUTE_ONLY, NULL},
    {"--recompute-num-layers", 1, NULL, MLP_RECOMPUTE_ONLY, NULL},
    {"--tensorboard-queue-size", 1, "TensorBoard records are written at every iteration that has "
     "any", NULL, NULL},
    {"--log-loss-scale-to-tensorboard", 0, "the loss scale goes to TensorBoard unless "
     "--no-log-loss-scale-to-tensorboard", NULL, NULL},
    {"--wandb-project", 1, NULL, "no Weights & Biases logs: " JSON_METRICS, NULL},
    {"--ckpt-format", 1, NULL, "checkpoints are safetensors with meta.json (loom convert exchanges "
     "Hugging Face directories)", NULL},
    {"--fp8-format", 1, NULL, "FP8 training is not implemented", NULL},
    {"--apply-query-key-layer-scaling", 0, "the scores are divided by the layer number and the "
     "softmax multiplies them back: the same probabilities, a guard against fp16 overflow that "
     "loom's attention does not need (its scores and softmax are fp32)", NULL, NULL},
    {"--apply-residual-connection-post-layernorm", 0, NULL, "the residual connection always "
     "takes the norm's input (pre-norm)", NULL},
    {"--dataloader-type", 1, "samples are read in order, as Megatron's single sampler reads them",
     "only 'single': samples are read in order (no cyclic random sampler, no external loader)",
     "single"},
    {"--main-grads-dtype", 1, FP32_STATE, FP32_STATE_ONLY, "fp32"},
    {"--exp-avg-dtype", 1, FP32_STATE, FP32_STATE_ONLY, "fp32"},
    {"--exp-avg-sq-dtype", 1, FP32_STATE, FP32_STATE_ONLY, "fp32"},
    {"--DDP-impl", 1, "data parallelism is loom's own bucketed reduction",
     "only 'local': data parallelism is loom's own bucketed reduction", "local"},
    {"--timing-log-level", 1, "the log line gives the step time; no other timers", NULL, NULL},
    {"--timing-log-option", 1, "the log line gives the step time; no other timers", NULL, NULL},
    {"--wandb-exp-name", 1, WANDB_ONLY, NULL, NULL},
    {"--wandb-save-dir", 1, WANDB_ONLY, NULL, NULL},
    {"--manual-gc", 0, "loom has no garbage collector", NULL, NULL},
    {"--manual-gc-interval", 1, "loom has no garbage collector", NULL, NULL},
    {"--empty-unused-memory-level", 1, "device memory is allocated once, before training", NULL, NULL},
    {"--distributed-timeout-minutes", 1, "collectives have no timeout: a failing rank ends the "
     "whole job", NULL, NULL},
    {"--cross-entropy-loss-fusion", 0, "the output layer and the loss are always fused", NULL, NULL},
    {"--no-create-attention-mask-in-dataloader", 0, "the causal mask is never materialised",
     NULL, NULL},
    {"--exit-on-missing-checkpoint", 0, "--load of a missing checkpoint is always an error",
     NULL, NULL},
    {"--use-cpu-initialization", 0, COUNTER_RNG " (the initial weights do not depend on where "
     "they are made)", NULL, NULL},
    {"--ddp-average-in-collective", 0, "gradients are scaled by the global batch's tokens before "
     "they are summed", NULL, NULL},
    {"--align-grad-reduce", 0, "data-parallel gradients are always reduced in buckets while the "
     "backward runs", NULL, NULL},
    {"--legacy-tokenizer", 0, "loom has one implementation of each tokenizer", NULL, NULL},
    {"--use-legacy-models", 0, NULL, "loom's model is Megatron-Core's layout (and names)", NULL},
    {"--use-dist-ckpt", 0, NULL, "checkpoints are safetensors with meta.json, whole tensors that "
     "any layout loads", NULL},
    {"--dist-ckpt-format", 1, NULL, SAFETENSORS_CKPT, NULL},
    {"--ckpt-fully-parallel-save", 0, NULL, SAFETENSORS_CKPT, NULL},
    {"--ckpt-fully-parallel-load", 0, NULL, SAFETENSORS_CKPT, NULL},
    {"--no-ckpt-fully-parallel-save", 0, NULL, SAFETENSORS_CKPT, NULL},
    {"--ckpt-assume-constant-structure", 0, NULL, SAFETENSORS_CKPT, NULL},
    {"--dist-ckpt-strictness", 1, NULL, SAFETENSORS_CKPT, NULL},
    {"--grad-reduce-in-bf16", 0, NULL, "gradients are reduced in fp32", NULL},
    {"--defer-embedding-wgrad-compute", 0, "the output layer's weight gradient is computed in the "
     "backward pass, with its input gradient", NULL, NULL},
    {"--async-save", 0, NULL, SYNC_SAVE, NULL},
    {"--use-precision-aware-optimizer", 0, NULL, FP32_STATE, NULL},
    {"--sgd-momentum", 1, "it only applies to --optimizer sgd", NULL, NULL},
    {"--use-torch-fsdp2", 0, NULL, "fully sharded data parallelism is not implemented "
     "(--use-distributed-optimizer shards the optimizer's moments)", NULL},
    {"--tp-comm-overlap", 0, NULL, "tensor-parallel communication is not overlapped with the "
     "products", NULL},
    {"--profile", 0, NULL, NO_PROFILER, NULL},
    {"--log-progress", 0, NULL, "no progress file: " JSON_METRICS, NULL},
    {"--mmap-bin-files", 0, "indexed datasets are always memory-mapped", NULL, NULL},
    {"--no-mmap-bin-files", 0, "indexed datasets are always memory-mapped (the samples read are "
     "the same)", NULL, NULL},
    {"--squared-relu", 0, NULL, "the MLP's activation is GELU, or SwiGLU with --swiglu", NULL},
    {"--profile-step-start", 1, NULL, NO_PROFILER, NULL},
    {"--profile-step-end", 1, NULL, NO_PROFILER, NULL},
    {"--use-pytorch-profiler", 0, NULL, NO_PROFILER, NULL},
    {"--record-memory-history", 0, NULL, "no memory history: the log gives the peak device "
     "memory per rank", NULL},
    {"--overlap-p2p-communication", 0, "pipeline sends and receives are always non-blocking, "
     "overlapping the compute", NULL, NULL},
    {"--no-overlap-grad-reduce", 0, "data-parallel gradients are always reduced in buckets while "
     "the backward runs (the same sums)", NULL, NULL},
    {"--bias-gelu-fusion", 0, NO_FUSION_SWITCHES, NULL, NULL},
    {"--no-check-for-nan-in-loss-and-grad", 0, "the loss and gradient norm are always checked: a "
     "non-finite one ends the run (or, with --fp16, skips the step)", NULL, NULL},
    {"--log-straggler", 0, "there is no straggler detector (the log line gives each step's time)",
     NULL, NULL},
    {"--disable-straggler-on-startup", 0, "there is no straggler detector", NULL, NULL},
    {"--num-distributed-optimizer-instances", 1, "one distributed optimizer over the data-parallel "
     "group", "only 1: one distributed optimizer over the data-parallel group", "1"},
    {"--num-dataset-builder-threads", 1, "the dataset's indices are built in the training process",
     NULL, NULL},
    {"--local-rank", 1, "each rank's GPU comes from the launcher's environment "
     "(OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK)", NULL, NULL},
    {"--no-initialization", 0, "weights are initialised only when no checkpoint is loaded", NULL,
     NULL},
    {"--train-sync-interval", 1, "the host waits for the device at the end of every iteration",
     NULL, NULL},
    {"--log-energy", 0, NULL, "energy use is not measured", NULL},
    {"--pipeline-model-parallel-split-rank", 1, NULL, "encoder-decoder models are not implemented",
     NULL},
    {"--full-validation", 0, NULL, "validation takes --eval-iters batches each time", NULL},
    {"--multiple-validation-sets", 0, NULL, "one validation set (--valid-data-path takes one "
     "dataset)", NULL},
    {"--non-persistent-save-interval", 1, NULL, "every checkpoint is persistent: --save-interval",
     NULL},
    {"--use-persistent-ckpt-worker", 0, NULL, SYNC_SAVE, NULL},
};

/* The notes of the Megatron-LM flags given that change nothing, or an error for one loom does
 * not take. *notes is one line (allocated; NULL when none was given). */
static enum loom_status megatron_flags_check(struct loom_flag *flags, int nflags, char **notes) {
    size_t len = 0;
    *notes = NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < NFLAGS(megatron_flags); i++) {
            const struct megatron_flag *m = &megatron_flags[i];
            const struct loom_flag *given = loom_flags_find(flags, nflags, m->name);
            if (!given->given) continue;
            if (m->only) {
                const char *v = *(const char *const *)given->ptr;
                if (strcmp(v, m->only) != 0)
                    return loom_fail(LOOM_ERR_UNSUPPORTED, "%s %s: %s", m->name, v, m->missing);
            } else if (m->missing) {
                return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: %s", m->name, m->missing);
            }
            if (pass == 0)
                len += strlen(m->name) + strlen(m->effect) + 4;
            else
                sprintf(*notes + strlen(*notes), "%s%s: %s", **notes ? "; " : "", m->name,
                        m->effect);
        }
        if (pass == 0) {
            if (!len) return LOOM_OK;
            if (!(*notes = calloc(1, len + 1))) return loom_fail(LOOM_ERR_OOM, "out of memory");
        }
    }
    return LOOM_OK;
}

/* One `loom train`: the model family, its configuration (c.model, which the family's flags point
 * into), the other flags, and the flag table built from both. */
struct train_cmd {
    const struct loom_family_config_desc *fam;
    const char *model; /* --model */
    struct train_flags f;
    struct loom_train_config c;
    struct loom_flag *flags;
    int nflags;
    char *notes; /* the Megatron-LM flags given that change nothing (megatron_flags_check) */
    int64_t eod; /* the tokenizer's end-of-document id (-1: none) */
    int docs;    /* --reset-position-ids or --reset-attention-mask */
};

#define FAIL(...) return loom_fail(LOOM_ERR_INVALID_ARG, __VA_ARGS__)

/* Every flag at its default: the family's settings in t->c.model, the rest in t->f */
static void set_defaults(struct train_cmd *t) {
    t->f = (struct train_flags){
        .optimizer = "adam", .onebit_freeze = 100000,
        .decay_style = "linear", .wsd_style = "exponential", .wd_style = "constant",
        .warmup_fraction = -1, .device = "cpu", .split = "969,30,1", .comm = "auto",
        .attention_backend = "auto", .tokenizer_type = "GPT2BPETokenizer", .tiktoken_specials = 1000, .lr = 1e-4,
        .min_lr = 0, .wd = 0.01, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .clip = 1.0, .micro = 1,
        .global = 0, .iters = 0, .warmup = 0, .decay_iters = 0, .seed = 1234,
        .save_interval = 0, .eval_interval = 1000, .eval_iters = 100, .log_interval = 100,
        .tp = 1, .pp = 1, .cp = 1, .ep = 1, .bucket_mb = 40,
        .initial_loss_scale = 4294967296.0, .min_loss_scale = 1.0, .loss_scale_window = 1000,
        .hysteresis = 2, .ckpt_step = -1, .tb_interval = 1, .decoupled_lr = -1,
        .decoupled_min_lr = -1, .mask_prob = 0.15, .short_seq_prob = 0.1,
    };
    memset(&t->c, 0, sizeof t->c);
    t->fam->defaults(&t->c.model);
}

/* The flag table: --model, the family's settings, loom's other flags, then the Megatron-LM flags
 * that have no setting in loom (megatron_flags). Lives until free_flags. */
static enum loom_status build_flags(struct train_cmd *t) {
    static int megatron_bool;
    static char megatron_help[NFLAGS(megatron_flags)][256];
    static const char *megatron_values[NFLAGS(megatron_flags)];
    struct train_flags *f = &t->f;
    const struct loom_flag own[] = {
        {"--model", LOOM_FLAG_CHOICE, &t->model, "model family, whose settings the flags after it "
         "set (with --load, the checkpoint's)", loom_family_config_names(), 0},
        {"--micro-batch-size", LOOM_FLAG_INT, &f->micro, "samples per micro-batch", NULL, 0},
        {"--global-batch-size", LOOM_FLAG_INT, &f->global, "samples per iteration (0 = micro x DP)", NULL, 0},
        {"--train-iters", LOOM_FLAG_INT, &f->iters, "iterations to train (this or --train-samples)", NULL, 0},
        {"--eod-mask-loss", LOOM_FLAG_BOOL, &f->eod_mask, "no loss where the input token is the tokenizer's end-of-document one (the loss minimised is the mean over micro-batches of each one's mean over its other tokens; the loss logged is the mean per token)", NULL, 0},
        {"--calculate-per-token-loss", LOOM_FLAG_BOOL, &f->per_token_loss, "with --eod-mask-loss, the loss is the mean over the global batch's tokens that carry one (not over micro-batches of their means)", NULL, 0},
        {"--reset-position-ids", LOOM_FLAG_BOOL, &f->reset_pos, "positions (learned or rotary) restart at 0 after each input token that is the tokenizer's end-of-document one: each document packed into a sample counts from its own start", NULL, 0},
        {"--reset-attention-mask", LOOM_FLAG_BOOL, &f->reset_mask, "attention stays within documents: a token attends only to itself and the earlier tokens of its own document, which ends with the tokenizer's end-of-document token (loom's attention kernels; not with --attention-backend fused)", NULL, 0},
        {"--use-distributed-optimizer", LOOM_FLAG_BOOL, &f->dist_opt, "reduce-scatter the gradient buckets over the data-parallel ranks and shard the optimizer's moments and update with them (ZeRO stage 1); the parameters are gathered after each step", NULL, 0},
        {"--data-parallel-sharding-strategy", LOOM_FLAG_CHOICE, &f->sharding, "what the data-parallel ranks shard (ZeRO's stages): no_shard (plain data parallelism), optim (the optimizer's moments and update: stage 1, as --use-distributed-optimizer), optim_grads (and the gradients, reduce-scattered every micro-batch: stage 2), optim_grads_params (and the parameters, gathered before each unit's forward and backward: stage 3)", "no_shard|optim|optim_grads|optim_grads_params", 0},
        {"--overlap-param-gather", LOOM_FLAG_BOOL, &f->overlap_gather, "with --use-distributed-optimizer: gather the parameters bucket by bucket while the next forward runs, each waited for where it is first read", NULL, 0},
        {"--rampup-batch-size", LOOM_FLAG_LIST, &f->rampup, "START INCREMENT SAMPLES: the global batch grows from START by INCREMENT over SAMPLES samples to --global-batch-size (with --train-samples)", NULL, 0},
        {"--train-samples", LOOM_FLAG_INT, &f->samples, "samples to train: --train-samples / --global-batch-size iterations, and the learning-rate schedule counted in samples (this or --train-iters)", NULL, 0},
        {"--exit-interval", LOOM_FLAG_INT, &f->exit_interval, "stop (saving first) at a multiple of this iteration (0 = off)", NULL, 0},
        {"--exit-duration-in-mins", LOOM_FLAG_FLOAT, &f->exit_mins, "stop (saving first) after the first iteration that ends this many minutes after the start (0 = off; fractions too)", NULL, 0},
        {"--skip-train", LOOM_FLAG_BOOL, &f->skip_train, "no training: the validation (from its start) and test losses of the weights of --load (or the initial ones), then exit", NULL, 0},
        {"--exit-signal-handler", LOOM_FLAG_BOOL, &f->exit_signal, "on SIGTERM, stop (saving first) at the end of the iteration, every rank alike", NULL, 0},
        {"--lr", LOOM_FLAG_FLOAT, &f->lr, "peak learning rate", NULL, 0},
        {"--min-lr", LOOM_FLAG_FLOAT, &f->min_lr, "final learning rate", NULL, 0},
        {"--decoupled-lr", LOOM_FLAG_FLOAT, &f->decoupled_lr, "peak learning rate of the word embedding and the output layer, on the same warmup and decay (-1 = --lr)", NULL, 0},
        {"--decoupled-min-lr", LOOM_FLAG_FLOAT, &f->decoupled_min_lr, "their final learning rate, with --decoupled-lr (-1 = --min-lr)", NULL, 0},
        {"--lr-decay-style", LOOM_FLAG_CHOICE, &f->decay_style, "decay after warmup", "constant|linear|cosine|inverse-square-root|WSD", 0},
        {"--lr-wsd-decay-style", LOOM_FLAG_CHOICE, &f->wsd_style, "shape of WSD's final decay", "exponential|linear|cosine|minus_sqrt", 0},
        {"--lr-wsd-decay-iters", LOOM_FLAG_INT, &f->wsd_iters, "iterations of WSD's final decay (with --train-iters)", NULL, 0},
        {"--lr-wsd-decay-samples", LOOM_FLAG_INT, &f->wsd_samples, "samples of WSD's final decay (with --train-samples)", NULL, 0},
        {"--lr-warmup-iters", LOOM_FLAG_INT, &f->warmup, "linear warmup iterations (with --train-iters)", NULL, 0},
        {"--lr-decay-iters", LOOM_FLAG_INT, &f->decay_iters, "decay ends here (with --train-iters; 0 = --train-iters)", NULL, 0},
        {"--lr-warmup-samples", LOOM_FLAG_INT, &f->warmup_samples, "linear warmup samples (with --train-samples)", NULL, 0},
        {"--lr-decay-samples", LOOM_FLAG_INT, &f->decay_samples, "decay ends here (with --train-samples; 0 = --train-samples)", NULL, 0},
        {"--lr-warmup-fraction", LOOM_FLAG_FLOAT, &f->warmup_fraction, "warmup as a fraction of the decay iterations or samples (instead of --lr-warmup-iters/-samples; -1 = not given)", NULL, 0},
        {"--lr-warmup-init", LOOM_FLAG_FLOAT, &f->warmup_init, "learning rate where the warmup starts", NULL, 0},
        {"--weight-decay", LOOM_FLAG_FLOAT, &f->wd, "AdamW weight decay (matrices only)", NULL, 0},
        {"--start-weight-decay", LOOM_FLAG_FLOAT, &f->start_wd, "weight decay at the start (with --weight-decay-incr-style linear|cosine)", NULL, 0},
        {"--end-weight-decay", LOOM_FLAG_FLOAT, &f->end_wd, "weight decay at the end of training (with --weight-decay-incr-style linear|cosine)", NULL, 0},
        {"--weight-decay-incr-style", LOOM_FLAG_CHOICE, &f->wd_style, "weight decay over training: constant (--weight-decay) or from --start-weight-decay to --end-weight-decay", "constant|linear|cosine", 0},
        {"--optimizer", LOOM_FLAG_CHOICE, &f->optimizer, "adam: AdamW; onebit-adam: 1-bit Adam (DeepSpeed's: --onebit-freeze-step warmup steps of Adam without bias correction, then the momentum all-reduced compressed to one bit an element with error feedback and the variance frozen; not with the distributed optimizer)", "adam|onebit-adam", 0},
        {"--onebit-freeze-step", LOOM_FLAG_INT, &f->onebit_freeze, "--optimizer onebit-adam: the warmup's steps (at least 1), after which the variance is frozen and the momentum compressed", NULL, 0},
        {"--adam-beta1", LOOM_FLAG_FLOAT, &f->b1, "AdamW beta1", NULL, 0},
        {"--adam-beta2", LOOM_FLAG_FLOAT, &f->b2, "AdamW beta2", NULL, 0},
        {"--adam-eps", LOOM_FLAG_FLOAT, &f->eps, "AdamW epsilon", NULL, 0},
        {"--clip-grad", LOOM_FLAG_FLOAT, &f->clip, "global gradient-norm clip (0 = off)", NULL, 0},
        {"--check-for-nan-in-loss-and-grad", LOOM_FLAG_BOOL, &f->check_nan, "before the data-parallel sum each rank checks its own share of the loss, and before the optimizer step the gradient norm: NaN or Inf ends the run with an error naming the rank and the iteration (under --fp16 a non-finite gradient norm is an overflow and skips the step, as without the flag)", NULL, 0},
        {"--seed", LOOM_FLAG_INT, &f->seed, "seed of every random number", NULL, 0},
        {"--mock-data", LOOM_FLAG_BOOL, &f->mock, "synthetic data", NULL, 0},
        {"--data-path", LOOM_FLAG_LIST, &f->data_path, "PREFIX or W1 PREFIX1 W2 PREFIX2 ...", NULL, 0},
        {"--split", LOOM_FLAG_STR, &f->split, "train,valid,test document weights", NULL, 0},
        {"--mask-prob", LOOM_FLAG_FLOAT, &f->mask_prob, "BERT's and T5's samples (--model bert, t5): the share of the tokens masked for the language-model loss", NULL, 0},
        {"--short-seq-prob", LOOM_FLAG_FLOAT, &f->short_seq_prob, "BERT's and T5's samples (--model bert, t5): the probability that a sample's target length is drawn shorter than --seq-length", NULL, 0},
        {"--vocab-extra-ids", LOOM_FLAG_INT, &f->vocab_extra_ids, "T5's samples (--model t5): the sentinel ids <extra_id_0>... appended, after [BOS] and [EOS], to the WordPiece vocabulary (0: none)", NULL, 0},
        {"--data-cache-path", LOOM_FLAG_STR, &f->data_cache_path, "folder of Megatron's dataset index cache (<md5>-GPTDataset-<split>-*.npy, <md5>-BlendedDataset-*): indices found there that match the request are read, others built and written there (default: built in memory, not cached)", NULL, 0},
        {"--train-data-path", LOOM_FLAG_LIST, &f->train_data_path, "a training dataset of its own, whole (instead of --data-path and --split)", NULL, 0},
        {"--valid-data-path", LOOM_FLAG_LIST, &f->valid_data_path, "a validation dataset of its own, whole (with --train-data-path)", NULL, 0},
        {"--test-data-path", LOOM_FLAG_LIST, &f->test_data_path, "a test dataset of its own, whole (with --train-data-path), evaluated after training", NULL, 0},
        {"--tokenizer-type", LOOM_FLAG_CHOICE, &f->tokenizer_type, "tokenizer (for the vocabulary size; NullTokenizer: --vocab-size ids and an end-of-document one, as Megatron-LM)", LOOM_TOKENIZER_CHOICES, 0},
        {"--tokenizer-model", LOOM_FLAG_STR, &f->tokenizer_model, "tokenizer.json (or its folder), tokenizer.model or tiktoken rank file", NULL, 0},
        {"--tiktoken-pattern", LOOM_FLAG_STR, &f->tiktoken_pattern, "TikTokenizer: v1, v2, cl100k, o200k", NULL, 0},
        {"--tiktoken-num-special-tokens", LOOM_FLAG_INT, &f->tiktoken_specials, "TikTokenizer: special tokens before the ranks", NULL, 0},
        {"--vocab-file", LOOM_FLAG_STR, &f->vocab_file, "tokenizer vocabulary", NULL, 0},
        {"--merge-file", LOOM_FLAG_STR, &f->merge_file, "GPT-2 merges", NULL, 0},
        {"--save", LOOM_FLAG_STR, &f->save, "checkpoint directory to save to", NULL, 0},
        {"--load", LOOM_FLAG_STR, &f->load, "checkpoint directory to resume from", NULL, 0},
        {"--ckpt-step", LOOM_FLAG_INT, &f->ckpt_step, "the iteration of --load to resume from (-1 = its latest)", NULL, 0},
        {"--save-interval", LOOM_FLAG_INT, &f->save_interval, "save every N iterations (0 = at the end only)", NULL, 0},
        {"--check-weight-hash-across-dp-replicas-interval", LOOM_FLAG_INT, &f->hash_interval, "every N iterations, compare a hash of the weights of the data-parallel replicas; a difference ends the run (0 = never)", NULL, 0},
        {"--save-retain-interval", LOOM_FLAG_INT, &f->save_retain, "keep only the checkpoints of iterations that are multiples of N, and the latest; delete the others of --save after each save (0 = keep all)", NULL, 0},
        {"--finetune", LOOM_FLAG_BOOL, &f->finetune, "load weights only; reset iteration and optimizer", NULL, 0},
        {"--no-load-optim", LOOM_FLAG_BOOL, &f->no_load_optim, "do not load the optimizer state", NULL, 0},
        {"--no-save-optim", LOOM_FLAG_BOOL, &f->no_save_optim, "save weights and training state without the optimizer state", NULL, 0},
        {"--override-opt_param-scheduler", LOOM_FLAG_BOOL, &f->override_sched, "on resume, take the learning-rate schedule from these flags, not from the checkpoint", NULL, 0},
        {"--use-checkpoint-opt_param-scheduler", LOOM_FLAG_BOOL, &f->use_ckpt_sched, "on resume, take the learning-rate schedule (rates, warmup, decay, style) from the checkpoint", NULL, 0},
        {"--eval-interval", LOOM_FLAG_INT, &f->eval_interval, "validate every N iterations, on the validation set's next --eval-iters batches (and once more after training)", NULL, 0},
        {"--eval-iters", LOOM_FLAG_INT, &f->eval_iters, "validation batches", NULL, 0},
        {"--log-interval", LOOM_FLAG_INT, &f->log_interval, "log every N iterations", NULL, 0},
        {"--log-params-norm", LOOM_FLAG_BOOL, &f->log_params_norm, "log the parameters' L2 norm (after the step)", NULL, 0},
        {"--log-num-zeros-in-grad", LOOM_FLAG_BOOL, &f->log_num_zeros, "log how many of the gradient's elements are zero (each parameter counted once, as the gradient norm)", NULL, 0},
        {"--metrics-file", LOOM_FLAG_STR, &f->metrics, "JSON lines, one object per logged iteration", NULL, 0},
        {"--tensorboard-dir", LOOM_FLAG_STR, &f->tb_dir, "write TensorBoard event files here (Megatron-LM's scalars, from rank 0)", NULL, 0},
        {"--tensorboard-log-interval", LOOM_FLAG_INT, &f->tb_interval, "training scalars to TensorBoard every N iterations", NULL, 0},
        {"--log-timers-to-tensorboard", LOOM_FLAG_BOOL, &f->tb_timers, "the iteration time (s) to TensorBoard at each logged iteration", NULL, 0},
        {"--log-validation-ppl-to-tensorboard", LOOM_FLAG_BOOL, &f->tb_ppl, "validation perplexities to TensorBoard too", NULL, 0},
        {"--log-memory-to-tensorboard", LOOM_FLAG_BOOL, &f->tb_memory, "device memory (bytes allocated now and at most) to TensorBoard", NULL, 0},
        {"--log-world-size-to-tensorboard", LOOM_FLAG_BOOL, &f->tb_world_size, "the number of ranks to TensorBoard", NULL, 0},
        {"--no-log-loss-scale-to-tensorboard", LOOM_FLAG_BOOL, &f->tb_no_loss_scale, "no loss scale in TensorBoard", NULL, 0},
        {"--no-log-learning-rate-to-tensorboard", LOOM_FLAG_BOOL, &f->tb_no_lr, "no learning rate in TensorBoard", NULL, 0},
        {"--tensor-model-parallel-size", LOOM_FLAG_INT, &f->tp, "tensor-parallel ranks", NULL, 0},
        {"--pipeline-model-parallel-size", LOOM_FLAG_INT, &f->pp, "pipeline stages", NULL, 0},
        {"--context-parallel-size", LOOM_FLAG_INT, &f->cp, "context-parallel ranks (1 only)", NULL, 0},
        {"--expert-model-parallel-size", LOOM_FLAG_INT, &f->ep, "expert-parallel ranks (1 only)", NULL, 0},
        {"--num-layers-per-virtual-pipeline-stage", LOOM_FLAG_INT, &f->vpp_layers, "interleaved schedule (0 = off)", NULL, 0},
        {"--decoder-first-pipeline-num-layers", LOOM_FLAG_INT, &f->first_stage_layers, "layers of the first pipeline stage (0 = an equal share; the stages between the first and last share the rest equally)", NULL, 0},
        {"--account-for-embedding-in-pipeline-split", LOOM_FLAG_BOOL, &f->embed_in_split, "split the layers over the pipeline stages as if the embedding were one more layer on the first stage (it then holds one layer fewer)", NULL, 0},
        {"--decoder-last-pipeline-num-layers", LOOM_FLAG_INT, &f->last_stage_layers, "layers of the last pipeline stage (0 = an equal share)", NULL, 0},
        {"--sequence-parallel", LOOM_FLAG_BOOL, &f->sequence_parallel, "split norm/dropout regions along the sequence", NULL, 0},
        {"--save-grads", LOOM_FLAG_STR, &f->save_grads, "write the gradients of the first iteration this run trains (iteration 1, or the one after --load's) as a checkpoint directory (for testing)", NULL, 0},
        {"--ddp-bucket-size-mb", LOOM_FLAG_INT, &f->bucket_mb, "data-parallel gradient bucket (MiB), reduced while the backward runs", NULL, 0},
        {"--ddp-bucket-size", LOOM_FLAG_INT, &f->bucket_size, "data-parallel gradient bucket in parameters (0: --ddp-bucket-size-mb's)", NULL, 0},
        {"--device", LOOM_FLAG_CHOICE, &f->device, "compute device", "cpu|cuda", 0},
        {"--comm", LOOM_FLAG_CHOICE, &f->comm, "communication backend (auto: mpi under mpirun, nccl with --device cuda; mpi with --device cuda moves device buffers through host memory)", "auto|self|mpi|nccl", 0},
        {"--fp16", LOOM_FLAG_BOOL, &f->fp16, "matrix products with fp16 inputs and fp32 accumulation, with loss scaling (cuda)", NULL, 0},
        {"--loss-scale", LOOM_FLAG_FLOAT, &f->loss_scale, "static loss scale for --fp16 (0 = dynamic)", NULL, 0},
        {"--initial-loss-scale", LOOM_FLAG_FLOAT, &f->initial_loss_scale, "first dynamic loss scale", NULL, 0},
        {"--min-loss-scale", LOOM_FLAG_FLOAT, &f->min_loss_scale, "smallest dynamic loss scale", NULL, 0},
        {"--loss-scale-window", LOOM_FLAG_INT, &f->loss_scale_window, "clean iterations before the scale doubles", NULL, 0},
        {"--hysteresis", LOOM_FLAG_INT, &f->hysteresis, "overflowing iterations tolerated before the scale halves", NULL, 0},
        {"--attention-backend", LOOM_FLAG_CHOICE, &f->attention_backend, "attention kernels (cuda): auto = cuDNN's fused attention where it applies, else loom's flash kernel; fused = cuDNN, an error where it has no plan; flash = loom's kernel only (bit-for-bit repeatable)", "auto|fused|flash", 0},
        {"--kept-activation-layers", LOOM_FLAG_INT, &f->kept_act, "layers of each pipeline stage (its last ones) that keep their MLP activation for the backward instead of remaking it: faster, and [micro-batch tokens x FFN] more memory a layer and micro-batch in flight (0 = remade in every layer)", NULL, 0},
        {"--deterministic-mode", LOOM_FLAG_BOOL, &f->deterministic, "every run gives the same bits (cuda: cuBLASLt's heuristic algorithms, not the fastest timed; loom's attention kernels)", NULL, 0},
        {"--bf16", LOOM_FLAG_BOOL, &f->bf16, "matrix products with bf16 inputs and fp32 accumulation (cuda; weights, activations and optimizer stay fp32)", NULL, 0},
        {"--peak-tflops", LOOM_FLAG_FLOAT, &f->peak, "peak TFLOP/s per rank for MFU (0 = 989 on cuda, measured sgemm on cpu)", NULL, 0},
    };
    const int nown = NFLAGS(own), nmodel = t->fam->nsettings;
    t->flags = calloc((size_t)(nown + nmodel + NFLAGS(megatron_flags)), sizeof *t->flags);
    if (!t->flags) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int n = 0;
    t->flags[n++] = own[0]; /* --model */
    n += loom_settings_flags(t->fam, &t->c.model, t->flags + n, nmodel);
    memcpy(t->flags + n, own + 1, sizeof own - sizeof own[0]);
    n += nown - 1;
    for (int i = 0; i < NFLAGS(megatron_flags); i++) {
        const struct megatron_flag *m = &megatron_flags[i];
        if (m->only)
            snprintf(megatron_help[i], sizeof megatron_help[i], "Megatron-LM's; %s: no effect "
                     "(%s); any other value: not supported", m->only, m->effect);
        else
            snprintf(megatron_help[i], sizeof megatron_help[i], "Megatron-LM's; %s: %s",
                     m->effect ? "no effect" : "not supported", m->effect ? m->effect : m->missing);
        t->flags[n++] =
            (struct loom_flag){m->name,
                               m->value == 2   ? LOOM_FLAG_LIST
                               : m->value == 1 ? LOOM_FLAG_STR
                                               : LOOM_FLAG_BOOL,
                               m->value ? (void *)&megatron_values[i] : (void *)&megatron_bool,
                               megatron_help[i], NULL, 0};
    }
    t->nflags = n;
    return LOOM_OK;
}

static int given(const struct train_cmd *t, const char *name) {
    return loom_settings_flag_given(t->flags, t->nflags, name);
}

/* --model's value in argv (its last), or NULL */
static const char *model_in_argv(int argc, char **argv) {
    const char *v = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) v = argv[i + 1];
        else if (!strncmp(argv[i], "--model=", 8)) v = argv[i] + 8;
    }
    return v;
}

/* Step 1: the flags of family fam parsed (*help: --help was given, and printed) */
static enum loom_status parse_flags(struct train_cmd *t, const struct loom_family_config_desc *fam,
                                    int argc, char **argv, int *help) {
    free(t->flags);
    t->flags = NULL;
    t->fam = fam;
    t->model = fam->name;
    set_defaults(t);
    LOOM_CHECK(build_flags(t));
    LOOM_CHECK(loom_flags_parse(t->flags, t->nflags, argc, argv, 2, help));
    if (*help) loom_flags_print_help("usage: loom train [flags]", t->flags, t->nflags);
    return LOOM_OK;
}

/* Step 2: the notes of the Megatron-LM flags that change nothing (errors for those loom does
 * not take), and the family's other forms of its flags folded in */
static enum loom_status megatron_notes(struct train_cmd *t) {
    free(t->notes);
    t->notes = NULL;
    LOOM_CHECK(megatron_flags_check(t->flags, t->nflags, &t->notes));
    if (t->fam->after_parse) LOOM_CHECK(t->fam->after_parse(&t->c.model, t->flags, t->nflags));
    return LOOM_OK;
}

/* Step 3: the training length, the NullTokenizer's ids and --ckpt-step's directory */
static enum loom_status check_length_and_load(struct train_cmd *t) {
    struct train_flags *f = &t->f;
    if (f->iters && f->samples) FAIL("--train-iters and --train-samples exclude each other (training "
                                     "counted in iterations or in samples)");
    if (f->iters <= 0 && f->samples <= 0)
        FAIL("give --train-iters or --train-samples, positive (got %lld)",
             (long long)(f->samples ? f->samples : f->iters));
    if (strcmp(f->tokenizer_type, "NullTokenizer") == 0) {
        /* Megatron-LM's: token ids 0 .. --vocab-size - 1 and an end-of-document id after them */
        if (t->c.model.vocab_size <= 0 || f->vocab_file)
            FAIL("--tokenizer-type NullTokenizer takes --vocab-size (the ids before the "
                 "end-of-document one) and no --vocab-file");
        t->c.model.vocab_size += 1;
    }
    if (given(t, "--ckpt-step")) {
        if (!f->load) FAIL("--ckpt-step needs --load (the checkpoint directory it counts in)");
        if (f->ckpt_step < 0) FAIL("--ckpt-step must be >= 0 (got %lld)", (long long)f->ckpt_step);
        snprintf(f->ckpt_dir, sizeof f->ckpt_dir, "%s/iter_%07lld", f->load, (long long)f->ckpt_step);
        char meta[4300];
        snprintf(meta, sizeof meta, "%s/meta.json", f->ckpt_dir);
        if (!loom_file_exists(meta))
            FAIL("--ckpt-step %lld: --load %s has no checkpoint of that iteration (no %s)",
                 (long long)f->ckpt_step, f->load, meta);
        f->load = f->ckpt_dir;
    }
    return LOOM_OK;
}

/* Step 4 (--load): the checkpoint's model family, which --model must name if given (*other: the
 * checkpoint's family when it is not t->fam and --model was left out: parse again with it), then
 * its settings against the flags: a shape flag that contradicts it is an error, the rest as each
 * setting's row says (loom_settings_apply_checkpoint) */
static enum loom_status load_config(struct train_cmd *t, const struct loom_family_config_desc **other) {
    const char *load = t->f.load;
    *other = NULL;
    const struct loom_family_config_desc *fam;
    LOOM_CHECK(loom_ckpt_read_family(load, &fam));
    if (fam != t->fam) {
        if (given(t, "--model"))
            FAIL("--model %s contradicts the checkpoint %s, which holds a %s model", t->fam->name,
                 load, fam->name);
        *other = fam;
        return LOOM_OK;
    }
    _Alignas(max_align_t) char saved[sizeof t->c.model];
    struct loom_train_state st;
    int has_optim;
    LOOM_CHECK(loom_ckpt_read_config(load, fam, saved, &st, &has_optim));
    return loom_settings_apply_checkpoint(fam, &t->c.model, saved, t->flags, t->nflags, load);
}

/* Step 5: the tokenizer's vocabulary size and end-of-document id, for --eod-mask-loss and the
 * documents of --reset-position-ids and --reset-attention-mask */
static enum loom_status tokenizer_ids(struct train_cmd *t) {
    struct train_flags *f = &t->f;
    int64_t *vocab = &t->c.model.vocab_size;
    t->eod = -1;
    t->docs = f->reset_pos || f->reset_mask;
    if (strcmp(f->tokenizer_type, "NullTokenizer") == 0) {
        t->eod = *vocab - 1;
    } else if ((*vocab == 0 || f->eod_mask || t->docs) && (f->vocab_file || f->tokenizer_model)) {
        struct loom_tokenizer *tok;
        struct loom_tokenizer_spec sp = {
            .type = f->tokenizer_type, .vocab_file = f->vocab_file, .merge_file = f->merge_file,
            .tokenizer_model = f->tokenizer_model, .tiktoken_pattern = f->tiktoken_pattern,
            .tiktoken_num_special_tokens = f->tiktoken_specials,
            .vocab_size = strcmp(f->tokenizer_type, "TikTokenizer") == 0 ? *vocab : 0};
        LOOM_CHECK(loom_tokenizer_open(&tok, &sp));
        /* T5's [BOS], [EOS] and sentinels come after the WordPiece vocabulary's ids */
        if (*vocab == 0)
            *vocab = loom_tokenizer_vocab_size(tok) +
                     (f->vocab_extra_ids > 0 ? 2 + f->vocab_extra_ids : 0);
        t->eod = loom_tokenizer_eod(tok);
        loom_tokenizer_free(tok);
    }
    if ((f->eod_mask || t->docs) && t->eod < 0)
        FAIL("%s needs the tokenizer's end-of-document id: give --vocab-file (and "
             "--merge-file) or --tokenizer-model of a tokenizer that has one, or "
             "--tokenizer-type NullTokenizer",
             f->eod_mask    ? "--eod-mask-loss"
             : f->reset_pos ? "--reset-position-ids"
                            : "--reset-attention-mask");
    if (*vocab == 0) *vocab = 50257;
    return LOOM_OK;
}

/* Step 5a (before the tokenizer's ids): the data flags that belong to some families. BERT's and
 * T5's samples (Megatron-LM's BertDataset and T5Dataset: the families that read their datasets
 * with a tokenizer) come from one sentence-split dataset read with a WordPiece tokenizer, have no
 * end-of-document token, and their losses are each micro-batch's means; --mask-prob and
 * --short-seq-prob shape them, and T5's sentinels are --vocab-extra-ids ids appended (after
 * [BOS] and [EOS]) to the vocabulary. */
static enum loom_status check_family_data(struct train_cmd *t) {
    struct train_flags *f = &t->f;
    const char *name = t->fam->name;
    const int t5 = strcmp(name, "t5") == 0;
    if (f->vocab_extra_ids != 0 && !t5) /* 0, Megatron-LM's default, is no sentinel at all */
        FAIL("--vocab-extra-ids adds T5's sentinel ids: it goes with --model t5");
    if (!t->fam->data_tokenizer) {
        if (given(t, "--mask-prob") || given(t, "--short-seq-prob"))
            FAIL("%s shapes BERT's and T5's samples: it goes with --model bert or t5",
                 given(t, "--mask-prob") ? "--mask-prob" : "--short-seq-prob");
        return LOOM_OK;
    }
    if (!(f->mask_prob >= 0 && f->mask_prob <= 1))
        FAIL("--mask-prob must be in [0, 1] (got %g)", f->mask_prob);
    if (!(f->short_seq_prob >= 0 && f->short_seq_prob <= 1))
        FAIL("--short-seq-prob must be in [0, 1] (got %g)", f->short_seq_prob);
    if (f->vocab_extra_ids < 0 || f->vocab_extra_ids > LOOM_MAX_VOCAB_EXTRA_IDS)
        FAIL("--vocab-extra-ids must be in [0, %d] (got %lld)", LOOM_MAX_VOCAB_EXTRA_IDS,
             (long long)f->vocab_extra_ids);
    const char *gpt_only[] = {"--eod-mask-loss", "--reset-position-ids", "--reset-attention-mask",
                              "--calculate-per-token-loss"};
    for (int i = 0; i < NFLAGS(gpt_only); i++)
        if (given(t, gpt_only[i]))
            FAIL("%s: --model %s's samples have no end-of-document token and its losses are "
                 "each micro-batch's means (GPT's flag)",
                 gpt_only[i], name);
    if (f->mock) return LOOM_OK;
    if (strncmp(f->tokenizer_type, "BertWordPiece", 13) != 0 || !f->vocab_file)
        FAIL("--model %s with %s needs the WordPiece tokenizer: --tokenizer-type "
             "BertWordPieceLowerCase (or BertWordPieceCase) --vocab-file VOCAB",
             name, f->data_path ? "--data-path" : "--train-data-path");
    if (t5 && f->vocab_extra_ids == 0)
        FAIL("--model t5 with %s needs the sentinel ids of its spans: give --vocab-extra-ids "
             "(Megatron-LM's T5 uses 100)", f->data_path ? "--data-path" : "--train-data-path");
    const char *paths[][2] = {{"--data-path", f->data_path},
                              {"--train-data-path", f->train_data_path},
                              {"--valid-data-path", f->valid_data_path},
                              {"--test-data-path", f->test_data_path}};
    for (int i = 0; i < NFLAGS(paths); i++)
        if (paths[i][1] && strchr(paths[i][1], ' '))
            FAIL("%s %s: --model %s reads one sentence-split dataset (PREFIX), not a blend",
                 paths[i][0], paths[i][1], name);
    return LOOM_OK;
}

/* Step 6: the data, logging, checkpoint-interval and learning-rate schedule flags */
static enum loom_status check_run_flags(struct train_cmd *t) {
    struct train_flags *f = &t->f;
    if (!f->mock && !f->data_path && !f->train_data_path)
        FAIL("give --data-path PREFIX (or --train-data-path PREFIX) or --mock-data");
    if (f->mock && (f->data_path || f->train_data_path))
        FAIL("--mock-data and %s exclude each other", f->data_path ? "--data-path" : "--train-data-path");
    if (f->data_path && (f->train_data_path || f->valid_data_path || f->test_data_path))
        FAIL("--data-path (one dataset split by --split) and %s exclude each other",
             f->train_data_path   ? "--train-data-path"
             : f->valid_data_path ? "--valid-data-path"
                                  : "--test-data-path");
    if (f->valid_data_path && !f->train_data_path) FAIL("--valid-data-path needs --train-data-path");
    if (f->test_data_path && !f->train_data_path) FAIL("--test-data-path needs --train-data-path");
    if (f->log_interval < 1) FAIL("--log-interval must be at least 1");
    if (f->global < 0)
        FAIL("--global-batch-size must be positive, or 0 for --micro-batch-size x the data-parallel "
             "size (got %lld)", (long long)f->global);
    if (f->eval_iters < 0 || f->eval_interval < 0) FAIL("--eval-iters and --eval-interval must be >= 0");
    if (f->tb_interval < 1) FAIL("--tensorboard-log-interval must be >= 1 (got %lld)", (long long)f->tb_interval);
    if (f->exit_interval < 0) FAIL("--exit-interval must be >= 0");
    if (!(f->exit_mins >= 0)) FAIL("--exit-duration-in-mins must be >= 0 (got %g)", f->exit_mins);
    if (f->save_interval < 0) FAIL("--save-interval must be >= 0");
    if (f->hash_interval < 0) FAIL("--check-weight-hash-across-dp-replicas-interval must be >= 0 (got %lld)", (long long)f->hash_interval);
    if (f->save_retain < 0) FAIL("--save-retain-interval must be >= 0 (got %lld)", (long long)f->save_retain);
    if (!(f->lr >= 0) || !(f->min_lr >= 0) || f->min_lr > f->lr) FAIL("need 0 <= --min-lr <= --lr");
    if (f->decoupled_lr != -1 && !(f->decoupled_lr >= 0))
        FAIL("--decoupled-lr must be >= 0 (got %g)", f->decoupled_lr);
    if (f->decoupled_min_lr != -1 && !(f->decoupled_min_lr >= 0))
        FAIL("--decoupled-min-lr must be >= 0 (got %g)", f->decoupled_min_lr);
    const struct {
        const char *flag;
        int64_t value;
    } counts[] = {{"--lr-warmup-iters", f->warmup},         {"--lr-decay-iters", f->decay_iters},
                  {"--lr-warmup-samples", f->warmup_samples}, {"--lr-decay-samples", f->decay_samples},
                  {"--lr-wsd-decay-iters", f->wsd_iters},   {"--lr-wsd-decay-samples", f->wsd_samples}};
    for (int i = 0; i < NFLAGS(counts); i++)
        if (counts[i].value < 0)
            FAIL("%s must be >= 0 (got %lld)", counts[i].flag, (long long)counts[i].value);
    /* iteration-based or sample-based schedule flags, as the training length is counted */
    const char *iter_flags[] = {"--lr-warmup-iters", "--lr-decay-iters", "--lr-wsd-decay-iters"};
    const char *sample_flags[] = {"--lr-warmup-samples", "--lr-decay-samples",
                                  "--lr-wsd-decay-samples"};
    for (int i = 0; i < 3; i++) {
        const char *wrong = f->samples ? iter_flags[i] : sample_flags[i];
        if (given(t, wrong))
            FAIL("%s goes with %s; with %s give %s", wrong,
                 f->samples ? "--train-iters" : "--train-samples",
                 f->samples ? "--train-samples" : "--train-iters",
                 f->samples ? sample_flags[i] : iter_flags[i]);
    }
    if (f->rampup) {
        int used = 0;
        if (sscanf(f->rampup, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %n", &f->ramp[0], &f->ramp[1],
                   &f->ramp[2], &used) != 3 || f->rampup[used])
            FAIL("--rampup-batch-size takes three integers, START INCREMENT SAMPLES (got '%s')",
                 f->rampup);
        if (f->ramp[0] < 1 || f->ramp[1] < 1 || f->ramp[2] < 1)
            FAIL("--rampup-batch-size %s: START, INCREMENT and SAMPLES must be positive", f->rampup);
        if (!f->samples)
            FAIL("--rampup-batch-size needs --train-samples (the ramp is counted in samples; "
                 "with --train-iters the global batch is constant)");
    }
    if (given(t, "--lr-warmup-fraction")) {
        if (!(f->warmup_fraction >= 0 && f->warmup_fraction <= 1))
            FAIL("--lr-warmup-fraction must be in [0, 1] (got %g)", f->warmup_fraction);
        const char *other = f->samples ? "--lr-warmup-samples" : "--lr-warmup-iters";
        if (given(t, other)) FAIL("give one of --lr-warmup-fraction and %s", other);
    }
    if (!(f->warmup_init >= 0) || f->warmup_init > f->lr)
        FAIL("need 0 <= --lr-warmup-init <= --lr (got %g)", f->warmup_init);
    if (f->b1 < 0 || f->b1 >= 1 || f->b2 < 0 || f->b2 >= 1) FAIL("--adam-beta1/--adam-beta2 must be in [0, 1)");
    if (!(f->eps > 0)) FAIL("--adam-eps must be positive");
    if (f->clip < 0) FAIL("--clip-grad must be >= 0");
    if (f->wd < 0) FAIL("--weight-decay must be >= 0 (got %g)", f->wd);
    /* Megatron-LM's rule: a constant decay is --weight-decay; a changing one gives both ends */
    const int given_start = given(t, "--start-weight-decay"), given_end = given(t, "--end-weight-decay");
    if (strcmp(f->wd_style, "constant") == 0) {
        if (given_start || given_end)
            FAIL("%s needs --weight-decay-incr-style linear or cosine (constant is "
                 "--weight-decay)", given_start ? "--start-weight-decay" : "--end-weight-decay");
        f->start_wd = f->end_wd = f->wd;
    } else if (!given_start || !given_end) {
        FAIL("--weight-decay-incr-style %s needs --start-weight-decay and --end-weight-decay",
             f->wd_style);
    } else if (!(f->start_wd >= 0) || f->end_wd < f->start_wd) {
        FAIL("need 0 <= --start-weight-decay <= --end-weight-decay (got %g and %g)", f->start_wd,
             f->end_wd);
    }
    return LOOM_OK;
}

/* Step 7: the parallel layout, precision and device flags */
static enum loom_status check_layout(struct train_cmd *t) {
    struct train_flags *f = &t->f;
    const struct loom_transformer_config *m = &t->c.model;
    if (f->tp < 1 || f->pp < 1) FAIL("parallel sizes must be at least 1");
    if (f->cp != 1) FAIL("--context-parallel-size %lld: context parallelism is not implemented (1 only)", (long long)f->cp);
    if (f->ep != 1) FAIL("--expert-model-parallel-size %lld: expert parallelism is not implemented (1 only)", (long long)f->ep);
    if (f->bucket_mb < 1) FAIL("--ddp-bucket-size-mb must be at least 1");
    if (f->bucket_size < 0) FAIL("--ddp-bucket-size %lld: give a number of parameters, at least 1 (0: --ddp-bucket-size-mb's size)", (long long)f->bucket_size);
    const int sharding = f->sharding ? loom_dp_sharding_parse(f->sharding) : LOOM_SHARD_NO_SHARD;
    if (f->dist_opt && sharding == LOOM_SHARD_NO_SHARD && f->sharding)
        FAIL("--use-distributed-optimizer shards the optimizer (optim); "
             "--data-parallel-sharding-strategy no_shard excludes it");
    t->c.dp_sharding = f->dist_opt && sharding < LOOM_SHARD_OPTIM ? LOOM_SHARD_OPTIM : sharding;
    t->c.onebit_adam = !strcmp(f->optimizer, "onebit-adam");
    t->c.onebit_freeze_step = f->onebit_freeze;
    if (t->c.onebit_adam && t->c.dp_sharding != LOOM_SHARD_NO_SHARD)
        FAIL("--optimizer onebit-adam keeps the whole moments on every data-parallel rank: not "
             "with %s", f->sharding ? "--data-parallel-sharding-strategy other than no_shard"
                                    : "--use-distributed-optimizer");
    if (t->c.onebit_adam && f->onebit_freeze < 1)
        FAIL("--onebit-freeze-step %lld: give at least 1 warmup step (the variance it freezes "
             "must have been estimated)", (long long)f->onebit_freeze);
    if (f->overlap_gather && t->c.dp_sharding == LOOM_SHARD_NO_SHARD)
        FAIL("--overlap-param-gather overlaps the distributed optimizer's gather: it needs "
             "--use-distributed-optimizer or a --data-parallel-sharding-strategy other than "
             "no_shard");
    if (f->fp16 && f->bf16) FAIL("--fp16 and --bf16 exclude each other");
    if (f->override_sched && f->use_ckpt_sched)
        FAIL("--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler exclude "
             "each other");
    if (f->kept_act < 0) FAIL("--kept-activation-layers must be 0 or more (0 = remade in every layer)");
    if (f->reset_mask && strcmp(f->attention_backend, "fused") == 0)
        FAIL("--reset-attention-mask and --attention-backend fused exclude each other (cuDNN's "
             "fused attention takes no document mask; give flash or auto, which runs loom's own "
             "kernels on masked attention)");
    if (f->deterministic && strcmp(f->attention_backend, "fused") == 0)
        FAIL("--deterministic-mode and --attention-backend fused exclude each other (cuDNN's "
             "attention backward is not deterministic; give flash or auto)");
    if (f->loss_scale < 0 || !(f->initial_loss_scale > 0) || !(f->min_loss_scale > 0) ||
        f->min_loss_scale > f->initial_loss_scale)
        FAIL("need --loss-scale >= 0 and 0 < --min-loss-scale <= --initial-loss-scale");
    if (f->loss_scale_window < 1 || f->hysteresis < 1)
        FAIL("--loss-scale-window and --hysteresis must be at least 1");
    if (m->head_size < 0)
        FAIL("--kv-channels must be positive, or 0 for --hidden-size / --num-attention-heads (got "
             "%lld)", (long long)m->head_size);
    /* the CUDA attention kernels take head sizes up to 256, cuDNN's multiples of 8 up to 128 */
    const int64_t hs = m->head_size ? m->head_size : m->heads > 0 ? m->hidden / m->heads : 0;
    const char *hs_from = m->head_size ? "--kv-channels" : "--hidden-size / --num-attention-heads";
    if (strcmp(f->device, "cuda") == 0 && hs > 256)
        FAIL("head size %lld (%s): the CUDA attention kernels take head sizes up to 256",
             (long long)hs, hs_from);
    if (strcmp(f->attention_backend, "fused") == 0 && hs > 0 && (hs % 8 || hs > 128))
        FAIL("--attention-backend fused: cuDNN's attention takes head sizes that are multiples "
             "of 8 up to 128, not %lld (%s); give flash or auto", (long long)hs, hs_from);
    return LOOM_OK;
}

/* Step 8: the model's settings derived from its flags (the family's rules), and the pipeline's
 * stage sizes */
static enum loom_status model_from_flags(struct train_cmd *t) {
    struct train_flags *f = &t->f;
    struct loom_transformer_config *m = &t->c.model;
    if (t->fam->from_flags) LOOM_CHECK(t->fam->from_flags(m, t->flags, t->nflags));
    m->kept_act_layers = f->kept_act;
    if (f->embed_in_split) { /* the embedding counted as a layer of the first stage */
        if (f->first_stage_layers || f->last_stage_layers || f->vpp_layers)
            FAIL("--account-for-embedding-in-pipeline-split excludes "
                 "--decoder-first/last-pipeline-num-layers and "
                 "--num-layers-per-virtual-pipeline-stage");
        if (f->pp < 2 || (m->num_layers + 1) % f->pp || (m->num_layers + 1) / f->pp < 2)
            FAIL("--account-for-embedding-in-pipeline-split: --num-layers %lld + 1 (the "
                 "embedding) must split into --pipeline-model-parallel-size %lld equal shares of "
                 "at least 2",
                 (long long)m->num_layers, (long long)f->pp);
        f->first_stage_layers = (m->num_layers + 1) / f->pp - 1;
    }
    m->first_stage_layers = f->first_stage_layers;
    m->last_stage_layers = f->last_stage_layers;
    return LOOM_OK;
}

/* Step 9: the trainer's configuration from the other flags */
static void fill_train_config(struct train_cmd *t) {
    const struct train_flags *f = &t->f;
    struct loom_train_config *c = &t->c;
    c->tp = f->tp;
    c->pp = f->pp;
    c->vpp_layers = f->vpp_layers;
    c->sequence_parallel = f->sequence_parallel;
    c->dp_bucket_bytes = f->bucket_size > 0 ? f->bucket_size * (int64_t)sizeof(float) : f->bucket_mb << 20;
    c->micro_batch = f->micro;
    c->global_batch = f->global;
    c->train_iters = f->iters;
    c->train_samples = f->samples;
    memcpy(c->rampup, f->ramp, sizeof c->rampup);
    c->overlap_param_gather = f->overlap_gather;
    c->eod_mask_id = f->eod_mask ? t->eod : -1;
    c->reset_position_ids = f->reset_pos;
    c->reset_attention_mask = f->reset_mask;
    c->doc_eod = t->docs ? t->eod : -1;
    c->per_token_loss = f->per_token_loss;
    c->lr_warmup_iters = f->warmup;
    c->lr_decay_iters = f->decay_iters;
    c->lr_warmup_samples = f->warmup_samples;
    c->lr_decay_samples = f->decay_samples;
    c->lr_wsd_decay_iters = f->wsd_iters;
    c->lr_wsd_decay_samples = f->wsd_samples;
    c->lr_warmup_fraction = given(t, "--lr-warmup-fraction")
                               ? f->warmup_fraction
                               : -1.0;
    c->exit_interval = f->exit_interval;
    c->exit_duration_mins = f->exit_mins;
    c->exit_signal_handler = f->exit_signal;
    c->skip_train = f->skip_train;
    c->lr.max_lr = f->lr;
    c->lr.min_lr = f->min_lr;
    c->lr.init_lr = f->warmup_init;
    /* --decoupled-min-lr without --decoupled-lr changes nothing, as in Megatron-LM */
    c->lr.decoupled_max_lr = f->decoupled_lr;
    c->lr.decoupled_min_lr = f->decoupled_min_lr >= 0 ? f->decoupled_min_lr : f->min_lr;
    /* the three styles are CHOICE flags, spelled as these parse them */
    c->lr.style = (enum loom_lr_decay)loom_lr_style_parse(f->decay_style);
    c->lr.wsd_style = (enum loom_lr_wsd)loom_wsd_style_parse(f->wsd_style);
    c->weight_decay = f->wd;
    c->wd.start_wd = f->start_wd;
    c->wd.end_wd = f->end_wd;
    c->wd.style = (enum loom_wd_incr)loom_wd_style_parse(f->wd_style);
    c->beta1 = f->b1;
    c->beta2 = f->b2;
    c->adam_eps = f->eps;
    c->clip_grad = f->clip;
    c->check_nan = f->check_nan;
    c->seed = (uint64_t)f->seed;
    c->mock_data = f->mock;
    c->data_path = f->data_path;
    c->split = f->split;
    c->family = t->fam;
    c->tokenizer_type = f->tokenizer_type;
    c->vocab_file = f->vocab_file;
    c->merge_file = f->merge_file;
    c->mask_prob = f->mask_prob;
    c->short_seq_prob = f->short_seq_prob;
    c->vocab_extra_ids = f->vocab_extra_ids;
    c->train_data_path = f->train_data_path;
    c->data_cache_path = f->data_cache_path;
    c->valid_data_path = f->valid_data_path;
    c->test_data_path = f->test_data_path;
    c->eval_interval = f->eval_interval;
    c->eval_iters = f->eval_iters;
    c->log_interval = f->log_interval;
    c->log_params_norm = f->log_params_norm;
    c->log_num_zeros = f->log_num_zeros;
    c->metrics_file = f->metrics;
    c->tensorboard_dir = f->tb_dir;
    c->tensorboard_log_interval = f->tb_interval;
    c->tb_validation_ppl = f->tb_ppl;
    c->tb_memory = f->tb_memory;
    c->tb_world_size = f->tb_world_size;
    c->tb_timers = f->tb_timers;
    c->tb_loss_scale = !f->tb_no_loss_scale;
    c->tb_learning_rate = !f->tb_no_lr;
    c->peak_tflops = f->peak;
    c->save = f->save;
    c->load = f->load;
    c->save_interval = f->save_interval;
    c->save_retain_interval = f->save_retain;
    c->weight_hash_interval = f->hash_interval;
    c->finetune = f->finetune;
    c->no_load_optim = f->no_load_optim;
    c->no_save_optim = f->no_save_optim;
    c->override_lr_schedule = f->override_sched;
    c->use_checkpoint_lr_schedule = f->use_ckpt_sched;
    c->save_grads = f->save_grads;
    c->device = f->device;
    c->comm = f->comm;
    c->bf16 = f->bf16;
    c->deterministic = f->deterministic;
    c->attention_backend = strcmp(f->attention_backend, "fused") == 0   ? LOOM_ATTN_FUSED
                          : strcmp(f->attention_backend, "flash") == 0 ? LOOM_ATTN_FLASH
                                                                      : LOOM_ATTN_AUTO;
    c->fp16 = f->fp16;
    c->loss_scale = f->loss_scale;
    c->initial_loss_scale = f->initial_loss_scale;
    c->min_loss_scale = f->min_loss_scale;
    c->loss_scale_window = f->loss_scale_window;
    c->hysteresis = f->hysteresis;
    c->notes = t->notes;
}

/* ---- the start-up record: what every rank of a job must share (loom_comm_agree) ---------------
 *
 * Lines "KEY\tVALUE": --help given or not, every model setting of the family's table as
 * resolved (flags, family rules, --load's checkpoint), every other flag's value, and the identity
 * of every input file the flags name (its size and a hash of its first bytes: an index, a
 * header), so that a rank reading another dataset, tokenizer or checkpoint than the others is
 * stopped before any work. */

struct record {
    char *s;
    size_t len, cap;
    int oom;
};

__attribute__((format(printf, 3, 4))) static void record_add(struct record *r, const char *key,
                                                            const char *fmt, ...) {
    char value[4400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    for (char *p = value; *p; p++) /* one line per key, whatever a value holds */
        if (*p == '\n' || *p == '\t' || *p == '\r') *p = ' ';
    size_t need = strlen(key) + strlen(value) + 3;
    if (r->oom) return;
    if (r->len + need > r->cap) {
        size_t cap = (r->cap ? r->cap * 2 : 8192) + need;
        char *s = realloc(r->s, cap);
        if (!s) {
            r->oom = 1;
            return;
        }
        r->s = s;
        r->cap = cap;
    }
    r->len += (size_t)sprintf(r->s + r->len, "%s\t%s\n", key, value);
}

/* The shortest of %.15g, %.16g and %.17g that reads back as v */
static void format_double(char *out, size_t cap, double v) {
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

#define IDENTITY_BYTES ((size_t)1 << 20) /* the hashed start of each input file */

/* "282 bytes, header hash 9f3c...", "missing", "not a regular file", "unreadable (...)" */
static void file_identity(const char *path, char *out, size_t cap) {
    /* never block: a FIFO or device in place of a file is named, not opened for reading */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(out, cap, errno == ENOENT ? "missing" : "unreadable (%s)", strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(out, cap, "not a regular file");
        close(fd);
        return;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a, 64 bits */
    static unsigned char buf[65536];
    size_t left = IDENTITY_BYTES;
    while (left > 0) {
        ssize_t n = read(fd, buf, left < sizeof buf ? left : sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; i++) h = (h ^ buf[i]) * 1099511628211ull;
        left -= (size_t)n;
    }
    close(fd);
    snprintf(out, cap, "%lld bytes, header hash %016llx", (long long)st.st_size,
             (unsigned long long)h);
}

static void record_file(struct record *r, const char *flag, const char *path) {
    char key[4480], id[256]; /* flag, "'s file ", a path of up to 4400 */
    snprintf(key, sizeof key, "%s's file %s", flag, path);
    file_identity(path, id, sizeof id);
    record_add(r, key, "%s", id);
}

/* A dataset flag's value (PREFIX or W1 PREFIX1 W2 PREFIX2 ...): each prefix's .idx and .bin */
static void record_dataset(struct record *r, const char *flag, const char *list) {
    if (!list) return;
    for (const char *p = list; *p;) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, " ");
        if (!n) break;
        char tok[4096];
        snprintf(tok, sizeof tok, "%.*s", (int)(n < sizeof tok ? n : sizeof tok - 1), p);
        char *end;
        strtod(tok, &end);
        if (end == tok || *end) { /* not a weight: a prefix */
            char path[4200];
            snprintf(path, sizeof path, "%s.idx", tok);
            record_file(r, flag, path);
            snprintf(path, sizeof path, "%s.bin", tok);
            record_file(r, flag, path);
        }
        p += n;
    }
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files of directory dir, in name order */
static void record_dir(struct record *r, const char *flag, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **more = realloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!more) break;
            names = more;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, compare_names);
    for (size_t i = 0; i < n; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) record_file(r, flag, path);
        free(names[i]);
    }
    free(names);
}

/* --load: the tracker and the files of the iteration it names (read as loading reads it: strict,
 * never opened when it is not a regular file), or of the directory --load names */
static void record_checkpoint(struct record *r, const char *load) {
    char path[4400];
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", load);
    record_file(r, "--load", path);
    long long it = -1;
    if (loom_ckpt_read_pointer(load, &it) != LOOM_OK) loom_clear_error(); /* loading reports it */
    if (it >= 0) {
        snprintf(path, sizeof path, "%s/iter_%07lld", load, it);
        record_dir(r, "--load", path);
    } else {
        record_dir(r, "--load", load);
    }
}

static void record_flag(struct record *r, const struct loom_flag *fl, int megatron) {
    const void *p = fl->ptr;
    char num[64];
    switch (fl->type) {
    case LOOM_FLAG_INT: record_add(r, fl->name, "%lld", (long long)*(const int64_t *)p); break;
    case LOOM_FLAG_FLOAT:
        format_double(num, sizeof num, *(const double *)p);
        record_add(r, fl->name, "%s", num);
        break;
    case LOOM_FLAG_BOOL:
    case LOOM_FLAG_CLEAR:
        /* the Megatron-LM switches share one variable: whether each was given is theirs */
        if (megatron) record_add(r, fl->name, "%s", fl->given ? "given" : "not given");
        else record_add(r, fl->name, "%s", (*(const int *)p != 0) == (fl->type == LOOM_FLAG_BOOL) ? "on" : "off");
        break;
    case LOOM_FLAG_ENUM: record_add(r, fl->name, "%d", *(const int *)p); break;
    case LOOM_FLAG_TEXT: record_add(r, fl->name, "%s", (const char *)p); break;
    case LOOM_FLAG_STR:
    case LOOM_FLAG_CHOICE:
    case LOOM_FLAG_LIST: {
        const char *v = *(const char *const *)p;
        if (megatron && !fl->given) v = NULL;
        record_add(r, fl->name, "%s", v ? v : "not given");
        break;
    }
    }
}

/* A model setting of the family's table, as resolved in cfg */
static void record_setting(struct record *r, const struct loom_setting *row, const void *cfg) {
    const char *field = (const char *)cfg + row->offset;
    const char *key = row->flag ? row->flag : row->name;
    char num[64];
    switch (row->type) {
    case LOOM_SETTING_INT: record_add(r, key, "%lld", (long long)*(const int64_t *)field); break;
    case LOOM_SETTING_DOUBLE:
        format_double(num, sizeof num, *(const double *)field);
        record_add(r, key, "%s", num);
        break;
    case LOOM_SETTING_BOOL:
        record_add(r, key, "%s", (*(const int *)field != 0) != (row->negate != 0) ? "on" : "off");
        break;
    case LOOM_SETTING_ENUM: {
        int v = *(const int *)field;
        const char *n = row->names;
        for (int i = 0; n && i < v; i++) {
            n = strchr(n, '|');
            if (n) n++;
        }
        if (n) record_add(r, key, "%.*s", (int)strcspn(n, "|"), n);
        else record_add(r, key, "%d", v);
        break;
    }
    case LOOM_SETTING_TEXT: record_add(r, key, "%s", field); break;
    }
}

static enum loom_status startup_record(const struct train_cmd *t, int help, char **out) {
    struct record r = {0};
    record_add(&r, "--help", "%s", help ? "given" : "not given");
    if (!help) {
        record_add(&r, "--model", "%s", t->fam->name);
        record_add(&r, "command", "%s", t->c.samples_only ? "samples" : "train");
        for (int i = 0; i < t->fam->nsettings; i++)
            record_setting(&r, &t->fam->settings[i], &t->c.model);
        const char *model_lo = (const char *)&t->c.model;
        const int megatron_first = t->nflags - NFLAGS(megatron_flags);
        for (int i = 0; i < t->nflags; i++) {
            const char *p = t->flags[i].ptr;
            if (p >= model_lo && p < model_lo + sizeof t->c.model) continue; /* a setting's */
            if (strcmp(t->flags[i].name, "--model") == 0) continue;
            record_flag(&r, &t->flags[i], i >= megatron_first);
        }
        const struct train_flags *f = &t->f;
        record_dataset(&r, "--data-path", f->data_path);
        record_dataset(&r, "--train-data-path", f->train_data_path);
        record_dataset(&r, "--valid-data-path", f->valid_data_path);
        record_dataset(&r, "--test-data-path", f->test_data_path);
        if (f->vocab_file) record_file(&r, "--vocab-file", f->vocab_file);
        if (f->merge_file) record_file(&r, "--merge-file", f->merge_file);
        if (f->load) record_checkpoint(&r, f->load);
    }
    if (r.oom) {
        free(r.s);
        return loom_fail(LOOM_ERR_OOM, "out of memory");
    }
    *out = r.s;
    return LOOM_OK;
}

static int train_command(int argc, char **argv, int samples_only) {
    struct train_cmd t;
    memset(&t, 0, sizeof t);
    int help = 0, collective = 1;
    /* the family whose flags are parsed: --model's, else gpt, else (--load) the checkpoint's */
    const struct loom_family_config_desc *fam = loom_family_config_find(model_in_argv(argc, argv));
    if (!fam) fam = loom_family_config_default(); /* a bad --model fails as a bad choice */
    enum loom_status s;
    for (;;) {
        if ((s = parse_flags(&t, fam, argc, argv, &help)) != LOOM_OK || help) break;
        if ((s = megatron_notes(&t)) != LOOM_OK || (s = check_length_and_load(&t)) != LOOM_OK)
            break;
        const struct loom_family_config_desc *other = NULL;
        if (t.f.load && (s = load_config(&t, &other)) != LOOM_OK) break;
        if (!other) break;
        fam = other; /* --load holds another family's model: its flags */
    }
    if (s == LOOM_OK && !help) s = check_family_data(&t);
    if (s == LOOM_OK && !help) s = tokenizer_ids(&t);
    if (s == LOOM_OK && !help) s = check_run_flags(&t);
    if (s == LOOM_OK && !help) s = check_layout(&t);
    if (s == LOOM_OK && !help) s = model_from_flags(&t);
    if (s == LOOM_OK && !help) {
        fill_train_config(&t);
        /* validate the model before any work (the trainer re-checks against the layout) */
        struct loom_transformer_config probe = t.c.model;
        s = t.fam->finalize(&probe, (int)t.c.tp, (int)t.c.pp);
    }
    t.c.samples_only = samples_only;
    /* the ranks a launcher started agree before any work: on their errors so far (one rank's
     * ends the job with its message) and on the record of what they must share */
    if (loom_comm_launched()) {
        char *record = NULL;
        if (s == LOOM_OK) s = startup_record(&t, help, &record);
        s = loom_comm_agree(s, record, s == LOOM_OK && !help && strcmp(t.f.device, "cuda") == 0,
                            &argc, &argv);
        free(record);
    }
    if (s == LOOM_OK && help) {
        loom_comm_finalize();
        free(t.notes);
        free(t.flags);
        return 0;
    }
    if (s == LOOM_OK) s = loom_train_run(&t.c, &argc, &argv, &collective);
    /* flag and layout mistakes are found alike by every rank: rank 0 reports, all exit 1; any
     * other failure may be one rank's alone: it reports and ends the whole job */
    if (s != LOOM_OK) loom_comm_exit_error(1, collective);
    loom_comm_finalize();
    free(t.notes);
    free(t.flags);
    return 0;
}
#undef FAIL

int loom_cmd_train(int argc, char **argv) { return train_command(argc, argv, 0); }

/* `loom samples`: the flags of `loom train`; prints the training samples the run would consume
 * instead of training (src/train/trainer.c, print_samples) */
int loom_cmd_samples(int argc, char **argv) { return train_command(argc, argv, 1); }
