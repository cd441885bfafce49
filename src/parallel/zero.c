/* Sharded gradients and parameters over the data-parallel group (ZeRO stages 2 and 3:
 * --data-parallel-sharding-strategy optim_grads and optim_grads_params; see loom/grad_sync.h).
 *
 * Both reduce-scatter a layer bucket's gradients as soon as its layers' backward of a
 * micro-batch is done (every micro-batch), add this rank's reduced piece to its shard of the
 * step's gradients (gacc) and clear the bucket for the next micro-batch's accumulation. The
 * buckets that hold more than layers (the embeddings, the final norm, the output layer: their
 * tied and sequence-parallel sums come after the last micro-batch) are reduce-scattered once, by
 * finish. The sum is the plain one in another order: the ranks' sums of each micro-batch, added
 * up over the micro-batches.
 *
 * optim_grads_params also keeps only this rank's pieces of the parameters between uses: before a
 * unit's forward or backward its buckets are all-gathered (the next unit's started meanwhile),
 * and once the pass has left a bucket its other ranks' pieces are cleared (zeroed: anything that
 * read them without a gather would compute something else). */
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/grad_sync.h"
#include "grad_sync_impl.h"

static int sharded_grads(const struct loom_grad_sync *gs) {
    return gs->strategy >= LOOM_SHARD_OPTIM_GRADS;
}
static int sharded_params(const struct loom_grad_sync *gs) {
    return gs->strategy == LOOM_SHARD_OPTIM_GRADS_PARAMS;
}
static int64_t piece(const struct loom_grad_sync *gs, const struct bucket *b) {
    return (b->hi - b->lo) / gs->dp_size;
}

static const char *const strategy_names[] = {"no_shard", "optim", "optim_grads",
                                             "optim_grads_params"};
_Static_assert(sizeof strategy_names / sizeof *strategy_names ==
                   LOOM_SHARD_OPTIM_GRADS_PARAMS + 1,
               "a name for every sharding strategy");

const char *loom_dp_sharding_name(enum loom_dp_sharding s) {
    return strategy_names[s];
}

int loom_dp_sharding_parse(const char *name) {
    for (int i = 0; name && i <= LOOM_SHARD_OPTIM_GRADS_PARAMS; i++)
        if (!strcmp(name, strategy_names[i])) return i;
    return -1;
}

enum loom_dp_sharding loom_grad_sync_strategy(const struct loom_grad_sync *gs) {
    return gs->strategy;
}

int loom_grad_sync_every_micro(const struct loom_grad_sync *gs) {
    return gs && sharded_grads(gs);
}

enum loom_status loom_zero_init(struct loom_grad_sync *gs) {
    for (int i = 0; i < gs->nb; i++) gs->b[i].resident = 1; /* the model starts whole */
    if (!sharded_grads(gs)) return LOOM_OK;
    struct loom_backend *be = gs->m->be;
    const size_t bytes = (size_t)gs->shard_len * sizeof(float);
    gs->gacc = be->ops->malloc(be, bytes ? bytes : sizeof(float));
    if (!gs->gacc)
        return loom_fail(LOOM_ERR_OOM, "out of memory for the sharded gradients (%zu MiB)",
                         bytes >> 20);
    be->ops->zero(be, gs->gacc, bytes);
    return LOOM_OK;
}

void loom_zero_free(struct loom_grad_sync *gs) {
    for (int i = 0; i < gs->nb; i++)
        if (gs->b[i].rs) loom_comm_wait(gs->b[i].rs);
    if (gs->gacc) gs->m->be->ops->free(gs->m->be, gs->gacc);
    gs->gacc = NULL;
}

void loom_grad_sync_memory(const struct loom_grad_sync *gs, int64_t *param_floats,
                           int64_t *grad_floats) {
    *param_floats = sharded_params(gs) ? gs->shard_len : gs->m->num_alloc;
    *grad_floats = sharded_grads(gs) ? gs->shard_len : gs->m->num_alloc;
}

/* ---- gradients ---- */

static enum loom_status start_rs(struct loom_grad_sync *gs, struct bucket *b) {
    struct loom_backend *be = gs->m->be;
    /* a host backend reads the gradients now: the backward kernels that write them must be done */
    if (!loom_comm_stream_ordered(gs->dp)) be->ops->synchronize(be);
    b->pending = b->layers;
    return loom_comm_ireduce_scatter(gs->dp, gs->m->grad_mem + b->lo, piece(gs, b), LOOM_DTYPE_F32,
                                     LOOM_REDOP_SUM, &b->rs);
}

