/* T5's samples over a dataset (--data-path): Megatron-LM's T5Dataset, span corruption over the
 * BERT dataset's sample mapping (loom/bert_dataset.h, opened with T5's 2 added tokens and
 * without the binary head). Sample k:
 *  - the ids of its mapping entry's sentences, cut to the entry's target length;
 *  - whole words (a token and the "##" pieces after it) are the candidates; the budget is
 *    min(mask_prob * target, max(1, round_half_even(tokens * mask_prob))) tokens;
 *  - the words are shuffled; for each in turn, until the budget is reached, n = min(geometric
 *    (p = 0.2), 10) is drawn and the span is the n words from it (fewer where the text ends),
 *    shortened word by word while it exceeds the budget or the decoder's room (1 + masked +
 *    spans + 1 <= --decoder-seq-length; loom's own rule, where Megatron-LM fails instead),
 *    skipped if even one word does, if it touches a masked token, or when every sentinel is used;
 *  - the spans in text order, span i replaced by the sentinel <extra_id_i> in the encoder's
 *    input; the decoder's input BOS (sentinel_i span_i)..., its targets (sentinel_i span_i)...
 *    EOS, every real decoder position with a loss.
 * Ids: the WordPiece vocabulary's V ids, then [BOS] = V, [EOS] = V + 1, <extra_id_i> = V + 2 + i
 * (the order in which Megatron-LM's BERT WordPiece tokenizer appends them); padding [PAD].
 * Every random choice is Philox keyed by (seed, split, k): a sample does not depend on which
 * were read before it. The row's layout is loom/t5.h's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/bert_dataset.h"
#include "loom/rng.h"
#include "loom/train.h"
#include "models/t5/t5_settings.h"

#define T5_SPAN_P 0.2       /* the geometric distribution of a span's words (SpanBERT's) */
#define T5_SPAN_MAX_WORDS 10 /* Megatron-LM's max_ngrams for T5 */
#define SUB_WORDS 1          /* the shuffle of the candidate words */
#define SUB_SPAN 2           /* the words of each span */

struct t5_source {
    struct loom_bert_dataset *ds;
    int64_t Te, Td, extra, len;
    int32_t bos, eos, sentinel0, pad;
    double mask_prob;
    uint64_t seed, purpose;
    int32_t *ids; /* the sample's sentences */
    size_t cap;
    int32_t *work; /* per token: covered, word start, word length, word order, span starts */
    size_t work_cap;
};

struct stream {
    uint64_t seed, purpose, i;
};
static uint64_t st_u64(struct stream *s) {
    uint32_t w[4];
    loom_rng_u32x4(s->seed, s->purpose, s->i++, w);
    return (uint64_t)w[0] << 32 | w[1];
}
static double st_unit(struct stream *s) { return (double)(st_u64(s) >> 11) * 0x1p-53; }

/* min(geometric(p), max): the trials until the first success, at most max */
static int64_t draw_span_words(struct stream *s) {
    int64_t n = 1;
    while (n < T5_SPAN_MAX_WORDS && st_unit(s) >= T5_SPAN_P) n++;
    return n;
}

