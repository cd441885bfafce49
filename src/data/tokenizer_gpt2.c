/* GPT-2 byte-level BPE (vocab.json + merges.txt), exact to OpenAI's encoder.
 *
 * 1. Pre-tokenize with the GPT-2 pattern
 *      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *    through PCRE2 (UTF, JIT). \s is spelled out as JavaScript's set (the oracle's): TAB LF VT FF
 *    CR, the Zs space separators, U+2028, U+2029 and U+FEFF. Every character is matched by some
 *    alternative, so the matches tile the text and are taken anchored, one after another.
 * 2. Each piece is a byte string; its initial symbols are the ids of its single bytes (the
 *    vocabulary spells byte b as the character bytes_to_unicode(b)).
 * 3. BPE: repeatedly take the adjacent pair with the lowest merge rank and merge every
 *    occurrence of it, left to right, in one pass; stop when no adjacent pair has a rank. This
 *    runs on a linked list of symbols with a heap of candidate pairs ordered by (rank, position);
 *    pairs created during a pass wait until the pass is over (the reference's order exactly),
 *    and stale heap entries are recognised by their ids. O(n log n) per piece.
 * 4. A per-thread direct-mapped cache maps short pieces to their ids (most pieces repeat).
 *
 * The merge loop, the pair table and the cache are tokenizer_bpe.c's.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"
#include "loom/fileio.h"

#define VOCAB_MAX_BYTES ((size_t)1 << 30)
#define MAX_VOCAB_ID ((int64_t)1 << 24) /* ids are dense; real vocabularies stay far below */

/* JavaScript's \s, as a PCRE2 class body */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}" \
           "\\x{205F}\\x{3000}\\x{FEFF}"
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                                   "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

struct gpt2 {
    int64_t vocab_size;
    int32_t byte_id[256];   /* id of the one-byte token of each byte */
    int64_t *tok_start;     /* bytes of id i: tok_bytes[tok_start[i] .. + tok_len[i]) */
    int32_t *tok_len;       /* -1: no token has this id */
    char *tok_bytes;
    struct loom_bpe_pairs pairs;
    pcre2_code *re;
    bool jit;
    uint32_t serial; /* identifies this tokenizer in the per-thread caches */
};

/* ---- BPE on one piece ----------------------------------------------------------------------- */

/* ids of one piece appended at out (room for n ids); returns the count or 0 on OOM */
static size_t bpe_piece(const struct gpt2 *g, struct loom_piece_cache *cache, const unsigned char *w,
                        size_t n, int32_t *out) {
    if (n == 1) {
        out[0] = g->byte_id[w[0]];
        return 1;
    }
    uint32_t h = 0;
    size_t k = loom_piece_cache_lookup(cache, g->serial, w, n, out, &h);
    if (k) return k;
    for (size_t i = 0; i < n; i++) out[i] = g->byte_id[w[i]];
    k = loom_bpe_merge(&g->pairs, out, n);
    loom_piece_cache_store(cache, g->serial, h, w, n, out, k);
    return k;
}

/* ---- encode / decode ------------------------------------------------------------------------ */

static enum loom_status gpt2_encode(const void *impl, const char *text, size_t len, int32_t **ids,
                                    size_t *n, size_t *cap) {
    const struct gpt2 *g = impl;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(g->re, NULL);
    if (!md) return loom_fail(LOOM_ERR_OOM, "out of memory for a GPT-2 pre-tokenizer match");
    struct loom_piece_cache *cache = loom_piece_cache_get();
    const PCRE2_SPTR subj = (PCRE2_SPTR)text;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    enum loom_status s = LOOM_OK;
    size_t pos = 0;
    while (pos < len) {
        int rc = g->jit ? pcre2_jit_match(g->re, subj, len, pos, 0, md, NULL)
                        : pcre2_match(g->re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0 || ov[0] != pos || ov[1] <= pos) {
            s = loom_fail(LOOM_ERR_INTERNAL,
                          "GPT-2 pre-tokenizer found no piece at byte offset %zu (pcre2 rc %d)", pos, rc);
            break;
        }
        size_t end = ov[1], w = end - pos;
        if (*n + w > *cap && (s = loom_tokenizer_reserve(ids, n, cap, w)) != LOOM_OK) break;
        size_t k = bpe_piece(g, cache, (const unsigned char *)text + pos, w, *ids + *n);
        if (k == 0) {
            s = loom_fail(LOOM_ERR_OOM, "out of memory encoding a %zu-byte piece", w);
            break;
        }
        *n += k;
        pos = end;
    }
    pcre2_match_data_free(md);
    return s;
}

