/* Bucketed, overlapped data-parallel gradient reduction (see loom/grad_sync.h). */
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/grad_sync.h"
#include "grad_sync_impl.h"


static enum loom_status add_bucket(struct loom_grad_sync *gs, int64_t lo, int64_t hi) {
    if (hi <= lo) return LOOM_OK;
    struct bucket *nb = realloc(gs->b, (size_t)(gs->nb + 1) * sizeof *nb);
    if (!nb) return loom_fail(LOOM_ERR_OOM, "out of memory");
    gs->b = nb;
    struct bucket *b = &gs->b[gs->nb++];
    memset(b, 0, sizeof *b);
    b->lo = lo;
    b->hi = hi;
    int64_t covered = 0;
    for (int64_t l = 0; l < gs->m->num_layers; l++) {
        const int64_t o = overlap(gs->layer[l], lo, hi);
        covered += o;
        b->layers += o > 0;
    }
    b->finish_only = covered < hi - lo;
    return LOOM_OK;
}

/* The cuts: see loom/grad_sync.h. Every cut is a multiple of 16 dp, and so is num_alloc. */
static enum loom_status make_buckets(struct loom_grad_sync *gs, int64_t bucket_floats) {
    const struct loom_model *m = gs->m;
    const int64_t L = m->num_layers, grain = 16 * (int64_t)gs->dp_size;
    int64_t top = m->num_alloc, minlo = -1, maxhi = -1;
    for (int64_t l = 0; l < L; l++) {
        const struct range r = gs->layer[l];
        if (r.hi <= r.lo) continue;
        if (minlo < 0 || r.lo < minlo) minlo = r.lo;
        if (r.hi > maxhi) maxhi = r.hi;
    }
    gs->minlo = minlo;
    gs->maxhi = maxhi;
    if (minlo < 0) return add_bucket(gs, 0, top); /* no local layer */
    int64_t cur = maxhi / grain * grain;
    LOOM_CHECK(add_bucket(gs, cur, top));
    /* the layers from the highest offset down */
    char *taken = calloc((size_t)L + 1, 1);
    if (!taken) return loom_fail(LOOM_ERR_OOM, "out of memory");
    for (;;) {
        int64_t best = -1;
        for (int64_t l = 0; l < L; l++)
            if (!taken[l] && gs->layer[l].hi > gs->layer[l].lo &&
                (best < 0 || gs->layer[l].lo > gs->layer[best].lo))
                best = l;
        if (best < 0) break;
        taken[best] = 1;
        const int64_t cut = round_up(gs->layer[best].lo, grain);
        if (cut < cur && cur - cut >= bucket_floats) {
            enum loom_status s = add_bucket(gs, cut, cur);
            if (s != LOOM_OK) {
                free(taken);
                return s;
            }
            cur = cut;
        }
    }
    free(taken);
    const int64_t cut = round_up(minlo, grain);
    if (cut < cur) {
        LOOM_CHECK(add_bucket(gs, cut, cur));
        cur = cut;
    }
    return add_bucket(gs, 0, cur);
}

static enum loom_status make_shard(struct loom_grad_sync *gs) {
    const int n = gs->scatter ? gs->nb : 1;
    gs->piece_lo = malloc((size_t)n * 2 * sizeof(int64_t));
    if (!gs->piece_lo) return loom_fail(LOOM_ERR_OOM, "out of memory");
    gs->piece_len = gs->piece_lo + n;
    gs->npieces = n;
    if (!gs->scatter) {
        gs->piece_lo[0] = 0;
        gs->piece_len[0] = gs->m->num_local;
        return LOOM_OK;
    }
    gs->shard_len = 0;
    for (int i = 0; i < n; i++) { /* the buckets run downwards */
        struct bucket *b = &gs->b[n - 1 - i];
        const int64_t s = (b->hi - b->lo) / gs->dp_size;
        gs->piece_lo[i] = b->lo + (int64_t)gs->dp_rank * s;
        gs->piece_len[i] = s;
        b->soff = gs->shard_len;
        gs->shard_len += s;
    }
    return LOOM_OK;
}

