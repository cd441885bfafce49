/* Pipeline schedules (1F1B, interleaved, forward-only) and the executor that runs them. See
 * loom/pipeline.h for the schedules; this file is where the pipeline lives. */
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/log.h"
#include "loom/grad_sync.h"
#include "loom/pipeline.h"

/* ---- schedules ---- */

/* Virtual micro-step i of the interleaved order -> (chunk, micro-batch). */
static void interleaved_op(int p, int v, int64_t i, int backward, struct loom_pipe_op *op) {
    int64_t group = i / ((int64_t)p * v), in = i % ((int64_t)p * v);
    int chunk = (int)(in / p);
    op->backward = backward;
    op->chunk = backward ? v - 1 - chunk : chunk;
    op->micro = group * p + in % p;
}

enum loom_status loom_pipeline_schedule(int p, int r, int v, int64_t m, int forward_only,
                                        struct loom_pipe_op **ops, int64_t *nops) {
    if (v > 1 && m % p)
        return loom_fail(LOOM_ERR_INVALID_ARG, "the interleaved pipeline schedule needs the number "
                         "of micro-batches per rank (%lld) to be a multiple of "
                         "--pipeline-model-parallel-size %d", (long long)m, p);
    int64_t total = m * v, n = 0;
    struct loom_pipe_op *o = malloc((size_t)(2 * total) * sizeof *o);
    if (!o) return loom_fail(LOOM_ERR_OOM, "out of memory for the pipeline schedule");
    if (forward_only) {
        for (int64_t k = 0; k < m; k++)
            for (int c = 0; c < v; c++) o[n++] = (struct loom_pipe_op){0, c, k};
    } else {
        int64_t warmup = v == 1 ? (int64_t)(p - r - 1) : (int64_t)(p - r - 1) * 2 + (int64_t)(v - 1) * p;
        if (warmup > total) warmup = total;
        for (int64_t i = 0; i < warmup; i++) interleaved_op(p, v, i, 0, &o[n++]);
        for (int64_t j = 0; j < total - warmup; j++) {
            interleaved_op(p, v, warmup + j, 0, &o[n++]);
            interleaved_op(p, v, j, 1, &o[n++]);
        }
        for (int64_t j = total - warmup; j < total; j++) interleaved_op(p, v, j, 1, &o[n++]);
    }
    *ops = o;
    *nops = n;
    return LOOM_OK;
}

int loom_pipeline_max_in_flight(const struct loom_pipe_op *ops, int64_t nops, int64_t m) {
    /* a micro-batch is in flight from its first F to its last B (or last F when forward-only) */
    int64_t *first = malloc((size_t)m * sizeof *first), *last = malloc((size_t)m * sizeof *last);
    LOOM_ASSERT(first && last);
    for (int64_t k = 0; k < m; k++) first[k] = last[k] = -1;
    for (int64_t i = 0; i < nops; i++) {
        int64_t k = ops[i].micro;
        if (first[k] < 0) first[k] = i;
        last[k] = i;
    }
    int best = 1;
    for (int64_t i = 0; i < nops; i++) {
        int live = 0;
        for (int64_t k = 0; k < m; k++) live += first[k] <= i && i <= last[k];
        if (live > best) best = live;
    }
    free(first);
    free(last);
    return best;
}

/* ---- executor ---- */

/* Outgoing messages leave from staging copies, so no compute buffer waits on a send and a rank
 * never blocks on its own sends (waiting on them could close a cycle through the ring of the
 * interleaved schedule, where every stage waits for its neighbour to post a receive). Staging
 * buffers come from a pool that grows to the schedule's need during the first step and is
 * reused afterwards. A later step allocates only if its timing keeps more sends in flight than
 * the first step did: waiting for the oldest send instead could close the very cycle above. */
struct send_slot {
    float *buf;
    struct loom_comm_req *req; /* NULL: free */
};

struct exec {
    struct loom_model *m;
    struct loom_comm *pp;
    int p, r, v;
    int *slot_of;      /* micro-batch -> slot (-1 none) */
    int *slot_free;
};

static int is_first(const struct exec *e, int c) { return e->r == 0 && c == 0; }
static int is_last(const struct exec *e, int c) { return e->r == e->p - 1 && c == e->v - 1; }
/* the tag of tensor `i` of micro-batch k's message from chunk c */
static int tag_of(const struct exec *e, int64_t k, int c, int backward, int i) {
    return (int)((((k * e->v + c) * 2 + backward) * LOOM_MAX_STAGE_TENSORS + i) % 1000000000);
}

