/* CPU AdamW step on n fp32 elements (decoupled weight decay, as torch.optim.AdamW):
 *   g = grad * grad_scale
 *   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
 *   p = p (1 - lr wd)                        (the decay applies to p before the update)
 *   p = p - lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
 * step counts from 1. The bias corrections are computed once in double.
 * (With the default -fmath-errno GCC keeps sqrtf scalar here; the step is memory-bound and runs
 * once per iteration, so that costs little.)
 */
#include <math.h>

#include "backend/cpu/cpu_ops.h"

void loom_cpu_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                    int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                    int64_t step, float grad_scale) {
    (void)be;
    LOOM_ASSERT(step >= 1);
    const double bc1 = 1.0 - pow((double)beta1, (double)step);
    const double bc2 = 1.0 - pow((double)beta2, (double)step);
    const float step_size = (float)((double)lr / bc1);
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float decay = (float)(1.0 - (double)lr * (double)wd);
    const float b1 = beta1, b2 = beta2, c1 = 1.0f - beta1, c2 = 1.0f - beta2;
    float *restrict p = param;
    const float *restrict gr = grad;
    float *restrict mm = m;
    float *restrict vv = v;
#pragma omp parallel for simd schedule(static) if (n >= 32768)
    for (int64_t i = 0; i < n; i++) {
        const float g = gr[i] * grad_scale;
        const float mi = b1 * mm[i] + c1 * g;
        const float vi = b2 * vv[i] + c2 * g * g;
        mm[i] = mi;
        vv[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}
