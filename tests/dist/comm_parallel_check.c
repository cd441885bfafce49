/* Parallel state and TP/SP regions under mpirun (run by test_comm.sh with 2, 4 and 8 ranks).
 *
 * For every layout tp x cp x ep x pp that divides the world: each group built by
 * loom_parallel_init holds exactly the world ranks that the rank grid names (checked by
 * gathering the members' world ranks), in coordinate order, and so does the embedding group.
 * Then the regions of include/loom/tp.h against a serial computation of the full tensors, with
 * values that sum exactly in any order (multiples of 1/8), so results compare bit for bit. */
#include <stdlib.h>

#include "comm_check.h"
#include "loom/parallel.h"
#include "loom/tp.h"

static struct loom_comm *W;
static int R, N;

/* The members of group g, by their world ranks. */
static void expect_members(struct loom_comm *g, const int *want, int n, const char *what) {
    int *got = malloc((size_t)n * sizeof *got);
    EXPECT(loom_comm_size(g) == n);
    EXPECT_OK(loom_comm_allgather(g, got, &R, 1, LOOM_DTYPE_I32));
    int ok = memcmp(got, want, (size_t)n * sizeof *got) == 0;
    if (!ok) {
        fprintf(stderr, "[rank %d] %s group:", R, what);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d (want %d)", got[i], want[i]);
        fprintf(stderr, "\n");
    }
    EXPECT(ok);
    free(got);
}

static void check_layout(int tp, int cp, int ep, int pp) {
    struct loom_parallel p;
    int vpp = pp > 1 ? 2 : 1;
    /* sequence parallel is asked for with tp > 1, and once without (it must be switched off) */
    int sp = tp > 1 || (cp == 1 && ep == 1 && pp == 1);
    EXPECT_OK(loom_parallel_init(&p, W, tp, cp, ep, pp, vpp, sp));
    if (!p.world) return;
    int sizes[LOOM_PDIM_COUNT] = {tp, cp, ep, N / (tp * cp * ep * pp), pp};
    EXPECT(memcmp(p.size, sizes, sizeof sizes) == 0);
    EXPECT(p.world_size == N && p.rank == R && p.vpp == vpp);
    EXPECT(p.sequence_parallel == (tp > 1)); /* disabled without tensor parallelism */
    EXPECT(loom_comm_size(p.world) == N && loom_comm_rank(p.world) == R && p.world != W);
    int c[LOOM_PDIM_COUNT];
    loom_rank_to_coords(R, sizes, c);
    EXPECT(memcmp(p.coord, c, sizeof c) == 0);
    static const char *names[] = {"tp", "cp", "ep", "dp", "pp"};
    for (int d = 0; d < LOOM_PDIM_COUNT; d++) {
        int want[64];
        int n = loom_rank_group(R, sizes, (enum loom_pdim)d, want);
        EXPECT(loom_comm_rank(p.group[d]) == p.coord[d]);
        expect_members(p.group[d], want, n, names[d]);
    }
    int emb[2];
    int ne = loom_rank_embedding_group(R, sizes, emb);
    EXPECT((ne == 0) == (p.embedding == NULL));
    if (p.embedding) expect_members(p.embedding, emb, ne, "embedding");

    /* dp x cp: ranks equal in tp, ep and pp, ordered tp fastest (here: by world rank) */
    struct loom_comm *dpcp;
    EXPECT_OK(loom_parallel_group(&p, 1u << LOOM_PDIM_DP | 1u << LOOM_PDIM_CP, &dpcp));
    if (dpcp) {
        int want[64], n = 0;
        for (int r = 0; r < N; r++) {
            int rc[LOOM_PDIM_COUNT];
            loom_rank_to_coords(r, sizes, rc);
            if (rc[LOOM_PDIM_TP] == c[LOOM_PDIM_TP] && rc[LOOM_PDIM_EP] == c[LOOM_PDIM_EP] &&
                rc[LOOM_PDIM_PP] == c[LOOM_PDIM_PP])
                want[n++] = r;
        }
        expect_members(dpcp, want, n, "dp x cp");
        loom_comm_free(dpcp);
    }
    loom_parallel_free(&p);
    EXPECT(p.world == NULL && p.embedding == NULL);
}

static void test_layouts(void) {
    int count = 0;
    for (int tp = 1; tp <= N; tp++)
        for (int cp = 1; tp * cp <= N; cp++)
            for (int ep = 1; tp * cp * ep <= N; ep++)
                for (int pp = 1; tp * cp * ep * pp <= N; pp++) {
                    if (N % (tp * cp * ep * pp)) continue;
                    /* beyond 4 ranks (8 have 35 layouts), keep those that split one dimension
                     * and those that split three in two (every order mistake shows there) */
                    int big = (tp > 1) + (cp > 1) + (ep > 1) + (pp > 1);
                    int halves = (tp == 2) + (cp == 2) + (ep == 2) + (pp == 2);
                    if (N > 4 && big > 1 && !(big == 3 && halves == 3)) continue;
                    check_layout(tp, cp, ep, pp);
                    count++;
                }
    EXPECT(count > 3);
}

