/* HuggingFaceTokenizer: a Hugging Face tokenizer.json with a BPE model.
 *
 * What a tokenizer.json holds and how loom reads it:
 *   added_tokens     literal tokens found in the raw text first (leftmost, longest at a place);
 *                    the text between them goes through the rest. (lstrip/rstrip/single_word are
 *                    not applied; the files in use set them false.)
 *   normalizer       null, NFC, Prepend, Replace (a string pattern), or a Sequence of these.
 *   pre_tokenizer    null, Split (a regex or string, behaviour Isolated), ByteLevel (with or
 *                    without GPT-2's regex), Metaspace, or a Sequence of these. Regexes run on
 *                    PCRE2 with \s meaning Unicode White_Space, as in the regex engines the
 *                    files were written for.
 *   model            BPE: vocab, merges ("a b" strings or [a, b] pairs; the merge's index is its
 *                    priority), ignore_merges (a piece that is a token as a whole is that token),
 *                    byte_fallback (a character missing from the vocabulary becomes its <0xXX>
 *                    byte tokens), unk_token with fuse_unk. Byte-level files (ByteLevel
 *                    pre-tokenizer) spell byte b as GPT-2's character bytes_to_unicode(b); their
 *                    tokens are kept as raw bytes here, and their symbols are bytes.
 *   post_processor   TemplateProcessing (the "single" template: special tokens around the text),
 *                    ByteLevel (no ids), or a Sequence of these.
 *   decoder          ByteLevel; Replace, ByteFallback, Fuse, Strip and Metaspace, alone or in a
 *                    Sequence.
 * The end-of-document id is the eos_token of tokenizer_config.json beside tokenizer.json
 * (Megatron-LM's eod for this type is the tokenizer's eos_token_id); -1 without one.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/tokenizer_impl.h"
#include "loom/fileio.h"

#define JSON_MAX_BYTES ((size_t)1 << 31)
#define MAX_SPLITS 4
#define MAX_NORM 8
#define MAX_AROUND 8

static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char SPM_SPACE[] = "\xE2\x96\x81"; /* U+2581, SentencePiece's visible space */

enum norm_kind { NORM_NFC, NORM_PREPEND, NORM_REPLACE };
struct norm_step {
    enum norm_kind kind;
    char *a, *b; /* PREPEND: a; REPLACE: a -> b */
};

enum dec_kind { DEC_PIECES, DEC_BYTELEVEL };

struct hf {
    struct loom_vocab vocab; /* model tokens (raw bytes for byte-level files) and added tokens */
    struct loom_bpe_pairs pairs;
    bool byte_level, byte_fallback, ignore_merges, fuse_unk;
    int32_t unk;
    int32_t byte_id[256]; /* byte-level: the byte's token; byte fallback: <0xXX>; -1 if none */
    struct norm_step norm[MAX_NORM];
    int nnorm;
    struct loom_splitter split[MAX_SPLITS];
    int nsplit;
    bool metaspace_split; /* pieces start at each U+2581 */
    struct loom_specials added;
    bool *is_added; /* [n_ids]: an added token (decoded as its content) */
    int32_t before[MAX_AROUND], after[MAX_AROUND];
    int nbefore, nafter;
    enum dec_kind dec;
    bool dec_replace, dec_bytefallback;
    int dec_strip; /* leading spaces removed from the decoded text */
    uint32_t serial;
    int16_t cp_to_byte[324];
};

/* ---- loading helpers ------------------------------------------------------------------------ */

