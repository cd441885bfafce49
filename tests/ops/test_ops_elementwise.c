/* CPU elementwise ops (add, axpy, scale, sumsq) against double-precision loops; copy_strided
 * against a plain loop (the copied runs equal, the elements between them untouched). */
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

/* rows runs of len floats, src_stride apart, to dst_stride apart */
static void test_copy_strided(int64_t rows, int64_t len, int64_t src_stride, int64_t dst_stride) {
    const int64_t ns = rows * src_stride, nd = rows * dst_stride;
    float *src = ops_alloc((size_t)ns * sizeof *src), *dst = ops_alloc((size_t)nd * sizeof *dst);
    float *want = ops_alloc((size_t)nd * sizeof *want);
    ops_fill(src, ns, 4, -1.0f, 1.0f);
    ops_fill(dst, nd, 5, 2.0f, 3.0f);
    memcpy(want, dst, (size_t)nd * sizeof *want);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < len; i++)
            want[r * dst_stride + i] = src[r * src_stride + i];
    loom_op(be, copy_strided, dst, LOOM_DTYPE_F32, dst_stride, src, LOOM_DTYPE_F32, src_stride,
            rows, len);
    char name[96];
    snprintf(name, sizeof name, "copy_strided rows=%lld len=%lld strides %lld -> %lld",
             (long long)rows, (long long)len, (long long)src_stride, (long long)dst_stride);
    ops_check_true(name, memcmp(dst, want, (size_t)nd * sizeof *dst) == 0);
    free(src);
    free(dst);
    free(want);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    test_copy_strided(3, 4, 6, 4);       /* query heads of a qkv row: gathered */
    test_copy_strided(3, 4, 4, 6);       /* and written back */
    test_copy_strided(4096, 16, 48, 16); /* past the one-thread size */
    test_copy_strided(1, 5, 5, 5);

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
