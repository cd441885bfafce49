/* The training loop. One iteration:
 *   for each micro-batch of this data-parallel rank: forward, backward (gradients accumulate)
 *   -> data-parallel gradient all-reduce -> global gradient norm -> clipping -> AdamW
 * The loss minimised is the mean over every token of the global batch that carries a loss,
 * whatever the micro-batch and data-parallel split: each token's loss is scaled by 1/(those
 * tokens) before backward, and the per-rank sums are added. With --eod-mask-loss and without
 * --calculate-per-token-loss it is the mean over the global batch's micro-batches of each one's
 * mean (Megatron-LM's default): each token's loss is scaled by 1/(micro-batches x its micro-
 * batch's tokens that carry a loss). The loss logged is the mean per token either way (summed
 * token losses over their tokens), as Megatron-LM logs it.
 * Evaluations, as Megatron-LM's: every --eval-interval iterations the validation set's next
 * --eval-iters global batches (st.consumed_valid_samples, saved in checkpoints, says where they
 * start); after a finished run the validation set's next batches once more, then the test set's
 * first; each loss per token over all of its batches. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <omp.h>

#include "loom/ckpt.h"
#include "loom/comm.h"
#include "loom/data.h"
#include "loom/fileio.h"
#include "loom/log.h"
#include "loom/grad_sync.h"
#include "loom/pipeline.h"
#include "loom/tb_events.h"
#include "loom/tokenizer.h"
#include "loom/train.h"
#include "loom/settings.h"

struct trainer {
    struct loom_train_config *cfg;
    const struct loom_family *family; /* the model's (--model, or the checkpoint's) */
    const struct loom_family_config_desc *fdesc; /* its settings */
    struct loom_comm *world; /* the job's communicator; par's groups are split from it */
    struct loom_parallel par;
    struct loom_backend *be;
    struct loom_model *model;
    struct loom_adamw opt;
    struct loom_sample_source train_src, valid_src, test_src;
    int64_t save_grads_iter; /* the iteration whose gradients --save-grads writes */
    int have_valid, have_test; /* have_test: evaluated after training, as Megatron-LM's do_test */
    struct loom_train_state st;
    int64_t num_micro;           /* micro-batches per rank per iteration at the final batch */
    struct loom_batch_ramp ramp; /* the global batch over training (--rampup-batch-size) */
    struct loom_micro mb;  /* the micro-batch fetch fills (host) */
    struct loom_micro row; /* one sample (counting the tokens that carry a loss) */
    FILE *metrics;
    struct loom_tb *tb; /* --tensorboard-dir (rank 0) */
    double flops_per_token, peak_tflops;
    int peak_measured; /* peak_tflops is the sgemm probe's, raised when a step beats it (2: was) */
    int errors_collective; /* a failure now is one every rank meets alike */
    int64_t peak_mem;      /* device bytes at most held by one rank (-1: the backend cannot tell) */
    int64_t allocs_first;  /* device allocations made by the end of the first iteration */
    struct loom_loss_scaler scaler; /* fp16 only */
    int64_t skipped_since_log;
    int64_t samples_since_log; /* training samples of the iterations since the last log */
    /* each named loss's values, added over the iterations since the last log that stepped */
    double losses_since_log[LOOM_MAX_LOSSES];
    int64_t stepped_since_log; /* and their number (the log line's losses are their means) */
    /* of those, the iterations that had each loss (loss_reported) */
    int64_t had_loss_since_log[LOOM_MAX_LOSSES];
    struct loom_step_report report; /* the family's statistics at the last log (step_end) */
    int64_t batch;             /* the global batch of the last training iteration */
    double lr_decoupled;       /* its word embedding's and output layer's learning rate */
    int64_t num_zeros;         /* its gradient's elements equal to zero (-1: not counted) */
    struct loom_pipeline *pipe;
    struct loom_grad_sync *gsync;
    int64_t state_floats[3]; /* kept between steps: parameters, gradients, optimizer state */
    int64_t step_bytes[4]; /* tp, pp, dp, embedding bytes of the last training step */
    double pipe_busy_s, pipe_wait_s; /* pipeline compute and wait time since the last log */
    double start_s;                  /* when setup began (--exit-duration-in-mins) */
};

/* The micro-batch's host arrays, every field a family may read */
static enum loom_status micro_alloc(struct loom_micro *mb, int64_t B, int64_t T) {
    const size_t n = (size_t)(B * T) * sizeof(int32_t);
    mb->B = B;
    mb->T = T;
    mb->tokens = malloc(n);
    mb->labels = malloc(n);
    mb->token_types = calloc(1, n);
    mb->padding_mask = malloc(n);
    mb->sop_labels = calloc((size_t)B, sizeof(int32_t));
    if (!mb->tokens || !mb->labels || !mb->token_types || !mb->padding_mask || !mb->sop_labels)
        return loom_fail(LOOM_ERR_OOM, "out of memory for a micro-batch of %lld x %lld",
                         (long long)B, (long long)T);
    for (int64_t i = 0; i < B * T; i++) mb->padding_mask[i] = 1;
    return LOOM_OK;
}

static void micro_free(struct loom_micro *mb) {
    free(mb->tokens);
    free(mb->labels);
    free(mb->token_types);
    free(mb->padding_mask);
    free(mb->sop_labels);
}

/* --exit-signal-handler: SIGTERM (a scheduler's notice before it ends the job) sets this, and
 * the training loop stops at the end of the iteration. */
static volatile sig_atomic_t g_sigterm;
static void on_sigterm(int sig) {
    (void)sig;
    g_sigterm = 1;
}

/* Micro-batch k of this DP rank in the global batch starting at `batch_base`: samples
 * batch_base + (k*dp + dp_rank)*B + b, as Megatron's pretraining sampler. With --eod-mask-loss
 * the positions whose input is the end-of-document token get no loss (target -1), as
 * Megatron-LM's loss mask. */
struct fetch_ctx {
    struct trainer *t;
    struct loom_sample_source *src;
    int64_t base;
};

/* Row b of a micro-batch from global sample `index` of src: every field, as the source fills
 * them, then with --eod-mask-loss no label where the input is the end-of-document token (GPT's;
 * the flag is refused for families whose samples have no such token) */
static enum loom_status fill_row(struct trainer *t, struct loom_sample_source *src, int64_t index,
                                 struct loom_micro *mb, int64_t b) {
    const int64_t T = mb->T;
    LOOM_CHECK(src->fill(src->ctx, index, mb, b));
    if (t->cfg->eod_mask_id >= 0)
        for (int64_t i = 0; i < T; i++)
            if (mb->tokens[b * T + i] == t->cfg->eod_mask_id) mb->labels[b * T + i] = -1;
    return LOOM_OK;
}

static enum loom_status fetch_micro(void *vctx, int64_t k, struct loom_micro *mb) {
    struct fetch_ctx *f = vctx;
    const int64_t dp = loom_dp_size(&f->t->par), dpr = loom_dp_rank(&f->t->par);
    mb->sample0 = (k * dp + dpr) * mb->B;
    for (int64_t b = 0; b < mb->B; b++)
        LOOM_CHECK(fill_row(f->t, f->src, f->base + mb->sample0 + b, mb, b));
    return LOOM_OK;
}

