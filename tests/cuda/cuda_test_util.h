/* What the CUDA tests (tests/cuda/test_cuda_*.c) share: the backends or the skip, host and device
 * buffers, random inputs, 16-bit values on the host, error measures and a pass/fail tally.
 * Header-only; include it once per test executable, after defining CT_SEED, the stream
 * (loom/rng.h's seed) of that test's random inputs.
 *
 *   ct_open(&gpu, &cpu)            the CUDA backend on device 0 and (cpu not NULL) the CPU one:
 *                                  0, or the test's exit status when there is no CUDA device
 *                                  (77, skipped; 1 with LOOM_REQUIRE_CUDA=1) or no CPU backend
 *   ct_alloc(bytes)                malloc that ends the program (status 2) when it fails
 *   ct_randn(n, purpose, sd, mean) new x[n]: mean + sd * loom_rng_normal(CT_SEED, purpose, i)
 *   ct_to16(x, f16), ct_from16     fp32 -> bf16 bits (fp16 with f16), round to nearest even; back
 *   ct_rounded(x, n, f16)          new copy of x[n] rounded to bf16 (fp16)
 *   ct_dput(be, h, bytes)          new device buffer holding h (zeroed when h is NULL)
 *   ct_dget(be, d, bytes)          new host copy of a device buffer
 *   ct_dputf, ct_dgetf             the same counted in floats
 *   ct_dput16(be, h, n, f16)       new 16-bit device array of host floats, rounded as ct_to16
 *   ct_dget16(be, d, n, f16)       new host floats of a 16-bit device array (exact)
 *   ct_attn(B, T, NH, NKV, HS, c)  an attention problem: fp32 arrays, scale 1/sqrt(HS), causal c,
 *                                  no dropout, every head local
 *   ct_docs(B, T)                  new doc_start[B*T] (loom_attn.doc_start, host) of documents
 *                                  packed into samples: single tokens, lengths below, at and
 *                                  above the attention kernels' tiles (32, 64, 128)
 *   ct_doc_positions(doc, B, T)    new positions[B*T] of the tokens in their documents
 *   ct_norm_err(got, ref, n)       max_i |got_i - ref_i| / max_j |ref_j|              (normwise)
 *   ct_elem_err(got, ref, n, fl)   max_i |got_i - ref_i| / max(|ref_i|, fl max_j |ref_j|)
 *   ct_check(what, err, tol)       one line "ok" / "FAIL", a pass when err <= tol
 *   ct_check_norm, ct_check_elem   ct_check of ct_norm_err, ct_elem_err
 *   ct_check_true(what, cond)      the same for a yes/no check
 *   ct_exact(what, got, want, n)   a pass when the floats are the same bits
 *   ct_tally(ok)                   counts one check whose line the caller printed
 *   ct_finish()                    prints "P passed, F failed"; returns the exit status (0 or 1)
 * The error measures return +inf when a value is NaN or infinite, so that NaN never passes.
 */
#ifndef LOOM_TESTS_CUDA_TEST_UTIL_H
#define LOOM_TESTS_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/log.h"
#include "loom/rng.h"

#ifndef CT_SEED
#error "define CT_SEED (the stream of the test's random inputs) before cuda_test_util.h"
#endif

static inline int ct_open(struct loom_backend **gpu, struct loom_backend **cpu) {
    if (loom_backend_create(gpu, "cuda", 0) != LOOM_OK) {
        const char *req = getenv("LOOM_REQUIRE_CUDA");
        loom_print_error();
        if (req && req[0] == '1') return 1;
        puts("skipped: no CUDA device");
        return 77;
    }
    if (cpu && loom_backend_create(cpu, "cpu", 0) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    return 0;
}

static inline struct loom_attn ct_attn(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                       int causal) {
    struct loom_attn a = {0};
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.HS = HS;
    a.causal = causal;
    a.scale = 1.0f / sqrtf((float)HS);
    a.NH_global = NH;
    return a;
}

/* ---- host buffers ---- */

static inline void *ct_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    return p;
}

