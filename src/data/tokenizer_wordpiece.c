/* BERT WordPiece (vocab.txt), as the original BERT tokenizer that Megatron ships:
 *
 * 1. basic tokenization of the text, code point by code point:
 *    - NUL, U+FFFD and control characters (category C*, but not TAB LF CR) are removed;
 *      whitespace (TAB LF CR, Zs; also U+2028/U+2029, which str.split() splits on) separates
 *      words; each CJK ideograph is a word of its own;
 *    - LowerCase only, per word: Python's str.lower() (full mapping, final sigma), then NFD
 *      with the nonspacing marks (Mn) removed ("strip accents");
 *    - each punctuation character (ASCII symbols and category P*) is split off as its own word;
 * 2. WordPiece per word: greedy longest match first from the left; pieces after the first are
 *    looked up with a "##" prefix; a word with an unmatched remainder, or longer than
 *    LOOM_WORDPIECE_MAX_WORD_CHARS code points, is a single [UNK].
 *
 * vocab.txt: one token per line, id = line index (0-based); a line is stripped of surrounding
 * whitespace. A token on two lines is an error: Python's dict (BERT's, Megatron's and Hugging
 * Face's loaders) would keep its last id, leave the earlier one unreachable and count fewer
 * tokens than lines, so ids and vocabulary size would no longer agree.
 */
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"
#include "loom/fileio.h"

#define VOCAB_MAX_BYTES ((size_t)1 << 30)

enum { C_OTHER, C_CONTROL, C_SPACE, C_PUNCT, C_CJK, C_MN, C_MN0 };

struct vocab_slot {
    uint32_t hash;
    int32_t id; /* -1: free */
};

struct wordpiece {
    bool lower;
    int32_t unk;
    int64_t size;
    char *pool;          /* token bytes */
    int64_t *tok_start;  /* [size] */
    int32_t *tok_len;    /* [size] */
    struct vocab_slot *slots;
    size_t slot_mask;
    size_t max_tok_bytes;
    uint8_t bmp_class[0x10000];
    uint16_t *nfd_off; /* [nfd_keys_count]: start of each decomposition in the pool */
};

/* ---- Unicode lookups ------------------------------------------------------------------------ */

/* index of the last entry whose (value >> shift) <= cp */
static size_t range_find(const uint32_t *r, size_t n, unsigned shift, uint32_t cp) {
    size_t lo = 0, hi = n; /* r[0] starts at 0 */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((r[mid] >> shift) <= cp) lo = mid;
        else hi = mid;
    }
    return lo;
}

static inline int char_class(const struct wordpiece *w, uint32_t cp) {
    if (cp < 0x10000) return w->bmp_class[cp];
    return (int)(loom_tok_class_ranges[range_find(loom_tok_class_ranges, loom_tok_class_ranges_count, 3, cp)] & 7);
}

