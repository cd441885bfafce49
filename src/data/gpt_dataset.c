/* GPT samples over Megatron indexed datasets: Megatron-core's GPTDataset and BlendedDataset.
 *
 * Sample for sample and in the same order as Megatron-core (megatron/core/datasets, 2025):
 *  - "documents" of a split are the dataset's SEQUENCES (GPTDataset splits sequence_lengths);
 *    --split gives their ranges as the split matrix does (loom_data_split_bounds, data_split.c);
 *    a split of weight 0 is absent.
 *  - Epochs: the smallest E with E * tokens_per_epoch >= N * T + 1 (N samples asked, T
 *    --seq-length; one extra token per sample).
 *  - Separate last epoch: when E > 1 and the last epoch contributes fewer than
 *    int(0.80 * samples_per_epoch) samples, the document index is built as E-1 epochs then 1
 *    epoch, each shuffled on its own, and so is the shuffle index (samples of the first E-1
 *    epochs, then the rest).
 *  - Random numbers: ONE numpy RandomState(--seed) stream per dataset and split (loom/np_random.h)
 *    draws, in this order, the document shuffle(s) then the sample shuffle(s), exactly as many
 *    draws as numpy's shuffle makes.
 *  - document_index: E copies of the split's document ids, shuffled; sample_index: sample j
 *    starts at (position in document_index, offset) found by walking T tokens at a time, a sample
 *    holding T + 1 tokens (Megatron's build_sample_idx, the last partial sample dropped);
 *    shuffle_index: the permutation above. len() of one dataset is every sample built.
 *  - Blend (--data-path W1 P1 W2 P2 ...): weights normalised as numpy does (twice for the
 *    blend itself, as Megatron normalises them again); dataset d is asked for
 *    ceil(ceil(N * w_d) * 1.005) samples; the blend holds sum_d ceil(N * w_d) samples; blended
 *    sample i comes from the dataset with the largest w_d * max(i, 1) - drawn_d (first on a tie),
 *    Megatron's build_blending_indices.
 *  - Datasets of their own per split (--train-data-path ...): the whole dataset is the split.
 *  - With --data-cache-path the indices are read from, or written to, Megatron's cache files
 *    (index_cache.c); a cache that does not match the request is rebuilt.
 */
#include "loom/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/index_cache.h"
#include "loom/log.h"
#include "loom/np_random.h"

struct gpt_source {
    struct loom_indexed *indexed;
    double weight;
    int64_t doc_begin, doc_end;
    int64_t tokens_per_epoch;
    int64_t num_epochs;
    int separate_last_epoch;
    int64_t num_requested;
    int64_t num_samples;      /* samples built */
    int32_t *doc_idx;         /* num_epochs * ndocs */
    int64_t doc_idx_len;
    int64_t *sample_idx;      /* [num_samples + 1][2]: position in doc_idx, token offset */
    int64_t *shuffle_idx;     /* [num_samples] */
    int from_cache;
};

struct loom_gpt_dataset {
    int64_t seq_length;
    int64_t len;
    int nsrc;
    struct gpt_source *src;
    /* blends only: blended sample i = sample blend_sample[i] of source blend_source[i] */
    int64_t *blend_source;
    int64_t *blend_sample;
    int blend_from_cache;
};

static void source_release(struct gpt_source *s) {
    loom_indexed_free(s->indexed);
    free(s->doc_idx);
    free(s->sample_idx);
    free(s->shuffle_idx);
    memset(s, 0, sizeof *s);
}

static const char *split_name(enum loom_split w) {
    return w == LOOM_SPLIT_TRAIN ? "train" : w == LOOM_SPLIT_VALID ? "valid" : "test";
}

/* Epochs, the separate-last-epoch decision and the number of samples of `s` (indexed, doc
 * range, num_requested set). */
