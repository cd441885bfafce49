/* GPT dataset: Megatron's split rounding, sample contiguity across document boundaries, epochs
 * and the separate last epoch, shuffles as permutations, splits partitioning the documents,
 * blend proportions, and the same global order whatever the number of data-parallel readers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"
#include "loom/data.h"

static char g_dir[256];

/* ---------------------------------------------------------------------------------------- */
/* split rounding: expected values computed with Megatron's get_train_valid_test_split_       */

static void test_split_bounds(void) {
    /* expected values: Megatron-core's split matrix computed with Python floats and numpy's
     * normalisation (int(round(bookend * n)); absent where a weight is 0) */
    static const struct {
        const char *split;
        int64_t n;
        int64_t b[4];
        int present[3];
    } cases[] = {
        {"969,30,1", 1000, {0, 969, 999, 1000}, {1, 1, 1}},
        {"969, 30, 1", 1000, {0, 969, 999, 1000}, {1, 1, 1}},
        {"969,30,1", 17, {0, 16, 17, 17}, {1, 1, 1}},
        {"969,30,1", 0, {0, 0, 0, 0}, {1, 1, 1}},
        {"98,2,0", 100, {0, 98, 100, 100}, {1, 1, 0}},
        {"98,2,0", 7, {0, 7, 7, 7}, {1, 1, 0}},
        {"1", 5, {0, 5, 5, 5}, {1, 0, 0}},
        {"1,1", 5, {0, 2, 5, 5}, {1, 1, 0}},
        {"1,1", 7, {0, 4, 7, 7}, {1, 1, 0}},
        {"1,1,1", 2, {0, 1, 1, 2}, {1, 1, 1}},
        {"1,1,1", 1, {0, 0, 1, 1}, {1, 1, 1}},
        {"80/10/10", 33, {0, 26, 30, 33}, {1, 1, 1}},
        {"949,50,1", 12345, {0, 11715, 12333, 12345}, {1, 1, 1}},
        {"2,1,1", 6, {0, 3, 4, 6}, {1, 1, 1}},
        {"1,1,2", 10, {0, 2, 5, 10}, {1, 1, 1}},
        {"3,3,2", 3, {0, 1, 2, 3}, {1, 1, 1}},
        {"99,1", 50, {0, 50, 50, 50}, {1, 1, 0}},
        {"1,2,1", 2, {0, 0, 2, 2}, {1, 1, 1}},
        {"0,3,7", 5, {0, 0, 2, 5}, {0, 1, 1}},
        {"8,1,1", 15, {0, 12, 14, 15}, {1, 1, 1}},
        {"98,2,0", 25, {0, 24, 25, 25}, {1, 1, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t b[4];
        int p[3];
        EXPECT(loom_data_split_bounds(cases[i].split, cases[i].n, b, p) == LOOM_OK);
        if (memcmp(b, cases[i].b, sizeof b) != 0 || memcmp(p, cases[i].present, sizeof p) != 0) {
            fprintf(stderr, "FAIL split %s over %lld: got %lld %lld %lld %lld (%d %d %d)\n",
                    cases[i].split, (long long)cases[i].n, (long long)b[0], (long long)b[1],
                    (long long)b[2], (long long)b[3], p[0], p[1], p[2]);
            expect_failures++;
        }
    }
    /* every split of every size: ordered ranges covering [0, n) */
    const char *splits[] = {"969,30,1", "98,2,0", "1", "1,1,1", "7,2,1", "0,0,1", "0.5,0.25,0.25"};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++)
        for (int64_t n = 0; n < 300; n++) {
            int64_t b[4];
            EXPECT(loom_data_split_bounds(splits[s], n, b, NULL) == LOOM_OK);
            EXPECT(b[0] == 0 && b[0] <= b[1] && b[1] <= b[2] && b[2] <= b[3] && b[3] == n);
        }
    double w[3];
    EXPECT(loom_data_parse_split("969,30,1", w) == LOOM_OK && fabs(w[0] - 0.969) < 1e-15);
    const char *bad[] = {"", "a,b", "1,2,3,4", "0,0,0", "-1,2", "1,,2", "1;2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        loom_clear_error();
        EXPECT_FAIL(loom_data_parse_split(bad[i], w), LOOM_ERR_INVALID_ARG, "--split");
    }
}

static void test_parse_blend(void) {
    int n, is_blend;
    char **p;
    double *w;
    EXPECT(loom_data_parse_blend("  /a/b_text_document ", &n, &p, &w, &is_blend) == LOOM_OK);
    EXPECT(n == 1 && !is_blend && strcmp(p[0], "/a/b_text_document") == 0 && w[0] == 1.0);
    loom_data_blend_free(n, p, w);
    EXPECT(loom_data_parse_blend("3 A 1 B", &n, &p, &w, &is_blend) == LOOM_OK);
    EXPECT(n == 2 && is_blend && strcmp(p[1], "B") == 0 && w[0] == 0.75 && w[1] == 0.25);
    loom_data_blend_free(n, p, w);
    const char *bad[] = {"", "A B", "1 A B", "x A 1 B", "-1 A 2 B", "0 A 0 B"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_FAIL(loom_data_parse_blend(bad[i], &n, &p, &w, &is_blend), LOOM_ERR_INVALID_ARG,
                    "--data-path");
    }
}

/* ---------------------------------------------------------------------------------------- */
/* fixtures                                                                                   */

static uint64_t g_x = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    g_x ^= g_x << 13;
    g_x ^= g_x >> 7;
    g_x ^= g_x << 17;
    return (uint32_t)(g_x >> 16);
}

