/* AdamW over the parameter table, and the global gradient norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/optim.h"

/* The parameters that take the decoupled learning rate (Megatron-LM's embedding-or-output
 * parameters: the word embedding and the output layer, not the position embedding). */
static int is_decoupled(const struct loom_param *p) {
    return strcmp(p->name, "embedding.word_embeddings.weight") == 0 ||
           strcmp(p->name, "output_layer.weight") == 0;
}

/* Parameters are laid out one after the other in the flat buffers, each starting on a 16-float
 * boundary (the padding holds zeros and stays zero: its gradient is zero). Neighbours with the
 * same weight decay form one run, which is the same arithmetic element by element as a range
 * per parameter. Runs are cut to [lo, hi) and given relative to lo. group 0: the parameters at
 * the learning rate (all of them when !decoupled), 1: those at the decoupled one. Returns the
 * number of runs; with off NULL only counts them. */
static int adamw_runs(const struct loom_gpt *model, int64_t lo, int64_t hi, int decoupled,
                      int group, int64_t *off, int64_t *len, uint8_t *decay) {
    int nruns = 0;
    int64_t run_lo = 0, run_hi = -1;
    int run_wd = 0;
    for (int i = 0; i <= model->nparams; i++) {
        const struct loom_param *p = i < model->nparams ? &model->params[i] : NULL;
        if (p && !p->local) continue;
        if (p && (decoupled && is_decoupled(p)) != group) continue;
        int64_t n = p ? p->local_shape[0] * p->local_shape[1] : 0;
        int wd = p ? p->weight_decay != 0 : 0;
        if (p && run_hi >= 0 && wd == run_wd && p->offset == (run_hi + 15) / 16 * 16) {
            run_hi = p->offset + n; /* extends the run */
            continue;
        }
        const int64_t a = run_lo > lo ? run_lo : lo, b = run_hi < hi ? run_hi : hi;
        if (b > a) {
            if (off) {
                off[nruns] = a - lo;
                len[nruns] = b - a;
                decay[nruns] = (uint8_t)run_wd;
            }
            nruns++;
        }
        if (p) {
            run_lo = p->offset;
            run_hi = p->offset + n;
            run_wd = wd;
        }
    }
    return nruns;
}

enum loom_status loom_adamw_init(struct loom_adamw *o, struct loom_gpt *model, int distributed,
                                 int decoupled) {
    struct loom_backend *be = model->be;
    const int dp = loom_dp_size(model->par);
    o->step = 0;
    o->distributed = distributed && dp > 1;
    o->shard_lo = 0;
    o->shard_len = model->num_local;
    if (o->distributed) { /* equal shares of num_alloc, a multiple of 16 x dp */
        o->shard_len = model->num_alloc / dp;
        o->shard_lo = (int64_t)loom_dp_rank(model->par) * o->shard_len;
    }
    const int64_t hi = o->shard_lo + o->shard_len;
    size_t bytes = (size_t)o->shard_len * sizeof(float);
    o->m = be->ops->malloc(be, bytes ? bytes : sizeof(float));
    o->v = be->ops->malloc(be, bytes ? bytes : sizeof(float));
    o->nruns_main = adamw_runs(model, o->shard_lo, hi, decoupled, 0, NULL, NULL, NULL);
    o->nruns = o->nruns_main + adamw_runs(model, o->shard_lo, hi, decoupled, 1, NULL, NULL, NULL);
    size_t nr = (size_t)(o->nruns > 0 ? o->nruns : 1);
    o->run_off = malloc(nr * 2 * sizeof(int64_t));
    o->run_len = o->run_off ? o->run_off + nr : NULL;
    o->run_decay = malloc(nr);
    if (!o->run_off || !o->run_decay) return loom_fail(LOOM_ERR_OOM, "out of memory");
    const int k = o->nruns_main;
    adamw_runs(model, o->shard_lo, hi, decoupled, 0, o->run_off, o->run_len, o->run_decay);
    adamw_runs(model, o->shard_lo, hi, decoupled, 1, o->run_off + k, o->run_len + k,
               o->run_decay + k);
    if (!o->m || !o->v)
        return loom_fail(LOOM_ERR_OOM,
                         "out of memory for the optimizer state (%zu MiB; "
                         "--use-distributed-optimizer shares it over the data-parallel ranks)",
                         (2 * bytes) >> 20);
    be->ops->zero(be, o->m, bytes);
    be->ops->zero(be, o->v, bytes);
    return LOOM_OK;
}

void loom_adamw_free(struct loom_adamw *o, struct loom_gpt *model) {
    if (o->m) model->be->ops->free(model->be, o->m);
    if (o->v) model->be->ops->free(model->be, o->v);
    o->m = o->v = NULL;
    free(o->run_off);
    free(o->run_decay);
    o->run_off = o->run_len = NULL;
    o->run_decay = NULL;
    o->nruns = 0;
}