static enum loom_status source_plan(struct gpt_source *s, int64_t T, enum loom_split which,
                                    const char *split) {
    const char *prefix = loom_indexed_prefix(s->indexed);
    int64_t ndocs = s->doc_end - s->doc_begin;
    int64_t N = s->num_requested;
    if (ndocs == 0 && N == 0) return LOOM_OK; /* an empty split nothing is asked of */
    if (ndocs == 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: %s has no documents in the %s "
                         "split (--split %s over its %lld documents), but it is asked for %lld "
                         "samples; give the split more weight or leave it out (weight 0)",
                         prefix, split_name(which), split ? split : "(whole dataset)",
                         (long long)loom_indexed_num_sequences(s->indexed), (long long)N);
    if (s->doc_end > INT32_MAX)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: %lld sequences; the sample index supports "
                         "up to 2^31-1", prefix, (long long)s->doc_end);
    int64_t tpe = 0;
    for (int64_t d = s->doc_begin; d < s->doc_end; d++)
        tpe += loom_indexed_sequence_length(s->indexed, d);
    s->tokens_per_epoch = tpe;
    if (tpe < 2)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: the %s split of %s holds %s; a "
                         "sample needs at least 2 tokens", split_name(which), prefix,
                         tpe ? "1 token" : "no tokens");
    if (N > (INT64_MAX / 4) / T)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%lld samples of %lld tokens: too many",
                         (long long)N, (long long)T);
    int64_t need = N * T + 1;
    int64_t E = (need + tpe - 1) / tpe;
    if (E < 1) E = 1;
    s->num_epochs = E;
    s->separate_last_epoch = 0;
    if (E > 1) {
        int64_t from_first = ((E - 1) * tpe - 1) / T;
        int64_t last = N - from_first;
        int64_t per_epoch = (tpe - 1) / T;
        LOOM_ASSERT(last >= 0 && last <= per_epoch + 1);
        s->separate_last_epoch = last < (int64_t)(0.80 * (double)per_epoch);
    }
    if (ndocs > (INT64_MAX / 8) / E)
        return loom_fail(LOOM_ERR_OOM, "%s: document order of %lld epochs x %lld documents is "
                         "too large", prefix, (long long)E, (long long)ndocs);
    s->doc_idx_len = E * ndocs;
    s->num_samples = (E * tpe - 1) / T;
    return LOOM_OK;
}

/* document_index, sample_index and shuffle_index of a planned source, drawn from
 * RandomState(seed) as Megatron's GPTDataset draws them. */
static enum loom_status source_build(struct gpt_source *s, int64_t T, uint32_t seed) {
    const char *prefix = loom_indexed_prefix(s->indexed);
    const int64_t ndocs = s->doc_end - s->doc_begin, E = s->num_epochs, ns = s->num_samples;
    s->doc_idx = malloc((size_t)s->doc_idx_len * sizeof *s->doc_idx);
    s->sample_idx = malloc((size_t)(ns + 1) * 2 * sizeof *s->sample_idx);
    s->shuffle_idx = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *s->shuffle_idx);
    if (!s->doc_idx || !s->sample_idx || !s->shuffle_idx)
        return loom_fail(LOOM_ERR_OOM, "%s: out of memory for %lld samples over %lld documents",
                         prefix, (long long)ns, (long long)s->doc_idx_len);
    for (int64_t e = 0; e < E; e++)
        for (int64_t d = 0; d < ndocs; d++) s->doc_idx[e * ndocs + d] = (int32_t)(s->doc_begin + d);
    struct loom_np_random rs;
    loom_np_random_seed(&rs, seed);
    const int64_t docs_main = s->separate_last_epoch ? (E - 1) * ndocs : E * ndocs;
    loom_np_random_shuffle_i32(&rs, s->doc_idx, docs_main);
    loom_np_random_shuffle_i32(&rs, s->doc_idx + docs_main, s->doc_idx_len - docs_main);

    /* walk the concatenation T tokens at a time; a sample ends inside a document and the next
     * one starts on its last token */
    int64_t pos = 0, off = 0;
    s->sample_idx[0] = 0;
    s->sample_idx[1] = 0;
    for (int64_t j = 1; j <= ns; j++) {
        int64_t remaining = T + 1;
        while (remaining != 0) {
            int64_t doc_len = loom_indexed_sequence_length(s->indexed, s->doc_idx[pos]) - off;
            remaining -= doc_len;
            if (remaining <= 0) {
                off += remaining + doc_len - 1;
                remaining = 0;
            } else {
                pos++;
                off = 0;
                LOOM_ASSERT(pos < s->doc_idx_len);
            }
        }
        s->sample_idx[2 * j] = pos;
        s->sample_idx[2 * j + 1] = off;
    }

    const int64_t n_main = s->separate_last_epoch ? ((E - 1) * s->tokens_per_epoch - 1) / T : ns;
    for (int64_t j = 0; j < ns; j++) s->shuffle_idx[j] = j;
    loom_np_random_shuffle_i64(&rs, s->shuffle_idx, n_main);
    loom_np_random_shuffle_i64(&rs, s->shuffle_idx + n_main, ns - n_main);
    return LOOM_OK;
}

