/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_xent_forward(struct loom_backend *be, float *stats, const float *logits,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0,
                           int64_t Vvalid) { (void)be; (void)stats; (void)logits; (void)targets; (void)N; (void)Vl; (void)v0; (void)Vvalid; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_xent_backward(struct loom_backend *be, float *dlogits, const float *logits,
                            const int32_t *targets, const float *gstats, const float *dloss,
                            int64_t N, int64_t Vl, int64_t v0, int64_t Vvalid) { (void)be; (void)dlogits; (void)logits; (void)targets; (void)gstats; (void)dloss; (void)N; (void)Vl; (void)v0; (void)Vvalid; LOOM_ASSERT(!"not implemented"); }
