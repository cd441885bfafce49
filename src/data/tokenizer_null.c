/* NullTokenizer (Megatron-LM's): the text is token ids written as decimal numbers separated by
 * spaces; --vocab-size N ids 0..N-1 and the end-of-document id N. Decoding writes the ids back
 * the same way. Anything else in the text (a word, a number outside [0, N], two spaces) is an
 * error naming its byte offset (Megatron-LM's int() would raise there too). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"

struct null_tok {
    int64_t n;
};

static enum loom_status null_encode(const void *impl, const char *text, size_t len, int32_t **ids,
                                    size_t *n, size_t *cap) {
    const struct null_tok *z = impl;
    size_t i = 0;
    if (len == 0) return LOOM_OK;
    for (;;) {
        size_t st = i;
        int64_t v = 0;
        while (i < len && text[i] >= '0' && text[i] <= '9' && v <= z->n) v = v * 10 + (text[i++] - '0');
        if (i == st || v > z->n || (i < len && text[i] != ' '))
            return loom_fail(LOOM_ERR_FORMAT, "NullTokenizer: text at byte %zu is not an id in "
                             "[0, %lld] followed by a single space or the end", st, (long long)z->n);
        LOOM_CHECK(loom_tokenizer_reserve(ids, n, cap, 1));
        (*ids)[(*n)++] = (int32_t)v;
        if (i == len) return LOOM_OK;
        i++; /* the space */
    }
}

static enum loom_status null_decode(const void *impl, const int32_t *ids, size_t n, char **text,
                                    size_t *len) {
    (void)impl;
    char *out = malloc(n * 12 + 1);
    if (!out) return loom_fail(LOOM_ERR_OOM, "out of memory decoding %zu ids", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(out + k, i ? " %d" : "%d", (int)ids[i]);
    out[k] = 0;
    *text = out;
    *len = k;
    return LOOM_OK;
}

static void null_free(void *impl) { free(impl); }

static const struct loom_tokenizer_ops NULL_OPS = {
    .free = null_free,
    .encode = null_encode,
    .decode = null_decode,
};

enum loom_status loom_tokenizer_null_load(struct loom_tokenizer *t, int64_t vocab_size) {
    struct null_tok *z = malloc(sizeof *z);
    if (!z) return loom_fail(LOOM_ERR_OOM, "out of memory");
    z->n = vocab_size;
    t->ops = &NULL_OPS;
    t->impl = z;
    t->vocab_size = vocab_size + 1;
    t->eod = (int32_t)vocab_size;
    return LOOM_OK;
}