/* Tokens of unshuffled sample j of source s. */
static enum loom_status source_sample(const struct gpt_source *s, int64_t j, int64_t T,
                                      int32_t *out) {
    int64_t pos = s->sample_idx[2 * j], off = s->sample_idx[2 * j + 1];
    int64_t need = T + 1;
    while (need > 0) {
        LOOM_ASSERT(pos < s->doc_idx_len);
        int64_t doc = s->doc_idx[pos];
        int64_t avail = loom_indexed_sequence_length(s->indexed, doc) - off;
        int64_t take = avail < need ? avail : need;
        if (take > 0) LOOM_CHECK(loom_indexed_read(s->indexed, doc, off, take, out));
        out += take;
        need -= take;
        pos++;
        off = 0;
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* public                                                                                   */

void loom_gpt_dataset_free(struct loom_gpt_dataset *ds) {
    if (!ds) return;
    for (int i = 0; i < ds->nsrc; i++) source_release(&ds->src[i]);
    free(ds->src);
    free(ds->blend_source);
    free(ds->blend_sample);
    free(ds);
}

/* Megatron's build_blending_indices: greedy, the dataset furthest behind its share goes next
 * (the first one on a tie). */
static enum loom_status build_blend(struct loom_gpt_dataset *ds, const double *w, int64_t N) {
    ds->blend_source = malloc((size_t)(N > 0 ? N : 1) * sizeof *ds->blend_source);
    ds->blend_sample = malloc((size_t)(N > 0 ? N : 1) * sizeof *ds->blend_sample);
    int64_t *drawn = calloc((size_t)ds->nsrc, sizeof *drawn);
    if (!ds->blend_source || !ds->blend_sample || !drawn) {
        free(drawn);
        return loom_fail(LOOM_ERR_OOM, "--data-path: out of memory for a blend of %lld samples",
                         (long long)N);
    }
    for (int64_t i = 0; i < N; i++) {
        const double x = i > 1 ? (double)i : 1.0; /* max(i, 1) */
        int best = 0;
        double best_err = w[0] * x - (double)drawn[0];
        for (int d = 1; d < ds->nsrc; d++) {
            double err = w[d] * x - (double)drawn[d];
            if (err > best_err) {
                best_err = err;
                best = d;
            }
        }
        ds->blend_source[i] = best;
        ds->blend_sample[i] = drawn[best]++;
    }
    free(drawn);
    return LOOM_OK;
}

/* The blend must not ask a dataset for more samples than it built (Megatron's IndexError). */
static enum loom_status check_blend(const struct loom_gpt_dataset *ds) {
    for (int64_t i = 0; i < ds->len; i++) {
        const int64_t d = ds->blend_source[i];
        if (d < 0 || d >= ds->nsrc || ds->blend_sample[i] < 0 ||
            ds->blend_sample[i] >= ds->src[d].num_samples)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: blended sample %lld asks "
                             "dataset %lld for its sample %lld, beyond the %lld it holds",
                             (long long)i, (long long)d, (long long)ds->blend_sample[i],
                             d >= 0 && d < ds->nsrc ? (long long)ds->src[d].num_samples : 0LL);
    }
    return LOOM_OK;
}

static void cache_key(struct loom_index_cache_key *k, const struct loom_gpt_dataset_config *cfg,
                      const char *prefix, int64_t num_samples, const char *split) {
    *k = (struct loom_index_cache_key){
        .cache_path = cfg->cache_path,
        .dataset_path = prefix,
        .num_samples = num_samples,
        .which = cfg->which,
        .seed = (uint32_t)cfg->seed,
        .seq_length = cfg->seq_length,
        .split = split,
        .tokenizer_type = cfg->tokenizer_type,
        .vocab_file = cfg->vocab_file,
        .merge_file = cfg->merge_file,
    };
}

/* A planned source's indices from the cache, taken only if they are what this request needs:
 * the document index holds each of the split's documents once per epoch; the sample index
 * starts at (0, 0) and each next entry lies exactly T tokens further along the document index
 * (which determines it); the shuffle index is a permutation of the samples. */
static enum loom_status source_load(struct gpt_source *s, const struct loom_index_cache_key *key,
                                    int64_t T) {
    int32_t *doc = NULL;
    int64_t *smp = NULL, *shf = NULL, ndoc = 0, nsmp = 0, nshf = 0;
    enum loom_status st = loom_index_cache_load(key, &doc, &ndoc, &smp, &nsmp, &shf, &nshf);
    const char *why = NULL;
    const int64_t nd = s->doc_end - s->doc_begin, ns = s->num_samples;
    int64_t *count = NULL;
    if (st != LOOM_OK) goto out;
    if (ndoc != s->doc_idx_len || nsmp != ns + 1 || nshf != ns) {
        why = "array sizes differ from the request's";
        goto out;
    }
    count = calloc((size_t)(nd > ns ? nd : ns) + 1, sizeof *count);
    if (!count) {
        why = "out of memory";
        goto out;
    }
    for (int64_t i = 0; i < ndoc && !why; i++) {
        if (doc[i] < s->doc_begin || doc[i] >= s->doc_end) why = "document outside the split";
        else if (++count[doc[i] - s->doc_begin] > s->num_epochs) why = "document repeated";
    }
    /* token position of each sample start: prefix lengths along the document index */
    int64_t pos = 0, base = 0;
    for (int64_t j = 0; j <= ns && !why; j++) {
        const int64_t p = smp[2 * j], o = smp[2 * j + 1];
        if (p < pos || p >= ndoc) {
            why = "sample index out of order";
            break;
        }
        while (pos < p) base += loom_indexed_sequence_length(s->indexed, doc[pos++]);
        if (o < 0 || o >= loom_indexed_sequence_length(s->indexed, doc[p]) || base + o != j * T)
            why = "sample index does not step by --seq-length";
    }
    memset(count, 0, (size_t)(nd > ns ? nd : ns) * sizeof *count);
    for (int64_t j = 0; j < ns && !why; j++)
        if (shf[j] < 0 || shf[j] >= ns || count[shf[j]]++) why = "shuffle index not a permutation";
out:
    free(count);
    if (st == LOOM_OK && why) {
        loom_log_info("loom: --data-cache-path: the cached %s indices of %s do not hold (%s); "
                      "rebuilding them", split_name(key->which), key->dataset_path, why);
        st = LOOM_ERR_FORMAT;
    }
    if (st != LOOM_OK) {
        free(doc);
        free(smp);
        free(shf);
        return st;
    }
    s->doc_idx = doc;
    s->sample_idx = smp;
    s->shuffle_idx = shf;
    s->from_cache = 1;
    return LOOM_OK;
}

enum loom_status loom_gpt_dataset_open(struct loom_gpt_dataset **out,
                                       const struct loom_gpt_dataset_config *cfg) {
    *out = NULL;
    if (cfg->seq_length <= 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--seq-length: %lld; must be positive",
                         (long long)cfg->seq_length);
    if (cfg->num_samples < 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "GPT dataset: negative number of samples %lld",
                         (long long)cfg->num_samples);
    if ((int)cfg->which < 0 || cfg->which >= LOOM_SPLIT_COUNT)
        return loom_fail(LOOM_ERR_INVALID_ARG, "GPT dataset: split %d is not train/valid/test",
                         (int)cfg->which);
    if (cfg->seed > 0xffffffffu)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--seed %llu: the data order is numpy's "
                         "RandomState(seed), which takes 0 .. 4294967295",
                         (unsigned long long)cfg->seed);
    const char *split = cfg->per_split ? NULL : cfg->split ? cfg->split : "969,30,1";
    if (split) {
        int present[3];
        int64_t b[4];
        LOOM_CHECK(loom_data_split_bounds(split, 0, b, present));
        if (!present[cfg->which])
            return loom_fail(LOOM_ERR_INVALID_ARG, "--split %s: the %s split has weight 0 and "
                             "is absent", split, split_name(cfg->which));
    }

    int n;
    char **prefixes;
    double *weights;
    int is_blend;
    LOOM_CHECK(loom_data_parse_blend(cfg->data_path, &n, &prefixes, &weights, &is_blend));
    struct loom_gpt_dataset *ds = calloc(1, sizeof *ds);
    enum loom_status st = LOOM_OK;
    if (!ds || !(ds->src = calloc((size_t)n, sizeof *ds->src))) {
        st = loom_fail(LOOM_ERR_OOM, "GPT dataset: out of memory");
        goto done;
    }
    ds->seq_length = cfg->seq_length;
    ds->nsrc = n;
    int64_t blend_size = 0;
    for (int i = 0; i < n; i++) {
        struct gpt_source *s = &ds->src[i];
        s->weight = weights[i];
        if ((st = loom_indexed_open(&s->indexed, prefixes[i])) != LOOM_OK) goto done;
        const int64_t nseq = loom_indexed_num_sequences(s->indexed);
        int64_t b[4] = {0, nseq, nseq, nseq};
        if (split && (st = loom_data_split_bounds(split, nseq, b, NULL)) != LOOM_OK) goto done;
        s->doc_begin = split ? b[cfg->which] : 0;
        s->doc_end = split ? b[cfg->which + 1] : nseq;
        s->num_requested = cfg->num_samples;
        if (is_blend) {
            const double target = ceil((double)cfg->num_samples * weights[i]);
            blend_size += (int64_t)target;
            s->num_requested = (int64_t)ceil(target * (1.0 + 0.005));
        }
        if ((st = source_plan(s, cfg->seq_length, cfg->which, split)) != LOOM_OK) goto done;
        if (s->doc_end == s->doc_begin) continue; /* empty, no samples */
        struct loom_index_cache_key key;
        cache_key(&key, cfg, prefixes[i], s->num_requested, split);
        if (cfg->cache_path && source_load(s, &key, cfg->seq_length) == LOOM_OK) continue;
        if ((st = source_build(s, cfg->seq_length, (uint32_t)cfg->seed)) != LOOM_OK) goto done;
        if (cfg->cache_path &&
            (st = loom_index_cache_save(&key, s->doc_idx, s->doc_idx_len, s->sample_idx,
                                        s->num_samples, s->shuffle_idx)) != LOOM_OK)
            goto done;
    }
    if (is_blend) {
        /* Megatron's BlendedDataset normalises the (normalised) weights once more */
        double *w2 = malloc((size_t)n * sizeof *w2);
        if (!w2) {
            st = loom_fail(LOOM_ERR_OOM, "GPT dataset: out of memory");
            goto done;
        }
        memcpy(w2, weights, (size_t)n * sizeof *w2);
        loom_data_normalize(w2, n);
        ds->len = blend_size;
        struct loom_index_cache_key *keys = calloc((size_t)n, sizeof *keys);
        if (!keys) {
            free(w2);
            st = loom_fail(LOOM_ERR_OOM, "GPT dataset: out of memory");
            goto done;
        }
        for (int i = 0; i < n; i++)
            cache_key(&keys[i], cfg, prefixes[i], ds->src[i].num_requested, split);
        struct loom_blend_cache_key bkey = {.cache_path = cfg->cache_path, .which = cfg->which,
                                            .datasets = keys, .n = n, .weights = w2,
                                            .size = blend_size};
        st = build_blend(ds, w2, blend_size);
        if (st == LOOM_OK) st = check_blend(ds);
        if (st == LOOM_OK && cfg->cache_path) {
            /* a cached blend is taken only where it equals the one just built (building it is
             * cheap); any other is rewritten */
            int64_t *cs = NULL, *cn = NULL, len = 0;
            if (loom_blend_cache_load(&bkey, &cs, &cn, &len) == LOOM_OK && len == blend_size &&
                (len == 0 || (memcmp(cs, ds->blend_source, (size_t)len * sizeof *cs) == 0 &&
                              memcmp(cn, ds->blend_sample, (size_t)len * sizeof *cn) == 0)))
                ds->blend_from_cache = 1;
            else
                st = loom_blend_cache_save(&bkey, ds->blend_source, ds->blend_sample);
            free(cs);
            free(cn);
        }
        free(keys);
        free(w2);
        if (st != LOOM_OK) goto done;
    } else {
        ds->len = ds->src[0].num_samples;
    }
done:
    loom_data_blend_free(n, prefixes, weights);
    if (st != LOOM_OK) {
        loom_gpt_dataset_free(ds);
        return st;
    }
    *out = ds;
    return LOOM_OK;
}

