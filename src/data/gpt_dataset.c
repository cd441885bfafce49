/* GPT samples over Megatron indexed datasets: train/valid/test split, epochs, shuffles, blends.
 *
 * What matches Megatron-LM (legacy gpt_dataset.py / megatron.core GPTDataset, BlendedDataset):
 *  - "documents" of the split are the dataset's SEQUENCES (Megatron indexes sizes[], i.e. the
 *    sequence lengths; for files written without sentence splitting a sequence is a document).
 *  - --split: the same parsing (',' or '/' separated, padded to three with 0, normalised) and
 *    the same rounding (see split_bounds below).
 *  - Epochs: the smallest E with (E * tokens_per_epoch - 1) / T >= num_samples.
 *  - "Separate last epoch": when E > 1 and the last epoch contributes fewer than
 *    int(0.80 * samples_per_epoch) samples, the first E-1 epochs and the last one are shuffled
 *    separately (documents and samples), exactly as Megatron decides it.
 *  - doc_idx: E copies of the split's document ids, shuffled as ONE array (or two, as above):
 *    like Megatron, documents are not shuffled epoch by epoch, the E-1 first epochs are mixed.
 *  - sample_idx: sample j starts at token j*T of the concatenation of documents in doc_idx
 *    order and has T+1 tokens (consecutive samples share one token); Megatron stores (position
 *    in doc_idx, offset in document) pairs built by the same walk, and so do we.
 *  - shuffle_idx: a permutation of the samples (the first-epochs part and the separate last
 *    part shuffled independently); len() is every sample built, as GPTDataset.__len__.
 *  - Blend: weights normalised; each dataset is asked for ceil(N * w * 1.005) samples; the
 *    dataset of blended sample i is the one with the largest w_d * max(i, 1) - drawn_d (ties
 *    to the lower index), as Megatron's build_blending_indices; the blend has exactly N samples.
 *    (One difference: a dataset of weight 0 is never chosen; Megatron can pick it on a tie at
 *    sample 1 and then reads past its empty index.)
 *
 * What differs:
 *  - The shuffles use loom's counter-based RNG (Philox, loom/rng.h) in a Fisher-Yates walk,
 *    keyed by (--seed, purpose, position), instead of numpy's RandomState: the structure is the
 *    same, the permutations are not bit-identical to Megatron's.
 *  - Nothing is cached on disk (Megatron saves doc/sample/shuffle .npy files); building the
 *    index is linear in its size and done at open.
 *  - A split bound that Megatron's rounding would make negative (possible only in corner cases
 *    such as "0,3,7" over 5 documents) is clamped so that the ranges stay ordered.
 */
#include "loom/data.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/rng.h"

/* ---------------------------------------------------------------------------------------- */
/* --split                                                                                  */

enum loom_status loom_data_parse_split(const char *split, double weights[3]) {
    if (!split || !*split)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--split: empty; expected e.g. 969,30,1");
    char sep = strchr(split, ',') ? ',' : strchr(split, '/') ? '/' : 0;
    double v[3] = {0, 0, 0};
    int n = 0;
    const char *p = split;
    for (;;) {
        const char *e = sep ? strchr(p, sep) : NULL;
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char tmp[64];
        if (n == 3)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--split: '%s' has more than three parts "
                             "(train,valid,test)", split);
        if (len == 0 || len >= sizeof tmp)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--split: '%s': empty or overlong part; "
                             "expected numbers such as 969,30,1", split);
        memcpy(tmp, p, len);
        tmp[len] = 0;
        char *end;
        errno = 0;
        double x = strtod(tmp, &end);
        while (*end && isspace((unsigned char)*end)) end++;
        if (end == tmp || *end || errno || !isfinite(x) || x < 0)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--split: '%s' is not a non-negative number "
                             "(in '%s')", tmp, split);
        v[n++] = x;
        if (!e) break;
        p = e + 1;
    }
    double sum = v[0] + v[1] + v[2];
    if (!(sum > 0))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--split: '%s' sums to 0; at least one part must "
                         "be positive", split);
    for (int i = 0; i < 3; i++) weights[i] = v[i] / sum;
    return LOOM_OK;
}

