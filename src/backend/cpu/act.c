/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_gelu_forward(struct loom_backend *be, float *out, const float *inp, int64_t n) { (void)be; (void)out; (void)inp; (void)n; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_gelu_backward(struct loom_backend *be, float *dinp, const float *dout,
                            const float *inp, int64_t n) { (void)be; (void)dinp; (void)dout; (void)inp; (void)n; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_swiglu_forward(struct loom_backend *be, float *out, const float *inp, int64_t N,
                             int64_t F) { (void)be; (void)out; (void)inp; (void)N; (void)F; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_swiglu_backward(struct loom_backend *be, float *dinp, const float *dout,
                              const float *inp, int64_t N, int64_t F) { (void)be; (void)dinp; (void)dout; (void)inp; (void)N; (void)F; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_dropout_forward(struct loom_backend *be, float *out, const float *inp, int64_t B,
                              int64_t T, int64_t C, const struct loom_dropout *d) { (void)be; (void)out; (void)inp; (void)B; (void)T; (void)C; (void)d; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_dropout_backward(struct loom_backend *be, float *dinp, const float *dout, int64_t B,
                               int64_t T, int64_t C, const struct loom_dropout *d) { (void)be; (void)dinp; (void)dout; (void)B; (void)T; (void)C; (void)d; LOOM_ASSERT(!"not implemented"); }
