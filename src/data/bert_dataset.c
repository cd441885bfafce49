/* BERT pretraining samples: the sample mapping, segments and sentence order, truncation,
 * whole-word n-gram masking and padding. The semantics, and where they differ from
 * Megatron-LM's, are in include/loom/bert_dataset.h. */
#include "loom/bert_dataset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/rng.h"

/* Random streams (each also keyed by the split and, for a sample, by its index). */
#define PURPOSE_TARGET 0x626572742d74676cull  /* "bert-tgl": target lengths of the mapping */
#define PURPOSE_MAPSHUF 0x626572742d6d7368ull /* "bert-msh": the mapping's shuffle */
#define PURPOSE_SAMPLE 0x626572742d736d70ull  /* "bert-smp": base of a sample's streams */
#define SUB_SEGMENT 1 /* a_end, swap */
#define SUB_TRUNC 2   /* which end loses a token */
#define SUB_WORDS 3   /* the shuffle of the candidate words */
#define SUB_NGRAM 4   /* n of each span */
#define SUB_REPLACE 5 /* [MASK] / kept / random id, and the random id */

struct mapping {
    int64_t first, end; /* sentences [first, end) */
    int32_t target;
};

struct loom_bert_dataset {
    struct loom_indexed *ix;
    int64_t T;
    uint64_t seed;
    enum loom_split which;
    double mask_prob;
    int binary_head;
    int64_t added_tokens;
    int32_t cls, sep, mask, pad;
    int64_t vocab_size;
    uint8_t *is_piece; /* [vocab_size]: 1 for "##" continuation pieces */
    int64_t doc_begin, doc_end, docs_used, num_epochs;
    struct mapping *map;
    int64_t n;
};

/* A sequential stream: draw i of (seed, purpose). */
struct stream {
    uint64_t seed, purpose, i;
};

static uint64_t st_u64(struct stream *s) {
    uint32_t w[4];
    loom_rng_u32x4(s->seed, s->purpose, s->i++, w);
    return (uint64_t)w[0] << 32 | w[1];
}
/* Uniform in [0, 1), 53 bits. */
static double st_unit(struct stream *s) { return (double)(st_u64(s) >> 11) * (1.0 / 9007199254740992.0); }
/* Uniform integer in [0, m) (modulo bias below m / 2^64). */
static uint64_t st_below(struct stream *s, uint64_t m) { return st_u64(s) % m; }

static struct stream sample_stream(const struct loom_bert_dataset *ds, int64_t k, uint64_t sub) {
    uint64_t p = loom_hash_mix(loom_hash_mix(loom_hash_mix(PURPOSE_SAMPLE, (uint64_t)ds->which),
                                             (uint64_t)k), sub);
    return (struct stream){ds->seed, p, 0};
}

static const char *split_name(enum loom_split w) {
    return w == LOOM_SPLIT_TRAIN ? "train" : w == LOOM_SPLIT_VALID ? "valid" : "test";
}

void loom_bert_dataset_config_default(struct loom_bert_dataset_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->split = "969,30,1";
    cfg->which = LOOM_SPLIT_TRAIN;
    cfg->seq_length = 512;
    cfg->seed = 1234;
    cfg->short_seq_prob = 0.1;
    cfg->mask_prob = 0.15;
    cfg->binary_head = 1;
    cfg->added_tokens = 3;
}

enum loom_status loom_bert_sample_alloc(struct loom_bert_sample *s, int64_t seq_length) {
    memset(s, 0, sizeof *s);
    if (seq_length < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT sample: seq_length %lld; must be >= 1",
                         (long long)seq_length);
    size_t n = (size_t)seq_length;
    s->seq_length = seq_length;
    s->tokens = malloc(n * sizeof(int32_t));
    s->labels = malloc(n * sizeof(int32_t));
    s->loss_mask = malloc(n * sizeof(int32_t));
    s->token_types = malloc(n * sizeof(int32_t));
    s->padding_mask = malloc(n * sizeof(int32_t));
    if (!s->tokens || !s->labels || !s->loss_mask || !s->token_types || !s->padding_mask) {
        loom_bert_sample_free(s);
        return loom_fail(LOOM_ERR_OOM, "out of memory for a BERT sample of %lld tokens",
                         (long long)seq_length);
    }
    return LOOM_OK;
}

