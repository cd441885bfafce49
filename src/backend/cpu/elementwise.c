/* CPU elementwise vector ops: add, axpy, scale, sum of squares, strided copies.
 *
 * Each op is one pass over memory. Long vectors are split into static contiguous ranges over the
 * OpenMP threads; short ones run on the calling thread (a parallel region costs a few
 * microseconds). add may run in place (y == a or y == b): every iteration reads and writes the
 * same index only, so no pointer here is `restrict`.
 */
#include <omp.h>

#include "backend/cpu/cpu_ops.h"

/* Below this many elements the ops run on one thread. */
#define CPU_EW_PAR_MIN 32768

void loom_cpu_add(struct loom_backend *be, float *y, const float *a, const float *b, int64_t n) {
    (void)be;
#pragma omp parallel for simd schedule(static) if (n >= CPU_EW_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void loom_cpu_axpy(struct loom_backend *be, float *y, float alpha, const float *x, int64_t n) {
    (void)be;
#pragma omp parallel for simd schedule(static) if (n >= CPU_EW_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

void loom_cpu_scale(struct loom_backend *be, float *x, float alpha, int64_t n) {
    (void)be;
#pragma omp parallel for simd schedule(static) if (n >= CPU_EW_PAR_MIN)
    for (int64_t i = 0; i < n; i++) x[i] *= alpha;
}

/* Sum of squares in double. The vector is cut into at most CPU_SUMSQ_BLOCKS blocks whose size
 * depends on n alone; each block is summed on its own and the block sums are added in order, so
 * the result is the same whatever the number of threads. */
#define CPU_SUMSQ_BLOCKS 256
#define CPU_SUMSQ_MIN_BLOCK 4096

double loom_cpu_sumsq(struct loom_backend *be, const float *x, int64_t n) {
    (void)be;
    if (n <= 0) return 0.0;
    int64_t bs = (n + CPU_SUMSQ_BLOCKS - 1) / CPU_SUMSQ_BLOCKS;
    if (bs < CPU_SUMSQ_MIN_BLOCK) bs = CPU_SUMSQ_MIN_BLOCK;
    bs = (bs + 63) & ~(int64_t)63; /* blocks start on 256-byte boundaries of an aligned x */
    int64_t nb = (n + bs - 1) / bs;
    double part[CPU_SUMSQ_BLOCKS];
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int64_t k = 0; k < nb; k++) {
        int64_t lo = k * bs, hi = lo + bs < n ? lo + bs : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];
        part[k] = s;
    }
    double total = 0.0;
    for (int64_t k = 0; k < nb; k++) total += part[k];
    return total;
}