/* A started reduce-scatter completed: its piece added to the shard, the bucket cleared. */
static enum loom_status drain(struct loom_grad_sync *gs, struct bucket *b) {
    if (!b->rs) return LOOM_OK;
    struct loom_comm_req *rq = b->rs;
    b->rs = NULL;
    LOOM_CHECK(loom_comm_wait(rq));
    struct loom_backend *be = gs->m->be;
    float *g = gs->m->grad_mem + b->lo;
    const int64_t s = piece(gs, b);
    if (be->ops->written) be->ops->written(be, g, (size_t)(b->hi - b->lo) * sizeof(float));
    be->ops->add(be, gs->gacc + b->soff, gs->gacc + b->soff, g + (int64_t)gs->dp_rank * s, s);
    be->ops->zero(be, g, (size_t)(b->hi - b->lo) * sizeof(float));
    return LOOM_OK;
}

enum loom_status loom_zero_layer_done(struct loom_grad_sync *gs, int64_t layer) {
    for (int i = 0; i < gs->nb; i++) {
        struct bucket *b = &gs->b[i];
        if (b->finish_only || !overlap(gs->layer[layer], b->lo, b->hi)) continue;
        if (--b->pending > 0) continue;
        LOOM_CHECK(drain(gs, b)); /* an earlier round's, should one still run */
        LOOM_CHECK(start_rs(gs, b));
        gs->overlapped++;
    }
    return LOOM_OK;
}

/* The layers' tensor-parallel partial gradients summed over the tensor-parallel group on the
 * shard (the sum commutes with the data-parallel one; the tensor-parallel ranks' buffers share
 * one layout, so their pieces cut the same parameters alike). */
static enum loom_status sum_tp_partial(struct loom_grad_sync *gs) {
    const struct loom_model *m = gs->m;
    struct loom_comm *tp = m->par->group[LOOM_PDIM_TP];
    if (!tp || loom_comm_size(tp) == 1) return LOOM_OK;
    if (!loom_comm_stream_ordered(tp)) m->be->ops->synchronize(m->be);
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local || p->layer < 0 || !(p->roles & LOOM_ROLE_TP_PARTIAL)) continue;
        const struct range r = {p->offset, p->offset + p->local_shape[0] * p->local_shape[1]};
        for (int k = 0; k < gs->nb; k++) {
            const struct bucket *b = &gs->b[k];
            const int64_t s = piece(gs, b), mine = b->lo + (int64_t)gs->dp_rank * s;
            const int64_t n = overlap(r, mine, mine + s);
            if (!n) continue;
            const int64_t at = r.lo > mine ? r.lo : mine;
            LOOM_CHECK(loom_comm_allreduce(tp, gs->gacc + b->soff + (at - mine), n,
                                           LOOM_DTYPE_F32, LOOM_REDOP_SUM));
        }
    }
    return LOOM_OK;
}

enum loom_status loom_zero_finish(struct loom_grad_sync *gs) {
    /* what no round took: the buckets beyond the layers, and any whose round is incomplete */
    for (int i = 0; i < gs->nb; i++) {
        struct bucket *b = &gs->b[i];
        if (b->finish_only || b->pending != b->layers) {
            LOOM_CHECK(drain(gs, b));
            LOOM_CHECK(start_rs(gs, b));
        }
    }
    for (int i = 0; i < gs->nb; i++) LOOM_CHECK(drain(gs, &gs->b[i]));
    LOOM_CHECK(sum_tp_partial(gs));
    /* the shard's totals where the optimizer and the norm read the reduced pieces */
    struct loom_backend *be = gs->m->be;
    for (int i = 0; i < gs->nb; i++) {
        const struct bucket *b = &gs->b[i];
        const int64_t s = piece(gs, b);
        be->ops->copy(be, gs->m->grad_mem + b->lo + (int64_t)gs->dp_rank * s, gs->gacc + b->soff,
                      (size_t)s * sizeof(float));
    }
    be->ops->zero(be, gs->gacc, (size_t)gs->shard_len * sizeof(float));
    return LOOM_OK;
}

/* ---- parameters ---- */

static void release(struct loom_grad_sync *gs, struct bucket *b) {
    if (!b->resident) return;
    struct loom_backend *be = gs->m->be;
    float *p = gs->m->param_mem;
    const int64_t s = piece(gs, b), mine = b->lo + (int64_t)gs->dp_rank * s;
    if (mine > b->lo) be->ops->zero(be, p + b->lo, (size_t)(mine - b->lo) * sizeof(float));
    if (b->hi > mine + s)
        be->ops->zero(be, p + mine + s, (size_t)(b->hi - mine - s) * sizeof(float));
    b->resident = 0;
}