void loom_bert_sample_free(struct loom_bert_sample *s) {
    if (!s) return;
    free(s->tokens);
    free(s->labels);
    free(s->loss_mask);
    free(s->token_types);
    free(s->padding_mask);
    free(s->work_);
    memset(s, 0, sizeof *s);
}

void loom_bert_dataset_free(struct loom_bert_dataset *ds) {
    if (!ds) return;
    loom_indexed_free(ds->ix);
    free(ds->is_piece);
    free(ds->map);
    free(ds);
}

/* Mark the "##" pieces of the vocabulary (a single id decodes to its piece as written). */
static enum loom_status find_pieces(struct loom_bert_dataset *ds, const struct loom_tokenizer *t) {
    ds->is_piece = calloc((size_t)ds->vocab_size, 1);
    if (!ds->is_piece) return loom_fail(LOOM_ERR_OOM, "out of memory");
    for (int64_t id = 0; id < ds->vocab_size; id++) {
        int32_t i32 = (int32_t)id;
        char *text = NULL;
        size_t len = 0;
        LOOM_CHECK(loom_tokenizer_decode(t, &i32, 1, &text, &len));
        ds->is_piece[id] = len > 2 && text[0] == '#' && text[1] == '#';
        free(text);
    }
    return LOOM_OK;
}

/* Target length: max_len, or with probability p uniform in [2, max_len]. */
static int32_t draw_target(struct stream *s, double p, int64_t max_len) {
    uint32_t w[4];
    loom_rng_u32x4(s->seed, s->purpose, s->i++, w);
    double u = (double)(((uint64_t)w[0] << 32 | w[1]) >> 11) * (1.0 / 9007199254740992.0);
    if (u < p) return (int32_t)(2 + (((uint64_t)w[2] << 32 | w[3]) % (uint64_t)(max_len - 1)));
    return (int32_t)max_len;
}

static enum loom_status push_map(struct loom_bert_dataset *ds, size_t *cap, int64_t first,
                                 int64_t end, int32_t target) {
    if ((size_t)ds->n == *cap) {
        size_t c = *cap ? 2 * *cap : 1024;
        struct mapping *m = realloc(ds->map, c * sizeof *m);
        if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory building the BERT sample mapping");
        ds->map = m;
        *cap = c;
    }
    ds->map[ds->n++] = (struct mapping){first, end, target};
    return LOOM_OK;
}