static const char *jstr(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(json_t *o, const char *key) { return json_is_true(json_object_get(o, key)); }

static char *dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* A token string of the file as the bytes loom keeps. */
static size_t tok_bytes(const struct hf *h, const char *s, size_t n, char *out) {
    size_t k;
    if (h->byte_level && loom_byte_alphabet_decode(h->cp_to_byte, s, n, out, &k)) return k;
    memcpy(out, s, n);
    return n;
}

static enum loom_status add_norm(struct hf *h, json_t *n, const char *path) {
    const char *type = jstr(n, "type");
    if (!type) return loom_fail(LOOM_ERR_FORMAT, "%s: a normalizer without a type", path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers"), *e;
        size_t i;
        json_array_foreach(list, i, e) LOOM_CHECK(add_norm(h, e, path));
        return LOOM_OK;
    }
    if (h->nnorm == MAX_NORM)
        return loom_fail(LOOM_ERR_FORMAT, "%s: more than %d normalizers", path, MAX_NORM);
    struct norm_step *st = &h->norm[h->nnorm];
    if (strcmp(type, "NFC") == 0) {
        st->kind = NORM_NFC;
    } else if (strcmp(type, "Prepend") == 0 && jstr(n, "prepend")) {
        st->kind = NORM_PREPEND;
        st->a = dup(jstr(n, "prepend"));
        if (!st->a) return loom_fail(LOOM_ERR_OOM, "out of memory");
    } else if (strcmp(type, "Replace") == 0 && jstr(json_object_get(n, "pattern"), "String") &&
               jstr(n, "content")) {
        st->kind = NORM_REPLACE;
        st->a = dup(jstr(json_object_get(n, "pattern"), "String"));
        st->b = dup(jstr(n, "content"));
        if (!st->a || !st->b) return loom_fail(LOOM_ERR_OOM, "out of memory");
        if (!*st->a) return loom_fail(LOOM_ERR_FORMAT, "%s: a Replace normalizer of \"\"", path);
    } else {
        return loom_fail(LOOM_ERR_FORMAT, "%s: normalizer %s is not supported (loom reads NFC, "
                         "Prepend, Replace with a string pattern, and Sequences of them)", path, type);
    }
    h->nnorm++;
    return LOOM_OK;
}

static enum loom_status add_split(struct hf *h, const char *pattern, const char *path) {
    if (h->nsplit == MAX_SPLITS)
        return loom_fail(LOOM_ERR_FORMAT, "%s: more than %d regex pre-tokenizers", path, MAX_SPLITS);
    LOOM_CHECK(loom_splitter_init(&h->split[h->nsplit], pattern, LOOM_WS_UNICODE, path));
    h->nsplit++;
    return LOOM_OK;
}

static enum loom_status add_pretok(struct hf *h, json_t *p, const char *path) {
    const char *type = jstr(p, "type");
    if (!type) return loom_fail(LOOM_ERR_FORMAT, "%s: a pre_tokenizer without a type", path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers"), *e;
        size_t i;
        json_array_foreach(list, i, e) LOOM_CHECK(add_pretok(h, e, path));
        return LOOM_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        h->byte_level = true;
        if (jbool(p, "add_prefix_space"))
            return loom_fail(LOOM_ERR_FORMAT, "%s: ByteLevel pre-tokenizer with add_prefix_space "
                             "is not supported", path);
        if (json_object_get(p, "use_regex") == NULL || jbool(p, "use_regex"))
            return add_split(h, GPT2_REGEX, path);
        return LOOM_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const char *behavior = jstr(p, "behavior");
        json_t *pat = json_object_get(p, "pattern");
        if (!behavior || strcmp(behavior, "Isolated") != 0 || jbool(p, "invert"))
            return loom_fail(LOOM_ERR_FORMAT, "%s: Split pre-tokenizer with behavior %s%s is not "
                             "supported (loom reads Isolated)", path, behavior ? behavior : "(none)",
                             jbool(p, "invert") ? " and invert" : "");
        if (jstr(pat, "Regex")) return add_split(h, jstr(pat, "Regex"), path);
        if (jstr(pat, "String")) { /* a literal: quote it for PCRE2 */
            const char *lit = jstr(pat, "String");
            size_t n = strlen(lit);
            char *q = malloc(n + 5);
            if (!q) return loom_fail(LOOM_ERR_OOM, "out of memory");
            snprintf(q, n + 5, "\\Q%s\\E", lit);
            enum loom_status s = strstr(lit, "\\E") ? loom_fail(LOOM_ERR_FORMAT, "%s: Split string "
                                 "contains \\E", path) : add_split(h, q, path);
            free(q);
            return s;
        }
        return loom_fail(LOOM_ERR_FORMAT, "%s: Split pre-tokenizer without a Regex or String "
                         "pattern", path);
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *rep = jstr(p, "replacement");
        const char *scheme = jstr(p, "prepend_scheme");
        if (rep && strcmp(rep, SPM_SPACE) != 0)
            return loom_fail(LOOM_ERR_FORMAT, "%s: Metaspace with replacement \"%s\" is not "
                             "supported (loom reads U+2581)", path, rep);
        if (h->nnorm + 2 > MAX_NORM) return loom_fail(LOOM_ERR_FORMAT, "%s: too many steps", path);
        bool prepend = scheme ? strcmp(scheme, "never") != 0
                              : json_object_get(p, "add_prefix_space") == NULL || jbool(p, "add_prefix_space");
        h->norm[h->nnorm++] = (struct norm_step){NORM_REPLACE, dup(" "), dup(SPM_SPACE)};
        if (prepend) h->norm[h->nnorm++] = (struct norm_step){NORM_PREPEND, dup(SPM_SPACE), NULL};
        h->metaspace_split = json_object_get(p, "split") == NULL || jbool(p, "split");
        return LOOM_OK;
    }
    return loom_fail(LOOM_ERR_FORMAT, "%s: pre_tokenizer %s is not supported (loom reads Split, "
                     "ByteLevel, Metaspace and Sequences of them)", path, type);
}

static enum loom_status add_post(struct hf *h, json_t *p, const char *path) {
    const char *type = jstr(p, "type");
    if (!type) return loom_fail(LOOM_ERR_FORMAT, "%s: a post_processor without a type", path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "processors"), *e;
        size_t i;
        json_array_foreach(list, i, e) LOOM_CHECK(add_post(h, e, path));
        return LOOM_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) return LOOM_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") != 0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: post_processor %s is not supported (loom reads "
                         "TemplateProcessing and ByteLevel)", path, type);
    json_t *single = json_object_get(p, "single"), *e;
    json_t *specials = json_object_get(p, "special_tokens");
    bool seen_seq = false;
    size_t i;
    json_array_foreach(single, i, e) {
        if (json_object_get(e, "Sequence")) {
            seen_seq = true;
            continue;
        }
        const char *name = jstr(json_object_get(e, "SpecialToken"), "id");
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *idv;
        if (!name || !json_is_array(ids))
            return loom_fail(LOOM_ERR_FORMAT, "%s: TemplateProcessing names special token %s "
                             "without ids", path, name ? name : "(none)");
        size_t k;
        json_array_foreach(ids, k, idv) {
            int *cnt = seen_seq ? &h->nafter : &h->nbefore;
            int32_t *dst = seen_seq ? h->after : h->before;
            if (*cnt == MAX_AROUND || !json_is_integer(idv))
                return loom_fail(LOOM_ERR_FORMAT, "%s: TemplateProcessing special token %s: bad ids",
                                 path, name);
            dst[(*cnt)++] = (int32_t)json_integer_value(idv);
        }
    }
    return LOOM_OK;
}