/* Megatron's get_train_valid_test_split_ (and megatron.core's _get_split_indices):
 *   bounds[0] = 0; bounds[i+1] = bounds[i] + int(round(w_i * float(n)))   (i = 0, 1, 2)
 *   diff = bounds[3] - n; bounds[1..3] -= diff
 * Python's round() rounds half to even; rint() in the default rounding mode does the same on
 * the same double product. The final correction puts the whole rounding surplus or deficit on
 * the train split (the three later bounds move together). Then, unlike Megatron, bounds are
 * clamped to stay ordered (only matters in the corner case noted at the top). */
enum loom_status loom_data_split_bounds(const char *split, int64_t n, int64_t bounds[4]) {
    double w[3];
    LOOM_CHECK(loom_data_parse_split(split, w));
    if (n < 0) return loom_fail(LOOM_ERR_INVALID_ARG, "split: negative document count");
    bounds[0] = 0;
    for (int i = 0; i < 3; i++) bounds[i + 1] = bounds[i] + (int64_t)rint(w[i] * (double)n);
    int64_t diff = bounds[3] - n;
    for (int i = 1; i < 4; i++) bounds[i] -= diff;
    for (int i = 1; i < 4; i++) {
        if (bounds[i] < bounds[i - 1]) bounds[i] = bounds[i - 1];
        if (bounds[i] > n) bounds[i] = n;
    }
    bounds[3] = n;
    return LOOM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* --data-path                                                                              */

void loom_data_blend_free(int n, char **prefixes, double *weights) {
    if (prefixes)
        for (int i = 0; i < n; i++) free(prefixes[i]);
    free(prefixes);
    free(weights);
}

enum loom_status loom_data_parse_blend(const char *data_path, int *n_out, char ***prefixes_out,
                                       double **weights_out, int *is_blend) {
    *n_out = 0;
    *prefixes_out = NULL;
    *weights_out = NULL;
    *is_blend = 0;
    if (!data_path)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: missing; give PREFIX or "
                         "'W1 PREFIX1 W2 PREFIX2 ...'");
    /* split into words */
    int nw = 0;
    for (const char *p = data_path; *p;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        nw++;
        while (*p && !isspace((unsigned char)*p)) p++;
    }
    if (nw == 0)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: empty; give PREFIX or "
                         "'W1 PREFIX1 W2 PREFIX2 ...'");
    if (nw > 1 && nw % 2)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: %d words; expected one PREFIX or "
                         "pairs 'W1 PREFIX1 W2 PREFIX2 ...'", nw);
    char **words = calloc((size_t)nw, sizeof *words);
    if (!words) return loom_fail(LOOM_ERR_OOM, "--data-path: out of memory");
    int k = 0;
    for (const char *p = data_path; *p;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char *s = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        words[k] = strndup(s, (size_t)(p - s));
        if (!words[k]) {
            loom_data_blend_free(nw, words, NULL);
            return loom_fail(LOOM_ERR_OOM, "--data-path: out of memory");
        }
        k++;
    }
    int n = nw == 1 ? 1 : nw / 2;
    char **prefixes = calloc((size_t)n, sizeof *prefixes);
    double *weights = calloc((size_t)n, sizeof *weights);
    if (!prefixes || !weights) {
        loom_data_blend_free(nw, words, NULL);
        loom_data_blend_free(0, prefixes, weights);
        return loom_fail(LOOM_ERR_OOM, "--data-path: out of memory");
    }
    if (nw == 1) {
        prefixes[0] = words[0];
        weights[0] = 1.0;
        free(words);
    } else {
        double sum = 0;
        for (int i = 0; i < n; i++) {
            char *end;
            errno = 0;
            double w = strtod(words[2 * i], &end);
            if (end == words[2 * i] || *end || errno || !isfinite(w) || w < 0) {
                enum loom_status s = loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: '%s' is not a "
                                               "non-negative weight; expected 'W1 PREFIX1 W2 "
                                               "PREFIX2 ...'", words[2 * i]);
                loom_data_blend_free(nw, words, NULL);
                loom_data_blend_free(0, prefixes, weights);
                return s;
            }
            weights[i] = w;
            sum += w;
            prefixes[i] = words[2 * i + 1];
            words[2 * i + 1] = NULL;
        }
        loom_data_blend_free(nw, words, NULL);
        if (!(sum > 0)) {
            loom_data_blend_free(n, prefixes, weights);
            return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: the weights sum to 0");
        }
        for (int i = 0; i < n; i++) weights[i] /= sum;
        *is_blend = 1;
    }
    *n_out = n;
    *prefixes_out = prefixes;
    *weights_out = weights;
    return LOOM_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* one dataset's sample index                                                               */

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
    int64_t *sample_pos;      /* [num_samples + 1]: position in doc_idx where sample j starts */
    int32_t *sample_off;      /* [num_samples + 1]: token offset in that document */
    int64_t *shuffle_idx;     /* [num_samples] */
};