struct loom_pipeline {
    struct send_slot *pool;
    int n;
    size_t *bytes; /* [n] each buffer's size */
    struct loom_backend *be;
};

enum loom_status loom_pipeline_create(struct loom_pipeline **out) {
    *out = calloc(1, sizeof **out);
    return *out ? LOOM_OK : loom_fail(LOOM_ERR_OOM, "out of memory");
}

static enum loom_status reap_sends(struct loom_pipeline *pl, int wait_all) {
    for (int i = 0; i < pl->n; i++) {
        if (!pl->pool[i].req) continue;
        int done = 1;
        enum loom_status s = wait_all ? loom_comm_wait(pl->pool[i].req)
                                      : loom_comm_test(pl->pool[i].req, &done);
        if (s != LOOM_OK) {
            pl->pool[i].req = NULL;
            return s;
        }
        if (done) pl->pool[i].req = NULL;
    }
    return LOOM_OK;
}

void loom_pipeline_free(struct loom_pipeline *pl) {
    if (!pl) return;
    reap_sends(pl, 1);
    for (int i = 0; i < pl->n; i++) pl->be->ops->free(pl->be, pl->pool[i].buf);
    free(pl->pool);
    free(pl->bytes);
    free(pl);
}

/* Copy `src` into a free staging buffer of its size and send it. */
static enum loom_status staged_send(struct loom_pipeline *pl, struct exec *e, const float *src,
                                    int64_t n, int dst, int tag) {
    struct loom_backend *be = e->m->be;
    size_t bytes = (size_t)n * sizeof(float);
    if (pl->n && pl->be != be) {
        LOOM_CHECK(reap_sends(pl, 1));
        for (int i = 0; i < pl->n; i++) pl->be->ops->free(pl->be, pl->pool[i].buf);
        pl->n = 0;
    }
    pl->be = be;
    LOOM_CHECK(reap_sends(pl, 0));
    int k = -1;
    for (int i = 0; i < pl->n && k < 0; i++)
        if (!pl->pool[i].req && pl->bytes[i] == bytes) k = i;
    if (k < 0) {
        struct send_slot *np = realloc(pl->pool, (size_t)(pl->n + 1) * sizeof *np);
        if (np) pl->pool = np;
        size_t *nb = np ? realloc(pl->bytes, (size_t)(pl->n + 1) * sizeof *nb) : NULL;
        if (!nb) return loom_fail(LOOM_ERR_OOM, "out of memory for pipeline send buffers");
        pl->bytes = nb;
        pl->pool[pl->n].req = NULL;
        pl->pool[pl->n].buf = be->ops->malloc(be, bytes);
        if (!pl->pool[pl->n].buf)
            return loom_fail(LOOM_ERR_OOM, "out of memory for pipeline send buffers");
        pl->bytes[pl->n] = bytes;
        k = pl->n++;
    }
    be->ops->copy(be, pl->pool[k].buf, src, bytes);
    /* a host backend reads the buffer now: wait for the copy (nccl orders itself after it) */
    if (!loom_comm_stream_ordered(e->pp)) be->ops->synchronize(be);
    return loom_comm_isend(e->pp, pl->pool[k].buf, n, LOOM_DTYPE_F32, dst, tag, &pl->pool[k].req);
}

/* Send the tensors of the boundary before layer l to rank dst, or receive them from src (waiting
 * for them: the time goes to stats->wait_s). */
static enum loom_status send_boundary(struct loom_pipeline *pl, struct exec *e, int slot,
                                      int64_t l, enum loom_boundary_side side, int dst, int64_t k,
                                      int c, int backward) {
    struct loom_stage_tensor t[LOOM_MAX_STAGE_TENSORS];
    const int n = e->m->family->boundary(e->m, slot, l, side, t);
    for (int i = 0; i < n; i++)
        LOOM_CHECK(staged_send(pl, e, t[i].data, t[i].count, dst, tag_of(e, k, c, backward, i)));
    return LOOM_OK;
}

