/* The T5 model's internals, shared by its files (src/models/t5): the model's state (t5_model.c:
 * the table, buffers, forward and backward) and its parallel and dropout pieces (t5_parallel.c:
 * Megatron's tensor- and sequence-parallel regions per stack, the vocabulary-parallel embedding
 * and loss, the counter-based dropout). */
#ifndef LOOM_T5_INTERNAL_H
#define LOOM_T5_INTERNAL_H

#include <stdint.h>

#include "loom/backend.h"
#include "loom/model.h"
#include "loom/transformer.h"

struct t5_layer_ptrs {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
    float *lnc_w, *lnc_b, *cq_w, *cq_b, *ckv_w, *ckv_b, *cproj_w, *cproj_b; /* decoder only */
    float *ln2_w, *ln2_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};
struct t5_ptrs {
    float *wte, *wpe, *enc_rel, *dec_rel, *enc_lnf_w, *enc_lnf_b, *dec_lnf_w, *dec_lnf_b, *out_b;
    struct t5_layer_ptrs *layers;
};

/* One layer's saved activations (N rows of its stack) */
struct t5_layer_acts {
    float *x, *ln1, *ln1_m, *ln1_r, *ln1f, *qkv, *att, *lse, *xmid;
    float *lnc, *lnc_m, *lnc_r, *lncf, *cq, *ckv, *catt, *clse, *xmid2; /* decoder only */
    float *ln2, *ln2_m, *ln2_r, *ln2f, *pre, *act;
};
struct t5_slot {
    struct t5_layer_acts *layers;
    float *enc_xout, *enc_out, *enc_m, *enc_r;   /* [Ne', C], [Ne'] (the rank's rows) */
    float *enc_outf;                             /* [Ne, C]: enc_out of every position */
    float *dec_xout, *lnf, *lnf_m, *lnf_r, *lnff; /* [Nd', C], [Nd'], lnf gathered [Nd, C] */
    float *logits;                               /* [Nd, Vl] (their gradient after the forward) */
    float *losses;                               /* [Nd] */
    float *stats, *gstats, *dloss;               /* [Nd, 3], [Nd, 2], [Nd]: TP's loss */
    int32_t *enc_tok, *dec_tok, *targets, *enc_len; /* device */
    int32_t *host_targets;                       /* [Nd] */
    float *host_losses;
    int grad_ready;
};

struct t5 {
    struct loom_model base;
    struct loom_transformer_config cfg;
    struct t5_ptrs w, g;
    /* NH, A, F, Vl: this tensor-parallel rank's heads, attention width, MLP width and vocabulary
     * rows (from v0, Vvalid of them real); Tp: the ranks a stack's positions are split over
     * (tp under sequence parallelism, else 1) */
    int64_t Le, Ld, Te, Td, C, NH, HS, A, F, Vp, V, NHg, Vl, v0, Vvalid;
    int tp, tpr, Tp;
    struct t5_slot *slots;
    /* the relative bias as the attention adds it, [NH, Te, Te] and [NH, Td, Td], its gradient
     * (the same shapes) and each position pair's bucket (host) */
    float *enc_bias, *dec_bias, *denc_bias, *ddec_bias;
    int64_t *enc_bucket, *dec_bucket;
    /* backward scratch, shared by the slots */
    float *dres_enc, *dres_dec, *denc_out, *dtmp_enc; /* [Ne', C], [Nd', C], [Ne, C], [Ne, C] */
    float *dln, *datt, *dqkv, *dwide;                 /* [N, C], [N, A], [N, 3A], [N, F] */
    float *dckv;                                      /* [Ne, 2A] */
    float *dresf, *tmps;      /* [N, C], [N', C]: sequence parallelism's and dropout's */
    float *dlns, *sp_scratch; /* sequence parallelism: [N', C], [N, C] */
    float *host_stats, *host_g, *host_dloss;          /* [Nd, 3], [Nd, 2], [Nd] */
    void **allocs;
    int nallocs, cap_allocs;
};

static inline struct t5 *T5(struct loom_model *m) { return (struct t5 *)m; }

/* dropout sites (with the layer, 0 .. Le + Ld - 1, they key the masks' streams) */
enum { DROP_EMBED = 1, DROP_ATTN, DROP_XATTN, DROP_ATTN_OUT, DROP_XATTN_OUT, DROP_MLP_OUT };

struct loom_dropout loom_t5_hidden_dropout(const struct t5 *m, const struct loom_step_ctx *ctx,
                                           int64_t l, int site, int64_t T);
void loom_t5_attn_dropout(const struct t5 *m, struct loom_attn_general *a,
                          const struct loom_step_ctx *ctx, int64_t l, int site);
enum loom_status loom_t5_embed_forward(struct t5 *m, float *x0, const int32_t *tok, int64_t T,
                                       const struct loom_dropout *d);
enum loom_status loom_t5_embed_backward(struct t5 *m, float *dx0, const int32_t *tok, int64_t T,
                                        const struct loom_dropout *d);
enum loom_status loom_t5_row_parallel_add(struct t5 *m, float *y, const float *x, const float *inp,
                                          const float *w, const float *b, int64_t T, int64_t K,
                                          const struct loom_dropout *d);
enum loom_status loom_t5_norm_enter(struct t5 *m, float *out, float *mean, float *rstd,
                                    float *full, const float *x, const float *w, const float *b,
                                    int64_t T);
enum loom_status loom_t5_row_parallel_backward(struct t5 *m, float *dinp, float *dw, float *db,
                                               const float *dres, const float *inp, const float *w,
                                               int64_t T, int64_t K, const struct loom_dropout *d);
enum loom_status loom_t5_norm_backward(struct t5 *m, float *dres, float *dfull, float *dw,
                                       float *db, const float *x, const float *w,
                                       const float *mean, const float *rstd, int64_t T);
enum loom_status loom_t5_vocab_parallel_loss(struct t5 *m, struct t5_slot *q, float d,
                                             int training, double *sum);

#endif