/* Megatron's build_mapping over the split's documents, epoch after epoch, then the shuffle. */
static enum loom_status build_mapping(struct loom_bert_dataset *ds, int64_t num_samples,
                                      double short_seq_prob) {
    const struct loom_indexed *ix = ds->ix;
    const int min_sent = ds->binary_head ? 2 : 1;
    const int64_t max_len = ds->T - ds->added_tokens;
    int64_t ndocs = ds->doc_end - ds->doc_begin;
    uint8_t *use = calloc((size_t)(ndocs > 0 ? ndocs : 1), 1);
    if (!use) return loom_fail(LOOM_ERR_OOM, "out of memory");
    int64_t multi = 0, long_skipped = 0;
    ds->docs_used = 0;
    for (int64_t d = 0; d < ndocs; d++) {
        int64_t a = loom_indexed_doc_index(ix, ds->doc_begin + d);
        int64_t b = loom_indexed_doc_index(ix, ds->doc_begin + d + 1);
        if (b - a >= 2) multi++;
        if (b - a < min_sent) continue;
        int long_sent = 0;
        if (b - a > 1)
            for (int64_t s = a; s < b && !long_sent; s++)
                long_sent = loom_indexed_sequence_length(ix, s) > LOOM_BERT_LONG_SENTENCE;
        if (long_sent) {
            long_skipped++;
            continue;
        }
        use[d] = 1;
        ds->docs_used++;
    }

    enum loom_status st = LOOM_OK;
    size_t cap = 0;
    struct stream tgt = {ds->seed, loom_hash_mix(PURPOSE_TARGET, (uint64_t)ds->which), 0};
    ds->num_epochs = 0;
    ds->n = 0;
    for (;;) {
        if (ds->num_epochs > 0 && ds->n >= num_samples) break;
        int64_t before = ds->n;
        for (int64_t d = 0; d < ndocs; d++) {
            if (!use[d]) continue;
            int64_t a = loom_indexed_doc_index(ix, ds->doc_begin + d);
            int64_t b = loom_indexed_doc_index(ix, ds->doc_begin + d + 1);
            int64_t remain = b - a, start = a, len = 0, nsent = 0;
            int32_t target = draw_target(&tgt, short_seq_prob, max_len);
            for (int64_t s = a; s < b; s++) {
                len += loom_indexed_sequence_length(ix, s);
                nsent++;
                remain--;
                if ((len >= target && remain > 1 && nsent >= min_sent) || remain == 0) {
                    if ((st = push_map(ds, &cap, start, s + 1, target)) != LOOM_OK) goto done;
                    start = s + 1;
                    len = 0;
                    nsent = 0;
                    target = draw_target(&tgt, short_seq_prob, max_len);
                }
            }
        }
        ds->num_epochs++;
        if (ds->n == before) { /* an epoch without samples: say why */
            const char *pfx = loom_indexed_prefix(ix);
            if (ds->binary_head && multi == 0)
                st = loom_fail(LOOM_ERR_INVALID_ARG, "%s: no document of the %s split has the 2 "
                               "sentences a binary-head BERT sample needs (one sequence per "
                               "document: preprocessed without --split-sentences?); preprocess "
                               "with --split-sentences, or use --bert-no-binary-head", pfx,
                               split_name(ds->which));
            else if (long_skipped > 0)
                st = loom_fail(LOOM_ERR_INVALID_ARG, "%s: every usable document of the %s split "
                               "has a sentence longer than %d tokens (skipped, as Megatron-LM "
                               "skips them); split the text into shorter sentences", pfx,
                               split_name(ds->which), LOOM_BERT_LONG_SENTENCE);
            else
                st = loom_fail(LOOM_ERR_INVALID_ARG, "%s: the %s split's %lld documents hold no "
                               "sentence to make a BERT sample of", pfx, split_name(ds->which),
                               (long long)ndocs);
            goto done;
        }
    }
    /* Fisher-Yates over the whole mapping */
    {
        struct stream sh = {ds->seed, loom_hash_mix(PURPOSE_MAPSHUF, (uint64_t)ds->which), 0};
        for (int64_t i = ds->n - 1; i > 0; i--) {
            sh.i = (uint64_t)i;
            int64_t j = (int64_t)st_below(&sh, (uint64_t)i + 1);
            struct mapping t = ds->map[i];
            ds->map[i] = ds->map[j];
            ds->map[j] = t;
        }
    }
done:
    free(use);
    return st;
}

