/* CPU backend: the op implementations behind the vtable in cpu.c (one file per op family).
 * Signatures are those of struct loom_backend_ops (loom/backend.h). */
#ifndef LOOM_CPU_OPS_H
#define LOOM_CPU_OPS_H

#include "loom/backend.h"

/* elementwise.c */
void loom_cpu_add(struct loom_backend *be, float *y, const float *a, const float *b, int64_t n);
void loom_cpu_axpy(struct loom_backend *be, float *y, float alpha, const float *x, int64_t n);
void loom_cpu_scale(struct loom_backend *be, float *x, float alpha, int64_t n);
double loom_cpu_sumsq(struct loom_backend *be, const float *x, int64_t n);

/* embed.c */
void loom_cpu_embedding_forward(struct loom_backend *be, float *out, const int32_t *tokens,
                                const int32_t *pos, const float *wte, const float *wpe, int64_t B,
                                int64_t T, int64_t C, int64_t v0, int64_t Vl, int64_t pos0);
void loom_cpu_embedding_backward(struct loom_backend *be, float *dwte, float *dwpe,
                                 const float *dout, const int32_t *tokens, const int32_t *pos,
                                 int64_t B, int64_t T, int64_t C, int64_t v0, int64_t Vl,
                                 int64_t pos0);

/* norm.c */
void loom_cpu_layernorm_forward(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int64_t N, int64_t C, float eps);
void loom_cpu_layernorm_backward(struct loom_backend *be, float *dinp, void *dinp_copy,
                                 float *dinp_sum, float *dw, float *db, const void *dout,
                                 enum loom_dtype dout_dt, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int64_t N, int64_t C);
void loom_cpu_rmsnorm_forward(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                              float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                              float eps);
void loom_cpu_rmsnorm_backward(struct loom_backend *be, float *dinp, void *dinp_copy,
                               float *dinp_sum, float *dw, const void *dout,
                               enum loom_dtype dout_dt, const float *inp, const float *w,
                               const float *rstd, int64_t N, int64_t C);
void loom_cpu_residual_layernorm_forward(struct loom_backend *be, float *xs, void *out,
                                         enum loom_dtype out_dt, float *mean, float *rstd,
                                         const float *x, const void *r, enum loom_dtype r_dt,
                                         const float *w, const float *b, int64_t N, int64_t C,
                                         float eps);
void loom_cpu_residual_rmsnorm_forward(struct loom_backend *be, float *xs, void *out,
                                       enum loom_dtype out_dt, float *rstd, const float *x,
                                       const void *r, enum loom_dtype r_dt, const float *w,
                                       int64_t N, int64_t C, float eps);
/* head_norm.c (fp32 or bf16 qkv) */
void loom_cpu_head_norm_forward(struct loom_backend *be, int rms, void *qkv, enum loom_dtype dt,
                                void *keep, float *mean, float *rstd, const float *wq,
                                const float *bq, const float *wk, const float *bk, int64_t N,
                                int64_t NH, int64_t NKV, int64_t HS, float eps);
void loom_cpu_head_norm_backward(struct loom_backend *be, int rms, void *dqkv, enum loom_dtype dt,
                                 float *dwq, float *dbq, float *dwk, float *dbk, const void *keep,
                                 const float *mean, const float *rstd, const float *wq,
                                 const float *wk, int64_t N, int64_t NH, int64_t NKV, int64_t HS);
/* The CPU keeps every activation in fp32: a typed activation of another type is a misuse
 * (aborts, naming the op). */
void loom_cpu_need_f32(enum loom_dtype dt, const char *op);

/* matmul.c */
void loom_cpu_linear_forward(struct loom_backend *be, float *out, const float *inp, const float *w,
                             const float *b, int64_t N, int64_t C, int64_t OC);
void loom_cpu_linear_backward(struct loom_backend *be, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int64_t N,
                              int64_t C, int64_t OC);
void loom_cpu_linear_gelu_forward(struct loom_backend *be, enum loom_gelu form, void *out,
                                  void *pre, enum loom_dtype act_dt, const void *inp,
                                  enum loom_dtype inp_dt, const float *w, const float *b, int64_t N,
                                  int64_t C, int64_t OC);
void loom_cpu_linear_gelu_backward(struct loom_backend *be, enum loom_gelu form, void *dpre,
                                   enum loom_dtype act_dt, float *dpre_b, float *dw, float *db,
                                   const void *dout, enum loom_dtype dout_dt, const void *act,
                                   const void *pre, const float *w, int64_t N, int64_t C,
                                   int64_t OC);
