/* Data-parallel gradient reduction in buckets, overlapped with the backward pass.
 *
 * The flat gradient buffer follows the parameter table: embedding, layer 0 .. L-1, final norm,
 * output layer, each layer's parameters contiguous. The buffer [0, num_alloc) is cut once, at
 * create, into buckets: consecutive layers taken from the last down until a bucket holds at least
 * the threshold, each cut at a multiple of 16 x the data-parallel ranks (so that every bucket
 * splits into equal pieces of whole 16-float groups, one a rank), and what lies below the first
 * layer's cut (the embeddings) or above the last layer's (the final norm, the output layer) in
 * buckets of their own. During the last micro-batch's backward a layer's gradients are final as
 * soon as its backward returns; the pipeline executor reports that (loom_grad_sync_layer_ready),
 * and a bucket whose layers are all final is reduced over the data-parallel group with a
 * non-blocking call while the backward continues. finish reduces the rest (the buckets that hold
 * more than layers, and any a layer never reported) and waits for everything.
 *
 * Two kinds of reduction:
 *   - all-reduce: every rank gets the whole sum (the same sums as one all-reduce of the buffer);
 *   - reduce-scatter (the distributed optimizer, ZeRO stage 1 as Megatron-LM's
 *     --use-distributed-optimizer): rank r gets the sum of piece r of each bucket only, half the
 *     traffic of an all-reduce; the other pieces then hold this rank's own unreduced gradients.
 *     The optimizer updates the rank's pieces (its shard) and loom_grad_sync_gather brings every
 *     rank's pieces of the parameters back to all.
 *
 * Megatron-LM's --data-parallel-sharding-strategy names how much is sharded (ZeRO's stages):
 *   no_shard            the all-reduce; every rank keeps everything (plain data parallelism);
 *   optim               the reduce-scatter above (stage 1, --use-distributed-optimizer);
 *   optim_grads         stage 2: the gradients too. A layer bucket is reduce-scattered as soon as
 *                       its layers' backward of a micro-batch is done, every micro-batch, its
 *                       piece added to the rank's shard of the step's gradients (the only
 *                       gradients kept from one micro-batch to the next) and the bucket cleared;
 *                       the buckets beyond the layers once, by finish. finish puts the shard's
 *                       sums at the pieces' places of the gradient buffer, as stage 1 leaves them;
 *   optim_grads_params  stage 3: the parameters too. Between uses a rank keeps only its pieces of
 *                       the parameters; the pipeline executor's hooks (loom_grad_sync_use, _done,
 *                       _op_done) all-gather a unit's buckets before its forward and again before
 *                       its backward, start the next unit's meanwhile, and clear the other ranks'
 *                       pieces once the operation has passed them. The optimizer updates the
 *                       rank's pieces and gathers nothing.
 * The full-size parameter and gradient buffers stay allocated: they are the working space the
 * backward accumulates into and the gathers fill (the model addresses its tensors there). */
#ifndef LOOM_GRAD_SYNC_H
#define LOOM_GRAD_SYNC_H

#include <stdint.h>

#include "loom/model.h"

struct loom_grad_sync;

enum loom_dp_sharding {
    LOOM_SHARD_NO_SHARD = 0,
    LOOM_SHARD_OPTIM,
    LOOM_SHARD_OPTIM_GRADS,
    LOOM_SHARD_OPTIM_GRADS_PARAMS
};
/* The strategy's name as --data-parallel-sharding-strategy spells it, and back (-1: none). */
const char *loom_dp_sharding_name(enum loom_dp_sharding s);
int loom_dp_sharding_parse(const char *name);

/* strategy: what is sharded over the data-parallel ranks (no_shard: the buckets all-reduced;
 * the others reduce-scatter them). One data-parallel rank shards nothing. */
enum loom_status loom_grad_sync_create(struct loom_grad_sync **out, struct loom_model *m,
                                       int64_t bucket_bytes, enum loom_dp_sharding strategy);
/* The strategy in effect (no_shard with one data-parallel rank). */
enum loom_dp_sharding loom_grad_sync_strategy(const struct loom_grad_sync *gs);
/* Floats of parameters and of gradients a rank keeps between uses: its shard (the pieces) of
 * what the strategy shards, else the whole flat buffer (num_alloc). */
void loom_grad_sync_memory(const struct loom_grad_sync *gs, int64_t *param_floats,
                           int64_t *grad_floats);
void loom_grad_sync_free(struct loom_grad_sync *gs);
/* local: from the next step on, reduce nothing (each rank keeps its own gradients: 1-bit Adam
 * after its warmup); 0 again reduces. Not with a sharding strategy. */
