/* Parallel state: checks the layout flags, places this rank on the grid and builds its groups.
 *
 * Every group is a loom_comm_split of a private copy of the world: the color is the lowest world
 * rank of the group and the key the coordinate along it, so that the rank inside the group is the
 * coordinate (tp rank == group rank of the tp group, and so on). The groups come from the same
 * pure functions as the unit-tested rank grid (rank_grid.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "loom/log.h"
#include "loom/parallel.h"

/* "--tensor-model-parallel-size 3 x --pipeline-model-parallel-size 2 = 6 does not divide world
 * size 8; valid: products that divide 8 (1, 2, 4, 8)" */
static enum loom_status layout_error(const int sizes[LOOM_PDIM_COUNT], int64_t product,
                                     int world) {
    char flags[256] = "", divisors[160] = "";
    size_t n = 0;
    int terms = 0;
    for (int d = 0; d < LOOM_PDIM_COUNT; d++) {
        if (d == LOOM_PDIM_DP || sizes[d] == 1) continue;
        n += (size_t)snprintf(flags + n, n < sizeof flags ? sizeof flags - n : 0, "%s%s %d",
                              terms ? " x " : "", loom_pdim_flag((enum loom_pdim)d), sizes[d]);
        terms++;
    }
    char total[32] = "";
    if (terms > 1) snprintf(total, sizeof total, " = %lld", (long long)product);
    n = 0;
    for (int k = 1, shown = 0; k <= world && n < sizeof divisors; k++) {
        if (world % k) continue;
        if (shown == 12) {
            snprintf(divisors + n, sizeof divisors - n, ", ...");
            break;
        }
        n += (size_t)snprintf(divisors + n, sizeof divisors - n, "%s%d", shown ? ", " : "", k);
        shown++;
    }
    return loom_fail(LOOM_ERR_INVALID_ARG,
                     "%s%s does not divide world size %d; valid: products that divide %d (%s)",
                     flags, total, world, world, divisors);
}

static enum loom_status check_layout(int sizes[LOOM_PDIM_COUNT], int world, int vpp) {
    for (int d = 0; d < LOOM_PDIM_COUNT; d++) {
        if (d == LOOM_PDIM_DP) continue;
        if (sizes[d] < 1)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s %d: must be at least 1",
                             loom_pdim_flag((enum loom_pdim)d), sizes[d]);
    }
    if (vpp < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--virtual-pipeline-model-parallel-size %d: must be at least 1", vpp);
    if (vpp > 1 && sizes[LOOM_PDIM_PP] == 1)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--virtual-pipeline-model-parallel-size %d needs "
                         "--pipeline-model-parallel-size > 1 (the interleaved schedule)",
                         vpp);
    int64_t product = 1;
    for (int d = 0; d < LOOM_PDIM_COUNT; d++)
        if (d != LOOM_PDIM_DP) product *= sizes[d];
    if (product > world || world % product != 0) return layout_error(sizes, product, world);
    sizes[LOOM_PDIM_DP] = (int)(world / product);
    return LOOM_OK;
}

static enum loom_status build_groups(struct loom_parallel *p) {
    int m[2];
    LOOM_CHECK(loom_comm_split(&p->world, p->world, 0, p->rank));
    for (int d = 0; d < LOOM_PDIM_COUNT; d++) {
        /* color: the world rank with coordinate 0 along d (the group's lowest rank) */
        int c[LOOM_PDIM_COUNT];
        memcpy(c, p->coord, sizeof c);
        c[d] = 0;
        int color = loom_coords_to_rank(c, p->size);
        LOOM_CHECK(loom_comm_split(&p->group[d], p->world, color, p->coord[d]));
        LOOM_ASSERT(loom_comm_size(p->group[d]) == p->size[d]);
        LOOM_ASSERT(loom_comm_rank(p->group[d]) == p->coord[d]);
    }
    int n = loom_rank_embedding_group(p->rank, p->size, m);
    LOOM_CHECK(loom_comm_split(&p->embedding, p->world, n ? m[0] : -1, p->rank));
    LOOM_ASSERT((n == 0) == (p->embedding == NULL));
    LOOM_ASSERT(n == 0 || loom_comm_size(p->embedding) == n);
    return LOOM_OK;
}

enum loom_status loom_parallel_init(struct loom_parallel *p, struct loom_comm *world, int tp,
                                    int cp, int ep, int pp, int vpp, int sequence_parallel) {
    if (!p || !world) return loom_fail(LOOM_ERR_INVALID_ARG, "loom_parallel_init: NULL argument");
    memset(p, 0, sizeof *p);
    p->world_size = loom_comm_size(world);
    p->rank = loom_comm_rank(world);
    p->size[LOOM_PDIM_TP] = tp;
    p->size[LOOM_PDIM_CP] = cp;
    p->size[LOOM_PDIM_EP] = ep;
    p->size[LOOM_PDIM_PP] = pp;
    LOOM_CHECK(check_layout(p->size, p->world_size, vpp));
    loom_rank_to_coords(p->rank, p->size, p->coord);
    p->vpp = vpp;
    p->sequence_parallel = sequence_parallel != 0;
    loom_log_set_rank(p->rank, p->world_size);
    if (p->sequence_parallel && tp == 1) {
        /* as Megatron: sequence parallelism splits along the tensor-parallel group */
        if (p->rank == 0)
            loom_log_warn("--sequence-parallel has no effect with --tensor-model-parallel-size "
                          "1; disabled");
        p->sequence_parallel = 0;
    }
    p->world = world; /* replaced by a private copy in build_groups */
    enum loom_status s = build_groups(p);
    if (s != LOOM_OK) {
        if (p->world == world) p->world = NULL;
        loom_parallel_free(p);
        return s;
    }
    return LOOM_OK;
}

enum loom_status loom_parallel_init_single(struct loom_parallel *p) {
    struct loom_comm *self;
    LOOM_CHECK(loom_comm_world(&self, "self", NULL, NULL));
    enum loom_status s = loom_parallel_init(p, self, 1, 1, 1, 1, 1, 0);
    loom_comm_free(self);
    return s;
}

void loom_parallel_free(struct loom_parallel *p) {
    if (!p) return;
    loom_comm_free(p->embedding);
    for (int d = LOOM_PDIM_COUNT - 1; d >= 0; d--) loom_comm_free(p->group[d]);
    loom_comm_free(p->world);
    memset(p, 0, sizeof *p);
}

enum loom_status loom_parallel_group(struct loom_parallel *p, unsigned dims,
                                     struct loom_comm **out) {
    if (!p || !p->world || !out)
        return loom_fail(LOOM_ERR_INVALID_ARG, "loom_parallel_group: NULL or freed state");
    if (dims >> LOOM_PDIM_COUNT)
        return loom_fail(LOOM_ERR_INVALID_ARG, "loom_parallel_group: bad dimension mask 0x%x",
                         dims);
    int c[LOOM_PDIM_COUNT];
    memcpy(c, p->coord, sizeof c);
    for (int d = 0; d < LOOM_PDIM_COUNT; d++)
        if (dims & (1u << d)) c[d] = 0;
    /* world ranks of the members increase with their coordinates, tp fastest */
    return loom_comm_split(out, p->world, loom_coords_to_rank(c, p->size), p->rank);
}
