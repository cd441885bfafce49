/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_linear_forward(struct loom_backend *be, float *out, const float *inp, const float *w,
                             const float *b, int64_t N, int64_t C, int64_t OC) { (void)be; (void)out; (void)inp; (void)w; (void)b; (void)N; (void)C; (void)OC; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_linear_backward(struct loom_backend *be, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int64_t N,
                              int64_t C, int64_t OC) { (void)be; (void)dinp; (void)dw; (void)db; (void)dout; (void)inp; (void)w; (void)N; (void)C; (void)OC; LOOM_ASSERT(!"not implemented"); }
