/* TikTokenizer: a tiktoken rank file, as Megatron-LM's TikTokenizer uses it.
 *
 * The file is either tiktoken's own "<base64 token> <rank>" lines (cl100k_base.tiktoken, ...)
 * or Megatron-LM's JSON list of {"rank", "token_bytes" (base64), "token_str"}. Ranks must be
 * 0, 1, 2, ... and ranks 0..255 (as tiktoken requires of every encoding it builds from a rank
 * file) cover the 256 single bytes.
 *
 * Ids as Megatron-LM gives them: --tiktoken-num-special-tokens (default 1000) special tokens
 * first, <unk> <s> </s> then <SPECIAL_3> ... <SPECIAL_N-1>; token of rank r has id N + r. With
 * --vocab-size V only the ranks below V - N are kept, and V must not exceed N + the ranks in the
 * file. The end of document is </s> (id 2). Text is encoded as tiktoken's encode_ordinary: the
 * special tokens are never read from the text.
 *
 * Encoding: the --tiktoken-pattern regex splits the text; a piece that is a token as a whole is
 * that token; otherwise its bytes merge pairwise, always the adjacent pair whose concatenation
 * has the lowest rank (leftmost first): tokenizer_bpe.c's loop over a pair table that holds
 * every split of every token into two tokens.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"
#include "loom/fileio.h"

#define RANKS_MAX_BYTES ((size_t)1 << 31)

/* Megatron-LM's v1 and v2, and tiktoken's cl100k_base and o200k_base patterns */
static const struct {
    const char *name, *pattern;
} PATTERNS[] = {
    {"v1", "[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|"
           "\\s+(?!\\S)|\\s+"},
    {"v2", "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
           "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
           "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"cl100k", "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,3}| "
               "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
    {"o200k", "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
              "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
              "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
              "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

struct tik {
    struct loom_vocab vocab; /* hashed: the rank tokens; unhashed: the special tokens */
    struct loom_bpe_pairs pairs;
    struct loom_splitter split;
    int32_t byte_id[256];
    uint32_t serial;
};

/* ---- base64 --------------------------------------------------------------------------------- */

static int b64v(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* decode s[0..n) into out (room for n bytes); false when not base64 */
static bool b64_decode(const char *s, size_t n, char *out, size_t *outn) {
    while (n > 0 && s[n - 1] == '=') n--;
    uint32_t acc = 0;
    int bits = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64v((unsigned char)s[i]);
        if (v < 0) return false;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[k++] = (char)((acc >> bits) & 0xFF);
        }
    }
    *outn = k;
    return n > 0;
}

/* ---- encode / decode ------------------------------------------------------------------------ */

struct enc_ctx {
    const struct tik *t;
    int32_t **ids;
    size_t *n, *cap;
    struct loom_piece_cache *cache;
};

static enum loom_status on_piece(void *ctx, const char *p, size_t n) {
    struct enc_ctx *c = ctx;
    const struct tik *t = c->t;
    LOOM_CHECK(loom_tokenizer_reserve(c->ids, c->n, c->cap, n));
    int32_t *out = *c->ids + *c->n;
    int32_t whole = loom_vocab_find(&t->vocab, p, n);
    if (whole >= 0) {
        out[0] = whole;
        *c->n += 1;
        return LOOM_OK;
    }
    uint32_t h = 0;
    size_t k = loom_piece_cache_lookup(c->cache, t->serial, p, n, out, &h);
    if (!k) {
        for (size_t i = 0; i < n; i++) out[i] = t->byte_id[(unsigned char)p[i]];
        k = loom_bpe_merge(&t->pairs, out, n);
        if (k == 0) return loom_fail(LOOM_ERR_OOM, "out of memory encoding a %zu-byte piece", n);
        loom_piece_cache_store(c->cache, t->serial, h, p, n, out, k);
    }
    *c->n += k;
    return LOOM_OK;
}

static enum loom_status tik_encode(const void *impl, const char *text, size_t len, int32_t **ids,
                                   size_t *n, size_t *cap) {
    const struct tik *t = impl;
    struct enc_ctx c = {t, ids, n, cap, loom_piece_cache_get()};
    return loom_splitter_run(&t->split, text, len, on_piece, &c);
}

static enum loom_status tik_decode(const void *impl, const int32_t *ids, size_t n, char **text,
                                   size_t *len) {
    const struct tik *t = impl;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += (size_t)t->vocab.len[ids[i]];
    char *out = malloc(total + 1);
    if (!out) return loom_fail(LOOM_ERR_OOM, "out of memory decoding %zu ids", n);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + k, t->vocab.bytes + t->vocab.start[ids[i]], (size_t)t->vocab.len[ids[i]]);
        k += (size_t)t->vocab.len[ids[i]];
    }
    out[k] = 0;
    *text = out;
    *len = k;
    return LOOM_OK;
}

