/* The machinery the BPE tokenizers share (GPT-2, tokenizer.json, tiktoken, SentencePiece):
 *
 * - a pair table (left id, right id) -> (priority, merged id) in open addressing;
 * - the merge loop: repeatedly take the adjacent pair of lowest priority and merge every
 *   occurrence of it, left to right, in one pass; stop when no adjacent pair has an entry. It
 *   runs on a linked list of symbols with a heap of candidates ordered by (priority, position);
 *   pairs created during a pass wait until the pass is over, and stale heap entries are
 *   recognised by their ids. O(n log n) per piece. With distinct priorities this is the same as
 *   merging the single lowest pair at a time (a merge can never recreate the pair it merged);
 * - a byte-string -> id hash (vocabularies, rank files, added tokens);
 * - a per-thread direct-mapped cache from short pieces to their ids;
 * - pre-tokenizer regexes through PCRE2 (UTF, UCP, JIT) with \s and \S spelled out as an
 *   explicit class, so that the meaning of "whitespace" is the tokenizer's, not PCRE2's.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"

/* ---- pair table ----------------------------------------------------------------------------- */

#define PAIR_EMPTY UINT64_MAX

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static inline size_t mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

enum loom_status loom_bpe_pairs_init(struct loom_bpe_pairs *p, size_t expected) {
    size_t slots = 1024;
    while (slots < 2 * expected) slots *= 2;
    p->slot = malloc(slots * sizeof *p->slot);
    if (!p->slot) return loom_fail(LOOM_ERR_OOM, "out of memory for %zu merges", expected);
    for (size_t i = 0; i < slots; i++) p->slot[i].key = PAIR_EMPTY;
    p->mask = slots - 1;
    p->count = 0;
    return LOOM_OK;
}

void loom_bpe_pairs_free(struct loom_bpe_pairs *p) {
    free(p->slot);
    p->slot = NULL;
}

const struct loom_bpe_slot *loom_bpe_pairs_find(const struct loom_bpe_pairs *p, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    size_t i = mix64(k) & p->mask;
    for (;;) {
        const struct loom_bpe_slot *s = &p->slot[i];
        if (s->key == k) return s;
        if (s->key == PAIR_EMPTY) return NULL;
        i = (i + 1) & p->mask;
    }
}

enum loom_status loom_bpe_pairs_put(struct loom_bpe_pairs *p, int32_t a, int32_t b, int32_t prio,
                                    int32_t merged, bool keep_first) {
    if (2 * (p->count + 1) > p->mask + 1) { /* grow */
        struct loom_bpe_pairs q;
        LOOM_CHECK(loom_bpe_pairs_init(&q, 2 * (p->count + 1)));
        for (size_t i = 0; i <= p->mask; i++)
            if (p->slot[i].key != PAIR_EMPTY) {
                size_t j = mix64(p->slot[i].key) & q.mask;
                while (q.slot[j].key != PAIR_EMPTY) j = (j + 1) & q.mask;
                q.slot[j] = p->slot[i];
            }
        q.count = p->count;
        free(p->slot);
        *p = q;
    }
    uint64_t k = pair_key(a, b);
    size_t i = mix64(k) & p->mask;
    while (p->slot[i].key != PAIR_EMPTY && p->slot[i].key != k) i = (i + 1) & p->mask;
    if (p->slot[i].key == k && keep_first) return LOOM_OK;
    if (p->slot[i].key != k) p->count++;
    p->slot[i] = (struct loom_bpe_slot){k, prio, merged};
    return LOOM_OK;
}

/* ---- merge loop ----------------------------------------------------------------------------- */

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
    int32_t *prev, *next;
    struct cand *heap, *pending;
};

