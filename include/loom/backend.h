/* The kernel interface: one vtable per backend (cpu, cuda).
 *
 * Every pointer an op takes lives on the backend's device. Shapes use the fixed letters of
 * DESIGN.md: B batch, T sequence, C hidden, NH query heads, NKV key/value heads (query groups),
 * HS head size, F FFN hidden, V vocabulary, N = B*T rows. All tensors are row-major and fp32,
 * except the typed activations (the arrays with an element-type argument: see the norms, the
 * linear ops with typed activations and loom_attn.dt), which may be the backend's 16-bit type.
 *
 * Conventions: outputs first, then saved-for-backward buffers, then inputs and weights, then
 * sizes. Parameter gradients accumulate (+=); activation gradients are assigned, except where
 * the op's comment says it accumulates. An op a backend lacks is NULL and loom_op() reports
 * "not supported on <backend>".
 *
 * QKV layout (Megatron's, so that tensor parallelism splits it contiguously by query group):
 * a row of qkv holds NKV groups, each [NH/NKV query heads | 1 key head | 1 value head] of HS.
 */
#ifndef LOOM_BACKEND_H
#define LOOM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "loom/rope.h"
#include "loom/status.h"
#include "loom/tensor.h"

struct loom_backend;
struct loom_mem_stats;

/* Where a dropout mask element comes from: global indices, so every layout draws the same mask.
 * Element (b, t, c) of the local [B, T, C] block has global index
 * ((sample0 + b) * T_global + pos0 + t) * C_global + feat0 + c in stream (seed, key). */
struct loom_dropout {
    float p; /* drop probability; 0 disables */
    uint64_t seed, key;
    int64_t sample0, pos0, T_global, feat0, C_global;
};

/* Which kernels the attention ops use (set_attention_backend; Megatron's --attention-backend):
 * AUTO the backend's choice (cuda: cuDNN's fused attention where it applies and is built in, else
 * loom's flash-style kernels); FUSED cuDNN's fused attention, an error where it has no plan for a
 * problem it would take; FLASH loom's own kernels only (bit-for-bit repeatable runs). */
enum loom_attn_backend { LOOM_ATTN_AUTO = 0, LOOM_ATTN_FUSED, LOOM_ATTN_FLASH };

/* The GELU's form. TANH: x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), which is
 * x/2 (1 + tanh(u)): GPT-2's, and Megatron-LM's fused bias-GELU and --openai-gelu. ERF: the exact
 * x Phi(x) = x/2 erfc(-x/sqrt(2)), Phi the standard normal distribution function: Megatron-LM's
 * F.gelu, taken without biases or with --no-bias-gelu-fusion. */
enum loom_gelu { LOOM_GELU_TANH = 0, LOOM_GELU_ERF };

/* Attention problem. Local heads [head0, head0 + NH) of NH_global drive the dropout index.
 * dt is the element type of qkv, out, dout and dqkv: LOOM_DTYPE_F32 (zero, the default) on every
 * backend, or the backend's activation_dtype where it has one (read and written as the typed
 * activations below); lse is fp32 always.
 * Masks: key j is visible to query t of sample b when
 *   (causal ? j <= t : 1) && (doc_start ? j >= doc_start[b,t] : 1)
 *                          && (key_end ? j < key_end[b,t] : 1).
 * doc_start: NULL (zero, the default: no document mask), or [B,T] int32 on the backend's device:
 * the first key each query sees. With the causal mask, the position of the first token of the
 * document that token t of sample b belongs to: documents packed into one sample never attend to
 * each other (Megatron-LM's --reset-attention-mask). Without it, together with key_end, a
 * bidirectional document mask [doc_start, key_end) (or left padding: doc_start the first real
 * token's position, key_end NULL).
 * key_end: NULL (zero, the default: no limit), or [B,T] int32 on the backend's device: one past
 * the last key each query sees. A padding mask gives every row of sample b the sample's real
 * length (BERT, T5's encoder, ViT with padded batches: the padded keys are never seen and cost
 * no work); a bidirectional document mask gives each row its document's end.
 * Each row of either array must lie in [0, T] and be non-decreasing in t (documents and padding
 * are contiguous runs of tokens): the kernels skip the key blocks that lie wholly outside a query
 * block's range. A query row that sees no key at all (key_end <= doc_start, say, or
 * key_end == 0) gets out = 0, lse = -inf, and contributes nothing to the gradients (its dq row is
 * 0); key rows that no query sees get dk = dv = 0. The dropout index of an element is the same
 * with or without the masks. */