/* The shares of buf (floats of the model's layout), each rank's [shard_lo, + shard_len), gathered
 * into full (every rank's; full may be buf, the share then in place), then the backend told that
 * full was written. */
static enum loom_status gather_shares(struct loom_adamw *o, struct loom_gpt *model, float *full,
                                      const float *share) {
    struct loom_backend *be = model->be;
    LOOM_CHECK(loom_comm_allgather(model->par->group[LOOM_PDIM_DP], full, share, o->shard_len,
                                   LOOM_DTYPE_F32));
    if (be->ops->written) be->ops->written(be, full, (size_t)model->num_alloc * sizeof(float));
    return LOOM_OK;
}

/* The runs of each learning rate in one call (on cuda one launch each). */
enum loom_status loom_adamw_step(struct loom_adamw *o, struct loom_gpt *model, double lr,
                                 double lr_decoupled, double grad_scale) {
    struct loom_backend *be = model->be;
    o->step++;
    for (int g = 0; g < 2; g++) {
        const int r0 = g ? o->nruns_main : 0, n = g ? o->nruns - o->nruns_main : o->nruns_main;
        if (n == 0) continue;
        loom_op(be, adamw_ranges, model->param_mem + o->shard_lo, model->grad_mem + o->shard_lo,
                o->m, o->v, o->run_off + r0, o->run_len + r0, o->run_decay + r0, n,
                (float)(g ? lr_decoupled : lr), (float)o->beta1, (float)o->beta2, (float)o->eps,
                (float)o->weight_decay, o->step, (float)grad_scale);
    }
    if (!o->distributed) return LOOM_OK;
    return gather_shares(o, model, model->param_mem, model->param_mem + o->shard_lo);
}

enum loom_status loom_adamw_moment(struct loom_adamw *o, struct loom_gpt *model, int which,
                                   const float **out) {
    float *mine = which ? o->v : o->m;
    *out = mine;
    if (!o->distributed) return LOOM_OK;
    LOOM_CHECK(gather_shares(o, model, model->grad_mem, mine));
    *out = model->grad_mem;
    return LOOM_OK;
}

void loom_adamw_set_moment(struct loom_adamw *o, struct loom_gpt *model, int which,
                           const float *full) {
    struct loom_backend *be = model->be;
    be->ops->copy(be, which ? o->v : o->m, full + o->shard_lo,
                  (size_t)o->shard_len * sizeof(float));
}

/* The squared norm counts each parameter once: tensor-parallel copies (tp_dim < 0) on TP rank 0
 * only, the tied output layer on the first stage only; the zeros (when asked) over the same
 * elements. */
enum loom_status loom_param_buffer_norm(struct loom_gpt *model, const float *buf, double *norm,
                                        int64_t *zeros) {
    struct loom_parallel *par = model->par;
    struct loom_backend *be = model->be;
    int tpr = loom_tp_rank(par);
    int64_t *off = malloc((size_t)(model->nparams + 1) * 2 * sizeof(int64_t));
    if (!off) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int64_t *len = off + model->nparams + 1;
    int nr = 0;
    for (int i = 0; i < model->nparams; i++) {
        const struct loom_param *p = &model->params[i];
        if (!p->local) continue;
        if (p->tp_dim < 0 && tpr != 0) continue;
        if (!model->first_stage && !model->cfg.untie &&
            strcmp(p->name, "embedding.word_embeddings.weight") == 0)
            continue;
        off[nr] = p->offset;
        len[nr] = p->local_shape[0] * p->local_shape[1];
        nr++;
    }
    int64_t z = 0;
    double ss = loom_op(be, sumsq_ranges, buf, off, len, nr, zeros ? &z : NULL);
    free(off);
    for (int g = 0; g < 2; g++) { /* over the tensor-, then the pipeline-parallel group */
        struct loom_comm *c = par->group[g ? LOOM_PDIM_PP : LOOM_PDIM_TP];
        if (loom_comm_size(c) <= 1) continue;
        LOOM_CHECK(loom_comm_allreduce(c, &ss, 1, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
        if (zeros) LOOM_CHECK(loom_comm_allreduce(c, &z, 1, LOOM_DTYPE_I64, LOOM_REDOP_SUM));
    }
    *norm = sqrt(ss);
    if (zeros) *zeros = z;
    return LOOM_OK;
}

enum loom_status loom_grad_norm(struct loom_gpt *model, double *norm, int64_t *zeros) {
    return loom_param_buffer_norm(model, model->grad_mem, norm, zeros);
}