enum loom_status loom_data_split_documents(const char *data_path, const char *split,
                                          enum loom_split which, int64_t *ndocs, int *present) {
    *ndocs = 0;
    *present = 0;
    if ((int)which < 0 || which >= LOOM_SPLIT_COUNT)
        return loom_fail(LOOM_ERR_INVALID_ARG, "GPT dataset: split %d is not train/valid/test",
                         (int)which);
    if (!split) split = "969,30,1";
    int p[3];
    int64_t b[4];
    LOOM_CHECK(loom_data_split_bounds(split, 0, b, p));
    if (!p[which]) return LOOM_OK;
    *present = 1;
    int n, is_blend;
    char **prefixes;
    double *weights;
    LOOM_CHECK(loom_data_parse_blend(data_path, &n, &prefixes, &weights, &is_blend));
    enum loom_status st = LOOM_OK;
    for (int i = 0; i < n && st == LOOM_OK; i++) {
        struct loom_indexed *ix;
        if ((st = loom_indexed_open(&ix, prefixes[i])) != LOOM_OK) break;
        st = loom_data_split_bounds(split, loom_indexed_num_sequences(ix), b, NULL);
        if (st == LOOM_OK) *ndocs += b[which + 1] - b[which];
        loom_indexed_free(ix);
    }
    loom_data_blend_free(n, prefixes, weights);
    return st;
}

