/* Unicode NFC for the tokenizer.json normalizer of that name: full canonical decomposition
 * (tokenizer_unicode.c's nfd tables; Hangul syllables algorithmically), canonical ordering
 * (a stable sort of each run of non-starters by combining class), then canonical composition
 * (a character composes with the last starter unless a character between them is a starter or
 * has a class >= its own). Tables from Python's unicodedata (scripts/gen_tokenizer_nfc.py). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21,
       TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static uint32_t *g_nfd_off; /* start of each decomposition in loom_tok_nfd_pool */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void offsets_init(void) {
    g_nfd_off = malloc(loom_tok_nfd_keys_count * sizeof *g_nfd_off);
    if (!g_nfd_off) return;
    uint32_t off = 0;
    for (size_t i = 0; i < loom_tok_nfd_keys_count; i++) {
        g_nfd_off[i] = off;
        off += loom_tok_nfd_keys[i] & 7;
    }
}

static int ccc(uint32_t c) {
    if (c < 0x300) return 0;
    size_t lo = 0, hi = loom_nfc_ccc_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (loom_nfc_ccc[mid].cp < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < loom_nfc_ccc_count && loom_nfc_ccc[lo].cp == c ? loom_nfc_ccc[lo].ccc : 0;
}

/* append the decomposition of c to out (room for 7 more); returns the new length */
static size_t decompose(uint32_t c, uint32_t *out, size_t n) {
    if (c >= SBASE && c < SBASE + SCOUNT) {
        uint32_t s = c - SBASE;
        out[n++] = LBASE + s / NCOUNT;
        out[n++] = VBASE + (s % NCOUNT) / TCOUNT;
        if (s % TCOUNT) out[n++] = TBASE + s % TCOUNT;
        return n;
    }
    size_t lo = 0, hi = loom_tok_nfd_keys_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((loom_tok_nfd_keys[mid] >> 3) < c) lo = mid + 1;
        else hi = mid;
    }
    if (lo == loom_tok_nfd_keys_count || (loom_tok_nfd_keys[lo] >> 3) != c) {
        out[n++] = c;
        return n;
    }
    const uint32_t *d = loom_tok_nfd_pool + g_nfd_off[lo];
    for (uint32_t k = 0; k < (loom_tok_nfd_keys[lo] & 7); k++) out[n++] = d[k];
    return n;
}

/* the primary composite of (a, b), or 0 */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
        b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = loom_nfc_comp_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct loom_nfc_pair *p = &loom_nfc_comp[mid];
        if (p->first < a || (p->first == a && p->second < b)) lo = mid + 1;
        else hi = mid;
    }
    if (lo < loom_nfc_comp_count && loom_nfc_comp[lo].first == a && loom_nfc_comp[lo].second == b)
        return loom_nfc_comp[lo].composite;
    return 0;
}

enum loom_status loom_utf8_nfc(const char *text, size_t len, char **out, size_t *outn) {
    *out = NULL;
    *outn = len;
    size_t i = 0;
    while (i < len && (unsigned char)text[i] < 0xCC) i++; /* U+0300 and above start at 0xCC */
    if (i == len) return LOOM_OK;
    pthread_once(&g_once, offsets_init);
    if (!g_nfd_off) return loom_fail(LOOM_ERR_OOM, "out of memory for the NFC tables");
    /* at most 4 code points per byte after decomposition (a 3-byte Hangul syllable gives 3) */
    uint32_t *cp = malloc((len * 4 + 8) * sizeof *cp);
    char *o = malloc(len * 3 + 8); /* NFC grows UTF-8 at most threefold */
    if (!cp || !o) {
        free(cp);
        free(o);
        return loom_fail(LOOM_ERR_OOM, "out of memory normalizing %zu bytes", len);
    }
    size_t n = 0;
    for (i = 0; i < len;) n = decompose(loom_utf8_next((const unsigned char *)text, &i), cp, n);
    /* canonical ordering: insertion sort within runs of non-starters, stable */
    for (size_t k = 1; k < n; k++) {
        int ck = ccc(cp[k]);
        if (ck == 0) continue;
        uint32_t c = cp[k];
        size_t j = k;
        while (j > 0 && ccc(cp[j - 1]) > ck) {
            cp[j] = cp[j - 1];
            j--;
        }
        cp[j] = c;
    }
    /* composition, in place */
    size_t m = 0;
    long starter = -1;
    int last = 0;
    for (size_t k = 0; k < n; k++) {
        uint32_t c = cp[k];
        int cc = ccc(c);
        if (starter >= 0 && (last < cc || (last == 0 && (size_t)starter == m - 1))) {
            uint32_t comp = compose(cp[starter], c);
            if (comp) {
                cp[starter] = comp;
                continue;
            }
        }
        if (cc == 0) starter = (long)m;
        last = cc;
        cp[m++] = c;
    }
    size_t k = 0;
    for (size_t q = 0; q < m; q++) k += loom_utf8_put(o + k, cp[q]);
    free(cp);
    *out = o;
    *outn = k;
    return LOOM_OK;
}
