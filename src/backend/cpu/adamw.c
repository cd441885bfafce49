/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                    int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                    int64_t step, float grad_scale) { (void)be; (void)param; (void)grad; (void)m; (void)v; (void)n; (void)lr; (void)beta1; (void)beta2; (void)eps; (void)wd; (void)step; (void)grad_scale; LOOM_ASSERT(!"not implemented"); }
