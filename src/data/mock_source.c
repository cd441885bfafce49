/* Synthetic data for --mock-data, every choice drawn from the counter-based RNG keyed by (seed,
 * split, sample index):
 *  - GPT: sample i is an arithmetic sequence modulo the vocabulary, with random start and stride;
 *  - BERT: [CLS] A [SEP] B [SEP] of random word ids and random length, padded, with masked-word
 *    labels and a random sentence-order label (loom/train.h, loom_bert_mock_source). */
#include <stdlib.h>
#include <string.h>

#include "loom/rng.h"
#include "loom/train.h"

void loom_micro_row_next_tokens(struct loom_micro *mb, int64_t b, const int32_t *tokens) {
    const int64_t T = mb->T;
    memcpy(mb->tokens + b * T, tokens, (size_t)T * sizeof(int32_t));
    memcpy(mb->labels + b * T, tokens + 1, (size_t)T * sizeof(int32_t));
    memset(mb->token_types + b * T, 0, (size_t)T * sizeof(int32_t));
    for (int64_t t = 0; t < T; t++) mb->padding_mask[b * T + t] = 1;
    mb->sop_labels[b] = 0;
}

struct mock {
    int64_t vocab, T;
    uint64_t seed, purpose;
    int binary_head; /* BERT's */
    int32_t *tokens; /* GPT's [T+1] */
};

static void mock_free(void *ctx) {
    struct mock *m = ctx;
    free(m->tokens);
    free(m);
}

static enum loom_status mock_fill(void *ctx, int64_t index, struct loom_micro *mb, int64_t b) {
    struct mock *m = ctx;
    uint32_t w[4];
    loom_rng_u32x4(m->seed, m->purpose, (uint64_t)index, w);
    int64_t start = (int64_t)(w[0] % (uint32_t)m->vocab);
    int64_t stride = 1 + (int64_t)(w[1] % 7u);
    for (int64_t t = 0; t <= m->T; t++) m->tokens[t] = (int32_t)((start + t * stride) % m->vocab);
    loom_micro_row_next_tokens(mb, b, m->tokens);
    return LOOM_OK;
}

static enum loom_status mock_new(struct loom_sample_source *s, int64_t vocab, int64_t T,
                                 uint64_t seed, const char *what, int split, struct mock **out) {
    struct mock *m = calloc(1, sizeof *m);
    if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory");
    m->vocab = vocab;
    m->T = T;
    m->seed = seed;
    m->purpose = loom_hash_mix(loom_hash_str(what), (uint64_t)split);
    s->ctx = m;
    s->num_samples = 0;
    s->free = mock_free;
    *out = m;
    return LOOM_OK;
}

enum loom_status loom_mock_source(struct loom_sample_source *s, int64_t vocab, int64_t T,
                                  uint64_t seed, int split) {
    struct mock *m = NULL;
    LOOM_CHECK(mock_new(s, vocab, T, seed, "mock-data", split, &m));
    m->tokens = malloc((size_t)(T + 1) * sizeof(int32_t));
    if (!m->tokens) {
        mock_free(m);
        return loom_fail(LOOM_ERR_OOM, "out of memory");
    }
    s->all_labels = 1;
    s->fill = mock_fill;
    return LOOM_OK;
}

/* ---- BERT ---- */
enum { MOCK_PAD = 0, MOCK_CLS = 1, MOCK_SEP = 2, MOCK_MASK = 3, MOCK_FIRST_WORD = 4 };

/* The sample's draws: word 0 of the sample's key (index) for its shape, then one key per
 * position (index's stream, counter t) for its word, whether it is labelled */
static enum loom_status bert_mock_fill(void *ctx, int64_t index, struct loom_micro *mb,
                                       int64_t b) {
    struct mock *m = ctx;
    const int64_t T = m->T;
    int32_t *tok = mb->tokens + b * T, *lab = mb->labels + b * T, *typ = mb->token_types + b * T,
            *pad = mb->padding_mask + b * T;
    uint32_t w[4];
    loom_rng_u32x4(m->seed, m->purpose, (uint64_t)index, w);
    /* length in [T/2, T], at least 5: [CLS], a word of A, [SEP], a word of B, [SEP] */
    int64_t lo = T / 2 < 5 ? 5 : T / 2;
    const int64_t len = lo + (int64_t)(w[0] % (uint32_t)(T - lo + 1));
    const int64_t words = len - (m->binary_head ? 3 : 2);
    /* A's words: [1, words - 1] with two segments, all of them with one */
    const int64_t a = m->binary_head ? 1 + (int64_t)(w[1] % (uint32_t)(words - 1)) : words;
    mb->sop_labels[b] = m->binary_head ? (int32_t)(w[2] & 1u) : 0;
    const uint64_t pos_purpose = loom_hash_mix(m->purpose, (uint64_t)index);
    int64_t t = 0;
    tok[t] = MOCK_CLS, typ[t] = 0, lab[t] = -1, t++;
    for (int64_t i = 0; i < words; i++) {
        if (m->binary_head && i == a) tok[t] = MOCK_SEP, typ[t] = 0, lab[t] = -1, t++;
        uint32_t r[4];
        loom_rng_u32x4(m->seed, pos_purpose, (uint64_t)t, r);
        const int32_t word =
            (int32_t)(MOCK_FIRST_WORD + r[0] % (uint32_t)(m->vocab - MOCK_FIRST_WORD));
        const int masked = r[1] < (uint32_t)(0.15 * 4294967296.0);
        tok[t] = masked ? MOCK_MASK : word;
        lab[t] = masked ? word : -1;
        typ[t] = m->binary_head && i >= a;
        t++;
    }
    tok[t] = MOCK_SEP, typ[t] = m->binary_head, lab[t] = -1, t++;
    for (int64_t i = 0; i < T; i++) pad[i] = i < len;
    for (; t < T; t++) tok[t] = MOCK_PAD, typ[t] = 0, lab[t] = -1;
    return LOOM_OK;
}

enum loom_status loom_bert_mock_source(struct loom_sample_source *s, int64_t vocab, int64_t T,
                                       uint64_t seed, int split, int binary_head) {
    if (vocab < MOCK_FIRST_WORD + 1 || T < 5)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--mock-data for BERT needs --vocab-size of at least %d (ids 0-3 are "
                         "[PAD], [CLS], [SEP], [MASK]) and --seq-length of at least 5 (got %lld, "
                         "%lld)",
                         MOCK_FIRST_WORD + 1, (long long)vocab, (long long)T);
    struct mock *m = NULL;
    LOOM_CHECK(mock_new(s, vocab, T, seed, "mock-bert-data", split, &m));
    m->binary_head = binary_head;
    s->all_labels = 0;
    s->fill = bert_mock_fill;
    return LOOM_OK;
}