static size_t bpe_run(const struct loom_bpe_pairs *pt, int32_t *id, size_t n, struct bpe_work *wk) {
    int32_t *prev = wk->prev, *next = wk->next;
    struct cand *heap = wk->heap, *pend = wk->pending;
    size_t nh = 0, np = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const struct loom_bpe_slot *s = loom_bpe_pairs_find(pt, id[i], id[i + 1]);
        if (s) heap_push(heap, &nh, (struct cand){s->prio, (int32_t)i, id[i], id[i + 1]});
    }
    int32_t pass_rank = -1;
    bool in_pass = false;
    for (;;) {
        if (nh == 0 || !in_pass || heap[0].rank != pass_rank) {
            /* the pass of pass_rank is over: its new pairs become candidates */
            if (np) {
                for (size_t k = 0; k < np; k++) heap_push(heap, &nh, pend[k]);
                np = 0;
                in_pass = false;
                continue;
            }
            if (nh == 0) break;
            pass_rank = heap[0].rank;
            in_pass = true;
        }
        struct cand c = heap_pop(heap, &nh);
        int32_t p = c.pos, q = next[p];
        /* stale: p was absorbed (id -1), changed, or its right neighbour changed */
        if (id[p] != c.left || q < 0 || id[q] != c.right) continue;
        const struct loom_bpe_slot *s = loom_bpe_pairs_find(pt, c.left, c.right);
        id[p] = s->merged;
        id[q] = LOOM_BPE_GONE;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) {
            int32_t a = prev[p];
            const struct loom_bpe_slot *t = loom_bpe_pairs_find(pt, id[a], id[p]);
            if (t) pend[np++] = (struct cand){t->prio, a, id[a], id[p]};
        }
        if (next[p] >= 0) {
            int32_t b = next[p];
            const struct loom_bpe_slot *t = loom_bpe_pairs_find(pt, id[p], id[b]);
            if (t) pend[np++] = (struct cand){t->prio, p, id[p], id[b]};
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) id[k++] = id[i];
    return k;
}

#define SMALL_PIECE 128

size_t loom_bpe_merge(const struct loom_bpe_pairs *pt, int32_t *id, size_t n) {
    if (n < 2) return n;
    if (n <= SMALL_PIECE) {
        int32_t prev[SMALL_PIECE], next[SMALL_PIECE];
        struct cand heap[3 * SMALL_PIECE], pend[2 * SMALL_PIECE];
        struct bpe_work wk = {prev, next, heap, pend};
        return bpe_run(pt, id, n, &wk);
    }
    struct bpe_work wk;
    wk.prev = malloc(2 * n * sizeof(int32_t));
    wk.heap = malloc(5 * n * sizeof(struct cand));
    if (!wk.prev || !wk.heap) {
        free(wk.prev);
        free(wk.heap);
        return 0;
    }
    wk.next = wk.prev + n;
    wk.pending = wk.heap + 3 * n;
    size_t k = bpe_run(pt, id, n, &wk);
    free(wk.prev);
    free(wk.heap);
    return k;
}

/* ---- byte-string -> id hash ----------------------------------------------------------------- */

