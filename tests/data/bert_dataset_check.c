/* Helper of tests/data/test_bert_data.sh: reads BERT samples from a sentence-split dataset and
 * checks them against their definition (include/loom/bert_dataset.h), printing the statistics.
 *
 *   bert_dataset_check PREFIX VOCAB.txt TOKENIZER_TYPE [--seq-length T] [--samples N]
 *       [--seed S] [--split 949,50,1] [--which train|valid|test] [--no-binary-head]
 *       [--expect-error TEXT]
 *
 * Checks on every sample of the first N (exit 1 on any failure):
 *  - structure: [CLS] A [SEP] B [SEP] (or [CLS] A [SEP]) in the original ids (labels restore the
 *    masked ones), token types 0 then 1, padding [PAD] / padding_mask 0 / labels -1, length <= T;
 *  - A and B are contiguous windows of the mapping's sentences [0, a_end) and [a_end, n) (in
 *    swapped order when is_random), their lengths add up to at most the target, exactly the
 *    sentences when not truncated;
 *  - masks: [CLS]/[SEP] never; loss_mask = (labels != -1); every masked token's whole word
 *    (the token and its "##" pieces) masked; the count equals the stats' and is within the budget;
 *  - determinism: the same samples from a second dataset opened with the same seed, most
 *    samples different with seed + 1, and sample k the same when read first, in reverse order,
 *    after all others, or by 2 threads at once;
 * and over all N: the masked share of non-special tokens, the [MASK] / random / kept split, the
 * n-gram mix drawn (6:3:2), the swap rate, each against the tolerances of the test (within 0.5
 * point of 15%, 2 points of 80/10/10, 2 points of 6/11, 3/11, 2/11, 0.02 of 0.5).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "loom/bert_dataset.h"
#include "loom/data.h"
#include "loom/log.h"
#include "loom/tokenizer.h"

static uint8_t *g_piece;

static int same_sample(const struct loom_bert_sample *a, const struct loom_bert_sample *b) {
    size_t n = (size_t)a->seq_length * sizeof(int32_t);
    return a->is_random == b->is_random && a->num_tokens == b->num_tokens &&
           !memcmp(a->tokens, b->tokens, n) && !memcmp(a->labels, b->labels, n) &&
           !memcmp(a->loss_mask, b->loss_mask, n) && !memcmp(a->token_types, b->token_types, n) &&
           !memcmp(a->padding_mask, b->padding_mask, n);
}

/* Is w[0, n) a contiguous window of c[0, m)? */
static int is_window(const int32_t *w, int64_t n, const int32_t *c, int64_t m) {
    if (n == 0) return 1;
    for (int64_t s = 0; s + n <= m; s++)
        if (!memcmp(w, c + s, (size_t)n * sizeof *w)) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: see the comment at the top of tests/data/bert_dataset_check.c\n");
        return 2;
    }
    struct loom_bert_dataset_config cfg;
    loom_bert_dataset_config_default(&cfg);
    cfg.data_path = argv[1];
    cfg.split = "949,50,1";
    cfg.seq_length = 512;
    int64_t N = 10000;
    const char *expect_error = NULL;
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seq-length") && v) cfg.seq_length = atoll(v), i++;
        else if (!strcmp(a, "--samples") && v) N = atoll(v), i++;
        else if (!strcmp(a, "--seed") && v) cfg.seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--split") && v) cfg.split = v, i++;
        else if (!strcmp(a, "--which") && v) {
            cfg.which = !strcmp(v, "train") ? LOOM_SPLIT_TRAIN : !strcmp(v, "valid") ? LOOM_SPLIT_VALID
                                                                                   : LOOM_SPLIT_TEST;
            i++;
        } else if (!strcmp(a, "--no-binary-head")) cfg.binary_head = 0;
        else if (!strcmp(a, "--expect-error") && v) expect_error = v, i++;
        else {
            fprintf(stderr, "bert_dataset_check: unknown argument %s\n", a);
            return 2;
        }
    }
    struct loom_tokenizer *tok = NULL;
    if (loom_tokenizer_load(&tok, argv[3], argv[2], NULL) != LOOM_OK) {
        loom_print_error();
        return 2;
    }
    cfg.tokenizer = tok;
    cfg.num_samples = N;
    struct loom_bert_dataset *ds = NULL;
    enum loom_status st = loom_bert_dataset_open(&ds, &cfg);
    if (expect_error) {
        EXPECTF(st != LOOM_OK && strstr(loom_last_error(), expect_error),
                "wanted an error with '%s', got status %d: '%s'", expect_error, (int)st,
                loom_last_error());
        printf("error: %s\n", loom_last_error());
        loom_tokenizer_free(tok);
        return expect_finish("bert_dataset_check");
    }
    if (st != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    const int32_t CLS = loom_tokenizer_special(tok, "[CLS]"), SEP = loom_tokenizer_special(tok, "[SEP]"),
                  MASK = loom_tokenizer_special(tok, "[MASK]"), PAD = loom_tokenizer_special(tok, "[PAD]");
    int64_t V = loom_tokenizer_vocab_size(tok);
    g_piece = calloc((size_t)V, 1);
    for (int32_t id = 0; id < V; id++) {
        char *t = NULL;
        size_t l = 0;
        if (loom_tokenizer_decode(tok, &id, 1, &t, &l) == LOOM_OK)
            g_piece[id] = l > 2 && t[0] == '#' && t[1] == '#';
        free(t);
    }
    struct loom_indexed *ix = NULL;
    if (loom_indexed_open(&ix, cfg.data_path) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    const int64_t T = cfg.seq_length, len = loom_bert_dataset_len(ds);
    EXPECTF(len >= N, "len %lld < %lld samples asked", (long long)len, (long long)N);
    if (N > len) N = len;

    struct loom_bert_sample s, s2;
    EXPECT_OK(loom_bert_sample_alloc(&s, T));
    EXPECT_OK(loom_bert_sample_alloc(&s2, T));
    int32_t *orig = malloc((size_t)T * sizeof *orig);
    int32_t *cat = NULL;
    size_t cat_cap = 0;
    double masked = 0, nonspecial = 0, n_mask = 0, n_rand = 0, n_kept = 0, swaps = 0;
    double drawn[LOOM_BERT_MAX_NGRAM + 1] = {0}, taken[LOOM_BERT_MAX_NGRAM + 1] = {0};
    double truncated = 0, short_targets = 0, budget_fill = 0, budget_n = 0, tokens_sum = 0;
    int64_t bad_struct = 0, bad_window = 0, bad_word = 0, bad_mask = 0;
    for (int64_t k = 0; k < N; k++) {
        struct loom_bert_sample_stats sx;
        if (loom_bert_dataset_get_stats(ds, k, &s, &sx) != LOOM_OK) {
            loom_print_error();
            return 1;
        }
        int64_t n = s.num_tokens;
        tokens_sum += (double)n;
        if (n > T || n < 3) bad_struct++;
        /* originals, masks */
        int64_t nm = 0;
        for (int64_t i = 0; i < T; i++) {
            orig[i] = s.labels[i] >= 0 ? s.labels[i] : s.tokens[i];
            if (s.loss_mask[i] != (s.labels[i] != -1)) bad_mask++;
            if (s.labels[i] != -1) {
                nm++;
                if (s.tokens[i] == MASK) n_mask++;
                else if (s.tokens[i] == s.labels[i]) n_kept++;
                else n_rand++;
            }
            if (i >= n && (s.tokens[i] != PAD || s.padding_mask[i] != 0 || s.labels[i] != -1 ||
                           s.token_types[i] != 0))
                bad_struct++;
            if (i < n && s.padding_mask[i] != 1) bad_struct++;
        }
        if (nm != sx.num_masked || (double)nm > sx.num_to_predict) bad_mask++;
        masked += (double)nm;
        if (floor(sx.num_to_predict) >= 1) {
            budget_fill += (double)nm / floor(sx.num_to_predict);
            budget_n++;
        }
        /* structure in the original ids */
        int64_t sep1 = -1;
        for (int64_t i = 1; i < n; i++)
            if (orig[i] == SEP) {
                sep1 = i;
                break;
            }
        if (orig[0] != CLS || sep1 < 0 || orig[n - 1] != SEP) bad_struct++;
        int two = cfg.binary_head;
        if (two && sep1 == n - 1) bad_struct++; /* B empty */
        if (!two && sep1 != n - 1) bad_struct++;
        for (int64_t i = 0; i < n; i++) {
            int want = i <= sep1 ? 0 : 1;
            if (s.token_types[i] != want) bad_struct++;
            int special = i == 0 || i == sep1 || i == n - 1;
            if (special && s.labels[i] != -1) bad_mask++;
            if (!special && (orig[i] == CLS || orig[i] == SEP)) bad_struct++;
            if (!special) nonspecial++;
        }
        if (!two && s.is_random) bad_struct++;
        swaps += s.is_random;
        /* whole words: a piece and the token before it masked alike (inside a segment) */
        for (int64_t i = 1; i < n; i++)
            if (g_piece[orig[i]] && orig[i - 1] != CLS && orig[i - 1] != SEP &&
                (s.labels[i] != -1) != (s.labels[i - 1] != -1))
                bad_word++;
        /* segments against the mapping's sentences */
        int64_t first, end, target;
        EXPECT_OK(loom_bert_dataset_mapping(ds, k, &first, &end, &target));
        if (sx.target_length != target) bad_window++;
        if (target < T - 3) short_targets++;
        int64_t la = sep1 - 1, lb = two ? n - sep1 - 2 : 0;
        if (la != sx.len_a || lb != sx.len_b || la + lb > target) bad_window++;
        int64_t total = 0, split_at = 0;
        for (int64_t q = first; q < end; q++) {
            int64_t l = loom_indexed_sequence_length(ix, q);
            if ((size_t)(total + l) > cat_cap) {
                cat_cap = (size_t)(total + l) * 2;
                cat = realloc(cat, cat_cap * sizeof *cat);
            }
            EXPECT_OK(loom_indexed_read(ix, q, 0, l, cat + total));
            total += l;
            if (q - first + 1 == sx.a_sentences) split_at = total;
        }
        if (!two) split_at = total;
        const int32_t *first_seg = cat, *second_seg = cat + split_at;
        int64_t lf = split_at, ls = total - split_at;
        const int32_t *A = orig + 1, *B = orig + sep1 + 1;
        if (s.is_random) {
            if (!is_window(A, la, second_seg, ls) || !is_window(B, lb, first_seg, lf)) bad_window++;
        } else if (!is_window(A, la, first_seg, lf) || !is_window(B, lb, second_seg, ls)) {
            bad_window++;
        }
        if (!sx.truncated && la + lb != total) bad_window++;
        truncated += sx.truncated;
        for (int g = 1; g <= LOOM_BERT_MAX_NGRAM; g++) {
            drawn[g] += (double)sx.ngram_drawn[g];
            taken[g] += (double)sx.ngram_taken[g];
        }
    }
    EXPECTF(bad_struct == 0, "%lld structure errors", (long long)bad_struct);
    EXPECTF(bad_window == 0, "%lld segments not windows of the mapping's sentences",
            (long long)bad_window);
    EXPECTF(bad_word == 0, "%lld words partly masked", (long long)bad_word);
    EXPECTF(bad_mask == 0, "%lld mask errors", (long long)bad_mask);

    double share = masked / nonspecial, pm = n_mask / masked, pr = n_rand / masked,
           pk = n_kept / masked, dsum = drawn[1] + drawn[2] + drawn[3],
           tsum = taken[1] + taken[2] + taken[3], swap = swaps / (double)N;
    printf("samples %lld of %lld (epochs %lld), seq_length %lld, mean tokens %.1f, short targets "
           "%.3f, truncated %.3f\n", (long long)N, (long long)len,
           (long long)loom_bert_dataset_num_epochs(ds), (long long)T, tokens_sum / (double)N,
           short_targets / (double)N, truncated / (double)N);
    printf("masked share of non-special tokens %.4f (budget filled %.4f)\n", share,
           budget_fill / budget_n);
    printf("[MASK] %.4f random %.4f kept %.4f (of %.0f masked tokens)\n", pm, pr, pk, masked);
    printf("n-grams drawn 1:2:3 = %.4f %.4f %.4f (6:3:2 = 0.5455 0.2727 0.1818); spans taken "
           "%.4f %.4f %.4f\n", drawn[1] / dsum, drawn[2] / dsum, drawn[3] / dsum,
           taken[1] / tsum, taken[2] / tsum, taken[3] / tsum);
    printf("swap rate %.4f\n", swap);
    EXPECTF(fabs(share - 0.15) <= 0.005, "masked share %.4f", share);
    EXPECTF(fabs(pm - 0.8) <= 0.02 && fabs(pr - 0.1) <= 0.02 && fabs(pk - 0.1) <= 0.02,
            "80/10/10 split %.4f %.4f %.4f", pm, pr, pk);
    EXPECTF(fabs(drawn[1] / dsum - 6.0 / 11) <= 0.02 && fabs(drawn[2] / dsum - 3.0 / 11) <= 0.02 &&
                fabs(drawn[3] / dsum - 2.0 / 11) <= 0.02,
            "n-gram mix %.4f %.4f %.4f", drawn[1] / dsum, drawn[2] / dsum, drawn[3] / dsum);
    if (cfg.binary_head) EXPECTF(fabs(swap - 0.5) <= 0.02, "swap rate %.4f", swap);

    /* determinism and purity */
    struct loom_bert_dataset *same = NULL, *other = NULL;
    EXPECT_OK(loom_bert_dataset_open(&same, &cfg));
    struct loom_bert_dataset_config c2 = cfg;
    c2.seed = cfg.seed + 1;
    EXPECT_OK(loom_bert_dataset_open(&other, &c2));
    if (same && other) {
        int64_t M = N < 300 ? N : 300, differ = 0, mismatch = 0;
        /* reverse order on `same`, first read of k = M/2 on a fresh one */
        for (int64_t k = M - 1; k >= 0; k--) {
            EXPECT_OK(loom_bert_dataset_get(ds, k, &s));
            EXPECT_OK(loom_bert_dataset_get(same, k, &s2));
            if (!same_sample(&s, &s2)) mismatch++;
            EXPECT_OK(loom_bert_dataset_get(other, k, &s2));
            if (!same_sample(&s, &s2)) differ++;
        }
        EXPECTF(mismatch == 0, "%lld samples differ for the same seed", (long long)mismatch);
        EXPECTF(differ >= M * 9 / 10, "only %lld of %lld samples differ with another seed",
                (long long)differ, (long long)M);
        /* read by 2 threads at once, in interleaved order, into their own samples */
        int64_t thread_mismatch = 0;
#pragma omp parallel num_threads(2) reduction(+ : thread_mismatch)
        {
            struct loom_bert_sample a = {0}, b2 = {0};
            if (loom_bert_sample_alloc(&a, T) == LOOM_OK && loom_bert_sample_alloc(&b2, T) == LOOM_OK) {
#pragma omp for schedule(static, 1)
                for (int64_t k = 0; k < M; k++) {
                    if (loom_bert_dataset_get(ds, k, &a) != LOOM_OK ||
                        loom_bert_dataset_get(same, k, &b2) != LOOM_OK || !same_sample(&a, &b2))
                        thread_mismatch++;
                }
            } else {
                thread_mismatch++;
            }
            loom_bert_sample_free(&a);
            loom_bert_sample_free(&b2);
        }
        EXPECTF(thread_mismatch == 0, "%lld samples differ when read by 2 threads",
                (long long)thread_mismatch);
        struct loom_bert_dataset *fresh = NULL;
        EXPECT_OK(loom_bert_dataset_open(&fresh, &cfg));
        if (fresh) {
            int64_t k = N / 2;
            EXPECT_OK(loom_bert_dataset_get(fresh, k, &s2)); /* first read of the dataset */
            EXPECT_OK(loom_bert_dataset_get(ds, k, &s));    /* after every other */
            EXPECT(same_sample(&s, &s2));
            loom_bert_dataset_free(fresh);
        }
        printf("determinism: %lld samples equal for the same seed, %lld of %lld differ with "
               "seed + 1\n", (long long)(M - mismatch), (long long)differ, (long long)M);
    }
    loom_bert_dataset_free(same);
    loom_bert_dataset_free(other);
    loom_bert_sample_free(&s);
    loom_bert_sample_free(&s2);
    free(orig);
    free(cat);
    free(g_piece);
    loom_indexed_free(ix);
    loom_bert_dataset_free(ds);
    loom_tokenizer_free(tok);
    return expect_finish("bert_dataset_check");
}