/* ndocs one-sequence documents of lengths in [minlen, maxlen] (some 0 when minlen is 0), token
 * values in [base, base + 10000). */
static void make_dataset(const char *name, int64_t ndocs, int minlen, int maxlen, int32_t base,
                         enum loom_idx_dtype dt, char *prefix, size_t n) {
    snprintf(prefix, n, "%s/%s", g_dir, name);
    struct loom_indexed_builder *b;
    if (loom_indexed_builder_init(&b, prefix, dt) != LOOM_OK) {
        fprintf(stderr, "%s\n", loom_last_error());
        exit(1);
    }
    int32_t tok[512];
    for (int64_t d = 0; d < ndocs; d++) {
        int len = minlen + (int)(rnd() % (uint32_t)(maxlen - minlen + 1));
        for (int t = 0; t < len; t++) tok[t] = base + (int32_t)(rnd() % 10000);
        if (loom_indexed_builder_add_document(b, tok, len) != LOOM_OK) exit(1);
    }
    if (loom_indexed_builder_finish(b) != LOOM_OK) exit(1);
    loom_indexed_builder_free(b);
}

/* Concatenation of the source's documents in doc_order. */
static int32_t *source_stream(const struct loom_gpt_source_info *si, int64_t *len) {
    int64_t total = si->tokens_per_epoch * si->num_epochs;
    int32_t *s = malloc((size_t)(total + 1) * sizeof *s);
    int64_t at = 0;
    for (int64_t p = 0; p < si->doc_order_len; p++) {
        int64_t d = si->doc_order[p];
        int64_t n = loom_indexed_sequence_length(si->indexed, d);
        if (loom_indexed_read(si->indexed, d, 0, n, s + at) != LOOM_OK) exit(1);
        at += n;
    }
    *len = at;
    return s;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Structural checks of one source against Megatron's construction. */
static void check_source(const struct loom_gpt_dataset *ds, int src, int64_t T) {
    struct loom_gpt_source_info si;
    EXPECT(loom_gpt_dataset_source(ds, src, &si) == LOOM_OK);
    int64_t nd = si.doc_end - si.doc_begin;
    if (nd == 0) return;
    int64_t E = si.num_epochs, tpe = si.tokens_per_epoch, N = si.num_requested;
    /* the fewest epochs that give N samples */
    EXPECT((E * tpe - 1) / T >= N);
    EXPECT(E == 1 || ((E - 1) * tpe - 1) / T < N);
    EXPECT(si.num_samples == (E * tpe - 1) / T);
    /* Megatron's 80% rule */
    int sep = 0;
    if (E > 1) {
        int64_t last = N - ((E - 1) * tpe - 1) / T;
        sep = last < (int64_t)(0.80 * (double)((tpe - 1) / T));
    }
    EXPECT(si.separate_last_epoch == sep);
    /* doc order: each document of the split exactly E times (and exactly once in the last
     * epoch when it is separate), nothing from outside the split */
    EXPECT(si.doc_order_len == E * nd);
    int64_t *count = calloc((size_t)nd, sizeof *count);
    for (int64_t p = 0; p < si.doc_order_len; p++) {
        int64_t d = si.doc_order[p];
        if (d < si.doc_begin || d >= si.doc_end) {
            expect_failures++;
            fprintf(stderr, "FAIL doc %lld outside split [%lld, %lld)\n", (long long)d,
                    (long long)si.doc_begin, (long long)si.doc_end);
            break;
        }
        count[d - si.doc_begin]++;
    }
    for (int64_t d = 0; d < nd; d++) EXPECT(count[d] == E);
    if (sep) {
        memset(count, 0, (size_t)nd * sizeof *count);
        for (int64_t p = (E - 1) * nd; p < E * nd; p++) count[si.doc_order[p] - si.doc_begin]++;
        for (int64_t d = 0; d < nd; d++) EXPECT(count[d] == 1);
    }
    free(count);
    /* the order is actually shuffled (some document out of place) when there are enough */
    if (nd >= 8) {
        int moved = 0;
        for (int64_t p = 0; p < nd; p++) moved += si.doc_order[p] != si.doc_begin + p;
        EXPECT(moved > 0);
    }
}

/* Every sample of a single-source dataset is T+1 consecutive tokens of the stream, starting at
 * unshuffled * T, and the sample shuffle is a permutation (split in two when the last epoch is
 * separate). */
static void check_samples(const struct loom_gpt_dataset *ds, int64_t T) {
    struct loom_gpt_source_info si;
    EXPECT(loom_gpt_dataset_source(ds, 0, &si) == LOOM_OK);
    int64_t slen;
    int32_t *stream = source_stream(&si, &slen);
    int64_t len = loom_gpt_dataset_len(ds);
    EXPECT(len == si.num_samples && len >= si.num_requested);
    int64_t *js = malloc((size_t)(len > 0 ? len : 1) * sizeof *js);
    int32_t *tok = malloc((size_t)(T + 1) * sizeof *tok);
    int bad = 0;
    int64_t n_main = si.separate_last_epoch
                         ? ((si.num_epochs - 1) * si.tokens_per_epoch - 1) / T : len;
    for (int64_t k = 0; k < len; k++) {
        int src;
        int64_t j;
        EXPECT(loom_gpt_dataset_locate(ds, k, &src, &j) == LOOM_OK && src == 0);
        js[k] = j;
        EXPECT(loom_gpt_dataset_get(ds, k, tok) == LOOM_OK);
        if (j * T + T >= slen || memcmp(tok, stream + j * T, (size_t)(T + 1) * sizeof *tok))
            bad++;
        if ((k < n_main) != (j < n_main)) bad++; /* the two shuffled parts stay apart */
    }
    EXPECT(bad == 0);
    qsort(js, (size_t)len, sizeof *js, cmp_i64);
    for (int64_t k = 0; k < len; k++)
        if (js[k] != k) {
            expect_failures++;
            fprintf(stderr, "FAIL sample shuffle is not a permutation\n");
            break;
        }
    int moved = 0;
    for (int64_t k = 0; k < len && !moved; k++) {
        int src;
        int64_t j;
        loom_gpt_dataset_locate(ds, k, &src, &j);
        moved = j != k;
    }
    EXPECT(len < 8 || moved);
    EXPECT(loom_gpt_dataset_get(ds, len, tok) == LOOM_ERR_INVALID_ARG);
    EXPECT(loom_gpt_dataset_get(ds, -1, tok) == LOOM_ERR_INVALID_ARG);
    free(js);
    free(tok);
    free(stream);
}

static struct loom_gpt_dataset *open_ds(const char *path, const char *split, enum loom_split w,
                                        int64_t N, int64_t T, uint64_t seed) {
    struct loom_gpt_dataset_config c = {
        .data_path = path, .split = split, .which = w, .num_samples = N, .seq_length = T,
        .seed = seed};
    struct loom_gpt_dataset *ds = NULL;
    if (loom_gpt_dataset_open(&ds, &c) != LOOM_OK) {
        fprintf(stderr, "FAIL open %s split %d N=%lld T=%lld: %s\n", path, (int)w, (long long)N,
                (long long)T, loom_last_error());
        expect_failures++;
    }
    return ds;
}

/* ---------------------------------------------------------------------------------------- */

static void test_single(void) {
    char a[512];
    make_dataset("single", 200, 0, 60, 0, LOOM_IDX_DTYPE_U16, a, sizeof a);
    static const struct {
        int64_t N, T;
        const char *split;
    } cases[] = {
        {100, 16, "969,30,1"}, /* one epoch */
        {0, 16, "969,30,1"},   /* no samples asked: one epoch anyway, as Megatron */
        {1000, 16, "98,2,0"},  /* several epochs */
        {700, 32, "1"},        /* 200 docs, ~6000 tokens: T=32 -> ~187/epoch: 4 epochs */
        {50, 300, "969,30,1"}, /* samples longer than any document */
        {30, 1, "7,2,1"},      /* T = 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int w = 0; w < 3; w++) {
            int64_t b[4];
            struct loom_indexed *ix;
            EXPECT(loom_indexed_open(&ix, a) == LOOM_OK);
            int p[3];
            EXPECT(loom_data_split_bounds(cases[i].split, 200, b, p) == LOOM_OK);
            loom_indexed_free(ix);
            if (!p[w]) {
                /* a split of weight 0 is absent: opening it is an error naming it */
                struct loom_gpt_dataset_config c = {.data_path = a, .split = cases[i].split,
                                                    .which = (enum loom_split)w, .num_samples = 5,
                                                    .seq_length = cases[i].T, .seed = 1};
                struct loom_gpt_dataset *ds = NULL;
                EXPECT_FAIL(loom_gpt_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "weight 0");
                continue;
            }
            if (b[w + 1] == b[w]) {
                /* empty split: fine with 0 samples, an error naming the split with more */
                struct loom_gpt_dataset_config c = {.data_path = a, .split = cases[i].split,
                                                    .which = (enum loom_split)w, .num_samples = 5,
                                                    .seq_length = cases[i].T, .seed = 1};
                struct loom_gpt_dataset *ds = NULL;
                EXPECT_FAIL(loom_gpt_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "no documents");
                c.num_samples = 0;
                EXPECT(loom_gpt_dataset_open(&ds, &c) == LOOM_OK && loom_gpt_dataset_len(ds) == 0);
                loom_gpt_dataset_free(ds);
                continue;
            }
            int64_t N = w == 0 ? cases[i].N : cases[i].N / 10;
            struct loom_gpt_dataset *ds = open_ds(a, cases[i].split, (enum loom_split)w, N,
                                                  cases[i].T, 1234);
            if (!ds) continue;
            struct loom_gpt_source_info si;
            loom_gpt_dataset_source(ds, 0, &si);
            EXPECT(si.doc_begin == b[w] && si.doc_end == b[w + 1]);
            check_source(ds, 0, cases[i].T);
            check_samples(ds, cases[i].T);
            loom_gpt_dataset_free(ds);
        }
}