static void print_ints(FILE *f, const char *key, const int32_t *v, int64_t n) {
    fprintf(f, ", \"%s\": [", key);
    for (int64_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", v[i]);
    fputc(']', f);
}

/* `loom samples`: the training samples the run would consume, in consumption order (iteration by
 * iteration, each global batch's samples by index: data-parallel rank r's micro-batch k holds
 * its samples (k x DP + r) x B on), one JSON line each with every field a model reads:
 * {"iteration", "sample", "tokens", "labels" (-1: no loss), "loss_mask", "token_types",
 * "padding_mask", "sop_label"}. From the first iteration, also with --load. */
static enum loom_status print_samples(struct trainer *t, FILE *out) {
    struct loom_train_config *c = t->cfg;
    struct loom_micro mb;
    LOOM_CHECK(micro_alloc(&mb, 1, c->model.seq_length));
    const int64_t T = mb.T;
    int32_t *mask = malloc((size_t)T * sizeof(int32_t));
    enum loom_status s = mask ? LOOM_OK : loom_fail(LOOM_ERR_OOM, "out of memory");
    int64_t consumed = 0;
    for (int64_t it = 1; it <= c->train_iters && s == LOOM_OK; it++) {
        const int64_t batch = loom_batch_at(&t->ramp, consumed);
        for (int64_t n = 0; n < batch && s == LOOM_OK; n++) {
            if ((s = fill_row(t, &t->train_src, consumed + n, &mb, 0)) != LOOM_OK) break;
            for (int64_t i = 0; i < T; i++) mask[i] = mb.labels[i] >= 0;
            fprintf(out, "{\"iteration\": %lld, \"sample\": %lld", (long long)it,
                    (long long)(consumed + n));
            print_ints(out, "tokens", mb.tokens, T);
            print_ints(out, "labels", mb.labels, T);
            print_ints(out, "loss_mask", mask, T);
            print_ints(out, "token_types", mb.token_types, T);
            print_ints(out, "padding_mask", mb.padding_mask, T);
            fprintf(out, ", \"sop_label\": %d}\n", mb.sop_labels[0]);
        }
        consumed += batch;
    }
    if (s == LOOM_OK && (fflush(out) != 0 || ferror(out)))
        s = loom_fail(LOOM_ERR_IO, "loom samples: writing the samples failed");
    free(mask);
    micro_free(&mb);
    return s;
}

/* The tokens of the global batch [base, base + batch) that carry a loss: all of them for a source
 * whose every position does (GPT's) without --eod-mask-loss, else those with a label (counted by
 * every rank from the samples alike, so the loss is the mean over them on every rank). */
static enum loom_status loss_tokens(struct trainer *t, struct loom_sample_source *src,
                                    int64_t base, int64_t batch, int64_t *count) {
    const int64_t T = t->cfg->model.seq_length;
    *count = batch * T;
    if (src->all_labels && t->cfg->eod_mask_id < 0) return LOOM_OK;
    for (int64_t n = 0; n < batch; n++) {
        LOOM_CHECK(fill_row(t, src, base + n, &t->row, 0));
        for (int64_t i = 0; i < T; i++) *count -= t->row.labels[i] < 0;
    }
    return LOOM_OK;
}

/* Forward (and backward when training) over this rank's micro-batches of one global batch of
 * `batch` samples, through the pipeline schedule. The gradient is that of the mean over the
 * global batch's tokens that carry a loss, or with a loss mask and without
 * --calculate-per-token-loss of the mean over the micro-batches of each one's mean (Megatron-LM's
 * two normalisations; the same without a mask). Returns the global batch's summed token losses
 * and their tokens, from which the loss is reported per token either way, as Megatron-LM
 * reports it. */
static enum loom_status run_batch(struct trainer *t, struct loom_sample_source *src, int64_t base,
                                  int64_t batch, int64_t iteration, int training,
                                  struct loom_losses *losses) {
    struct loom_train_config *c = t->cfg;
    const int64_t num_micro = batch / (c->micro_batch * loom_dp_size(&t->par));
    /* the family's rule (BERT: always), or GPT's with a loss mask */
    const int per_micro = t->family->micro_mean || (c->eod_mask_id >= 0 && !c->per_token_loss);
    int64_t tokens = 0;
    if (training && !per_micro) LOOM_CHECK(loss_tokens(t, src, base, batch, &tokens));
    struct loom_step_ctx ctx = {
        .seed = c->seed,
        .iteration = iteration,
        .training = training,
        /* d(mean loss)/d(each token's loss); a batch wholly masked has no gradient. Per
         * micro-batch: 1 / the global batch's micro-batches, the pipeline dividing it by each
         * micro-batch's tokens that carry a loss */
        .dloss = per_micro    ? (float)(1.0 / (double)(num_micro * loom_dp_size(&t->par)))
                 : tokens > 0 ? (float)(1.0 / (double)tokens)
                              : 0.0f,
        .per_micro_mean = per_micro,
        .doc_eod = (int32_t)c->doc_eod,
        .reset_position_ids = c->reset_position_ids,
        .reset_attention_mask = c->reset_attention_mask,
        /* the auxiliary losses of each micro-batch (MoE's): its share of the step, as
         * Megatron-LM scales them (1 / the micro-batches) */
        .aux_scale = training ? 1.0 / (double)(num_micro * loom_dp_size(&t->par)) : 0.0,
    };
    if (training && c->fp16) {
        ctx.dloss = (float)(ctx.dloss * t->scaler.scale);
        ctx.aux_scale *= t->scaler.scale;
    }
    struct fetch_ctx fc = {t, src, base};
    struct loom_pipeline_stats ps;
    if (training) loom_grad_sync_begin(t->gsync);
    /* sharded parameters: the run gathers each unit's where it uses them */
    LOOM_CHECK(loom_grad_sync_shard_params(t->gsync));
    LOOM_CHECK(loom_pipeline_run(t->pipe, t->model, num_micro, training, t->gsync, &ctx,
                                 fetch_micro, &fc, &t->mb, &ps));
    t->pipe_busy_s += ps.busy_s;
    t->pipe_wait_s += ps.wait_s;
    /* the losses live on the last stage; every data-parallel rank holds a share: sums and
     * counts of each loss, [sum, count] pairs */
    const int nl = t->model->family->num_losses;
    /* --check-for-nan-in-loss-and-grad: this rank's own share, before the sums (Megatron-LM's
     * check of the local forward loss) */
    for (int i = 0; training && c->check_nan && i < nl; i++)
        if (!isfinite(ps.losses.sum[i]))
            return loom_fail(LOOM_ERR_INTERNAL, "rank %d: found %s in local forward loss "
                             "calculation at iteration %lld (--check-for-nan-in-loss-and-grad)",
                             t->par.rank, isnan(ps.losses.sum[i]) ? "NaN" : "Inf",
                             (long long)iteration);
    double sums[2 * LOOM_MAX_LOSSES];
    for (int i = 0; i < nl; i++) {
        sums[2 * i] = ps.losses.sum[i];
        sums[2 * i + 1] = ps.losses.count[i];
    }
    if (loom_pp_size(&t->par) > 1)
        LOOM_CHECK(loom_comm_allreduce(t->par.group[LOOM_PDIM_PP], sums, 2 * nl, LOOM_DTYPE_F64,
                                       LOOM_REDOP_SUM));
    if (loom_dp_size(&t->par) > 1)
        LOOM_CHECK(loom_comm_allreduce(t->par.group[LOOM_PDIM_DP], sums, 2 * nl, LOOM_DTYPE_F64,
                                       LOOM_REDOP_SUM));
    memset(losses, 0, sizeof *losses);
    for (int i = 0; i < nl; i++) {
        losses->sum[i] = sums[2 * i];
        losses->count[i] = sums[2 * i + 1];
    }
    return LOOM_OK;
}

/* The value of loss i (its sum over its terms; 0 when no term carries it) */
static double loss_value(const struct loom_losses *l, int i) {
    return l->count[i] > 0 ? l->sum[i] / l->count[i] : 0.0;
}

/* Whether loss i of l is reported (the log line, metrics, TensorBoard): a family's only loss
 * always; of several, those with terms (BERT's sop loss has none without its binary head) */
static int loss_reported(const struct trainer *t, const struct loom_losses *l, int i) {
    return t->family->num_losses == 1 || l->count[i] > 0;
}

/* The loss the model minimises: the sum of its named losses' values */
static double total_loss(const struct trainer *t, const struct loom_losses *l) {
    double v = 0.0;
    for (int i = 0; i < t->model->family->num_losses; i++)
        if (!(t->model->family->measures >> i & 1u)) v += loss_value(l, i);
    return v;
}

/* The first and last pipeline stages each hold a tied parameter (LOOM_ROLE_TIED: the word
 * embedding tied to the output layer): sum their gradients. */
static enum loom_status sync_tied(struct trainer *t) {
    struct loom_model *m = t->model;
    if (loom_pp_size(&t->par) == 1 || !t->par.embedding) return LOOM_OK;
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local || !(p->roles & LOOM_ROLE_TIED)) continue;
        LOOM_CHECK(loom_comm_allreduce(t->par.embedding, m->grad_mem + p->offset,
                                       p->local_shape[0] * p->local_shape[1], LOOM_DTYPE_F32,
                                       LOOM_REDOP_SUM));
    }
    return LOOM_OK;
}

/* Finish the data-parallel reduction the backward pass started: the final norm's sequence-
 * parallel sum and the tied embedding's sum over the stages first (neither is part of a layer,
 * so neither is reduced yet: with the distributed optimizer the reduction leaves a rank only its
 * pieces' sums). */
static enum loom_status sync_grads(struct trainer *t) {
    LOOM_CHECK(loom_model_sync_tp_partial(t->model, LOOM_UNIT_LAST));
    LOOM_CHECK(sync_tied(t));
    return loom_grad_sync_finish(t->gsync);
}

/* The losses of --eval-iters global batches of src, from its sample `first`: each named loss's
 * summed terms and their count over all the batches (its value per term, as Megatron-LM's
 * evaluation adds them up) */
static enum loom_status evaluate(struct trainer *t, struct loom_sample_source *src, int64_t first,
                                 int64_t iteration, struct loom_losses *out) {
    struct loom_losses total = {{0}, {0}};
    for (int64_t i = 0; i < t->cfg->eval_iters; i++) {
        struct loom_losses l;
        LOOM_CHECK(run_batch(t, src, first + i * t->cfg->global_batch, t->cfg->global_batch,
                             iteration, 0, &l));
        for (int k = 0; k < LOOM_MAX_LOSSES; k++) {
            total.sum[k] += l.sum[k];
            total.count[k] += l.count[k];
        }
    }
    *out = total;
    return LOOM_OK;
}

/* A rough achievable fp32 peak of this CPU, from a 512^3 sgemm, to give MFU a denominator. */
static double measure_cpu_peak_tflops(void) {
    const int n = 512;
    float *a = calloc((size_t)n * n, sizeof(float)), *b = calloc((size_t)n * n, sizeof(float)),
          *cc = calloc((size_t)n * n, sizeof(float));
    if (!a || !b || !cc) return 0;
    for (int i = 0; i < n * n; i++) a[i] = b[i] = 1.0f / (float)(1 + i % 7);
    /* all cores, as the step's products use them (the backend runs OpenBLAS single-threaded
     * per OpenMP thread, which may have left OpenBLAS at one thread) */
    int saved = openblas_get_num_threads();
    openblas_set_num_threads(omp_get_max_threads());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, cc, n);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = loom_time_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, cc, n);
        double dt = loom_time_s() - t0;
        if (dt < best) best = dt;
    }
    openblas_set_num_threads(saved);
    free(a);
    free(b);
    free(cc);
    return 2.0 * n * n * (double)n / best / 1e12;
}

/* Bytes this rank sent through a group since its counters were reset (every collective kind). */
static int64_t group_bytes(struct loom_comm *c) {
    int64_t n = 0;
    if (!c) return 0;
    for (int k = 0; k < LOOM_COLL_COUNT; k++) n += loom_comm_bytes(c, (enum loom_coll)k);
    return n;
}

static void reset_comm_counters(struct trainer *t) {
    for (int d = 0; d < LOOM_PDIM_COUNT; d++)
        if (t->par.group[d]) loom_comm_reset_counters(t->par.group[d]);
    if (t->par.embedding) loom_comm_reset_counters(t->par.embedding);
}

/* The log lines of an evaluation's losses, Megatron-LM's: each named loss's value and perplexity
 * (capped at e^20, as there), on_set naming the set after training */
static void log_validation(const struct trainer *t, int64_t it, const char *on_set,
                           const struct loom_losses *l) {
    char line[512];
    int n = snprintf(line, sizeof line, " validation loss at iteration %lld%s%s | ", (long long)it,
                     on_set ? " on " : "", on_set ? on_set : "");
    for (int i = 0; i < t->family->num_losses && n < (int)sizeof line; i++) {
        if (!loss_reported(t, l, i)) continue;
        const char *name = t->family->loss_names[i];
        const double v = loss_value(l, i);
        if (t->family->measures >> i & 1u)
            n += snprintf(line + n, sizeof line - (size_t)n, "%s: %.6f | ", name, v);
        else
            n += snprintf(line + n, sizeof line - (size_t)n, "%s value: %.6E | %s PPL: %.6E | ",
                          name, v, name, exp(fmin(20.0, v)));
    }
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    char rule[514];
    const int w = n + 1 < (int)sizeof rule ? n + 1 : (int)sizeof rule - 1;
    memset(rule, '-', (size_t)w);
    rule[w] = 0;
    loom_log_info("%s", rule);
    loom_log_info("%s", line);
    loom_log_info("%s", rule);
}

/* An iteration's scalars to TensorBoard, Megatron-LM's tags, each against the iteration and
 * (" vs samples") the training samples consumed: at tb_now the training ones, at log_now (the
 * log line's iterations) the iteration time in seconds with --log-timers-to-tensorboard. */