uint32_t loom_bytes_hash(const void *data, size_t n) {
    const unsigned char *p = data;
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

enum loom_status loom_vocab_init(struct loom_vocab *v, size_t expected) {
    memset(v, 0, sizeof *v);
    size_t slots = 1024;
    while (slots < 2 * expected) slots *= 2;
    v->slot = malloc(slots * sizeof *v->slot);
    if (!v->slot) return loom_fail(LOOM_ERR_OOM, "out of memory for %zu tokens", expected);
    for (size_t i = 0; i < slots; i++) v->slot[i] = -1;
    v->mask = slots - 1;
    return LOOM_OK;
}

void loom_vocab_free(struct loom_vocab *v) {
    free(v->slot);
    free(v->start);
    free(v->len);
    free(v->bytes);
    memset(v, 0, sizeof *v);
}

enum loom_status loom_vocab_reserve_ids(struct loom_vocab *v, int64_t n) {
    if (n <= v->n_ids) return LOOM_OK;
    int64_t *st = realloc(v->start, (size_t)n * sizeof *st);
    if (st) v->start = st;
    int32_t *ln = realloc(v->len, (size_t)n * sizeof *ln);
    if (ln) v->len = ln;
    if (!st || !ln) return loom_fail(LOOM_ERR_OOM, "out of memory for %lld token ids", (long long)n);
    for (int64_t i = v->n_ids; i < n; i++) v->len[i] = -1;
    v->n_ids = n;
    return LOOM_OK;
}

int32_t loom_vocab_find(const struct loom_vocab *v, const void *s, size_t n) {
    size_t i = loom_bytes_hash(s, n) & v->mask;
    for (;;) {
        int32_t id = v->slot[i];
        if (id < 0) return -1;
        if ((size_t)v->len[id] == n && memcmp(v->bytes + v->start[id], s, n) == 0) return id;
        i = (i + 1) & v->mask;
    }
}

enum loom_status loom_vocab_add(struct loom_vocab *v, int32_t id, const void *s, size_t n,
                                bool hashed) {
    if (id < 0) return loom_fail(LOOM_ERR_FORMAT, "negative token id %d", (int)id);
    LOOM_CHECK(loom_vocab_reserve_ids(v, (int64_t)id + 1));
    if (v->len[id] >= 0) return loom_fail(LOOM_ERR_FORMAT, "id %d is given to two tokens", (int)id);
    if (v->nbytes + n > v->cap_bytes) {
        size_t c = v->cap_bytes ? v->cap_bytes : 1 << 16;
        while (c < v->nbytes + n) c *= 2;
        char *b = realloc(v->bytes, c);
        if (!b) return loom_fail(LOOM_ERR_OOM, "out of memory for token bytes");
        v->bytes = b;
        v->cap_bytes = c;
    }
    memcpy(v->bytes + v->nbytes, s, n);
    v->start[id] = (int64_t)v->nbytes;
    v->len[id] = (int32_t)n;
    v->nbytes += n;
    if (!hashed) return LOOM_OK;
    if (2 * (v->count + 1) > v->mask + 1) { /* grow the hash */
        size_t slots = 2 * (v->mask + 1);
        int32_t *ns = malloc(slots * sizeof *ns);
        if (!ns) return loom_fail(LOOM_ERR_OOM, "out of memory for the token hash");
        for (size_t i = 0; i < slots; i++) ns[i] = -1;
        for (size_t i = 0; i <= v->mask; i++) {
            int32_t t = v->slot[i];
            if (t < 0) continue;
            size_t j = loom_bytes_hash(v->bytes + v->start[t], (size_t)v->len[t]) & (slots - 1);
            while (ns[j] >= 0) j = (j + 1) & (slots - 1);
            ns[j] = t;
        }
        free(v->slot);
        v->slot = ns;
        v->mask = slots - 1;
    }
    size_t i = loom_bytes_hash(s, n) & v->mask;
    while (v->slot[i] >= 0) {
        int32_t t = v->slot[i];
        if ((size_t)v->len[t] == n && memcmp(v->bytes + v->start[t], s, n) == 0)
            return LOOM_OK; /* the same bytes again: the first id stays the one found */
        i = (i + 1) & v->mask;
    }
    v->slot[i] = id;
    v->count++;
    return LOOM_OK;
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

struct loom_piece_cache {
    struct cache_slot slot[CACHE_SLOTS];
};

static atomic_uint g_serial;
static pthread_once_t g_cache_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_cache_key;
static bool g_cache_key_ok;
static _Thread_local struct loom_piece_cache *tl_cache;
static _Thread_local bool tl_cache_failed;

static void cache_destroy(void *p) { free(p); }
static void cache_key_init(void) { g_cache_key_ok = pthread_key_create(&g_cache_key, cache_destroy) == 0; }

uint32_t loom_tokenizer_serial(void) {
    uint32_t s;
    do s = atomic_fetch_add(&g_serial, 1) + 1; /* 0 marks an empty cache slot */
    while (s == 0);
    return s;
}

struct loom_piece_cache *loom_piece_cache_get(void) {
    if (tl_cache || tl_cache_failed) return tl_cache;
    pthread_once(&g_cache_key_once, cache_key_init);
    struct loom_piece_cache *c = g_cache_key_ok ? calloc(1, sizeof *c) : NULL;
    if (c && pthread_setspecific(g_cache_key, c) != 0) {
        free(c);
        c = NULL;
    }
    if (!c) tl_cache_failed = true;
    tl_cache = c;
    return c;
}

size_t loom_piece_cache_lookup(struct loom_piece_cache *c, uint32_t serial, const void *w, size_t n,
                               int32_t *out, uint32_t *hash) {
    if (!c || n > CACHE_KEY_MAX) return 0;
    uint32_t h = loom_bytes_hash(w, n);
    *hash = h;
    const struct cache_slot *s = &c->slot[h & (CACHE_SLOTS - 1)];
    if (s->serial == serial && s->hash == h && s->klen == n && memcmp(s->key, w, n) == 0) {
        memcpy(out, s->ids, s->nids * sizeof *out);
        return s->nids;
    }
    return 0;
}

void loom_piece_cache_store(struct loom_piece_cache *c, uint32_t serial, uint32_t hash,
                            const void *w, size_t n, const int32_t *ids, size_t k) {
    if (!c || n > CACHE_KEY_MAX || k > CACHE_IDS_MAX || k == 0) return;
    struct cache_slot *s = &c->slot[hash & (CACHE_SLOTS - 1)];
    s->serial = serial;
    s->hash = hash;
    s->klen = (uint8_t)n;
    s->nids = (uint8_t)k;
    memcpy(s->key, w, n);
    memcpy(s->ids, ids, k * sizeof *ids);
}

/* ---- pre-tokenizer regex -------------------------------------------------------------------- */

/* Copy pattern to out with \s and \S replaced: outside a class by [WS] / [^WS], inside one by
 * WS (\S inside a class is refused: no pattern in use needs it). */
static enum loom_status translate_ws(const char *pat, const char *ws, char **out) {
    size_t n = strlen(pat), wl = strlen(ws);
    char *o = malloc(n * (wl + 4) + 1);
    if (!o) return loom_fail(LOOM_ERR_OOM, "out of memory compiling a pre-tokenizer pattern");
    size_t k = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char d = pat[i + 1];
            if (d == 's' || d == 'S') {
                if (in_class && d == 'S') {
                    free(o);
                    return loom_fail(LOOM_ERR_FORMAT, "pre-tokenizer pattern: \\S inside a "
                                     "character class is not supported");
                }
                if (!in_class) o[k++] = '[';
                if (d == 'S') o[k++] = '^';
                memcpy(o + k, ws, wl);
                k += wl;
                if (!in_class) o[k++] = ']';
            } else {
                o[k++] = c;
                o[k++] = d;
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            o[k++] = c;
            if (i + 1 < n && pat[i + 1] == '^') o[k++] = pat[++i];
            if (i + 1 < n && pat[i + 1] == ']') o[k++] = pat[++i]; /* literal ] first */
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        o[k++] = c;
    }
    o[k] = 0;
    *out = o;
    return LOOM_OK;
}

enum loom_status loom_splitter_init(struct loom_splitter *s, const char *pattern, const char *ws,
                                    const char *what) {
    memset(s, 0, sizeof *s);
    char *p = NULL;
    if (ws) LOOM_CHECK(translate_ws(pattern, ws, &p));
    int errc;
    PCRE2_SIZE erroff;
    s->re = pcre2_compile((PCRE2_SPTR)(p ? p : pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &errc, &erroff, NULL);
    free(p);
    if (!s->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errc, msg, sizeof msg);
        return loom_fail(LOOM_ERR_FORMAT, "%s: pre-tokenizer pattern does not compile (%s at "
                         "offset %zu): %.80s", what, (const char *)msg, (size_t)erroff, pattern);
    }
    s->jit = pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE) == 0;
    return LOOM_OK;
}

void loom_splitter_free(struct loom_splitter *s) {
    if (s->re) pcre2_code_free(s->re);
    s->re = NULL;
}

enum loom_status loom_splitter_run(const struct loom_splitter *s, const char *text, size_t len,
                                   loom_piece_fn fn, void *ctx) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(s->re, NULL);
    if (!md) return loom_fail(LOOM_ERR_OOM, "out of memory for a pre-tokenizer match");
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    enum loom_status st = LOOM_OK;
    size_t pos = 0, gap = 0; /* text[gap..pos) is not matched yet */
    while (pos < len && st == LOOM_OK) {
        int rc = s->jit ? pcre2_jit_match(s->re, (PCRE2_SPTR)text, len, pos, 0, md, NULL)
                        : pcre2_match(s->re, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            st = loom_fail(LOOM_ERR_INTERNAL, "pre-tokenizer regex failed at byte %zu (pcre2 rc %d)",
                           pos, rc);
            break;
        }
        size_t a = ov[0], b = ov[1];
        if (b == a) { /* empty match: no piece; step one character */
            pos = a + 1;
            while (pos < len && ((unsigned char)text[pos] & 0xC0) == 0x80) pos++;
            continue;
        }
        if (a > gap) st = fn(ctx, text + gap, a - gap);
        if (st == LOOM_OK) st = fn(ctx, text + a, b - a);
        pos = gap = b;
    }
    if (st == LOOM_OK && gap < len) st = fn(ctx, text + gap, len - gap);
    pcre2_match_data_free(md);
    return st;
}

