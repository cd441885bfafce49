/* --split and --data-path: parsing, and the train/valid/test document ranges as current
 * Megatron-core computes them (its split matrix). Weights are normalised as Megatron's
 * normalize() does it with numpy (w / numpy.sum(w), numpy's pairwise summation), so that the
 * blend weights, and the sizes derived from them, are bit for bit Megatron's. */
#include "loom/data.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    if (!(loom_data_np_sum(v, 3) > 0))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--split: '%s' sums to 0; at least one part must "
                         "be positive", split);
    loom_data_normalize(v, 3);
    for (int i = 0; i < 3; i++) weights[i] = v[i];
    return LOOM_OK;
}

/* numpy.sum of n doubles (float64 add.reduce over a contiguous array): pairwise, eight partial
 * sums per block of up to 128 elements, plain left-to-right below 8 elements. */
double loom_data_np_sum(const double *a, int64_t n) {
    if (n < 8) {
        double r = 0.0;
        for (int64_t i = 0; i < n; i++) r += a[i];
        return r;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = a[j];
        int64_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    int64_t h = n / 2;
    h -= h % 8;
    return loom_data_np_sum(a, h) + loom_data_np_sum(a + h, n - h);
}

/* Megatron's normalize(): w / numpy.sum(w) */
void loom_data_normalize(double *w, int64_t n) {
    double s = loom_data_np_sum(w, n);
    for (int64_t i = 0; i < n; i++) w[i] = w[i] / s;
}

/* Megatron-core's split matrix and split indices: the normalised weights are summed left to
 * right from the integer 0 into bookends c0 = 0, c1 = w0, c2 = c1 + w1, c3 = c2 + w2; split i is
 * absent when c[i+1] <= c[i] (a weight of 0), else it is documents
 * [int(round(c[i] * n)), int(round(c[i+1] * n))). Python's round() rounds half to even, as
 * rint() in the default rounding mode does. Consecutive present splits share their bound. */
enum loom_status loom_data_split_bounds(const char *split, int64_t n, int64_t bounds[4],
                                        int present[3]) {
    double w[3], c[4];
    LOOM_CHECK(loom_data_parse_split(split, w));
    if (n < 0) return loom_fail(LOOM_ERR_INVALID_ARG, "split: negative document count");
    c[0] = 0.0;
    for (int i = 0; i < 3; i++) c[i + 1] = c[i] + w[i];
    for (int i = 0; i < 4; i++) bounds[i] = (int64_t)rint(c[i] * (double)n);
    for (int i = 0; i < 3; i++) {
        if (present) present[i] = c[i + 1] > c[i];
        if (bounds[i + 1] < bounds[i]) bounds[i + 1] = bounds[i]; /* cannot happen; kept safe */
    }
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
        loom_data_normalize(weights, n);
        *is_blend = 1;
    }
    *n_out = n;
    *prefixes_out = prefixes;
    *weights_out = weights;
    return LOOM_OK;
}