enum loom_status loom_bert_dataset_open(struct loom_bert_dataset **out,
                                        const struct loom_bert_dataset_config *cfg) {
    *out = NULL;
    if (!cfg->data_path || !*cfg->data_path)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: required (the PREFIX of one "
                         "sentence-split indexed dataset)");
    if (strchr(cfg->data_path, ' '))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path '%s': the BERT dataset takes one "
                         "PREFIX, not a blend of weighted prefixes", cfg->data_path);
    if (!cfg->tokenizer)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT dataset: a WordPiece tokenizer is needed "
                         "(--tokenizer-type BertWordPieceLowerCase or BertWordPieceCase)");
    if (cfg->added_tokens < 2 || cfg->added_tokens > 3)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT dataset: %lld added tokens; must be 2 or 3",
                         (long long)cfg->added_tokens);
    if (cfg->seq_length < cfg->added_tokens + 2)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--seq-length: %lld; a sample needs at least %lld "
                         "(%lld added tokens and 2 of the text)", (long long)cfg->seq_length,
                         (long long)cfg->added_tokens + 2, (long long)cfg->added_tokens);
    if (cfg->seq_length > INT32_MAX)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--seq-length: %lld; too large",
                         (long long)cfg->seq_length);
    if (!(cfg->short_seq_prob >= 0 && cfg->short_seq_prob <= 1))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--short-seq-prob: %g; must be in [0, 1]",
                         cfg->short_seq_prob);
    if (!(cfg->mask_prob >= 0 && cfg->mask_prob <= 1))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--mask-prob: %g; must be in [0, 1]",
                         cfg->mask_prob);
    if (cfg->num_samples < 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT dataset: %lld samples requested; must be >= 0",
                         (long long)cfg->num_samples);
    if ((int)cfg->which < 0 || cfg->which >= LOOM_SPLIT_COUNT)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT dataset: split %d; must be train, valid or "
                         "test", (int)cfg->which);
    const struct loom_tokenizer *t = cfg->tokenizer;
    static const char *const names[] = {"[CLS]", "[SEP]", "[MASK]", "[PAD]"};
    int32_t ids[4];
    for (int i = 0; i < 4; i++)
        if ((ids[i] = loom_tokenizer_special(t, names[i])) < 0)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--tokenizer-type %s: the vocabulary has no %s "
                             "token; the BERT dataset needs a WordPiece vocabulary with [CLS], "
                             "[SEP], [MASK] and [PAD] (BertWordPieceLowerCase or "
                             "BertWordPieceCase)", loom_tokenizer_type(t), names[i]);

    struct loom_bert_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return loom_fail(LOOM_ERR_OOM, "out of memory");
    ds->T = cfg->seq_length;
    ds->seed = cfg->seed;
    ds->which = cfg->which;
    ds->mask_prob = cfg->mask_prob;
    ds->binary_head = cfg->binary_head != 0;
    ds->added_tokens = cfg->added_tokens;
    ds->cls = ids[0];
    ds->sep = ids[1];
    ds->mask = ids[2];
    ds->pad = ids[3];
    ds->vocab_size = loom_tokenizer_vocab_size(t);
    enum loom_status st = loom_indexed_open(&ds->ix, cfg->data_path);
    if (st == LOOM_OK) st = find_pieces(ds, t);
    int64_t b[4];
    if (st == LOOM_OK)
        st = loom_data_split_bounds(cfg->split ? cfg->split : "969,30,1",
                                    loom_indexed_num_documents(ds->ix), b, NULL);
    if (st == LOOM_OK) {
        ds->doc_begin = b[cfg->which];
        ds->doc_end = b[cfg->which + 1];
        if (ds->doc_end == ds->doc_begin)
            st = loom_fail(LOOM_ERR_INVALID_ARG, "--split %s: the %s split of %s has no documents "
                           "(%lld documents in all)", cfg->split ? cfg->split : "969,30,1",
                           split_name(cfg->which), cfg->data_path,
                           (long long)loom_indexed_num_documents(ds->ix));
    }
    if (st == LOOM_OK) st = build_mapping(ds, cfg->num_samples, cfg->short_seq_prob);
    if (st != LOOM_OK) {
        loom_bert_dataset_free(ds);
        return st;
    }
    *out = ds;
    return LOOM_OK;
}

int64_t loom_bert_dataset_len(const struct loom_bert_dataset *ds) { return ds->n; }
int64_t loom_bert_dataset_seq_length(const struct loom_bert_dataset *ds) { return ds->T; }
int64_t loom_bert_dataset_num_epochs(const struct loom_bert_dataset *ds) { return ds->num_epochs; }
void loom_bert_dataset_documents(const struct loom_bert_dataset *ds, int64_t *begin,
                                 int64_t *end, int64_t *used) {
    if (begin) *begin = ds->doc_begin;
    if (end) *end = ds->doc_end;
    if (used) *used = ds->docs_used;
}