static enum loom_status tb_iteration(struct trainer *t, int tb_now, int log_now, double lr,
                                     const struct loom_losses *losses, double loss, double gnorm,
                                     double pnorm, double ms) {
    const struct loom_train_config *c = t->cfg;
    struct loom_tb *tb = t->tb;
    const int64_t it = t->st.iteration, samples = t->st.consumed_samples;
    struct {
        const char *tag;
        double value;
        int on;
    } vs[] = {
        {"learning-rate", lr, c->tb_learning_rate},
        {"batch-size", (double)t->batch, 1},
        /* the family's losses by name (one: the step's loss) */
        {"lm loss", loss, isfinite(loss)},
        {NULL, 0, 0},
        {NULL, 0, 0},
        {NULL, 0, 0},
        {"loss-scale", c->fp16 ? t->scaler.scale : 1.0, c->tb_loss_scale},
        {"world-size", (double)t->par.world_size, c->tb_world_size},
        {"grad-norm", gnorm, isfinite(gnorm)},
        {"num-zeros", (double)t->num_zeros, t->num_zeros >= 0},
        {"params-norm", pnorm, pnorm >= 0},
    };
    const int nl = t->family->num_losses;
    for (int i = 0; nl > 1 && i < nl; i++) {
        vs[2 + i].tag = t->family->loss_names[i];
        vs[2 + i].value = loss_value(losses, i);
        vs[2 + i].on = loss_reported(t, losses, i) && isfinite(vs[2 + i].value);
    }
    for (int i = 0; tb_now && i < (int)(sizeof vs / sizeof vs[0]); i++) {
        if (!vs[i].tag || !vs[i].on) continue;
        char vs_tag[64];
        snprintf(vs_tag, sizeof vs_tag, "%s vs samples", vs[i].tag);
        LOOM_CHECK(loom_tb_scalar(tb, vs[i].tag, vs[i].value, it));
        LOOM_CHECK(loom_tb_scalar(tb, vs_tag, vs[i].value, samples));
    }
    if (tb_now && c->lr.decoupled_max_lr >= 0) /* Megatron-LM writes it against iterations only */
        LOOM_CHECK(loom_tb_scalar(tb, "decoupled-learning-rate", t->lr_decoupled, it));
    if (tb_now && c->tb_memory && t->be->ops->memory_stats) {
        struct loom_mem_stats ms_now;
        t->be->ops->memory_stats(t->be, &ms_now);
        LOOM_CHECK(loom_tb_scalar(tb, "mem-allocated-bytes", (double)ms_now.in_use, it));
        LOOM_CHECK(loom_tb_scalar(tb, "mem-max-allocated-bytes", (double)ms_now.peak, it));
    }
    if (log_now && c->tb_timers) LOOM_CHECK(loom_tb_scalar(tb, "iteration-time", ms / 1000.0, it));
    return loom_tb_flush(tb);
}

/* A validation loss to TensorBoard, under Megatron-LM's tags (its test-set loss too: it writes
 * both through the same function), against the iteration and the training samples consumed */
static enum loom_status tb_validation(struct trainer *t, const struct loom_losses *l) {
    if (!t->tb) return LOOM_OK;
    const int64_t it = t->st.iteration, samples = t->st.consumed_samples;
    for (int i = 0; i < t->family->num_losses; i++) { /* "<loss name> validation", ... */
        if (!loss_reported(t, l, i)) continue;
        const char *name = t->family->loss_names[i];
        const double loss = loss_value(l, i);
        char tag[128];
        snprintf(tag, sizeof tag, "%s validation", name);
        LOOM_CHECK(loom_tb_scalar(t->tb, tag, loss, it));
        snprintf(tag, sizeof tag, "%s validation vs samples", name);
        LOOM_CHECK(loom_tb_scalar(t->tb, tag, loss, samples));
        if (t->cfg->tb_validation_ppl && !(t->family->measures >> i & 1u)) {
            const double ppl = exp(fmin(20.0, loss));
            snprintf(tag, sizeof tag, "%s validation ppl", name);
            LOOM_CHECK(loom_tb_scalar(t->tb, tag, ppl, it));
            snprintf(tag, sizeof tag, "%s validation ppl vs samples", name);
            LOOM_CHECK(loom_tb_scalar(t->tb, tag, ppl, samples));
        }
    }
    return loom_tb_flush(t->tb);
}

/* With --metrics-file and a family of several losses, each one's value as `"<prefix><name>":
 * value` after the object's other keys (prefix "" for an iteration's, "val_" or "test_" for an
 * evaluation's) */
static void metrics_losses(const struct trainer *t, const char *prefix,
                           const struct loom_losses *l) {
    if (t->family->num_losses < 2) return;
    for (int i = 0; i < t->family->num_losses; i++) {
        if (!loss_reported(t, l, i)) continue;
        const double v = loss_value(l, i);
        if (isfinite(v))
            fprintf(t->metrics, ", \"%s%s\": %.17g", prefix, t->family->loss_names[i], v);
        else
            fprintf(t->metrics, ", \"%s%s\": null", prefix, t->family->loss_names[i]);
    }
}

/* An evaluation's loss on its own: its log lines (on_set as log_validation's) and, with
 * --metrics-file, {"iteration", key} */
static void report_evaluation(struct trainer *t, const char *on_set, const char *key,
                              const struct loom_losses *l) {
    const int64_t it = t->st.iteration;
    log_validation(t, it, on_set, l);
    if (t->metrics) {
        fprintf(t->metrics, "{\"iteration\": %lld, \"%s\": %.17g", (long long)it, key,
                total_loss(t, l));
        metrics_losses(t, strcmp(key, "test_loss") == 0 ? "test_" : "val_", l);
        fprintf(t->metrics, "}\n");
        fflush(t->metrics);
    }
}

/* An evaluation outside the training loop (after training, or --skip-train) of src from its
 * sample `first`, reported by report_evaluation */
static enum loom_status evaluate_logged(struct trainer *t, struct loom_sample_source *src,
                                        int64_t first, const char *on_set, const char *key) {
    struct loom_losses l;
    LOOM_CHECK(evaluate(t, src, first, t->st.iteration, &l));
    report_evaluation(t, on_set, key, &l);
    if (!t->cfg->skip_train) LOOM_CHECK(tb_validation(t, &l)); /* as Megatron-LM: not then */
    return LOOM_OK;
}

/* The next evaluation of the validation set: --eval-iters batches from where the last one
 * stopped (Megatron-LM's validation iterator runs on across evaluations), logged as in the loop
 * (*val, on_set NULL) or, after training, by evaluate_logged. */
static enum loom_status evaluate_next_valid(struct trainer *t, const char *on_set,
                                            struct loom_losses *val) {
    const int64_t first = t->st.consumed_valid_samples;
    t->st.consumed_valid_samples += t->cfg->eval_iters * t->cfg->global_batch;
    if (on_set) return evaluate_logged(t, &t->valid_src, first, on_set, "val_loss");
    return evaluate(t, &t->valid_src, first, t->st.iteration, val);
}

/* After training (or with --skip-train), the loss of the validation set once more, then of the
 * test set from its start, when there are such sets (Megatron-LM's order and prefixes) */
static enum loom_status evaluate_after(struct trainer *t) {
    if (t->cfg->eval_iters <= 0) return LOOM_OK;
    if (t->have_valid) LOOM_CHECK(evaluate_next_valid(t, "validation set", NULL));
    if (!t->have_test) return LOOM_OK;
    return evaluate_logged(t, &t->test_src, 0, "test set", "test_loss");
}

