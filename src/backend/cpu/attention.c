/* STUB: replaced by the real implementation. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_rope(struct loom_backend *be, float *qkv, int64_t B, int64_t T, int64_t NH,
                   int64_t NKV, int64_t HS, int64_t pos0, float theta, int inverse) { (void)be; (void)qkv; (void)B; (void)T; (void)NH; (void)NKV; (void)HS; (void)pos0; (void)theta; (void)inverse; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_attention_forward(struct loom_backend *be, float *out, float *lse, const float *qkv,
                                const struct loom_attn *a) { (void)be; (void)out; (void)lse; (void)qkv; (void)a; LOOM_ASSERT(!"not implemented"); }
void loom_cpu_attention_backward(struct loom_backend *be, float *dqkv, const float *dout,
                                 const float *out, const float *lse, const float *qkv,
                                 const struct loom_attn *a) { (void)be; (void)dqkv; (void)dout; (void)out; (void)lse; (void)qkv; (void)a; LOOM_ASSERT(!"not implemented"); }