static void tik_free(void *impl) {
    struct tik *t = impl;
    if (!t) return;
    loom_vocab_free(&t->vocab);
    loom_bpe_pairs_free(&t->pairs);
    loom_splitter_free(&t->split);
    free(t);
}

static const struct loom_tokenizer_ops TIK_OPS = {
    .free = tik_free,
    .encode = tik_encode,
    .decode = tik_decode,
};

/* ---- loading -------------------------------------------------------------------------------- */

/* Add the token of rank `rank` unless it is beyond the kept ranks. */
static enum loom_status add_rank(struct tik *t, const char *path, int64_t rank, int64_t expect,
                                 const char *b64, size_t b64n, int64_t nspecial, int64_t keep,
                                 char *buf) {
    if (rank != expect)
        return loom_fail(LOOM_ERR_FORMAT, "%s: rank %lld where %lld was due (ranks must be 0, 1, "
                         "2, ... in order)", path, (long long)rank, (long long)expect);
    if (keep >= 0 && rank >= keep) return LOOM_OK;
    size_t n;
    if (!b64_decode(b64, b64n, buf, &n))
        return loom_fail(LOOM_ERR_FORMAT, "%s: rank %lld: \"%.*s\" is not base64", path,
                         (long long)rank, (int)(b64n > 40 ? 40 : b64n), b64);
    enum loom_status s = loom_vocab_add(&t->vocab, (int32_t)(nspecial + rank), buf, n, true);
    if (s != LOOM_OK) return loom_fail(LOOM_ERR_FORMAT, "%s: rank %lld: %s", path, (long long)rank,
                                       loom_last_error());
    if (loom_vocab_find(&t->vocab, buf, n) != nspecial + rank)
        return loom_fail(LOOM_ERR_FORMAT, "%s: rank %lld repeats the bytes of an earlier rank",
                         path, (long long)rank);
    return LOOM_OK;
}

static enum loom_status read_ranks(struct tik *t, const char *path, int64_t nspecial, int64_t keep,
                                   int64_t *nranks) {
    char *buf;
    size_t len;
    LOOM_CHECK(loom_read_file(path, RANKS_MAX_BYTES, &buf, &len));
    char *tmp = malloc(len + 1);
    enum loom_status s = tmp ? loom_vocab_init(&t->vocab, len / 8 + 1024)
                             : loom_fail(LOOM_ERR_OOM, "out of memory reading %s", path);
    int64_t count = 0;
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) i++;
    if (s == LOOM_OK && i < len && buf[i] == '[') { /* Megatron-LM's JSON list */
        json_error_t err;
        json_t *j = json_loadb(buf, len, 0, &err);
        if (!json_is_array(j)) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: not a JSON list of {rank, token_bytes, token_str} "
                          "(line %d: %s)", path, err.line, err.text);
        } else {
            size_t k;
            json_t *e;
            json_array_foreach(j, k, e) {
                json_t *r = json_object_get(e, "rank"), *tb = json_object_get(e, "token_bytes");
                if (!json_is_integer(r) || !json_is_string(tb)) {
                    s = loom_fail(LOOM_ERR_FORMAT, "%s: entry %zu lacks an integer rank or a "
                                  "token_bytes string", path, k);
                    break;
                }
                s = add_rank(t, path, json_integer_value(r), count, json_string_value(tb),
                             json_string_length(tb), nspecial, keep, tmp);
                if (s != LOOM_OK) break;
                count++;
            }
        }
        json_decref(j);
    } else if (s == LOOM_OK) { /* tiktoken's lines */
        size_t lineno = 0;
        for (char *p = buf, *end = buf + len; p < end && s == LOOM_OK;) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            char *le = nl ? nl : end;
            char *line = p;
            p = nl ? nl + 1 : end;
            lineno++;
            while (le > line && (le[-1] == '\r' || le[-1] == ' ')) le--;
            if (le == line) continue;
            char *sp = memchr(line, ' ', (size_t)(le - line));
            char *after;
            long long r = sp ? strtoll(sp + 1, &after, 10) : -1;
            if (!sp || after != le || r < 0) {
                s = loom_fail(LOOM_ERR_FORMAT, "%s line %zu: expected \"<base64 token> <rank>\"",
                              path, lineno);
                break;
            }
            s = add_rank(t, path, r, count, line, (size_t)(sp - line), nspecial, keep, tmp);
            count++;
        }
    }
    free(tmp);
    free(buf);
    if (s == LOOM_OK && count < 256)
        s = loom_fail(LOOM_ERR_FORMAT, "%s: %lld ranks; a rank file has at least the 256 bytes",
                      path, (long long)count);
    *nranks = count;
    return s;
}