/* pnorm: the parameters' norm (--log-params-norm), or < 0 when not logged */
static void log_iteration(struct trainer *t, int64_t it, int64_t iters, double ms, double lr,
                          const struct loom_losses *losses, double loss, double gnorm,
                          double pnorm, const struct loom_losses *val) {
    struct loom_train_config *c = t->cfg;
    /* the tokens of an iteration since the last log, on average (the batch may ramp up) */
    double tokens = (double)t->samples_since_log / (double)iters * (double)c->model.seq_length;
    const int64_t batch = t->batch;
    double tps = tokens / (ms / 1000.0);
    double tflops = tps * t->flops_per_token / 1e12 / t->par.world_size;
    if (t->peak_measured && tflops > t->peak_tflops) {
        /* the probe ran while the cores were busy elsewhere: the best a step reached is a
         * better lower bound of the peak (said once) */
        if (t->peak_measured == 1)
            loom_log_info("loom: a step reached %.3f TFLOP/s, above the %.3f measured at start "
                          "(a busy machine then?): MFU is now against the best step's figure; "
                          "--peak-tflops sets the peak",
                          tflops, t->peak_tflops);
        t->peak_measured = 2;
        t->peak_tflops = tflops;
    }
    double mfu = t->peak_tflops > 0 ? 100.0 * tflops / t->peak_tflops : 0.0;
    time_t now = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&now));
    char params_s[48] = "", loss_s[320] = "", dlr_s[48] = "", zeros_s[40] = "";
    if (c->lr.decoupled_max_lr >= 0)
        snprintf(dlr_s, sizeof dlr_s, " | decoupled learning rate: %.6E", t->lr_decoupled);
    if (pnorm >= 0) snprintf(params_s, sizeof params_s, " | params norm: %.3f", pnorm);
    if (t->num_zeros >= 0)
        snprintf(zeros_s, sizeof zeros_s, " | num zeros: %lld", (long long)t->num_zeros);
    /* as Megatron-LM's line: each named loss's mean over the iterations since the last log that
     * took an optimizer step (none when every one was skipped) */
    for (int i = 0; t->stepped_since_log > 0 && i < t->family->num_losses; i++)
        if (t->family->num_losses == 1 || t->had_loss_since_log[i] > 0)
            snprintf(loss_s + strlen(loss_s), sizeof loss_s - strlen(loss_s),
                     t->family->measures >> i & 1u ? " | %s: %.4f" : " | %s: %.6E",
                     t->family->loss_names[i],
                     t->losses_since_log[i] / (double)(t->family->num_losses == 1
                                                           ? t->stepped_since_log
                                                           : t->had_loss_since_log[i]));
    loom_log_info(
        " [%s] iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per "
        "iteration (ms): %.1f | learning rate: %.6E%s | global batch size: %5lld%s | grad norm: "
        "%.3f%s%s | tokens/s: %.0f | TFLOP/s per rank: %.3f | MFU: %.1f%%",
        stamp, (long long)it, (long long)c->train_iters, (long long)t->st.consumed_samples, ms, lr,
        dlr_s, (long long)batch, loss_s, gnorm, zeros_s, params_s, tps, tflops, mfu);
    /* the family's own statistics (MoE: the balancing and z-losses, the expert load) */
    if (t->report.n > 0) {
        char aux_s[256] = "";
        for (int i = 0; i < t->report.n; i++)
            snprintf(aux_s + strlen(aux_s), sizeof aux_s - strlen(aux_s), "%s %s: %.6E",
                     i ? " |" : "", t->report.names[i], t->report.values[i]);
        loom_log_info("%s", aux_s);
    }
    if (t->report.lines) loom_log_info("%s", t->report.lines);
    if (t->peak_mem >= 0)
        loom_log_info(" peak device memory per rank: %.1f MiB", (double)t->peak_mem / 1048576.0);
    if (t->cfg->fp16)
        loom_log_info(" loss scale: %.1f | number of skipped iterations: %3lld", t->scaler.scale,
                      (long long)t->skipped_since_log);
    if (val) log_validation(t, it, NULL, val);
    if (t->metrics) {
        /* JSON has no inf or nan: a non-finite value (an overflowing --fp16 step) is null */
        char loss_s[32] = "null", gnorm_s[32] = "null";
        if (isfinite(loss)) snprintf(loss_s, sizeof loss_s, "%.17g", loss);
        if (isfinite(gnorm)) snprintf(gnorm_s, sizeof gnorm_s, "%.17g", gnorm);
        fprintf(t->metrics,
                "{\"iteration\": %lld, \"consumed_samples\": %lld, \"lr\": %.17g, \"loss\": %s, "
                "\"grad_norm\": %s, \"ms_per_iter\": %.4f, \"tokens_per_s\": %.2f, "
                "\"tflops_per_rank\": %.6g, \"mfu\": %.6g",
                (long long)it, (long long)t->st.consumed_samples, lr, loss_s, gnorm_s, ms, tps,
                tflops, mfu / 100.0);
        metrics_losses(t, "", losses);
        if (val) fprintf(t->metrics, ", \"val_loss\": %.17g", total_loss(t, val));
        if (val) metrics_losses(t, "val_", val);
        if (t->ramp.start > 0)
            fprintf(t->metrics, ", \"global_batch_size\": %lld", (long long)batch);
        for (int i = 0; i < t->report.n; i++)
            fprintf(t->metrics, ", \"%s\": %.17g", t->report.names[i], t->report.values[i]);
        if (t->report.metrics) fprintf(t->metrics, ", %s", t->report.metrics);
        if (pnorm >= 0) fprintf(t->metrics, ", \"params_norm\": %.17g", pnorm);
        if (t->num_zeros >= 0)
            fprintf(t->metrics, ", \"num_zeros\": %lld", (long long)t->num_zeros);
        if (c->lr.decoupled_max_lr >= 0)
            fprintf(t->metrics, ", \"decoupled_lr\": %.17g", t->lr_decoupled);
        if (c->wd.style != LOOM_WD_CONSTANT)
            fprintf(t->metrics, ", \"weight_decay\": %.17g", t->opt.weight_decay);
        if (t->cfg->fp16)
            fprintf(t->metrics, ", \"loss_scale\": %.17g, \"skipped_iterations\": %lld",
                    t->scaler.scale, (long long)t->skipped_since_log);
        if (t->peak_mem >= 0) fprintf(t->metrics, ", \"peak_mem_bytes\": %lld", (long long)t->peak_mem);
        /* rank 0's traffic in this iteration (training step only; validation excluded) */
        /* rank 0's parameters, gradients and optimizer state kept between steps */
        fprintf(t->metrics, ", \"state_bytes\": {\"params\": %lld, \"grads\": %lld, "
                "\"optim\": %lld}", (long long)t->state_floats[0] * 4,
                (long long)t->state_floats[1] * 4, (long long)t->state_floats[2] * 4);
        fprintf(t->metrics, ", \"comm_bytes\": {\"tp\": %lld, \"pp\": %lld, \"dp\": %lld, "
                "\"embedding\": %lld}", (long long)t->step_bytes[0], (long long)t->step_bytes[1],
                (long long)t->step_bytes[2], (long long)t->step_bytes[3]);
        if (t->pipe_busy_s + t->pipe_wait_s > 0)
            fprintf(t->metrics, ", \"pipeline_wait_fraction\": %.6g",
                    t->pipe_wait_s / (t->pipe_busy_s + t->pipe_wait_s));
        fprintf(t->metrics, "}\n");
        fflush(t->metrics);
    }
}

/* The global batch over training: constant, or ramped up by --rampup-batch-size (each of its
 * batches must split into micro-batches evenly over the data-parallel ranks, and for the
 * interleaved schedule into a multiple of the pipeline stages: checked here for all of them,
 * where Megatron-LM checks each as the ramp reaches it). */
static enum loom_status batch_ramp(struct trainer *t, int vpp) {
    struct loom_train_config *c = t->cfg;
    const int64_t dp = loom_dp_size(&t->par), per = c->micro_batch * dp;
    t->ramp = (struct loom_batch_ramp){c->rampup[0], c->rampup[1], c->rampup[2], c->global_batch};
    if (t->ramp.start <= 0) return LOOM_OK;
    char flag[96]; /* the flag as given, for the messages */
    snprintf(flag, sizeof flag, "--rampup-batch-size %lld %lld %lld", (long long)c->rampup[0],
             (long long)c->rampup[1], (long long)c->rampup[2]);
    if (t->ramp.start > c->global_batch || (c->global_batch - t->ramp.start) % t->ramp.increment)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "%s: the ramp must reach --global-batch-size %lld from START by whole "
                         "INCREMENTs",
                         flag, (long long)c->global_batch);
    for (int64_t b = t->ramp.start; b < c->global_batch; b += t->ramp.increment) {
        if (b % per)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "%s: its global batch %lld is not a multiple of --micro-batch-size "
                             "%lld x data-parallel size %lld",
                             flag, (long long)b, (long long)c->micro_batch, (long long)dp);
        if (vpp > 1 && (b / per) % c->pp)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "%s: its global batch %lld makes %lld micro-batches per rank; the "
                             "interleaved schedule needs a multiple of "
                             "--pipeline-model-parallel-size %lld",
                             flag, (long long)b, (long long)(b / per), (long long)c->pp);
    }
    return LOOM_OK;
}

/* The training length and the learning-rate schedule's steps, once the global batch is known.
 * The schedule counts samples whether training is counted in iterations or in samples (an
 * iteration's count is times the global batch), as Megatron's get_optimizer_param_scheduler. */
static enum loom_status schedule_length(struct trainer *t) {
    struct loom_train_config *c = t->cfg;
    struct loom_lr_schedule *s = &c->lr;
    const int64_t gbs = c->global_batch;
    int64_t per = gbs; /* samples per unit of the flags (for messages) */
    const char *unit = "iterations", *decay_flag = "--lr-decay-iters", *len_flag = "--train-iters";
    if (c->train_samples > 0) {
        int64_t end;
        c->train_iters = loom_batch_ramp_iters(&t->ramp, c->train_samples, &end);
        if (c->train_iters < 1 && t->ramp.start > 0)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "--train-samples %lld ends inside the batch-size ramp-up "
                             "(--rampup-batch-size %lld %lld %lld takes %lld samples to reach "
                             "--global-batch-size %lld)",
                             (long long)c->train_samples, (long long)t->ramp.start,
                             (long long)t->ramp.increment, (long long)t->ramp.samples,
                             (long long)end, (long long)c->global_batch);
        if (c->train_iters < 1)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "--train-samples %lld is less than one global "
                             "batch (--global-batch-size %lld)",
                             (long long)c->train_samples, (long long)c->global_batch);
        s->decay_steps = c->lr_decay_samples > 0 ? c->lr_decay_samples : c->train_samples;
        s->warmup_steps = (double)c->lr_warmup_samples;
        s->wsd_decay_steps = c->lr_wsd_decay_samples;
        per = 1, unit = "samples", decay_flag = "--lr-decay-samples", len_flag = "--train-samples";
    } else {
        s->decay_steps = (c->lr_decay_iters > 0 ? c->lr_decay_iters : c->train_iters) * gbs;
        s->warmup_steps = (double)(c->lr_warmup_iters * gbs);
        s->wsd_decay_steps = c->lr_wsd_decay_iters * gbs;
    }
    if (s->style == LOOM_LR_WSD && s->wsd_decay_steps <= 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--lr-decay-style WSD needs %s, positive",
                         c->train_samples > 0 ? "--lr-wsd-decay-samples" : "--lr-wsd-decay-iters");
    c->wd.incr_steps = c->train_samples > 0 ? c->train_samples : c->train_iters * gbs;
    if (c->lr_warmup_fraction >= 0)
        s->warmup_steps = c->lr_warmup_fraction * (double)s->decay_steps;
    if (s->warmup_steps > (double)s->decay_steps)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "the learning-rate warmup (%g %s) must end by the "
                         "end of the decay (%lld %s: %s, or %s)",
                         s->warmup_steps / (double)per, unit, (long long)(s->decay_steps / per),
                         unit, decay_flag, len_flag);
    return LOOM_OK;
}

/* On resume, the schedule against the one the checkpoint was saved with (its peak and final
 * rates, warmup and decay in samples, style, and the weight decay's), as Megatron's scheduler
 * checks them: equal, or
 * --override-opt_param-scheduler keeps the flags', or --use-checkpoint-opt_param-scheduler takes
 * the checkpoint's. Not with --finetune or --no-load-optim (the schedule starts afresh), nor for
 * a checkpoint that recorded none. */
