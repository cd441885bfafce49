/* SentencePiece models (tokenizer.model), read by loom's own protobuf reader.
 *
 * Why not libsentencepiece: loom reads the few fields it needs from the ModelProto (pieces with
 * their scores and types; the trainer's model type, byte_fallback and special ids; the
 * normalizer's flags) in a few hundred lines, with the same BPE loop as its other tokenizers,
 * and the GPU machines, which carry no SentencePiece, need nothing more. The tests compare it
 * with SentencePiece itself (its WebAssembly build in the pinned @sctg/sentencepiece-js).
 *
 * What is read (field numbers of sentencepiece_model.proto):
 *   ModelProto      1 pieces, 2 trainer_spec, 3 normalizer_spec
 *   SentencePiece   1 piece, 2 score, 3 type (NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4,
 *                   UNUSED 5, BYTE 6)
 *   TrainerSpec     3 model_type (BPE 2 is supported; UNIGRAM, WORD, CHAR are refused),
 *                   35 byte_fallback, 40 unk_id, 41 bos_id, 42 eos_id, 43 pad_id
 *   NormalizerSpec  1 name, 2 precompiled_charsmap (must be empty: the rule-based normalizers
 *                   such as nmt_nfkc are not implemented), 3 add_dummy_prefix,
 *                   4 remove_extra_whitespaces, 5 escape_whitespaces
 *
 * Encoding as SentencePiece's BPE model: normalize (drop leading/trailing spaces and collapse
 * runs if remove_extra_whitespaces; a space in front if add_dummy_prefix; spaces as U+2581 if
 * escape_whitespaces), split into characters (user-defined pieces whole), then merge the adjacent
 * pair whose concatenation is a piece of the highest score (leftmost among equals) until none is;
 * a symbol that is no piece becomes its <0xXX> byte pieces with byte_fallback, else unk.
 * Decoding: pieces with U+2581 as spaces, byte pieces as bytes (U+FFFD for bytes that are not
 * UTF-8), control pieces as nothing, unk as " \u2047 ", and the space the dummy prefix added
 * removed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h"
#include "loom/fileio.h"

#define MODEL_MAX_BYTES ((size_t)1 << 30)

enum { P_NORMAL = 1, P_UNKNOWN = 2, P_CONTROL = 3, P_USER = 4, P_UNUSED = 5, P_BYTE = 6 };

struct spm {
    struct loom_vocab vocab; /* hashed: NORMAL, USER_DEFINED, UNUSED pieces */
    struct loom_bpe_pairs pairs;
    uint8_t *type;           /* [n_ids] */
    struct loom_specials user;   /* user-defined pieces, found whole in the normalized text */
    struct loom_specials extra;  /* Megatron's added special tokens, found in the raw text */
    int64_t n_pieces;
    int32_t byte_id[256];
    bool byte_fallback, add_dummy_prefix, remove_extra_ws, escape_ws;
    int32_t unk_id, bos_id, eos_id, pad_id;
    enum loom_spm_flavor flavor;
};

/* ---- protobuf ------------------------------------------------------------------------------- */

struct pb {
    const unsigned char *p, *end;
};