struct loom_gpt_dataset {
    int64_t seq_length;
    int64_t len;
    int nsrc;
    struct gpt_source *src;
    /* blends only: blended sample i = sample blend_sample[i] of source blend_source[i] */
    int32_t *blend_source;
    int64_t *blend_sample;
};

/* Shuffle purposes (Megatron draws all of them from one RandomState(seed)). */
#define PURPOSE_DOCS_MAIN 0x646f632d6d61696eull /* "doc-main" */
#define PURPOSE_DOCS_LAST 0x646f632d6c617374ull /* "doc-last" */
#define PURPOSE_SMPL_MAIN 0x736d702d6d61696eull /* "smp-main" */
#define PURPOSE_SMPL_LAST 0x736d702d6c617374ull /* "smp-last" */

/* Uniform integer in [0, m) for position i of stream (seed, purpose). The modulo bias of a
 * 64-bit draw is below m / 2^64, far below anything observable. */
static inline uint64_t rng_below(uint64_t seed, uint64_t purpose, uint64_t i, uint64_t m) {
    uint32_t w[4];
    loom_rng_u32x4(seed, purpose, i, w);
    uint64_t r = (uint64_t)w[0] | (uint64_t)w[1] << 32;
    return r % m;
}

/* Fisher-Yates: for i = n-1 .. 1, swap a[i] with a[j], j uniform in [0, i]. */
static void shuffle_i32(int32_t *a, int64_t n, uint64_t seed, uint64_t purpose) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(seed, purpose, (uint64_t)i, (uint64_t)i + 1);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
static void shuffle_i64(int64_t *a, int64_t n, uint64_t seed, uint64_t purpose) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(seed, purpose, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static void source_release(struct gpt_source *s) {
    loom_indexed_free(s->indexed);
    free(s->doc_idx);
    free(s->sample_pos);
    free(s->sample_off);
    free(s->shuffle_idx);
    memset(s, 0, sizeof *s);
}

static const char *split_name(enum loom_split w) {
    return w == LOOM_SPLIT_TRAIN ? "train" : w == LOOM_SPLIT_VALID ? "valid" : "test";
}

/* Build doc_idx, sample_idx and shuffle_idx of `s` (indexed, doc range, num_requested set). */
static enum loom_status source_build(struct gpt_source *s, int64_t T, uint64_t seed,
                                     const char *split, enum loom_split which) {
    const char *prefix = loom_indexed_prefix(s->indexed);
    int64_t ndocs = s->doc_end - s->doc_begin;
    int64_t N = s->num_requested;
    if (ndocs == 0) {
        if (N > 0)
            return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: %s has no documents in the %s "
                             "split (--split %s over its %lld documents), but %lld samples are "
                             "needed from it", prefix, split_name(which), split,
                             (long long)loom_indexed_num_sequences(s->indexed), (long long)N);
        return LOOM_OK; /* empty */
    }
    if (s->doc_end > INT32_MAX)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: %lld sequences; the sample index supports "
                         "up to 2^31-1", prefix, (long long)s->doc_end);
    int64_t tpe = 0;
    for (int64_t d = s->doc_begin; d < s->doc_end; d++)
        tpe += loom_indexed_sequence_length(s->indexed, d);
    s->tokens_per_epoch = tpe;
    if (tpe < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--data-path: the %s split of %s holds no tokens",
                         split_name(which), prefix);
    if (N > (INT64_MAX / 4) / T)
        return loom_fail(LOOM_ERR_INVALID_ARG, "%lld samples of %lld tokens: too many",
                         (long long)N, (long long)T);

    /* smallest E with (E * tpe - 1) / T >= N, i.e. E * tpe >= N * T + 1 */
    int64_t need = N * T + 1;
    int64_t E = (need + tpe - 1) / tpe;
    if (E < 1) E = 1;
    s->num_epochs = E;
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

    /* doc_idx */
    s->doc_idx_len = E * ndocs;
    s->doc_idx = malloc((size_t)s->doc_idx_len * sizeof *s->doc_idx);
    if (!s->doc_idx)
        return loom_fail(LOOM_ERR_OOM, "%s: out of memory for a document order of %lld entries",
                         prefix, (long long)s->doc_idx_len);
    for (int64_t e = 0; e < E; e++)
        for (int64_t d = 0; d < ndocs; d++) s->doc_idx[e * ndocs + d] = (int32_t)(s->doc_begin + d);
    if (s->separate_last_epoch) {
        shuffle_i32(s->doc_idx, (E - 1) * ndocs, seed, PURPOSE_DOCS_MAIN);
        shuffle_i32(s->doc_idx + (E - 1) * ndocs, ndocs, seed, PURPOSE_DOCS_LAST);
    } else {
        shuffle_i32(s->doc_idx, E * ndocs, seed, PURPOSE_DOCS_MAIN);
    }

    /* sample_idx: walk the concatenation T tokens at a time (Megatron's build_sample_idx) */
    int64_t ns = (E * tpe - 1) / T;
    s->num_samples = ns;
    s->sample_pos = malloc((size_t)(ns + 1) * sizeof *s->sample_pos);
    s->sample_off = malloc((size_t)(ns + 1) * sizeof *s->sample_off);
    s->shuffle_idx = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *s->shuffle_idx);
    if (!s->sample_pos || !s->sample_off || !s->shuffle_idx)
        return loom_fail(LOOM_ERR_OOM, "%s: out of memory for %lld samples", prefix,
                         (long long)ns);
    int64_t pos = 0, off = 0;
    s->sample_pos[0] = 0;
    s->sample_off[0] = 0;
    for (int64_t j = 1; j <= ns; j++) {
        int64_t remaining = T + 1;
        while (remaining != 0) {
            int64_t doc_len = loom_indexed_sequence_length(s->indexed, s->doc_idx[pos]) - off;
            remaining -= doc_len;
            if (remaining <= 0) {
                /* the sample ends inside this document; the next starts on its last token */
                off += remaining + doc_len - 1;
                remaining = 0;
            } else {
                pos++;
                off = 0;
                LOOM_ASSERT(pos < s->doc_idx_len);
            }
        }
        s->sample_pos[j] = pos;
        s->sample_off[j] = (int32_t)off;
    }

    /* shuffle_idx */
    int64_t n_main = ns;
    if (s->separate_last_epoch) n_main = ((E - 1) * tpe - 1) / T;
    for (int64_t j = 0; j < ns; j++) s->shuffle_idx[j] = j;
    shuffle_i64(s->shuffle_idx, n_main, seed, PURPOSE_SMPL_MAIN);
    shuffle_i64(s->shuffle_idx + n_main, ns - n_main, seed, PURPOSE_SMPL_LAST);
    return LOOM_OK;
}

