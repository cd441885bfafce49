/* The data-parallel buckets' state, shared by grad_sync.c (the buckets, their reduction, the
 * distributed optimizer's gather) and zero.c (the sharded gradients and parameters of
 * --data-parallel-sharding-strategy optim_grads and optim_grads_params). */
#ifndef LOOM_GRAD_SYNC_IMPL_H
#define LOOM_GRAD_SYNC_IMPL_H

#include <stdint.h>

#include "loom/comm.h"
#include "loom/grad_sync.h"

struct range {
    int64_t lo, hi; /* floats of the flat gradient buffer */
};

struct bucket {
    int64_t lo, hi;
    int layers;      /* local layers that overlap it */
    int finish_only; /* it holds floats of no layer (the embeddings, the heads, padding):
                        reduced by finish, once a step */
    int pending;     /* its layers not reported yet (this step; sharded gradients: this round) */
    int launched;
    int64_t soff;    /* where its piece lies in the packed shard (sharded gradients) */
    struct loom_comm_req *gather; /* a started gather not completed yet */
    struct loom_comm_req *rs;     /* sharded gradients: a started reduce-scatter not drained */
    int resident;    /* sharded parameters: every rank's pieces are present in the buffer */
};

struct loom_grad_sync {
    struct loom_model *m;
    struct loom_comm *dp;
    int scatter, dp_size, dp_rank;
    enum loom_dp_sharding strategy;
    int local; /* no reduction at all: each rank keeps its own gradients (1-bit Adam) */
    struct range *layer; /* [L] range of each local layer (empty when not local) */
    char *layer_done;    /* [L] */
    struct bucket *b;    /* [nb] from the top of the buffer down: the order a backward frees them */
    int nb;
    int64_t *piece_lo, *piece_len; /* [npieces] this rank's shard, increasing offsets */
    int64_t shard_len;             /* floats of the shard (the pieces' sum) */
    float *gacc; /* sharded gradients (device): the shard's reduced gradients summed over the
                    step's reductions, packed piece after piece */
    float *gbuf;                   /* the buffer of the started gather */
    int64_t minlo, maxhi;          /* the local layers' extent (-1: none) */
    int npieces;
    struct loom_comm_req **reqs;
    int nreqs, cap, overlapped;
};

static inline int64_t round_up(int64_t x, int64_t a) {
    return (x + a - 1) / a * a;
}
static inline int64_t overlap(struct range r, int64_t lo, int64_t hi) {
    const int64_t a = r.lo > lo ? r.lo : lo, b = r.hi < hi ? r.hi : hi;
    return b > a ? b - a : 0;
}
/* The range a unit names: a layer, LOOM_GATHER_BELOW, LOOM_GATHER_ABOVE or LOOM_GATHER_ALL. */
struct range loom_grad_sync_unit_range(const struct loom_grad_sync *gs, int64_t unit);

/* zero.c: set up the sharded gradients' accumulator (create), free it */
enum loom_status loom_zero_init(struct loom_grad_sync *gs);
void loom_zero_free(struct loom_grad_sync *gs);
/* zero.c: finish's part for sharded gradients: every bucket's remaining sums reduce-scattered,
 * the shard's totals put at the pieces' places of the gradient buffer */
enum loom_status loom_zero_finish(struct loom_grad_sync *gs);
/* zero.c: a layer's backward of one micro-batch is done: its buckets reduce-scattered when
 * all their layers have reported */
enum loom_status loom_zero_layer_done(struct loom_grad_sync *gs, int64_t layer);

#endif