static enum loom_status schedule_from_checkpoint(struct trainer *t,
                                                 const struct loom_train_state *st) {
    struct loom_train_config *c = t->cfg;
    struct loom_lr_schedule *s = &c->lr;
    if (!st->has_lr || c->finetune || c->no_load_optim || c->override_lr_schedule) return LOOM_OK;
    if (c->use_checkpoint_lr_schedule) {
        s->max_lr = st->lr.max_lr;
        s->min_lr = st->lr.min_lr;
        s->warmup_steps = st->lr.warmup_steps;
        s->decay_steps = st->lr.decay_steps;
        s->style = st->lr.style;
        s->decoupled_max_lr = st->lr.decoupled_max_lr;
        s->decoupled_min_lr = st->lr.decoupled_min_lr;
        if (st->lr.wsd_decay_steps >= 0) {
            s->wsd_decay_steps = st->lr.wsd_decay_steps;
            s->wsd_style = st->lr.wsd_style;
        }
        c->wd = st->wd;
        return LOOM_OK;
    }
    char what[192] = "";
    if (s->max_lr != st->lr.max_lr)
        snprintf(what, sizeof what, "--lr %g here, %g there", s->max_lr, st->lr.max_lr);
    else if (s->min_lr != st->lr.min_lr)
        snprintf(what, sizeof what, "--min-lr %g here, %g there", s->min_lr, st->lr.min_lr);
    else if (s->decoupled_max_lr != st->lr.decoupled_max_lr ||
             (s->decoupled_max_lr >= 0 && s->decoupled_min_lr != st->lr.decoupled_min_lr))
        snprintf(what, sizeof what,
                 "--decoupled-lr %g, --decoupled-min-lr %g here; %g, %g there "
                 "(-1: none)",
                 s->decoupled_max_lr, s->decoupled_min_lr, st->lr.decoupled_max_lr,
                 st->lr.decoupled_min_lr);
    else if (s->warmup_steps != st->lr.warmup_steps)
        snprintf(what, sizeof what, "warmup of %g samples here, %g there", s->warmup_steps,
                 st->lr.warmup_steps);
    else if (s->decay_steps != st->lr.decay_steps)
        snprintf(what, sizeof what, "decay over %lld samples here (%s), %lld there",
                 (long long)s->decay_steps,
                 c->train_samples > 0 ? "--lr-decay-samples, by default --train-samples"
                                      : "--lr-decay-iters x global batch, by default --train-iters",
                 (long long)st->lr.decay_steps);
    else if (s->style != st->lr.style)
        snprintf(what, sizeof what, "--lr-decay-style %s here, %s there",
                 loom_lr_style_name(s->style), loom_lr_style_name(st->lr.style));
    else if (s->style == LOOM_LR_WSD && st->lr.wsd_decay_steps >= 0 &&
             (s->wsd_decay_steps != st->lr.wsd_decay_steps || s->wsd_style != st->lr.wsd_style))
        snprintf(what, sizeof what, "WSD's final decay over %lld samples (%s) here, %lld (%s) there",
                 (long long)s->wsd_decay_steps, loom_wsd_style_name(s->wsd_style),
                 (long long)st->lr.wsd_decay_steps, loom_wsd_style_name(st->lr.wsd_style));
    else if (c->wd.start_wd != st->wd.start_wd || c->wd.end_wd != st->wd.end_wd ||
             c->wd.style != st->wd.style ||
             (c->wd.style != LOOM_WD_CONSTANT && c->wd.incr_steps != st->wd.incr_steps))
        snprintf(what, sizeof what,
                 "weight decay %g -> %g over %lld samples here, %g -> %g over "
                 "%lld there",
                 c->wd.start_wd, c->wd.end_wd, (long long)c->wd.incr_steps, st->wd.start_wd,
                 st->wd.end_wd, (long long)st->wd.incr_steps);
    if (what[0])
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--load %s: the optimizer's schedule differs from the checkpoint's "
                         "(%s); give the same flags, or --override-opt_param-scheduler to take "
                         "these, or --use-checkpoint-opt_param-scheduler to take the checkpoint's",
                         c->load, what);
    return LOOM_OK;
}

/* Split `split` (enum loom_split) of data_path with --split weights `weights`, for `n` samples:
 * the family's dataset (read with the tokenizer `tok` where the family's datasets take one) */
static enum loom_status open_split(struct trainer *t, struct loom_sample_source *src,
                                   const char *path, const char *weights, int split, int64_t n,
                                   const struct loom_tokenizer *tok) {
    if (!t->fdesc->open_source)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--model %s reads no dataset (--mock-data only)",
                         t->fdesc->name);
    return t->fdesc->open_source(src, t->cfg, tok, split, path, weights, n);
}

static enum loom_status open_datasets(struct trainer *t, const struct loom_tokenizer *tok);

static enum loom_status open_sources(struct trainer *t) {
    struct loom_train_config *c = t->cfg;
    if (c->mock_data || (!c->data_path && !c->train_data_path)) {
        if (!t->fdesc->mock_source)
            return loom_fail(LOOM_ERR_UNSUPPORTED, "--model %s has no synthetic data (--mock-data)",
                             t->fdesc->name);
        for (int split = 0; split < 3; split++) {
            struct loom_sample_source *src =
                split == 0 ? &t->train_src : split == 1 ? &t->valid_src : &t->test_src;
            LOOM_CHECK(t->fdesc->mock_source(src, c, split));
        }
        t->have_valid = t->have_test = 1;
        return LOOM_OK;
    }
    if (!t->fdesc->data_tokenizer) return open_datasets(t, NULL);
    /* the family's datasets read the tokenizer (special ids, word pieces) while they open */
    struct loom_tokenizer *tok;
    LOOM_CHECK(t->fdesc->data_tokenizer(c, &tok));
    enum loom_status s = open_datasets(t, tok);
    loom_tokenizer_free(tok);
    return s;
}

/* The training, validation and test splits of --data-path (or of the datasets of their own) */
static enum loom_status open_datasets(struct trainer *t, const struct loom_tokenizer *tok) {
    struct loom_train_config *c = t->cfg;
    /* sample-based training asks for its samples, as Megatron sizes the dataset */
    int64_t n_train = c->train_samples > 0 ? c->train_samples : c->train_iters * c->global_batch;
    /* the validation samples of every evaluation of the run and the one after it, as Megatron
     * sizes them; more where a resumed run's evaluations start further on (another
     * --eval-interval before) */
    const int64_t every = c->eval_interval > 0 ? c->eval_interval : c->train_iters;
    const int64_t per_eval = c->eval_iters * c->global_batch;
    int64_t n_valid = (c->train_iters / every + 1) * per_eval;
    const int64_t to_come =
        c->skip_train ? per_eval
                      : t->st.consumed_valid_samples +
                            (c->train_iters / every - t->st.iteration / every + 1) * per_eval;
    if (to_come > n_valid) n_valid = to_come;
    /* datasets of their own: each whole, as the one split of its --split */
    const char *train_path = c->data_path, *valid_path = c->data_path;
    const char *train_split = c->split, *valid_split = c->split;
    if (c->train_data_path) {
        train_path = c->train_data_path, train_split = "1,0,0";
        valid_path = c->valid_data_path, valid_split = "0,1,0";
    }
    LOOM_CHECK(open_split(t, &t->train_src, train_path, train_split, LOOM_SPLIT_TRAIN, n_train,
                          tok));
    /* a --split weight of 0 leaves that split out, its evaluation skipped (as Megatron-LM) */
    int64_t docs = 0;
    int present = valid_path != NULL;
    if (c->eval_iters > 0 && valid_path && !c->train_data_path)
        LOOM_CHECK(loom_data_split_documents(valid_path, valid_split, LOOM_SPLIT_VALID, &docs,
                                             &present));
    t->have_valid = c->eval_iters > 0 && present;
    if (c->eval_iters > 0 && valid_path && !present)
        loom_log_info("loom: --split %s gives the validation split weight 0: no validation",
                      valid_split ? valid_split : "969,30,1");
    if (t->have_valid)
        LOOM_CHECK(open_split(t, &t->valid_src, valid_path, valid_split, LOOM_SPLIT_VALID, n_valid,
                              tok));
    /* the test split (--split's third part, or --test-data-path), when present and not empty */
    const char *test_path = c->train_data_path ? c->test_data_path : c->data_path;
    const char *test_split = c->train_data_path ? "0,0,1" : c->split;
    int64_t test_docs = 0;
    present = 0;
    if (c->eval_iters > 0 && test_path)
        LOOM_CHECK(loom_data_split_documents(test_path, test_split, LOOM_SPLIT_TEST, &test_docs,
                                             &present));
    if (present && test_docs > 0) {
        LOOM_CHECK(open_split(t, &t->test_src, test_path, test_split, LOOM_SPLIT_TEST,
                              c->eval_iters * c->global_batch, tok));
        t->have_test = 1;
    }
    return LOOM_OK;
}

static enum loom_status setup(struct trainer *t, int *argc, char ***argv) {
    struct loom_train_config *c = t->cfg;
    /* the model family of the configured settings (`loom samples` builds no model) */
    t->fdesc = c->family ? c->family : loom_family_config_default();
    t->family = loom_family_find(t->fdesc->name);
    if (!t->family && !c->samples_only)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "--model %s: loom has no %s model to train yet (its settings and data "
                         "are in place: `loom samples --model %s` prints its samples)",
                         t->fdesc->name, t->fdesc->name, t->fdesc->name);
    t->start_s = loom_time_s();
    if (c->exit_signal_handler) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
    }
    /* "auto": mpi under mpirun, nccl when the model lives on GPUs; mpi with GPUs stages the
     * device buffers through host memory (mpi-staged) */
    const char *comm = c->comm;
    const int cuda = strcmp(c->device, "cuda") == 0;
    if ((!comm || strcmp(comm, "auto") == 0) && cuda && loom_comm_launched()) comm = "nccl";
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_HAVE_MPI)
    if (comm && strcmp(comm, "mpi") == 0 && cuda) comm = "mpi-staged";
