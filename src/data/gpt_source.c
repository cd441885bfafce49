/* The trainer's view of a GPT dataset split: sample index -> T+1 tokens, checked against the
 * model's vocabulary -> a micro-batch row (the first T tokens and the next-token labels). */
#include <stdlib.h>
#include <string.h>

#include "loom/data.h"
#include "loom/train.h"

struct gpt_source {
    struct loom_gpt_dataset *ds;
    int64_t T, vocab, len;
    const char *path;
    int32_t *tokens; /* [T+1] */
};

static enum loom_status gpt_fill(void *ctx, int64_t index, struct loom_micro *mb, int64_t b) {
    struct gpt_source *g = ctx;
    int32_t *tokens = g->tokens;
    if (g->len == 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path %s: the split has no samples", g->path);
    LOOM_CHECK(loom_gpt_dataset_get(g->ds, index % g->len, tokens));
    for (int64_t t = 0; t <= g->T; t++)
        if (tokens[t] < 0 || tokens[t] >= g->vocab)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path %s: token id %d is outside the "
                             "vocabulary [0, %lld) (check --vocab-size / --vocab-file)",
                             g->path, tokens[t], (long long)g->vocab);
    loom_micro_row_next_tokens(mb, b, tokens);
    return LOOM_OK;
}

static void gpt_free(void *ctx) {
    struct gpt_source *g = ctx;
    loom_gpt_dataset_free(g->ds);
    free(g->tokens);
    free(g);
}

enum loom_status loom_gpt_data_source(struct loom_sample_source *s,
                                      const struct loom_gpt_dataset_config *dc, int64_t vocab) {
    const int64_t T = dc->seq_length;
    struct gpt_source *g = calloc(1, sizeof *g);
    if (g) g->tokens = malloc((size_t)(T + 1) * sizeof(int32_t));
    if (!g || !g->tokens) {
        free(g);
        return loom_fail(LOOM_ERR_OOM, "out of memory");
    }
    enum loom_status st = loom_gpt_dataset_open(&g->ds, dc);
    if (st != LOOM_OK) {
        free(g->tokens);
        free(g);
        return st;
    }
    g->T = T;
    g->vocab = vocab;
    g->path = dc->data_path;
    g->len = loom_gpt_dataset_len(g->ds);
    s->ctx = g;
    s->num_samples = g->len;
    s->all_labels = 1;
    s->fill = gpt_fill;
    s->free = gpt_free;
    return LOOM_OK;
}
