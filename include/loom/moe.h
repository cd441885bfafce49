/* Mixture-of-experts MLPs (Megatron-LM's MoE layer): the configuration, the router and the layer.
 *
 * An MoE layer replaces a decoder layer's MLP (which layers: --moe-layer-freq). Per token t of
 * the layer's input x [N, C] (N tokens, C hidden):
 *   router:   logits l_t = x_t W^T (W [E, C]); scores, top-k selection and the routing
 *             probabilities p_te by the score function (src/models/moe/router.c);
 *   dispatch: the (token, expert) pairs the router kept, permuted expert-major (rows of expert
 *             0, then 1, ...; within an expert by token), padded to the capacity if asked;
 *   experts:  expert e's MLP (GELU or SwiGLU, [gate; up] fc1 as the dense MLP's) on its rows,
 *             every expert's products in one grouped call over the permuted rows;
 *   combine:  y_t = sum over the kept pairs (t, e) of p_te expert_e(x_t), plus the shared
 *             experts' MLP of x_t (times sigmoid(x_t . g) with --moe-shared-expert-gate).
 * The dispatch step sits between routing and the experts so that expert parallelism can put an
 * exchange there; each expert's weights are their own logical parameters
 * (mlp.experts.local_experts.{e}.linear_fc{1,2}.weight), so checkpoints hold every expert whole.
 *
 * Balancing (the gradient only: never part of the language-model loss; the logged values are
 * without their coefficients, as Megatron-LM logs them):
 *   aux_loss:     coeff E / (K T^2) sum_e (sum_t s_te) N_e
 *   seq_aux_loss: the same per sequence (T its length), averaged over the sequences
 *   z-loss:       z_coeff mean_t logsumexp(l_t)^2
 * with s the scores over all experts (softmax, or sigmoid normalised over the experts), N_e the
 * tokens that chose expert e (top-k, before any capacity drop) and T the tokens. Their gradients
 * are weighted as a micro-batch's share of the step (1 / the global batch's micro-batches).
 * Aux-loss-free balancing: with --moe-router-enable-expert-bias each MoE layer keeps a bias b_e
 * (mlp.router.expert_bias, in checkpoints, not trained) added to the sigmoid scores for the
 * selection only; after each global batch b_e += rate * sign(mean_e c_e - c_e) with c_e the
 * pairs routed to e over the batch (all data-parallel ranks).
 */
#ifndef LOOM_MOE_H
#define LOOM_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "loom/backend.h"
#include "loom/status.h"

enum loom_moe_score { LOOM_MOE_SCORE_SOFTMAX = 0, LOOM_MOE_SCORE_SIGMOID };
enum loom_moe_balance { LOOM_MOE_AUX_LOSS = 0, LOOM_MOE_SEQ_AUX_LOSS, LOOM_MOE_BALANCE_NONE };
enum loom_moe_drop { LOOM_MOE_DROP_PROBS = 0, LOOM_MOE_DROP_POSITION };
enum loom_moe_dtype { LOOM_MOE_ROUTER_FP32 = 0, LOOM_MOE_ROUTER_FP64 };

#define LOOM_MOE_FREQ_LEN 128
#define LOOM_MOE_MAX_EXPERTS 4096 /* the router keeps per-token arrays of E on the stack */

/* Megatron-LM's MoE flags (the transformer configuration's `moe`); num_experts 0: no MoE. */
struct loom_moe_config {
    int64_t num_experts;                /* E (--num-experts) */
    char layer_freq[LOOM_MOE_FREQ_LEN]; /* --moe-layer-freq: "N" (every N-th layer from layer 0)
                                           or a list "[0,1,1]", "([0]*3+[1]*29)" */
    int64_t ffn_hidden;                 /* an expert's F (--moe-ffn-hidden-size; 0: --ffn-hidden-size) */
    int64_t topk;                       /* K (--moe-router-topk) */
    int pre_softmax;                    /* --moe-router-pre-softmax */
    int score;                          /* enum loom_moe_score (--moe-router-score-function) */
    double topk_scaling;                /* --moe-router-topk-scaling-factor (0: none) */
    int64_t num_groups, group_topk;     /* --moe-router-num-groups, --moe-router-group-topk */
    int router_dtype;                   /* enum loom_moe_dtype (--moe-router-dtype) */
    int balance;                        /* enum loom_moe_balance */
    double aux_coeff, z_coeff;          /* --moe-aux-loss-coeff, --moe-z-loss-coeff */
    int expert_bias;                    /* --moe-router-enable-expert-bias */
    double bias_rate;                   /* --moe-router-bias-update-rate */
    double capacity_factor;             /* --moe-expert-capacity-factor (0: dropless) */
    int drop_policy;                    /* enum loom_moe_drop */
    int pad_to_capacity;                /* --moe-pad-expert-input-to-capacity */
    int64_t shared_ffn;                 /* --moe-shared-expert-intermediate-size (0: none) */
    int shared_gate;                    /* --moe-shared-expert-gate */
};

/* Check the MoE flags against each other and the model (L layers, tensor-parallel size tp, which
 * must divide the experts' and shared experts' sizes): a one-line error naming the flag and what
 * is valid (LOOM_ERR_INVALID_ARG). ffn: the dense --ffn-hidden-size, taken for an expert's when
 * moe_ffn is 0. */