enum loom_status loom_grad_sync_create(struct loom_grad_sync **out, struct loom_model *m,
                                       int64_t bucket_bytes, enum loom_dp_sharding strategy) {
    struct loom_grad_sync *gs = calloc(1, sizeof *gs);
    if (!gs) return loom_fail(LOOM_ERR_OOM, "out of memory");
    *out = gs;
    int64_t L = m->num_layers;
    gs->m = m;
    gs->dp = m->par->group[LOOM_PDIM_DP];
    gs->dp_size = loom_comm_size(gs->dp);
    gs->dp_rank = loom_comm_rank(gs->dp);
    gs->strategy = gs->dp_size > 1 ? strategy : LOOM_SHARD_NO_SHARD;
    gs->scatter = gs->strategy != LOOM_SHARD_NO_SHARD;
    gs->layer = calloc((size_t)L, sizeof *gs->layer);
    gs->layer_done = calloc((size_t)L, 1);
    gs->cap = (int)L + 8;
    gs->reqs = calloc((size_t)gs->cap, sizeof *gs->reqs);
    if (!gs->layer || !gs->layer_done || !gs->reqs) return loom_fail(LOOM_ERR_OOM, "out of memory");
    for (int64_t l = 0; l < L; l++) gs->layer[l].lo = gs->layer[l].hi = -1;
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local || p->layer < 0) continue;
        int64_t end = p->offset + round_up(p->local_shape[0] * p->local_shape[1], 16);
        struct range *r = &gs->layer[p->layer];
        if (r->lo < 0 || p->offset < r->lo) r->lo = p->offset;
        if (end > r->hi) r->hi = end;
    }
    LOOM_CHECK(make_buckets(gs, bucket_bytes / (int64_t)sizeof(float)));
    LOOM_CHECK(make_shard(gs));
    if (!gs->scatter) gs->shard_len = m->num_alloc;
    return loom_zero_init(gs);
}

void loom_grad_sync_free(struct loom_grad_sync *gs) {
    if (!gs) return;
    for (int i = 0; i < gs->nreqs; i++) loom_comm_wait(gs->reqs[i]);
    for (int i = 0; i < gs->nb; i++)
        if (gs->b[i].gather) loom_comm_wait(gs->b[i].gather);
    loom_zero_free(gs);
    free(gs->layer);
    free(gs->layer_done);
    free(gs->b);
    free(gs->piece_lo);
    free(gs->reqs);
    free(gs);
}

void loom_grad_sync_begin(struct loom_grad_sync *gs) {
    memset(gs->layer_done, 0, (size_t)gs->m->num_layers);
    for (int i = 0; i < gs->nb; i++) {
        gs->b[i].pending = gs->b[i].layers;
        gs->b[i].launched = 0;
    }
    gs->overlapped = 0;
}

static int active(const struct loom_grad_sync *gs) {
    return gs->dp_size > 1 && !gs->local;
}

void loom_grad_sync_set_local(struct loom_grad_sync *gs, int local) {
    gs->local = local;
}

static enum loom_status launch(struct loom_grad_sync *gs, struct bucket *b) {
    b->launched = 1;
    if (gs->nreqs == gs->cap) {
        int cap = gs->cap * 2;
        struct loom_comm_req **n = realloc(gs->reqs, (size_t)cap * sizeof *n);
        if (!n) return loom_fail(LOOM_ERR_OOM, "out of memory");
        gs->reqs = n;
        gs->cap = cap;
    }
    /* a host backend reads the gradients now: the backward kernels that write them must be done */
    if (!loom_comm_stream_ordered(gs->dp)) gs->m->be->ops->synchronize(gs->m->be);
    float *g = gs->m->grad_mem + b->lo;
    struct loom_comm_req **rq = &gs->reqs[gs->nreqs++];
    if (gs->scatter)
        return loom_comm_ireduce_scatter(gs->dp, g, (b->hi - b->lo) / gs->dp_size, LOOM_DTYPE_F32,
                                         LOOM_REDOP_SUM, rq);
    return loom_comm_iallreduce(gs->dp, g, b->hi - b->lo, LOOM_DTYPE_F32, LOOM_REDOP_SUM, rq);
}

