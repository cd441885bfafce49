/* Tokenizer front door: picks the implementation from Megatron's type name, validates UTF-8
 * once for every implementation, and holds the helpers they share. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"

const char *const LOOM_TOKENIZER_TYPES =
    "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, HuggingFaceTokenizer, "
    "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer, TikTokenizer, "
    "NullTokenizer";

static const char *const SPM_NAMES[] = {"SentencePieceTokenizer", "GPTSentencePieceTokenizer",
                                        "Llama2Tokenizer"};
static const enum loom_spm_flavor SPM_FLAVORS[] = {LOOM_SPM_MEGATRON, LOOM_SPM_GPT, LOOM_SPM_LLAMA2};

static enum loom_status need(const char *value, const char *type, const char *flag, const char *what) {
    if (value && *value) return LOOM_OK;
    return loom_fail(LOOM_ERR_INVALID_ARG, "--tokenizer-type %s needs %s %s", type, flag, what);
}

static enum loom_status dispatch(struct loom_tokenizer *t, const struct loom_tokenizer_spec *sp) {
    const char *type = sp->type;
    if (strcmp(type, "GPT2BPETokenizer") == 0) {
        t->type = "GPT2BPETokenizer";
        LOOM_CHECK(need(sp->vocab_file, type, "--vocab-file", "(vocab.json)"));
        LOOM_CHECK(need(sp->merge_file, type, "--merge-file", "(merges.txt)"));
        return loom_tokenizer_gpt2_load(t, sp->vocab_file, sp->merge_file);
    }
    if (strncmp(type, "BertWordPiece", 13) == 0 &&
        (strcmp(type + 13, "LowerCase") == 0 || strcmp(type + 13, "Case") == 0)) {
        bool lower = strcmp(type + 13, "LowerCase") == 0;
        t->type = lower ? "BertWordPieceLowerCase" : "BertWordPieceCase";
        LOOM_CHECK(need(sp->vocab_file, type, "--vocab-file", "(vocab.txt)"));
        return loom_tokenizer_wordpiece_load(t, sp->vocab_file, lower);
    }
    if (strcmp(type, "HuggingFaceTokenizer") == 0) {
        t->type = "HuggingFaceTokenizer";
        LOOM_CHECK(need(sp->tokenizer_model, type, "--tokenizer-model",
                        "(a tokenizer.json, or a folder that holds one)"));
        return loom_tokenizer_hf_load(t, sp->tokenizer_model);
    }
    for (size_t k = 0; k < sizeof SPM_NAMES / sizeof SPM_NAMES[0]; k++)
        if (strcmp(type, SPM_NAMES[k]) == 0) {
            t->type = SPM_NAMES[k];
            LOOM_CHECK(need(sp->tokenizer_model, type, "--tokenizer-model",
                            "(a SentencePiece tokenizer.model)"));
            return loom_tokenizer_spm_load(t, sp->tokenizer_model, SPM_FLAVORS[k]);
        }
    if (strcmp(type, "TikTokenizer") == 0) {
        t->type = "TikTokenizer";
        LOOM_CHECK(need(sp->tokenizer_model, type, "--tokenizer-model",
                        "(a tiktoken rank file: .tiktoken lines or Megatron's JSON list)"));
        return loom_tokenizer_tiktoken_load(t, sp);
    }
    if (strcmp(type, "NullTokenizer") == 0) {
        t->type = "NullTokenizer";
        if (sp->vocab_size <= 0 || sp->vocab_size >= INT32_MAX)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--tokenizer-type NullTokenizer needs "
                             "--vocab-size N (the ids before the end-of-document one), 0 < N < "
                             "2^31-1; got %lld", (long long)sp->vocab_size);
        return loom_tokenizer_null_load(t, sp->vocab_size);
    }
    return loom_fail(LOOM_ERR_INVALID_ARG, "--tokenizer-type: unknown '%s'; valid: %s", type,
                     LOOM_TOKENIZER_TYPES);
}

enum loom_status loom_tokenizer_open(struct loom_tokenizer **out, const struct loom_tokenizer_spec *spec) {
    *out = NULL;
    if (!spec->type || !*spec->type)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--tokenizer-type: missing; valid: %s",
                         LOOM_TOKENIZER_TYPES);
    struct loom_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return loom_fail(LOOM_ERR_OOM, "out of memory loading tokenizer %s", spec->type);
    t->eod = t->cls = t->sep = t->mask = t->pad = t->unk = t->bos = -1;
    enum loom_status s = dispatch(t, spec);
    if (s != LOOM_OK) {
        free(t);
        return s;
    }
    *out = t;
    return LOOM_OK;
}

enum loom_status loom_tokenizer_load(struct loom_tokenizer **out, const char *type,
                                     const char *vocab_file, const char *merge_file) {
    struct loom_tokenizer_spec sp = {.type = type, .vocab_file = vocab_file,
                                     .merge_file = merge_file, .tiktoken_num_special_tokens = -1};
    return loom_tokenizer_open(out, &sp);
}

void loom_tokenizer_free(struct loom_tokenizer *t) {
    if (!t) return;
    if (t->ops && t->impl) t->ops->free(t->impl);
    free(t);
}

enum loom_status loom_tokenizer_encode(const struct loom_tokenizer *t, const char *text,
                                       size_t len, int32_t **ids, size_t *n, size_t *cap) {
    if (len == 0) text = ""; /* some tokenizers still add ids (a beginning-of-sequence token) */
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
    static const char *const names[] = {"CLS", "SEP", "MASK", "PAD", "UNK", "BOS"};
    const int32_t vals[] = {t->cls, t->sep, t->mask, t->pad, t->unk, t->bos};
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