enum loom_status loom_moe_config_check(struct loom_moe_config *c, int64_t L, int64_t ffn, int tp);
/* Parse layer_freq for L layers into is_moe[L] (0/1); a one-line error naming --moe-layer-freq */
enum loom_status loom_moe_layer_pattern(const char *freq, int64_t L, uint8_t *is_moe);

/* ---- the router (host) ----
 * One micro-batch of N tokens in nseq sequences (of N / nseq tokens each: the sequence-level
 * balancing). Rows of the permuted buffer: expert-major, each expert's rows in token order;
 * with pad_to_capacity every expert has cap rows, the rows past its tokens padding (token -1). */
struct loom_moe_route {
    int64_t N, E, K, nseq;
    int64_t cap;       /* rows an expert may take (the capacity; N*K when dropless) */
    int64_t R;         /* rows in the permuted buffer */
    double *logits;    /* [N, E] (the router's product) */
    int32_t *expert;   /* [N, K] the chosen experts, in selection order */
    double *prob;      /* [N, K] their routing probabilities (0 for a dropped pair) */
    uint8_t *kept;     /* [N, K] the pair survived the capacity */
    int64_t *count;    /* [E] pairs that chose each expert (before any drop) */
    int64_t *rows;     /* [E] rows of each expert in the permuted buffer */
    int32_t *row_token; /* [R] the token of each row (-1: padding) */
    int32_t *row_pair;  /* [R] its pair n*K + k (-1: padding) */
    double *bcount;     /* [nseq, E] with seq_aux_loss, else [1, E]: the tokens of each sequence
                           (of the micro-batch) that chose each expert, for the balancing loss */
    int32_t *pairs;     /* [2 N K] scratch */
    double aux, z;     /* the balancing measure and the z-loss, without their coefficients */
};

/* Room for N tokens (capacity and padding from c) */
enum loom_status loom_moe_route_alloc(struct loom_moe_route *r, const struct loom_moe_config *c,
                                      int64_t N, int64_t nseq);
void loom_moe_route_free(struct loom_moe_route *r);
/* Rows the permuted buffer may need for N tokens */
int64_t loom_moe_max_rows(const struct loom_moe_config *c, int64_t N);
/* Route x [N, C] (fp32) with router weight w [E, C] and the expert bias (NULL: none) */
void loom_moe_route(struct loom_moe_route *r, const struct loom_moe_config *c, const float *x,
                    const float *w, const float *bias, int64_t C);
/* d(logits) [N, E] from d(prob) [N, K] of the routing probabilities plus the balancing and
 * z-loss gradients weighted by `scale` (their coefficients included) */
void loom_moe_route_backward(const struct loom_moe_route *r, const struct loom_moe_config *c,
                             const double *dprob, double scale, double *dlogits);
/* The expert bias update from the counts c[E] of a global batch (bias += rate * sign(mean - c)) */
void loom_moe_bias_update(float *bias, const double *counts, int64_t E, double rate);


/* ---- the layer ---- */
/* One MoE layer's parameters, or their gradients (device pointers; NULL: absent). The experts'
 * are arrays of E pointers, one tensor per expert. */
struct loom_moe_weights {
    float *router_w, *expert_bias;
    float **fc1_w, **fc1_b, **fc2_w, **fc2_b;
    float *sh_fc1_w, *sh_fc1_b, *sh_fc2_w, *sh_fc2_b, *sh_gate_w;
};

/* The layers of a model: B sequences of T tokens of hidden size C, the experts' activation
 * (swiglu, else GELU of form gelu), biases on the products or not, and room for `nacts` saved
 * forwards (micro-batch slots x MoE layers).
 * Tensor parallelism (tp: the group, NULL for one rank; every rank has all N tokens): the
 * experts' and the shared experts' fc1 are split by columns, fc2 by rows, as the dense MLP's
 * (their weights are this rank's slices, F / tp of each expert's F). The layer's output is then
 * this rank's share, to be summed over the group by the caller (fc2's biases added by rank 0); its
 * input gradient likewise (the router's and the gate's part from rank 0); the router and the gate
 * are replicated and their gradients the same on every rank. */
struct loom_comm;
struct loom_moe;
enum loom_status loom_moe_create(struct loom_moe **out, const struct loom_moe_config *c,
                                 struct loom_backend *be, int64_t B, int64_t T, int64_t C,
                                 int swiglu, enum loom_gelu gelu, int bias, int64_t nacts,
                                 struct loom_comm *tp);
void loom_moe_free(struct loom_moe *moe);
/* y [N, C] (assigned) = the layer of x [N, C], its activations kept in saved forward `act` */
enum loom_status loom_moe_forward(struct loom_moe *moe, int64_t act, float *y, const float *x,
                                  const struct loom_moe_weights *w);
/* dx [N, C] (assigned) from dy [N, C] for saved forward `act` of input x; parameter gradients
 * accumulate into g; the balancing and z-loss gradients are weighted by `scale` */
enum loom_status loom_moe_backward(struct loom_moe *moe, int64_t act, float *dx, const float *dy,
                                   const float *x, const struct loom_moe_weights *w,
                                   const struct loom_moe_weights *g, double scale);
/* The routing of saved forward `act` (host) */
const struct loom_moe_route *loom_moe_route_of(const struct loom_moe *moe, int64_t act);

#endif