void loom_grad_sync_set_local(struct loom_grad_sync *gs, int local);
/* Start a step (nothing reduced yet). */
void loom_grad_sync_begin(struct loom_grad_sync *gs);
/* Layer `layer`'s gradients are final for this step. */
enum loom_status loom_grad_sync_layer_ready(struct loom_grad_sync *gs, int64_t layer);
/* Reduce whatever is left and wait for every bucket. */
enum loom_status loom_grad_sync_finish(struct loom_grad_sync *gs);
/* Buckets launched before finish in the last step (how much overlapped the backward). */
int loom_grad_sync_overlapped(const struct loom_grad_sync *gs);
/* The number of buckets. */
int loom_grad_sync_buckets(const struct loom_grad_sync *gs);
/* Non-zero when the buckets are reduce-scattered over more than one data-parallel rank. */
int loom_grad_sync_scatters(const struct loom_grad_sync *gs);
/* This rank's pieces of the buckets (its shard of the flat buffers), in increasing offset:
 * *lo[i], *len[i] in floats; returns how many. Scattering: one piece a bucket, 1 / dp of it;
 * otherwise one piece, the whole buffer [0, num_alloc). */
int loom_grad_sync_shard(const struct loom_grad_sync *gs, const int64_t **lo, const int64_t **len);
/* Every rank's pieces of buf (laid out as the flat buffers) gathered to all, in place, bucket by
 * bucket; collective over the data-parallel group. Nothing to do when not scattering. */
enum loom_status loom_grad_sync_gather(struct loom_grad_sync *gs, float *buf);
/* The same, started (Megatron-LM's --overlap-param-gather): a non-blocking gather a bucket, from
 * the lowest offset up, and loom_grad_sync_gather_wait completes them as the buffer's parts are
 * needed; until then the other ranks' pieces of buf are not to be read. */
enum loom_status loom_grad_sync_gather_start(struct loom_grad_sync *gs, float *buf);
/* Complete the started gather's buckets that hold layer `which` (>= 0), those that hold anything
 * below the layers (LOOM_GATHER_BELOW: the embeddings, a last stage's tied copy of the word
 * embedding) or above them (LOOM_GATHER_ABOVE: the final norm, the output layer), or all
 * (LOOM_GATHER_ALL), telling the backend that they were written. Nothing to do for buckets
 * already complete or when no gather was started. */
#define LOOM_GATHER_BELOW (-1)
#define LOOM_GATHER_ABOVE (-2)
#define LOOM_GATHER_ALL (-3)
enum loom_status loom_grad_sync_gather_wait(struct loom_grad_sync *gs, int64_t which);

/* The pipeline executor's hooks (gs may be NULL: nothing to do). `unit`: a layer,
 * LOOM_GATHER_BELOW, LOOM_GATHER_ABOVE or LOOM_GATHER_ALL, as for gather_wait.
 * use: before a piece reads the unit's parameters (and, backward, adds to its gradients): its
 * parameters present (a started gather waited for; optim_grads_params: gathered) and, sharded
 * gradients, their buckets' reductions done; `next` (LOOM_UNIT_NONE: none) is the unit the same
 * operation reads after it, whose gather optim_grads_params starts now.
 * layer_done: after a layer's forward or backward; `final`: the step's last backward of it.
 * The layer's gradients go to their reduction (every micro-batch when the gradients are
 * sharded, else on the final one); optim_grads_params clears the buckets `next` does not need.
 * op_done: after each operation (a forward or backward of a chunk, or the run's prepare). */
#define LOOM_UNIT_NONE (-4)
enum loom_status loom_grad_sync_use(struct loom_grad_sync *gs, int64_t unit, int64_t next,
                                    int backward);
enum loom_status loom_grad_sync_layer_done(struct loom_grad_sync *gs, int64_t layer, int64_t next,
                                           int backward, int final);
enum loom_status loom_grad_sync_op_done(struct loom_grad_sync *gs);
/* Non-zero when a layer's gradients are reduced every micro-batch (sharded gradients): finish
 * then makes the layers' tensor-parallel partial sums (LOOM_ROLE_TP_PARTIAL) over the rank's
 * shard, and the caller makes none. */
int loom_grad_sync_every_micro(const struct loom_grad_sync *gs);
/* optim_grads_params: keep only this rank's pieces of the parameters (the others cleared), as
 * between uses; gather_params: every rank's pieces gathered to all (collective; for whatever
 * reads the whole parameters outside a pipeline run: norms, checkpoints, hashes). */
enum loom_status loom_grad_sync_shard_params(struct loom_grad_sync *gs);
enum loom_status loom_grad_sync_gather_params(struct loom_grad_sync *gs);

#endif