static void test_layout_errors(void) {
    struct loom_parallel p;
    EXPECT_FAIL(loom_parallel_init(&p, W, 1, 1, 1, 1, 2, 0), LOOM_ERR_INVALID_ARG,
                "--virtual-pipeline-model-parallel-size 2 needs --pipeline-model-parallel-size");
    EXPECT_FAIL(loom_parallel_init(&p, W, 0, 1, 1, 1, 1, 0), LOOM_ERR_INVALID_ARG,
                "--tensor-model-parallel-size 0: must be at least 1");
    char msg[128];
    snprintf(msg, sizeof msg, "--context-parallel-size %d does not divide world size %d", N + 1,
             N);
    EXPECT_FAIL(loom_parallel_init(&p, W, 1, N + 1, 1, 1, 1, 0), LOOM_ERR_INVALID_ARG, msg);
    snprintf(msg, sizeof msg,
             "--tensor-model-parallel-size 3 x --pipeline-model-parallel-size 2 = 6 does not "
             "divide world size %d",
             N);
    if (N % 6) EXPECT_FAIL(loom_parallel_init(&p, W, 3, 1, 1, 2, 1, 0), LOOM_ERR_INVALID_ARG, msg);
}

/* ---- TP / SP regions ------------------------------------------------------------------------ */

/* Full logical tensors, multiples of 1/8 in [-8, 8): exact under any summation order. */
static float gval(int64_t b, int64_t t, int64_t c) {
    return (float)((b * 131 + t * 17 + c * 7) % 128 - 64) / 8.0f;
}

static void test_regions(int tp) {
    struct loom_parallel p;
    EXPECT_OK(loom_parallel_init(&p, W, tp, 1, 1, 1, 1, 1));
    if (!p.world) return;
    int r = loom_tp_rank(&p);
    for (int64_t B = 1; B <= 3; B += 2) {
        const int64_t Tl = 2, C = 5, T = Tl * tp, nfull = B * T * C, nshard = B * Tl * C;
        float *full = malloc((size_t)nfull * sizeof *full);
        float *scratch = malloc((size_t)nfull * sizeof *scratch);
        float *shard = malloc((size_t)nshard * sizeof *shard);
        float *want = malloc((size_t)nfull * sizeof *want);

        /* this rank's tokens of every sample */
        for (int64_t i = 0; i < nfull; i++) want[i] = gval(i / (T * C), i / C % T, i % C);
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < Tl; t++)
                for (int64_t c = 0; c < C; c++)
                    shard[(b * Tl + t) * C + c] = gval(b, r * Tl + t, c);
        int bad;

        /* all-gather of the shards rebuilds the full tensor */
        memset(full, 0, (size_t)nfull * sizeof *full);
        EXPECT_OK(loom_sp_allgather(&p, full, shard, B, Tl, C, B == 1 ? NULL : scratch));
        EXPECT(memcmp(full, want, (size_t)nfull * sizeof *full) == 0);

        /* reduce-scatter: rank q holds (q+1) * g; the shard is the slice of sum_q (q+1) g */
        for (int64_t i = 0; i < nfull; i++) full[i] = want[i] * (float)(r + 1);
        EXPECT_OK(loom_sp_reduce_scatter(&p, shard, full, B, Tl, C, B == 1 ? NULL : scratch));
        float k = (float)(tp * (tp + 1) / 2);
        bad = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < Tl; t++)
                for (int64_t c = 0; c < C; c++)
                    bad += shard[(b * Tl + t) * C + c] != k * gval(b, r * Tl + t, c);
        EXPECT(bad == 0);

        /* reduce-scatter then all-gather equals the all-reduce */
        EXPECT_OK(loom_sp_allgather(&p, full, shard, B, Tl, C, scratch));
        for (int64_t i = 0; i < nfull; i++) want[i] *= (float)(r + 1);
        EXPECT_OK(loom_tp_allreduce(&p, want, nfull));
        EXPECT(memcmp(full, want, (size_t)nfull * sizeof *full) == 0);
        free(full), free(scratch), free(shard), free(want);
    }
    /* counters: the regions go through the tp group only */
    struct loom_comm *g = p.group[LOOM_PDIM_TP];
    loom_comm_reset_counters(g);
    float buf[8] = {0};
    EXPECT_OK(loom_tp_allreduce(&p, buf, 8));
    EXPECT(loom_comm_bytes(g, LOOM_COLL_ALLREDUCE) == 2 * (tp - 1) * 32 / tp);
    loom_parallel_free(&p);
}

int main(int argc, char **argv) {
    if (loom_comm_world(&W, "mpi", &argc, &argv) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    R = loom_comm_rank(W);
    N = loom_comm_size(W);
    test_layouts();
    test_layout_errors();
    for (int tp = 1; tp <= N && tp <= 4; tp *= 2) test_regions(tp);
    int rc = check_finish(W, "comm_parallel_check");
    loom_comm_free(W);
    loom_comm_finalize();
    return rc;
}