static enum loom_status recv_boundary(struct exec *e, int slot, int64_t l,
                                      enum loom_boundary_side side, int src, int64_t k, int c,
                                      int backward, struct loom_pipeline_stats *stats) {
    struct loom_stage_tensor t[LOOM_MAX_STAGE_TENSORS];
    struct loom_comm_req *rq[LOOM_MAX_STAGE_TENSORS];
    const int n = e->m->family->boundary(e->m, slot, l, side, t);
    enum loom_status st = LOOM_OK;
    int posted = 0;
    for (; posted < n && st == LOOM_OK; posted++)
        st = loom_comm_irecv(e->pp, t[posted].data, t[posted].count, LOOM_DTYPE_F32, src,
                             tag_of(e, k, c, backward, posted), &rq[posted]);
    if (st != LOOM_OK) posted--;
    double w0 = loom_time_s();
    for (int i = 0; i < posted; i++) {
        enum loom_status s = loom_comm_wait(rq[i]);
        if (st == LOOM_OK) st = s;
    }
    stats->wait_s += loom_time_s() - w0;
    return st;
}

static int take_slot(struct exec *e, int64_t k) {
    if (e->slot_of[k] >= 0) return e->slot_of[k];
    for (int s = 0; s < e->m->nslots; s++)
        if (e->slot_free[s]) {
            e->slot_free[s] = 0;
            e->slot_of[k] = s;
            return s;
        }
    LOOM_ASSERT(!"pipeline: no free activation slot");
    return -1;
}

