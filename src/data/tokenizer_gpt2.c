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
 * Pairs live in an open-addressing hash table keyed by (left id, right id) -> (rank, merged id).
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdatomic.h>
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

struct pair_slot {
    uint64_t key; /* (left << 32) | right; PAIR_EMPTY when free */
    int32_t rank;
    int32_t merged;
};
#define PAIR_EMPTY UINT64_MAX

struct gpt2 {
    int64_t vocab_size;
    int32_t byte_id[256];   /* id of the one-byte token of each byte */
    int64_t *tok_start;     /* bytes of id i: tok_bytes[tok_start[i] .. + tok_len[i]) */
    int32_t *tok_len;       /* -1: no token has this id */
    char *tok_bytes;
    struct pair_slot *pairs;
    size_t pair_mask;
    pcre2_code *re;
    bool jit;
    uint32_t serial; /* identifies this tokenizer in the per-thread caches */
};

/* ---- bytes <-> unicode ---------------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in increasing byte order. */
static void byte_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[324]) {
    for (int c = 0; c < 324; c++) cp_to_byte[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + extra++);
        byte_to_cp[b] = cp;
        cp_to_byte[cp] = (int16_t)b;
    }
}

/* ---- pair table ----------------------------------------------------------------------------- */

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static inline size_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static inline const struct pair_slot *pair_find(const struct gpt2 *g, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    size_t i = pair_hash(k) & g->pair_mask;
    for (;;) {
        const struct pair_slot *s = &g->pairs[i];
        if (s->key == k) return s;
        if (s->key == PAIR_EMPTY) return NULL;
        i = (i + 1) & g->pair_mask;
    }
}

static void pair_put(struct gpt2 *g, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t k = pair_key(a, b);
    size_t i = pair_hash(k) & g->pair_mask;
    while (g->pairs[i].key != PAIR_EMPTY && g->pairs[i].key != k) i = (i + 1) & g->pair_mask;
    /* a repeated merge keeps its last rank, as a Python dict built from the list does */
    g->pairs[i] = (struct pair_slot){k, rank, merged};
}

/* ---- per-thread piece cache ----------------------------------------------------------------- */

#define CACHE_SLOTS 65536 /* power of two */
#define CACHE_KEY_MAX 22
#define CACHE_IDS_MAX 7

struct cache_slot {
    uint32_t serial; /* 0: empty */
    uint32_t hash;
    uint8_t klen, nids;
    char key[CACHE_KEY_MAX];
    int32_t ids[CACHE_IDS_MAX];
};

struct piece_cache {
    struct cache_slot slot[CACHE_SLOTS];
};

static atomic_uint g_serial;
static pthread_once_t g_cache_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_cache_key;
static bool g_cache_key_ok;
static _Thread_local struct piece_cache *tl_cache;
static _Thread_local bool tl_cache_failed;

static void cache_destroy(void *p) { free(p); }
static void cache_key_init(void) { g_cache_key_ok = pthread_key_create(&g_cache_key, cache_destroy) == 0; }

/* This thread's cache, NULL when it cannot have one (then every piece runs BPE). */
static struct piece_cache *thread_cache(void) {
    if (tl_cache || tl_cache_failed) return tl_cache;
    pthread_once(&g_cache_key_once, cache_key_init);
    struct piece_cache *c = g_cache_key_ok ? calloc(1, sizeof *c) : NULL;
    if (c && pthread_setspecific(g_cache_key, c) != 0) {
        free(c);
        c = NULL;
    }
    if (!c) tl_cache_failed = true;
    tl_cache = c;
    return c;
}

static inline uint32_t piece_hash(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, p, n);
    h ^= v;
    h ^= h >> 33; /* final avalanche: every input bit reaches the low (index) bits */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return (uint32_t)h;
}

/* ---- BPE on one piece ----------------------------------------------------------------------- */

struct cand {
    int32_t rank, pos, left, right;
};

static inline bool cand_less(const struct cand *a, const struct cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct cand *h, size_t *n, struct cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n) {
    struct cand top = h[0];
    struct cand last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m) break;
        size_t c = (l + 1 < m && cand_less(&h[l + 1], &h[l])) ? l + 1 : l;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

struct bpe_work {
    int32_t *id, *prev, *next;
    struct cand *heap, *pending;
};

#define SMALL_PIECE 128

/* Merge the piece w[0..n) (n >= 2) into ids written to out; returns the count. w_* hold n
 * symbols and 3n candidates each. */
