/* The trainer's view of a BERT dataset split (loom/bert_dataset.h): sample index -> a micro-batch
 * row with every field, ids checked against the model's vocabulary. */
#include <stdlib.h>
#include <string.h>

#include "loom/bert_dataset.h"
#include "loom/train.h"

struct bert_source {
    struct loom_bert_dataset *ds;
    struct loom_bert_sample sample;
    int64_t T, vocab, len;
    const char *path;
};

static enum loom_status bert_fill(void *ctx, int64_t index, struct loom_micro *mb, int64_t b) {
    struct bert_source *g = ctx;
    const int64_t T = g->T;
    LOOM_CHECK(loom_bert_dataset_get(g->ds, index % g->len, &g->sample));
    const struct loom_bert_sample *x = &g->sample;
    for (int64_t t = 0; t < T; t++) {
        const int32_t id = x->tokens[t], label = x->loss_mask[t] ? x->labels[t] : -1;
        if (id < 0 || id >= g->vocab || label >= g->vocab)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "--data-path %s: token id %d is outside the vocabulary [0, %lld) "
                             "(check --vocab-size / --vocab-file)",
                             g->path, id < 0 || id >= g->vocab ? id : label, (long long)g->vocab);
        mb->tokens[b * T + t] = id;
        mb->labels[b * T + t] = label;
    }
    memcpy(mb->token_types + b * T, x->token_types, (size_t)T * sizeof(int32_t));
    memcpy(mb->padding_mask + b * T, x->padding_mask, (size_t)T * sizeof(int32_t));
    mb->sop_labels[b] = x->is_random;
    return LOOM_OK;
}

static void bert_free(void *ctx) {
    struct bert_source *g = ctx;
    loom_bert_sample_free(&g->sample);
    loom_bert_dataset_free(g->ds);
    free(g);
}

enum loom_status loom_bert_data_source(struct loom_sample_source *s,
                                       const struct loom_bert_dataset_config *dc, int64_t vocab) {
    struct bert_source *g = calloc(1, sizeof *g);
    if (!g) return loom_fail(LOOM_ERR_OOM, "out of memory");
    enum loom_status st = loom_bert_dataset_open(&g->ds, dc);
    if (st == LOOM_OK) st = loom_bert_sample_alloc(&g->sample, dc->seq_length);
    if (st != LOOM_OK) {
        if (g->ds) loom_bert_dataset_free(g->ds);
        free(g);
        return st;
    }
    g->T = dc->seq_length;
    g->vocab = vocab;
    g->path = dc->data_path;
    g->len = loom_bert_dataset_len(g->ds);
    s->ctx = g;
    s->num_samples = g->len;
    s->all_labels = 0;
    s->fill = bert_fill;
    s->free = bert_free;
    return LOOM_OK;
}