static uint32_t lower_simple(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    size_t lo = 0, hi = loom_tok_lower_runs_count;
    while (lo < hi) { /* first run with last >= cp */
        size_t mid = (lo + hi) / 2;
        if (loom_tok_lower_runs[mid].last < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo == loom_tok_lower_runs_count) return cp;
    const struct loom_tok_case_run *r = &loom_tok_lower_runs[lo];
    if (cp < r->first || (cp - r->first) % r->stride != 0) return cp;
    return (uint32_t)((int32_t)cp + r->delta);
}

static inline unsigned casing(uint32_t cp) {
    return loom_tok_casing_ranges[range_find(loom_tok_casing_ranges, loom_tok_casing_ranges_count, 2, cp)] & 3;
}
#define CASED 1u
#define CASE_IGNORABLE 2u

/* combining class of a non-Mn character (0 for almost all) */
static int ccc_of_mark(uint32_t cp) {
    size_t lo = 0, hi = loom_tok_ccc_marks_count;
    if (cp < loom_tok_ccc_marks[0].cp || cp > loom_tok_ccc_marks[hi - 1].cp) return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (loom_tok_ccc_marks[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < loom_tok_ccc_marks_count && loom_tok_ccc_marks[lo].cp == cp ? loom_tok_ccc_marks[lo].ccc : 0;
}

/* ---- growable code point buffers ------------------------------------------------------------ */

struct cpbuf {
    uint32_t *v;
    size_t n, cap;
};

static bool cp_push(struct cpbuf *b, uint32_t c) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 64;
        uint32_t *p = realloc(b->v, nc * sizeof *p);
        if (!p) return false;
        b->v = p;
        b->cap = nc;
    }
    b->v[b->n++] = c;
    return true;
}

/* ---- per-word normalisation (LowerCase) ----------------------------------------------------- */

/* str.lower() of word[0..n) appended to out */
static bool lower_word(const uint32_t *word, size_t n, struct cpbuf *out) {
    for (size_t i = 0; i < n; i++) {
        uint32_t c = word[i];
        if (c == 0x130) { /* İ -> i + combining dot above */
            if (!cp_push(out, 'i') || !cp_push(out, 0x307)) return false;
            continue;
        }
        if (c == 0x3A3) { /* Σ: final form when a cased letter precedes and none follows */
            size_t j = i;
            unsigned f = 0;
            while (j > 0 && ((f = casing(word[j - 1])) & CASE_IGNORABLE)) j--;
            bool final = j > 0 && (f & CASED);
            if (final) {
                size_t k = i + 1;
                while (k < n && (casing(word[k]) & CASE_IGNORABLE)) k++;
                final = k == n || !(casing(word[k]) & CASED);
            }
            if (!cp_push(out, final ? 0x3C2 : 0x3C3)) return false;
            continue;
        }
        if (!cp_push(out, lower_simple(c))) return false;
    }
    return true;
}

static bool decompose(const struct wordpiece *w, uint32_t c, struct cpbuf *out) {
    if (c < 0xC0) return cp_push(out, c);
    if (c >= 0xAC00 && c <= 0xD7A3) { /* Hangul syllable */
        uint32_t s = c - 0xAC00;
        if (!cp_push(out, 0x1100 + s / 588) || !cp_push(out, 0x1161 + (s % 588) / 28)) return false;
        return s % 28 ? cp_push(out, 0x11A7 + s % 28) : true;
    }
    size_t lo = 0, hi = loom_tok_nfd_keys_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t k = loom_tok_nfd_keys[mid] >> 3;
        if (k < c) lo = mid + 1;
        else hi = mid;
    }
    if (lo == loom_tok_nfd_keys_count || (loom_tok_nfd_keys[lo] >> 3) != c) return cp_push(out, c);
    const uint32_t *d = loom_tok_nfd_pool + w->nfd_off[lo];
    for (uint32_t k = 0; k < (loom_tok_nfd_keys[lo] & 7); k++)
        if (!cp_push(out, d[k])) return false;
    return true;
}

/* NFD of word, then the Mn marks removed; out is cleared first. Canonical reordering only
 * matters for the non-Mn characters with a combining class (the ccc table): within a run of
 * non-starters they are stably sorted by class; Mn marks only delimit runs (class 0 or not). */
static bool strip_accents(const struct wordpiece *w, const struct cpbuf *word, struct cpbuf *tmp,
                          struct cpbuf *out) {
    tmp->n = 0;
    out->n = 0;
    for (size_t i = 0; i < word->n; i++)
        if (!decompose(w, word->v[i], tmp)) return false;
    size_t run_start = 0; /* in out: first kept character of the current non-starter run */
    bool in_run = false;
    for (size_t i = 0; i < tmp->n; i++) {
        uint32_t c = tmp->v[i];
        int cls = char_class(w, c);
        if (cls == C_MN) { /* non-starter, removed */
            if (!in_run) run_start = out->n;
            in_run = true;
            continue;
        }
        if (cls == C_MN0) { /* starter, removed */
            in_run = false;
            continue;
        }
        int ccc = ccc_of_mark(c);
        if (ccc == 0) {
            in_run = false;
            if (!cp_push(out, c)) return false;
            continue;
        }
        if (!in_run) run_start = out->n;
        in_run = true;
        /* insertion: after every kept run member whose class is <= ccc (stable) */
        if (!cp_push(out, c)) return false;
        size_t j = out->n - 1;
        while (j > run_start && ccc_of_mark(out->v[j - 1]) > ccc) {
            out->v[j] = out->v[j - 1];
            j--;
        }
        out->v[j] = c;
    }
    return true;
}

/* ---- vocabulary ----------------------------------------------------------------------------- */

