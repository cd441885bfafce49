/* Rank grid: world rank <-> (tp, cp, ep, dp, pp) coordinates, Megatron's order "tp-cp-ep-dp-pp".
 *
 * The rank is a mixed-radix number whose fastest digit is tp and slowest is pp:
 *   rank = tp + TP * (cp + CP * (ep + EP * (dp + DP * pp)))
 * so tensor-parallel partners are neighbours (same node, fastest links) and pipeline stages are
 * world / PP apart. Pure functions: no communication, unit-tested without MPI.
 */
#include "loom/parallel.h"

void loom_rank_to_coords(int rank, const int sizes[LOOM_PDIM_COUNT], int coords[LOOM_PDIM_COUNT]) {
    for (int d = 0; d < LOOM_PDIM_COUNT; d++) {
        coords[d] = rank % sizes[d];
        rank /= sizes[d];
    }
}

int loom_coords_to_rank(const int coords[LOOM_PDIM_COUNT], const int sizes[LOOM_PDIM_COUNT]) {
    int rank = 0;
    for (int d = LOOM_PDIM_COUNT - 1; d >= 0; d--) rank = rank * sizes[d] + coords[d];
    return rank;
}

int loom_rank_group(int rank, const int sizes[LOOM_PDIM_COUNT], enum loom_pdim dim, int *members) {
    int c[LOOM_PDIM_COUNT];
    loom_rank_to_coords(rank, sizes, c);
    for (int i = 0; i < sizes[dim]; i++) {
        c[dim] = i;
        members[i] = loom_coords_to_rank(c, sizes);
    }
    return sizes[dim];
}

int loom_rank_embedding_group(int rank, const int sizes[LOOM_PDIM_COUNT], int members[2]) {
    int pp = sizes[LOOM_PDIM_PP];
    int c[LOOM_PDIM_COUNT];
    loom_rank_to_coords(rank, sizes, c);
    if (pp == 1) {
        members[0] = rank;
        return 1;
    }
    if (c[LOOM_PDIM_PP] != 0 && c[LOOM_PDIM_PP] != pp - 1) return 0;
    c[LOOM_PDIM_PP] = 0;
    members[0] = loom_coords_to_rank(c, sizes);
    c[LOOM_PDIM_PP] = pp - 1;
    members[1] = loom_coords_to_rank(c, sizes);
    return 2;
}

const char *loom_pdim_flag(enum loom_pdim dim) {
    static const char *flags[] = {
        [LOOM_PDIM_TP] = "--tensor-model-parallel-size",
        [LOOM_PDIM_CP] = "--context-parallel-size",
        [LOOM_PDIM_EP] = "--expert-model-parallel-size",
        [LOOM_PDIM_DP] = "data-parallel size",
        [LOOM_PDIM_PP] = "--pipeline-model-parallel-size",
    };
    _Static_assert(sizeof flags / sizeof flags[0] == LOOM_PDIM_COUNT, "one flag per dimension");
    return ((int)dim >= 0 && dim < LOOM_PDIM_COUNT) ? flags[dim] : "?";
}