static enum loom_status add_decoder(struct hf *h, json_t *d, const char *path) {
    const char *type = jstr(d, "type");
    if (!type) return loom_fail(LOOM_ERR_FORMAT, "%s: a decoder without a type", path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(d, "decoders"), *e;
        size_t i;
        json_array_foreach(list, i, e) LOOM_CHECK(add_decoder(h, e, path));
        return LOOM_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        h->dec = DEC_BYTELEVEL;
    } else if (strcmp(type, "Replace") == 0) {
        const char *from = jstr(json_object_get(d, "pattern"), "String"), *to = jstr(d, "content");
        if (!from || !to || strcmp(from, SPM_SPACE) != 0 || strcmp(to, " ") != 0)
            return loom_fail(LOOM_ERR_FORMAT, "%s: Replace decoder other than U+2581 -> space is "
                             "not supported", path);
        h->dec_replace = true;
    } else if (strcmp(type, "ByteFallback") == 0) {
        h->dec_bytefallback = true;
    } else if (strcmp(type, "Fuse") == 0) {
        /* the pieces are joined anyway */
    } else if (strcmp(type, "Strip") == 0) {
        const char *c = jstr(d, "content");
        json_t *stop = json_object_get(d, "stop");
        if (!c || strcmp(c, " ") != 0 || (stop && json_integer_value(stop) != 0))
            return loom_fail(LOOM_ERR_FORMAT, "%s: Strip decoder other than leading spaces is not "
                             "supported", path);
        h->dec_strip = (int)json_integer_value(json_object_get(d, "start"));
    } else if (strcmp(type, "Metaspace") == 0) {
        const char *scheme = jstr(d, "prepend_scheme");
        h->dec_replace = true;
        bool prefix = scheme ? strcmp(scheme, "never") != 0
                             : json_object_get(d, "add_prefix_space") == NULL || jbool(d, "add_prefix_space");
        if (prefix) h->dec_strip = 1;
    } else {
        return loom_fail(LOOM_ERR_FORMAT, "%s: decoder %s is not supported (loom reads ByteLevel, "
                         "Replace, ByteFallback, Fuse, Strip, Metaspace)", path, type);
    }
    return LOOM_OK;
}

