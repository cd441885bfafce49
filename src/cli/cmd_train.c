/* `loom train`: Megatron-LM flag names -> struct loom_train_config -> loom_train_run. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "loom/args.h"
#include "loom/ckpt.h"
#include "loom/comm.h"
#include "loom/fileio.h"
#include "loom/log.h"
#include "loom/tokenizer.h"
#include "loom/train.h"

struct train_flags {
    int64_t num_layers, hidden, heads, query_groups, ffn, seq, max_pos, vocab, divisible;
    int layernorm_1p, qk_layernorm, gqa, swiglu, disable_bias, qkv_bias, xavier, untie, mock, finetune, no_load_optim, no_save_optim, override_sched, use_ckpt_sched, log_params_norm, log_num_zeros, sequence_parallel, bf16, fp16,
        deterministic, use_rope, no_posemb, dist_opt, overlap_gather, eod_mask, exit_signal, skip_train, openai_gelu,
        no_gelu_fusion, per_token_loss, tb_ppl, tb_memory, tb_world_size, tb_timers, tb_no_loss_scale,
        tb_no_lr, reset_pos, reset_mask, rope_scaling, embed_in_split;
    const char *normalization, *posemb, *decay_style, *wsd_style, *wd_style, *device, *data_path, *split, *train_data_path, *valid_data_path, *test_data_path, *save, *load,
        *metrics, *comm, *attention_backend, *save_grads, *tokenizer_type, *vocab_file, *merge_file,
        *rampup, *tb_dir;
    double start_wd, end_wd, decoupled_lr, decoupled_min_lr;
    double rope_factor, rope_low, rope_high, rope_orig; /* Llama 3.1's rope scaling */
    double rope_interp; /* --rotary-seq-len-interpolation-factor */
    double norm_eps, rope_base, rope_percent, hidden_dropout, attention_dropout, lr, min_lr, warmup_init,
        warmup_fraction, wd, b1, b2, eps, clip, init_std, peak, loss_scale, initial_loss_scale,
        min_loss_scale, exit_mins;
    int64_t micro, global, iters, samples, warmup, decay_iters, warmup_samples, decay_samples, wsd_iters, wsd_samples, seed, save_interval, eval_interval,
        eval_iters, log_interval, tb_interval, tp, pp, cp, ep, vpp_layers, kept_act, exit_interval, bucket_mb, bucket_size, loss_scale_window, hysteresis;
    int64_t ramp[3]; /* --rampup-batch-size, parsed */
    int64_t kv_channels, encoder_seq, save_retain, hash_interval;
    int64_t first_stage_layers, last_stage_layers; /* --decoder-first/last-pipeline-num-layers */
    int64_t ckpt_step;
    char ckpt_dir[4200]; /* --load's iteration --ckpt-step */
};

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Architecture flags that a checkpoint fixes. */
struct arch_check {
    const char *flag;
    int64_t *flag_value;
    int64_t ckpt_value;
};

/* The GELU's form by Megatron-LM's rule: its fused bias-GELU (on unless --no-bias-gelu-fusion;
 * it needs the biases) and --openai-gelu compute the tanh form, its F.gelu the exact one. */
static enum loom_gelu gelu_form(const struct train_flags *f) {
    return f->openai_gelu || (!f->disable_bias && !f->no_gelu_fusion) ? LOOM_GELU_TANH
                                                                      : LOOM_GELU_ERF;
}

