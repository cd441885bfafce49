/* Tensor- and sequence-parallel regions (see include/loom/tp.h for the pairs and layouts).
 *
 * The collectives concatenate rank blocks along the outermost dimension: an all-gather yields
 * [tp][B][T_local][C] and a reduce-scatter consumes that order. Sequence parallelism needs
 * [B][tp*T_local][C], so for B > 1 the data goes through `scratch` with one permuting copy:
 *   gather:          scratch[r][b][t][c] -> full[b][r*T_local + t][c]
 *   reduce-scatter:  full[b][r*T_local + t][c] -> scratch[r][b][t][c]
 */
#include <string.h>

#include "loom/comm.h"
#include "loom/tp.h"

static struct loom_comm *tp_group(struct loom_parallel *p) { return p->group[LOOM_PDIM_TP]; }

static void copy_floats(float *dst, const float *src, int64_t n) {
    if (n > 0 && dst != src) memmove(dst, src, (size_t)n * sizeof(float));
}

static enum loom_status check_sizes(const char *what, int64_t B, int64_t T_local, int64_t C) {
    if (B < 0 || T_local < 0 || C < 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%s: negative size (B %lld, T_local %lld, C %lld)",
                         what, (long long)B, (long long)T_local, (long long)C);
    return LOOM_OK;
}

/* [tp][B][Tl][C] (blocks) <-> [B][tp*Tl][C] (full); to_full selects the direction. */
static void permute(float *full, float *blocks, int tp, int64_t B, int64_t Tl, int64_t C,
                    int to_full) {
    int64_t row = Tl * C; /* one sample's slice of one rank */
#pragma omp parallel for collapse(2) schedule(static) if (tp * B * row > (1 << 16))
    for (int r = 0; r < tp; r++)
        for (int64_t b = 0; b < B; b++) {
            float *f = full + (b * tp + r) * row;
            float *k = blocks + (r * B + b) * row;
            if (to_full)
                memcpy(f, k, (size_t)row * sizeof(float));
            else
                memcpy(k, f, (size_t)row * sizeof(float));
        }
}

enum loom_status loom_tp_allreduce(struct loom_parallel *p, float *buf, int64_t n) {
    if (loom_tp_size(p) == 1) return LOOM_OK;
    return loom_comm_allreduce(tp_group(p), buf, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM);
}

enum loom_status loom_sp_allgather(struct loom_parallel *p, float *full, const float *shard,
                                   int64_t B, int64_t T_local, int64_t C, float *scratch) {
    LOOM_CHECK(check_sizes("sp_allgather", B, T_local, C));
    int tp = loom_tp_size(p);
    int64_t n = B * T_local * C;
    if (tp == 1) {
        copy_floats(full, shard, n);
        return LOOM_OK;
    }
    if (B == 1) return loom_comm_allgather(tp_group(p), full, shard, n, LOOM_DTYPE_F32);
    if (!scratch)
        return loom_fail(LOOM_ERR_INVALID_ARG, "sp_allgather: scratch is NULL with B = %lld",
                         (long long)B);
    LOOM_CHECK(loom_comm_allgather(tp_group(p), scratch, shard, n, LOOM_DTYPE_F32));
    permute(full, scratch, tp, B, T_local, C, 1);
    return LOOM_OK;
}

enum loom_status loom_sp_reduce_scatter(struct loom_parallel *p, float *shard, const float *full,
                                        int64_t B, int64_t T_local, int64_t C, float *scratch) {
    LOOM_CHECK(check_sizes("sp_reduce_scatter", B, T_local, C));
    int tp = loom_tp_size(p);
    int64_t n = B * T_local * C;
    if (tp == 1) {
        copy_floats(shard, full, n);
        return LOOM_OK;
    }
    if (B == 1)
        return loom_comm_reduce_scatter(tp_group(p), shard, full, n, LOOM_DTYPE_F32,
                                        LOOM_REDOP_SUM);
    if (!scratch)
        return loom_fail(LOOM_ERR_INVALID_ARG, "sp_reduce_scatter: scratch is NULL with B = %lld",
                         (long long)B);
    permute((float *)full, scratch, tp, B, T_local, C, 0); /* reads full only */
    return loom_comm_reduce_scatter(tp_group(p), shard, scratch, n, LOOM_DTYPE_F32,
                                    LOOM_REDOP_SUM);
}