enum loom_status loom_grad_sync_layer_ready(struct loom_grad_sync *gs, int64_t layer) {
    if (!active(gs) || gs->layer_done[layer]) return LOOM_OK;
    gs->layer_done[layer] = 1;
    for (int i = 0; i < gs->nb; i++) {
        struct bucket *b = &gs->b[i];
        if (!overlap(gs->layer[layer], b->lo, b->hi)) continue;
        if (--b->pending == 0 && !b->finish_only) {
            LOOM_CHECK(launch(gs, b));
            gs->overlapped++;
        }
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
    if (gs->strategy >= LOOM_SHARD_OPTIM_GRADS) return loom_zero_finish(gs);
    for (int i = 0; i < gs->nb; i++)
        if (!gs->b[i].launched) LOOM_CHECK(launch(gs, &gs->b[i]));
    enum loom_status s = LOOM_OK;
    for (int i = 0; i < gs->nreqs; i++) {
        enum loom_status s2 = loom_comm_wait(gs->reqs[i]);
        if (s == LOOM_OK) s = s2;
    }
    gs->nreqs = 0;
    return s;
}

int loom_grad_sync_overlapped(const struct loom_grad_sync *gs) { return gs->overlapped; }

int loom_grad_sync_buckets(const struct loom_grad_sync *gs) {
    return gs->nb;
}

int loom_grad_sync_scatters(const struct loom_grad_sync *gs) {
    return gs->scatter;
}

int loom_grad_sync_shard(const struct loom_grad_sync *gs, const int64_t **lo, const int64_t **len) {
    *lo = gs->piece_lo;
    *len = gs->piece_len;
    return gs->npieces;
}

/* The buckets run downwards: from the last, the lowest offset first (the embeddings, then the
 * first layers: the order the next forward reads them). */
enum loom_status loom_grad_sync_gather_start(struct loom_grad_sync *gs, float *buf) {
    if (!gs->scatter) return LOOM_OK;
    LOOM_CHECK(loom_grad_sync_gather_wait(gs, LOOM_GATHER_ALL)); /* one gather at a time */
    /* a host backend's buffer is read now: the optimizer's kernels must be done */
    if (!loom_comm_stream_ordered(gs->dp)) gs->m->be->ops->synchronize(gs->m->be);
    gs->gbuf = buf;
    for (int i = gs->nb - 1; i >= 0; i--) {
        struct bucket *b = &gs->b[i];
        LOOM_CHECK(loom_comm_iallgather(gs->dp, buf + b->lo, (b->hi - b->lo) / gs->dp_size,
                                        LOOM_DTYPE_F32, &b->gather));
    }
    return LOOM_OK;
}

struct range loom_grad_sync_unit_range(const struct loom_grad_sync *gs, int64_t unit) {
    /* no local layer: all of it below */
    struct range r = {0, gs->m->num_alloc};
    if (unit >= 0) r = gs->layer[unit];
    if (unit == LOOM_GATHER_BELOW && gs->minlo >= 0) r.hi = gs->minlo;
    if (unit == LOOM_GATHER_ABOVE) r.lo = gs->minlo >= 0 ? gs->maxhi : gs->m->num_alloc;
    return r;
}

enum loom_status loom_grad_sync_gather_wait(struct loom_grad_sync *gs, int64_t which) {
    struct loom_backend *be = gs->m->be;
    for (int i = gs->nb - 1; i >= 0; i--) {
        struct bucket *b = &gs->b[i];
        if (!b->gather) continue;
        if (!overlap(loom_grad_sync_unit_range(gs, which), b->lo, b->hi)) continue;
        struct loom_comm_req *rq = b->gather;
        b->gather = NULL;
        LOOM_CHECK(loom_comm_wait(rq));
        b->resident = 1;
        if (be->ops->written)
            be->ops->written(be, gs->gbuf + b->lo, (size_t)(b->hi - b->lo) * sizeof(float));
    }
    return LOOM_OK;
}

enum loom_status loom_grad_sync_gather(struct loom_grad_sync *gs, float *buf) {
    if (!gs->scatter) return LOOM_OK;
    LOOM_CHECK(loom_grad_sync_gather_wait(gs, LOOM_GATHER_ALL));
    struct loom_backend *be = gs->m->be;
    for (int i = 0; i < gs->nb; i++) {
        const struct bucket *b = &gs->b[i];
        const int64_t s = (b->hi - b->lo) / gs->dp_size;
        LOOM_CHECK(loom_comm_allgather(gs->dp, buf + b->lo, buf + b->lo + (int64_t)gs->dp_rank * s,
                                       s, LOOM_DTYPE_F32));
    }
    if (be->ops->written) be->ops->written(be, buf, (size_t)gs->m->num_alloc * sizeof(float));
    return LOOM_OK;
}
