/* Tokenizer front door: picks the implementation from Megatron's type name, validates UTF-8
 * once for every implementation, and holds the helpers they share. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"

static const char *const TYPE_NAMES = "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase";

enum loom_status loom_tokenizer_load(struct loom_tokenizer **out, const char *type,
                                     const char *vocab_file, const char *merge_file) {
    *out = NULL;
    if (!type) return loom_fail(LOOM_ERR_INVALID_ARG, "tokenizer type missing; valid: %s", TYPE_NAMES);
    if (!vocab_file || !*vocab_file)
        return loom_fail(LOOM_ERR_INVALID_ARG, "tokenizer %s needs a vocab file (--vocab-file)", type);
    struct loom_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return loom_fail(LOOM_ERR_OOM, "out of memory loading tokenizer %s", type);
    t->eod = t->cls = t->sep = t->mask = t->pad = t->unk = -1;
    enum loom_status s;
    if (strcmp(type, "GPT2BPETokenizer") == 0) {
        t->type = "GPT2BPETokenizer";
        if (!merge_file || !*merge_file)
            s = loom_fail(LOOM_ERR_INVALID_ARG,
                          "tokenizer GPT2BPETokenizer needs a merges file (--merge-file)");
        else
            s = loom_tokenizer_gpt2_load(t, vocab_file, merge_file);
    } else if (strcmp(type, "BertWordPieceLowerCase") == 0) {
        t->type = "BertWordPieceLowerCase";
        s = loom_tokenizer_wordpiece_load(t, vocab_file, true);
    } else if (strcmp(type, "BertWordPieceCase") == 0) {
        t->type = "BertWordPieceCase";
        s = loom_tokenizer_wordpiece_load(t, vocab_file, false);
    } else {
        s = loom_fail(LOOM_ERR_INVALID_ARG, "unknown tokenizer type '%s'; valid: %s", type,
                      TYPE_NAMES);
    }
    if (s != LOOM_OK) {
        free(t);
        return s;
    }
    *out = t;
    return LOOM_OK;
}

void loom_tokenizer_free(struct loom_tokenizer *t) {
    if (!t) return;
    if (t->ops && t->impl) t->ops->free(t->impl);
    free(t);
}

enum loom_status loom_tokenizer_encode(const struct loom_tokenizer *t, const char *text,
                                       size_t len, int32_t **ids, size_t *n, size_t *cap) {
    if (len == 0) return LOOM_OK;
    if (!text) return loom_fail(LOOM_ERR_INVALID_ARG, "tokenizer encode: NULL text of %zu bytes", len);
    size_t bad = loom_utf8_invalid_offset(text, len);
    if (bad != len)
        return loom_fail(LOOM_ERR_FORMAT,
                         "text is not valid UTF-8: bad byte 0x%02X at byte offset %zu of %zu",
                         (unsigned)(unsigned char)text[bad], bad, len);
    size_t n0 = *n;
    enum loom_status s = t->ops->encode(t->impl, text, len, ids, n, cap);
    if (s != LOOM_OK) *n = n0;
    return s;
}

enum loom_status loom_tokenizer_decode(const struct loom_tokenizer *t, const int32_t *ids,
                                       size_t n, char **text, size_t *len) {
    *text = NULL;
    if (len) *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "tokenizer decode: id %d at position %zu is outside [0, %lld)",
                             (int)ids[i], i, (long long)t->vocab_size);
    size_t l = 0;
    LOOM_CHECK(t->ops->decode(t->impl, ids, n, text, &l));
    if (len) *len = l;
    return LOOM_OK;
}

int64_t loom_tokenizer_vocab_size(const struct loom_tokenizer *t) { return t->vocab_size; }
int32_t loom_tokenizer_eod(const struct loom_tokenizer *t) { return t->eod; }
const char *loom_tokenizer_type(const struct loom_tokenizer *t) { return t->type; }

int32_t loom_tokenizer_special(const struct loom_tokenizer *t, const char *name) {
    if (!name) return -1;
    size_t l = strlen(name);
    if (l >= 2 && name[0] == '[' && name[l - 1] == ']') {
        name++;
        l -= 2;
    }
    static const char *const names[] = {"CLS", "SEP", "MASK", "PAD", "UNK"};
    const int32_t vals[] = {t->cls, t->sep, t->mask, t->pad, t->unk};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (strlen(names[k]) != l) continue;
        size_t i = 0;
        while (i < l && toupper((unsigned char)name[i]) == names[k][i]) i++;
        if (i == l) return vals[k];
    }
    return -1;
}

/* ---- shared helpers ------------------------------------------------------------------------ */

size_t loom_utf8_invalid_offset(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        /* ASCII runs, 8 bytes at a time */
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= len) break;
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;      /* overlong */
            else if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;      /* overlong */
            else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
        } else {
            return i;
        }
        if (i + need >= len) return i; /* truncated */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += need + 1;
    }
    return len;
}

enum loom_status loom_tokenizer_reserve(int32_t **ids, size_t *n, size_t *cap, size_t extra) {
    if (*n + extra <= *cap && *ids) return LOOM_OK;
    size_t want = *n + extra;
    size_t c = *cap ? *cap : 256;
    while (c < want) c *= 2;
    int32_t *p = realloc(*ids, c * sizeof **ids);
    if (!p) return loom_fail(LOOM_ERR_OOM, "out of memory growing a token array to %zu ids", c);
    *ids = p;
    *cap = c;
    return LOOM_OK;
}