enum loom_status loom_pipeline_run(struct loom_pipeline *pl, struct loom_model *m,
                                   int64_t num_micro, int training, struct loom_grad_sync *gs,
                                   const struct loom_step_ctx *ctx, loom_micro_fetch_fn fetch,
                                   void *fetch_ctx, struct loom_micro *mb,
                                   struct loom_pipeline_stats *stats) {
    const struct loom_family *fam = m->family;
    /* the parameters are fixed for the whole run; those of an overlapped gather are waited for
     * where they are first read (all of them here when the family's prepare reads them all) */
    if (m->prepare_reads_all)
        LOOM_CHECK(loom_grad_sync_use(gs, LOOM_GATHER_ALL, LOOM_UNIT_NONE, 0));
    struct loom_parallel *par = m->par;
    struct exec e = {0};
    e.m = m;
    e.pp = par->group[LOOM_PDIM_PP];
    e.p = loom_pp_size(par);
    e.r = loom_pp_rank(par);
    e.v = par->vpp > 0 ? par->vpp : 1;
    struct loom_pipe_op *ops;
    int64_t nops;
    LOOM_CHECK(loom_pipeline_schedule(e.p, e.r, e.v, num_micro, !training, &ops, &nops));
    e.slot_of = malloc((size_t)num_micro * sizeof(int));
    e.slot_free = malloc((size_t)m->nslots * sizeof(int));
    int64_t *last_op = malloc((size_t)num_micro * sizeof *last_op);
    int64_t *backwards_done = calloc((size_t)e.v, sizeof *backwards_done); /* per chunk */
    if (!e.slot_of || !e.slot_free || !last_op || !backwards_done) {
        free(ops);
        free(e.slot_of);
        free(e.slot_free);
        free(last_op);
        free(backwards_done);
        return loom_fail(LOOM_ERR_OOM, "out of memory for the pipeline schedule");
    }
    for (int64_t k = 0; k < num_micro; k++) e.slot_of[k] = -1;
    for (int s = 0; s < m->nslots; s++) e.slot_free[s] = 1;
    for (int64_t i = 0; i < nops; i++)
        last_op[ops[i].micro] = i;
    fam->prepare(m);
    memset(stats, 0, sizeof *stats);
    enum loom_status st = loom_grad_sync_op_done(gs);

    for (int64_t i = 0; i < nops && st == LOOM_OK; i++) {
        const struct loom_pipe_op *op = &ops[i];
        int64_t k = op->micro;
        int c = op->chunk;
        int slot = take_slot(&e, k);
        struct loom_step_ctx mc = *ctx;
        int64_t l0, l1;
        fam->chunk_layers(m, e.r, c, &l0, &l1);
        double t0 = loom_time_s();
        if ((st = fetch(fetch_ctx, k, mb)) != LOOM_OK) break;
        mc.sample0 = mb->sample0;
        if (!op->backward) {
            /* the micro-batch's first piece on this rank */
            if (c == 0 && (st = fam->micro_begin(m, slot, mb, &mc)) != LOOM_OK) break;
            if (is_first(&e, c)) {
                st = loom_grad_sync_use(gs, LOOM_GATHER_BELOW, l0 < l1 ? l0 : LOOM_UNIT_NONE, 0);
                if (st == LOOM_OK) st = fam->first_forward(m, slot, mb, &mc);
            } else {
                const int src = (e.r + e.p - 1) % e.p, src_chunk = e.r == 0 ? c - 1 : c;
                st = recv_boundary(&e, slot, l0, LOOM_RECV_ACT, src, k, src_chunk, 0, stats);
            }
            for (int64_t l = l0; l < l1 && st == LOOM_OK; l++) {
                const int64_t next = l + 1 < l1       ? l + 1
                                     : is_last(&e, c) ? LOOM_GATHER_ABOVE
                                                      : LOOM_UNIT_NONE;
                st = loom_grad_sync_use(gs, l, next, 0);
                if (st == LOOM_OK) st = fam->layer_forward(m, slot, l, &mc);
                if (st == LOOM_OK) st = loom_grad_sync_layer_done(gs, l, next, 0, 0);
            }
            if (st != LOOM_OK) break;
            if (is_last(&e, c)) {
                /* the last piece applies dloss (its loss pass makes the gradient) */
                st = loom_grad_sync_use(gs, LOOM_GATHER_BELOW, LOOM_GATHER_ABOVE, 0);
                if (st == LOOM_OK) st = loom_grad_sync_use(gs, LOOM_GATHER_ABOVE, LOOM_UNIT_NONE, 0);
                if (st == LOOM_OK) st = fam->last_forward(m, slot, mb, &mc, &stats->losses);
            } else {
                st = send_boundary(pl, &e, slot, l1, LOOM_SEND_ACT, (e.r + 1) % e.p, k, c, 0);
            }
        } else {
            if (is_last(&e, c)) {
                st = loom_grad_sync_use(gs, LOOM_GATHER_ABOVE, LOOM_GATHER_BELOW, 1);
                if (st == LOOM_OK)
                    st = loom_grad_sync_use(gs, LOOM_GATHER_BELOW,
                                            l0 < l1 ? l1 - 1 : LOOM_UNIT_NONE, 1);
                if (st == LOOM_OK) st = fam->last_backward(m, slot, mb, &mc);
            } else {
                const int src = (e.r + 1) % e.p, src_chunk = e.r == e.p - 1 ? c + 1 : c;
                st = recv_boundary(&e, slot, l1, LOOM_RECV_GRAD, src, k, src_chunk, 1, stats);
            }
            /* the chunk's last backward of the step finalises its layers' gradients */
            int final = ++backwards_done[c] == num_micro;
            for (int64_t l = l1 - 1; l >= l0 && st == LOOM_OK; l--) {
                const int64_t next = l > l0           ? l - 1
                                     : is_first(&e, c) ? LOOM_GATHER_BELOW
                                                       : LOOM_UNIT_NONE;
                st = loom_grad_sync_use(gs, l, next, 1);
                if (st == LOOM_OK) st = fam->layer_backward(m, slot, l, &mc);
                if (st == LOOM_OK && final && !loom_grad_sync_every_micro(gs))
                    st = loom_model_sync_tp_partial(m, l);
                if (st == LOOM_OK) st = loom_grad_sync_layer_done(gs, l, next, 1, final);
            }
            if (st != LOOM_OK) break;
            if (is_first(&e, c)) {
                st = loom_grad_sync_use(gs, LOOM_GATHER_BELOW, LOOM_UNIT_NONE, 1);
                if (st == LOOM_OK) st = fam->first_backward(m, slot, &mc);
            } else {
                st = send_boundary(pl, &e, slot, l0, LOOM_SEND_GRAD, (e.r + e.p - 1) % e.p, k, c,
                                   1);
            }
        }
        if (st == LOOM_OK) st = loom_grad_sync_op_done(gs);
        stats->busy_s += loom_time_s() - t0;
        if (st == LOOM_OK && last_op[k] == i) {
            /* the micro-batch is done here: its slot may be reused */
            e.slot_free[slot] = 1;
            e.slot_of[k] = -1;
        }
    }
    enum loom_status s3 = reap_sends(pl, 1);
    if (st == LOOM_OK) st = s3;
    stats->busy_s -= stats->wait_s;
    free(ops);
    free(e.slot_of);
    free(e.slot_free);
    free(last_op);
    free(backwards_done);
    return st;
}
