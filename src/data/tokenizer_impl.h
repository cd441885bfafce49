/* Shared internals of the tokenizers (tokenizer.c dispatches to tokenizer_gpt2.c,
 * tokenizer_wordpiece.c, tokenizer_hf.c, tokenizer_tiktoken.c, tokenizer_spm.c and
 * tokenizer_null.c; tokenizer_bpe.c holds what the BPE ones share). Not a public header. */
#ifndef LOOM_TOKENIZER_IMPL_H
#define LOOM_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"
#include "loom/tokenizer.h"

struct loom_tokenizer_ops {
    void (*free)(void *impl);
    enum loom_status (*encode)(const void *impl, const char *text, size_t len, int32_t **ids,
                               size_t *n, size_t *cap);
    enum loom_status (*decode)(const void *impl, const int32_t *ids, size_t n, char **text,
                               size_t *len);
};

struct loom_tokenizer {
    const struct loom_tokenizer_ops *ops;
    void *impl;
    const char *type; /* static string: the Megatron name */
    int64_t vocab_size;
    int32_t eod;
    int32_t cls, sep, mask, pad, unk; /* -1 where not applicable */
    int32_t bos;                      /* the id encode puts first, or -1 */
};

/* Fill t (ops, impl, vocab_size, eod, specials) from the files. */
enum loom_status loom_tokenizer_gpt2_load(struct loom_tokenizer *t, const char *vocab_file,
                                          const char *merge_file);
enum loom_status loom_tokenizer_wordpiece_load(struct loom_tokenizer *t, const char *vocab_file,
                                               bool lower_case);
enum loom_status loom_tokenizer_hf_load(struct loom_tokenizer *t, const char *path);
enum loom_status loom_tokenizer_tiktoken_load(struct loom_tokenizer *t,
                                              const struct loom_tokenizer_spec *spec);
enum loom_status loom_tokenizer_spm_load(struct loom_tokenizer *t, const char *model_file,
                                         enum loom_spm_flavor flavor);
enum loom_status loom_tokenizer_null_load(struct loom_tokenizer *t, int64_t vocab_size);

/* ---- tokenizer_bpe.c ------------------------------------------------------------------------ */

/* (left, right) -> (priority, merged id); the lowest priority merges first */
struct loom_bpe_slot {
    uint64_t key;
    int32_t prio;
    int32_t merged;
};
struct loom_bpe_pairs {
    struct loom_bpe_slot *slot;
    size_t mask, count;
};
enum loom_status loom_bpe_pairs_init(struct loom_bpe_pairs *p, size_t expected);
void loom_bpe_pairs_free(struct loom_bpe_pairs *p);
/* keep_first: a pair given again keeps its first entry (else the last one wins) */
enum loom_status loom_bpe_pairs_put(struct loom_bpe_pairs *p, int32_t a, int32_t b, int32_t prio,
                                    int32_t merged, bool keep_first);
const struct loom_bpe_slot *loom_bpe_pairs_find(const struct loom_bpe_pairs *p, int32_t a, int32_t b);
/* Symbols that take part in no pair (never in the table): a merged-away one, an unknown one. */
#define LOOM_BPE_GONE INT32_MIN
#define LOOM_BPE_UNKNOWN (-2)
/* Merge the symbols id[0..n) in place; returns the new count (0 only when out of memory). */
size_t loom_bpe_merge(const struct loom_bpe_pairs *p, int32_t *id, size_t n);

/* Token bytes by id, and a byte-string -> id hash of the ids added with hashed = true. */
struct loom_vocab {
    int32_t *slot; /* hash: id or -1 */
    size_t mask, count;
    int64_t n_ids;  /* ids 0..n_ids-1 have room; len -1: no token */
    int64_t *start; /* bytes of id i: bytes[start[i] .. + len[i]) */
    int32_t *len;
    char *bytes;
    size_t nbytes, cap_bytes;
};
enum loom_status loom_vocab_init(struct loom_vocab *v, size_t expected);
void loom_vocab_free(struct loom_vocab *v);
enum loom_status loom_vocab_reserve_ids(struct loom_vocab *v, int64_t n);
/* An id given twice is LOOM_ERR_FORMAT (the caller names the file). */
enum loom_status loom_vocab_add(struct loom_vocab *v, int32_t id, const void *s, size_t n, bool hashed);
int32_t loom_vocab_find(const struct loom_vocab *v, const void *s, size_t n); /* -1: absent */
uint32_t loom_bytes_hash(const void *data, size_t n);

/* Per-thread cache of short pieces' ids (keyed by the tokenizer's serial). */
struct loom_piece_cache;
uint32_t loom_tokenizer_serial(void);
struct loom_piece_cache *loom_piece_cache_get(void); /* NULL when a thread cannot have one */
/* returns the cached count (0: miss; *hash then feeds the store) */
size_t loom_piece_cache_lookup(struct loom_piece_cache *c, uint32_t serial, const void *w, size_t n,
                               int32_t *out, uint32_t *hash);
void loom_piece_cache_store(struct loom_piece_cache *c, uint32_t serial, uint32_t hash,
                            const void *w, size_t n, const int32_t *ids, size_t k);

/* Pre-tokenizer regex. ws: the class body that \s stands for (NULL: the pattern as written).
 * run: the matches and the unmatched gaps between them, in order, each handed to fn (HF's
 * "Isolated" split). */