struct loom_attn {
    enum loom_dtype dt;
    int64_t B, T, NH, NKV, HS;
    int causal;
    float scale;      /* usually 1/sqrt(HS) */
    float dropout_p;  /* on attention probabilities */
    uint64_t seed, key;
    int64_t sample0, head0, NH_global;
    const int32_t *doc_start;
    const int32_t *key_end; /* last: a zero-initialised problem keeps its meaning */
};

/* A general attention problem (cross-attention, and self-attention with an additive bias):
 * queries q[B, Tq, ...] against keys k and values v [B, Tk, ...] of another length, each head's
 * HS values at column h * *_hs of a row of *_ld floats (so q, k and v may be slices of one fused
 * projection, Megatron's per-head [q | k | v] rows: q_hs = k_hs = v_hs = 3 HS, ld = 3 NH HS; or
 * of separate ones). Query head h reads key/value head h / (NH/NKV). out[B, Tq, NH*HS] (dense),
 * lse[B, NH, Tq] fp32. Key j is visible to query i of sample b when
 *   j < key_len[b] (key_len: NULL = every key; [B] int32 on the backend's device, each in
 *   [0, Tk]: the sample's real keys, a key padding mask) and (causal ? j <= i : 1);
 * scores S = scale q k^T + bias[h] where bias is given ([NH, Tq, Tk] fp32 on the device, the
 * same for every sample: T5's relative position bias), P = softmax(S) over the visible keys,
 * out = P v. A query row that sees no key gets out = 0, lse = -inf and no gradient. fp32 only.
 * Dropout on the probabilities (dropout_p > 0): out = (P * M / (1 - p)) v, M[b, h, i, j] kept
 * when loom_rng_keep(seed, key, row * Tk + j, dropout_p), row = ((sample0 + b) * NH_global +
 * head0 + h) * Tq + i (the attention op's rule: the same mask for any layout); the backward
 * remakes M. */
struct loom_attn_general {
    int64_t B, Tq, Tk, NH, NKV, HS;
    int64_t q_ld, q_hs, k_ld, k_hs, v_ld, v_hs;
    int causal;
    float scale;
    const int32_t *key_len;
    const float *bias;
    float dropout_p; /* last: a problem that leaves them zero has no dropout */
    uint64_t seed, key;
    int64_t sample0, head0, NH_global;
};

struct loom_backend_ops {
    const char *name;
    void (*destroy)(struct loom_backend *be);

