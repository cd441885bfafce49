/* Bucketed, overlapped data-parallel gradient reduction (see loom/grad_sync.h). */
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/grad_sync.h"

struct range {
    int64_t lo, hi; /* floats of the flat gradient buffer */
};

struct loom_grad_sync {
    struct loom_gpt *m;
    struct loom_comm *dp;
    int64_t bucket_floats;
    struct range *layer;     /* [L] range of each local layer (empty when not local) */
    char *layer_done;        /* [L] */
    struct range open;       /* the bucket being filled (lo == hi: empty) */
    struct loom_comm_req **reqs;
    int nreqs, cap, overlapped;
};

enum loom_status loom_grad_sync_create(struct loom_grad_sync **out, struct loom_gpt *m,
                                       int64_t bucket_bytes) {
    struct loom_grad_sync *gs = calloc(1, sizeof *gs);
    if (!gs) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int64_t L = m->cfg.num_layers;
    gs->m = m;
    gs->dp = m->par->group[LOOM_PDIM_DP];
    gs->bucket_floats = bucket_bytes / (int64_t)sizeof(float);
    gs->layer = calloc((size_t)L, sizeof *gs->layer);
    gs->layer_done = calloc((size_t)L, 1);
    gs->cap = (int)L + 8;
    gs->reqs = calloc((size_t)gs->cap, sizeof *gs->reqs);
    if (!gs->layer || !gs->layer_done || !gs->reqs) {
        loom_grad_sync_free(gs);
        return loom_fail(LOOM_ERR_OOM, "out of memory");
    }
    for (int64_t l = 0; l < L; l++) gs->layer[l].lo = gs->layer[l].hi = -1;
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local || p->layer < 0) continue;
        int64_t end = p->offset + (p->local_shape[0] * p->local_shape[1] + 15) / 16 * 16;
        struct range *r = &gs->layer[p->layer];
        if (r->lo < 0 || p->offset < r->lo) r->lo = p->offset;
        if (end > r->hi) r->hi = end;
    }
    *out = gs;
    return LOOM_OK;
}

void loom_grad_sync_free(struct loom_grad_sync *gs) {
    if (!gs) return;
    for (int i = 0; i < gs->nreqs; i++) loom_comm_wait(gs->reqs[i]);
    free(gs->layer);
    free(gs->layer_done);
    free(gs->reqs);
    free(gs);
}

void loom_grad_sync_begin(struct loom_grad_sync *gs) {
    memset(gs->layer_done, 0, (size_t)gs->m->cfg.num_layers);
    gs->open.lo = gs->open.hi = 0;
    gs->overlapped = 0;
}

static int active(const struct loom_grad_sync *gs) { return loom_comm_size(gs->dp) > 1; }

static enum loom_status launch(struct loom_grad_sync *gs, struct range r) {
    if (r.hi <= r.lo) return LOOM_OK;
    if (gs->nreqs == gs->cap) {
        int cap = gs->cap * 2;
        struct loom_comm_req **n = realloc(gs->reqs, (size_t)cap * sizeof *n);
        if (!n) return loom_fail(LOOM_ERR_OOM, "out of memory");
        gs->reqs = n;
        gs->cap = cap;
    }
    /* a host backend reads the gradients now: the backward kernels that write them must be done */
    if (!loom_comm_stream_ordered(gs->dp)) gs->m->be->ops->synchronize(gs->m->be);
    return loom_comm_iallreduce(gs->dp, gs->m->grad_mem + r.lo, r.hi - r.lo, LOOM_DTYPE_F32,
                                LOOM_REDOP_SUM, &gs->reqs[gs->nreqs++]);
}

enum loom_status loom_grad_sync_layer_ready(struct loom_grad_sync *gs, int64_t layer) {
    if (!active(gs) || gs->layer_done[layer]) return LOOM_OK;
    gs->layer_done[layer] = 1;
    struct range r = gs->layer[layer];
    if (gs->open.hi > gs->open.lo && r.hi == gs->open.lo) {
        gs->open.lo = r.lo; /* layers finish last-to-first: the bucket grows downwards */
    } else {
        if (gs->open.hi > gs->open.lo) {
            LOOM_CHECK(launch(gs, gs->open));
            gs->overlapped++;
        }
        gs->open = r;
    }
    if (gs->open.hi - gs->open.lo >= gs->bucket_floats) {
        LOOM_CHECK(launch(gs, gs->open));
        gs->overlapped++;
        gs->open.lo = gs->open.hi = 0;
    }
    /* let earlier buckets progress */
    for (int i = 0; i < gs->nreqs; i++) {
        int done = 0;
        LOOM_CHECK(loom_comm_test(gs->reqs[i], &done));
        if (done) gs->reqs[i--] = gs->reqs[--gs->nreqs];
    }
    return LOOM_OK;
}

enum loom_status loom_grad_sync_finish(struct loom_grad_sync *gs) {
    if (!active(gs)) return LOOM_OK;
    struct loom_gpt *m = gs->m;
    if (gs->open.hi > gs->open.lo) LOOM_CHECK(launch(gs, gs->open));
    gs->open.lo = gs->open.hi = 0;
    /* layers never reported (e.g. forward-only misuse) and the non-layer parameters */
    for (int64_t l = 0; l < m->cfg.num_layers; l++)
        if (!gs->layer_done[l] && gs->layer[l].hi > gs->layer[l].lo) LOOM_CHECK(launch(gs, gs->layer[l]));
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local || p->layer >= 0) continue;
        struct range r = {p->offset, p->offset + p->local_shape[0] * p->local_shape[1]};
        LOOM_CHECK(launch(gs, r));
    }
    enum loom_status s = LOOM_OK;
    for (int i = 0; i < gs->nreqs; i++) {
        enum loom_status s2 = loom_comm_wait(gs->reqs[i]);
        if (s == LOOM_OK) s = s2;
    }
    gs->nreqs = 0;
    return s;
}

int loom_grad_sync_overlapped(const struct loom_grad_sync *gs) { return gs->overlapped; }
