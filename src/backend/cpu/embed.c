/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_embedding_forward(struct loom_backend *be, float *out, const int32_t *tokens,
                                const float *wte, const float *wpe, int64_t B, int64_t T,
                                int64_t C, int64_t v0, int64_t Vl, int64_t pos0) { (void)be; (void)out; (void)tokens; (void)wte; (void)wpe; (void)B; (void)T; (void)C; (void)v0; (void)Vl; (void)pos0; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_embedding_backward(struct loom_backend *be, float *dwte, float *dwpe,
                                 const float *dout, const int32_t *tokens, int64_t B, int64_t T,
                                 int64_t C, int64_t v0, int64_t Vl, int64_t pos0) { (void)be; (void)dwte; (void)dwpe; (void)dout; (void)tokens; (void)B; (void)T; (void)C; (void)v0; (void)Vl; (void)pos0; LOOM_ASSERT(!"not implemented"); }