/* every split of every rank token into two rank tokens: (left, right) -> (its rank, its id) */
static enum loom_status build_pairs(struct tik *t, int64_t nspecial) {
    const struct loom_vocab *v = &t->vocab;
    LOOM_CHECK(loom_bpe_pairs_init(&t->pairs, (size_t)v->n_ids * 4));
    for (int64_t id = nspecial; id < v->n_ids; id++) {
        const char *b = v->bytes + v->start[id];
        size_t n = (size_t)v->len[id];
        for (size_t k = 1; k < n; k++) {
            int32_t a = loom_vocab_find(v, b, k), c = loom_vocab_find(v, b + k, n - k);
            if (a >= 0 && c >= 0)
                LOOM_CHECK(loom_bpe_pairs_put(&t->pairs, a, c, (int32_t)(id - nspecial),
                                              (int32_t)id, true));
        }
    }
    return LOOM_OK;
}

enum loom_status loom_tokenizer_tiktoken_load(struct loom_tokenizer *tok,
                                              const struct loom_tokenizer_spec *sp) {
    const char *path = sp->tokenizer_model;
    int64_t nspecial = sp->tiktoken_num_special_tokens < 0 ? 1000 : sp->tiktoken_num_special_tokens;
    const char *pat = NULL;
    for (size_t k = 0; sp->tiktoken_pattern && k < sizeof PATTERNS / sizeof PATTERNS[0]; k++)
        if (strcmp(sp->tiktoken_pattern, PATTERNS[k].name) == 0) pat = PATTERNS[k].pattern;
    if (!pat)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--tiktoken-pattern: %s%s%s; TikTokenizer needs "
                         "one of v1, v2 (Megatron-LM's), cl100k, o200k (tiktoken's)",
                         sp->tiktoken_pattern ? "'" : "", sp->tiktoken_pattern ? sp->tiktoken_pattern
                         : "missing", sp->tiktoken_pattern ? "' is not known" : "");
    if (nspecial < 3 || nspecial > (1 << 20))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--tiktoken-num-special-tokens: %lld; must be "
                         "between 3 (<unk> <s> </s>) and 2^20", (long long)nspecial);
    if (sp->vocab_size != 0 && sp->vocab_size < nspecial + 256)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--vocab-size %lld with TikTokenizer: must exceed "
                         "--tiktoken-num-special-tokens (%lld) by at least the 256 byte tokens",
                         (long long)sp->vocab_size, (long long)nspecial);
    struct tik *t = calloc(1, sizeof *t);
    if (!t) return loom_fail(LOOM_ERR_OOM, "out of memory loading %s", path);
    int64_t nranks = 0;
    int64_t keep = sp->vocab_size > 0 ? sp->vocab_size - nspecial : -1;
    enum loom_status s = read_ranks(t, path, nspecial, keep, &nranks);
    if (s == LOOM_OK && keep > nranks)
        s = loom_fail(LOOM_ERR_INVALID_ARG, "--vocab-size %lld with TikTokenizer: %s has %lld "
                      "ranks, so at most %lld (with %lld special tokens)", (long long)sp->vocab_size,
                      path, (long long)nranks, (long long)(nranks + nspecial), (long long)nspecial);
    for (int b = 0; b < 256 && s == LOOM_OK; b++) {
        char c = (char)b;
        t->byte_id[b] = loom_vocab_find(&t->vocab, &c, 1);
        if (t->byte_id[b] < 0)
            s = loom_fail(LOOM_ERR_FORMAT, "%s: no rank for the single byte 0x%02X", path, b);
    }
    char name[32];
    for (int64_t k = 0; k < nspecial && s == LOOM_OK; k++) {
        if (k < 3) snprintf(name, sizeof name, "%s", (const char *[]){"<unk>", "<s>", "</s>"}[k]);
        else snprintf(name, sizeof name, "<SPECIAL_%lld>", (long long)k);
        s = loom_vocab_add(&t->vocab, (int32_t)k, name, strlen(name), false);
    }
    if (s == LOOM_OK) s = build_pairs(t, nspecial);
    if (s == LOOM_OK) s = loom_splitter_init(&t->split, pat, LOOM_WS_UNICODE, "--tiktoken-pattern");
    if (s != LOOM_OK) {
        tik_free(t);
        return s;
    }
    t->serial = loom_tokenizer_serial();
    tok->ops = &TIK_OPS;
    tok->impl = t;
    tok->vocab_size = t->vocab.n_ids;
    tok->eod = 2;
    tok->unk = 0;
    return LOOM_OK;
}
