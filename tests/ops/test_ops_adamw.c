/* CPU AdamW against a double-precision reference of torch.optim.AdamW's update (decoupled
 * weight decay, bias corrections 1 - beta^step, gradient scaled first) for 3 steps, with and
 * without weight decay, on a short vector and on one long enough for the threaded path. */
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;

static void run(int64_t n, float lr, float wd, float gscale) {
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    float *p = ops_alloc((size_t)n * sizeof *p), *g = ops_alloc((size_t)n * sizeof *g);
    float *m = ops_alloc((size_t)n * sizeof *m), *v = ops_alloc((size_t)n * sizeof *v);
    float *p0 = ops_alloc((size_t)n * sizeof *p0);
    /* small weights, so that float rounding of p stays far below the size of one update and the
     * change of p can be compared closely */
    ops_fill(p, n, 80, -0.05f, 0.05f);
    memcpy(p0, p, (size_t)n * sizeof *p);
    memset(m, 0, (size_t)n * sizeof *m);
    memset(v, 0, (size_t)n * sizeof *v);
    double *rp = ops_to_double(p, n), *rm = ops_alloc((size_t)n * sizeof *rm);
    double *rv = ops_alloc((size_t)n * sizeof *rv);
    memset(rm, 0, (size_t)n * sizeof *rm);
    memset(rv, 0, (size_t)n * sizeof *rv);
    char name[128];
    for (int64_t step = 1; step <= 3; step++) {
        ops_fill(g, n, 80 + (uint64_t)step, -2.0f, 2.0f); /* a new gradient every step */
        if (n > 3) g[3] = 0.0f;                           /* a parameter with no gradient */
        loom_op(be, adamw, p, g, m, v, n, lr, b1, b2, eps, wd, step, gscale);
        const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
        for (int64_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gscale;
            rp[i] *= 1.0 - (double)lr * wd;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
            rp[i] -= (double)lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        }
        /* compare the change of p (the part AdamW computes) and the moments, normwise: m is a
         * running sum in which gradients of opposite sign cancel, so single elements of m (and
         * of the update) can be far smaller than float rounding of their terms */
        double *dref = ops_alloc((size_t)n * sizeof *dref);
        float *dgot = ops_alloc((size_t)n * sizeof *dgot);
        for (int64_t i = 0; i < n; i++) {
            dref[i] = rp[i] - p0[i];
            dgot[i] = (float)((double)p[i] - p0[i]);
        }
        snprintf(name, sizeof name, "adamw n=%lld lr=%g wd=%g scale=%g step %lld: p - p0",
                 (long long)n, lr, wd, gscale, (long long)step);
        ops_check(name, ops_max_norm_err(dgot, dref, n), 2e-6);
        snprintf(name, sizeof name, "adamw n=%lld step %lld: m, v", (long long)n, (long long)step);
        double em = ops_max_norm_err(m, rm, n), ev = ops_max_norm_err(v, rv, n);
        ops_check(name, em > ev ? em : ev, 1e-6);
        free(dref), free(dgot);
    }
    free(p), free(g), free(m), free(v), free(p0), free(rp), free(rm), free(rv);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    run(37, 1e-2f, 0.1f, 0.5f);
    run(37, 3e-3f, 0.0f, 1.0f);
    run(100003, 1e-2f, 0.1f, 0.25f); /* threaded path */
    loom_backend_destroy(be);
    return ops_finish();
}