/* "a b" or ["a", "b"] */
static bool merge_parts(json_t *m, const char **a, size_t *al, const char **b, size_t *bl) {
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *al = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bl = json_string_length(json_array_get(m, 1));
        return true;
    }
    if (!json_is_string(m)) return false;
    const char *s = json_string_value(m);
    size_t n = json_string_length(m);
    const char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp + 1 == s + n || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return false;
    *a = s;
    *al = (size_t)(sp - s);
    *b = sp + 1;
    *bl = (size_t)(s + n - sp - 1);
    return true;
}

static enum loom_status load_model(struct hf *h, json_t *model, const char *path) {
    const char *type = jstr(model, "type");
    if (!type || strcmp(type, "BPE") != 0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: model type %s is not supported (loom reads BPE; "
                         "Unigram and WordPiece tokenizer.json files are not)", path,
                         type ? type : "(none)");
    if (jstr(model, "continuing_subword_prefix") && *jstr(model, "continuing_subword_prefix"))
        return loom_fail(LOOM_ERR_FORMAT, "%s: BPE continuing_subword_prefix is not supported", path);
    if (jstr(model, "end_of_word_suffix") && *jstr(model, "end_of_word_suffix"))
        return loom_fail(LOOM_ERR_FORMAT, "%s: BPE end_of_word_suffix is not supported", path);
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0.0)
        return loom_fail(LOOM_ERR_FORMAT, "%s: BPE dropout is not supported", path);
    h->byte_fallback = jbool(model, "byte_fallback");
    h->ignore_merges = jbool(model, "ignore_merges");
    h->fuse_unk = jbool(model, "fuse_unk");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return loom_fail(LOOM_ERR_FORMAT, "%s: model.vocab (object) or model.merges (array) missing",
                         path);
    LOOM_CHECK(loom_vocab_init(&h->vocab, json_object_size(vocab)));
    const char *key;
    size_t klen;
    json_t *val;
    char *buf = NULL;
    size_t cap = 0;
    enum loom_status s = LOOM_OK;
    json_object_keylen_foreach(vocab, key, klen, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (1 << 24)) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: vocab token \"%.*s\" has no valid id", path,
                          (int)(klen > 60 ? 60 : klen), key);
            break;
        }
        if (klen > cap) {
            cap = 2 * klen + 64;
            free(buf);
            buf = malloc(cap);
            if (!buf) {
                s = loom_fail(LOOM_ERR_OOM, "out of memory");
                break;
            }
        }
        size_t n = tok_bytes(h, key, klen, buf);
        s = loom_vocab_add(&h->vocab, (int32_t)json_integer_value(val), buf, n, true);
        if (s != LOOM_OK) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: %s (token \"%.*s\")", path, loom_last_error(),
                          (int)(klen > 60 ? 60 : klen), key);
            break;
        }
    }
    const char *unk = jstr(model, "unk_token");
    h->unk = unk ? loom_vocab_find(&h->vocab, unk, strlen(unk)) : -1;
    if (s == LOOM_OK && unk && h->unk < 0)
        s = loom_fail(LOOM_ERR_FORMAT, "%s: unk_token \"%s\" is not in the vocab", path, unk);
    for (int b = 0; b < 256 && s == LOOM_OK; b++) {
        char tb[8];
        if (h->byte_level) {
            tb[0] = (char)b;
            h->byte_id[b] = loom_vocab_find(&h->vocab, tb, 1);
            if (h->byte_id[b] < 0)
                s = loom_fail(LOOM_ERR_FORMAT, "%s: byte-level vocabulary without a token for "
                              "byte 0x%02X", path, b);
        } else {
            snprintf(tb, sizeof tb, "<0x%02X>", b);
            h->byte_id[b] = loom_vocab_find(&h->vocab, tb, 6);
            if (h->byte_fallback && h->byte_id[b] < 0)
                s = loom_fail(LOOM_ERR_FORMAT, "%s: byte_fallback without the token %s", path, tb);
        }
    }
    if (s == LOOM_OK) s = loom_bpe_pairs_init(&h->pairs, json_array_size(merges));
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        if (s != LOOM_OK) break;
        const char *a, *b;
        size_t al, bl;
        if (!merge_parts(m, &a, &al, &b, &bl)) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: merge %zu is not \"a b\" nor [a, b]", path, i);
            break;
        }
        if (al + bl > cap) {
            cap = 2 * (al + bl) + 64;
            free(buf);
            buf = malloc(cap);
            if (!buf) {
                s = loom_fail(LOOM_ERR_OOM, "out of memory");
                break;
            }
        }
        size_t an = tok_bytes(h, a, al, buf);
        size_t bn = tok_bytes(h, b, bl, buf + an);
        int32_t ia = loom_vocab_find(&h->vocab, buf, an), ib = loom_vocab_find(&h->vocab, buf + an, bn);
        int32_t iab = loom_vocab_find(&h->vocab, buf, an + bn);
        if (ia < 0 || ib < 0 || iab < 0) {
            s = loom_fail(LOOM_ERR_FORMAT, "%s: merge %zu (\"%.*s\" \"%.*s\") uses a token that is "
                          "not in the vocab", path, i, (int)(al > 40 ? 40 : al), a,
                          (int)(bl > 40 ? 40 : bl), b);
            break;
        }
        s = loom_bpe_pairs_put(&h->pairs, ia, ib, (int32_t)i, iab, true);
    }
    free(buf);
    return s;
}

