/* Sentence splitting for `loom preprocess --split-sentences`.
 *
 * Megatron-LM splits with NLTK's punkt model; loom has a fixed, deterministic rule instead:
 *
 *  1. A sentence ends after a run of terminators ('.', '!', '?', any mix and length, so "?!" and
 *     "..." are one end), optionally followed by closing characters (' " ) ] } and the curly
 *     closing quotes U+2019, U+201D and U+00BB), when whitespace or the end of the text follows.
 *  2. Except when the run is one '.' ending a word that is an abbreviation: the word (the
 *     non-whitespace run before the '.', opening quotes and brackets stripped) is one of
 *     Mr Mrs Ms Dr St Prof Sr Jr Mt Messrs Mme Mlle Rev Gen Col Capt Lt Sgt Hon Gov Fr
 *     vs cf viz approx al e.g i.e (compared case-sensitively, as written here), or a single
 *     capital letter A-Z (an initial: "J. R. R. Tolkien"). Then the sentence goes on.
 *  3. A blank line (a newline, optional spaces, tabs or carriage returns, another newline: a
 *     paragraph break) ends a sentence wherever it is, with or without a terminator.
 *  4. The end of the text ends the last sentence. Whitespace between sentences belongs to none;
 *     sentences that are empty or only whitespace are dropped.
 *
 * Whitespace is ASCII: space, \t, \n, \v, \f, \r. What a sentence's text is:
 *  - keep_newlines = 0: from its first to its last non-whitespace byte, with every whitespace run
 *    inside it that holds a line break ('\n' or '\r') made one space (wrapped lines rejoined);
 *  - keep_newlines = 1 (--keep-newlines): the same bytes kept as they are (line breaks inside
 *    stay), plus the whitespace after the sentence up to and including its last line break, as
 *    Megatron's --keep-newlines keeps the newline that follows a sentence. With WordPiece a
 *    newline is whitespace, so the ids are the same either way; with GPT-2 they are not.
 */
#include "loom/data.h"

#include <stdlib.h>
#include <string.h>