static enum loom_status gpt2_decode(const void *impl, const int32_t *ids, size_t n, char **text,
                                    size_t *len) {
    const struct gpt2 *g = impl;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (g->tok_len[ids[i]] < 0)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "tokenizer decode: id %d at position %zu has no token in the vocabulary",
                             (int)ids[i], i);
        total += (size_t)g->tok_len[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) return loom_fail(LOOM_ERR_OOM, "out of memory decoding %zu ids", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + k, g->tok_bytes + g->tok_start[ids[i]], (size_t)g->tok_len[ids[i]]);
        k += (size_t)g->tok_len[ids[i]];
    }
    out[k] = 0;
    *text = out;
    *len = k;
    return LOOM_OK;
}

static void gpt2_free(void *impl) {
    struct gpt2 *g = impl;
    if (!g) return;
    free(g->tok_start);
    free(g->tok_len);
    free(g->tok_bytes);
    loom_bpe_pairs_free(&g->pairs);
    pcre2_code_free(g->re);
    free(g);
}

static const struct loom_tokenizer_ops GPT2_OPS = {
    .free = gpt2_free,
    .encode = gpt2_encode,
    .decode = gpt2_decode,
};

/* ---- loading -------------------------------------------------------------------------------- */

/* Bytes of a vocabulary key: each character mapped back through the byte alphabet; a key with
 * a character outside it (a special token someone added) is kept as its UTF-8 bytes. Returns
 * the byte count written to out (room for klen bytes). */
static size_t key_bytes(const char *key, size_t klen, const int16_t cp_to_byte[324], char *out) {
    size_t k;
    if (loom_byte_alphabet_decode(cp_to_byte, key, klen, out, &k)) return k;
    memcpy(out, key, klen);
    return klen;
}

static enum loom_status load_vocab(struct gpt2 *g, const char *path, json_t **vocab_out) {
    char *buf;
    size_t len;
    LOOM_CHECK(loom_read_file(path, VOCAB_MAX_BYTES, &buf, &len));
    json_error_t err;
    json_t *v = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
    free(buf);
    if (!v)
        return loom_fail(LOOM_ERR_FORMAT, "%s: not valid JSON (line %d, column %d: %s)", path,
                         err.line, err.column, err.text);
    if (!json_is_object(v) || json_object_size(v) == 0) {
        json_decref(v);
        return loom_fail(LOOM_ERR_FORMAT, "%s: expected a JSON object mapping token -> id", path);
    }
    const char *key;
    size_t klen;
    json_t *val;
    int64_t max_id = -1;
    size_t total = 0;
    json_object_keylen_foreach(v, key, klen, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= MAX_VOCAB_ID) {
            json_decref(v);
            return loom_fail(LOOM_ERR_FORMAT, "%s: token \"%.*s\" has no valid id (want an integer in [0, %lld))",
                             path, (int)(klen > 60 ? 60 : klen), key, (long long)MAX_VOCAB_ID);
        }
        if (json_integer_value(val) > max_id) max_id = json_integer_value(val);
        total += klen;
    }
    g->vocab_size = max_id + 1;
    uint32_t byte_to_cp[256];
    int16_t cp_to_byte[324];
    loom_byte_alphabet(byte_to_cp, cp_to_byte);
    g->tok_start = malloc((size_t)g->vocab_size * sizeof *g->tok_start);
    g->tok_len = malloc((size_t)g->vocab_size * sizeof *g->tok_len);
    g->tok_bytes = malloc(total + 1); /* UTF-8 key lengths bound the byte lengths */
    if (!g->tok_start || !g->tok_len || !g->tok_bytes) {
        json_decref(v);
        return loom_fail(LOOM_ERR_OOM, "%s: out of memory for %lld tokens", path, (long long)g->vocab_size);
    }
    for (int64_t i = 0; i < g->vocab_size; i++) g->tok_len[i] = -1; /* ids without a token */
    size_t off = 0;
    json_object_keylen_foreach(v, key, klen, val) {
        int64_t id = json_integer_value(val);
        if (g->tok_len[id] >= 0) { /* two tokens, one id: decoding it would be ambiguous */
            json_decref(v);
            return loom_fail(LOOM_ERR_FORMAT, "%s: id %lld is given twice (again to token "
                             "\"%.*s\"): a duplicate id", path, (long long)id,
                             (int)(klen > 60 ? 60 : klen), key);
        }
        size_t b = key_bytes(key, klen, cp_to_byte, g->tok_bytes + off);
        g->tok_start[id] = (int64_t)off;
        g->tok_len[id] = (int32_t)b;
        off += b;
    }
    /* one-byte tokens */
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t ul = loom_utf8_put(u, byte_to_cp[b]);
        json_t *idv = json_object_getn(v, u, ul);
        if (!idv) {
            json_decref(v);
            return loom_fail(LOOM_ERR_FORMAT,
                             "%s: no token for byte 0x%02X (\"%.*s\"): not a GPT-2 byte-level vocabulary",
                             path, b, (int)ul, u);
        }
        g->byte_id[b] = (int32_t)json_integer_value(idv);
    }
    *vocab_out = v;
    return LOOM_OK;
}