static enum loom_status load_added(struct hf *h, json_t *added, const char *path) {
    size_t i;
    json_t *e;
    json_array_foreach(added, i, e) {
        json_t *idv = json_object_get(e, "id");
        const char *content = jstr(e, "content");
        if (!json_is_integer(idv) || !content || json_integer_value(idv) < 0 ||
            json_integer_value(idv) >= (1 << 24))
            return loom_fail(LOOM_ERR_FORMAT, "%s: added_tokens[%zu] needs an id and a content",
                             path, i);
        int32_t id = (int32_t)json_integer_value(idv);
        size_t n = strlen(content);
        LOOM_CHECK(loom_vocab_reserve_ids(&h->vocab, (int64_t)id + 1));
        if (h->vocab.len[id] >= 0) { /* already a model token: must be the same one */
            if (loom_vocab_find(&h->vocab, content, n) != id &&
                !((size_t)h->vocab.len[id] == n &&
                  memcmp(h->vocab.bytes + h->vocab.start[id], content, n) == 0))
                return loom_fail(LOOM_ERR_FORMAT, "%s: added token \"%s\" has id %d, which the "
                                 "vocab gives to another token", path, content, (int)id);
        } else {
            LOOM_CHECK(loom_vocab_add(&h->vocab, id, content, n, false));
        }
        LOOM_CHECK(loom_specials_add(&h->added, content, n, id));
    }
    h->is_added = calloc((size_t)h->vocab.n_ids, sizeof *h->is_added);
    if (!h->is_added) return loom_fail(LOOM_ERR_OOM, "out of memory");
    for (size_t k = 0; k < h->added.n; k++) h->is_added[h->added.v[k].id] = true;
    return LOOM_OK;
}

/* ---- encoding ------------------------------------------------------------------------------- */

struct enc_ctx {
    const struct hf *h;
    int32_t **ids;
    size_t *n, *cap;
    struct loom_piece_cache *cache;
    int level;
};

/* The BPE model on one piece. */
static enum loom_status model_piece(const struct hf *h, struct enc_ctx *c, const char *p, size_t n) {
    if (n == 0) return LOOM_OK;
    LOOM_CHECK(loom_tokenizer_reserve(c->ids, c->n, c->cap, n));
    int32_t *out = *c->ids + *c->n;
    if (h->ignore_merges) {
        int32_t id = loom_vocab_find(&h->vocab, p, n);
        if (id >= 0 && !h->is_added[id]) {
            out[0] = id;
            *c->n += 1;
            return LOOM_OK;
        }
    }
    uint32_t hash = 0;
    size_t k = loom_piece_cache_lookup(c->cache, h->serial, p, n, out, &hash);
    if (k) {
        *c->n += k;
        return LOOM_OK;
    }
    size_t m = 0;
    if (h->byte_level) {
        for (size_t i = 0; i < n; i++) out[m++] = h->byte_id[(unsigned char)p[i]];
    } else {
        for (size_t i = 0; i < n;) {
            size_t j = i;
            loom_utf8_next((const unsigned char *)p, &j);
            int32_t id = loom_vocab_find(&h->vocab, p + i, j - i);
            if (id >= 0) {
                out[m++] = id;
            } else if (h->byte_fallback) {
                for (size_t b = i; b < j; b++) out[m++] = h->byte_id[(unsigned char)p[b]];
            } else if (h->unk >= 0) {
                if (!(h->fuse_unk && m > 0 && out[m - 1] == h->unk)) out[m++] = h->unk;
            } else {
                return loom_fail(LOOM_ERR_FORMAT, "a character (bytes at %zu of a %zu-byte piece) "
                                 "is not in the vocabulary, which has no unk_token nor byte "
                                 "fallback", i, n);
            }
            i = j;
        }
    }
    k = loom_bpe_merge(&h->pairs, out, m);
    if (k == 0) return loom_fail(LOOM_ERR_OOM, "out of memory encoding a %zu-byte piece", n);
    loom_piece_cache_store(c->cache, h->serial, hash, p, n, out, k);
    *c->n += k;
    return LOOM_OK;
}