enum loom_status loom_bert_dataset_mapping(const struct loom_bert_dataset *ds, int64_t k,
                                           int64_t *first_sentence, int64_t *end_sentence,
                                           int64_t *target_length) {
    if (k < 0 || k >= ds->n)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT sample %lld: out of range [0, %lld)",
                         (long long)k, (long long)ds->n);
    *first_sentence = ds->map[k].first;
    *end_sentence = ds->map[k].end;
    *target_length = ds->map[k].target;
    return LOOM_OK;
}

enum loom_status loom_bert_dataset_get(const struct loom_bert_dataset *ds, int64_t k,
                                       struct loom_bert_sample *out) {
    return loom_bert_dataset_get_stats(ds, k, out, NULL);
}

/* The work buffer holds, one after another: the sentences' ids (raw), then per-token arrays of
 * the built sequence: ids, covered flags, word starts, word lengths, the word order. */
static enum loom_status reserve_work(struct loom_bert_sample *out, size_t n) {
    if (n <= out->work_cap_) return LOOM_OK;
    int32_t *p = realloc(out->work_, n * sizeof *p);
    if (!p) return loom_fail(LOOM_ERR_OOM, "out of memory building a BERT sample");
    out->work_ = p;
    out->work_cap_ = n;
    return LOOM_OK;
}

/* The ids of mapping entry m's sentences, one after another, into raw; each checked against the
 * tokenizer's vocabulary. */
static enum loom_status read_sentences(const struct loom_bert_dataset *ds, struct mapping m,
                                       int32_t *raw) {
    int64_t at = 0;
    for (int64_t s = m.first; s < m.end; s++) {
        int64_t len = loom_indexed_sequence_length(ds->ix, s);
        LOOM_CHECK(loom_indexed_read(ds->ix, s, 0, len, raw + at));
        at += len;
    }
    for (int64_t i = 0; i < at; i++)
        if (raw[i] < 0 || raw[i] >= ds->vocab_size)
            return loom_fail(LOOM_ERR_FORMAT, "%s: id %d in sentences %lld..%lld is outside the "
                             "tokenizer's vocabulary of %lld ids (preprocessed with another "
                             "tokenizer?)", loom_indexed_prefix(ds->ix), raw[i],
                             (long long)m.first, (long long)m.end - 1,
                             (long long)ds->vocab_size);
    return LOOM_OK;
}

static int64_t sentences_length(const struct loom_bert_dataset *ds, struct mapping m) {
    int64_t total = 0;
    for (int64_t s = m.first; s < m.end; s++) total += loom_indexed_sequence_length(ds->ix, s);
    return total;
}

enum loom_status loom_bert_dataset_sentences(const struct loom_bert_dataset *ds, int64_t k,
                                             int32_t **ids, size_t *cap, int64_t *n,
                                             int64_t *target_length) {
    if (k < 0 || k >= ds->n)
        return loom_fail(LOOM_ERR_INVALID_ARG, "sample %lld: out of range [0, %lld)",
                         (long long)k, (long long)ds->n);
    const struct mapping m = ds->map[k];
    const int64_t total = sentences_length(ds, m);
    if ((size_t)total + 1 > *cap) {
        int32_t *p = realloc(*ids, ((size_t)total + 1) * sizeof *p);
        if (!p) return loom_fail(LOOM_ERR_OOM, "out of memory reading sample %lld", (long long)k);
        *ids = p;
        *cap = (size_t)total + 1;
    }
    LOOM_CHECK(read_sentences(ds, m, *ids));
    *n = total;
    *target_length = m.target;
    return LOOM_OK;
}

