/* Synthetic data for --mock-data: sample i is an arithmetic sequence modulo the vocabulary, with
 * start and stride drawn from the counter-based RNG keyed by (seed, split, i). */
#include <stdlib.h>

#include "loom/rng.h"
#include "loom/train.h"

struct mock {
    int64_t vocab, T;
    uint64_t seed, purpose;
};

static enum loom_status mock_get(void *ctx, int64_t index, int32_t *tokens) {
    struct mock *m = ctx;
    uint32_t w[4];
    loom_rng_u32x4(m->seed, m->purpose, (uint64_t)index, w);
    int64_t start = (int64_t)(w[0] % (uint32_t)m->vocab);
    int64_t stride = 1 + (int64_t)(w[1] % 7u);
    for (int64_t t = 0; t <= m->T; t++) tokens[t] = (int32_t)((start + t * stride) % m->vocab);
    return LOOM_OK;
}

enum loom_status loom_mock_source(struct loom_sample_source *s, int64_t vocab, int64_t T,
                                  uint64_t seed, int split) {
    struct mock *m = malloc(sizeof *m);
    if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory");
    m->vocab = vocab;
    m->T = T;
    m->seed = seed;
    m->purpose = loom_hash_mix(loom_hash_str("mock-data"), (uint64_t)split);
    s->ctx = m;
    s->num_samples = 0;
    s->get = mock_get;
    s->free = free;
    return LOOM_OK;
}