/* Both sides of Megatron's 80% rule for the last epoch. */
static void test_last_epoch(void) {
    char a[512];
    make_dataset("last", 150, 0, 50, 0, LOOM_IDX_DTYPE_U16, a, sizeof a);
    const int64_t T = 20;
    struct loom_gpt_dataset *ds = open_ds(a, "1", LOOM_SPLIT_TRAIN, 0, T, 5);
    if (!ds) return;
    struct loom_gpt_source_info si;
    loom_gpt_dataset_source(ds, 0, &si);
    int64_t tpe = si.tokens_per_epoch;
    loom_gpt_dataset_free(ds);
    /* three full epochs, then 10% or 95% of a fourth */
    int64_t first = (3 * tpe - 1) / T, per = (tpe - 1) / T;
    const int64_t Ns[2] = {first + per / 10, first + per * 95 / 100};
    for (int c = 0; c < 2; c++) {
        ds = open_ds(a, "1", LOOM_SPLIT_TRAIN, Ns[c], T, 5);
        if (!ds) return;
        loom_gpt_dataset_source(ds, 0, &si);
        EXPECT(si.num_epochs == 4);
        EXPECT(si.separate_last_epoch == (c == 0));
        check_source(ds, 0, T);
        check_samples(ds, T);
        loom_gpt_dataset_free(ds);
    }
}