/* Start the gathers of the buckets of `unit` that are neither present nor on their way. */
static enum loom_status start_gathers(struct loom_grad_sync *gs, int64_t unit) {
    const struct range r = loom_grad_sync_unit_range(gs, unit);
    int synced = 0;
    for (int i = gs->nb - 1; i >= 0; i--) {
        struct bucket *b = &gs->b[i];
        if (b->resident || b->gather || !overlap(r, b->lo, b->hi)) continue;
        /* a host backend's buffer is read now: the kernels that write it must be done */
        if (!synced && !loom_comm_stream_ordered(gs->dp)) gs->m->be->ops->synchronize(gs->m->be);
        synced = 1;
        gs->gbuf = gs->m->param_mem;
        LOOM_CHECK(loom_comm_iallgather(gs->dp, gs->gbuf + b->lo, piece(gs, b), LOOM_DTYPE_F32,
                                        &b->gather));
    }
    return LOOM_OK;
}

/* Drain the reductions of the buckets `unit` touches. */
static enum loom_status drain_unit(struct loom_grad_sync *gs, int64_t unit) {
    const struct range r = loom_grad_sync_unit_range(gs, unit);
    for (int i = 0; i < gs->nb; i++)
        if (overlap(r, gs->b[i].lo, gs->b[i].hi)) LOOM_CHECK(drain(gs, &gs->b[i]));
    return LOOM_OK;
}

/* A piece may reach into the unit that runs after it (a layer's forward makes the next layer's
 * first norm, fused with its last residual add; a backward adds to the bias gradient of the
 * product that runs next): what use makes ready covers `next` too. */
enum loom_status loom_grad_sync_use(struct loom_grad_sync *gs, int64_t unit, int64_t next,
                                    int backward) {
    if (!gs) return LOOM_OK;
    if (sharded_params(gs)) {
        LOOM_CHECK(start_gathers(gs, unit));
        if (next != LOOM_UNIT_NONE) LOOM_CHECK(start_gathers(gs, next));
    }
    /* the started gathers (these, or the distributed optimizer's overlapped one) */
    LOOM_CHECK(loom_grad_sync_gather_wait(gs, unit));
    if (sharded_params(gs) && next != LOOM_UNIT_NONE) {
        LOOM_CHECK(loom_grad_sync_gather_wait(gs, next));
        /* prefetch: the layer after `next` in the pass, when this rank holds it (a neighbour
         * layer on the same rank is in the same chunk: the chunks of a rank are pp > 1 stages
         * apart), gathered while this piece computes */
        const int64_t after = next >= 0 ? next + (backward ? -1 : 1) : -1;
        if (after >= 0 && after < gs->m->num_layers && gs->layer[after].hi > gs->layer[after].lo)
            LOOM_CHECK(start_gathers(gs, after));
    }
    if (backward && sharded_grads(gs)) {
        /* the backward adds to these gradients: their buckets' reductions must be done */
        LOOM_CHECK(drain_unit(gs, unit));
        if (next != LOOM_UNIT_NONE) LOOM_CHECK(drain_unit(gs, next));
    }
    return LOOM_OK;
}

enum loom_status loom_grad_sync_layer_done(struct loom_grad_sync *gs, int64_t layer, int64_t next,
                                           int backward, int final) {
    if (!gs) return LOOM_OK;
    if (sharded_params(gs)) {
        const struct range rn = next >= 0 ? loom_grad_sync_unit_range(gs, next)
                                          : (struct range){-1, -1};
        for (int i = 0; i < gs->nb; i++) {
            struct bucket *b = &gs->b[i];
            if (b->finish_only || !overlap(gs->layer[layer], b->lo, b->hi) ||
                overlap(rn, b->lo, b->hi))
                continue;
            release(gs, b);
        }
    }
    if (!backward) return LOOM_OK;
    if (sharded_grads(gs)) return loom_zero_layer_done(gs, layer);
    return final ? loom_grad_sync_layer_ready(gs, layer) : LOOM_OK;
}

enum loom_status loom_grad_sync_op_done(struct loom_grad_sync *gs) {
    if (!gs || !sharded_params(gs)) return LOOM_OK;
    return loom_grad_sync_shard_params(gs);
}

enum loom_status loom_grad_sync_shard_params(struct loom_grad_sync *gs) {
    if (!gs || !sharded_params(gs)) return LOOM_OK;
    for (int i = 0; i < gs->nb; i++) {
        struct bucket *b = &gs->b[i];
        if (b->gather) { /* a prefetch no piece used */
            struct loom_comm_req *rq = b->gather;
            b->gather = NULL;
            LOOM_CHECK(loom_comm_wait(rq));
            b->resident = 1;
        }
        release(gs, b);
    }
    return LOOM_OK;
}

enum loom_status loom_grad_sync_gather_params(struct loom_grad_sync *gs) {
    if (!gs || !sharded_params(gs)) return LOOM_OK;
    LOOM_CHECK(start_gathers(gs, LOOM_GATHER_ALL));
    return loom_grad_sync_gather_wait(gs, LOOM_GATHER_ALL);
}