int loom_gpt_dataset_from_cache(const struct loom_gpt_dataset *ds) {
    int all = ds->blend_source ? ds->blend_from_cache : 1;
    for (int i = 0; i < ds->nsrc; i++) all = all && ds->src[i].from_cache;
    return all;
}

int64_t loom_gpt_dataset_len(const struct loom_gpt_dataset *ds) { return ds->len; }
int64_t loom_gpt_dataset_seq_length(const struct loom_gpt_dataset *ds) { return ds->seq_length; }
int loom_gpt_dataset_num_sources(const struct loom_gpt_dataset *ds) { return ds->nsrc; }

enum loom_status loom_gpt_dataset_locate(const struct loom_gpt_dataset *ds, int64_t k,
                                         int *source, int64_t *unshuffled) {
    if (k < 0 || k >= ds->len)
        return loom_fail(LOOM_ERR_INVALID_ARG, "GPT dataset: sample %lld out of range [0, %lld)",
                         (long long)k, (long long)ds->len);
    int d = 0;
    int64_t kk = k;
    if (ds->blend_source) {
        d = ds->blend_source[k];
        kk = ds->blend_sample[k];
    }
    *source = d;
    *unshuffled = ds->src[d].shuffle_idx[kk];
    return LOOM_OK;
}

enum loom_status loom_gpt_dataset_get(const struct loom_gpt_dataset *ds, int64_t k,
                                      int32_t *tokens_out) {
    int d = 0;
    int64_t j = 0;
    LOOM_CHECK(loom_gpt_dataset_locate(ds, k, &d, &j));
    return source_sample(&ds->src[d], j, ds->seq_length, tokens_out);
}

enum loom_status loom_gpt_dataset_source(const struct loom_gpt_dataset *ds, int source,
                                         struct loom_gpt_source_info *info) {
    if (source < 0 || source >= ds->nsrc)
        return loom_fail(LOOM_ERR_INVALID_ARG, "GPT dataset: source %d out of range [0, %d)",
                         source, ds->nsrc);
    const struct gpt_source *s = &ds->src[source];
    info->indexed = s->indexed;
    info->weight = s->weight;
    info->doc_begin = s->doc_begin;
    info->doc_end = s->doc_end;
    info->tokens_per_epoch = s->tokens_per_epoch;
    info->num_epochs = s->num_epochs;
    info->separate_last_epoch = s->separate_last_epoch;
    info->num_requested = s->num_requested;
    info->num_samples = s->num_samples;
    info->doc_order = s->doc_idx;
    info->doc_order_len = s->doc_idx_len;
    return LOOM_OK;
}
