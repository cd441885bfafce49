/* Parallel state: the rank grid and its process groups.
 *
 * world = TP x CP x EP x DP x PP with Megatron's default order "tp-cp-ep-dp-pp": tp varies
 * fastest, pp slowest. The mapping rank <-> coordinates is a pure function (unit-tested without
 * MPI); loom_parallel_init builds the groups from it. One explicit struct is passed to whatever
 * needs it: no global process groups.
 */
#ifndef LOOM_PARALLEL_H
#define LOOM_PARALLEL_H

#include <stdint.h>

#include "loom/comm.h"
#include "loom/status.h"

enum loom_pdim { LOOM_PDIM_TP = 0, LOOM_PDIM_CP, LOOM_PDIM_EP, LOOM_PDIM_DP, LOOM_PDIM_PP, LOOM_PDIM_COUNT };

/* Coordinates of `rank` in a grid of sizes[LOOM_PDIM_COUNT] (order tp-cp-ep-dp-pp). */
void loom_rank_to_coords(int rank, const int sizes[LOOM_PDIM_COUNT], int coords[LOOM_PDIM_COUNT]);
int loom_coords_to_rank(const int coords[LOOM_PDIM_COUNT], const int sizes[LOOM_PDIM_COUNT]);
/* World ranks of the group along `dim` that holds `rank` (the ranks that differ from it only in
 * that coordinate), in group-rank order: members[i] has coordinate i. Returns the group size,
 * sizes[dim]; members must hold that many. */
int loom_rank_group(int rank, const int sizes[LOOM_PDIM_COUNT], enum loom_pdim dim, int *members);
/* World ranks of the embedding group of `rank`: the first and the last pipeline stage with its
 * other coordinates. Returns 2 (members = {first, last}), 1 when pp == 1 (members = {rank}) and 0
 * when `rank` is a middle stage (in no embedding group). */
int loom_rank_embedding_group(int rank, const int sizes[LOOM_PDIM_COUNT], int members[2]);
/* Flag name of each dimension ("--tensor-model-parallel-size", ...; dp has none: derived). */
const char *loom_pdim_flag(enum loom_pdim dim);

struct loom_parallel {
    int world_size, rank;
    int size[LOOM_PDIM_COUNT];  /* tp, cp, ep, dp, pp */
    int coord[LOOM_PDIM_COUNT]; /* this rank's coordinates */
    int vpp;                    /* virtual pipeline stages per rank (1 = plain 1F1B) */
    int sequence_parallel;
    struct loom_comm *world;
    struct loom_comm *group[LOOM_PDIM_COUNT]; /* ranks that differ only in that coordinate */
    struct loom_comm *embedding; /* first and last pipeline stage with the same other coords;
                                    NULL on the middle stages; just this rank when pp == 1 */
};

/* Single-rank state over the "self" comm backend (no MPI). */
enum loom_status loom_parallel_init_single(struct loom_parallel *p);
/* Build the grid over `world` (sizes[LOOM_PDIM_DP] is derived: world / (tp*cp*ep*pp)). A world
 * size the others do not divide is LOOM_ERR_INVALID_ARG naming the flags. */
enum loom_status loom_parallel_init(struct loom_parallel *p, struct loom_comm *world, int tp,
                                    int cp, int ep, int pp, int vpp, int sequence_parallel);
void loom_parallel_free(struct loom_parallel *p);
/* A group over several dimensions: the ranks that differ from this one only in the coordinates
 * whose bit (1 << LOOM_PDIM_x) is set in `dims`, ordered with tp fastest (e.g. dp x cp, the group
 * that reduces gradients under context parallelism). Collective over p->world; the caller frees
 * it with loom_comm_free. dims == 0 gives a group of one. */
enum loom_status loom_parallel_group(struct loom_parallel *p, unsigned dims,
                                     struct loom_comm **out);

static inline int loom_tp_size(const struct loom_parallel *p) { return p->size[LOOM_PDIM_TP]; }
static inline int loom_tp_rank(const struct loom_parallel *p) { return p->coord[LOOM_PDIM_TP]; }
static inline int loom_pp_size(const struct loom_parallel *p) { return p->size[LOOM_PDIM_PP]; }
static inline int loom_pp_rank(const struct loom_parallel *p) { return p->coord[LOOM_PDIM_PP]; }
static inline int loom_dp_size(const struct loom_parallel *p) { return p->size[LOOM_PDIM_DP]; }
static inline int loom_dp_rank(const struct loom_parallel *p) { return p->coord[LOOM_PDIM_DP]; }

#endif
