/* CPU AdamW step on n fp32 elements (decoupled weight decay, as torch.optim.AdamW):
 *   g = grad * grad_scale
 *   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
 *   p = p (1 - lr wd)                        (the decay applies to p before the update)
 *   p = p - lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * step counts from 1. The bias corrections are computed once in double.
 *
 * The loop is one pass over four arrays (28 bytes of traffic per element) and should run at
 * memory speed. Under the default -fmath-errno GCC keeps sqrtf scalar (it must be able to set
 * errno for a negative argument), and the whole loop with it: half the memory speed. Where
 * AVX-512 is available the loop is written with its intrinsics instead, doing exactly the
 * scalar loop's operations in the same order (each product and sum rounded, no fused
 * multiply-add; the vector square root and division round as the scalar ones), so the results
 * are bit-identical to the scalar loop, which handles the tail and other CPUs.
 */
#include <math.h>
#include <omp.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_ops.h"

struct adamw_consts {
    float b1, b2, c1, c2, decay, step_size, inv_sqrt_bc2, eps, grad_scale;
};

/* Elements [lo, hi). */
static void adamw_range(float *restrict p, const float *restrict gr, float *restrict mm,
                        float *restrict vv, int64_t lo, int64_t hi, const struct adamw_consts *k) {
    const float b1 = k->b1, b2 = k->b2, c1 = k->c1, c2 = k->c2, decay = k->decay;
    const float step_size = k->step_size, inv_sqrt_bc2 = k->inv_sqrt_bc2, eps = k->eps;
    const float grad_scale = k->grad_scale;
    int64_t i = lo;
#ifdef __AVX512F__
    const __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), vc1 = _mm512_set1_ps(c1);
    const __m512 vc2 = _mm512_set1_ps(c2), vdecay = _mm512_set1_ps(decay);
    const __m512 vstep = _mm512_set1_ps(step_size), vinv = _mm512_set1_ps(inv_sqrt_bc2);
    const __m512 veps = _mm512_set1_ps(eps), vgs = _mm512_set1_ps(grad_scale);
    for (; i + 16 <= hi; i += 16) {
        const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(gr + i), vgs);
        const __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_loadu_ps(mm + i)),
                                        _mm512_mul_ps(vc1, g));
        const __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_loadu_ps(vv + i)),
                                        _mm512_mul_ps(_mm512_mul_ps(vc2, g), g));
        _mm512_storeu_ps(mm + i, mi);
        _mm512_storeu_ps(vv + i, vi);
        const __m512 den = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vi), vinv), veps);
        const __m512 upd = _mm512_div_ps(_mm512_mul_ps(vstep, mi), den);
        _mm512_storeu_ps(p + i, _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(p + i), vdecay), upd));
    }
#endif
    for (; i < hi; i++) {
        const float g = gr[i] * grad_scale;
        const float mi = b1 * mm[i] + c1 * g;
        const float vi = b2 * vv[i] + c2 * g * g;
        mm[i] = mi;
        vv[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

/* The constants of a step with weight decay wd, computed in double and rounded once. */
static struct adamw_consts adamw_consts_of(float lr, float beta1, float beta2, float eps, float wd,
                                           int64_t step, float grad_scale) {
    LOOM_ASSERT(step >= 1);
    const double bc1 = 1.0 - pow((double)beta1, (double)step);
    const double bc2 = 1.0 - pow((double)beta2, (double)step);
    const struct adamw_consts k = {
        .b1 = beta1, .b2 = beta2, .c1 = 1.0f - beta1, .c2 = 1.0f - beta2,
        .decay = (float)(1.0 - (double)lr * (double)wd),
        .step_size = (float)((double)lr / bc1),
        .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
        .eps = eps, .grad_scale = grad_scale,
    };
    return k;
}

void loom_cpu_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                    int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                    int64_t step, float grad_scale) {
    (void)be;
    const struct adamw_consts k = adamw_consts_of(lr, beta1, beta2, eps, wd, step, grad_scale);
    if (n < 32768) {
        adamw_range(param, grad, m, v, 0, n, &k);
        return;
    }
#pragma omp parallel
    {
        /* contiguous ranges, whole 64-byte lines each */
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t chunk = ((n + nt - 1) / nt + 15) & ~(int64_t)15;
        const int64_t lo = id * chunk < n ? id * chunk : n, hi = lo + chunk < n ? lo + chunk : n;
        adamw_range(param, grad, m, v, lo, hi, &k);
    }
}

/* The ranges laid end to end form one sequence of elements, cut into one contiguous slice per
 * thread (one parallel region for the whole step); each thread runs adamw_range on the parts of
 * the ranges its slice covers. Every element gets the arithmetic of loom_cpu_adamw with its
 * range's constants, whichever thread and code path (vector or scalar) takes it: the same bits. */
void loom_cpu_adamw_ranges(struct loom_backend *be, float *param, const float *grad, float *m,
                           float *v, const int64_t *off, const int64_t *soff, const int64_t *len,
                           const uint8_t *decay, int nranges, float lr, float beta1, float beta2,
                           float eps, float wd, int64_t step, float grad_scale) {
    (void)be;
    const struct adamw_consts k[2] = {
        adamw_consts_of(lr, beta1, beta2, eps, 0.0f, step, grad_scale),
        adamw_consts_of(lr, beta1, beta2, eps, wd, step, grad_scale),
    };
    int64_t total = 0;
    for (int r = 0; r < nranges; r++)
        if (len[r] > 0) total += len[r];
    if (total < 32768) {
        for (int r = 0; r < nranges; r++)
            if (len[r] > 0)
                adamw_range(param + off[r], grad + off[r], m + (soff ? soff : off)[r],
                            v + (soff ? soff : off)[r], 0, len[r], &k[decay[r] != 0]);
        return;
    }
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t chunk = ((total + nt - 1) / nt + 15) & ~(int64_t)15;
        const int64_t lo = id * chunk < total ? id * chunk : total;
        const int64_t hi = lo + chunk < total ? lo + chunk : total;
        int64_t start = 0; /* of range r in the sequence */
        for (int r = 0; r < nranges && start < hi; r++) {
            if (len[r] <= 0) continue;
            const int64_t a = lo > start ? lo - start : 0;
            const int64_t b = hi - start < len[r] ? hi - start : len[r];
            if (a < b)
                adamw_range(param + off[r], grad + off[r], m + (soff ? soff : off)[r],
                            v + (soff ? soff : off)[r], a, b, &k[decay[r] != 0]);
            start += len[r];
        }
    }
}

/* The ranges one after the other, each through sumsq: the same bits as calling sumsq per range;
 * the zeros counted in a second pass (only when asked: at the log's iterations). */
double loom_cpu_sumsq_ranges(struct loom_backend *be, const float *x, const int64_t *off,
                             const int64_t *len, int nranges, int64_t *zeros) {
    double total = 0.0;
    for (int k = 0; k < nranges; k++) total += loom_cpu_sumsq(be, x + off[k], len[k]);
    if (zeros) {
        int64_t z = 0;
        for (int k = 0; k < nranges; k++) {
            const float *p = x + off[k];
            const int64_t n = len[k];
#pragma omp parallel for reduction(+ : z) schedule(static) if (n > 65536)
            for (int64_t i = 0; i < n; i++)
                z += p[i] == 0.0f;
        }
        *zeros = z;
    }
    return total;
}