static bool pb_varint(struct pb *b, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
        unsigned char c = *b->p++;
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* next field: number, wire type, and for type 2 the payload; false at the end or on error
 * (*bad set) */
struct pb_field {
    uint32_t num, wt;
    uint64_t v;            /* wire types 0, 1, 5 */
    const unsigned char *data; /* wire type 2 */
    size_t len;
};

static bool pb_next(struct pb *b, struct pb_field *f, bool *bad) {
    if (b->p >= b->end) return false;
    uint64_t key;
    if (!pb_varint(b, &key)) goto fail;
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    switch (f->wt) {
    case 0:
        if (!pb_varint(b, &f->v)) goto fail;
        return true;
    case 1:
        if (b->end - b->p < 8) goto fail;
        memcpy(&f->v, b->p, 8);
        b->p += 8;
        return true;
    case 5: {
        if (b->end - b->p < 4) goto fail;
        uint32_t x;
        memcpy(&x, b->p, 4);
        f->v = x;
        b->p += 4;
        return true;
    }
    case 2: {
        uint64_t n;
        if (!pb_varint(b, &n) || n > (uint64_t)(b->end - b->p)) goto fail;
        f->data = b->p;
        f->len = (size_t)n;
        b->p += n;
        return true;
    }
    default:
        goto fail;
    }
fail:
    *bad = true;
    return false;
}

/* ---- loading -------------------------------------------------------------------------------- */

struct piece {
    const unsigned char *s;
    size_t n;
    float score;
    int type;
};

static enum loom_status parse(const char *path, const unsigned char *buf, size_t len,
                              struct spm *m, struct piece **pieces, size_t *npieces) {
    struct pb top = {buf, buf + len};
    struct pb_field f;
    bool bad = false;
    size_t cap = 0, n = 0;
    struct piece *pc = NULL;
    int model_type = 1; /* UNIGRAM is the proto's default */
    const unsigned char *charsmap = NULL;
    size_t charsmap_len = 0;
    m->add_dummy_prefix = m->remove_extra_ws = m->escape_ws = true;
    m->unk_id = 0;
    m->bos_id = 1;
    m->eos_id = 2;
    m->pad_id = -1;
    while (pb_next(&top, &f, &bad)) {
        if (f.wt != 2) continue;
        struct pb sub = {f.data, f.data + f.len};
        struct pb_field g;
        if (f.num == 1) {
            struct piece p = {NULL, 0, 0.0f, P_NORMAL};
            while (pb_next(&sub, &g, &bad)) {
                if (g.num == 1 && g.wt == 2) {
                    p.s = g.data;
                    p.n = g.len;
                } else if (g.num == 2 && g.wt == 5) {
                    uint32_t x = (uint32_t)g.v;
                    memcpy(&p.score, &x, 4);
                } else if (g.num == 3 && g.wt == 0) {
                    p.type = (int)g.v;
                }
            }
            if (bad) break;
            if (!p.s || p.type < P_NORMAL || p.type > P_BYTE) {
                free(pc);
                return loom_fail(LOOM_ERR_FORMAT, "%s: piece %zu has no text or an unknown type "
                                 "%d", path, n, p.type);
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                struct piece *q = realloc(pc, cap * sizeof *q);
                if (!q) {
                    free(pc);
                    return loom_fail(LOOM_ERR_OOM, "out of memory reading %s", path);
                }
                pc = q;
            }
            pc[n++] = p;
        } else if (f.num == 2) {
            while (pb_next(&sub, &g, &bad)) {
                if (g.wt != 0) continue;
                if (g.num == 3) model_type = (int)g.v;
                else if (g.num == 35) m->byte_fallback = g.v != 0;
                else if (g.num == 40) m->unk_id = (int32_t)g.v;
                else if (g.num == 41) m->bos_id = (int32_t)g.v;
                else if (g.num == 42) m->eos_id = (int32_t)g.v;
                else if (g.num == 43) m->pad_id = (int32_t)g.v;
            }
        } else if (f.num == 3) {
            while (pb_next(&sub, &g, &bad)) {
                if (g.num == 2 && g.wt == 2) {
                    charsmap = g.data;
                    charsmap_len = g.len;
                } else if (g.wt == 0 && g.num == 3) {
                    m->add_dummy_prefix = g.v != 0;
                } else if (g.wt == 0 && g.num == 4) {
                    m->remove_extra_ws = g.v != 0;
                } else if (g.wt == 0 && g.num == 5) {
                    m->escape_ws = g.v != 0;
                }
            }
        }
        if (bad) break;
    }
    (void)charsmap;
    if (bad || n == 0) {
        free(pc);
        return loom_fail(LOOM_ERR_FORMAT, "%s: not a SentencePiece model (a ModelProto with "
                         "pieces)", path);
    }
    if (model_type != 2) {
        free(pc);
        return loom_fail(LOOM_ERR_FORMAT, "%s: SentencePiece model type %s is not supported "
                         "(loom reads BPE models, such as Llama 2's)", path,
                         model_type == 1 ? "UNIGRAM" : model_type == 3 ? "WORD" :
                         model_type == 4 ? "CHAR" : "(unknown)");
    }
    if (charsmap_len > 0) {
        free(pc);
        return loom_fail(LOOM_ERR_FORMAT, "%s: the model's normalizer has a precompiled "
                         "character map (such as nmt_nfkc), which loom does not implement; "
                         "models with the identity normalizer are supported", path);
    }
    *pieces = pc;
    *npieces = n;
    return LOOM_OK;
}

struct scored {
    float score;
    int32_t id;
};

/* descending score, then ascending id */
static int by_score(const void *a, const void *b) {
    const struct scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static enum loom_status build(struct spm *m, const char *path, struct piece *pc, size_t n) {
    LOOM_CHECK(loom_vocab_init(&m->vocab, n));
    m->type = malloc(n + 16);
    if (!m->type) return loom_fail(LOOM_ERR_OOM, "out of memory");
    for (int b = 0; b < 256; b++) m->byte_id[b] = -1;
    for (size_t i = 0; i < n; i++) {
        int t = pc[i].type;
        bool hashed = t == P_NORMAL || t == P_USER || t == P_UNUSED;
        LOOM_CHECK(loom_vocab_add(&m->vocab, (int32_t)i, pc[i].s, pc[i].n, hashed));
        m->type[i] = (uint8_t)t;
        if (t == P_USER) LOOM_CHECK(loom_specials_add(&m->user, (const char *)pc[i].s, pc[i].n, (int32_t)i));
        unsigned v;
        char tail;
        if (t == P_BYTE && pc[i].n == 6 && sscanf((const char *)pc[i].s, "<0x%2X%c", &v, &tail) == 2 &&
            tail == '>' && v < 256)
            m->byte_id[v] = (int32_t)i;
    }
    for (int b = 0; b < 256 && m->byte_fallback; b++)
        if (m->byte_id[b] < 0)
            return loom_fail(LOOM_ERR_FORMAT, "%s: byte_fallback without the byte piece <0x%02X>",
                             path, b);
    if (m->unk_id < 0 || (size_t)m->unk_id >= n)
        return loom_fail(LOOM_ERR_FORMAT, "%s: unk_id %d is not a piece", path, (int)m->unk_id);
    /* priorities: pieces by descending score, equal scores sharing one */
    struct scored *order = malloc(n * sizeof *order);
    int32_t *prio = malloc(n * sizeof *prio);
    if (!order || !prio) {
        free(order);
        free(prio);
        return loom_fail(LOOM_ERR_OOM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) order[i] = (struct scored){pc[i].score, (int32_t)i};
    qsort(order, n, sizeof *order, by_score);
    int32_t r = 0;
    for (size_t k = 0; k < n; k++) {
        if (k > 0 && order[k].score != order[k - 1].score) r = (int32_t)k;
        prio[order[k].id] = r;
    }
    free(order);
    enum loom_status s = loom_bpe_pairs_init(&m->pairs, n * 2);
    for (size_t i = 0; i < n && s == LOOM_OK; i++) {
        int t = pc[i].type;
        if (!(t == P_NORMAL || t == P_USER || t == P_UNUSED)) continue;
        const char *p = (const char *)pc[i].s;
        for (size_t k = 1; k < pc[i].n && s == LOOM_OK; k++) {
            if (((unsigned char)p[k] & 0xC0) == 0x80) continue; /* character boundaries only */
            int32_t a = loom_vocab_find(&m->vocab, p, k), b = loom_vocab_find(&m->vocab, p + k, pc[i].n - k);
            if (a >= 0 && b >= 0) s = loom_bpe_pairs_put(&m->pairs, a, b, prio[i], (int32_t)i, true);
        }
    }
    free(prio);
    return s;
}

/* Megatron-LM's SentencePieceTokenizer: <CLS> <SEP> <EOD> <MASK>, then the pad, bos and eos
 * pieces (or <PAD> <BOS> <EOS> where the model has none), each given the next id when the model
 * lacks it, all found in the text as literals. */
static enum loom_status megatron_specials(struct spm *m, struct loom_tokenizer *t) {
    const char *names[7] = {"<CLS>", "<SEP>", "<EOD>", "<MASK>", "<PAD>", "<BOS>", "<EOS>"};
    int32_t ids[3] = {m->pad_id, m->bos_id, m->eos_id};
    char *own[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++)
        if (ids[k] >= 0 && ids[k] < m->n_pieces) {
            size_t l = (size_t)m->vocab.len[ids[k]];
            own[k] = malloc(l + 1);
            if (!own[k]) return loom_fail(LOOM_ERR_OOM, "out of memory");
            memcpy(own[k], m->vocab.bytes + m->vocab.start[ids[k]], l);
            own[k][l] = 0;
            names[4 + k] = own[k];
        }
    int32_t got[7];
    enum loom_status s = LOOM_OK;
    for (int k = 0; k < 7 && s == LOOM_OK; k++) {
        const char *nm = names[k];
        int32_t id = -1;
        for (int64_t i = 0; i < m->vocab.n_ids && id < 0; i++)
            if ((size_t)m->vocab.len[i] == strlen(nm) && memcmp(m->vocab.bytes + m->vocab.start[i], nm, strlen(nm)) == 0)
                id = (int32_t)i;
        if (id < 0) {
            id = (int32_t)m->vocab.n_ids;
            s = loom_vocab_add(&m->vocab, id, nm, strlen(nm), false);
            m->type[id] = P_CONTROL;
        }
        got[k] = id;
        bool dup = false;
        for (size_t q = 0; q < m->extra.n; q++) dup |= m->extra.v[q].id == id;
        if (s == LOOM_OK && !dup) s = loom_specials_add(&m->extra, nm, strlen(nm), id);
    }
    for (int k = 0; k < 3; k++) free(own[k]);
    t->cls = got[0];
    t->sep = got[1];
    t->eod = got[2];
    t->mask = got[3];
    t->pad = got[4];
    return s;
}

/* ---- encoding ------------------------------------------------------------------------------- */

static enum loom_status normalize(const struct spm *m, const char *text, size_t len, char **out,
                                  size_t *outn) {
    char *o = malloc(len * 3 + 4);
    if (!o) return loom_fail(LOOM_ERR_OOM, "out of memory normalizing %zu bytes", len);
    size_t a = 0, b = len, k = 0;
    if (m->remove_extra_ws) {
        while (a < b && text[a] == ' ') a++;
        while (b > a && text[b - 1] == ' ') b--;
    }
    if (a == b) {
        *out = o;
        *outn = 0;
        return LOOM_OK;
    }
    const char *sp = m->escape_ws ? "\xE2\x96\x81" : " ";
    size_t spl = strlen(sp);
    if (m->add_dummy_prefix) {
        memcpy(o + k, sp, spl);
        k += spl;
    }
    for (size_t i = a; i < b; i++) {
        if (text[i] == ' ') {
            if (m->remove_extra_ws && i > a && text[i - 1] == ' ') continue;
            memcpy(o + k, sp, spl);
            k += spl;
        } else {
            o[k++] = text[i];
        }
    }
    *out = o;
    *outn = k;
    return LOOM_OK;
}

/* the pieces of normalized text s[0..n) appended to ids */
static enum loom_status encode_normalized(const struct spm *m, const char *s, size_t n,
                                          int32_t **ids, size_t *cnt, size_t *cap) {
    int32_t *sym = malloc((n + 1) * sizeof *sym);
    if (!sym) return loom_fail(LOOM_ERR_OOM, "out of memory encoding %zu bytes", n);
    size_t ns = 0, pos = 0, at = n, which = 0;
    bool more = loom_specials_next(&m->user, s, n, 0, true, &at, &which);
    if (!more) at = n;
    while (pos < n) {
        if (pos == at) {
            sym[ns++] = m->user.v[which].id;
            pos += m->user.v[which].n;
            if (!loom_specials_next(&m->user, s, n, pos, true, &at, &which)) at = n;
            continue;
        }
        size_t j = pos;
        loom_utf8_next((const unsigned char *)s, &j);
        int32_t id = loom_vocab_find(&m->vocab, s + pos, j - pos);
        sym[ns++] = id >= 0 ? id : LOOM_BPE_UNKNOWN;
        pos = j;
    }
    size_t k = ns ? loom_bpe_merge(&m->pairs, sym, ns) : 0;
    enum loom_status st = (ns && !k) ? loom_fail(LOOM_ERR_OOM, "out of memory encoding") : LOOM_OK;
    if (st == LOOM_OK) st = loom_tokenizer_reserve(ids, cnt, cap, n + 1);
    /* walk the text again for the symbols that are no piece (single characters) */
    pos = 0;
    for (size_t q = 0; q < k && st == LOOM_OK; q++) {
        if (sym[q] >= 0) {
            (*ids)[(*cnt)++] = sym[q];
            pos += (size_t)m->vocab.len[sym[q]];
            continue;
        }
        size_t j = pos;
        loom_utf8_next((const unsigned char *)s, &j);
        if (m->byte_fallback)
            for (size_t b = pos; b < j; b++) (*ids)[(*cnt)++] = m->byte_id[(unsigned char)s[b]];
        else
            (*ids)[(*cnt)++] = m->unk_id;
        pos = j;
    }
    free(sym);
    return st;
}

static enum loom_status encode_text(const struct spm *m, const char *text, size_t len,
                                    int32_t **ids, size_t *n, size_t *cap) {
    char *norm = NULL;
    size_t nn = 0;
    LOOM_CHECK(normalize(m, text, len, &norm, &nn));
    enum loom_status s = encode_normalized(m, norm, nn, ids, n, cap);
    free(norm);
    return s;
}

static enum loom_status spm_encode(const void *impl, const char *text, size_t len, int32_t **ids,
                                   size_t *n, size_t *cap) {
    const struct spm *m = impl;
    if (m->flavor == LOOM_SPM_LLAMA2 && m->bos_id >= 0) {
        LOOM_CHECK(loom_tokenizer_reserve(ids, n, cap, 1));
        (*ids)[(*n)++] = m->bos_id;
    }
    size_t pos = 0, at, which;
    while (loom_specials_next(&m->extra, text, len, pos, false, &at, &which)) {
        LOOM_CHECK(encode_text(m, text + pos, at - pos, ids, n, cap));
        LOOM_CHECK(loom_tokenizer_reserve(ids, n, cap, 1));
        (*ids)[(*n)++] = m->extra.v[which].id;
        pos = at + m->extra.v[which].n;
    }
    return encode_text(m, text + pos, len - pos, ids, n, cap);
}

/* ---- decoding ------------------------------------------------------------------------------- */

static int piece_byte(const struct spm *m, int32_t id) {
    unsigned v = 0;
    sscanf(m->vocab.bytes + m->vocab.start[id] + 3, "%2X", &v);
    return (int)v;
}

/* SentencePiece's decode of ids[0..n) appended at out+*k (room for 3 bytes per piece byte) */
static void decode_run(const struct spm *m, const int32_t *ids, size_t n, char *out, size_t *k) {
    bool first = true;
    for (size_t i = 0; i < n;) {
        int t = m->type[ids[i]];
        if (t == P_CONTROL) {
            i++;
            continue;
        }
        if (t == P_BYTE) { /* a run of byte pieces; bytes that are not UTF-8 become U+FFFD */
            size_t st = *k;
            while (i < n && m->type[ids[i]] == P_BYTE) out[(*k)++] = (char)piece_byte(m, ids[i++]);
            size_t rl = *k - st;
            if (loom_utf8_invalid_offset(out + st, rl) != rl) {
                char *tmp = malloc(rl);
                if (tmp) {
                    memcpy(tmp, out + st, rl);
                    *k = st;
                    for (size_t q = 0; q < rl;) {
                        size_t good = loom_utf8_invalid_offset(tmp + q, rl - q);
                        memcpy(out + *k, tmp + q, good);
                        *k += good;
                        q += good;
                        if (q < rl) {
                            *k += loom_utf8_put(out + *k, 0xFFFD);
                            q++;
                        }
                    }
                    free(tmp);
                }
            }
            first = false;
            continue;
        }
        if (t == P_UNKNOWN) {
            memcpy(out + *k, " \xE2\x81\x87 ", 5);
            *k += 5;
            first = false;
            i++;
            continue;
        }
        const char *s = m->vocab.bytes + m->vocab.start[ids[i]];
        size_t l = (size_t)m->vocab.len[ids[i]], q = 0;
        if (first && m->add_dummy_prefix && l >= 3 && memcmp(s, "\xE2\x96\x81", 3) == 0) q = 3;
        first = false;
        while (q < l) {
            if (q + 3 <= l && memcmp(s + q, "\xE2\x96\x81", 3) == 0) {
                out[(*k)++] = ' ';
                q += 3;
            } else {
                out[(*k)++] = s[q++];
            }
        }
        i++;
    }
}

static enum loom_status spm_decode(const void *impl, const int32_t *ids, size_t n, char **text,
                                   size_t *len) {
    const struct spm *m = impl;
    size_t total = 16;
    for (size_t i = 0; i < n; i++) total += 3 * (size_t)m->vocab.len[ids[i]] + 8;
    char *out = malloc(total);
    if (!out) return loom_fail(LOOM_ERR_OOM, "out of memory decoding %zu ids", n);
    size_t k = 0, last = 0;
    if (m->flavor == LOOM_SPM_MEGATRON) /* Megatron-LM: special tokens as " <X> " */
        for (size_t i = 0; i < n; i++) {
            bool special = false;
            for (size_t q = 0; q < m->extra.n && !special; q++) special = m->extra.v[q].id == ids[i];
            if (!special) continue;
            decode_run(m, ids + last, i - last, out, &k);
            out[k++] = ' ';
            memcpy(out + k, m->vocab.bytes + m->vocab.start[ids[i]], (size_t)m->vocab.len[ids[i]]);
            k += (size_t)m->vocab.len[ids[i]];
            out[k++] = ' ';
            last = i + 1;
        }
    decode_run(m, ids + last, n - last, out, &k);
    out[k] = 0;
    *text = out;
    *len = k;
    return LOOM_OK;
}

static void spm_free(void *impl) {
    struct spm *m = impl;
    if (!m) return;
    loom_vocab_free(&m->vocab);
    loom_bpe_pairs_free(&m->pairs);
    loom_specials_free(&m->user);
    loom_specials_free(&m->extra);
    free(m->type);
    free(m);
}

static const struct loom_tokenizer_ops SPM_OPS = {
    .free = spm_free,
    .encode = spm_encode,
    .decode = spm_decode,
};

enum loom_status loom_tokenizer_spm_load(struct loom_tokenizer *t, const char *path,
                                         enum loom_spm_flavor flavor) {
    char *buf;
    size_t len;
    LOOM_CHECK(loom_read_file(path, MODEL_MAX_BYTES, &buf, &len));
    struct spm *m = calloc(1, sizeof *m);
    struct piece *pc = NULL;
    size_t np = 0;
    enum loom_status s = m ? parse(path, (const unsigned char *)buf, len, m, &pc, &np)
                           : loom_fail(LOOM_ERR_OOM, "out of memory loading %s", path);
    if (s == LOOM_OK) {
        m->flavor = flavor;
        m->n_pieces = (int64_t)np;
        s = build(m, path, pc, np);
    }
    free(pc);
    free(buf);
    if (s == LOOM_OK && flavor == LOOM_SPM_MEGATRON) s = megatron_specials(m, t);
    if (s != LOOM_OK) {
        spm_free(m);
        return s;
    }
    t->ops = &SPM_OPS;
    t->impl = m;
    t->vocab_size = m->vocab.n_ids;
    if (flavor != LOOM_SPM_MEGATRON) {
        t->eod = m->eos_id >= 0 && m->eos_id < m->n_pieces ? m->eos_id : -1;
        t->pad = m->pad_id >= 0 && m->pad_id < m->n_pieces ? m->pad_id : -1;
    }
    t->unk = m->unk_id;
    if (flavor == LOOM_SPM_LLAMA2) t->bos = m->bos_id;
    return LOOM_OK;
}