    /* ---- memory ---- */
    void *(*malloc)(struct loom_backend *be, size_t bytes); /* NULL on failure */
    void (*free)(struct loom_backend *be, void *p);
    void (*to_device)(struct loom_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(struct loom_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(struct loom_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(struct loom_backend *be, void *p, size_t bytes);
    /* p[k * stride + i] = 0 for k < count, i < len: count runs of len floats, stride apart */
    void (*zero_strided)(struct loom_backend *be, float *p, int64_t count, int64_t len,
                         int64_t stride);
    void (*synchronize)(struct loom_backend *be);
    /* [p, p + bytes) was written other than through these ops (by a collective of a
     * communication backend): whatever the backend derived from it is stale. NULL: nothing. */
    void (*written)(struct loom_backend *be, const void *p, size_t bytes);

    /* ---- elementwise ---- */
    /* y = a + b (y may alias a or b) */
    void (*add)(struct loom_backend *be, float *y, const float *a, const float *b, int64_t n);
    /* y += alpha * x */
    void (*axpy)(struct loom_backend *be, float *y, float alpha, const float *x, int64_t n);
    /* x *= alpha */
    void (*scale)(struct loom_backend *be, float *x, float alpha, int64_t n);
    /* sum of squares, accumulated in double, returned on the host */
    double (*sumsq)(struct loom_backend *be, const float *x, int64_t n);

    /* ---- embedding ----
     * out[B,T,C] = wte[tok - v0] if v0 <= tok < v0 + Vl else 0,  plus wpe[pos0 + p] if wpe,
     * where token (b, t) is at p = pos[b*T + t] when pos is given ([B,T] int32 on the device,
     * each 0 <= p < T: positions that restart at every document, Megatron-LM's
     * --reset-position-ids), else at p = t. (v0, Vl) is this rank's vocabulary shard; with one
     * rank v0 = 0, Vl = V. */
    void (*embedding_forward)(struct loom_backend *be, float *out, const int32_t *tokens,
                              const int32_t *pos, const float *wte, const float *wpe, int64_t B,
                              int64_t T, int64_t C, int64_t v0, int64_t Vl, int64_t pos0);
    /* dwte[tok - v0] += dout (owned tokens only); dwpe[pos0 + p] += dout (if dwpe), p as in the
     * forward (tokens at one position add up in token order) */
    void (*embedding_backward)(struct loom_backend *be, float *dwte, float *dwpe, const float *dout,
                               const int32_t *tokens, const int32_t *pos, int64_t B, int64_t T,
                               int64_t C, int64_t v0, int64_t Vl, int64_t pos0);

    /* ---- normalisation over the last dimension, N rows of C ----
     * The normalised output out (forward) and its gradient dout (backward) are typed
     * activations (out_dt, dout_dt: see the linear ops with typed activations below); the
     * input, mean, rstd and the parameter gradients are fp32.
     * LayerNorm: out = (x - mean) * rstd * w + b; saves mean[N], rstd[N]. b may be NULL. */
    void (*layernorm_forward)(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                              float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int64_t N, int64_t C, float eps);
    /* dinp += ... (accumulates: the input of a norm is the residual stream); dw, db +=. Then,
     * for the product that reads dinp next (its output gradient): dinp_copy = dinp rounded to the
     * 16-bit activation type and dinp_sum[C] += dinp's column sums (that product's bias
     * gradient), each skipped if NULL; a copy needs 16-bit activations (activation_dtype). */
    void (*layernorm_backward)(struct loom_backend *be, float *dinp, void *dinp_copy,
                               float *dinp_sum, float *dw, float *db, const void *dout,
                               enum loom_dtype dout_dt, const float *inp, const float *w,
                               const float *mean, const float *rstd, int64_t N, int64_t C);
    /* RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) */
    void (*rmsnorm_forward)(struct loom_backend *be, void *out, enum loom_dtype out_dt, float *rstd,
                            const float *inp, const float *w, int64_t N, int64_t C, float eps);
    void (*rmsnorm_backward)(struct loom_backend *be, float *dinp, void *dinp_copy, float *dinp_sum,
                             float *dw, const void *dout, enum loom_dtype dout_dt, const float *inp,
                             const float *w, const float *rstd, int64_t N, int64_t C);
    /* A residual add fused with the norm that follows it: xs = x + r (xs may alias x or r), then
     * out = layernorm(xs) or rmsnorm(xs) exactly as the ops above (mean, rstd saved). Equal, bit
     * for bit, to add followed by layernorm_forward / rmsnorm_forward. r is a typed activation
     * (r_dt: a branch's output; a 16-bit r is widened exactly, then added in fp32). */
    void (*residual_layernorm_forward)(struct loom_backend *be, float *xs, void *out,
                                       enum loom_dtype out_dt, float *mean, float *rstd,
                                       const float *x, const void *r, enum loom_dtype r_dt,
                                       const float *w, const float *b, int64_t N, int64_t C,
                                       float eps);
    void (*residual_rmsnorm_forward)(struct loom_backend *be, float *xs, void *out,
                                     enum loom_dtype out_dt, float *rstd, const float *x,
                                     const void *r, enum loom_dtype r_dt, const float *w, int64_t N,
                                     int64_t C, float eps);

    /* ---- query and key head norms (qk_layernorm), in place on a qkv activation ----
     * qkv[N, (NH + 2 NKV) HS] of type dt (LOOM_DTYPE_F32 or LOOM_DTYPE_BF16, on the CPU too,
     * whose bf16 serves as the reference of another backend's; cuda: HS up to 256) in the QKV
     * layout above. Its head vectors of HS values, dense index v: the N NH query heads first
     * (v = n NH + h, token n, query head h of group h / (NH/NKV)), then the N NKV key heads
     * (v = N NH + n NKV + g); the value heads are neither read nor written. rms nonzero: RMSNorm,
     * else LayerNorm; (wq, bq) normalise every query head, (wk, bk) every key head (HS fp32 each,
     * shared by the heads; b NULL: no bias, and always for RMSNorm).
     * Forward, per head vector x of HS values read from qkv:
     *   LayerNorm: mean = sum(x) / HS, rstd = 1/sqrt(sum((x - mean)^2) / HS + eps),
     *              x <- (x - mean) * rstd * w + b
     *   RMSNorm:   rstd = 1/sqrt(sum(x^2) / HS + eps), x <- x * rstd * w
     * with the sums in double, mean and rstd rounded to fp32, each element's product and sum
     * rounded in fp32 in that order (no fused multiply-add; the layernorm and rmsnorm ops' own
     * arithmetic) and the result rounded to dt. keep[v HS + i] = x[i] as read (type dt, exact),
     * mean[v] (LayerNorm) and rstd[v] (fp32): each skipped if NULL. */
    void (*head_norm_forward)(struct loom_backend *be, int rms, void *qkv, enum loom_dtype dt,
                              void *keep, float *mean, float *rstd, const float *wq,
                              const float *bq, const float *wk, const float *bk, int64_t N,
                              int64_t NH, int64_t NKV, int64_t HS, float eps);
    /* Its backward, in place on dqkv (type dt, the layout of qkv): the query and key parts hold
     * the gradient d of the normalised vectors and are overwritten with that of their inputs,
     * from keep, mean (LayerNorm) and rstd of the forward: with xhat = (x - mean) * rstd
     * (RMSNorm: x * rstd), g = d * w,
     *   LayerNorm: dx = rstd * ((g - sum(g) / HS) - xhat * sum(g * xhat) / HS)
     *   RMSNorm:   dx = rstd * (g - xhat * sum(g * xhat) / HS)
     * (sums in double, rounded to fp32; dx rounded to dt; value heads untouched). dwq += the sum
     * of d * xhat over every query head vector, dbq += that of d (skipped if NULL); dwk, dbk
     * likewise over the key heads. Sums in a fixed order: two runs give the same bits. */
    void (*head_norm_backward)(struct loom_backend *be, int rms, void *dqkv, enum loom_dtype dt,
                               float *dwq, float *dbq, float *dwk, float *dbk, const void *keep,
                               const float *mean, const float *rstd, const float *wq,
                               const float *wk, int64_t N, int64_t NH, int64_t NKV, int64_t HS);

    /* ---- linear: out[N,OC] = inp[N,C] . w[OC,C]^T + b[OC] (b may be NULL) ---- */
    void (*linear_forward)(struct loom_backend *be, float *out, const float *inp, const float *w,
                           const float *b, int64_t N, int64_t C, int64_t OC);
    /* dinp = dout . w (assigned; skipped if NULL); dw += dout^T . inp; db += sum_rows dout */
    void (*linear_backward)(struct loom_backend *be, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, int64_t N,
                            int64_t C, int64_t OC);
    /* The ops below (and the norms above) take some activations in an explicit element type
     * (act_dt, inp_dt, out_dt, dout_dt, dinp_dt; the attention ops' a->dt): LOOM_DTYPE_F32 on
     * every backend, meaning fp32 arrays and exactly the fp32 ops described; or the 16-bit type
     * that activation_dtype reports, where the backend has one. Such an array holds its N*C (or
     * N*OC) elements at that type's size, written rounded to it (round to nearest even) and
     * read as they are, with no fp32 copy. */
    /* Linear then GELU: pre[N,OC] = inp . w^T + b (b may be NULL), saved for the backward, and
     * out[N,OC] = gelu(pre) of pre as stored, both of type act_dt, inp[N,C] of type inp_dt; as
     * linear_forward followed by gelu_forward (with a 16-bit act_dt the bias may be rounded to
     * it before the add). */
    void (*linear_gelu_forward)(struct loom_backend *be, enum loom_gelu form, void *out, void *pre,
                                enum loom_dtype act_dt, const void *inp, enum loom_dtype inp_dt,
                                const float *w, const float *b, int64_t N, int64_t C, int64_t OC);
    /* Backward of a linear whose input is act = gelu(pre), continued through the GELU:
     * dpre[N,C] = (dout . w) * gelu'(pre) (assigned); dpre_b[C] += sum_rows dpre (the bias
     * gradient of the product that made pre; skipped if NULL); dw += dout^T . act;
     * db += sum_rows dout. As linear_backward, gelu_backward, then the column sums of dpre.
     * dpre, act and pre are of type act_dt (the sums of dpre are taken of its stored values);
     * dout[N,OC] of type dout_dt (its sums likewise). */
    void (*linear_gelu_backward)(struct loom_backend *be, enum loom_gelu form, void *dpre,
                                 enum loom_dtype act_dt, float *dpre_b, float *dw, float *db,
                                 const void *dout, enum loom_dtype dout_dt, const void *act,
                                 const void *pre, const float *w, int64_t N, int64_t C, int64_t OC);
    /* linear_forward with the output out[N,OC] of type out_dt and the input inp[N,C] of type
     * inp_dt (with a 16-bit out_dt the bias may be rounded to it before the add). */
    void (*linear_forward_typed)(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                 const void *inp, enum loom_dtype inp_dt, const float *w,
                                 const float *b, int64_t N, int64_t C, int64_t OC);
    /* linear_backward with dinp[N,C] of type dinp_dt, the output gradient dout[N,OC] of type
     * dout_dt (db then sums the values as stored) and the input inp[N,C] of type inp_dt. */
    void (*linear_backward_typed)(struct loom_backend *be, void *dinp, enum loom_dtype dinp_dt,
                                  float *dw, float *db, const void *dout, enum loom_dtype dout_dt,
                                  const void *inp, enum loom_dtype inp_dt, const float *w,
                                  int64_t N, int64_t C, int64_t OC);

    /* ---- attention ----
     * Rotary embedding applied in place to the q and k heads of qkv[B,T,(NH+2*NKV)*HS], rotating
     * pairs (i, i + D/2) of each head's first D = loom_rope_dims(rope, HS) values (the "rotate
     * half" convention of GPT-NeoX/Llama; the rest pass through) of token (b, t) at position
     * pos0 + p by angle (pos0 + p) * loom_rope_freq(rope, HS, i) (loom/rope.h), p = pos[b*T + t]
     * when pos is given (as embedding_forward's: [B,T] int32 on the device, 0 <= p < T), else
     * p = t. inverse = 1 rotates back (the backward pass). qkv is a typed activation of type dt
     * (fp32, or activation_dtype's type: computed in fp32, rounded once). */
    void (*rope)(struct loom_backend *be, void *qkv, enum loom_dtype dt, const int32_t *pos,
                 int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                 const struct loom_rope *rope, int inverse);
    /* out[B,T,NH*HS] = softmax(scale * q k^T (+ causal, document and key-end masks)) v; saves
     * lse[B,NH,T] (log-sum-exp of each score row; -inf for a row that sees no key) so backward
     * recomputes the probabilities. qkv, out (and dout, dqkv) of type a->dt. */
    void (*attention_forward)(struct loom_backend *be, void *out, float *lse, const void *qkv,
                              const struct loom_attn *a);
    /* dqkv assigned */
    void (*attention_backward)(struct loom_backend *be, void *dqkv, const void *dout,
                               const void *out, const float *lse, const void *qkv,
                               const struct loom_attn *a);

    /* The general problem above: out and lse from q, k, v (and bias) */
    void (*attention_general_forward)(struct loom_backend *be, float *out, float *lse,
                                      const float *q, const float *k, const float *v,
                                      const struct loom_attn_general *a);
    /* dq, dk, dv assigned, in the layouts of q, k, v (they may be slices of one fused gradient,
     * as q, k, v of one projection; key rows no query sees get 0); dbias[NH, Tq, Tk] += the
     * gradient of the bias summed over the samples (skipped if NULL) */
    void (*attention_general_backward)(struct loom_backend *be, float *dq, float *dk, float *dv,
                                       float *dbias, const float *dout, const float *out,
                                       const float *lse, const float *q, const float *k,
                                       const float *v, const struct loom_attn_general *a);

    /* One query position against a key/value cache (generation): q[NH*HS] (one token's query
     * heads), kcache/vcache [L, NKV, HS] holding positions 0..L-1 (the query attends to all of
     * them); out[NH*HS] = softmax(scale q k^T) v per head, head h using group h / (NH/NKV). */
    void (*attention_decode)(struct loom_backend *be, float *out, const float *q,
                             const float *kcache, const float *vcache, int64_t L, int64_t NH,
                             int64_t NKV, int64_t HS, float scale);

    /* ---- activations ---- */
    /* GELU of the given form (enum loom_gelu) */
    void (*gelu_forward)(struct loom_backend *be, enum loom_gelu form, float *out, const float *inp,
                         int64_t n);
    /* gelu_forward on n elements of the typed activation type dt (out and inp alike) */
    void (*gelu_forward_typed)(struct loom_backend *be, enum loom_gelu form, void *out,
                               const void *inp, enum loom_dtype dt, int64_t n);
    void (*gelu_backward)(struct loom_backend *be, enum loom_gelu form, float *dinp,
                          const float *dout, const float *inp, int64_t n);
    /* SwiGLU: inp[N, 2F] = [gate | up] per row, out[N,F] = silu(gate) * up; every array a typed
     * activation of type dt (fp32, or activation_dtype's type: computed in fp32, rounded once) */
    void (*swiglu_forward)(struct loom_backend *be, void *out, const void *inp, enum loom_dtype dt,
                           int64_t N, int64_t F);
    void (*swiglu_backward)(struct loom_backend *be, void *dinp, const void *dout, const void *inp,
                            enum loom_dtype dt, int64_t N, int64_t F);
    /* ---- mixture of experts (the permuted rows of loom/moe.h) ----
     * permute: out[r] = scale[r] * inp[tok[r]] for r < R (scale NULL: 1; tok[r] < 0: a zero
     * row), out[R,C], inp[N,C]. unpermute: out[tok[r]] += scale[r] * inp[r] (scale NULL: 1; rows
     * with tok[r] < 0 skipped), out[N,C] accumulated in the order of r. row_dot: out[r] =
     * inp[r] . other[tok[r]] (0 for tok[r] < 0). tok[R] int32 and scale[R] on the device. */
    void (*moe_permute)(struct loom_backend *be, float *out, const float *inp, const int32_t *tok,
                        const float *scale, int64_t R, int64_t C);
    void (*moe_unpermute)(struct loom_backend *be, float *out, const float *inp,
                          const int32_t *tok, const float *scale, int64_t R, int64_t N, int64_t C);
    void (*moe_row_dot)(struct loom_backend *be, float *out, const float *inp, const float *other,
                        const int32_t *tok, int64_t R, int64_t C);
    /* Grouped linear: G groups of consecutive rows (rows[g] each) of inp[sum rows, C], group g
     * with its own w[g] [OC,C] and b[g] (b NULL or b[g] NULL: none): out = inp . w[g]^T + b[g].
     * Backward as linear_backward per group: dinp assigned (NULL: skipped), dw[g] and db[g]
     * (NULL: skipped) accumulate. The pointer arrays live on the host. */
    void (*grouped_linear_forward)(struct loom_backend *be, float *out, const float *inp,
                                   const float *const *w, const float *const *b,
                                   const int64_t *rows, int64_t G, int64_t C, int64_t OC);
    void (*grouped_linear_backward)(struct loom_backend *be, float *dinp, float *const *dw,
                                    float *const *db, const float *dout, const float *inp,
                                    const float *const *w, const int64_t *rows, int64_t G,
                                    int64_t C, int64_t OC);
    /* out = inp * keep / (1 - p) over a local [B,T,C] block (out may alias inp) */
    void (*dropout_forward)(struct loom_backend *be, float *out, const float *inp, int64_t B,
                            int64_t T, int64_t C, const struct loom_dropout *d);
    void (*dropout_backward)(struct loom_backend *be, float *dinp, const float *dout, int64_t B,
                             int64_t T, int64_t C, const struct loom_dropout *d);

    /* ---- softmax cross-entropy over a (possibly vocabulary-parallel) shard ----
     * logits[N,Vl] hold columns [v0, v0+Vl) of the vocabulary; only the first Vvalid of them are
     * real tokens (the rest is padding and never enters the softmax). targets[N] are global ids,
     * -1 = ignore. Writes stats[N,3] = (local max, sum exp(x - local max), target logit or 0 if
     * the target is not in this shard). */
    void (*xent_forward)(struct loom_backend *be, float *stats, const float *logits,
                         const int32_t *targets, int64_t N, int64_t Vl, int64_t v0,
                         int64_t Vvalid);
    /* Given global (max, sumexp) in gstats[N,2]: dlogits = (softmax - onehot) * dloss[n]
     * (dlogits may alias logits; padded columns get 0). */
    void (*xent_backward)(struct loom_backend *be, float *dlogits, const float *logits,
                          const int32_t *targets, const float *gstats, const float *dloss,
                          int64_t N, int64_t Vl, int64_t v0, int64_t Vvalid);
    /* The loss and its gradient in one pass, for rows that hold the whole vocabulary (one
     * tensor-parallel rank): logits[N,Vl] of element type dt, the first Vvalid >= 1 columns real
     * tokens, the rest padding. For row n with target t = targets[n] >= 0:
     *   losses[n] = log(sum_{c<Vvalid} exp(x[n,c])) - (x[n,t] if t < Vvalid else 0)
     * and, when grad is nonzero, the logits are overwritten in place with their gradient
     *   (softmax(x[n, :Vvalid])[c] - [c == t]) * dloss   for c < Vvalid, 0 for padded columns,
     * rounded to dt; a row with t < 0 gets loss 0 and (with grad) a zero row. The math of
     * xent_forward, then xent_backward with the row's own (max, sumexp) and dloss[n] = dloss;
     * without grad the logits are only read. dt: LOOM_DTYPE_F32 on every backend; the 16-bit
     * types of set_matmul_dtype (LOOM_DTYPE_BF16, LOOM_DTYPE_F16) where the backend has them
     * (statistics in fp32 all the same). */
    void (*xent_fused)(struct loom_backend *be, float *losses, void *logits, enum loom_dtype dt,
                       const int32_t *targets, float dloss, int grad, int64_t N, int64_t Vl,
                       int64_t Vvalid);
    /* The output layer fused with the loss, over a block of N rows holding the whole vocabulary:
     *   logits = inp[N,C] . w[Vl,C]^T           (no bias) into the workspace `logits`,
     *   xent_fused on them (losses[N]; grad when dinp or dw is set),
     *   dinp[N,C] = dlogits . w (assigned; skipped if NULL), dw[Vl,C] += dlogits^T . inp (if dw).
     * With dinp and dw both NULL only the losses are computed. The workspace holds N*Vl elements
     * of the backend's type (linear_xent_dtype): fp32, or, with 16-bit matrix products
     * (set_matmul_dtype), their 16-bit type, which the products then write and read directly.
     * Equal to linear_forward, xent_fused and linear_backward in turn, up to that rounding. */
    void (*linear_xent)(struct loom_backend *be, float *losses, float *dinp, float *dw,
                        void *logits, const float *inp, const float *w, const int32_t *targets,
                        float dloss, int64_t N, int64_t C, int64_t Vl, int64_t Vvalid);

    /* ---- optimizer ----
     * AdamW on n elements: g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), with bias corrections for `step` (1-based). */
    void (*adamw)(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                  int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                  int64_t step, float grad_scale);
    /* adamw on nranges ranges [off[k], off[k] + len[k]) of the flat buffers param and grad, whose
     * moments lie at [soff[k], soff[k] + len[k]) of m and v (soff NULL: at off[k], the same layout;
     * host arrays off, soff, len, decay; the ranges do not overlap; an empty range is skipped),
     * with weight decay wd where decay[k] is nonzero and 0 elsewhere: a whole optimizer step in
     * one call. Element by element the same bits as adamw called on each range with the same
     * arguments; elements outside the ranges are left as they are. */
    void (*adamw_ranges)(struct loom_backend *be, float *param, const float *grad, float *m,
                         float *v, const int64_t *off, const int64_t *soff, const int64_t *len,
                         const uint8_t *decay, int nranges, float lr, float beta1, float beta2,
                         float eps, float wd, int64_t step, float grad_scale);
    /* Sum of squares over nranges ranges x[off[k], off[k] + len[k]) (host arrays), accumulated
     * in double in a fixed order and returned on the host: the gradient norm of many parameters
     * with one wait for the device. Equal to adding up sumsq over the ranges, up to rounding.
     * With zeros set, the same pass also counts the elements equal to zero (+0 or -0) into
     * *zeros (--log-num-zeros-in-grad). */
    double (*sumsq_ranges)(struct loom_backend *be, const float *x, const int64_t *off,
                           const int64_t *len, int nranges, int64_t *zeros);

    /* ---- precision, memory and ordering (optional: NULL where a backend has none) ----
     * Element type of the inputs of the matrix products in the linear ops (linear_* and
     * linear_gelu_*): LOOM_DTYPE_F32 (exact fp32, the default), LOOM_DTYPE_BF16 or LOOM_DTYPE_F16
     * (inputs rounded to 16 bits, products accumulated and written in fp32; parameters,
     * activations and gradients stay fp32 except those passed as activation_dtype's type to the
     * ops with typed activations; bias gradients may then be summed from the rounded
     * output gradient, within the 16-bit rounding of the fp32 ops). Weights inside [params, params + n) get a bf16 copy that is refreshed once after
     * they change (the backend notices its own writes there: to_device, copy, zero, add, axpy,
     * scale, adamw, adamw_ranges); other operands are converted per call into a reusable
     * workspace. Any other type is LOOM_ERR_UNSUPPORTED. */
    enum loom_status (*set_matmul_dtype)(struct loom_backend *be, enum loom_dtype dt,
                                         const float *params, int64_t n);
    /* Element type of the logits that linear_xent keeps in its workspace under the current
     * set_matmul_dtype: LOOM_DTYPE_F32, or the 16-bit type of the products. NULL (the CPU):
     * always LOOM_DTYPE_F32. */
    enum loom_dtype (*linear_xent_dtype)(struct loom_backend *be);
    /* The 16-bit element type the ops with typed activations (the norms, linear_gelu_*,
     * linear_*_typed, attention_* through loom_attn.dt) accept besides LOOM_DTYPE_F32 under the
     * current set_matmul_dtype, or LOOM_DTYPE_F32 when they take fp32 only. NULL (the CPU): fp32
     * only. On cuda: LOOM_DTYPE_BF16 with bf16 products; fp16 products keep fp32 activations. The
     * type must stay the same between the forward that writes such an array and the backward that
     * reads it. */
    enum loom_dtype (*activation_dtype)(struct loom_backend *be);
    /* The attention kernels (enum loom_attn_backend); LOOM_ERR_UNSUPPORTED for FUSED where cuDNN
     * is not built in. NULL (the CPU): one kind of kernel, whatever is asked. */
    enum loom_status (*set_attention_backend)(struct loom_backend *be,
                                              enum loom_attn_backend kind);
    /* on: every op gives the same bits from run to run of the program (Megatron's
     * --deterministic-mode; on cuda the products keep cuBLASLt's heuristic choice instead of the
     * fastest of its candidates timed at the first call, and attention under LOOM_ATTN_AUTO takes
     * loom's kernels). off (the default): the fastest, which may differ between runs in the last
     * bits. LOOM_ERR_INVALID_ARG with LOOM_ATTN_FUSED. NULL (the CPU): always deterministic. */
    enum loom_status (*set_deterministic)(struct loom_backend *be, int on);
    /* Device memory the backend holds (its own allocations and workspaces). */
    void (*memory_stats)(struct loom_backend *be, struct loom_mem_stats *st);
    /* The stream every op runs on, as an opaque handle (a cudaStream_t), so that communication
     * can be ordered with compute (loom_comm_set_stream). */
    void *(*stream)(struct loom_backend *be);
};

struct loom_mem_stats {
    size_t in_use;       /* bytes allocated now */
    size_t peak;         /* most bytes allocated at once so far */
    int64_t allocations; /* allocation calls so far, workspaces included */
};

struct loom_backend {
    const struct loom_backend_ops *ops;
    enum loom_device device;
    int num_threads;
    void *impl; /* backend-private state (handles, streams, workspaces) */
};

/* Create a backend by name ("cpu", "cuda"); an unknown or unavailable one is
 * LOOM_ERR_INVALID_ARG/UNSUPPORTED with a message naming the valid choices. device_index < 0
 * picks the device of this process's local rank (loom_comm_local_rank() modulo the device
 * count), so that the ranks of one node spread over its GPUs. */
enum loom_status loom_backend_create(struct loom_backend **out, const char *name, int device_index);
void loom_backend_destroy(struct loom_backend *be);

enum loom_status loom_backend_cpu_create(struct loom_backend **out);
enum loom_status loom_backend_cuda_create(struct loom_backend **out, int device_index);

/* Report an op the backend lacks and abort (an internal misuse, never user input). */
_Noreturn void loom_backend_missing_op(const struct loom_backend *be, const char *op);

/* Call an op: loom_op(be, linear_forward, out, inp, w, b, N, C, OC). */
#define loom_op(be, op, ...)                                                                  \
    (((be)->ops->op ? (void)0 : loom_backend_missing_op((be), #op)), (be)->ops->op((be), __VA_ARGS__))

#endif