/* Tokens of unshuffled sample j of source s. */
static enum loom_status source_sample(const struct gpt_source *s, int64_t j, int64_t T,
                                      int32_t *out) {
    int64_t pos = s->sample_pos[j], off = s->sample_off[j];
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

/* Megatron's build_blending_indices: greedy, the dataset furthest behind its share goes next. */
static enum loom_status build_blend(struct loom_gpt_dataset *ds, int64_t N) {
    ds->blend_source = malloc((size_t)(N > 0 ? N : 1) * sizeof *ds->blend_source);
    ds->blend_sample = malloc((size_t)(N > 0 ? N : 1) * sizeof *ds->blend_sample);
    int64_t *drawn = calloc((size_t)ds->nsrc, sizeof *drawn);
    if (!ds->blend_source || !ds->blend_sample || !drawn) {
        free(drawn);
        return loom_fail(LOOM_ERR_OOM, "--data-path: out of memory for a blend of %lld samples",
                         (long long)N);
    }
    for (int64_t i = 0; i < N; i++) {
        double x = i > 1 ? (double)i : 1.0; /* max(i, 1), as Megatron */
        int best = -1;
        double best_err = 0;
        for (int d = 0; d < ds->nsrc; d++) {
            if (!(ds->src[d].weight > 0)) continue; /* see below */
            double err = ds->src[d].weight * x - (double)drawn[d];
            if (best < 0 || err > best_err) {
                best_err = err;
                best = d;
            }
        }
        ds->blend_source[i] = best;
        ds->blend_sample[i] = drawn[best]++;
    }
    enum loom_status st = LOOM_OK;
    for (int d = 0; d < ds->nsrc; d++)
        if (drawn[d] > ds->src[d].num_samples) /* cannot happen with the 0.5% surplus */
            st = loom_fail(LOOM_ERR_INTERNAL, "blend draws %lld samples from %s, which has %lld",
                           (long long)drawn[d], loom_indexed_prefix(ds->src[d].indexed),
                           (long long)ds->src[d].num_samples);
    free(drawn);
    return st;
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
    const char *split = cfg->split ? cfg->split : "969,30,1";
    double sw[3];
    LOOM_CHECK(loom_data_parse_split(split, sw));

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
    for (int i = 0; i < n; i++) {
        struct gpt_source *s = &ds->src[i];
        s->weight = weights[i];
        if ((st = loom_indexed_open(&s->indexed, prefixes[i])) != LOOM_OK) goto done;
        int64_t b[4];
        if ((st = loom_data_split_bounds(split, loom_indexed_num_sequences(s->indexed), b)) !=
            LOOM_OK)
            goto done;
        s->doc_begin = b[cfg->which];
        s->doc_end = b[cfg->which + 1];
        s->num_requested = is_blend ? (int64_t)ceil((double)cfg->num_samples * weights[i] * 1.005)
                                    : cfg->num_samples;
        if ((st = source_build(s, cfg->seq_length, cfg->seed, split, cfg->which)) != LOOM_OK)
            goto done;
    }
    if (is_blend) {
        if ((st = build_blend(ds, cfg->num_samples)) != LOOM_OK) goto done;
        ds->len = cfg->num_samples;
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
                                          enum loom_split which, int64_t *ndocs) {
    *ndocs = 0;
    if ((int)which < 0 || which >= LOOM_SPLIT_COUNT)
        return loom_fail(LOOM_ERR_INVALID_ARG, "GPT dataset: split %d is not train/valid/test",
                         (int)which);
    if (!split) split = "969,30,1";
    int n, is_blend;
    char **prefixes;
    double *weights;
    LOOM_CHECK(loom_data_parse_blend(data_path, &n, &prefixes, &weights, &is_blend));
    enum loom_status st = LOOM_OK;
    for (int i = 0; i < n && st == LOOM_OK; i++) {
        struct loom_indexed *ix;
        if ((st = loom_indexed_open(&ix, prefixes[i])) != LOOM_OK) break;
        int64_t b[4];
        st = loom_data_split_bounds(split, loom_indexed_num_sequences(ix), b);
        if (st == LOOM_OK) *ndocs += b[which + 1] - b[which];
        loom_indexed_free(ix);
    }
    loom_data_blend_free(n, prefixes, weights);
    return st;
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
