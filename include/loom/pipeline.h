/* Pipeline schedules and their executor.
 *
 * A schedule is a per-rank list of operations, F(chunk, micro-batch) and B(chunk, micro-batch),
 * produced by a pure function of (stages p, this stage r, virtual chunks v, micro-batches m):
 *   - 1F1B (v = 1): p - r - 1 warm-up forwards, then one forward / one backward alternating,
 *     then the remaining backwards (PipeDream-Flush, as Megatron);
 *   - interleaved (v > 1): the rank holds v model chunks (chunk c = layers of virtual stage
 *     c*p + r); micro-batches go through the chunks in groups of p, with (p - r - 1)*2 + (v-1)*p
 *     warm-up forwards (Megatron's interleaved schedule; m must be a multiple of p);
 *   - forward only (evaluation): every F in micro-batch order.
 * The executor runs a rank's list in order. Activations travel to the next stage (and gradients
 * to the previous one) with non-blocking sends, so a rank never waits on its own sends; it waits
 * only for the data an operation consumes, which valid schedules always produce. */
#ifndef LOOM_PIPELINE_H
#define LOOM_PIPELINE_H

#include <stdint.h>

#include "loom/model.h"

struct loom_pipe_op {
    int backward; /* 0: F, 1: B */
    int chunk;
    int64_t micro;
};

/* The op list of stage r (caller frees *ops). forward_only builds the evaluation list. */
enum loom_status loom_pipeline_schedule(int p, int r, int v, int64_t m, int forward_only,
                                        struct loom_pipe_op **ops, int64_t *nops);
/* Most micro-batches whose activations a stage holds at once under its schedule. */
int loom_pipeline_max_in_flight(const struct loom_pipe_op *ops, int64_t nops, int64_t m);

/* Supplies micro-batch k (0-based within the step) into *mb (its arrays allocated by the
 * caller), with the global sample index of its first sample (for dropout keys). */
typedef enum loom_status (*loom_micro_fetch_fn)(void *ctx, int64_t k, struct loom_micro *mb);

struct loom_pipeline_stats {
    struct loom_losses losses; /* the family's losses (last stage; 0 elsewhere) */
    double busy_s;     /* time in forward/backward compute */
    double wait_s;     /* time waiting for activations/gradients */
};

/* Executor state kept across steps (the staging buffers of outgoing messages). */
struct loom_pipeline;
enum loom_status loom_pipeline_create(struct loom_pipeline **out);
void loom_pipeline_free(struct loom_pipeline *pl);

/* Run micro-batches [0, m) through the model with the schedule of this rank, through the
 * model family's pieces (loom/model.h). training = 0 runs forwards only. Gradients accumulate
 * into the model's gradient buffer. When a chunk's last backward of the step has run, each of
 * its layers' tensor-parallel partial gradients are summed (LOOM_ROLE_TP_PARTIAL) and the layer
 * is handed to `gs` (data-parallel bucket reduction; may be NULL). Tied embeddings and the
 * non-layer parameters are left to the caller. `gs`'s hooks run around each piece
 * (loom_grad_sync_use before it, with the unit the operation runs next; _layer_done after a
 * layer; _op_done after each operation): they wait for a started gather of the parameters (the
 * distributed optimizer's overlapped one) before the piece that first reads them, and with
 * sharded gradients or parameters reduce every micro-batch and gather and clear the parameters
 * (loom/grad_sync.h). `mb` is the caller's micro-batch buffer that fetch fills. */
struct loom_grad_sync;
enum loom_status loom_pipeline_run(struct loom_pipeline *pl, struct loom_model *m,
                                   int64_t num_micro, int training, struct loom_grad_sync *gs,
                                   const struct loom_step_ctx *ctx, loom_micro_fetch_fn fetch,
                                   void *fetch_ctx, struct loom_micro *mb,
                                   struct loom_pipeline_stats *stats);

#endif