static inline float *ct_randn(int64_t n, uint64_t purpose, float sd, float mean) {
    float *p = ct_alloc((size_t)(n > 0 ? n : 0) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = mean + sd * loom_rng_normal(CT_SEED, purpose, (uint64_t)i);
    return p;
}

/* ---- documents packed into samples ---- */

static inline int32_t *ct_docs(int64_t B, int64_t T) {
    static const int len[] = {1, 1, 70, 5, 130, 33, 17, 64, 2, 200, 9, 128, 31};
    const int nl = (int)(sizeof len / sizeof len[0]);
    int32_t *d = ct_alloc((size_t)(B * T > 0 ? B * T : 0) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) {
        int k = (int)((3 * b) % nl); /* each sample from another place in the list */
        int64_t start = 0, left = len[k];
        for (int64_t t = 0; t < T; t++) {
            if (left == 0) {
                start = t;
                k = (k + 1) % nl;
                left = len[k];
            }
            d[b * T + t] = (int32_t)start;
            left--;
        }
    }
    return d;
}

static inline int32_t *ct_doc_positions(const int32_t *doc, int64_t B, int64_t T) {
    int32_t *p = ct_alloc((size_t)(B * T > 0 ? B * T : 0) * sizeof(int32_t));
    for (int64_t i = 0; i < B * T; i++)
        p[i] = (int32_t)(i % T) - doc[i];
    return p;
}

/* ---- 16-bit values ---- */

static inline uint16_t ct_to16(float x, int f16) {
    if (f16) {
        _Float16 h = (_Float16)x;
        uint16_t b;
        memcpy(&b, &h, 2);
        return b;
    }
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float ct_from16(uint16_t b, int f16) {
    if (f16) {
        _Float16 h;
        memcpy(&h, &b, 2);
        return (float)h;
    }
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static inline float *ct_rounded(const float *x, int64_t n, int f16) {
    float *r = ct_alloc((size_t)(n > 0 ? n : 0) * sizeof(float));
    for (int64_t i = 0; i < n; i++) r[i] = ct_from16(ct_to16(x[i], f16), f16);
    return r;
}

/* ---- device buffers ---- */

static inline void *ct_dput(struct loom_backend *be, const void *h, size_t bytes) {
    void *d = be->ops->malloc(be, bytes ? bytes : 4);
    if (!d) {
        fprintf(stderr, "%s: allocation of %zu bytes failed\n", be->ops->name, bytes);
        exit(2);
    }
    if (h && bytes)
        be->ops->to_device(be, d, h, bytes);
    else if (bytes)
        be->ops->zero(be, d, bytes);
    return d;
}

static inline void *ct_dget(struct loom_backend *be, const void *d, size_t bytes) {
    void *h = ct_alloc(bytes);
    if (bytes) be->ops->to_host(be, h, d, bytes);
    return h;
}

static inline float *ct_dputf(struct loom_backend *be, const float *h, int64_t n) {
    return ct_dput(be, h, (size_t)(n > 0 ? n : 0) * sizeof(float));
}

static inline float *ct_dgetf(struct loom_backend *be, const void *d, int64_t n) {
    return ct_dget(be, d, (size_t)(n > 0 ? n : 0) * sizeof(float));
}

static inline void *ct_dput16(struct loom_backend *be, const float *h, int64_t n, int f16) {
    uint16_t *u = ct_alloc((size_t)(n > 0 ? n : 0) * 2);
    for (int64_t i = 0; i < n; i++) u[i] = ct_to16(h[i], f16);
    void *d = ct_dput(be, u, (size_t)(n > 0 ? n : 0) * 2);
    free(u);
    return d;
}

static inline float *ct_dget16(struct loom_backend *be, const void *d, int64_t n, int f16) {
    uint16_t *u = ct_dget(be, d, (size_t)(n > 0 ? n : 0) * 2);
    float *h = ct_alloc((size_t)(n > 0 ? n : 0) * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = ct_from16(u[i], f16);
    free(u);
    return h;
}

/* ---- error measures ---- */

/* max_j |ref_j|, or -1 when a value of got or ref is not finite */
static inline double ct_ref_max(const float *got, const float *ref, int64_t n) {
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(ref[i])) return -1.0;
        if (fabs((double)ref[i]) > mx) mx = fabs((double)ref[i]);
    }
    return mx;
}

static inline double ct_norm_err(const float *got, const float *ref, int64_t n) {
    const double mx = ct_ref_max(got, ref, n);
    if (mx < 0.0) return INFINITY;
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > e) e = d;
    }
    return mx > 0.0 ? e / mx : e;
}

static inline double ct_elem_err(const float *got, const float *ref, int64_t n,
                                 double floor_frac) {
    const double mx = ct_ref_max(got, ref, n);
    if (mx < 0.0) return INFINITY;
    const double fl = mx > 0.0 ? floor_frac * mx : 1e-30;
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double a = fabs((double)ref[i]);
        double r = fabs((double)got[i] - (double)ref[i]) / (a > fl ? a : fl);
        if (isnan(r)) return INFINITY; /* 0 / 0 under a floor that underflowed */
        if (r > e) e = r;
    }
    return e;
}

/* ---- the tally ---- */

static inline int *ct_counts(void) {
    static int counts[2]; /* passed, failed */
    return counts;
}

static inline int ct_tally(int ok) {
    ct_counts()[ok ? 0 : 1]++;
    return ok;
}

static inline int ct_check(const char *what, double err, double tol) {
    int ok = err <= tol;
    printf("%s %-72s err %.2e (tol %.0e)\n", ok ? "ok  " : "FAIL", what, err, tol);
    return ct_tally(ok);
}

static inline int ct_check_norm(const char *what, const float *got, const float *ref, int64_t n,
                                double tol) {
    return ct_check(what, ct_norm_err(got, ref, n), tol);
}

static inline int ct_check_elem(const char *what, const float *got, const float *ref, int64_t n,
                                double floor_frac, double tol) {
    return ct_check(what, ct_elem_err(got, ref, n, floor_frac), tol);
}

static inline int ct_check_true(const char *what, int cond) {
    printf("%s %s\n", cond ? "ok  " : "FAIL", what);
    return ct_tally(cond);
}

static inline int ct_exact(const char *what, const float *got, const float *want, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&got[i], &want[i], 4) != 0;
    printf("%s %s: %lld of %lld differ\n", bad ? "FAIL" : "ok  ", what, (long long)bad,
           (long long)n);
    return ct_tally(!bad);
}

static inline int ct_finish(void) {
    printf("%d passed, %d failed\n", ct_counts()[0], ct_counts()[1]);
    return ct_counts()[1] ? 1 : 0;
}

#endif
