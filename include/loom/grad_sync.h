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
 *     rank's pieces of the parameters back to all. */
#ifndef LOOM_GRAD_SYNC_H
#define LOOM_GRAD_SYNC_H

#include <stdint.h>

#include "loom/model.h"

struct loom_grad_sync;

/* scatter: reduce-scatter the buckets (the distributed optimizer); else all-reduce them. */
enum loom_status loom_grad_sync_create(struct loom_grad_sync **out, struct loom_model *m,
                                       int64_t bucket_bytes, int scatter);
void loom_grad_sync_free(struct loom_grad_sync *gs);
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

#endif
