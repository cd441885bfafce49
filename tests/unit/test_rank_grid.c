/* Rank grid (src/parallel/rank_grid.c) against groups worked out by hand, in Megatron's order
 * "tp-cp-ep-dp-pp" (tp fastest). No MPI: pure functions only.
 *
 * Example 1 is the one in Megatron-LM's initialize_model_parallel documentation: 16 GPUs,
 * tensor-parallel 2, pipeline-parallel 4, hence data-parallel 2. */
#include <stdio.h>
#include <string.h>

#include "expect.h"
#include "loom/parallel.h"

/* Every listed group, for every one of its members, must be what loom_rank_group returns. */
static void expect_groups(const int sizes[LOOM_PDIM_COUNT], enum loom_pdim dim, int ngroups,
                          int gsize, const int *groups, const char *label) {
    int world = 1, seen[256] = {0};
    for (int d = 0; d < LOOM_PDIM_COUNT; d++) world *= sizes[d];
    EXPECT(ngroups * gsize == world);
    for (int g = 0; g < ngroups; g++) {
        const int *want = groups + g * gsize;
        for (int i = 0; i < gsize; i++) {
            int got[64];
            int n = loom_rank_group(want[i], sizes, dim, got);
            int ok = n == gsize && memcmp(got, want, (size_t)gsize * sizeof(int)) == 0;
            if (!ok) {
                fprintf(stderr, "%s group %d, member %d: got", label, g, want[i]);
                for (int k = 0; k < n; k++) fprintf(stderr, " %d", got[k]);
                fprintf(stderr, "\n");
            }
            EXPECT(ok);
            seen[want[i]]++;
            /* the coordinate along dim is the position in the group */
            int c[LOOM_PDIM_COUNT];
            loom_rank_to_coords(want[i], sizes, c);
            EXPECT(c[dim] == i);
        }
    }
    for (int r = 0; r < world; r++) EXPECT(seen[r] == 1); /* the groups partition the world */
}

static void expect_coords(const int sizes[LOOM_PDIM_COUNT], int rank, int tp, int cp, int ep,
                          int dp, int pp) {
    int want[LOOM_PDIM_COUNT] = {tp, cp, ep, dp, pp}, got[LOOM_PDIM_COUNT];
    loom_rank_to_coords(rank, sizes, got);
    EXPECT(memcmp(got, want, sizeof got) == 0);
    EXPECT(loom_coords_to_rank(want, sizes) == rank);
}

static void test_megatron_doc_example(void) {
    /* tp 2, cp 1, ep 1, dp 2, pp 4 */
    const int s[LOOM_PDIM_COUNT] = {2, 1, 1, 2, 4};
    static const int tp[8][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7},
                                 {8, 9}, {10, 11}, {12, 13}, {14, 15}};
    static const int dp[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7},
                                 {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    static const int pp[4][4] = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
    expect_groups(s, LOOM_PDIM_TP, 8, 2, &tp[0][0], "tp");
    expect_groups(s, LOOM_PDIM_DP, 8, 2, &dp[0][0], "dp");
    expect_groups(s, LOOM_PDIM_PP, 4, 4, &pp[0][0], "pp");
    /* cp and ep of size 1: every rank alone */
    static const int single[16][1] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7},
                                      {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
    expect_groups(s, LOOM_PDIM_CP, 16, 1, &single[0][0], "cp");
    expect_groups(s, LOOM_PDIM_EP, 16, 1, &single[0][0], "ep");

    /* embedding groups: first and last stage of each pipeline: [0,12] [1,13] [2,14] [3,15] */
    static const int emb[4][2] = {{0, 12}, {1, 13}, {2, 14}, {3, 15}};
    for (int g = 0; g < 4; g++)
        for (int i = 0; i < 2; i++) {
            int m[2];
            EXPECT(loom_rank_embedding_group(emb[g][i], s, m) == 2);
            EXPECT(m[0] == emb[g][0] && m[1] == emb[g][1]);
        }
    for (int r = 4; r < 12; r++) { /* the middle stages hold no embedding */
        int m[2];
        EXPECT(loom_rank_embedding_group(r, s, m) == 0);
    }
    /* rank 13: tp 1, dp 0, pp 3 */
    expect_coords(s, 13, 1, 0, 0, 0, 3);
    expect_coords(s, 6, 0, 0, 0, 1, 1);
}