static int is_ws(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Length of a closing character at s[i] (0 when none). */
static size_t closer_len(const unsigned char *s, size_t i, size_t len) {
    unsigned char c = s[i];
    if (c == '\'' || c == '"' || c == ')' || c == ']' || c == '}') return 1;
    if (c == 0xC2 && i + 1 < len && s[i + 1] == 0xBB) return 2; /* U+00BB » */
    if (c == 0xE2 && i + 2 < len && s[i + 1] == 0x80 && (s[i + 2] == 0x99 || s[i + 2] == 0x9D))
        return 3; /* U+2019 ’, U+201D ” */
    return 0;
}

/* Length of an opening character at s[i] (0 when none). */
static size_t opener_len(const unsigned char *s, size_t i, size_t len) {
    unsigned char c = s[i];
    if (c == '\'' || c == '"' || c == '(' || c == '[' || c == '{') return 1;
    if (c == 0xC2 && i + 1 < len && s[i + 1] == 0xAB) return 2; /* U+00AB « */
    if (c == 0xE2 && i + 2 < len && s[i + 1] == 0x80 && (s[i + 2] == 0x98 || s[i + 2] == 0x9C))
        return 3; /* U+2018 ‘, U+201C “ */
    return 0;
}

static const char *const ABBREVIATIONS[] = {
    "Mr", "Mrs", "Ms", "Dr", "St", "Prof", "Sr", "Jr", "Mt", "Messrs", "Mme", "Mlle", "Rev",
    "Gen", "Col", "Capt", "Lt", "Sgt", "Hon", "Gov", "Fr", "vs", "cf", "viz", "approx", "al",
    "e.g", "i.e",
};

/* Does the word s[b, e) (the bytes before a single '.') make that '.' an abbreviation's? */
static int is_abbreviation(const unsigned char *s, size_t b, size_t e) {
    for (;;) { /* strip opening quotes and brackets */
        size_t o = b < e ? opener_len(s, b, e) : 0;
        if (!o) break;
        b += o;
    }
    size_t n = e - b;
    if (n == 1 && s[b] >= 'A' && s[b] <= 'Z') return 1;
    for (size_t k = 0; k < sizeof ABBREVIATIONS / sizeof ABBREVIATIONS[0]; k++)
        if (strlen(ABBREVIATIONS[k]) == n && memcmp(ABBREVIATIONS[k], s + b, n) == 0) return 1;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* Append sentence s[b, e) (b, e on non-whitespace; `tail` extra bytes kept verbatim after e). */
static enum loom_status emit(struct loom_sentences *out, const unsigned char *s, size_t b,
                             size_t e, size_t tail, int keep_newlines) {
    if (e <= b) return LOOM_OK;
    size_t start = out->len;
    if (!grow((void **)&out->text, &out->cap_text, start + (e - b) + tail + 1, 1) ||
        !grow((void **)&out->end, &out->cap_end, out->n + 1, sizeof *out->end))
        return loom_fail(LOOM_ERR_OOM, "out of memory splitting sentences");
    size_t k = start;
    if (keep_newlines) {
        memcpy(out->text + k, s + b, e - b + tail);
        k += e - b + tail;
    } else {
        for (size_t i = b; i < e;) {
            if (!is_ws(s[i])) {
                out->text[k++] = (char)s[i++];
                continue;
            }
            size_t j = i;
            int br = 0;
            while (j < e && is_ws(s[j])) br |= s[j] == '\n' || s[j] == '\r', j++;
            if (br) out->text[k++] = ' ';
            else {
                memcpy(out->text + k, s + i, j - i);
                k += j - i;
            }
            i = j;
        }
    }
    out->text[k] = 0;
    out->len = k;
    out->end[out->n++] = k;
    return LOOM_OK;
}

enum loom_status loom_split_sentences(const char *text, size_t len, int keep_newlines,
                                      struct loom_sentences *out) {
    const unsigned char *s = (const unsigned char *)text;
    out->n = 0;
    out->len = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && is_ws(s[i])) i++; /* the next sentence starts here */
        if (i == len) break;
        size_t b = i, e = len, next = len;
        while (i < len) {
            unsigned char c = s[i];
            if (c == '\n') { /* blank line? */
                size_t j = i + 1;
                while (j < len && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r')) j++;
                if (j < len && s[j] == '\n') {
                    e = i;
                    next = j;
                    break;
                }
                i++;
                continue;
            }
            if (c != '.' && c != '!' && c != '?') {
                i++;
                continue;
            }
            size_t r = i;
            while (r < len && (s[r] == '.' || s[r] == '!' || s[r] == '?')) r++;
            size_t q = r, cl;
            while (q < len && (cl = closer_len(s, q, len)) != 0) q += cl;
            if (q < len && !is_ws(s[q])) { /* "3.14", "a.b", "end.Next": no end here */
                i = r;
                continue;
            }
            if (r - i == 1 && s[i] == '.') {
                size_t w = i;
                while (w > b && !is_ws(s[w - 1])) w--;
                if (w < i && is_abbreviation(s, w, i)) {
                    i = r;
                    continue;
                }
            }
            e = q;
            next = q;
            break;
        }
        while (e > b && is_ws(s[e - 1])) e--; /* a blank line's end: trailing spaces off */
        size_t tail = 0;
        if (keep_newlines) { /* keep the whitespace after it up to its last line break */
            size_t j = e, last = e;
            while (j < len && is_ws(s[j])) {
                if (s[j] == '\n') last = j + 1;
                j++;
            }
            tail = last - e;
        }
        LOOM_CHECK(emit(out, s, b, e, tail, keep_newlines));
        i = next;
    }
    return LOOM_OK;
}

void loom_sentences_free(struct loom_sentences *s) {
    if (!s) return;
    free(s->text);
    free(s->end);
    memset(s, 0, sizeof *s);
}