struct loom_splitter {
    void *re; /* pcre2_code */
    bool jit;
};
typedef enum loom_status (*loom_piece_fn)(void *ctx, const char *piece, size_t n);
enum loom_status loom_splitter_init(struct loom_splitter *s, const char *pattern, const char *ws,
                                    const char *what);
void loom_splitter_free(struct loom_splitter *s);
enum loom_status loom_splitter_run(const struct loom_splitter *s, const char *text, size_t len,
                                   loom_piece_fn fn, void *ctx);
/* Unicode White_Space (the \s of the regex engines behind tokenizer.json and tiktoken), and
 * JavaScript's \s (GPT-2's oracle), as PCRE2 class bodies */
#define LOOM_WS_UNICODE "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                        "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Literal tokens found in the text before any other processing (added tokens, special tokens). */
struct loom_special {
    char *s;
    size_t n;
    int32_t id;
};
struct loom_specials {
    struct loom_special *v;
    size_t n, cap;
    unsigned char first[256]; /* first bytes that start some token */
};
enum loom_status loom_specials_add(struct loom_specials *sp, const char *s, size_t n, int32_t id);
void loom_specials_free(struct loom_specials *sp);
/* The first occurrence at or after `from`: the longest token there (longest) or the first one
 * in the list (!longest). */
bool loom_specials_next(const struct loom_specials *sp, const char *text, size_t len, size_t from,
                        bool longest, size_t *at, size_t *which);

/* GPT-2's byte alphabet (bytes_to_unicode): printable Latin-1 bytes map to themselves, the
 * other 68 bytes to U+0100.. in increasing byte order; cp_to_byte is -1 elsewhere. */
void loom_byte_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[324]);
/* A byte-alphabet token string as bytes (out has room for n bytes); false when a character is
 * outside the alphabet. */
bool loom_byte_alphabet_decode(const int16_t cp_to_byte[324], const char *s, size_t n, char *out,
                               size_t *outn);

/* NFC of text[0..len) (valid UTF-8) into a malloc'd buffer; *out = NULL when text is NFC
 * already by the quick check (no character at or above U+0300). */
enum loom_status loom_utf8_nfc(const char *text, size_t len, char **out, size_t *outn);

/* Offset of the first byte of s[0..len) that is not part of a valid UTF-8 sequence (overlong
 * forms, surrogates and code points above U+10FFFF are invalid); len when all of it is valid. */
size_t loom_utf8_invalid_offset(const char *s, size_t len);

/* Make room for `extra` more ids in the growable array (*ids, *n, *cap). */
enum loom_status loom_tokenizer_reserve(int32_t **ids, size_t *n, size_t *cap, size_t extra);

/* Unicode tables of the WordPiece tokenizer (tokenizer_unicode.c, generated by
 * scripts/gen_tokenizer_unicode.py from Python's unicodedata; the script says what they hold). */
struct loom_tok_case_run {
    uint32_t first, last;
    int32_t delta;
    uint32_t stride;
};
struct loom_tok_ccc {
    uint32_t cp;
    uint8_t ccc;
};
extern const uint32_t loom_tok_class_ranges[];
extern const size_t loom_tok_class_ranges_count;
extern const struct loom_tok_case_run loom_tok_lower_runs[];
extern const size_t loom_tok_lower_runs_count;
extern const uint32_t loom_tok_casing_ranges[];
extern const size_t loom_tok_casing_ranges_count;
extern const uint32_t loom_tok_nfd_keys[];
extern const size_t loom_tok_nfd_keys_count;
extern const uint32_t loom_tok_nfd_pool[];
extern const size_t loom_tok_nfd_pool_count;
extern const struct loom_tok_ccc loom_tok_ccc_marks[];
extern const size_t loom_tok_ccc_marks_count;
/* NFC tables (tokenizer_nfc_tables.c, generated by scripts/gen_tokenizer_nfc.py) */
struct loom_nfc_pair {
    uint32_t first, second, composite;
};
extern const struct loom_tok_ccc loom_nfc_ccc[];
extern const size_t loom_nfc_ccc_count;
extern const struct loom_nfc_pair loom_nfc_comp[];
extern const size_t loom_nfc_comp_count;

/* Decode one code point from a valid UTF-8 string at s[*i] and advance *i. */
static inline uint32_t loom_utf8_next(const unsigned char *s, size_t *i) {
    uint32_t c = s[*i];
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if (c < 0xE0) {
        c = ((c & 0x1F) << 6) | (s[*i + 1] & 0x3F);
        *i += 2;
        return c;
    }
    if (c < 0xF0) {
        c = ((c & 0x0F) << 12) | ((uint32_t)(s[*i + 1] & 0x3F) << 6) | (s[*i + 2] & 0x3F);
        *i += 3;
        return c;
    }
    c = ((c & 0x07) << 18) | ((uint32_t)(s[*i + 1] & 0x3F) << 12) |
        ((uint32_t)(s[*i + 2] & 0x3F) << 6) | (s[*i + 3] & 0x3F);
    *i += 4;
    return c;
}

/* Write code point c as UTF-8 to out (room for 4 bytes); returns the number of bytes. */
static inline size_t loom_utf8_put(char *out, uint32_t c) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

#endif