/* The three splits' documents partition the dataset. */
static void test_partition(void) {
    char a[512];
    make_dataset("part", 101, 1, 20, 0, LOOM_IDX_DTYPE_I32, a, sizeof a);
    const char *splits[] = {"969,30,1", "6,3,1", "1,1,1", "98,2,0"};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
        int seen[101] = {0};
        int64_t prev_end = 0;
        int64_t bb[4];
        int present[3];
        EXPECT(loom_data_split_bounds(splits[s], 101, bb, present) == LOOM_OK);
        for (int w = 0; w < 3; w++) {
            if (!present[w]) continue; /* weight 0: absent */
            struct loom_gpt_dataset *ds = open_ds(a, splits[s], (enum loom_split)w, 0, 4, 7);
            if (!ds) continue;
            struct loom_gpt_source_info si;
            loom_gpt_dataset_source(ds, 0, &si);
            EXPECT(si.doc_begin == prev_end);
            prev_end = si.doc_end;
            for (int64_t p = 0; p < si.doc_order_len; p++) seen[si.doc_order[p]] |= 1 << w;
            loom_gpt_dataset_free(ds);
        }
        EXPECT(prev_end == 101);
        for (int d = 0; d < 101; d++) EXPECT(seen[d] == 1 || seen[d] == 2 || seen[d] == 4);
    }
}