static inline uint32_t str_hash(const char *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

static int32_t vocab_find(const struct wordpiece *w, const char *s, size_t n) {
    uint32_t h = str_hash(s, n);
    for (size_t i = h & w->slot_mask;; i = (i + 1) & w->slot_mask) {
        const struct vocab_slot *sl = &w->slots[i];
        if (sl->id < 0) return -1;
        if (sl->hash == h && (size_t)w->tok_len[sl->id] == n &&
            memcmp(w->pool + w->tok_start[sl->id], s, n) == 0)
            return sl->id;
    }
}

/* Enter token `id`; the id that already holds the same token, or -1 */
static int32_t vocab_put(struct wordpiece *w, int32_t id) {
    const char *s = w->pool + w->tok_start[id];
    size_t n = (size_t)w->tok_len[id];
    uint32_t h = str_hash(s, n);
    for (size_t i = h & w->slot_mask;; i = (i + 1) & w->slot_mask) {
        struct vocab_slot *sl = &w->slots[i];
        if (sl->id >= 0 && sl->hash == h && (size_t)w->tok_len[sl->id] == n &&
            memcmp(w->pool + w->tok_start[sl->id], s, n) == 0)
            return sl->id;
        if (sl->id < 0) {
            sl->hash = h;
            sl->id = id;
            return -1;
        }
    }
}

/* Python's str.isspace() */
static bool py_space(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- encode --------------------------------------------------------------------------------- */

struct scratch {
    struct cpbuf word, low, tmp, norm;
    char *bytes;
    size_t bytes_cap;
    size_t *off;
    size_t off_cap;
    char *probe;
    size_t probe_cap;
};

static void scratch_free(struct scratch *s) {
    free(s->word.v);
    free(s->low.v);
    free(s->tmp.v);
    free(s->norm.v);
    free(s->bytes);
    free(s->off);
    free(s->probe);
}

/* WordPiece of one basic token (code points p[0..n)); appends ids */
static enum loom_status wordpiece_token(const struct wordpiece *w, const uint32_t *p, size_t n,
                                        struct scratch *sc, int32_t **ids, size_t *nids, size_t *cap) {
    if (n == 0) return LOOM_OK;
    if (n > LOOM_WORDPIECE_MAX_WORD_CHARS) {
        LOOM_CHECK(loom_tokenizer_reserve(ids, nids, cap, 1));
        (*ids)[(*nids)++] = w->unk;
        return LOOM_OK;
    }
    if (sc->bytes_cap < 4 * n + 2) {
        free(sc->bytes);
        free(sc->probe);
        sc->bytes_cap = 4 * n + 2;
        sc->bytes = malloc(sc->bytes_cap);
        sc->probe = malloc(sc->bytes_cap + 2);
        if (!sc->bytes || !sc->probe) {
            sc->bytes_cap = 0;
            return loom_fail(LOOM_ERR_OOM, "out of memory in WordPiece");
        }
    }
    if (sc->off_cap < n + 1) {
        free(sc->off);
        sc->off_cap = n + 1;
        sc->off = malloc(sc->off_cap * sizeof *sc->off);
        if (!sc->off) {
            sc->off_cap = 0;
            return loom_fail(LOOM_ERR_OOM, "out of memory in WordPiece");
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        sc->off[i] = k;
        k += loom_utf8_put(sc->bytes + k, p[i]);
    }
    sc->off[n] = k;
    LOOM_CHECK(loom_tokenizer_reserve(ids, nids, cap, n));
    size_t n0 = *nids, start = 0;
    sc->probe[0] = sc->probe[1] = '#';
    while (start < n) {
        int32_t found = -1;
        size_t end = n;
        for (; end > start; end--) {
            size_t bl = sc->off[end] - sc->off[start];
            size_t pl = start > 0 ? bl + 2 : bl;
            if (pl > w->max_tok_bytes) continue;
            const char *q;
            if (start > 0) {
                memcpy(sc->probe + 2, sc->bytes + sc->off[start], bl);
                q = sc->probe;
            } else {
                q = sc->bytes;
            }
            found = vocab_find(w, q, pl);
            if (found >= 0) break;
        }
        if (found < 0) { /* the whole word is unknown */
            *nids = n0;
            (*ids)[(*nids)++] = w->unk;
            return LOOM_OK;
        }
        (*ids)[(*nids)++] = found;
        start = end;
    }
    return LOOM_OK;
}

/* one whitespace-separated word (CJK already split): normalise, split punctuation, WordPiece */
static enum loom_status process_word(const struct wordpiece *w, struct scratch *sc, int32_t **ids,
                                     size_t *n, size_t *cap) {
    const struct cpbuf *word = &sc->word;
    if (w->lower) {
        sc->low.n = 0;
        if (!lower_word(word->v, word->n, &sc->low) || !strip_accents(w, &sc->low, &sc->tmp, &sc->norm))
            return loom_fail(LOOM_ERR_OOM, "out of memory in WordPiece");
        word = &sc->norm;
    }
    size_t start = 0;
    for (size_t i = 0; i < word->n; i++) {
        if (char_class(w, word->v[i]) == C_PUNCT) {
            LOOM_CHECK(wordpiece_token(w, word->v + start, i - start, sc, ids, n, cap));
            LOOM_CHECK(wordpiece_token(w, word->v + i, 1, sc, ids, n, cap));
            start = i + 1;
        }
    }
    return wordpiece_token(w, word->v + start, word->n - start, sc, ids, n, cap);
}

static enum loom_status wp_encode(const void *impl, const char *text, size_t len, int32_t **ids,
                                  size_t *n, size_t *cap) {
    const struct wordpiece *w = impl;
    struct scratch sc = {0};
    enum loom_status s = LOOM_OK;
    const unsigned char *u = (const unsigned char *)text;
    size_t i = 0;
    while (i < len && s == LOOM_OK) {
        uint32_t c = loom_utf8_next(u, &i);
        int cls = char_class(w, c);
        if (cls == C_CONTROL) continue;
        if (cls == C_SPACE || cls == C_CJK) {
            if (sc.word.n) s = process_word(w, &sc, ids, n, cap);
            sc.word.n = 0;
            if (cls == C_CJK && s == LOOM_OK) {
                if (!cp_push(&sc.word, c)) s = loom_fail(LOOM_ERR_OOM, "out of memory in WordPiece");
                else s = process_word(w, &sc, ids, n, cap);
                sc.word.n = 0;
            }
            continue;
        }
        if (!cp_push(&sc.word, c)) s = loom_fail(LOOM_ERR_OOM, "out of memory in WordPiece");
    }
    if (s == LOOM_OK && sc.word.n) s = process_word(w, &sc, ids, n, cap);
    scratch_free(&sc);
    return s;
}

/* tokens joined by spaces, then every " ##" removed and the ends stripped (BERT's
 * convert_tokens_to_string) */
static enum loom_status wp_decode(const void *impl, const int32_t *ids, size_t n, char **text,
                                  size_t *len) {
    const struct wordpiece *w = impl;
    size_t total = 1;
    for (size_t i = 0; i < n; i++) total += (size_t)w->tok_len[ids[i]] + 1;
    char *out = malloc(total);
    if (!out) return loom_fail(LOOM_ERR_OOM, "out of memory decoding %zu ids", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) out[k++] = ' ';
        memcpy(out + k, w->pool + w->tok_start[ids[i]], (size_t)w->tok_len[ids[i]]);
        k += (size_t)w->tok_len[ids[i]];
    }
    size_t r = 0;
    for (size_t i = 0; i < k;) {
        if (i + 3 <= k && out[i] == ' ' && out[i + 1] == '#' && out[i + 2] == '#') {
            i += 3;
            continue;
        }
        out[r++] = out[i++];
    }
    size_t a = 0;
    while (a < r && (out[a] == ' ')) a++;
    while (r > a && out[r - 1] == ' ') r--;
    memmove(out, out + a, r - a);
    out[r - a] = 0;
    *text = out;
    *len = r - a;
    return LOOM_OK;
}

static void wp_free(void *impl) {
    struct wordpiece *w = impl;
    if (!w) return;
    free(w->pool);
    free(w->tok_start);
    free(w->tok_len);
    free(w->slots);
    free(w->nfd_off);
    free(w);
}

static const struct loom_tokenizer_ops WP_OPS = {
    .free = wp_free,
    .encode = wp_encode,
    .decode = wp_decode,
};

/* ---- loading -------------------------------------------------------------------------------- */

static enum loom_status load_vocab(struct wordpiece *w, const char *path) {
    char *buf;
    size_t len;
    LOOM_CHECK(loom_read_file(path, VOCAB_MAX_BYTES, &buf, &len));
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    if (len && buf[len - 1] != '\n') lines++;
    if (lines == 0) {
        free(buf);
        return loom_fail(LOOM_ERR_FORMAT, "%s: empty vocabulary (want one token per line)", path);
    }
    w->size = (int64_t)lines;
    w->pool = buf; /* tokens are slices of the file */
    w->tok_start = malloc(lines * sizeof *w->tok_start);
    w->tok_len = malloc(lines * sizeof *w->tok_len);
    size_t slots = 64;
    while (slots < 2 * lines) slots *= 2;
    w->slots = malloc(slots * sizeof *w->slots);
    if (!w->tok_start || !w->tok_len || !w->slots)
        return loom_fail(LOOM_ERR_OOM, "%s: out of memory for %zu tokens", path, lines);
    w->slot_mask = slots - 1;
    for (size_t i = 0; i < slots; i++) w->slots[i].id = -1;
    size_t pos = 0;
    for (size_t id = 0; id < lines; id++) {
        char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t bad = loom_utf8_invalid_offset(buf + pos, end - pos);
        if (bad != end - pos)
            return loom_fail(LOOM_ERR_FORMAT, "%s line %zu: invalid UTF-8 at byte %zu of the line", path,
                             id + 1, bad);
        /* strip whitespace (str.strip()) at both ends */
        size_t a = pos, b = end;
        while (a < b) {
            size_t j = a;
            if (!py_space(loom_utf8_next((const unsigned char *)buf, &j))) break;
            a = j;
        }
        while (b > a) {
            size_t j = b - 1;
            while (j > a && ((unsigned char)buf[j] & 0xC0) == 0x80) j--;
            size_t q = j;
            if (!py_space(loom_utf8_next((const unsigned char *)buf, &q))) break;
            b = j;
        }
        w->tok_start[id] = (int64_t)a;
        w->tok_len[id] = (int32_t)(b - a);
        if (b - a > w->max_tok_bytes) w->max_tok_bytes = b - a;
        const int32_t was = vocab_put(w, (int32_t)id);
        if (was >= 0)
            return loom_fail(LOOM_ERR_FORMAT, "%s line %zu: token '%.*s' repeats line %d (each "
                             "token once: its id is its line)", path, id + 1, (int)(b - a),
                             buf + a, was + 1);
        pos = end + 1;
    }
    return LOOM_OK;
}

enum loom_status loom_tokenizer_wordpiece_load(struct loom_tokenizer *t, const char *vocab_file,
                                               bool lower_case) {
    struct wordpiece *w = calloc(1, sizeof *w);
    if (!w) return loom_fail(LOOM_ERR_OOM, "out of memory loading %s", vocab_file);
    w->lower = lower_case;
    enum loom_status s = load_vocab(w, vocab_file);
    if (s == LOOM_OK) {
        w->unk = vocab_find(w, "[UNK]", 5);
        if (w->unk < 0)
            s = loom_fail(LOOM_ERR_FORMAT, "%s: no [UNK] token; not a BERT WordPiece vocab.txt", vocab_file);
    }
    if (s == LOOM_OK) {
        w->nfd_off = malloc(loom_tok_nfd_keys_count * sizeof *w->nfd_off);
        if (!w->nfd_off) s = loom_fail(LOOM_ERR_OOM, "out of memory loading %s", vocab_file);
    }
    if (s != LOOM_OK) {
        wp_free(w);
        return s;
    }
    size_t off = 0;
    for (size_t i = 0; i < loom_tok_nfd_keys_count; i++) {
        w->nfd_off[i] = (uint16_t)off;
        off += loom_tok_nfd_keys[i] & 7;
    }
    LOOM_ASSERT(off == loom_tok_nfd_pool_count);
    for (size_t r = 0; r < loom_tok_class_ranges_count; r++) {
        uint32_t a = loom_tok_class_ranges[r] >> 3;
        uint32_t b = r + 1 < loom_tok_class_ranges_count ? loom_tok_class_ranges[r + 1] >> 3 : 0x110000;
        if (a >= 0x10000) break;
        if (b > 0x10000) b = 0x10000;
        memset(w->bmp_class + a, (int)(loom_tok_class_ranges[r] & 7), b - a);
    }
    t->ops = &WP_OPS;
    t->impl = w;
    t->vocab_size = w->size;
    t->unk = w->unk;
    t->cls = vocab_find(w, "[CLS]", 5);
    t->sep = vocab_find(w, "[SEP]", 5);
    t->mask = vocab_find(w, "[MASK]", 6);
    t->pad = vocab_find(w, "[PAD]", 5);
    t->eod = t->sep;
    return LOOM_OK;
}
