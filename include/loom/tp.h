/* Tensor- and sequence-parallel regions (Megatron's mappings), on float host buffers through the
 * tensor-parallel group p->group[LOOM_PDIM_TP]. With tp == 1 every region is the identity (a copy
 * where input and output are different buffers) and nothing is communicated.
 *
 * Megatron's paired regions that loom's model uses (region_enter, region_leave and their
 * backwards in src/models/gpt/gpt.c) and the functions that implement each direction:
 *
 *   region (Megatron name)                         forward              backward
 *   copy_to_tensor_model_parallel_region           identity             loom_tp_allreduce
 *   reduce_from_tensor_model_parallel_region       loom_tp_allreduce    identity
 *   gather_from_sequence_parallel_region           loom_sp_allgather    loom_sp_reduce_scatter
 *   reduce_scatter_to_sequence_parallel_region     loom_sp_reduce_scatter  loom_sp_allgather
 *
 * The others have no use here: the vocabulary-parallel loss never gathers the logits over the
 * last dimension, and the one split of a full sequence into the shards (the BERT heads' gradient)
 * is loom_gpt_sequence_shard, a copy on the backend's device.
 *
 * Sequence-parallel layout: activations are [B, T, C] row-major (B outer). The shard of tp rank r
 * holds tokens [r*T_local, (r+1)*T_local) of every sample, T = tp * T_local, stored contiguously
 * as [B, T_local, C]. Collectives concatenate along the outermost dimension, so for B > 1 the
 * gather and the reduce-scatter permute through `scratch` (B*T*C floats; it may be NULL when
 * B == 1 or tp == 1).
 */
#ifndef LOOM_TP_H
#define LOOM_TP_H

#include <stdint.h>

#include "loom/parallel.h"
#include "loom/status.h"

/* buf[n] <- sum over the tp group of buf[n] (bit-identical on every tp rank). */
enum loom_status loom_tp_allreduce(struct loom_parallel *p, float *buf, int64_t n);

/* full[B, tp*T_local, C] <- the shards [B, T_local, C] of every tp rank. */
enum loom_status loom_sp_allgather(struct loom_parallel *p, float *full, const float *shard,
                                   int64_t B, int64_t T_local, int64_t C, float *scratch);
/* shard[B, T_local, C] <- this rank's token slice of the sum over the tp group of full[B, T, C]. */
enum loom_status loom_sp_reduce_scatter(struct loom_parallel *p, float *shard, const float *full,
                                        int64_t B, int64_t T_local, int64_t C, float *scratch);
#endif