#endif
    LOOM_CHECK(loom_comm_world(&t->world, comm, argc, argv));
    struct loom_comm *world = t->world;
    if (cuda && loom_comm_size(world) > 1 && !loom_comm_device_memory(world))
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "--device cuda with %d ranks needs --comm nccl (the "
                         "default under mpirun); '%s' moves host memory only",
                         loom_comm_size(world), loom_comm_backend_name(world));
    if (c->fp16 && strcmp(c->device, "cuda") != 0)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--fp16: fp16 matrix products need --device cuda; "
                         "the %s backend computes in fp32 only (leave --fp16 out)", c->device);
    if (c->bf16 && strcmp(c->device, "cuda") != 0)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--bf16: bf16 matrix products need --device cuda; "
                         "the %s backend computes in fp32 only (leave --bf16 out)", c->device);
    int vpp = 1;
    if (c->vpp_layers > 0) {
        if (c->pp < 2)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--num-layers-per-virtual-pipeline-stage needs "
                             "--pipeline-model-parallel-size > 1");
        if (c->model.first_stage_layers || c->model.last_stage_layers)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "--num-layers-per-virtual-pipeline-stage takes "
                             "equal stages (leave out --decoder-first/last-pipeline-num-layers)");
        if (c->model.num_layers % (c->pp * c->vpp_layers))
            return loom_fail(LOOM_ERR_INVALID_ARG, "--num-layers-per-virtual-pipeline-stage %lld x "
                             "--pipeline-model-parallel-size %lld does not divide --num-layers %lld",
                             (long long)c->vpp_layers, (long long)c->pp,
                             (long long)c->model.num_layers);
        vpp = (int)(c->model.num_layers / (c->pp * c->vpp_layers));
    }
    LOOM_CHECK(loom_parallel_init(&t->par, world, (int)c->tp, 1, 1, (int)c->pp, vpp,
                                  c->sequence_parallel));
    LOOM_CHECK(t->fdesc->finalize(&c->model, (int)c->tp, (int)c->pp));
    int64_t dp = loom_dp_size(&t->par);
    if (c->micro_batch < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--micro-batch-size must be at least 1");
    if (c->global_batch == 0) c->global_batch = c->micro_batch * dp;
    if (c->global_batch % (c->micro_batch * dp))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--global-batch-size %lld is not a multiple of "
                         "--micro-batch-size %lld x data-parallel size %lld",
                         (long long)c->global_batch, (long long)c->micro_batch, (long long)dp);
    if (c->sequence_parallel && c->tp > 1 && c->model.seq_length % c->tp)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--sequence-parallel needs --seq-length %lld to be "
                         "a multiple of --tensor-model-parallel-size %lld",
                         (long long)c->model.seq_length, (long long)c->tp);
    if (c->sequence_parallel && c->tp > 1 && c->micro_batch > 1 && strcmp(c->device, "cuda") == 0)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--sequence-parallel with --device cuda needs "
                         "--micro-batch-size 1 for now (the sequence shards of a larger micro-batch "
                         "are reordered on the host)");
    t->num_micro = c->global_batch / (c->micro_batch * dp);
    if (vpp > 1 && t->num_micro % c->pp)
        return loom_fail(LOOM_ERR_INVALID_ARG, "the interleaved schedule needs the micro-batches "
                         "per rank (--global-batch-size %lld / (--micro-batch-size %lld x DP %lld) "
                         "= %lld) to be a multiple of --pipeline-model-parallel-size %lld",
                         (long long)c->global_batch, (long long)c->micro_batch, (long long)dp,
                         (long long)t->num_micro, (long long)c->pp);
    LOOM_CHECK(batch_ramp(t, vpp));
    LOOM_CHECK(schedule_length(t));
    /* the checkpoint's training state (read alike by every rank): its schedule now, the rest when
     * the weights are loaded below */
    struct loom_train_state st;
    int has_optim = 0;
    if (c->load) {
        struct loom_transformer_config saved;
        LOOM_CHECK(loom_ckpt_read_config(c->load, t->fdesc, &saved, &st, &has_optim));
        LOOM_CHECK(schedule_from_checkpoint(t, &st));
    }

    if (c->samples_only) { /* `loom samples`: the data alone */
        t->errors_collective = 0;
        LOOM_CHECK(open_sources(t));
        return t->par.rank == 0 ? print_samples(t, stdout) : LOOM_OK;
    }
    /* everything above fails alike on every rank; what follows (devices, files, memory) may fail
     * on one rank alone */
    t->errors_collective = 0;
    LOOM_CHECK(loom_backend_create(&t->be, c->device, -1)); /* -1: the local rank's GPU */
    if (t->be->ops->stream) loom_comm_set_stream(t->be->ops->stream(t->be));
    if (c->deterministic && t->be->ops->set_deterministic)
        LOOM_CHECK(t->be->ops->set_deterministic(t->be, 1));
    if (c->attention_backend != LOOM_ATTN_AUTO) {
        if (!t->be->ops->set_attention_backend)
            return loom_fail(LOOM_ERR_UNSUPPORTED,
                             "--attention-backend %s: the %s backend has one attention kernel "
                             "(leave the flag out or give auto)",
                             c->attention_backend == LOOM_ATTN_FUSED ? "fused" : "flash",
                             t->be->ops->name);
        LOOM_CHECK(t->be->ops->set_attention_backend(t->be, c->attention_backend));
    }
    {
        /* the model's slots: the most micro-batches in flight over the batches of the run (the
         * ramp's, which batch_ramp checked reach the final one in whole increments, then it) */
        int slots = 0;
        for (int64_t b = t->ramp.start > 0 ? t->ramp.start : c->global_batch;;
             b += t->ramp.increment) {
            const int64_t nm = b / (c->micro_batch * dp);
            struct loom_pipe_op *ops;
            int64_t nops;
            LOOM_CHECK(
                loom_pipeline_schedule((int)c->pp, loom_pp_rank(&t->par), vpp, nm, 0, &ops, &nops));
            const int k = loom_pipeline_max_in_flight(ops, nops, nm);
            free(ops);
            if (k > slots) slots = k;
            if (b == c->global_batch) break;
        }
        /* the product type first, so that the model sizes its 16-bit activation buffers by it;
         * then again with the weights, which get their 16-bit copy */
        enum loom_dtype mm = c->bf16 ? LOOM_DTYPE_BF16 : LOOM_DTYPE_F16;
        if (c->bf16 || c->fp16) {
            if (!t->be->ops->set_matmul_dtype)
                return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: not supported on the %s backend",
                                 c->bf16 ? "--bf16" : "--fp16", t->be->ops->name);
            LOOM_CHECK(t->be->ops->set_matmul_dtype(t->be, mm, NULL, 0));
        }
        LOOM_CHECK(t->family->create(&t->model, &c->model, &t->par, t->be, c->micro_batch, slots));
        if (c->bf16 || c->fp16)
            LOOM_CHECK(t->be->ops->set_matmul_dtype(t->be, mm, t->model->param_mem, t->model->num_local));
        LOOM_CHECK(loom_pipeline_create(&t->pipe));
        LOOM_CHECK(loom_grad_sync_create(&t->gsync, t->model, c->dp_bucket_bytes,
                                         (enum loom_dp_sharding)c->dp_sharding));
    }
    t->opt.beta1 = c->beta1;
    t->opt.beta2 = c->beta2;
    t->opt.eps = c->adam_eps;
    t->opt.weight_decay = c->weight_decay;
    LOOM_CHECK(loom_adamw_init(&t->opt, t->model, t->gsync, c->lr.decoupled_max_lr >= 0));
    if (c->onebit_adam) {
        LOOM_CHECK(loom_onebit_adam_init(&t->opt, t->model, c->onebit_freeze_step));
        loom_log_info("loom: 1-bit Adam: %lld warmup steps of Adam without bias correction "
                      "(all-reduced gradients), then the momentum of %lld floats compressed to "
                      "one bit an element over the %d data-parallel ranks (error buffers start "
                      "from zero)",
                      (long long)c->onebit_freeze_step, (long long)t->model->num_local,
                      loom_dp_size(&t->par));
    }
    const enum loom_dp_sharding shard = loom_grad_sync_strategy(t->gsync);
    t->opt.overlap_gather = t->opt.distributed && c->overlap_param_gather &&
                            shard != LOOM_SHARD_OPTIM_GRADS_PARAMS;
    if (t->opt.distributed)
        loom_log_info("loom: distributed optimizer: each of the %d data-parallel ranks keeps the "
                      "moments of %lld of the %lld local parameters and updates them (its pieces "
                      "of %d gradient buckets, reduce-scattered)%s",
                      loom_dp_size(&t->par), (long long)t->opt.shard_len,
                      (long long)t->model->num_local, loom_grad_sync_buckets(t->gsync),
                      t->opt.overlap_gather ? "; the parameters are gathered while the next "
                                              "forward runs (--overlap-param-gather)"
                                            : "");
    loom_grad_sync_memory(t->gsync, &t->state_floats[0], &t->state_floats[1]);
    t->state_floats[2] = 2 * t->opt.shard_len;
    loom_log_info("loom: data-parallel sharding %s over %d ranks: this rank keeps %lld bytes of "
                  "parameters, %lld of gradients and %lld of optimizer state between steps "
                  "(%lld and %lld of working parameter and gradient buffers)",
                  loom_dp_sharding_name(shard), loom_dp_size(&t->par),
                  (long long)t->state_floats[0] * 4, (long long)t->state_floats[1] * 4,
                  (long long)t->state_floats[2] * 4, (long long)t->model->num_alloc * 4,
                  (long long)t->model->num_alloc * 4);
    t->st.seed = c->seed;
    if (c->fp16) {
        /* --loss-scale gives a static scale (window 0); otherwise Megatron's dynamic scaler */
        if (c->loss_scale > 0)
            loom_loss_scaler_init(&t->scaler, c->loss_scale, c->loss_scale, 0, c->hysteresis);
        else
            loom_loss_scaler_init(&t->scaler, c->initial_loss_scale, c->min_loss_scale,
                                  c->loss_scale_window, c->hysteresis);
        t->st.loss_scale = t->scaler.scale;
    }
    if (c->load) {
        int load_optim = !c->finetune && !c->no_load_optim && has_optim;
        LOOM_CHECK(loom_ckpt_load(c->load, t->model, load_optim ? &t->opt : NULL));
        if (!c->finetune) {
            t->st.iteration = st.iteration;
            t->st.consumed_samples = st.consumed_samples;
            /* an older checkpoint has none: its evaluations (every --eval-interval) took that
             * many, as Megatron-LM reckons it */
            t->st.consumed_valid_samples =
                st.consumed_valid_samples >= 0 ? st.consumed_valid_samples
                : c->eval_interval > 0
                    ? st.iteration / c->eval_interval * c->eval_iters * c->global_batch
                    : 0;
            t->st.skipped = st.skipped;
            /* an older checkpoint has none: its batch was constant */
            t->st.scheduler_samples = st.scheduler_samples >= 0
                                          ? st.scheduler_samples
                                          : (st.iteration - st.skipped) * c->global_batch;
            if (c->fp16 && st.loss_scale > 0) {
                t->scaler.scale = st.loss_scale;
                t->scaler.growth_tracker = st.growth_tracker;
                t->scaler.hysteresis_tracker = st.hysteresis_tracker;
            }
        }
        if (!load_optim) t->opt.step = 0;
        loom_log_info("loaded checkpoint %s at iteration %lld%s", c->load, (long long)st.iteration,
                      c->finetune  ? " (finetune: iteration and optimizer reset)"
                      : load_optim ? ""
                      : has_optim  ? " (--no-load-optim: the optimizer starts afresh)"
                                   : " (it holds no optimizer state: the optimizer starts afresh)");
    } else {
        LOOM_CHECK(t->model->family->init_weights(t->model, c->seed));
    }
    /* the schedule in force, saved with the optimizer state (as Megatron-LM's, which
     * --no-save-optim leaves out too) */
    t->st.has_lr = !c->no_save_optim;
    t->st.lr = c->lr;
    t->st.wd = c->wd;
    LOOM_CHECK(open_sources(t));
    LOOM_CHECK(micro_alloc(&t->mb, c->micro_batch, c->model.seq_length));
    LOOM_CHECK(micro_alloc(&t->row, 1, c->model.seq_length));
    if (c->tensorboard_dir && t->par.rank == 0 && !c->skip_train) {
        LOOM_CHECK(loom_tb_open(&t->tb, c->tensorboard_dir));
        loom_log_info("loom: TensorBoard events to %s", loom_tb_path(t->tb));
    }
    if (c->metrics_file && t->par.rank == 0) {
        t->metrics = fopen(c->metrics_file, t->st.iteration > 0 ? "a" : "w");
        if (!t->metrics)
            return loom_fail(LOOM_ERR_IO, "--metrics-file: cannot open '%s' for writing",
                             c->metrics_file);
    }
    /* the checkpoint folders exist and take files before training starts */
    /* --save-grads writes the gradients of the first iteration this run trains: there must be one
     * (a resumed run's next iteration), else it is an error, before any folder is made */
    if (c->save_grads && (c->skip_train || t->st.iteration >= c->train_iters))
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--save-grads %s: this run trains no iteration (%s), so it has no "
                         "gradients to save",
                         c->save_grads,
                         c->skip_train ? "--skip-train" : "--load's iteration reaches --train-iters");
    t->save_grads_iter = t->st.iteration + 1;
    const char *outdirs[][2] = {{"--save", c->save}, {"--save-grads", c->save_grads}};
    for (int i = 0; i < 2 && t->par.rank == 0; i++)
        if (outdirs[i][1] && loom_dir_writable(outdirs[i][1]) != LOOM_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", loom_last_error());
            return loom_fail(LOOM_ERR_IO, "%s %s: %s", outdirs[i][0], outdirs[i][1], why);
        }
    const int64_t N = loom_model_num_params(t->model);
    t->flops_per_token =
        t->model->family->flops_per_sample(t->model) / (double)c->model.seq_length;
    if (c->peak_tflops > 0) {
        t->peak_tflops = c->peak_tflops;
    } else if (t->be->device == LOOM_DEVICE_CUDA) {
        t->peak_tflops = 989.0;
    } else if (t->par.world_size == 1) {
        t->peak_tflops = measure_cpu_peak_tflops();
        t->peak_measured = t->peak_tflops > 0;
    } else {
        t->peak_tflops = 0.0; /* ranks share the cores */
    }
    if (c->notes) loom_log_info("loom: note: flags with no effect: %s", c->notes);
    if (t->ramp.start > 0)
        loom_log_info("loom: the global batch ramps up from %lld to %lld by %lld over %lld "
                      "samples: %lld iterations in all",
                      (long long)t->ramp.start, (long long)c->global_batch,
                      (long long)t->ramp.increment, (long long)t->ramp.samples,
                      (long long)c->train_iters);
    /* documents packed into samples, kept apart (--reset-position-ids, --reset-attention-mask) */
    char docs[400] = "";
    if (c->reset_position_ids || c->reset_attention_mask)
        snprintf(docs, sizeof docs, ", documents isolated at end-of-document id %lld (%s%s%s)",
                 (long long)c->doc_eod, c->reset_position_ids ? "positions reset" : "",
                 c->reset_position_ids && c->reset_attention_mask ? ", " : "",
                 c->reset_attention_mask ? "attention masked" : "");
    /* the model's settings that are not their defaults, as the family's table notes them */
    loom_settings_describe(t->fdesc, &c->model, docs, sizeof docs);
    if (c->model.first_stage_layers || c->model.last_stage_layers) { /* uneven stages */
        snprintf(docs + strlen(docs), sizeof docs - strlen(docs), ", pipeline stages of ");
        for (int s = 0; s < (int)c->pp; s++) {
            int64_t l0, l1;
            t->family->chunk_layers(t->model, s, 0, &l0, &l1);
            snprintf(docs + strlen(docs), sizeof docs - strlen(docs), "%s%lld", s ? " + " : "",
                     (long long)(l1 - l0));
        }
        snprintf(docs + strlen(docs), sizeof docs - strlen(docs), " layers");
    }
    /* the head size where it is not hidden / heads (--kv-channels) */
    char head_size[48] = "";
    const int64_t hs = loom_transformer_head_size(&c->model);
    if (hs * c->model.heads != c->model.hidden)
        snprintf(head_size, sizeof head_size, ", head size %lld", (long long)hs);
    loom_log_info("loom: %lld parameters, %lld layers, hidden %lld, heads %lld (groups %lld%s), "
                  "MLP %s, vocab %lld (padded %lld), seq %lld%s | world %d = TP %lld x PP %lld x "
                  "DP %lld | %s, %lld micro-batches of %lld per rank | peak %.3f TFLOP/s per rank",
                  (long long)N, (long long)c->model.num_layers, (long long)c->model.hidden,
                  (long long)c->model.heads, (long long)c->model.query_groups, head_size,
                  c->model.swiglu                  ? "SwiGLU"
                  : c->model.gelu == LOOM_GELU_ERF ? "GELU (erf)"
                                                   : "GELU (tanh)",
                  (long long)c->model.vocab_size, (long long)c->model.padded_vocab,
                  (long long)c->model.seq_length, docs, t->par.world_size, (long long)c->tp,
                  (long long)c->pp, (long long)dp, t->be->ops->name, (long long)t->num_micro,
                  (long long)c->micro_batch, t->peak_tflops);
    return LOOM_OK;
}