static enum loom_status t5_fill(void *ctx, int64_t index, struct loom_micro *mb, int64_t b) {
    struct t5_source *g = ctx;
    const int64_t Te = g->Te, Td = g->Td, T = mb->T, k = index % g->len;
    int64_t n, target;
    LOOM_CHECK(loom_bert_dataset_sentences(g->ds, k, &g->ids, &g->cap, &n, &target));
    if (n > target) n = target;
    const int32_t *tok = g->ids;
    if ((size_t)(5 * n + 1) > g->work_cap) {
        int32_t *p = realloc(g->work, (size_t)(5 * n + 1) * sizeof *p);
        if (!p) return loom_fail(LOOM_ERR_OOM, "out of memory building a T5 sample");
        g->work = p;
        g->work_cap = (size_t)(5 * n + 1);
    }
    int32_t *covered = g->work, *wstart = covered + n, *wlen = wstart + n, *order = wlen + n,
            *span_at = order + n; /* span_at[i]: 1 + the span's index where a span starts */
    int64_t nw = 0;
    for (int64_t i = 0; i < n; i++) {
        covered[i] = 0;
        span_at[i] = 0;
        if (nw > 0 && loom_bert_dataset_is_piece(g->ds, tok[i])) {
            wlen[nw - 1]++;
            continue;
        }
        wstart[nw] = (int32_t)i;
        wlen[nw++] = 1;
    }
    /* the spans, drawn in a shuffled order of the words */
    const uint64_t base = loom_hash_mix(g->purpose, (uint64_t)k);
    struct stream ws = {g->seed, loom_hash_mix(base, SUB_WORDS), 0};
    struct stream sp = {g->seed, loom_hash_mix(base, SUB_SPAN), 0};
    for (int64_t i = 0; i < nw; i++) order[i] = (int32_t)i;
    for (int64_t i = nw - 1; i > 0; i--) {
        int64_t j = (int64_t)(st_u64(&ws) % (uint64_t)(i + 1));
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double want = rint((double)n * g->mask_prob), cap = g->mask_prob * (double)target;
    if (want < 1) want = 1;
    const double budget = want < cap ? want : cap;
    int64_t masked = 0, nspans = 0;
    for (int64_t c = 0; c < nw && (double)masked < budget && nspans < g->extra; c++) {
        const int64_t w0 = order[c];
        int64_t words = draw_span_words(&sp);
        if (words > nw - w0) words = nw - w0;
        int64_t span = 0;
        for (int64_t q = 0; q < words; q++) span += wlen[w0 + q];
        /* the decoder holds BOS, the spans' tokens and one sentinel each */
#define T5_SPAN_FITS(s) ((double)(masked + (s)) <= budget && 1 + masked + (s) + nspans + 1 <= Td)
        while (!T5_SPAN_FITS(span) && words > 1) span -= wlen[w0 + --words];
        if (!T5_SPAN_FITS(span)) continue;
#undef T5_SPAN_FITS
        const int64_t first = wstart[w0], end = first + span;
        int hit = 0;
        for (int64_t i = first; i < end && !hit; i++) hit = covered[i];
        if (hit) continue;
        for (int64_t i = first; i < end; i++) covered[i] = 1;
        span_at[first] = 1;
        masked += span;
        nspans++;
    }

    /* the row: the encoder's input, then the decoder's input and targets */
    int32_t *etok = mb->tokens + b * T, *elab = mb->labels + b * T;
    int32_t *pm = mb->padding_mask + b * T, *tt = mb->token_types + b * T;
    for (int64_t t = 0; t < T; t++) {
        etok[t] = g->pad;
        elab[t] = -1;
        pm[t] = 0;
        tt[t] = t >= Te;
    }
    int32_t *dtok = etok + Te, *dlab = elab + Te;
    int64_t ne = 0, nd = 0, s = -1;
    dtok[nd] = g->bos;
    for (int64_t i = 0; i < n; i++) {
        if (!covered[i]) {
            etok[ne++] = tok[i];
            continue;
        }
        if (span_at[i]) { /* a span starts: its sentinel on both sides */
            const int32_t sentinel = g->sentinel0 + (int32_t)++s;
            etok[ne++] = sentinel;
            dlab[nd++] = sentinel;
            dtok[nd] = sentinel;
        }
        dlab[nd++] = tok[i];
        dtok[nd] = tok[i];
    }
    dlab[nd++] = g->eos;
    LOOM_ASSERT(ne <= Te && nd <= Td && s + 1 == nspans);
    for (int64_t t = 0; t < ne; t++) pm[t] = 1;
    for (int64_t t = 0; t < nd; t++) pm[Te + t] = 1;
    mb->sop_labels[b] = 0;
    return LOOM_OK;
}

static void t5_source_free(void *ctx) {
    struct t5_source *g = ctx;
    loom_bert_dataset_free(g->ds);
    free(g->ids);
    free(g->work);
    free(g);
}

enum loom_status loom_t5_open_source(struct loom_sample_source *src,
                                     const struct loom_train_config *c,
                                     const struct loom_tokenizer *tok, int split,
                                     const char *path, const char *weights, int64_t n) {
    const int64_t Te = c->model.t5.enc_seq, Td = c->model.t5.dec_seq;
    const int64_t V = loom_tokenizer_vocab_size(tok), extra = c->vocab_extra_ids;
    if (extra < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--model t5 with --data-path needs the sentinel "
                         "ids of its spans: give --vocab-extra-ids (Megatron-LM's T5 uses 100)");
    if (c->model.vocab_size < V + 2 + extra)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--vocab-size %lld: T5's samples use ids up to "
                         "%lld (the WordPiece vocabulary's %lld, then [BOS], [EOS] and "
                         "--vocab-extra-ids %lld sentinels)", (long long)c->model.vocab_size,
                         (long long)(V + 2 + extra - 1), (long long)V, (long long)extra);
    if (Td < 2)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--decoder-seq-length %lld: T5's samples need at "
                         "least 2 (BOS and EOS)", (long long)Td);
    struct loom_bert_dataset_config dc;
    loom_bert_dataset_config_default(&dc);
    dc.data_path = path;
    dc.tokenizer = tok;
    dc.split = weights;
    dc.which = (enum loom_split)split;
    dc.num_samples = n;
    dc.seq_length = Te;
    dc.seed = c->seed;
    dc.short_seq_prob = c->short_seq_prob;
    dc.mask_prob = c->mask_prob;
    dc.binary_head = 0;
    dc.added_tokens = 2;
    struct t5_source *g = calloc(1, sizeof *g);
    if (!g) return loom_fail(LOOM_ERR_OOM, "out of memory");
    enum loom_status st = loom_bert_dataset_open(&g->ds, &dc);
    if (st != LOOM_OK) {
        free(g);
        return st;
    }
    g->Te = Te;
    g->Td = Td;
    g->extra = extra;
    g->bos = (int32_t)V;
    g->eos = (int32_t)(V + 1);
    g->sentinel0 = (int32_t)(V + 2);
    g->pad = loom_tokenizer_special(tok, "[PAD]");
    g->mask_prob = c->mask_prob;
    g->seed = c->seed;
    g->purpose = loom_hash_mix(loom_hash_str("t5-spans"), (uint64_t)split);
    g->len = loom_bert_dataset_len(g->ds);
    src->ctx = g;
    src->num_samples = g->len;
    src->all_labels = 0;
    src->fill = t5_fill;
    src->free = t5_source_free;
    return LOOM_OK;
}
