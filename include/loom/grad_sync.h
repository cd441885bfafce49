/* Data-parallel gradient reduction in buckets, overlapped with the backward pass.
 *
 * The flat gradient buffer follows the parameter table: embedding, layer 0 .. L-1, final norm,
 * output layer, each layer's parameters contiguous. During the last micro-batch's backward a
 * layer's gradients are final as soon as its backward returns; the pipeline executor reports
 * that (loom_grad_sync_layer_ready) and the layer's range joins the open bucket. A bucket whose
 * size reaches the threshold, or that cannot grow contiguously, is all-reduced over the
 * data-parallel group with a non-blocking call while the backward continues. finish reduces the
 * rest (embedding, final norm, output layer and any open bucket) and waits for everything.
 * Element-wise the result is the same sum as one all-reduce of the whole buffer. */
#ifndef LOOM_GRAD_SYNC_H
#define LOOM_GRAD_SYNC_H

#include <stdint.h>

#include "loom/model.h"

struct loom_grad_sync;

enum loom_status loom_grad_sync_create(struct loom_grad_sync **out, struct loom_gpt *m,
                                       int64_t bucket_bytes);
void loom_grad_sync_free(struct loom_grad_sync *gs);
/* Start a step (nothing reduced yet). */
void loom_grad_sync_begin(struct loom_grad_sync *gs);
/* Layer `layer`'s gradients are final for this step. */
enum loom_status loom_grad_sync_layer_ready(struct loom_grad_sync *gs, int64_t layer);
/* Reduce whatever is left and wait for every bucket. */
enum loom_status loom_grad_sync_finish(struct loom_grad_sync *gs);
/* Buckets launched before finish in the last step (how much overlapped the backward). */
int loom_grad_sync_overlapped(const struct loom_grad_sync *gs);

#endif