static enum loom_status load_merges(struct gpt2 *g, const char *path, json_t *vocab,
                                    const char *vocab_path) {
    char *buf;
    size_t len;
    LOOM_CHECK(loom_read_file(path, VOCAB_MAX_BYTES, &buf, &len));
    if (memchr(buf, 0, len)) {
        free(buf);
        return loom_fail(LOOM_ERR_FORMAT, "%s: contains NUL bytes; not a merges text file", path);
    }
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    enum loom_status ps = loom_bpe_pairs_init(&g->pairs, lines);
    if (ps != LOOM_OK) {
        free(buf);
        return ps;
    }

    enum loom_status s = LOOM_OK;
    int32_t rank = 0;
    size_t lineno = 0;
    char *merged = NULL;
    size_t merged_cap = 0;
    for (char *p = buf, *end = buf + len; p < end && s == LOOM_OK;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        lineno++;
        char *line = p;
        p = nl ? nl + 1 : end;
        if (lineno == 1 && le - line >= 8 && memcmp(line, "#version", 8) == 0) continue;
        /* fields separated by spaces or tabs; CR before LF ignored */
        char *f[3];
        size_t fl[3];
        int nf = 0;
        for (char *q = line; q < le;) {
            while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
            if (q >= le) break;
            char *st = q;
            while (q < le && !(*q == ' ' || *q == '\t' || *q == '\r')) q++;
            if (nf < 3) {
                f[nf] = st;
                fl[nf] = (size_t)(q - st);
            }
            nf++;
        }
        if (nf == 0) continue;
        if (nf != 2) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s line %zu: expected two tokens \"a b\", found %d", path,
                          lineno, nf);
            break;
        }
        json_t *a = json_object_getn(vocab, f[0], fl[0]);
        json_t *b = json_object_getn(vocab, f[1], fl[1]);
        if (fl[0] + fl[1] > merged_cap) {
            merged_cap = 2 * (fl[0] + fl[1]) + 16;
            char *m = realloc(merged, merged_cap);
            if (!m) {
                s = loom_fail(LOOM_ERR_OOM, "%s: out of memory", path);
                break;
            }
            merged = m;
        }
        memcpy(merged, f[0], fl[0]);
        memcpy(merged + fl[0], f[1], fl[1]);
        json_t *ab = json_object_getn(vocab, merged, fl[0] + fl[1]);
        if (!a || !b || !ab) {
            const char *which = !a ? f[0] : !b ? f[1] : merged;
            size_t wl = !a ? fl[0] : !b ? fl[1] : fl[0] + fl[1];
            s = loom_fail(LOOM_ERR_FORMAT, "%s line %zu: token \"%.*s\" is not in %s", path, lineno,
                          (int)(wl > 60 ? 60 : wl), which, vocab_path);
            break;
        }
        /* a repeated merge keeps its last rank, as a Python dict built from the list does */
        s = loom_bpe_pairs_put(&g->pairs, (int32_t)json_integer_value(a),
                               (int32_t)json_integer_value(b), rank++,
                               (int32_t)json_integer_value(ab), false);
    }
    free(merged);
    free(buf);
    if (s == LOOM_OK && rank == 0)
        s = loom_fail(LOOM_ERR_FORMAT, "%s: no merges found", path);
    return s;
}

enum loom_status loom_tokenizer_gpt2_load(struct loom_tokenizer *t, const char *vocab_file,
                                          const char *merge_file) {
    struct gpt2 *g = calloc(1, sizeof *g);
    if (!g) return loom_fail(LOOM_ERR_OOM, "out of memory loading %s", vocab_file);
    json_t *vocab = NULL;
    enum loom_status s = load_vocab(g, vocab_file, &vocab);
    if (s == LOOM_OK) s = load_merges(g, merge_file, vocab, vocab_file);
    if (s == LOOM_OK) {
        json_t *e = json_object_get(vocab, "<|endoftext|>");
        t->eod = e ? (int32_t)json_integer_value(e) : -1;
    }
    json_decref(vocab);
    if (s == LOOM_OK) {
        int errc;
        PCRE2_SIZE erroff;
        g->re = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &errc, &erroff, NULL);
        if (!g->re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(errc, msg, sizeof msg);
            s = loom_fail(LOOM_ERR_INTERNAL, "GPT-2 pattern does not compile at %zu: %s",
                          (size_t)erroff, (const char *)msg);
        } else {
            g->jit = pcre2_jit_compile(g->re, PCRE2_JIT_COMPLETE) == 0;
        }
    }
    if (s != LOOM_OK) {
        gpt2_free(g);
        return s;
    }
    g->serial = loom_tokenizer_serial();
    t->ops = &GPT2_OPS;
    t->impl = g;
    t->vocab_size = g->vocab_size;
    return LOOM_OK;
}