/* Same seed, same order; another seed, another order. */
static void test_determinism(void) {
    char a[512];
    make_dataset("det", 80, 1, 30, 0, LOOM_IDX_DTYPE_U16, a, sizeof a);
    struct loom_gpt_dataset *x = open_ds(a, "1", LOOM_SPLIT_TRAIN, 300, 8, 42);
    struct loom_gpt_dataset *y = open_ds(a, "1", LOOM_SPLIT_TRAIN, 300, 8, 42);
    struct loom_gpt_dataset *z = open_ds(a, "1", LOOM_SPLIT_TRAIN, 300, 8, 43);
    if (!x || !y || !z) return;
    int32_t tx[9], ty[9], tz[9];
    int same_xy = 1, same_xz = 1;
    for (int64_t k = 0; k < 300; k++) {
        loom_gpt_dataset_get(x, k, tx);
        loom_gpt_dataset_get(y, k, ty);
        loom_gpt_dataset_get(z, k, tz);
        same_xy &= !memcmp(tx, ty, sizeof tx);
        same_xz &= !memcmp(tx, tz, sizeof tx);
    }
    EXPECT(same_xy);
    EXPECT(!same_xz);
    loom_gpt_dataset_free(x);
    loom_gpt_dataset_free(y);
    loom_gpt_dataset_free(z);
}