static enum loom_status apply_checkpoint_arch(struct loom_flag *flags, int nflags,
                                              struct train_flags *f, const char *load) {
    struct loom_gpt_config saved;
    struct loom_train_state st;
    int has_optim;
    LOOM_CHECK(loom_ckpt_read_meta(load, &saved, &st, &has_optim));
    int64_t gqa = saved.query_groups != saved.heads;
    struct arch_check ints[] = {
        {"--num-layers", &f->num_layers, saved.num_layers},
        {"--hidden-size", &f->hidden, saved.hidden},
        {"--num-attention-heads", &f->heads, saved.heads},
        {"--kv-channels", &f->kv_channels, loom_gpt_head_size(&saved)},
        {"--num-query-groups", &f->query_groups, gqa ? saved.query_groups : 0},
        {"--ffn-hidden-size", &f->ffn, saved.ffn_hidden},
        {"--max-position-embeddings", &f->max_pos, saved.max_positions},
        {"--vocab-size", &f->vocab, saved.vocab_size},
        {"--make-vocab-size-divisible-by", &f->divisible, saved.divisible_by},
    };
    for (int i = 0; i < NFLAGS(ints); i++) {
        struct loom_flag *fl = loom_flags_find(flags, nflags, ints[i].flag);
        if (fl->given && *ints[i].flag_value != ints[i].ckpt_value)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s %lld contradicts the checkpoint %s (%lld); "
                             "leave it out to use the checkpoint's value", ints[i].flag,
                             (long long)*ints[i].flag_value, load, (long long)ints[i].ckpt_value);
        *ints[i].flag_value = ints[i].ckpt_value;
    }
    struct {
        const char *flag;
        int *value;
        int ckpt;
    } bools[] = {
        {"--swiglu", &f->swiglu, saved.swiglu},
        {"--apply-layernorm-1p", &f->layernorm_1p, saved.layernorm_1p},
        {"--qk-layernorm", &f->qk_layernorm, saved.qk_layernorm},
        {"--disable-bias-linear", &f->disable_bias, !saved.bias},
        {"--add-qkv-bias", &f->qkv_bias, saved.qkv_bias},
        {"--untie-embeddings-and-output-weights", &f->untie, saved.untie},
    };
    for (int i = 0; i < NFLAGS(bools); i++) {
        struct loom_flag *fl = loom_flags_find(flags, nflags, bools[i].flag);
        if (fl->given && *bools[i].value != bools[i].ckpt)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s contradicts the checkpoint %s, which was "
                             "trained without it", bools[i].flag, load);
        *bools[i].value = bools[i].ckpt;
    }
    /* the checkpoint's GELU form, unless a GELU flag asks for the other one */
    const int gelu_flag = loom_flags_find(flags, nflags, "--openai-gelu")->given ||
                          loom_flags_find(flags, nflags, "--no-bias-gelu-fusion")->given;
    if (gelu_flag && !saved.swiglu && gelu_form(f) != saved.gelu)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--openai-gelu / --no-bias-gelu-fusion ask for the "
                         "GELU's %s form, which contradicts the checkpoint %s (trained with the %s "
                         "form); leave them out to use the checkpoint's",
                         gelu_form(f) == LOOM_GELU_ERF ? "erf" : "tanh", load,
                         saved.gelu == LOOM_GELU_ERF ? "erf" : "tanh");
    /* the checkpoint's form, as the flags that give it */
    f->openai_gelu = saved.gelu == LOOM_GELU_TANH;
    f->no_gelu_fusion = saved.gelu == LOOM_GELU_ERF;
    const char *norm = saved.norm == LOOM_NORM_RMSNORM ? "RMSNorm" : "LayerNorm";
    const char *pos = saved.posemb == LOOM_POSEMB_ROPE ? "rope"
                      : saved.posemb == LOOM_POSEMB_NONE ? "none" : "learned_absolute";
    struct loom_flag *fn = loom_flags_find(flags, nflags, "--normalization");
    if (fn->given && strcmp(f->normalization, norm) != 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--normalization %s contradicts the checkpoint %s "
                         "(%s)", f->normalization, load, norm);
    struct loom_flag *fp = loom_flags_find(flags, nflags, "--position-embedding-type");
    if (fp->given && strcmp(f->posemb, pos) != 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--position-embedding-type %s contradicts the "
                         "checkpoint %s (%s)", f->posemb, load, pos);
    f->normalization = norm;
    f->posemb = pos;
    f->gqa = gqa;
    f->norm_eps = saved.norm_eps;
    /* the rotary settings shape no parameter: a flag given changes them (a longer context by
     * another base or by scaling, say), else the checkpoint's hold */
    if (!loom_flags_find(flags, nflags, "--rotary-base")->given) f->rope_base = saved.rope_theta;
    if (!loom_flags_find(flags, nflags, "--rotary-percent")->given)
        f->rope_percent = saved.rotary_percent;
    if (!loom_flags_find(flags, nflags, "--rotary-seq-len-interpolation-factor")->given)
        f->rope_interp = saved.rope_interpolation;
    if (!loom_flags_find(flags, nflags, "--use-rope-scaling")->given && saved.rope_factor > 0) {
        f->rope_scaling = 1;
        if (!loom_flags_find(flags, nflags, "--rope-scaling-factor")->given)
            f->rope_factor = saved.rope_factor;
        f->rope_low = saved.rope_low_freq_factor;
        f->rope_high = saved.rope_high_freq_factor;
        f->rope_orig = saved.rope_original_max_positions;
    }
    /* --seq-length may change (fine-tuning at another length; learned positions must cover it),
     * and defaults to the checkpoint's */
    if (!loom_flags_find(flags, nflags, "--seq-length")->given) f->seq = saved.seq_length;
    return LOOM_OK;
}

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
    {"--data-cache-path", 1, "the dataset's sample indices are computed in memory, not cached",
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
    {"--num-experts", 1, NULL, "mixture-of-experts models are not implemented", NULL},
    {"--apply-query-key-layer-scaling", 0, "the scores are divided by the layer number and the "
     "softmax multiplies them back: the same probabilities, a guard against fp16 overflow that "
     "loom's attention does not need (its scores and softmax are fp32)", NULL, NULL},
    {"--apply-residual-connection-post-layernorm", 0, NULL, "the residual connection always "
     "takes the norm's input (pre-norm)", NULL},
    {"--dataloader-type", 1, "samples are read in order, as Megatron's single sampler reads them",
     "only 'single': samples are read in order (no cyclic random sampler, no external loader)",
     "single"},
    {"--optimizer", 1, "the optimizer is AdamW", "only 'adam': the optimizer is AdamW", "adam"},
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
    {"--check-for-nan-in-loss-and-grad", 0, "a loss or gradient norm that is not finite always "
     "stops training (skipped instead under --fp16 loss scaling)", NULL, NULL},
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
    {"--vocab-extra-ids", 1, "GPT models have no extra sentinel ids", "only 0: GPT models have "
     "no extra sentinel ids", "0"},
    {"--defer-embedding-wgrad-compute", 0, "the output layer's weight gradient is computed in the "
     "backward pass, with its input gradient", NULL, NULL},
    {"--async-save", 0, NULL, SYNC_SAVE, NULL},
    {"--use-precision-aware-optimizer", 0, NULL, FP32_STATE, NULL},
    {"--sgd-momentum", 1, "it only applies to --optimizer sgd", NULL, NULL},
    {"--use-torch-fsdp2", 0, NULL, "fully sharded data parallelism is not implemented "
     "(--use-distributed-optimizer shards the optimizer's moments)", NULL},
    {"--tp-comm-overlap", 0, NULL, "tensor-parallel communication is not overlapped with the "
     "products", NULL},
    {"--tokenizer-model", 1, NULL, "SentencePiece and Hugging Face tokenizers are not "
     "implemented (--tokenizer-type GPT2BPETokenizer, BertWordPieceLowerCase/Case or "
     "NullTokenizer)", NULL},
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

static int train_command(int argc, char **argv, int samples_only) {
    struct train_flags f = {
        .num_layers = 12, .hidden = 768, .heads = 12, .query_groups = 0, .ffn = 0, .seq = 1024,
        .max_pos = 0, .vocab = 0, .divisible = 128,
        .normalization = "LayerNorm", .posemb = "learned_absolute", .decay_style = "linear", .wsd_style = "exponential", .wd_style = "constant", .warmup_fraction = -1,
        .device = "cpu", .split = "969,30,1", .comm = "auto", .attention_backend = "auto", .tokenizer_type = "GPT2BPETokenizer",
        .norm_eps = 1e-5, .rope_base = 10000, .rope_percent = 1.0, .rope_factor = 8, .rope_low = 1, .rope_high = 4, .rope_orig = 8192, .hidden_dropout = 0.1, .attention_dropout = 0.1,
        .lr = 1e-4, .min_lr = 0, .wd = 0.01, .b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .clip = 1.0,
        .init_std = 0.02, .micro = 1, .global = 0, .iters = 0, .warmup = 0, .decay_iters = 0,
        .seed = 1234, .save_interval = 0, .eval_interval = 1000, .eval_iters = 100,
        .log_interval = 100, .tp = 1, .pp = 1, .cp = 1, .ep = 1, .bucket_mb = 40, .initial_loss_scale = 4294967296.0, .min_loss_scale = 1.0,
        .loss_scale_window = 1000, .hysteresis = 2, .ckpt_step = -1, .tb_interval = 1,
        .decoupled_lr = -1, .decoupled_min_lr = -1,
    };
    int megatron_bool = 0;
    char *notes = NULL;
    struct loom_flag own[] = {
        {"--num-layers", LOOM_FLAG_INT, &f.num_layers, "decoder layers", NULL, 0},
        {"--hidden-size", LOOM_FLAG_INT, &f.hidden, "hidden size", NULL, 0},
        {"--num-attention-heads", LOOM_FLAG_INT, &f.heads, "attention heads", NULL, 0},
        {"--kv-channels", LOOM_FLAG_INT, &f.kv_channels, "the size of each attention head (0 = --hidden-size / --num-attention-heads): the qkv projection is (heads + 2 x query groups) x this wide, the output projection takes heads x this inputs", NULL, 0},
        {"--group-query-attention", LOOM_FLAG_BOOL, &f.gqa, "grouped-query attention", NULL, 0},
        {"--num-query-groups", LOOM_FLAG_INT, &f.query_groups, "key/value groups with --group-query-attention (0 = heads)", NULL, 0},
        {"--ffn-hidden-size", LOOM_FLAG_INT, &f.ffn, "MLP hidden size (0 = 4 x hidden)", NULL, 0},
        {"--seq-length", LOOM_FLAG_INT, &f.seq, "sequence length", NULL, 0},
        {"--encoder-seq-length", LOOM_FLAG_INT, &f.encoder_seq, "the sequence length under its other Megatron-LM name (as --seq-length; 0 = not given)", NULL, 0},
        {"--max-position-embeddings", LOOM_FLAG_INT, &f.max_pos, "learned position rows (0 = seq length)", NULL, 0},
        {"--vocab-size", LOOM_FLAG_INT, &f.vocab, "vocabulary size (0 = from --vocab-file, or 50257)", NULL, 0},
        {"--make-vocab-size-divisible-by", LOOM_FLAG_INT, &f.divisible, "pad the vocabulary to a multiple of this x TP", NULL, 0},
        {"--normalization", LOOM_FLAG_CHOICE, &f.normalization, "norm layer", "LayerNorm|RMSNorm", 0},
        {"--norm-epsilon", LOOM_FLAG_FLOAT, &f.norm_eps, "norm epsilon", NULL, 0},
        {"--swiglu", LOOM_FLAG_BOOL, &f.swiglu, "SwiGLU MLP instead of GELU", NULL, 0},
        {"--apply-layernorm-1p", LOOM_FLAG_BOOL, &f.layernorm_1p, "zero-centred norm weights: each norm's weight w starts at 0 and the norm scales by 1 + w", NULL, 0},
        {"--qk-layernorm", LOOM_FLAG_BOOL, &f.qk_layernorm, "normalise each attention head's query and key vectors (the --normalization norm over the head size, one weight for queries and one for keys per layer), before the rotary embedding", NULL, 0},
        {"--openai-gelu", LOOM_FLAG_BOOL, &f.openai_gelu, "the GELU's tanh form in every case", NULL, 0},
        {"--no-bias-gelu-fusion", LOOM_FLAG_BOOL, &f.no_gelu_fusion, "the GELU's exact (erf) form, as Megatron-LM computes it without its fused bias-GELU", NULL, 0},
        {"--position-embedding-type", LOOM_FLAG_CHOICE, &f.posemb, "position embedding", "learned_absolute|rope|none", 0},
        {"--rotary-base", LOOM_FLAG_FLOAT, &f.rope_base, "rotary base theta", NULL, 0},
        {"--rotary-percent", LOOM_FLAG_FLOAT, &f.rope_percent, "share of each head's values that rotate: the first head size x this (an even count), the rest pass through", NULL, 0},
        {"--use-rope-scaling", LOOM_FLAG_BOOL, &f.rope_scaling, "rescale the rotary frequencies as Llama 3.1 does (by --rope-scaling-factor; low/high frequency factors 1 and 4, original context 8192)", NULL, 0},
        {"--rotary-seq-len-interpolation-factor", LOOM_FLAG_FLOAT, &f.rope_interp, "divide the rotary positions by this (linear interpolation to a longer context; 0 = none)", NULL, 0},
        {"--rope-scaling-factor", LOOM_FLAG_FLOAT, &f.rope_factor, "Llama 3.1's rotary scaling factor (with --use-rope-scaling)", NULL, 0},
        {"--use-rotary-position-embeddings", LOOM_FLAG_BOOL, &f.use_rope, "as --position-embedding-type rope (older Megatron-LM)", NULL, 0},
        {"--no-position-embedding", LOOM_FLAG_BOOL, &f.no_posemb, "no learned absolute position embedding (older Megatron-LM)", NULL, 0},
        {"--disable-bias-linear", LOOM_FLAG_BOOL, &f.disable_bias, "no biases in linear layers (a GELU MLP then has the exact erf GELU, as in Megatron-LM; --openai-gelu keeps the tanh form)", NULL, 0},
        {"--add-qkv-bias", LOOM_FLAG_BOOL, &f.qkv_bias, "a bias on the qkv product even with --disable-bias-linear (Qwen2's attention)", NULL, 0},
        {"--untie-embeddings-and-output-weights", LOOM_FLAG_BOOL, &f.untie, "separate output layer", NULL, 0},
        {"--hidden-dropout", LOOM_FLAG_FLOAT, &f.hidden_dropout, "dropout on hidden states", NULL, 0},
        {"--attention-dropout", LOOM_FLAG_FLOAT, &f.attention_dropout, "dropout on attention probabilities", NULL, 0},
        {"--init-method-std", LOOM_FLAG_FLOAT, &f.init_std, "std of the normal initialisation", NULL, 0},
        {"--init-method-xavier-uniform", LOOM_FLAG_BOOL, &f.xavier, "initialise every matrix uniform in +-sqrt(6 / (rows + columns)) (torch's xavier_uniform_) instead of normal", NULL, 0},
        {"--micro-batch-size", LOOM_FLAG_INT, &f.micro, "samples per micro-batch", NULL, 0},
        {"--global-batch-size", LOOM_FLAG_INT, &f.global, "samples per iteration (0 = micro x DP)", NULL, 0},
        {"--train-iters", LOOM_FLAG_INT, &f.iters, "iterations to train (this or --train-samples)", NULL, 0},
        {"--eod-mask-loss", LOOM_FLAG_BOOL, &f.eod_mask, "no loss where the input token is the tokenizer's end-of-document one (the loss minimised is the mean over micro-batches of each one's mean over its other tokens; the loss logged is the mean per token)", NULL, 0},
        {"--calculate-per-token-loss", LOOM_FLAG_BOOL, &f.per_token_loss, "with --eod-mask-loss, the loss is the mean over the global batch's tokens that carry one (not over micro-batches of their means)", NULL, 0},
        {"--reset-position-ids", LOOM_FLAG_BOOL, &f.reset_pos, "positions (learned or rotary) restart at 0 after each input token that is the tokenizer's end-of-document one: each document packed into a sample counts from its own start", NULL, 0},
        {"--reset-attention-mask", LOOM_FLAG_BOOL, &f.reset_mask, "attention stays within documents: a token attends only to itself and the earlier tokens of its own document, which ends with the tokenizer's end-of-document token (loom's attention kernels; not with --attention-backend fused)", NULL, 0},
        {"--use-distributed-optimizer", LOOM_FLAG_BOOL, &f.dist_opt, "reduce-scatter the gradient buckets over the data-parallel ranks and shard the optimizer's moments and update with them (ZeRO stage 1); the parameters are gathered after each step", NULL, 0},
        {"--overlap-param-gather", LOOM_FLAG_BOOL, &f.overlap_gather, "with --use-distributed-optimizer: gather the parameters bucket by bucket while the next forward runs, each waited for where it is first read", NULL, 0},
        {"--rampup-batch-size", LOOM_FLAG_LIST, &f.rampup, "START INCREMENT SAMPLES: the global batch grows from START by INCREMENT over SAMPLES samples to --global-batch-size (with --train-samples)", NULL, 0},
        {"--train-samples", LOOM_FLAG_INT, &f.samples, "samples to train: --train-samples / --global-batch-size iterations, and the learning-rate schedule counted in samples (this or --train-iters)", NULL, 0},
        {"--exit-interval", LOOM_FLAG_INT, &f.exit_interval, "stop (saving first) at a multiple of this iteration (0 = off)", NULL, 0},
        {"--exit-duration-in-mins", LOOM_FLAG_FLOAT, &f.exit_mins, "stop (saving first) after the first iteration that ends this many minutes after the start (0 = off; fractions too)", NULL, 0},
        {"--skip-train", LOOM_FLAG_BOOL, &f.skip_train, "no training: the validation (from its start) and test losses of the weights of --load (or the initial ones), then exit", NULL, 0},
        {"--exit-signal-handler", LOOM_FLAG_BOOL, &f.exit_signal, "on SIGTERM, stop (saving first) at the end of the iteration, every rank alike", NULL, 0},
        {"--lr", LOOM_FLAG_FLOAT, &f.lr, "peak learning rate", NULL, 0},
        {"--min-lr", LOOM_FLAG_FLOAT, &f.min_lr, "final learning rate", NULL, 0},
        {"--decoupled-lr", LOOM_FLAG_FLOAT, &f.decoupled_lr, "peak learning rate of the word embedding and the output layer, on the same warmup and decay (-1 = --lr)", NULL, 0},
        {"--decoupled-min-lr", LOOM_FLAG_FLOAT, &f.decoupled_min_lr, "their final learning rate, with --decoupled-lr (-1 = --min-lr)", NULL, 0},
        {"--lr-decay-style", LOOM_FLAG_CHOICE, &f.decay_style, "decay after warmup", "constant|linear|cosine|inverse-square-root|WSD", 0},
        {"--lr-wsd-decay-style", LOOM_FLAG_CHOICE, &f.wsd_style, "shape of WSD's final decay", "exponential|linear|cosine|minus_sqrt", 0},
        {"--lr-wsd-decay-iters", LOOM_FLAG_INT, &f.wsd_iters, "iterations of WSD's final decay (with --train-iters)", NULL, 0},
        {"--lr-wsd-decay-samples", LOOM_FLAG_INT, &f.wsd_samples, "samples of WSD's final decay (with --train-samples)", NULL, 0},
        {"--lr-warmup-iters", LOOM_FLAG_INT, &f.warmup, "linear warmup iterations (with --train-iters)", NULL, 0},
        {"--lr-decay-iters", LOOM_FLAG_INT, &f.decay_iters, "decay ends here (with --train-iters; 0 = --train-iters)", NULL, 0},
        {"--lr-warmup-samples", LOOM_FLAG_INT, &f.warmup_samples, "linear warmup samples (with --train-samples)", NULL, 0},
        {"--lr-decay-samples", LOOM_FLAG_INT, &f.decay_samples, "decay ends here (with --train-samples; 0 = --train-samples)", NULL, 0},
        {"--lr-warmup-fraction", LOOM_FLAG_FLOAT, &f.warmup_fraction, "warmup as a fraction of the decay iterations or samples (instead of --lr-warmup-iters/-samples; -1 = not given)", NULL, 0},
        {"--lr-warmup-init", LOOM_FLAG_FLOAT, &f.warmup_init, "learning rate where the warmup starts", NULL, 0},
        {"--weight-decay", LOOM_FLAG_FLOAT, &f.wd, "AdamW weight decay (matrices only)", NULL, 0},
        {"--start-weight-decay", LOOM_FLAG_FLOAT, &f.start_wd, "weight decay at the start (with --weight-decay-incr-style linear|cosine)", NULL, 0},
        {"--end-weight-decay", LOOM_FLAG_FLOAT, &f.end_wd, "weight decay at the end of training (with --weight-decay-incr-style linear|cosine)", NULL, 0},
        {"--weight-decay-incr-style", LOOM_FLAG_CHOICE, &f.wd_style, "weight decay over training: constant (--weight-decay) or from --start-weight-decay to --end-weight-decay", "constant|linear|cosine", 0},
        {"--adam-beta1", LOOM_FLAG_FLOAT, &f.b1, "AdamW beta1", NULL, 0},
        {"--adam-beta2", LOOM_FLAG_FLOAT, &f.b2, "AdamW beta2", NULL, 0},
        {"--adam-eps", LOOM_FLAG_FLOAT, &f.eps, "AdamW epsilon", NULL, 0},
        {"--clip-grad", LOOM_FLAG_FLOAT, &f.clip, "global gradient-norm clip (0 = off)", NULL, 0},
        {"--seed", LOOM_FLAG_INT, &f.seed, "seed of every random number", NULL, 0},
        {"--mock-data", LOOM_FLAG_BOOL, &f.mock, "synthetic data", NULL, 0},
        {"--data-path", LOOM_FLAG_LIST, &f.data_path, "PREFIX or W1 PREFIX1 W2 PREFIX2 ...", NULL, 0},
        {"--split", LOOM_FLAG_STR, &f.split, "train,valid,test document weights", NULL, 0},
        {"--train-data-path", LOOM_FLAG_LIST, &f.train_data_path, "a training dataset of its own, whole (instead of --data-path and --split)", NULL, 0},
        {"--valid-data-path", LOOM_FLAG_LIST, &f.valid_data_path, "a validation dataset of its own, whole (with --train-data-path)", NULL, 0},
        {"--test-data-path", LOOM_FLAG_LIST, &f.test_data_path, "a test dataset of its own, whole (with --train-data-path), evaluated after training", NULL, 0},
        {"--tokenizer-type", LOOM_FLAG_CHOICE, &f.tokenizer_type, "tokenizer (for the vocabulary size; NullTokenizer: --vocab-size ids and an end-of-document one, as Megatron-LM)", "GPT2BPETokenizer|BertWordPieceLowerCase|BertWordPieceCase|NullTokenizer", 0},
        {"--vocab-file", LOOM_FLAG_STR, &f.vocab_file, "tokenizer vocabulary", NULL, 0},
        {"--merge-file", LOOM_FLAG_STR, &f.merge_file, "GPT-2 merges", NULL, 0},
        {"--save", LOOM_FLAG_STR, &f.save, "checkpoint directory to save to", NULL, 0},
        {"--load", LOOM_FLAG_STR, &f.load, "checkpoint directory to resume from", NULL, 0},
        {"--ckpt-step", LOOM_FLAG_INT, &f.ckpt_step, "the iteration of --load to resume from (-1 = its latest)", NULL, 0},
        {"--save-interval", LOOM_FLAG_INT, &f.save_interval, "save every N iterations (0 = at the end only)", NULL, 0},
        {"--check-weight-hash-across-dp-replicas-interval", LOOM_FLAG_INT, &f.hash_interval, "every N iterations, compare a hash of the weights of the data-parallel replicas; a difference ends the run (0 = never)", NULL, 0},
        {"--save-retain-interval", LOOM_FLAG_INT, &f.save_retain, "keep only the checkpoints of iterations that are multiples of N, and the latest; delete the others of --save after each save (0 = keep all)", NULL, 0},
        {"--finetune", LOOM_FLAG_BOOL, &f.finetune, "load weights only; reset iteration and optimizer", NULL, 0},
        {"--no-load-optim", LOOM_FLAG_BOOL, &f.no_load_optim, "do not load the optimizer state", NULL, 0},
        {"--no-save-optim", LOOM_FLAG_BOOL, &f.no_save_optim, "save weights and training state without the optimizer state", NULL, 0},
        {"--override-opt_param-scheduler", LOOM_FLAG_BOOL, &f.override_sched, "on resume, take the learning-rate schedule from these flags, not from the checkpoint", NULL, 0},
        {"--use-checkpoint-opt_param-scheduler", LOOM_FLAG_BOOL, &f.use_ckpt_sched, "on resume, take the learning-rate schedule (rates, warmup, decay, style) from the checkpoint", NULL, 0},
        {"--eval-interval", LOOM_FLAG_INT, &f.eval_interval, "validate every N iterations, on the validation set's next --eval-iters batches (and once more after training)", NULL, 0},
        {"--eval-iters", LOOM_FLAG_INT, &f.eval_iters, "validation batches", NULL, 0},
        {"--log-interval", LOOM_FLAG_INT, &f.log_interval, "log every N iterations", NULL, 0},
        {"--log-params-norm", LOOM_FLAG_BOOL, &f.log_params_norm, "log the parameters' L2 norm (after the step)", NULL, 0},
        {"--log-num-zeros-in-grad", LOOM_FLAG_BOOL, &f.log_num_zeros, "log how many of the gradient's elements are zero (each parameter counted once, as the gradient norm)", NULL, 0},
        {"--metrics-file", LOOM_FLAG_STR, &f.metrics, "JSON lines, one object per logged iteration", NULL, 0},
        {"--tensorboard-dir", LOOM_FLAG_STR, &f.tb_dir, "write TensorBoard event files here (Megatron-LM's scalars, from rank 0)", NULL, 0},
        {"--tensorboard-log-interval", LOOM_FLAG_INT, &f.tb_interval, "training scalars to TensorBoard every N iterations", NULL, 0},
        {"--log-timers-to-tensorboard", LOOM_FLAG_BOOL, &f.tb_timers, "the iteration time (s) to TensorBoard at each logged iteration", NULL, 0},
        {"--log-validation-ppl-to-tensorboard", LOOM_FLAG_BOOL, &f.tb_ppl, "validation perplexities to TensorBoard too", NULL, 0},
        {"--log-memory-to-tensorboard", LOOM_FLAG_BOOL, &f.tb_memory, "device memory (bytes allocated now and at most) to TensorBoard", NULL, 0},
        {"--log-world-size-to-tensorboard", LOOM_FLAG_BOOL, &f.tb_world_size, "the number of ranks to TensorBoard", NULL, 0},
        {"--no-log-loss-scale-to-tensorboard", LOOM_FLAG_BOOL, &f.tb_no_loss_scale, "no loss scale in TensorBoard", NULL, 0},
        {"--no-log-learning-rate-to-tensorboard", LOOM_FLAG_BOOL, &f.tb_no_lr, "no learning rate in TensorBoard", NULL, 0},
        {"--tensor-model-parallel-size", LOOM_FLAG_INT, &f.tp, "tensor-parallel ranks", NULL, 0},
        {"--pipeline-model-parallel-size", LOOM_FLAG_INT, &f.pp, "pipeline stages", NULL, 0},
        {"--context-parallel-size", LOOM_FLAG_INT, &f.cp, "context-parallel ranks (1 only)", NULL, 0},
        {"--expert-model-parallel-size", LOOM_FLAG_INT, &f.ep, "expert-parallel ranks (1 only)", NULL, 0},
        {"--num-layers-per-virtual-pipeline-stage", LOOM_FLAG_INT, &f.vpp_layers, "interleaved schedule (0 = off)", NULL, 0},
        {"--decoder-first-pipeline-num-layers", LOOM_FLAG_INT, &f.first_stage_layers, "layers of the first pipeline stage (0 = an equal share; the stages between the first and last share the rest equally)", NULL, 0},
        {"--account-for-embedding-in-pipeline-split", LOOM_FLAG_BOOL, &f.embed_in_split, "split the layers over the pipeline stages as if the embedding were one more layer on the first stage (it then holds one layer fewer)", NULL, 0},
        {"--decoder-last-pipeline-num-layers", LOOM_FLAG_INT, &f.last_stage_layers, "layers of the last pipeline stage (0 = an equal share)", NULL, 0},
        {"--sequence-parallel", LOOM_FLAG_BOOL, &f.sequence_parallel, "split norm/dropout regions along the sequence", NULL, 0},
        {"--save-grads", LOOM_FLAG_STR, &f.save_grads, "write the first iteration's gradients as a checkpoint directory (for testing)", NULL, 0},
        {"--ddp-bucket-size-mb", LOOM_FLAG_INT, &f.bucket_mb, "data-parallel gradient bucket (MiB), reduced while the backward runs", NULL, 0},
        {"--ddp-bucket-size", LOOM_FLAG_INT, &f.bucket_size, "data-parallel gradient bucket in parameters (0: --ddp-bucket-size-mb's)", NULL, 0},
        {"--device", LOOM_FLAG_CHOICE, &f.device, "compute device", "cpu|cuda", 0},
        {"--comm", LOOM_FLAG_CHOICE, &f.comm, "communication backend (auto: mpi under mpirun, nccl with --device cuda; mpi with --device cuda moves device buffers through host memory)", "auto|self|mpi|nccl", 0},
        {"--fp16", LOOM_FLAG_BOOL, &f.fp16, "matrix products with fp16 inputs and fp32 accumulation, with loss scaling (cuda)", NULL, 0},
        {"--loss-scale", LOOM_FLAG_FLOAT, &f.loss_scale, "static loss scale for --fp16 (0 = dynamic)", NULL, 0},
        {"--initial-loss-scale", LOOM_FLAG_FLOAT, &f.initial_loss_scale, "first dynamic loss scale", NULL, 0},
        {"--min-loss-scale", LOOM_FLAG_FLOAT, &f.min_loss_scale, "smallest dynamic loss scale", NULL, 0},
        {"--loss-scale-window", LOOM_FLAG_INT, &f.loss_scale_window, "clean iterations before the scale doubles", NULL, 0},
        {"--hysteresis", LOOM_FLAG_INT, &f.hysteresis, "overflowing iterations tolerated before the scale halves", NULL, 0},
        {"--attention-backend", LOOM_FLAG_CHOICE, &f.attention_backend, "attention kernels (cuda): auto = cuDNN's fused attention where it applies, else loom's flash kernel; fused = cuDNN, an error where it has no plan; flash = loom's kernel only (bit-for-bit repeatable)", "auto|fused|flash", 0},
        {"--kept-activation-layers", LOOM_FLAG_INT, &f.kept_act, "layers of each pipeline stage (its last ones) that keep their MLP activation for the backward instead of remaking it: faster, and [micro-batch tokens x FFN] more memory a layer and micro-batch in flight (0 = remade in every layer)", NULL, 0},
        {"--deterministic-mode", LOOM_FLAG_BOOL, &f.deterministic, "every run gives the same bits (cuda: cuBLASLt's heuristic algorithms, not the fastest timed; loom's attention kernels)", NULL, 0},
        {"--bf16", LOOM_FLAG_BOOL, &f.bf16, "matrix products with bf16 inputs and fp32 accumulation (cuda; weights, activations and optimizer stay fp32)", NULL, 0},
        {"--peak-tflops", LOOM_FLAG_FLOAT, &f.peak, "peak TFLOP/s per rank for MFU (0 = 989 on cuda, measured sgemm on cpu)", NULL, 0},
    };
    /* loom's flags, then the Megatron-LM flags that have no setting in loom (megatron_flags) */
    struct loom_flag flags[NFLAGS(own) + NFLAGS(megatron_flags)];
    static char megatron_help[NFLAGS(megatron_flags)][256];
    static const char *megatron_values[NFLAGS(megatron_flags)];
    memcpy(flags, own, sizeof own);
    for (int i = 0; i < NFLAGS(megatron_flags); i++) {
        const struct megatron_flag *m = &megatron_flags[i];
        if (m->only)
            snprintf(megatron_help[i], sizeof megatron_help[i], "Megatron-LM's; %s: no effect "
                     "(%s); any other value: not supported", m->only, m->effect);
        else
            snprintf(megatron_help[i], sizeof megatron_help[i], "Megatron-LM's; %s: %s",
                     m->effect ? "no effect" : "not supported", m->effect ? m->effect : m->missing);
        flags[NFLAGS(own) + i] =
            (struct loom_flag){m->name,
                               m->value == 2   ? LOOM_FLAG_LIST
                               : m->value == 1 ? LOOM_FLAG_STR
                                               : LOOM_FLAG_BOOL,
                               m->value ? (void *)&megatron_values[i] : (void *)&megatron_bool,
                               megatron_help[i], NULL, 0};
    }
    int help, collective = 1;
    enum loom_status s = loom_flags_parse(flags, NFLAGS(flags), argc, argv, 2, &help);
    if (s == LOOM_OK && help) {
        loom_flags_print_help("usage: loom train [flags]", flags, NFLAGS(flags));
        return 0;
    }
#define FAIL(...) do { s = loom_fail(LOOM_ERR_INVALID_ARG, __VA_ARGS__); goto out; } while (0)
    if (s != LOOM_OK) goto out;
    if ((s = megatron_flags_check(flags, NFLAGS(flags), &notes)) != LOOM_OK) goto out;
    if (f.encoder_seq != 0) { /* Megatron-LM's other name of --seq-length */
        struct loom_flag *sl = loom_flags_find(flags, NFLAGS(flags), "--seq-length");
        if (sl->given && f.seq != f.encoder_seq)
            FAIL("--encoder-seq-length %lld contradicts --seq-length %lld (one sequence length; "
                 "give one of them)", (long long)f.encoder_seq, (long long)f.seq);
        f.seq = f.encoder_seq;
        sl->given = 1;
    }
    if (f.use_rope || f.no_posemb) { /* older Megatron-LM's position-embedding flags */
        struct loom_flag *pe = loom_flags_find(flags, NFLAGS(flags), "--position-embedding-type");
        const int rope = f.use_rope || (pe->given && strcmp(f.posemb, "rope") == 0);
        if (pe->given && strcmp(f.posemb, rope ? "rope" : "none") != 0)
            FAIL("%s contradicts --position-embedding-type %s",
                 f.use_rope ? "--use-rotary-position-embeddings" : "--no-position-embedding",
                 f.posemb);
        f.posemb = rope ? "rope" : "none";
        pe->given = 1; /* as if given: a checkpoint's must agree */
    }
    if (f.iters && f.samples) FAIL("--train-iters and --train-samples exclude each other (training "
                                   "counted in iterations or in samples)");
    if (f.iters <= 0 && f.samples <= 0)
        FAIL("give --train-iters or --train-samples, positive (got %lld)",
             (long long)(f.samples ? f.samples : f.iters));
    if (strcmp(f.tokenizer_type, "NullTokenizer") == 0) {
        /* Megatron-LM's: token ids 0 .. --vocab-size - 1 and an end-of-document id after them */
        if (f.vocab <= 0 || f.vocab_file)
            FAIL("--tokenizer-type NullTokenizer takes --vocab-size (the ids before the "
                 "end-of-document one) and no --vocab-file");
        f.vocab += 1;
    }
    if (loom_flags_find(flags, NFLAGS(flags), "--ckpt-step")->given) {
        if (!f.load) FAIL("--ckpt-step needs --load (the checkpoint directory it counts in)");
        if (f.ckpt_step < 0) FAIL("--ckpt-step must be >= 0 (got %lld)", (long long)f.ckpt_step);
        snprintf(f.ckpt_dir, sizeof f.ckpt_dir, "%s/iter_%07lld", f.load, (long long)f.ckpt_step);
        char meta[4300];
        snprintf(meta, sizeof meta, "%s/meta.json", f.ckpt_dir);
        if (!loom_file_exists(meta))
            FAIL("--ckpt-step %lld: --load %s has no checkpoint of that iteration (no %s)",
                 (long long)f.ckpt_step, f.load, meta);
        f.load = f.ckpt_dir;
    }
    if (f.load && (s = apply_checkpoint_arch(flags, NFLAGS(flags), &f, f.load)) != LOOM_OK) goto out;
    /* the tokenizer's end-of-document id, for --eod-mask-loss and the documents of
     * --reset-position-ids and --reset-attention-mask */
    int64_t eod = -1;
    const int docs = f.reset_pos || f.reset_mask;
    if (strcmp(f.tokenizer_type, "NullTokenizer") == 0) {
        eod = f.vocab - 1;
    } else if ((f.vocab == 0 || f.eod_mask || docs) && f.vocab_file) {
        struct loom_tokenizer *tok;
        if ((s = loom_tokenizer_load(&tok, f.tokenizer_type, f.vocab_file, f.merge_file)) != LOOM_OK)
            goto out;
        if (f.vocab == 0) f.vocab = loom_tokenizer_vocab_size(tok);
        eod = loom_tokenizer_eod(tok);
        loom_tokenizer_free(tok);
    }
    if ((f.eod_mask || docs) && eod < 0)
        FAIL("%s needs the tokenizer's end-of-document id: give --vocab-file (and "
             "--merge-file) of a tokenizer that has one, or --tokenizer-type NullTokenizer",
             f.eod_mask    ? "--eod-mask-loss"
             : f.reset_pos ? "--reset-position-ids"
                           : "--reset-attention-mask");
    if (f.vocab == 0) f.vocab = 50257;
    if (!f.mock && !f.data_path && !f.train_data_path)
        FAIL("give --data-path PREFIX (or --train-data-path PREFIX) or --mock-data");
    if (f.mock && (f.data_path || f.train_data_path))
        FAIL("--mock-data and %s exclude each other", f.data_path ? "--data-path" : "--train-data-path");
    if (f.data_path && (f.train_data_path || f.valid_data_path || f.test_data_path))
        FAIL("--data-path (one dataset split by --split) and %s exclude each other",
             f.train_data_path   ? "--train-data-path"
             : f.valid_data_path ? "--valid-data-path"
                                 : "--test-data-path");
    if (f.valid_data_path && !f.train_data_path) FAIL("--valid-data-path needs --train-data-path");
    if (f.test_data_path && !f.train_data_path) FAIL("--test-data-path needs --train-data-path");
    if (f.query_groups && !f.gqa) FAIL("--num-query-groups needs --group-query-attention");
    if (f.log_interval < 1) FAIL("--log-interval must be at least 1");
    if (f.eval_iters < 0 || f.eval_interval < 0) FAIL("--eval-iters and --eval-interval must be >= 0");
    if (f.tb_interval < 1) FAIL("--tensorboard-log-interval must be >= 1 (got %lld)", (long long)f.tb_interval);
    if (f.exit_interval < 0) FAIL("--exit-interval must be >= 0");
    if (!(f.exit_mins >= 0)) FAIL("--exit-duration-in-mins must be >= 0 (got %g)", f.exit_mins);
    if (f.save_interval < 0) FAIL("--save-interval must be >= 0");
    if (f.hash_interval < 0) FAIL("--check-weight-hash-across-dp-replicas-interval must be >= 0 (got %lld)", (long long)f.hash_interval);
    if (f.save_retain < 0) FAIL("--save-retain-interval must be >= 0 (got %lld)", (long long)f.save_retain);
    if (!(f.lr >= 0) || !(f.min_lr >= 0) || f.min_lr > f.lr) FAIL("need 0 <= --min-lr <= --lr");
    if (f.decoupled_lr != -1 && !(f.decoupled_lr >= 0))
        FAIL("--decoupled-lr must be >= 0 (got %g)", f.decoupled_lr);
    if (f.decoupled_min_lr != -1 && !(f.decoupled_min_lr >= 0))
        FAIL("--decoupled-min-lr must be >= 0 (got %g)", f.decoupled_min_lr);
    {
        const struct {
            const char *flag;
            int64_t value;
        } counts[] = {{"--lr-warmup-iters", f.warmup},         {"--lr-decay-iters", f.decay_iters},
                      {"--lr-warmup-samples", f.warmup_samples}, {"--lr-decay-samples", f.decay_samples},
                      {"--lr-wsd-decay-iters", f.wsd_iters},   {"--lr-wsd-decay-samples", f.wsd_samples}};
        for (int i = 0; i < NFLAGS(counts); i++)
            if (counts[i].value < 0)
                FAIL("%s must be >= 0 (got %lld)", counts[i].flag, (long long)counts[i].value);
    }
    {
        /* iteration-based or sample-based schedule flags, as the training length is counted */
        const char *iter_flags[] = {"--lr-warmup-iters", "--lr-decay-iters", "--lr-wsd-decay-iters"};
        const char *sample_flags[] = {"--lr-warmup-samples", "--lr-decay-samples",
                                      "--lr-wsd-decay-samples"};
        for (int i = 0; i < 3; i++) {
            const char *wrong = f.samples ? iter_flags[i] : sample_flags[i];
            if (loom_flags_find(flags, NFLAGS(flags), wrong)->given)
                FAIL("%s goes with %s; with %s give %s", wrong,
                     f.samples ? "--train-iters" : "--train-samples",
                     f.samples ? "--train-samples" : "--train-iters",
                     f.samples ? sample_flags[i] : iter_flags[i]);
        }
    }
    if (f.rampup) {
        int used = 0;
        if (sscanf(f.rampup, "%" SCNd64 " %" SCNd64 " %" SCNd64 " %n", &f.ramp[0], &f.ramp[1],
                   &f.ramp[2], &used) != 3 || f.rampup[used])
            FAIL("--rampup-batch-size takes three integers, START INCREMENT SAMPLES (got '%s')",
                 f.rampup);
        if (f.ramp[0] < 1 || f.ramp[1] < 1 || f.ramp[2] < 1)
            FAIL("--rampup-batch-size %s: START, INCREMENT and SAMPLES must be positive", f.rampup);
        if (!f.samples)
            FAIL("--rampup-batch-size needs --train-samples (the ramp is counted in samples; "
                 "with --train-iters the global batch is constant)");
    }
    if (loom_flags_find(flags, NFLAGS(flags), "--lr-warmup-fraction")->given) {
        if (!(f.warmup_fraction >= 0 && f.warmup_fraction <= 1))
            FAIL("--lr-warmup-fraction must be in [0, 1] (got %g)", f.warmup_fraction);
        const char *other = f.samples ? "--lr-warmup-samples" : "--lr-warmup-iters";
        if (loom_flags_find(flags, NFLAGS(flags), other)->given)
            FAIL("give one of --lr-warmup-fraction and %s", other);
    }
    if (!(f.warmup_init >= 0) || f.warmup_init > f.lr)
        FAIL("need 0 <= --lr-warmup-init <= --lr (got %g)", f.warmup_init);
    if (f.b1 < 0 || f.b1 >= 1 || f.b2 < 0 || f.b2 >= 1) FAIL("--adam-beta1/--adam-beta2 must be in [0, 1)");
    if (!(f.eps > 0)) FAIL("--adam-eps must be positive");
    if (f.clip < 0) FAIL("--clip-grad must be >= 0");
    if (f.wd < 0) FAIL("--weight-decay must be >= 0 (got %g)", f.wd);
    {
        /* Megatron-LM's rule: a constant decay is --weight-decay; a changing one gives both ends */
        const int given_start = loom_flags_find(flags, NFLAGS(flags), "--start-weight-decay")->given;
        const int given_end = loom_flags_find(flags, NFLAGS(flags), "--end-weight-decay")->given;
        if (strcmp(f.wd_style, "constant") == 0) {
            if (given_start || given_end)
                FAIL("%s needs --weight-decay-incr-style linear or cosine (constant is "
                     "--weight-decay)", given_start ? "--start-weight-decay" : "--end-weight-decay");
            f.start_wd = f.end_wd = f.wd;
        } else if (!given_start || !given_end) {
            FAIL("--weight-decay-incr-style %s needs --start-weight-decay and --end-weight-decay",
                 f.wd_style);
        } else if (!(f.start_wd >= 0) || f.end_wd < f.start_wd) {
            FAIL("need 0 <= --start-weight-decay <= --end-weight-decay (got %g and %g)", f.start_wd,
                 f.end_wd);
        }
    }
    if (f.tp < 1 || f.pp < 1) FAIL("parallel sizes must be at least 1");
    if (f.cp != 1) FAIL("--context-parallel-size %lld: context parallelism is not implemented (1 only)", (long long)f.cp);
    if (f.ep != 1) FAIL("--expert-model-parallel-size %lld: expert parallelism is not implemented (1 only)", (long long)f.ep);
    if (loom_flags_find(flags, NFLAGS(flags), "--rope-scaling-factor")->given && !f.rope_scaling)
        FAIL("--rope-scaling-factor %g needs --use-rope-scaling", f.rope_factor);
    if (f.rope_scaling && !(f.rope_factor > 0))
        FAIL("--rope-scaling-factor must be positive (got %g)", f.rope_factor);

    if (f.bucket_mb < 1) FAIL("--ddp-bucket-size-mb must be at least 1");
    if (f.bucket_size < 0) FAIL("--ddp-bucket-size %lld: give a number of parameters, at least 1 (0: --ddp-bucket-size-mb's size)", (long long)f.bucket_size);
    if (f.overlap_gather && !f.dist_opt)
        FAIL("--overlap-param-gather overlaps the distributed optimizer's gather: it needs "
             "--use-distributed-optimizer");
    if (f.fp16 && f.bf16) FAIL("--fp16 and --bf16 exclude each other");
    if (f.override_sched && f.use_ckpt_sched)
        FAIL("--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler exclude "
             "each other");
    if (f.kept_act < 0) FAIL("--kept-activation-layers must be 0 or more (0 = remade in every layer)");
    if (f.reset_mask && strcmp(f.attention_backend, "fused") == 0)
        FAIL("--reset-attention-mask and --attention-backend fused exclude each other (cuDNN's "
             "fused attention takes no document mask; give flash or auto, which runs loom's own "
             "kernels on masked attention)");
    if (f.deterministic && strcmp(f.attention_backend, "fused") == 0)
        FAIL("--deterministic-mode and --attention-backend fused exclude each other (cuDNN's "
             "attention backward is not deterministic; give flash or auto)");
    if (f.loss_scale < 0 || !(f.initial_loss_scale > 0) || !(f.min_loss_scale > 0) ||
        f.min_loss_scale > f.initial_loss_scale)
        FAIL("need --loss-scale >= 0 and 0 < --min-loss-scale <= --initial-loss-scale");
    if (f.loss_scale_window < 1 || f.hysteresis < 1)
        FAIL("--loss-scale-window and --hysteresis must be at least 1");
    if (f.kv_channels < 0)
        FAIL("--kv-channels must be positive, or 0 for --hidden-size / --num-attention-heads (got "
             "%lld)", (long long)f.kv_channels);
    {
        /* the CUDA attention kernels take head sizes up to 256, cuDNN's multiples of 8 up to 128 */
        const int64_t hs = f.kv_channels ? f.kv_channels : f.heads > 0 ? f.hidden / f.heads : 0;
        const char *hs_from =
            f.kv_channels ? "--kv-channels" : "--hidden-size / --num-attention-heads";
        if (strcmp(f.device, "cuda") == 0 && hs > 256)
            FAIL("head size %lld (%s): the CUDA attention kernels take head sizes up to 256",
                 (long long)hs, hs_from);
        if (strcmp(f.attention_backend, "fused") == 0 && hs > 0 && (hs % 8 || hs > 128))
            FAIL("--attention-backend fused: cuDNN's attention takes head sizes that are multiples "
                 "of 8 up to 128, not %lld (%s); give flash or auto", (long long)hs, hs_from);
    }

    struct loom_train_config c;
    memset(&c, 0, sizeof c);
    loom_gpt_config_default(&c.model);
    c.model.num_layers = f.num_layers;
    c.model.hidden = f.hidden;
    c.model.heads = f.heads;
    c.model.head_size = f.kv_channels;
    c.model.query_groups = f.gqa ? f.query_groups : 0;
    c.model.ffn_hidden = f.ffn;
    c.model.seq_length = f.seq;
    c.model.max_positions = f.max_pos;
    c.model.vocab_size = f.vocab;
    c.model.divisible_by = f.divisible;
    c.model.norm = strcmp(f.normalization, "RMSNorm") == 0 ? LOOM_NORM_RMSNORM : LOOM_NORM_LAYERNORM;
    c.model.norm_eps = f.norm_eps;
    c.model.swiglu = f.swiglu;
    c.model.layernorm_1p = f.layernorm_1p;
    c.model.qk_layernorm = f.qk_layernorm;
    c.model.gelu = gelu_form(&f);
    c.model.kept_act_layers = f.kept_act;
    c.model.posemb = strcmp(f.posemb, "rope") == 0   ? LOOM_POSEMB_ROPE
                     : strcmp(f.posemb, "none") == 0 ? LOOM_POSEMB_NONE
                                                     : LOOM_POSEMB_LEARNED;
    c.model.rope_theta = f.rope_base;
    c.model.rotary_percent = f.rope_percent;
    c.model.rope_interpolation = f.rope_interp;
    if (f.rope_scaling) {
        c.model.rope_factor = f.rope_factor;
        c.model.rope_low_freq_factor = f.rope_low;
        c.model.rope_high_freq_factor = f.rope_high;
        c.model.rope_original_max_positions = f.rope_orig;
    }
    c.model.bias = !f.disable_bias;
    c.model.qkv_bias = f.qkv_bias;
    c.model.xavier_init = f.xavier;
    c.model.untie = f.untie;
    c.model.hidden_dropout = f.hidden_dropout;
    c.model.attention_dropout = f.attention_dropout;
    c.model.init_std = f.init_std;
    c.tp = f.tp;
    c.pp = f.pp;
    c.vpp_layers = f.vpp_layers;
    if (f.embed_in_split) { /* the embedding counted as a layer of the first stage */
        if (f.first_stage_layers || f.last_stage_layers || f.vpp_layers)
            FAIL("--account-for-embedding-in-pipeline-split excludes "
                 "--decoder-first/last-pipeline-num-layers and "
                 "--num-layers-per-virtual-pipeline-stage");
        if (f.pp < 2 || (f.num_layers + 1) % f.pp || (f.num_layers + 1) / f.pp < 2)
            FAIL("--account-for-embedding-in-pipeline-split: --num-layers %lld + 1 (the "
                 "embedding) must split into --pipeline-model-parallel-size %lld equal shares of "
                 "at least 2",
                 (long long)f.num_layers, (long long)f.pp);
        f.first_stage_layers = (f.num_layers + 1) / f.pp - 1;
    }
    c.model.first_stage_layers = f.first_stage_layers;
    c.model.last_stage_layers = f.last_stage_layers;
    c.sequence_parallel = f.sequence_parallel;
    c.dp_bucket_bytes = f.bucket_size > 0 ? f.bucket_size * (int64_t)sizeof(float) : f.bucket_mb << 20;
    c.micro_batch = f.micro;
    c.global_batch = f.global;
    c.train_iters = f.iters;
    c.train_samples = f.samples;
    memcpy(c.rampup, f.ramp, sizeof c.rampup);
    c.distributed_optimizer = f.dist_opt;
    c.overlap_param_gather = f.overlap_gather;
    c.eod_mask_id = f.eod_mask ? eod : -1;
    c.reset_position_ids = f.reset_pos;
    c.reset_attention_mask = f.reset_mask;
    c.doc_eod = docs ? eod : -1;
    c.per_token_loss = f.per_token_loss;
    c.lr_warmup_iters = f.warmup;
    c.lr_decay_iters = f.decay_iters;
    c.lr_warmup_samples = f.warmup_samples;
    c.lr_decay_samples = f.decay_samples;
    c.lr_wsd_decay_iters = f.wsd_iters;
    c.lr_wsd_decay_samples = f.wsd_samples;
    c.lr_warmup_fraction = loom_flags_find(flags, NFLAGS(flags), "--lr-warmup-fraction")->given
                               ? f.warmup_fraction
                               : -1.0;
    c.exit_interval = f.exit_interval;
    c.exit_duration_mins = f.exit_mins;
    c.exit_signal_handler = f.exit_signal;
    c.skip_train = f.skip_train;
    c.lr.max_lr = f.lr;
    c.lr.min_lr = f.min_lr;
    c.lr.init_lr = f.warmup_init;
    /* --decoupled-min-lr without --decoupled-lr changes nothing, as in Megatron-LM */
    c.lr.decoupled_max_lr = f.decoupled_lr;
    c.lr.decoupled_min_lr = f.decoupled_min_lr >= 0 ? f.decoupled_min_lr : f.min_lr;
    /* the three styles are CHOICE flags, spelled as these parse them */
    c.lr.style = (enum loom_lr_decay)loom_lr_style_parse(f.decay_style);
    c.lr.wsd_style = (enum loom_lr_wsd)loom_wsd_style_parse(f.wsd_style);
    c.weight_decay = f.wd;
    c.wd.start_wd = f.start_wd;
    c.wd.end_wd = f.end_wd;
    c.wd.style = (enum loom_wd_incr)loom_wd_style_parse(f.wd_style);
    c.beta1 = f.b1;
    c.beta2 = f.b2;
    c.adam_eps = f.eps;
    c.clip_grad = f.clip;
    c.seed = (uint64_t)f.seed;
    c.mock_data = f.mock;
    c.data_path = f.data_path;
    c.split = f.split;
    c.train_data_path = f.train_data_path;
    c.valid_data_path = f.valid_data_path;
    c.test_data_path = f.test_data_path;
    c.eval_interval = f.eval_interval;
    c.eval_iters = f.eval_iters;
    c.log_interval = f.log_interval;
    c.log_params_norm = f.log_params_norm;
    c.log_num_zeros = f.log_num_zeros;
    c.metrics_file = f.metrics;
    c.tensorboard_dir = f.tb_dir;
    c.tensorboard_log_interval = f.tb_interval;
    c.tb_validation_ppl = f.tb_ppl;
    c.tb_memory = f.tb_memory;
    c.tb_world_size = f.tb_world_size;
    c.tb_timers = f.tb_timers;
    c.tb_loss_scale = !f.tb_no_loss_scale;
    c.tb_learning_rate = !f.tb_no_lr;
    c.peak_tflops = f.peak;
    c.save = f.save;
    c.load = f.load;
    c.save_interval = f.save_interval;
    c.save_retain_interval = f.save_retain;
    c.weight_hash_interval = f.hash_interval;
    c.finetune = f.finetune;
    c.no_load_optim = f.no_load_optim;
    c.no_save_optim = f.no_save_optim;
    c.override_lr_schedule = f.override_sched;
    c.use_checkpoint_lr_schedule = f.use_ckpt_sched;
    c.save_grads = f.save_grads;
    c.device = f.device;
    c.comm = f.comm;
    c.bf16 = f.bf16;
    c.deterministic = f.deterministic;
    c.attention_backend = strcmp(f.attention_backend, "fused") == 0   ? LOOM_ATTN_FUSED
                          : strcmp(f.attention_backend, "flash") == 0 ? LOOM_ATTN_FLASH
                                                                      : LOOM_ATTN_AUTO;
    c.fp16 = f.fp16;
    c.loss_scale = f.loss_scale;
    c.initial_loss_scale = f.initial_loss_scale;
    c.min_loss_scale = f.min_loss_scale;
    c.loss_scale_window = f.loss_scale_window;
    c.hysteresis = f.hysteresis;
    c.notes = notes;
    /* validate the model before any work (the trainer re-checks against the layout) */
    {
        struct loom_gpt_config probe = c.model;
        if ((s = loom_gpt_config_finalize(&probe, (int)c.tp, (int)c.pp)) != LOOM_OK) goto out;
    }
    c.samples_only = samples_only;
    s = loom_train_run(&c, &argc, &argv, &collective);
out:
    /* flag and layout mistakes are found alike by every rank: rank 0 reports, all exit 1; any
     * other failure may be one rank's alone: it reports and ends the whole job */
    if (s != LOOM_OK) loom_comm_exit_error(1, collective);
    loom_comm_finalize();
    free(notes);
    return 0;
#undef FAIL
}

int loom_cmd_train(int argc, char **argv) { return train_command(argc, argv, 0); }

/* `loom samples`: the flags of `loom train`; prints the training samples the run would consume
 * instead of training (src/train/trainer.c, print_samples) */
int loom_cmd_samples(int argc, char **argv) { return train_command(argc, argv, 1); }
