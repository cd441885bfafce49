/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_layernorm_forward(struct loom_backend *be, float *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *b, int64_t N,
                                int64_t C, float eps) { (void)be; (void)out; (void)mean; (void)rstd; (void)inp; (void)w; (void)b; (void)N; (void)C; (void)eps; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_layernorm_backward(struct loom_backend *be, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int64_t N, int64_t C) { (void)be; (void)dinp; (void)dw; (void)db; (void)dout; (void)inp; (void)w; (void)mean; (void)rstd; (void)N; (void)C; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_rmsnorm_forward(struct loom_backend *be, float *out, float *rstd, const float *inp,
                              const float *w, int64_t N, int64_t C, float eps) { (void)be; (void)out; (void)rstd; (void)inp; (void)w; (void)N; (void)C; (void)eps; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_rmsnorm_backward(struct loom_backend *be, float *dinp, float *dw, const float *dout,
                               const float *inp, const float *w, const float *rstd, int64_t N,
                               int64_t C) { (void)be; (void)dinp; (void)dw; (void)dout; (void)inp; (void)w; (void)rstd; (void)N; (void)C; LOOM_ASSERT(!"not implemented"); }