/* Blend: proportions follow the weights, each sample comes whole from its source's stream. */
static void test_blend(void) {
    char a[512], b[512], c[512], path[2048];
    make_dataset("blend_a", 120, 1, 40, 0, LOOM_IDX_DTYPE_U16, a, sizeof a);
    make_dataset("blend_b", 60, 1, 40, 20000, LOOM_IDX_DTYPE_U16, b, sizeof b);
    make_dataset("blend_c", 30, 1, 40, 40000, LOOM_IDX_DTYPE_I32, c, sizeof c);
    snprintf(path, sizeof path, "5 %s 3 %s 2 %s", a, b, c);
    const int64_t N = 2000, T = 16;
    struct loom_gpt_dataset *ds = open_ds(path, "969,30,1", LOOM_SPLIT_TRAIN, N, T, 99);
    if (!ds) return;
    const double w[3] = {0.5, 0.3, 0.2};
    /* Megatron-core's blend: sum over the datasets of ceil(N * w) samples */
    EXPECT(loom_gpt_dataset_len(ds) ==
           (int64_t)(ceil(N * w[0]) + ceil(N * w[1]) + ceil(N * w[2])));
    EXPECT(loom_gpt_dataset_num_sources(ds) == 3);
    int32_t *streams[3];
    int64_t slen[3], count[3] = {0, 0, 0};
    for (int d = 0; d < 3; d++) {
        struct loom_gpt_source_info si;
        EXPECT(loom_gpt_dataset_source(ds, d, &si) == LOOM_OK);
        EXPECT(fabs(si.weight - w[d]) < 1e-12);
        EXPECT(si.num_requested == (int64_t)ceil(ceil((double)N * w[d]) * 1.005));
        check_source(ds, d, T);
        streams[d] = source_stream(&si, &slen[d]);
    }
    int32_t tok[17];
    int bad = 0;
    for (int64_t k = 0; k < N; k++) {
        int d;
        int64_t j;
        EXPECT(loom_gpt_dataset_locate(ds, k, &d, &j) == LOOM_OK);
        count[d]++;
        EXPECT(loom_gpt_dataset_get(ds, k, tok) == LOOM_OK);
        if (j * T + T >= slen[d] || memcmp(tok, streams[d] + j * T, sizeof tok)) bad++;
        for (int t = 0; t <= T; t++)
            if (tok[t] < 20000 * d || tok[t] >= 20000 * d + 10000) bad++;
        /* the running proportions stay within a sample or two of the weights */
        if (k >= 10)
            for (int e = 0; e < 3; e++)
                if (fabs((double)count[e] - w[e] * (double)(k + 1)) > 2.0) bad++;
    }
    EXPECT(bad == 0);
    for (int d = 0; d < 3; d++) {
        EXPECT(llabs(count[d] - (int64_t)llround(w[d] * (double)N)) <= 1);
        free(streams[d]);
    }
    loom_gpt_dataset_free(ds);

    /* a blend with an empty split for one dataset (weight > 0) is an error naming it */
    char tiny[512];
    make_dataset("blend_tiny", 2, 5, 5, 0, LOOM_IDX_DTYPE_U16, tiny, sizeof tiny);
    snprintf(path, sizeof path, "1 %s 1 %s", a, tiny);
    struct loom_gpt_dataset_config cfg = {.data_path = path, .split = "969,30,1",
                                          .which = LOOM_SPLIT_VALID, .num_samples = 10,
                                          .seq_length = 4, .seed = 1};
    EXPECT_FAIL(loom_gpt_dataset_open(&ds, &cfg), LOOM_ERR_INVALID_ARG, "blend_tiny", "valid");
    /* a weight-0 dataset is drawn once, at blended sample 1, where every error is 0 and the
     * first dataset wins the tie (Megatron's build_blending_indices), then never again */
    snprintf(path, sizeof path, "0 %s 1 %s", b, a);
    ds = open_ds(path, "1", LOOM_SPLIT_TRAIN, 100, 8, 5);
    if (ds) {
        for (int64_t k = 0; k < 100; k++) {
            int d;
            int64_t j;
            loom_gpt_dataset_locate(ds, k, &d, &j);
            EXPECT(d == (k == 1 ? 0 : 1));
        }
        loom_gpt_dataset_free(ds);
    }
}

/* R data-parallel ranks, each with its own dataset object (as separate processes), read their
 * shares of 12 global batches; put back together, the samples are the 1-rank sequence. Two
 * ways of sharing: Megatron's contiguous micro-batch blocks and a plain stride. */