static size_t bpe_run(const struct gpt2 *g, const unsigned char *w, size_t n, struct bpe_work *wk,
                      int32_t *out) {
    int32_t *id = wk->id, *prev = wk->prev, *next = wk->next;
    struct cand *heap = wk->heap, *pend = wk->pending;
    size_t nh = 0, np = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = g->byte_id[w[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const struct pair_slot *s = pair_find(g, id[i], id[i + 1]);
        if (s) heap_push(heap, &nh, (struct cand){s->rank, (int32_t)i, id[i], id[i + 1]});
    }
    int32_t pass_rank = -1;
    for (;;) {
        if (nh == 0 || heap[0].rank != pass_rank) {
            /* the pass of pass_rank is over: its new pairs become candidates */
            if (np) {
                for (size_t k = 0; k < np; k++) heap_push(heap, &nh, pend[k]);
                np = 0;
                continue;
            }
            if (nh == 0) break;
            pass_rank = heap[0].rank;
        }
        struct cand c = heap_pop(heap, &nh);
        int32_t p = c.pos, q = next[p];
        /* stale: p was absorbed (id -1), changed, or its right neighbour changed */
        if (id[p] != c.left || q < 0 || id[q] != c.right) continue;
        const struct pair_slot *s = pair_find(g, c.left, c.right);
        id[p] = s->merged;
        id[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) {
            int32_t a = prev[p];
            const struct pair_slot *t = pair_find(g, id[a], id[p]);
            if (t) pend[np++] = (struct cand){t->rank, a, id[a], id[p]};
        }
        if (next[p] >= 0) {
            int32_t b = next[p];
            const struct pair_slot *t = pair_find(g, id[p], id[b]);
            if (t) pend[np++] = (struct cand){t->rank, p, id[p], id[b]};
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) out[k++] = id[i];
    return k;
}

/* ids of one piece appended at out (room for n ids); returns the count or 0 on OOM */
static size_t bpe_piece(const struct gpt2 *g, struct piece_cache *cache, const unsigned char *w,
                        size_t n, int32_t *out) {
    if (n == 1) {
        out[0] = g->byte_id[w[0]];
        return 1;
    }
    struct cache_slot *slot = NULL;
    uint32_t h = 0;
    if (cache && n <= CACHE_KEY_MAX) {
        h = piece_hash(w, n);
        slot = &cache->slot[h & (CACHE_SLOTS - 1)];
        if (slot->serial == g->serial && slot->hash == h && slot->klen == n &&
            memcmp(slot->key, w, n) == 0) {
            memcpy(out, slot->ids, slot->nids * sizeof *out);
            return slot->nids;
        }
    }
    size_t k;
    if (n <= SMALL_PIECE) {
        int32_t id[SMALL_PIECE], prev[SMALL_PIECE], next[SMALL_PIECE];
        struct cand heap[3 * SMALL_PIECE], pend[2 * SMALL_PIECE];
        struct bpe_work wk = {id, prev, next, heap, pend};
        k = bpe_run(g, w, n, &wk, out);
    } else {
        struct bpe_work wk;
        wk.id = malloc(3 * n * sizeof(int32_t));
        wk.heap = malloc(5 * n * sizeof(struct cand));
        if (!wk.id || !wk.heap) {
            free(wk.id);
            free(wk.heap);
            return 0;
        }
        wk.prev = wk.id + n;
        wk.next = wk.id + 2 * n;
        wk.pending = wk.heap + 3 * n;
        k = bpe_run(g, w, n, &wk, out);
        free(wk.id);
        free(wk.heap);
    }
    if (slot && k <= CACHE_IDS_MAX) {
        slot->serial = g->serial;
        slot->hash = h;
        slot->klen = (uint8_t)n;
        slot->nids = (uint8_t)k;
        memcpy(slot->key, w, n);
        memcpy(slot->ids, out, k * sizeof *out);
    }
    return k;
}

/* ---- encode / decode ------------------------------------------------------------------------ */

static enum loom_status gpt2_encode(const void *impl, const char *text, size_t len, int32_t **ids,
                                    size_t *n, size_t *cap) {
    const struct gpt2 *g = impl;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(g->re, NULL);
    if (!md) return loom_fail(LOOM_ERR_OOM, "out of memory for a GPT-2 pre-tokenizer match");
    struct piece_cache *cache = thread_cache();
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
    free(g->pairs);
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
 * the byte count written to out (room for strlen(key) bytes). */
static size_t key_bytes(const char *key, size_t klen, const int16_t cp_to_byte[324], char *out) {
    size_t i = 0, k = 0;
    while (i < klen) {
        uint32_t c = loom_utf8_next((const unsigned char *)key, &i);
        if (c >= 324 || cp_to_byte[c] < 0) {
            memcpy(out, key, klen);
            return klen;
        }
        out[k++] = (char)cp_to_byte[c];
    }
    return k;
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
    byte_alphabet(byte_to_cp, cp_to_byte);
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
    size_t slots = 1024;
    while (slots < 2 * lines) slots *= 2;
    g->pairs = malloc(slots * sizeof *g->pairs);
    if (!g->pairs) {
        free(buf);
        return loom_fail(LOOM_ERR_OOM, "%s: out of memory for %zu merges", path, lines);
    }
    for (size_t i = 0; i < slots; i++) g->pairs[i].key = PAIR_EMPTY;
    g->pair_mask = slots - 1;

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
        pair_put(g, (int32_t)json_integer_value(a), (int32_t)json_integer_value(b), rank++,
                 (int32_t)json_integer_value(ab));
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
    do g->serial = atomic_fetch_add(&g_serial, 1) + 1; /* 0 marks an empty cache slot */
    while (g->serial == 0);
    t->ops = &GPT2_OPS;
    t->impl = g;
    t->vocab_size = g->vocab_size;
    return LOOM_OK;
}
