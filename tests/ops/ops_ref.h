/* Helpers for kernel tests: random fill, error measures, a central-difference gradient checker
 * and a pass/fail tally. Header-only; include it once per test executable.
 *
 *   ops_fill(x, n, seed, lo, hi)          x[i] uniform in (lo, hi], from loom/rng.h
 *   ops_to_double(x, n)                   malloc'd double copy of a float array
 *   ops_alloc(bytes)                      malloc that exits on failure
 *   ops_max_rel_err(got, ref, n)          max_i |got_i - ref_i| / max(|ref_i|, 1e-3 max_j |ref_j|)
 *   ops_max_rel_err_f(got, ref, n)        the same with a float reference
 *   ops_max_abs_err(got, ref, n)          max_i |got_i - ref_i|
 *   ops_max_norm_err(got, ref, n)         max_i |got_i - ref_i| / max_j |ref_j|  (for outputs
 *                                         formed with cancellation, where elementwise relative
 *                                         error says little)
 *   ops_grad_check(loss, ctx, x, n, grad, h)
 *       perturbs each x[i] (double, in place, then restored) by +-h, takes the central difference
 *       of loss(ctx) and returns ops_max_rel_err(grad, numeric gradient); ops_grad_check_some
 *       does the same on `count` indices spread over [0, n) (for large inputs).
 *   ops_check(name, err, tol)             prints one line, counts a pass if err <= tol
 *   ops_check_true(name, cond)            the same for a yes/no check
 *   ops_finish()                          prints "N passed, M failed"; returns the exit status
 * Every error measure returns +inf when a value is NaN or infinite, so NaN never passes.
 */
#ifndef LOOM_TESTS_OPS_REF_H
#define LOOM_TESTS_OPS_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/rng.h"

static inline void ops_fill(float *x, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * loom_rng_uniform(seed, 0x6f70735f66696c6cull, (uint64_t)i);
}

static inline double *ops_to_double(const float *x, int64_t n) {
    double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static inline double ops_rel_err_impl(const float *gf, const double *gd, const double *rd,
                                      const float *rf, int64_t n) {
    double scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double r = rd ? rd[i] : (double)rf[i];
        if (!isfinite(r)) return INFINITY;
        if (fabs(r) > scale) scale = fabs(r);
    }
    double floor_ = 1e-3 * scale > 1e-30 ? 1e-3 * scale : 1e-30;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = gf ? (double)gf[i] : gd[i];
        double r = rd ? rd[i] : (double)rf[i];
        if (!isfinite(g)) return INFINITY;
        double den = fabs(r) > floor_ ? fabs(r) : floor_;
        double e = fabs(g - r) / den;
        if (e > worst) worst = e;
    }
    return worst;
}

static inline double ops_max_rel_err(const float *got, const double *ref, int64_t n) {
    return ops_rel_err_impl(got, NULL, ref, NULL, n);
}

static inline double ops_max_rel_err_f(const float *got, const float *ref, int64_t n) {
    return ops_rel_err_impl(got, NULL, NULL, ref, n);
}

static inline double ops_max_abs_err(const float *got, const double *ref, int64_t n) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!isfinite(e)) return INFINITY;
        if (e > worst) worst = e;
    }
    return worst;
}

static inline double ops_max_norm_err(const float *got, const double *ref, int64_t n) {
    double scale = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    double e = ops_max_abs_err(got, ref, n);
    return scale > 0.0 ? e / scale : e;
}

typedef double (*ops_loss_fn)(void *ctx);

/* Central differences over the indices idx[0..m) (or all of [0, n) when idx is NULL). */
static inline double ops_grad_check_idx(ops_loss_fn loss, void *ctx, double *x, int64_t n,
                                        const float *grad, double h, const int64_t *idx,
                                        int64_t m) {
    if (!idx) m = n;
    double *num = malloc((size_t)(m > 0 ? m : 1) * sizeof *num);
    float *ana = malloc((size_t)(m > 0 ? m : 1) * sizeof *ana);
    if (!num || !ana) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int64_t k = 0; k < m; k++) {
        int64_t i = idx ? idx[k] : k;
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = loss(ctx);
        x[i] = x0 - h;
        double lm = loss(ctx);
        x[i] = x0;
        num[k] = (lp - lm) / (2.0 * h);
        ana[k] = grad[i];
    }
    double err = ops_rel_err_impl(ana, NULL, num, NULL, m);
    free(num);
    free(ana);
    return err;
}

static inline double ops_grad_check(ops_loss_fn loss, void *ctx, double *x, int64_t n,
                                    const float *grad, double h) {
    return ops_grad_check_idx(loss, ctx, x, n, grad, h, NULL, n);
}

static inline double ops_grad_check_some(ops_loss_fn loss, void *ctx, double *x, int64_t n,
                                         const float *grad, double h, int64_t count) {
    if (count >= n) return ops_grad_check(loss, ctx, x, n, grad, h);
    int64_t *idx = malloc((size_t)(count > 0 ? count : 1) * sizeof *idx);
    if (!idx) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    const int64_t stride = n / count; /* >= 1 */
    for (int64_t k = 0; k < count; k++) /* one index in each of `count` even strips */
        idx[k] = (k * n) / count + (k * 7919) % stride;
    double err = ops_grad_check_idx(loss, ctx, x, n, grad, h, idx, count);
    free(idx);
    return err;
}

static inline int *ops_tally(void) {
    static int tally[2]; /* passed, failed */
    return tally;
}

static inline int ops_check(const char *name, double err, double tol) {
    int ok = err <= tol; /* false for NaN */
    ops_tally()[ok ? 0 : 1]++;
    printf("%s  %-58s err %.3g (tol %.3g)\n", ok ? "ok  " : "FAIL", name, err, tol);
    fflush(stdout);
    return ok;
}

static inline int ops_check_true(const char *name, int cond) {
    ops_tally()[cond ? 0 : 1]++;
    printf("%s  %s\n", cond ? "ok  " : "FAIL", name);
    fflush(stdout);
    return cond;
}

static inline int ops_finish(void) {
    printf("%d passed, %d failed\n", ops_tally()[0], ops_tally()[1]);
    return ops_tally()[1] ? 1 : 0;
}

/* malloc that never returns NULL (tests stop on out-of-memory). */
/* GELU of either form (0 tanh, 1 erf: enum loom_gelu's values) and its derivative, in double
 * from their definitions (tanh through tanh, erf through erf) */
static inline double ops_gelu(int erf_form, double x) {
    if (erf_form) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    const double a = sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * x * (1.0 + tanh(a * (x + 0.044715 * x * x * x)));
}
static inline double ops_dgelu(int erf_form, double x) {
    const double pi = 3.14159265358979323846;
    if (erf_form) return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * pi);
    const double a = sqrt(2.0 / pi);
    double t = tanh(a * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * a * (1.0 + 3.0 * 0.044715 * x * x);
}

static inline void *ops_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

#endif