/* out[C] += the column sums of in[N,C], in double (the bias gradients) */
void loom_cpu_colsum(float *out, const float *in, int64_t N, int64_t C);
void loom_cpu_linear_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                   const void *inp, enum loom_dtype inp_dt, const float *w,
                                   const float *b, int64_t N, int64_t C, int64_t OC);
void loom_cpu_linear_backward_typed(struct loom_backend *be, void *dinp, enum loom_dtype dinp_dt,
                                    float *dw, float *db, const void *dout,
                                    enum loom_dtype dout_dt, const void *inp,
                                    enum loom_dtype inp_dt, const float *w, int64_t N, int64_t C,
                                    int64_t OC);

/* attention.c */
void loom_cpu_rope(struct loom_backend *be, void *qkv, enum loom_dtype dt, const int32_t *pos,
                   int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                   const struct loom_rope *rope, int inverse);
void loom_cpu_attention_forward(struct loom_backend *be, void *out, float *lse, const void *qkv,
                                const struct loom_attn *a);
void loom_cpu_attention_backward(struct loom_backend *be, void *dqkv, const void *dout,
                                 const void *out, const float *lse, const void *qkv,
                                 const struct loom_attn *a);

/* attention_general.c */
void loom_cpu_attention_general_forward(struct loom_backend *be, float *out, float *lse,
                                        const float *q, const float *k, const float *v,
                                        const struct loom_attn_general *a);
void loom_cpu_attention_general_backward(struct loom_backend *be, float *dq, float *dk, float *dv,
                                         float *dbias, const float *dout, const float *out,
                                         const float *lse, const float *q, const float *k,
                                         const float *v, const struct loom_attn_general *a);

/* decode.c */
void loom_cpu_attention_decode(struct loom_backend *be, float *out, const float *q,
                               const float *kcache, const float *vcache, int64_t L, int64_t NH,
                               int64_t NKV, int64_t HS, float scale);

/* act.c */
void loom_cpu_gelu_forward(struct loom_backend *be, enum loom_gelu form, float *out,
                           const float *inp, int64_t n);
void loom_cpu_gelu_forward_typed(struct loom_backend *be, enum loom_gelu form, void *out,
                                 const void *inp, enum loom_dtype dt, int64_t n);
void loom_cpu_gelu_backward(struct loom_backend *be, enum loom_gelu form, float *dinp,
                            const float *dout, const float *inp, int64_t n);
void loom_cpu_swiglu_forward(struct loom_backend *be, void *out, const void *inp,
                             enum loom_dtype dt, int64_t N, int64_t F);
void loom_cpu_swiglu_backward(struct loom_backend *be, void *dinp, const void *dout,
                              const void *inp, enum loom_dtype dt, int64_t N, int64_t F);
void loom_cpu_dropout_forward(struct loom_backend *be, float *out, const float *inp, int64_t B,
                              int64_t T, int64_t C, const struct loom_dropout *d);
void loom_cpu_dropout_backward(struct loom_backend *be, float *dinp, const float *dout, int64_t B,
                               int64_t T, int64_t C, const struct loom_dropout *d);

/* loss.c */
void loom_cpu_xent_forward(struct loom_backend *be, float *stats, const float *logits,
                           const int32_t *targets, int64_t N, int64_t Vl, int64_t v0,
                           int64_t Vvalid);
void loom_cpu_xent_backward(struct loom_backend *be, float *dlogits, const float *logits,
                            const int32_t *targets, const float *gstats, const float *dloss,
                            int64_t N, int64_t Vl, int64_t v0, int64_t Vvalid);
void loom_cpu_xent_fused(struct loom_backend *be, float *losses, void *logits, enum loom_dtype dt,
                         const int32_t *targets, float dloss, int grad, int64_t N, int64_t Vl,
                         int64_t Vvalid);
void loom_cpu_linear_xent(struct loom_backend *be, float *losses, float *dinp, float *dw,
                          void *logits, const float *inp, const float *w, const int32_t *targets,
                          float dloss, int64_t N, int64_t C, int64_t Vl, int64_t Vvalid);

/* adamw.c */
void loom_cpu_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                    int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                    int64_t step, float grad_scale);
void loom_cpu_adamw_ranges(struct loom_backend *be, float *param, const float *grad, float *m,
                           float *v, const int64_t *off, const int64_t *soff, const int64_t *len,
                           const uint8_t *decay, int nranges, float lr, float beta1, float beta2,
                           float eps, float wd, int64_t step, float grad_scale);
double loom_cpu_sumsq_ranges(struct loom_backend *be, const float *x, const int64_t *off,
                             const int64_t *len, int nranges, int64_t *zeros);

#endif