static enum loom_status on_piece(void *ctx, const char *p, size_t n) {
    struct enc_ctx *c = ctx;
    const struct hf *h = c->h;
    if (c->level < h->nsplit) {
        struct enc_ctx d = *c;
        d.level++;
        return loom_splitter_run(&h->split[c->level], p, n, on_piece, &d);
    }
    if (!h->metaspace_split) return model_piece(h, c, p, n);
    size_t st = 0; /* pieces begin at each U+2581 */
    for (size_t i = 1; i + 3 <= n; i++)
        if (memcmp(p + i, SPM_SPACE, 3) == 0) {
            LOOM_CHECK(model_piece(h, c, p + st, i - st));
            st = i;
        }
    return model_piece(h, c, p + st, n - st);
}

/* Apply the normalizers to text[0..len); *out is malloc'd (NULL: unchanged). */
static enum loom_status normalize(const struct hf *h, const char *text, size_t len, char **out,
                                  size_t *outn) {
    char *cur = NULL;
    size_t curn = len;
    for (int k = 0; k < h->nnorm; k++) {
        const struct norm_step *st = &h->norm[k];
        const char *src = cur ? cur : text;
        char *nx = NULL;
        size_t nn = 0;
        if (st->kind == NORM_NFC) {
            LOOM_CHECK(loom_utf8_nfc(src, curn, &nx, &nn));
            if (!nx) continue;
        } else if (st->kind == NORM_PREPEND) {
            if (curn == 0) continue;
            size_t pl = strlen(st->a);
            nx = malloc(pl + curn + 1);
            if (!nx) return loom_fail(LOOM_ERR_OOM, "out of memory normalizing");
            memcpy(nx, st->a, pl);
            memcpy(nx + pl, src, curn);
            nn = pl + curn;
        } else {
            size_t al = strlen(st->a), bl = strlen(st->b), count = 0;
            for (size_t i = 0; i + al <= curn;)
                if (memcmp(src + i, st->a, al) == 0) {
                    count++;
                    i += al;
                } else {
                    i++;
                }
            if (count == 0) continue;
            nx = malloc(curn + count * bl + 1);
            if (!nx) return loom_fail(LOOM_ERR_OOM, "out of memory normalizing");
            for (size_t i = 0; i < curn;)
                if (i + al <= curn && memcmp(src + i, st->a, al) == 0) {
                    memcpy(nx + nn, st->b, bl);
                    nn += bl;
                    i += al;
                } else {
                    nx[nn++] = src[i++];
                }
        }
        free(cur);
        cur = nx;
        curn = nn;
    }
    *out = cur;
    *outn = curn;
    return LOOM_OK;
}

static enum loom_status encode_segment(struct enc_ctx *c, const char *text, size_t len) {
    if (len == 0) return LOOM_OK;
    char *norm = NULL;
    size_t nn = 0;
    LOOM_CHECK(normalize(c->h, text, len, &norm, &nn));
    enum loom_status s = on_piece(c, norm ? norm : text, norm ? nn : len);
    free(norm);
    return s;
}

