/* Pipeline schedules (1F1B, interleaved, forward-only) and the executor that runs them. See
 * loom/pipeline.h for the schedules; this file is where the pipeline lives. */
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/log.h"
#include "loom/grad_sync.h"
#include "loom/pipeline.h"
#include "models/gpt_internal.h"

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
    struct loom_gpt *m;
    struct loom_comm *pp;
    int p, r, v;
    int64_t N, C;
    int *slot_of;      /* micro-batch -> slot (-1 none) */
    int *slot_free;
};

static int is_first(const struct exec *e, int c) { return e->r == 0 && c == 0; }
static int is_last(const struct exec *e, int c) { return e->r == e->p - 1 && c == e->v - 1; }
static int tag_of(const struct exec *e, int64_t k, int c, int backward) {
    return (int)(((k * e->v + c) * 2 + backward) % 1000000000);
}

struct loom_pipeline {
    struct send_slot *pool;
    int n;
    size_t bytes;
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
    free(pl);
}

/* Copy `src` into a free staging buffer and send it. */
static enum loom_status staged_send(struct loom_pipeline *pl, struct exec *e, const float *src,
                                    int64_t n, int dst, int tag) {
    struct loom_backend *be = e->m->be;
    size_t bytes = (size_t)n * sizeof(float);
    if (pl->n && (pl->be != be || pl->bytes != bytes)) {
        LOOM_CHECK(reap_sends(pl, 1));
        for (int i = 0; i < pl->n; i++) pl->be->ops->free(pl->be, pl->pool[i].buf);
        pl->n = 0;
    }
    pl->be = be;
    pl->bytes = bytes;
    LOOM_CHECK(reap_sends(pl, 0));
    int k = -1;
    for (int i = 0; i < pl->n && k < 0; i++)
        if (!pl->pool[i].req) k = i;
    if (k < 0) {
        struct send_slot *np = realloc(pl->pool, (size_t)(pl->n + 1) * sizeof *np);
        if (!np) return loom_fail(LOOM_ERR_OOM, "out of memory for pipeline send buffers");
        pl->pool = np;
        pl->pool[pl->n].req = NULL;
        pl->pool[pl->n].buf = be->ops->malloc(be, bytes);
        if (!pl->pool[pl->n].buf)
            return loom_fail(LOOM_ERR_OOM, "out of memory for pipeline send buffers");
        k = pl->n++;
    }
    be->ops->copy(be, pl->pool[k].buf, src, bytes);
    /* a host backend reads the buffer now: wait for the copy (nccl orders itself after it) */
    if (!loom_comm_stream_ordered(e->pp)) be->ops->synchronize(be);
    return loom_comm_isend(e->pp, pl->pool[k].buf, n, LOOM_DTYPE_F32, dst, tag, &pl->pool[k].req);
}

/* A token's dloss under per_micro_mean: ctx->dloss over the micro-batch's tokens that carry a
 * loss (targets >= 0 of its n); 0 for a wholly masked micro-batch */