static void test_context_parallel(void) {
    /* 16 ranks, tp 2, cp 2, dp 2, pp 2: rank = tp + 2 cp + 4 dp + 8 pp */
    const int s[LOOM_PDIM_COUNT] = {2, 2, 1, 2, 2};
    static const int cp[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7},
                                 {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    static const int dp[8][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7},
                                 {8, 12}, {9, 13}, {10, 14}, {11, 15}};
    static const int pp[8][2] = {{0, 8}, {1, 9}, {2, 10}, {3, 11},
                                 {4, 12}, {5, 13}, {6, 14}, {7, 15}};
    expect_groups(s, LOOM_PDIM_CP, 8, 2, &cp[0][0], "cp");
    expect_groups(s, LOOM_PDIM_DP, 8, 2, &dp[0][0], "dp");
    expect_groups(s, LOOM_PDIM_PP, 8, 2, &pp[0][0], "pp");
    expect_coords(s, 11, 1, 1, 0, 0, 1);
    int m[2];
    EXPECT(loom_rank_embedding_group(5, s, m) == 2 && m[0] == 5 && m[1] == 13);
}

static void test_expert_parallel(void) {
    /* 8 ranks, ep 2, dp 2, pp 2: rank = ep + 2 dp + 4 pp */
    const int s[LOOM_PDIM_COUNT] = {1, 1, 2, 2, 2};
    static const int ep[4][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
    static const int dp[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
    static const int pp[4][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
    expect_groups(s, LOOM_PDIM_EP, 4, 2, &ep[0][0], "ep");
    expect_groups(s, LOOM_PDIM_DP, 4, 2, &dp[0][0], "dp");
    expect_groups(s, LOOM_PDIM_PP, 4, 2, &pp[0][0], "pp");
}

static void test_all_dims(void) {
    /* 48 ranks, tp 2, cp 3, ep 2, dp 2, pp 2: rank = tp + 2 cp + 6 ep + 12 dp + 24 pp */
    const int s[LOOM_PDIM_COUNT] = {2, 3, 2, 2, 2};
    expect_coords(s, 0, 0, 0, 0, 0, 0);
    expect_coords(s, 37, 1, 0, 0, 1, 1); /* 1 + 12 + 24 */
    expect_coords(s, 29, 1, 2, 0, 0, 1); /* 1 + 4 + 24 */
    expect_coords(s, 22, 0, 2, 1, 1, 0); /* 4 + 6 + 12 */
    expect_coords(s, 47, 1, 2, 1, 1, 1);
    int m[8];
    EXPECT(loom_rank_group(29, s, LOOM_PDIM_CP, m) == 3 && m[0] == 25 && m[1] == 27 &&
           m[2] == 29);
    EXPECT(loom_rank_group(29, s, LOOM_PDIM_EP, m) == 2 && m[0] == 29 && m[1] == 35);
    EXPECT(loom_rank_group(29, s, LOOM_PDIM_DP, m) == 2 && m[0] == 29 && m[1] == 41);
    EXPECT(loom_rank_group(29, s, LOOM_PDIM_PP, m) == 2 && m[0] == 5 && m[1] == 29);
    EXPECT(loom_rank_group(29, s, LOOM_PDIM_TP, m) == 2 && m[0] == 28 && m[1] == 29);
}

static void test_single_and_roundtrip(void) {
    const int one[LOOM_PDIM_COUNT] = {1, 1, 1, 1, 1};
    expect_coords(one, 0, 0, 0, 0, 0, 0);
    int m[2];
    EXPECT(loom_rank_embedding_group(0, one, m) == 1 && m[0] == 0);
    /* pp 1: the embedding group is the rank itself */
    const int tp4[LOOM_PDIM_COUNT] = {4, 1, 1, 2, 1};
    EXPECT(loom_rank_embedding_group(6, tp4, m) == 1 && m[0] == 6);

    static const int grids[][LOOM_PDIM_COUNT] = {
        {2, 1, 1, 2, 4}, {8, 1, 1, 1, 1}, {1, 1, 1, 1, 8}, {2, 3, 2, 2, 2}, {3, 1, 5, 1, 2}};
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        int world = 1;
        for (int d = 0; d < LOOM_PDIM_COUNT; d++) world *= grids[g][d];
        for (int r = 0; r < world; r++) {
            int c[LOOM_PDIM_COUNT];
            loom_rank_to_coords(r, grids[g], c);
            for (int d = 0; d < LOOM_PDIM_COUNT; d++) EXPECT(c[d] >= 0 && c[d] < grids[g][d]);
            EXPECT(loom_coords_to_rank(c, grids[g]) == r);
        }
    }
}

int main(void) {
    test_megatron_doc_example();
    test_context_parallel();
    test_expert_parallel();
    test_all_dims();
    test_single_and_roundtrip();
    EXPECT(strcmp(loom_pdim_flag(LOOM_PDIM_TP), "--tensor-model-parallel-size") == 0);
    EXPECT(strcmp(loom_pdim_flag(LOOM_PDIM_PP), "--pipeline-model-parallel-size") == 0);
    if (expect_finish("test_rank_grid")) return 1;
    printf("test_rank_grid: ok\n");
    return 0;
}