static enum loom_status hf_encode(const void *impl, const char *text, size_t len, int32_t **ids,
                                  size_t *n, size_t *cap) {
    const struct hf *h = impl;
    struct enc_ctx c = {h, ids, n, cap, loom_piece_cache_get(), 0};
    LOOM_CHECK(loom_tokenizer_reserve(ids, n, cap, (size_t)(h->nbefore + h->nafter)));
    for (int k = 0; k < h->nbefore; k++) (*ids)[(*n)++] = h->before[k];
    size_t pos = 0, at, which;
    while (loom_specials_next(&h->added, text, len, pos, true, &at, &which)) {
        LOOM_CHECK(encode_segment(&c, text + pos, at - pos));
        LOOM_CHECK(loom_tokenizer_reserve(ids, n, cap, 1));
        (*ids)[(*n)++] = h->added.v[which].id;
        pos = at + h->added.v[which].n;
    }
    LOOM_CHECK(encode_segment(&c, text + pos, len - pos));
    LOOM_CHECK(loom_tokenizer_reserve(ids, n, cap, (size_t)h->nafter));
    for (int k = 0; k < h->nafter; k++) (*ids)[(*n)++] = h->after[k];
    return LOOM_OK;
}

/* ---- decoding ------------------------------------------------------------------------------- */

static int byte_token(const struct hf *h, int32_t id) {
    if (!h->dec_bytefallback || h->vocab.len[id] != 6) return -1;
    const char *s = h->vocab.bytes + h->vocab.start[id];
    unsigned v;
    char tail;
    if (memcmp(s, "<0x", 3) != 0 || s[5] != '>' || sscanf(s + 3, "%2X%c", &v, &tail) != 2 || tail != '>')
        return -1;
    return (int)v;
}

static enum loom_status hf_decode(const void *impl, const int32_t *ids, size_t n, char **text,
                                  size_t *len) {
    const struct hf *h = impl;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (h->vocab.len[ids[i]] < 0)
            return loom_fail(LOOM_ERR_INVALID_ARG, "tokenizer decode: id %d at position %zu has no "
                             "token", (int)ids[i], i);
        total += (size_t)h->vocab.len[ids[i]] * 3 + 3; /* U+2581 -> ' ' shrinks; U+FFFD grows */
    }
    char *out = malloc(total + 1);
    if (!out) return loom_fail(LOOM_ERR_OOM, "out of memory decoding %zu ids", n);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int b = byte_token(h, ids[i]);
        if (b >= 0) { /* a run of byte tokens: valid UTF-8 as is, else U+FFFD per byte */
            size_t j = i, st = k;
            while (j < n && (b = byte_token(h, ids[j])) >= 0) {
                out[k++] = (char)b;
                j++;
            }
            if (loom_utf8_invalid_offset(out + st, k - st) != k - st) {
                k = st;
                for (size_t q = i; q < j; q++) k += loom_utf8_put(out + k, 0xFFFD);
            }
            i = j;
            continue;
        }
        const char *s = h->vocab.bytes + h->vocab.start[ids[i]];
        size_t l = (size_t)h->vocab.len[ids[i]];
        if (h->dec_replace && !h->is_added[ids[i]]) {
            for (size_t q = 0; q < l;)
                if (q + 3 <= l && memcmp(s + q, SPM_SPACE, 3) == 0) {
                    out[k++] = ' ';
                    q += 3;
                } else {
                    out[k++] = s[q++];
                }
        } else {
            memcpy(out + k, s, l);
            k += l;
        }
        i++;
    }
    size_t skip = 0;
    while ((int)skip < h->dec_strip && skip < k && out[skip] == ' ') skip++;
    memmove(out, out + skip, k - skip);
    k -= skip;
    out[k] = 0;
    *text = out;
    *len = k;
    return LOOM_OK;
}

static void hf_free(void *impl) {
    struct hf *h = impl;
    if (!h) return;
    loom_vocab_free(&h->vocab);
    loom_bpe_pairs_free(&h->pairs);
    for (int k = 0; k < h->nnorm; k++) {
        free(h->norm[k].a);
        free(h->norm[k].b);
    }
    for (int k = 0; k < h->nsplit; k++) loom_splitter_free(&h->split[k]);
    loom_specials_free(&h->added);
    free(h->is_added);
    free(h);
}

static const struct loom_tokenizer_ops HF_OPS = {
    .free = hf_free,
    .encode = hf_encode,
    .decode = hf_decode,
};

/* ---- loading -------------------------------------------------------------------------------- */

/* flags: jansson's decoding flags (JSON_DECODE_INT_AS_REAL for tokenizer_config.json, whose
 * model_max_length may exceed 64 bits) */