static float micro_dloss(const struct loom_step_ctx *ctx, const int32_t *targets, int64_t n) {
    int64_t valid = 0;
    for (int64_t i = 0; i < n; i++)
        valid += targets[i] >= 0;
    return valid > 0 ? (float)((double)ctx->dloss / (double)valid) : 0.0f;
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

enum loom_status loom_pipeline_run(struct loom_pipeline *pl, struct loom_gpt *m, int64_t num_micro, int training,
                                   struct loom_grad_sync *gs,
                                   const struct loom_step_ctx *ctx, loom_micro_fetch_fn fetch,
                                   void *fetch_ctx, int32_t *tokens, int32_t *targets,
                                   struct loom_pipeline_stats *stats) {
    /* the parameters are fixed for the whole run; those of an overlapped gather are waited for
     * where they are first read (all of them here where the norms' effective weights are made
     * from them, below) */
    if (gs && m->cfg.layernorm_1p) LOOM_CHECK(loom_grad_sync_gather_wait(gs, LOOM_GATHER_ALL));
    struct loom_parallel *par = m->par;
    struct exec e = {0};
    e.m = m;
    e.pp = par->group[LOOM_PDIM_PP];
    e.p = loom_pp_size(par);
    e.r = loom_pp_rank(par);
    e.v = par->vpp > 0 ? par->vpp : 1;
    e.N = loom_gpt_residual_rows(m);
    e.C = m->cfg.hidden;
    struct loom_pipe_op *ops;
    int64_t nops;
    LOOM_CHECK(loom_pipeline_schedule(e.p, e.r, e.v, num_micro, !training, &ops, &nops));
    e.slot_of = malloc((size_t)num_micro * sizeof(int));
    e.slot_free = malloc((size_t)m->nslots * sizeof(int));
    int64_t *last_op = malloc((size_t)num_micro * sizeof *last_op);
    int64_t *backwards_done = calloc((size_t)e.v, sizeof *backwards_done); /* per chunk */
    LOOM_ASSERT(e.slot_of && e.slot_free && last_op && backwards_done);
    for (int64_t k = 0; k < num_micro; k++) e.slot_of[k] = -1;
    for (int s = 0; s < m->nslots; s++) e.slot_free[s] = 1;
    for (int64_t i = 0; i < nops; i++)
        last_op[ops[i].micro] = i;
    loom_gpt_norm_weights(m);
    memset(stats, 0, sizeof *stats);
    enum loom_status st = LOOM_OK;
    int64_t bytes = e.N * e.C; /* elements of one activation or gradient message */

    for (int64_t i = 0; i < nops && st == LOOM_OK; i++) {
        const struct loom_pipe_op *op = &ops[i];
        int64_t k = op->micro;
        int c = op->chunk;
        int slot = take_slot(&e, k);
        struct loom_step_ctx mc = *ctx;
        int64_t l0, l1;
        loom_gpt_chunk_layers(&m->cfg, e.p, e.v, e.r, c, &l0, &l1);
        double t0 = loom_time_s();
        if (!op->backward) {
            int64_t sample0 = 0;
            if ((st = fetch(fetch_ctx, k, tokens, targets, &sample0)) != LOOM_OK) break;
            mc.sample0 = sample0;
            /* the micro-batch's first piece on this rank: its documents */
            if (c == 0 && (st = loom_gpt_micro_begin(m, slot, tokens, &mc)) != LOOM_OK) break;
            if (is_first(&e, c)) {
                if (gs) st = loom_grad_sync_gather_wait(gs, LOOM_GATHER_BELOW);
                if (st == LOOM_OK) st = loom_gpt_embed_forward(m, slot, tokens, &mc);
            } else {
                int src = (e.r + e.p - 1) % e.p;
                int src_chunk = e.r == 0 ? c - 1 : c;
                struct loom_comm_req *rq = NULL;
                st = loom_comm_irecv(e.pp, loom_gpt_layer_input(m, slot, l0), bytes, LOOM_DTYPE_F32,
                                     src, tag_of(&e, k, src_chunk, 0), &rq);
                double w0 = loom_time_s();
                if (st == LOOM_OK) st = loom_comm_wait(rq);
                stats->wait_s += loom_time_s() - w0;
            }
            float *out = loom_gpt_layer_output(m, slot, l1 - 1);
            for (int64_t l = l0; l < l1 && st == LOOM_OK; l++) {
                if (gs) st = loom_grad_sync_gather_wait(gs, l);
                if (st == LOOM_OK) st = loom_gpt_layer_forward(m, slot, l, &mc);
            }
            if (st != LOOM_OK) break;
            if (is_last(&e, c)) {
                double ls = 0.0;
                int64_t cnt = 0;
                /* the head's forward applies dloss (its loss pass makes the logits' gradient) */
                if (ctx->per_micro_mean)
                    mc.dloss = micro_dloss(ctx, targets, m->B * m->cfg.seq_length);
                if (gs) st = loom_grad_sync_gather_wait(gs, LOOM_GATHER_BELOW);
                if (gs && st == LOOM_OK) st = loom_grad_sync_gather_wait(gs, LOOM_GATHER_ABOVE);
                if (st == LOOM_OK) st = loom_gpt_head_forward(m, slot, targets, &mc, &ls, &cnt);
                stats->loss_sum += ls;
                stats->count += cnt;
            } else {
                st = staged_send(pl, &e, out, bytes, (e.r + 1) % e.p, tag_of(&e, k, c, 0));
            }
        } else {
            int64_t sample0 = 0;
            if ((st = fetch(fetch_ctx, k, tokens, targets, &sample0)) != LOOM_OK) break;
            mc.sample0 = sample0;
            float *dres = loom_gpt_dres(m);
            if (is_last(&e, c)) {
                st = loom_gpt_head_backward(m, slot, &mc);
            } else {
                int src = (e.r + 1) % e.p;
                int src_chunk = e.r == e.p - 1 ? c + 1 : c;
                struct loom_comm_req *rq = NULL;
                st = loom_comm_irecv(e.pp, dres, bytes, LOOM_DTYPE_F32, src,
                                     tag_of(&e, k, src_chunk, 1), &rq);
                double w0 = loom_time_s();
                if (st == LOOM_OK) st = loom_comm_wait(rq);
                stats->wait_s += loom_time_s() - w0;
            }
            /* the chunk's last backward of the step finalises its layers' gradients */
            int final = ++backwards_done[c] == num_micro;
            for (int64_t l = l1 - 1; l >= l0 && st == LOOM_OK; l--) {
                st = loom_gpt_layer_backward(m, slot, l, &mc);
                if (st == LOOM_OK && final) st = loom_gpt_sync_replicated_grads(m, l);
                if (st == LOOM_OK && final && gs) st = loom_grad_sync_layer_ready(gs, l);
            }
            if (st != LOOM_OK) break;
            if (is_first(&e, c)) {
                st = loom_gpt_embed_backward(m, slot, &mc);
            } else {
                st = staged_send(pl, &e, dres, bytes, (e.r + e.p - 1) % e.p, tag_of(&e, k, c, 1));
            }
        }
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