int loom_bert_dataset_is_piece(const struct loom_bert_dataset *ds, int32_t id) {
    return id >= 0 && id < ds->vocab_size && ds->is_piece[id];
}

enum loom_status loom_bert_dataset_get_stats(const struct loom_bert_dataset *ds, int64_t k,
                                             struct loom_bert_sample *out,
                                             struct loom_bert_sample_stats *stats) {
    if (k < 0 || k >= ds->n)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT sample %lld: out of range [0, %lld)",
                         (long long)k, (long long)ds->n);
    if (out->seq_length != ds->T || !out->tokens)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT sample: allocated for %lld tokens, the "
                         "dataset's --seq-length is %lld", (long long)out->seq_length,
                         (long long)ds->T);
    if (ds->added_tokens != 3)
        return loom_fail(LOOM_ERR_INVALID_ARG, "BERT sample: the dataset was opened for samples "
                         "with %lld added tokens, not BERT's 3", (long long)ds->added_tokens);
    struct loom_bert_sample_stats sx;
    memset(&sx, 0, sizeof sx);
    const struct mapping m = ds->map[k];
    const int64_t T = ds->T, nsent = m.end - m.first;
    sx.first_sentence = m.first;
    sx.end_sentence = m.end;
    sx.target_length = m.target;

    /* the sentences' ids, and where sentence a_end starts */
    const int64_t total = sentences_length(ds, m);
    /* raw ids (total) + 5 arrays of the built sequence (<= target + 3 <= T each) */
    LOOM_CHECK(reserve_work(out, (size_t)total + 5 * (size_t)T + 1));
    int32_t *raw = out->work_;
    int32_t *seq = raw + total, *covered = seq + T, *wstart = covered + T, *wlen = wstart + T,
            *order = wlen + T;
    struct stream seg = sample_stream(ds, k, SUB_SEGMENT);
    int64_t a_end = nsent, split_at = total;
    if (ds->binary_head) {
        LOOM_ASSERT(nsent >= 2);
        a_end = nsent >= 3 ? 1 + (int64_t)st_below(&seg, (uint64_t)(nsent - 1)) : 1;
        split_at = 0;
        for (int64_t s = m.first; s < m.first + a_end; s++)
            split_at += loom_indexed_sequence_length(ds->ix, s);
    }
    LOOM_CHECK(read_sentences(ds, m, raw));
    sx.a_sentences = a_end;

    /* segments as windows [lo, hi) of raw */
    int64_t a_lo = 0, a_hi = split_at, b_lo = split_at, b_hi = total;
    int is_random = 0;
    if (ds->binary_head && st_unit(&seg) < 0.5) {
        is_random = 1;
        a_lo = split_at, a_hi = total, b_lo = 0, b_hi = split_at;
    }
    /* truncation */
    struct stream tr = sample_stream(ds, k, SUB_TRUNC);
    while ((a_hi - a_lo) + (b_hi - b_lo) > m.target) {
        int64_t *lo, *hi;
        if (a_hi - a_lo > b_hi - b_lo) lo = &a_lo, hi = &a_hi;
        else lo = &b_lo, hi = &b_hi;
        if (st_unit(&tr) < 0.5) (*lo)++;
        else (*hi)--;
        sx.truncated = 1;
    }
    sx.len_a = a_hi - a_lo;
    sx.len_b = b_hi - b_lo;

    /* [CLS] A [SEP] B [SEP] */
    int64_t n = 0;
    seq[n] = ds->cls, out->token_types[n++] = 0;
    for (int64_t i = a_lo; i < a_hi; i++) seq[n] = raw[i], out->token_types[n++] = 0;
    seq[n] = ds->sep, out->token_types[n++] = 0;
    if (b_hi > b_lo) {
        for (int64_t i = b_lo; i < b_hi; i++) seq[n] = raw[i], out->token_types[n++] = 1;
        seq[n] = ds->sep, out->token_types[n++] = 1;
    }
    LOOM_ASSERT(n <= T);
    for (int64_t i = 0; i < n; i++) {
        out->tokens[i] = seq[i];
        out->labels[i] = -1;
        out->loss_mask[i] = 0;
        out->padding_mask[i] = 1;
        covered[i] = 0;
    }

    /* masking: whole words */
    int64_t nw = 0;
    for (int64_t i = 0; i < n; i++) {
        if (seq[i] == ds->cls || seq[i] == ds->sep) continue;
        if (ds->is_piece[seq[i]] && nw > 0 && wstart[nw - 1] + wlen[nw - 1] == i &&
            i > 0 && seq[i - 1] != ds->cls && seq[i - 1] != ds->sep) {
            wlen[nw - 1]++;
            continue;
        }
        wstart[nw] = (int32_t)i;
        wlen[nw++] = 1;
    }
    sx.num_words = nw;
    if (ds->mask_prob > 0 && nw > 0) {
        double cap = ds->mask_prob * (double)m.target;
        double want = rint((double)n * ds->mask_prob);
        if (want < 1) want = 1;
        double budget = want < cap ? want : cap;
        sx.num_to_predict = budget;
        struct stream ws = sample_stream(ds, k, SUB_WORDS), ng = sample_stream(ds, k, SUB_NGRAM),
                      rp = sample_stream(ds, k, SUB_REPLACE);
        for (int64_t i = 0; i < nw; i++) order[i] = (int32_t)i;
        for (int64_t i = nw - 1; i > 0; i--) {
            int64_t j = (int64_t)st_below(&ws, (uint64_t)i + 1);
            int32_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        int64_t masked = 0;
        for (int64_t c = 0; c < nw; c++) {
            if ((double)masked >= budget) break;
            int64_t w0 = order[c];
            int64_t nmax = nw - w0 < LOOM_BERT_MAX_NGRAM ? nw - w0 : LOOM_BERT_MAX_NGRAM;
            double psum = 0;
            for (int64_t g = 1; g <= nmax; g++) psum += 1.0 / (double)g;
            double u = st_unit(&ng) * psum, acc = 0;
            int64_t g = 1;
            for (; g < nmax; g++) {
                acc += 1.0 / (double)g;
                if (u < acc) break;
            }
            sx.ngram_drawn[g]++;
            /* tokens of the span of g words from w0 */
            int64_t span = 0;
            for (int64_t q = 0; q < g; q++) span += wlen[w0 + q];
            while ((double)(masked + span) > budget && g > 1) span -= wlen[w0 + --g];
            if ((double)(masked + span) > budget) continue;
            int64_t hit = 0;
            for (int64_t q = w0; q < w0 + g && !hit; q++)
                for (int64_t i = wstart[q]; i < wstart[q] + wlen[q]; i++) hit |= covered[i];
            if (hit) continue;
            for (int64_t q = w0; q < w0 + g; q++)
                for (int64_t i = wstart[q]; i < wstart[q] + wlen[q]; i++) {
                    covered[i] = 1;
                    int32_t tok;
                    if (st_unit(&rp) < 0.8) {
                        tok = ds->mask;
                        sx.num_mask_token++;
                    } else if (st_unit(&rp) < 0.5) {
                        tok = seq[i];
                        sx.num_kept_token++;
                    } else {
                        tok = (int32_t)st_below(&rp, (uint64_t)ds->vocab_size);
                        sx.num_random_token++;
                    }
                    out->tokens[i] = tok;
                    out->labels[i] = seq[i];
                    out->loss_mask[i] = 1;
                    masked++;
                }
            sx.ngram_taken[g]++;
        }
        sx.num_masked = masked;
    }

    /* padding */
    for (int64_t i = n; i < T; i++) {
        out->tokens[i] = ds->pad;
        out->labels[i] = -1;
        out->loss_mask[i] = 0;
        out->token_types[i] = 0;
        out->padding_mask[i] = 0;
    }
    out->num_tokens = n;
    out->is_random = is_random;
    if (stats) *stats = sx;
    return LOOM_OK;
}