/* ---- added / special tokens ----------------------------------------------------------------- */

enum loom_status loom_specials_add(struct loom_specials *sp, const char *s, size_t n, int32_t id) {
    if (n == 0) return LOOM_OK;
    if (sp->n == sp->cap) {
        size_t c = sp->cap ? 2 * sp->cap : 16;
        struct loom_special *p = realloc(sp->v, c * sizeof *p);
        if (!p) return loom_fail(LOOM_ERR_OOM, "out of memory for special tokens");
        sp->v = p;
        sp->cap = c;
    }
    char *d = malloc(n + 1);
    if (!d) return loom_fail(LOOM_ERR_OOM, "out of memory for special tokens");
    memcpy(d, s, n);
    d[n] = 0;
    sp->v[sp->n++] = (struct loom_special){d, n, id};
    sp->first[(unsigned char)s[0]] = 1;
    return LOOM_OK;
}

void loom_specials_free(struct loom_specials *sp) {
    for (size_t i = 0; i < sp->n; i++) free(sp->v[i].s);
    free(sp->v);
    memset(sp, 0, sizeof *sp);
}

bool loom_specials_next(const struct loom_specials *sp, const char *text, size_t len, size_t from,
                        bool longest, size_t *at, size_t *which) {
    if (sp->n == 0) return false;
    for (size_t i = from; i < len; i++) {
        if (!sp->first[(unsigned char)text[i]]) continue;
        size_t best = SIZE_MAX;
        for (size_t k = 0; k < sp->n; k++) {
            const struct loom_special *e = &sp->v[k];
            if (e->n > len - i || memcmp(text + i, e->s, e->n) != 0) continue;
            if (best == SIZE_MAX) {
                best = k;
                if (!longest) break;
            } else if (e->n > sp->v[best].n) {
                best = k;
            }
        }
        if (best != SIZE_MAX) {
            *at = i;
            *which = best;
            return true;
        }
    }
    return false;
}

/* ---- GPT-2's byte alphabet ------------------------------------------------------------------ */

void loom_byte_alphabet(uint32_t byte_to_cp[256], int16_t cp_to_byte[324]) {
    for (int c = 0; c < 324; c++) cp_to_byte[c] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + extra++);
        byte_to_cp[b] = cp;
        cp_to_byte[cp] = (int16_t)b;
    }
}

bool loom_byte_alphabet_decode(const int16_t cp_to_byte[324], const char *s, size_t n, char *out,
                               size_t *outn) {
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t c = loom_utf8_next((const unsigned char *)s, &i);
        if (c >= 324 || cp_to_byte[c] < 0) return false;
        out[k++] = (char)cp_to_byte[c];
    }
    *outn = k;
    return true;
}
