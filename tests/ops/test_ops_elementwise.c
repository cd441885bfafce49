/* CPU elementwise ops (add, axpy, scale, sumsq) against double-precision loops. */
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;

static void test_size(int64_t n) {
    char name[96];
    float *a = ops_alloc((size_t)n * sizeof *a), *b = ops_alloc((size_t)n * sizeof *b);
    float *y = ops_alloc((size_t)n * sizeof *y);
    double *ref = ops_alloc((size_t)n * sizeof *ref);
    ops_fill(a, n, 1, -2.0f, 2.0f);
    ops_fill(b, n, 2, -3.0f, 1.0f);

    loom_op(be, add, y, a, b, n);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
    snprintf(name, sizeof name, "add n=%lld", (long long)n);
    ops_check(name, ops_max_rel_err(y, ref, n), 1.2e-7);

    memcpy(y, a, (size_t)n * sizeof *y);
    loom_op(be, add, y, y, b, n); /* y aliases a */
    snprintf(name, sizeof name, "add in place (y == a) n=%lld", (long long)n);
    ops_check(name, ops_max_rel_err(y, ref, n), 1.2e-7);
    memcpy(y, b, (size_t)n * sizeof *y);
    loom_op(be, add, y, a, y, n); /* y aliases b */
    snprintf(name, sizeof name, "add in place (y == b) n=%lld", (long long)n);
    ops_check(name, ops_max_rel_err(y, ref, n), 1.2e-7);

    memcpy(y, b, (size_t)n * sizeof *y);
    loom_op(be, axpy, y, -0.75f, a, n);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)b[i] + -0.75 * (double)a[i];
    /* y and alpha x nearly cancel in places: measure the absolute error (|y| <= 4.5) */
    snprintf(name, sizeof name, "axpy n=%lld (absolute error)", (long long)n);
    ops_check(name, ops_max_abs_err(y, ref, n), 1e-6);

    memcpy(y, a, (size_t)n * sizeof *y);
    loom_op(be, scale, y, 1.7f, n);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)a[i] * (double)1.7f;
    snprintf(name, sizeof name, "scale n=%lld", (long long)n);
    ops_check(name, ops_max_rel_err(y, ref, n), 1.2e-7);

    double s = loom_op(be, sumsq, a, n), sref = 0.0;
    for (int64_t i = 0; i < n; i++) sref += (double)a[i] * a[i];
    snprintf(name, sizeof name, "sumsq n=%lld", (long long)n);
    ops_check(name, fabs(s - sref) / (sref > 0 ? sref : 1.0), 1e-11);

    free(a);
    free(b);
    free(y);
    free(ref);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    const int64_t sizes[] = {1, 37, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) test_size(sizes[k]);

    ops_check("sumsq n=0 is 0", fabs(loom_op(be, sumsq, NULL, 0)), 0.0);

    /* A long vector: many blocks; the block sums do not depend on the thread count, so the
     * result is bit-identical for 1, 2 and 3 threads. */
    const int64_t n = 2000005;
    float *x = ops_alloc((size_t)n * sizeof *x);
    ops_fill(x, n, 3, -1.0f, 1.0f);
    double sref = 0.0;
    for (int64_t i = 0; i < n; i++) sref += (double)x[i] * x[i];
    int maxt = omp_get_max_threads();
    omp_set_num_threads(1);
    double s1 = loom_op(be, sumsq, x, n);
    omp_set_num_threads(2);
    double s2 = loom_op(be, sumsq, x, n);
    double s2b = loom_op(be, sumsq, x, n);
    omp_set_num_threads(3);
    double s3 = loom_op(be, sumsq, x, n);
    omp_set_num_threads(maxt);
    ops_check("sumsq n=2000005 against a double loop", fabs(s2 - sref) / sref, 1e-11);
    ops_check_true("sumsq bit-identical for 1, 2 and 3 threads and run to run",
                   s1 == s2 && s2 == s3 && s2 == s2b);
    free(x);

    loom_backend_destroy(be);
    return ops_finish();
}