/* Peak device memory over the ranks (for the log), and a warning when device memory was
 * allocated after the first iteration (every buffer should exist by then). Collective. */
static enum loom_status device_memory(struct trainer *t) {
    t->peak_mem = -1;
    if (!t->be->ops->memory_stats) return LOOM_OK;
    struct loom_mem_stats ms;
    t->be->ops->memory_stats(t->be, &ms);
    int64_t v[2] = {(int64_t)ms.peak, ms.allocations > t->allocs_first};
    LOOM_CHECK(loom_comm_allreduce(t->par.world, v, 2, LOOM_DTYPE_I64, LOOM_REDOP_MAX));
    t->peak_mem = v[0];
    if (v[1]) {
        loom_log_info(" warning: device memory was allocated after the first iteration "
                      "(%lld allocations by iteration 1, %lld now on rank 0)",
                      (long long)t->allocs_first, (long long)ms.allocations);
        t->allocs_first = ms.allocations; /* say it once per growth */
    }
    return LOOM_OK;
}

/* --skip-train: the losses of the weights as loaded, as after training: the validation set's
 * from its start (as Megatron-LM evaluates it then), then the test set's. */
static enum loom_status evaluate_only(struct trainer *t) {
    struct loom_train_config *c = t->cfg;
    if ((!t->have_valid && !t->have_test) || c->eval_iters <= 0) {
        loom_log_info("--skip-train: nothing to evaluate (no validation or test data, or "
                      "--eval-iters 0)");
        return LOOM_OK;
    }
    t->st.consumed_valid_samples = 0;
    return evaluate_after(t);
}

/* Megatron-LM's --check-weight-hash-across-dp-replicas-interval: a hash (FNV-1a 64) of this
 * rank's parameter bytes, the smallest and largest over its data-parallel group compared; a
 * difference on any group is an error on every rank. Collective over the world. */
static enum loom_status check_dp_weight_hashes(struct trainer *t, int64_t it) {
    const int64_t n = t->model->num_local;
    float *host = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!host) return loom_fail(LOOM_ERR_OOM, "out of memory");
    t->be->ops->to_host(t->be, host, t->model->param_mem, (size_t)n * sizeof(float));
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)host;
    for (size_t i = 0; i < (size_t)n * sizeof(float); i++)
        h = (h ^ b[i]) * 1099511628211ull;
    free(host);
    int64_t lo = (int64_t)h, hi = (int64_t)h, differ;
    struct loom_comm *dp = t->par.group[LOOM_PDIM_DP];
    LOOM_CHECK(loom_comm_allreduce(dp, &lo, 1, LOOM_DTYPE_I64, LOOM_REDOP_MIN));
    LOOM_CHECK(loom_comm_allreduce(dp, &hi, 1, LOOM_DTYPE_I64, LOOM_REDOP_MAX));
    differ = lo != hi;
    LOOM_CHECK(loom_comm_allreduce(t->par.world, &differ, 1, LOOM_DTYPE_I64, LOOM_REDOP_MAX));
    if (differ)
        return loom_fail(LOOM_ERR_INTERNAL,
                         "iteration %lld: the weights of the data-parallel "
                         "replicas differ (--check-weight-hash-across-dp-replicas-interval)",
                         (long long)it);
    loom_log_info("iteration %lld: the weights of the %d data-parallel replicas are the same",
                  (long long)it, loom_dp_size(&t->par));
    return LOOM_OK;
}

/* The distributed optimizer's overlapped gather completed (read the parameters outside the
 * forward only after this). */
static enum loom_status params_gathered(struct trainer *t) {
    if (!t->gsync) return LOOM_OK;
    LOOM_CHECK(loom_grad_sync_gather_params(t->gsync)); /* sharded parameters */
    return loom_grad_sync_gather_wait(t->gsync, LOOM_GATHER_ALL);
}