static void test_dp_ranks(void) {
    char a[512], b[512], path[1100];
    make_dataset("dp_a", 90, 1, 50, 0, LOOM_IDX_DTYPE_U16, a, sizeof a);
    make_dataset("dp_b", 50, 1, 50, 20000, LOOM_IDX_DTYPE_U16, b, sizeof b);
    snprintf(path, sizeof path, "0.7 %s 0.3 %s", a, b);
    const char *paths[2] = {a, path};
    const int64_t T = 12, mbs = 2, G = 16, iters = 12, N = G * iters;
    for (int pi = 0; pi < 2; pi++) {
        struct loom_gpt_dataset *ref = open_ds(paths[pi], "969,30,1", LOOM_SPLIT_TRAIN, N, T, 3);
        if (!ref) return;
        int32_t *want = malloc((size_t)(N * (T + 1)) * sizeof *want);
        for (int64_t k = 0; k < N; k++) loom_gpt_dataset_get(ref, k, want + k * (T + 1));
        loom_gpt_dataset_free(ref);
        const int ranks[] = {1, 2, 4};
        for (int ri = 0; ri < 3; ri++) {
            int R = ranks[ri];
            int32_t *got_c = calloc((size_t)(N * (T + 1)), sizeof *got_c);
            int32_t *got_s = calloc((size_t)(N * (T + 1)), sizeof *got_s);
            for (int r = 0; r < R; r++) {
                struct loom_gpt_dataset *ds = open_ds(paths[pi], "969,30,1", LOOM_SPLIT_TRAIN, N,
                                                      T, 3);
                if (!ds) return;
                /* contiguous: G / (mbs * R) micro-steps per batch */
                for (int64_t consumed = 0; consumed < N; consumed += mbs * R)
                    for (int64_t j = 0; j < mbs; j++) {
                        int64_t k = loom_data_sample_index(consumed, mbs, r, j);
                        EXPECT(loom_gpt_dataset_get(ds, k, got_c + k * (T + 1)) == LOOM_OK);
                    }
                /* strided */
                for (int64_t k = r; k < N; k += R)
                    EXPECT(loom_gpt_dataset_get(ds, k, got_s + k * (T + 1)) == LOOM_OK);
                loom_gpt_dataset_free(ds);
            }
            EXPECT(!memcmp(got_c, want, (size_t)(N * (T + 1)) * sizeof *want));
            EXPECT(!memcmp(got_s, want, (size_t)(N * (T + 1)) * sizeof *want));
            free(got_c);
            free(got_s);
        }
        free(want);
    }
}

static void test_errors(void) {
    char a[512];
    make_dataset("err", 10, 0, 0, 0, LOOM_IDX_DTYPE_U16, a, sizeof a); /* no tokens at all */
    struct loom_gpt_dataset_config c = {.data_path = a, .split = "1", .which = LOOM_SPLIT_TRAIN,
                                        .num_samples = 5, .seq_length = 8, .seed = 1};
    struct loom_gpt_dataset *ds = NULL;
    EXPECT_FAIL(loom_gpt_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "no tokens");
    c.seq_length = 0;
    EXPECT_FAIL(loom_gpt_dataset_open(&ds, &c), LOOM_ERR_INVALID_ARG, "--seq-length");
    c.seq_length = 8;
    c.data_path = "/nonexistent/prefix";
    EXPECT_FAIL(loom_gpt_dataset_open(&ds, &c), LOOM_ERR_IO, "/nonexistent/prefix.idx");
    c.data_path = a;
    c.split = "1,x";
    EXPECT(loom_gpt_dataset_open(&ds, &c) == LOOM_ERR_INVALID_ARG);
    EXPECT(ds == NULL);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/loom_test_gpt.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_split_bounds();
    test_parse_blend();
    test_single();
    test_last_epoch();
    test_partition();
    test_determinism();
    test_blend();
    test_dp_ranks();
    test_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    if (expect_finish("test_gpt_dataset")) return 1;
    printf("test_gpt_dataset: ok\n");
    return 0;
}
