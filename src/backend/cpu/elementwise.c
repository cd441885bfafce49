/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_add(struct loom_backend *be, float *y, const float *a, const float *b, int64_t n) { (void)be; (void)y; (void)a; (void)b; (void)n; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_axpy(struct loom_backend *be, float *y, float alpha, const float *x, int64_t n) { (void)be; (void)y; (void)alpha; (void)x; (void)n; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_scale(struct loom_backend *be, float *x, float alpha, int64_t n) { (void)be; (void)x; (void)alpha; (void)n; LOOM_ASSERT(!"not implemented"); }
double loom_cpu_sumsq(struct loom_backend *be, const float *x, int64_t n) { (void)be; (void)x; (void)n; LOOM_ASSERT(!"not implemented"); return 0; }