static enum loom_status train_loop(struct trainer *t) {
    struct loom_train_config *c = t->cfg;
    struct loom_backend *be = t->be;
    if (c->skip_train) return evaluate_only(t);
    double t_last = loom_time_s();
    int64_t iters_since_log = 0;
    while (t->st.iteration < c->train_iters) {
        int64_t it = t->st.iteration + 1;
        be->ops->zero(be, t->model->grad_mem, (size_t)t->model->num_local * sizeof(float));
        reset_comm_counters(t);
        t->pipe_busy_s = t->pipe_wait_s = 0;
        /* 1-bit Adam after its warmup: no gradient reduction (the momentum's instead) */
        loom_grad_sync_set_local(t->gsync, loom_adamw_local_grads(&t->opt));
        struct loom_losses losses;
        t->batch = loom_batch_at(&t->ramp, t->st.consumed_samples);
        LOOM_CHECK(run_batch(t, &t->train_src, t->st.consumed_samples, t->batch, it, 1, &losses));
        const double loss = total_loss(t, &losses);
        LOOM_CHECK(sync_grads(t));
        if (c->save_grads && it == t->save_grads_iter) {
            /* every rank's reduced pieces (the distributed optimizer), then the whole buffer */
            LOOM_CHECK(loom_grad_sync_gather(t->gsync, t->model->grad_mem));
            LOOM_CHECK(loom_ckpt_save_buffer(c->save_grads, t->model, t->model->grad_mem));
        }
        double gnorm;
        t->num_zeros = -1;
        LOOM_CHECK(
            loom_grad_norm(&t->opt, t->model, &gnorm, c->log_num_zeros ? &t->num_zeros : NULL));
        /* 1-bit Adam's compressed steps: each rank's own gradient, whose share (1 / the ranks)
         * the buffer holds: its norm is the one clipped (and logged: rank 0's) */
        if (loom_adamw_local_grads(&t->opt)) gnorm *= loom_dp_size(&t->par);
        double unscale = 1.0;
        int skip = 0;
        if (c->fp16) {
            /* gradients carry the loss scale; an overflow anywhere makes the norm non-finite on
             * every rank alike, and the step is skipped */
            unscale = 1.0 / t->scaler.scale;
            gnorm *= unscale;
            skip = loom_loss_scaler_update(&t->scaler, !isfinite(gnorm));
        }
        /* --check-for-nan-in-loss-and-grad: the gradient norm before the optimizer step (under
         * --fp16 a non-finite one is the loss scale's overflow, and the step is skipped) */
        if (c->check_nan && !c->fp16 && !isfinite(gnorm))
            return loom_fail(LOOM_ERR_INTERNAL, "rank %d: found %s in the gradient norm at "
                             "iteration %lld (--check-for-nan-in-loss-and-grad)", t->par.rank,
                             isnan(gnorm) ? "NaN" : "Inf", (long long)it);
        if (!isfinite(loss) || (!skip && !isfinite(gnorm)))
            return loom_fail(LOOM_ERR_INTERNAL, "iteration %lld: loss %g, grad norm %g is not "
                             "finite (lower --lr?)", (long long)it, loss, gnorm);
        double scale = 1.0;
        if (c->clip_grad > 0) {
            double coeff = c->clip_grad / (gnorm + 1e-6);
            if (coeff < 1.0) scale = coeff;
        }
        /* the schedules advance by the samples of the optimizer steps (skipped iterations do not
         * count) */
        const int64_t sched_steps = t->st.scheduler_samples;
        double lr = loom_lr_at(&c->lr, sched_steps);
        t->lr_decoupled = loom_lr_decoupled_at(&c->lr, sched_steps);
        t->opt.weight_decay = loom_wd_at(&c->wd, sched_steps);
        if (!skip) t->st.scheduler_samples += t->batch;
        if (skip) {
            t->st.skipped++;
            t->skipped_since_log++;
        } else {
            LOOM_CHECK(loom_adamw_step(&t->opt, t->model, lr, t->lr_decoupled, scale * unscale));
            for (int i = 0; i < t->family->num_losses; i++)
                if (loss_reported(t, &losses, i)) {
                    t->losses_since_log[i] += loss_value(&losses, i);
                    t->had_loss_since_log[i]++;
                }
            t->stepped_since_log++;
        }
        /* the family's updates after a step (MoE's expert bias) and, at a log, its statistics */
        if (t->family->step_end)
            LOOM_CHECK(t->family->step_end(t->model, it % c->log_interval == 0 ||
                                                         it == c->train_iters,
                                           &t->report));
        /* the step's traffic, the distributed optimizer's gathering of the parameters included */
        t->step_bytes[0] = group_bytes(t->par.group[LOOM_PDIM_TP]);
        t->step_bytes[1] = group_bytes(t->par.group[LOOM_PDIM_PP]);
        t->step_bytes[2] = group_bytes(t->par.group[LOOM_PDIM_DP]);
        t->step_bytes[3] = loom_pp_size(&t->par) > 1 ? group_bytes(t->par.embedding) : 0;
        if (c->fp16) {
            t->st.loss_scale = t->scaler.scale;
            t->st.growth_tracker = t->scaler.growth_tracker;
            t->st.hysteresis_tracker = t->scaler.hysteresis_tracker;
        }
        t->st.iteration = it;
        t->st.consumed_samples += t->batch;
        t->samples_since_log += t->batch;
        iters_since_log++;
        be->ops->synchronize(be);
        if (t->be->ops->memory_stats && t->allocs_first == 0) {
            struct loom_mem_stats ms;
            t->be->ops->memory_stats(t->be, &ms);
            t->allocs_first = ms.allocations;
        }
        double t_step_end = loom_time_s();
        int have_val = 0;
        struct loom_losses val;
        double eval_s = 0;
        if (t->have_valid && c->eval_interval > 0 && c->eval_iters > 0 &&
            it % c->eval_interval == 0) {
            LOOM_CHECK(evaluate_next_valid(t, NULL, &val));
            eval_s = loom_time_s() - t_step_end;
            have_val = 1;
        }
        /* the log line at --log-interval's multiples and the last iteration only, as
         * Megatron-LM's (an evaluation between them prints its own lines) */
        const int log_now = it % c->log_interval == 0 || it == c->train_iters;
        const int tb_now = c->tensorboard_dir && it % c->tensorboard_log_interval == 0;
        double pnorm = -1.0; /* after the step, as Megatron-LM logs it (collective: every rank) */
        if (c->log_params_norm && (log_now || tb_now)) {
            LOOM_CHECK(params_gathered(t));
            LOOM_CHECK(loom_param_buffer_norm(t->model, t->model->param_mem, &pnorm, NULL));
        }
        /* the mean time of the iterations since the last log line */
        const double ms = 1000.0 * (t_step_end - t_last) / (double)iters_since_log;
        if (t->tb) {
            LOOM_CHECK(tb_iteration(t, tb_now, log_now, lr, &losses, loss, gnorm, pnorm, ms));
            if (have_val) LOOM_CHECK(tb_validation(t, &val));
        }
        if (have_val && !log_now) {
            report_evaluation(t, NULL, "val_loss", &val);
            /* the evaluation's time is not the iterations' (Megatron-LM stops its interval timer
             * for it) */
            t_last += eval_s;
        }
        if (log_now) {
            LOOM_CHECK(device_memory(t));
            log_iteration(t, it, iters_since_log, ms, lr, &losses, loss, gnorm, pnorm,
                          have_val ? &val : NULL);
            t->skipped_since_log = 0;
            t->samples_since_log = 0;
            memset(t->losses_since_log, 0, sizeof t->losses_since_log);
            memset(t->had_loss_since_log, 0, sizeof t->had_loss_since_log);
            t->stepped_since_log = 0;
            t_last = loom_time_s();
            iters_since_log = 0;
        }
        if (c->weight_hash_interval > 0 && it % c->weight_hash_interval == 0) {
            LOOM_CHECK(params_gathered(t));
            LOOM_CHECK(check_dp_weight_hashes(t, it));
        }
        if ((c->exit_signal_handler || c->exit_duration_mins > 0) && it < c->train_iters) {
            /* every rank stops at the same iteration: the reasons are combined over the world */
            const double mins = (loom_time_s() - t->start_s) / 60.0;
            int64_t why[2] = {c->exit_signal_handler && g_sigterm,
                              c->exit_duration_mins > 0 && mins > c->exit_duration_mins};
            LOOM_CHECK(loom_comm_allreduce(t->par.world, why, 2, LOOM_DTYPE_I64, LOOM_REDOP_MAX));
            if (why[0] || why[1]) {
                if (why[0])
                    loom_log_info("exiting at iteration %lld: SIGTERM received "
                                  "(--exit-signal-handler)",
                                  (long long)it);
                else
                    loom_log_info("exiting at iteration %lld after %.2f minutes "
                                  "(--exit-duration-in-mins %g)",
                                  (long long)it, mins, c->exit_duration_mins);
                break;
            }
        }
        if (c->exit_interval > 0 && it % c->exit_interval == 0 && it < c->train_iters) {
            loom_log_info("exiting at iteration %lld (--exit-interval %lld)", (long long)it,
                          (long long)c->exit_interval);
            break;
        }
        if (c->save && c->save_interval > 0 && it % c->save_interval == 0 && it < c->train_iters) {
            LOOM_CHECK(params_gathered(t));
            LOOM_CHECK(
                loom_ckpt_save(c->save, t->model, c->no_save_optim ? NULL : &t->opt, &t->st));
            loom_log_info("saved checkpoint at iteration %lld to %s", (long long)it, c->save);
            LOOM_CHECK(loom_ckpt_prune(c->save, c->save_retain_interval, it, t->par.rank));
            t_last = loom_time_s();
        }
    }
    LOOM_CHECK(params_gathered(t)); /* the run ends with whole parameters */
    if (c->save) {
        LOOM_CHECK(loom_ckpt_save(c->save, t->model, c->no_save_optim ? NULL : &t->opt, &t->st));
        loom_log_info("saved checkpoint at iteration %lld to %s", (long long)t->st.iteration, c->save);
        LOOM_CHECK(loom_ckpt_prune(c->save, c->save_retain_interval, t->st.iteration, t->par.rank));
    }
    /* a finished run is evaluated once more (after its last checkpoint, as Megatron-LM's); one
     * stopped early (--exit-interval, its duration, a signal) is not */
    return t->st.iteration == c->train_iters ? evaluate_after(t) : LOOM_OK;
}

enum loom_status loom_train_run(struct loom_train_config *cfg, int *argc, char ***argv,
                                int *collective) {
    struct trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.errors_collective = 1;
    t.peak_mem = -1;
    t.num_zeros = -1;
    enum loom_status s = setup(&t, argc, argv);
    if (s == LOOM_OK && !cfg->samples_only) s = train_loop(&t);
    if (t.metrics) fclose(t.metrics);
    loom_tb_close(t.tb);
    if (t.train_src.free) t.train_src.free(t.train_src.ctx);
    if (t.valid_src.free) t.valid_src.free(t.valid_src.ctx);
    if (t.test_src.free) t.test_src.free(t.test_src.ctx);
    micro_free(&t.mb);
    micro_free(&t.row);
    loom_pipeline_free(t.pipe);
    loom_grad_sync_free(t.gsync);
    if (t.model) {
        loom_adamw_free(&t.opt, t.model);
        loom_model_free(t.model);
    }
    if (t.be) loom_backend_destroy(t.be);
    loom_parallel_free(&t.par);
    loom_comm_free(t.world);
    *collective = t.errors_collective;
    return s;
}
