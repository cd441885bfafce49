/* AdamW over the parameter table, and the global gradient norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/grad_sync.h"
#include "loom/optim.h"
#include "optim/onebit_adam.h"

/* The parameters that take the decoupled learning rate (LOOM_ROLE_DECOUPLED_LR: Megatron-LM's
 * embedding-or-output parameters, the word embedding and the output layer). */
static int is_decoupled(const struct loom_param *p) {
    return (p->roles & LOOM_ROLE_DECOUPLED_LR) != 0;
}

/* Parameters are laid out one after the other in the flat buffers, each starting on a 16-float
 * boundary (the padding holds zeros and stays zero: its gradient is zero). Neighbours with the
 * same weight decay form one run, which is the same arithmetic element by element as a range
 * per parameter. Runs are cut to [lo, hi) and given relative to lo. group 0: the parameters at
 * the learning rate (all of them when !decoupled), 1: those at the decoupled one. Returns the
 * number of runs; with off NULL only counts them. */
static int adamw_runs(const struct loom_model *model, int64_t lo, int64_t hi, int decoupled,
                      int group, int64_t *off, int64_t *len, uint8_t *decay) {
    int nruns = 0;
    int64_t run_lo = 0, run_hi = -1;
    int run_wd = 0;
    for (int i = 0; i <= model->nparams; i++) {
        const struct loom_param *p = i < model->nparams ? &model->params[i] : NULL;
        if (p && !p->local) continue;
        if (p && (decoupled && is_decoupled(p)) != group) continue;
        int64_t n = p ? p->local_shape[0] * p->local_shape[1] : 0;
        int wd = p ? (p->roles & LOOM_ROLE_DECAY) != 0 : 0;
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

enum loom_status loom_adamw_init(struct loom_adamw *o, struct loom_model *model,
                                 struct loom_grad_sync *shards, int decoupled) {
    struct loom_backend *be = model->be;
    o->step = 0;
    o->shards = shards && loom_grad_sync_scatters(shards) ? shards : NULL;
    o->distributed = o->shards != NULL;
    /* the pieces this rank updates: its shard of the buckets, or every local parameter */
    static const int64_t zero = 0;
    const int64_t *plo = &zero, *plen = &model->num_local;
    const int np = o->distributed ? loom_grad_sync_shard(o->shards, &plo, &plen) : 1;
    o->shard_len = 0;
    for (int i = 0; i < np; i++)
        o->shard_len += plen[i];
    size_t bytes = (size_t)o->shard_len * sizeof(float);
    o->m = be->ops->malloc(be, bytes ? bytes : sizeof(float));
    o->v = be->ops->malloc(be, bytes ? bytes : sizeof(float));
    /* the runs of each group over the pieces in order, the moments packed in that order */
    o->nruns = 0;
    for (int g = 0; g < 2; g++)
        for (int i = 0; i < np; i++)
            o->nruns += adamw_runs(model, plo[i], plo[i] + plen[i], decoupled, g, NULL, NULL, NULL);
    size_t nr = (size_t)(o->nruns > 0 ? o->nruns : 1);
    o->run_off = malloc(nr * 3 * sizeof(int64_t));
    o->run_soff = o->run_off ? o->run_off + nr : NULL;
    o->run_len = o->run_off ? o->run_off + 2 * nr : NULL;
    o->run_decay = malloc(nr);
    if (!o->run_off || !o->run_decay) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int k = 0;
    for (int g = 0; g < 2; g++) {
        if (g == 1) o->nruns_main = k;
        int64_t soff = 0;
        for (int i = 0; i < np; i++) {
            const int n = adamw_runs(model, plo[i], plo[i] + plen[i], decoupled, g, o->run_off + k,
                                     o->run_len + k, o->run_decay + k);
            for (int r = k; r < k + n; r++) { /* relative to the piece: to the buffers */
                o->run_soff[r] = soff + o->run_off[r];
                o->run_off[r] += plo[i];
            }
            k += n;
            soff += plen[i];
        }
    }
    if (!o->m || !o->v)
        return loom_fail(LOOM_ERR_OOM,
                         "out of memory for the optimizer state (%zu MiB; "
                         "--use-distributed-optimizer shares it over the data-parallel ranks)",
                         (2 * bytes) >> 20);
    be->ops->zero(be, o->m, bytes);
    be->ops->zero(be, o->v, bytes);
    return LOOM_OK;
}

void loom_adamw_free(struct loom_adamw *o, struct loom_model *model) {
    loom_onebit_adam_free(o);
    if (o->m) model->be->ops->free(model->be, o->m);
    if (o->v) model->be->ops->free(model->be, o->v);
    o->m = o->v = NULL;
    free(o->run_off);
    free(o->run_decay);
    o->run_off = o->run_soff = o->run_len = NULL;
    o->run_decay = NULL;
    o->nruns = 0;
}

/* The runs of each learning rate in one call (on cuda one launch each). */
enum loom_status loom_adamw_step(struct loom_adamw *o, struct loom_model *model, double lr,
                                 double lr_decoupled, double grad_scale) {
    struct loom_backend *be = model->be;
    if (o->onebit) return loom_onebit_adam_step(o, model, lr, lr_decoupled, grad_scale);
    o->step++;
    for (int g = 0; g < 2; g++) {
        const int r0 = g ? o->nruns_main : 0, n = g ? o->nruns - o->nruns_main : o->nruns_main;
        if (n == 0) continue;
        loom_op(be, adamw_ranges, model->param_mem, model->grad_mem, o->m, o->v, o->run_off + r0,
                o->run_soff + r0, o->run_len + r0, o->run_decay + r0, n,
                (float)(g ? lr_decoupled : lr), (float)o->beta1, (float)o->beta2, (float)o->eps,
                (float)o->weight_decay, o->step, (float)grad_scale);
    }
    if (!o->distributed) return LOOM_OK;
    /* sharded parameters: each rank keeps its pieces, gathered where they are used */
    if (loom_grad_sync_strategy(o->shards) == LOOM_SHARD_OPTIM_GRADS_PARAMS) return LOOM_OK;
    if (o->overlap_gather) return loom_grad_sync_gather_start(o->shards, model->param_mem);
    return loom_grad_sync_gather(o->shards, model->param_mem);
}

/* Copies between a packed moment and the flat layout, piece by piece: packed_to_flat 1 puts
 * packed[...] at the pieces' places in flat, 0 takes them from there. */
static void move_pieces(struct loom_adamw *o, struct loom_model *model, float *dst, const float *src,
                        int packed_to_flat) {
    struct loom_backend *be = model->be;
    const int64_t *plo, *plen;
    const int np = loom_grad_sync_shard(o->shards, &plo, &plen);
    int64_t soff = 0;
    for (int i = 0; i < np; i++) {
        const int64_t at = packed_to_flat ? plo[i] : soff, from = packed_to_flat ? soff : plo[i];
        be->ops->copy(be, dst + at, src + from, (size_t)plen[i] * sizeof(float));
        soff += plen[i];
    }
}

enum loom_status loom_adamw_moment(struct loom_adamw *o, struct loom_model *model, int which,
                                   const float **out) {
    float *mine = which ? o->v : o->m;
    *out = mine;
    if (!o->distributed) return LOOM_OK;
    move_pieces(o, model, model->grad_mem, mine, 1);
    LOOM_CHECK(loom_grad_sync_gather(o->shards, model->grad_mem));
    *out = model->grad_mem;
    return LOOM_OK;
}

void loom_adamw_set_moment(struct loom_adamw *o, struct loom_model *model, int which,
                           const float *full) {
    float *mine = which ? o->v : o->m;
    if (!o->distributed) {
        model->be->ops->copy(model->be, mine, full, (size_t)o->shard_len * sizeof(float));
        return;
    }
    move_pieces(o, model, mine, full, 0);
}

/* The ranges of the parameters a norm counts, each once: tensor-parallel copies (tp_dim < 0) on
 * TP rank 0 only, a tied parameter (LOOM_ROLE_TIED) on the first stage only. off and len: room for
 * nparams. Returns how many. */
static int counted_ranges(const struct loom_model *model, int64_t *off, int64_t *len) {
    const int tpr = loom_tp_rank(model->par);
    int nr = 0;
    for (int i = 0; i < model->nparams; i++) {
        const struct loom_param *p = &model->params[i];
        if (!p->local) continue;
        if (p->tp_dim < 0 && tpr != 0) continue;
        if (!model->first_stage && (p->roles & LOOM_ROLE_TIED)) continue;
        off[nr] = p->offset;
        len[nr] = p->local_shape[0] * p->local_shape[1];
        nr++;
    }
    return nr;
}

/* The sum of squares (and zeros) over the ranges, then over the groups whose ranks hold
 * different elements: dp (when not NULL), then tensor- and pipeline-parallel. */
static enum loom_status norm_of_ranges(struct loom_model *model, const float *buf, const int64_t *off,
                                       const int64_t *len, int nr, struct loom_comm *dp,
                                       double *norm, int64_t *zeros) {
    struct loom_parallel *par = model->par;
    int64_t z = 0;
    double ss = loom_op(model->be, sumsq_ranges, buf, off, len, nr, zeros ? &z : NULL);
    struct loom_comm *groups[3] = {dp, par->group[LOOM_PDIM_TP], par->group[LOOM_PDIM_PP]};
    for (int g = 0; g < 3; g++) {
        struct loom_comm *c = groups[g];
        if (!c || loom_comm_size(c) <= 1) continue;
        LOOM_CHECK(loom_comm_allreduce(c, &ss, 1, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
        if (zeros) LOOM_CHECK(loom_comm_allreduce(c, &z, 1, LOOM_DTYPE_I64, LOOM_REDOP_SUM));
    }
    *norm = sqrt(ss);
    if (zeros) *zeros = z;
    return LOOM_OK;
}

enum loom_status loom_param_buffer_norm(struct loom_model *model, const float *buf, double *norm,
                                        int64_t *zeros) {
    int64_t *off = malloc((size_t)(model->nparams + 1) * 2 * sizeof(int64_t));
    if (!off) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int64_t *len = off + model->nparams + 1;
    const int nr = counted_ranges(model, off, len);
    enum loom_status s = norm_of_ranges(model, buf, off, len, nr, NULL, norm, zeros);
    free(off);
    return s;
}

/* Distributed: the counted ranges cut to this rank's pieces, whose gradients are the reduced
 * ones; the data-parallel ranks' sums added. */
enum loom_status loom_grad_norm(const struct loom_adamw *o, struct loom_model *model, double *norm,
                                int64_t *zeros) {
    if (!o->distributed) return loom_param_buffer_norm(model, model->grad_mem, norm, zeros);
    const int64_t *plo, *plen;
    const int np = loom_grad_sync_shard(o->shards, &plo, &plen);
    /* the counted ranges, then their cuts by the pieces: two sets of disjoint intervals meet in
     * fewer than nr + np places */
    const size_t nmax = (size_t)model->nparams + 1, cap = (size_t)model->nparams + (size_t)np;
    int64_t *off = malloc((nmax + cap) * 2 * sizeof(int64_t));
    if (!off) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int64_t *len = off + nmax, *coff = len + nmax, *clen = coff + cap;
    const int nr = counted_ranges(model, off, len);
    int nc = 0;
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < np; i++) {
            const int64_t a = off[r] > plo[i] ? off[r] : plo[i];
            const int64_t b =
                off[r] + len[r] < plo[i] + plen[i] ? off[r] + len[r] : plo[i] + plen[i];
            if (b <= a) continue;
            coff[nc] = a;
            clen[nc++] = b - a;
        }
    enum loom_status s = norm_of_ranges(model, model->grad_mem, coff, clen, nc,
                                        model->par->group[LOOM_PDIM_DP], norm, zeros);
    free(off);
    return s;
}