static enum loom_status read_json(const char *path, size_t flags, json_t **out) {
    char *buf;
    size_t len;
    LOOM_CHECK(loom_read_file(path, JSON_MAX_BYTES, &buf, &len));
    json_error_t err;
    *out = json_loadb(buf, len, flags, &err);
    free(buf);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return loom_fail(LOOM_ERR_FORMAT, "%s: not a JSON object (line %d, column %d: %s)", path,
                         err.line, err.column, err.text);
    }
    return LOOM_OK;
}

/* eos_token of tokenizer_config.json in dir (a string or {"content": ...}); -1 if none */
static int32_t config_eos(const struct hf *h, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    json_t *cfg;
    if (read_json(path, JSON_DECODE_INT_AS_REAL, &cfg) != LOOM_OK) return -1;
    json_t *e = json_object_get(cfg, "eos_token");
    const char *name = json_is_string(e) ? json_string_value(e) : jstr(e, "content");
    int32_t id = -1;
    if (name) {
        for (size_t k = 0; k < h->added.n && id < 0; k++)
            if (strcmp(h->added.v[k].s, name) == 0) id = h->added.v[k].id;
        if (id < 0) id = loom_vocab_find(&h->vocab, name, strlen(name));
    }
    json_decref(cfg);
    return id;
}

enum loom_status loom_tokenizer_hf_load(struct loom_tokenizer *t, const char *model_path) {
    char path[4096], dir[4096];
    struct stat st;
    if (stat(model_path, &st) != 0)
        return loom_fail(LOOM_ERR_IO, "--tokenizer-model %s: no such file or folder", model_path);
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", model_path);
        snprintf(path, sizeof path, "%s/tokenizer.json", model_path);
        if (stat(path, &st) != 0)
            return loom_fail(LOOM_ERR_IO, "--tokenizer-model %s: the folder has no tokenizer.json "
                             "(loom reads the fast tokenizer's file)", model_path);
    } else {
        snprintf(path, sizeof path, "%s", model_path);
        snprintf(dir, sizeof dir, "%s", model_path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    json_t *j;
    LOOM_CHECK(read_json(path, 0, &j));
    struct hf *h = calloc(1, sizeof *h);
    if (!h) {
        json_decref(j);
        return loom_fail(LOOM_ERR_OOM, "out of memory loading %s", path);
    }
    uint32_t b2c[256];
    loom_byte_alphabet(b2c, h->cp_to_byte);
    enum loom_status s = LOOM_OK;
    json_t *x;
    if ((x = json_object_get(j, "normalizer")) && !json_is_null(x)) s = add_norm(h, x, path);
    if (s == LOOM_OK && (x = json_object_get(j, "pre_tokenizer")) && !json_is_null(x))
        s = add_pretok(h, x, path);
    if (s == LOOM_OK && (x = json_object_get(j, "decoder")) && !json_is_null(x))
        s = add_decoder(h, x, path);
    if (s == LOOM_OK && h->dec == DEC_BYTELEVEL && !h->byte_level)
        s = loom_fail(LOOM_ERR_FORMAT, "%s: ByteLevel decoder without a ByteLevel pre-tokenizer",
                      path);
    if (s == LOOM_OK) {
        x = json_object_get(j, "model");
        s = json_is_object(x) ? load_model(h, x, path)
                              : loom_fail(LOOM_ERR_FORMAT, "%s: no \"model\" object", path);
    }
    if (s == LOOM_OK) s = load_added(h, json_object_get(j, "added_tokens"), path);
    if (s == LOOM_OK && (x = json_object_get(j, "post_processor")) && !json_is_null(x))
        s = add_post(h, x, path);
    for (int k = 0; s == LOOM_OK && k < h->nbefore + h->nafter; k++) {
        int32_t id = k < h->nbefore ? h->before[k] : h->after[k - h->nbefore];
        if (id < 0 || id >= h->vocab.n_ids || h->vocab.len[id] < 0)
            s = loom_fail(LOOM_ERR_FORMAT, "%s: post_processor adds id %d, which has no token",
                          path, (int)id);
    }
    json_decref(j);
    if (s != LOOM_OK) {
        hf_free(h);
        return s;
    }
    h->serial = loom_tokenizer_serial();
    t->ops = &HF_OPS;
    t->impl = h;
    t->vocab_size = h->vocab.n_ids;
    t->eod = config_eos(h, dir);
    t->unk = h->unk;
    t->bos = h->nbefore == 1 ? h->before[0] : -1;
    return LOOM_OK;
}
