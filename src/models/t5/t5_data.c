/* T5's synthetic samples (--mock-data): a copy task an encoder-decoder can learn. Sample i, from
 * the counter-based RNG keyed by (seed, split, i): an encoder input of random words (ids from 3
 * up) of a random length in [Te/2, Te], padded; decoder targets = the input's first words and
 * EOS, of a random length in [D/2, D] (D = min(Td, the input's length + 1)), the decoder input
 * = BOS then the targets but the last; padding id 0 (no loss there). The row's layout is
 * loom/t5.h's: the encoder's positions, then the decoder's. */
#include <stdlib.h>
#include <string.h>

#include "loom/rng.h"
#include "loom/train.h"
#include "models/t5/t5_settings.h"

enum { T5_MOCK_PAD = 0, T5_MOCK_BOS = 1, T5_MOCK_EOS = 2, T5_MOCK_FIRST_WORD = 3 };

struct t5_mock {
    int64_t vocab, Te, Td;
    uint64_t seed, purpose;
};

static void t5_mock_free(void *ctx) { free(ctx); }

static enum loom_status t5_mock_fill(void *ctx, int64_t index, struct loom_micro *mb, int64_t b) {
    const struct t5_mock *m = ctx;
    const int64_t Te = m->Te, Td = m->Td, T = mb->T;
    int32_t *tok = mb->tokens + b * T, *lab = mb->labels + b * T;
    int32_t *pm = mb->padding_mask + b * T, *tt = mb->token_types + b * T;
    uint32_t w[4];
    loom_rng_u32x4(m->seed, m->purpose, (uint64_t)index, w);
    const int64_t ne = Te - (int64_t)(w[0] % (uint32_t)(Te / 2 + 1));
    const int64_t dmax = Td < ne + 1 ? Td : ne + 1;
    const int64_t nd = dmax - (int64_t)(w[1] % (uint32_t)(dmax / 2 + 1));
    const uint64_t words = loom_hash_mix(m->purpose, (uint64_t)index);
    for (int64_t t = 0; t < T; t++) {
        tok[t] = T5_MOCK_PAD;
        lab[t] = -1;
        pm[t] = 0;
        tt[t] = t >= Te;
    }
    for (int64_t t = 0; t < ne; t++) {
        uint32_t r[4];
        loom_rng_u32x4(m->seed, words, (uint64_t)t, r);
        tok[t] = (int32_t)(T5_MOCK_FIRST_WORD +
                           (int64_t)(r[0] % (uint32_t)(m->vocab - T5_MOCK_FIRST_WORD)));
        pm[t] = 1;
    }
    for (int64_t t = 0; t < nd; t++) {
        lab[Te + t] = t + 1 < nd ? tok[t] : T5_MOCK_EOS;
        tok[Te + t] = t == 0 ? T5_MOCK_BOS : lab[Te + t - 1];
        pm[Te + t] = 1;
    }
    mb->sop_labels[b] = 0;
    return LOOM_OK;
}

enum loom_status loom_t5_mock_source_of(struct loom_sample_source *src,
                                        const struct loom_train_config *c, int split) {
    if (c->model.vocab_size < T5_MOCK_FIRST_WORD + 1)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--mock-data for T5 needs --vocab-size of at least %d (ids 0-2 are "
                         "padding, BOS and EOS)",
                         T5_MOCK_FIRST_WORD + 1);
    struct t5_mock *m = calloc(1, sizeof *m);
    if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory");
    m->vocab = c->model.vocab_size;
    m->Te = c->model.t5.enc_seq;
    m->Td = c->model.t5.dec_seq;
    m->seed = c->seed;
    m->purpose = loom_hash_mix(loom_hash_str("t5-mock-data"), (uint64_t)split);
    src->ctx = m;
    src->num_samples = 0;
    src->all_labels = 0;
    src->free = t5_mock_free;
    src->fill = t5_mock_fill;
    return LOOM_OK;
}
