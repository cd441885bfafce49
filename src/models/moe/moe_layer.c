/* The MoE layer (loom/moe.h): route, dispatch, experts, combine, shared experts; and the backward.
 *
 * Forward for N tokens x [N, C]:
 *   route (host, router.c) -> row_token / row_prob [R] of the permuted rows
 *   xp  = permute(x)                        [R, C]
 *   f1  = grouped fc1(xp)                   [R, F1] (each expert's rows with its own weights)
 *   a   = act(f1)                           [R, F]  (GELU, or SwiGLU of [gate | up])
 *   eo  = grouped fc2(a)                    [R, C]
 *   y   = unpermute(eo weighted by row_prob) + gate * shared(x)
 * Backward (dy [N, C]):
 *   dprob_r = eo_r . dy_tok(r);  deo = permute(dy) * row_prob;  grouped fc2/act/fc1 backward
 *   -> dxp; dx = unpermute(dxp) + the router's x-gradient (logits = x W^T) + the shared branch's.
 *   The router's gradient: d(logits) from dprob (router.c) plus the balancing and z-loss terms,
 *   then dW += d(logits)^T x and dx += d(logits) W on the host (fp64 sums).
 * The dispatch (permute / unpermute) is the step an expert-parallel exchange will surround.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/moe.h"

struct moe_act { /* one saved forward */
    struct loom_moe_route route;
    int32_t *tok;   /* [Rmax] device */
    float *prob;    /* [Rmax] device */
    float *xp, *f1, *a, *eo;       /* [Rmax, C], [Rmax, F1], [Rmax, F], [Rmax, C] */
    float *sf1, *sa, *sout, *gate; /* shared experts: [N, F1s], [N, Fs], [N, C], [N] */
};

struct loom_moe {
    struct loom_moe_config c;
    struct loom_backend *be;
    int64_t B, T, N, C, E, K, F, F1, Fs, F1s, Rmax, nacts;
    int swiglu, bias;
    enum loom_gelu gelu;
    struct loom_comm *tp; /* NULL: one tensor-parallel rank */
    int tp_rank;
    struct moe_act *acts;
    int32_t *ident; /* [N] device: 0 .. N-1 (the shared gate's rows) */
    /* backward scratch (device) */
    float *deo, *da, *df1, *dxp, *drow, *dtmp, *ds_out, *ds_a, *ds_f1;
    /* host scratch */
    float *hx, *hw, *hb, *hrow, *hdx, *hg;
    int32_t *htok;
    double *dprob, *dlog;
};

static void *dev(struct loom_moe *m, size_t bytes, int *bad) {
    void *p = m->be->ops->malloc(m->be, bytes > 0 ? bytes : 16);
    if (!p) *bad = 1;
    else m->be->ops->zero(m->be, p, bytes > 0 ? bytes : 16);
    return p;
}
static void devfree(struct loom_moe *m, void *p) {
    if (p) m->be->ops->free(m->be, p);
}

#define FL(n) ((size_t)(n) * sizeof(float))

enum loom_status loom_moe_create(struct loom_moe **out, const struct loom_moe_config *c,
                                 struct loom_backend *be, int64_t B, int64_t T, int64_t C,
                                 int swiglu, enum loom_gelu gelu, int bias, int64_t nacts,
                                 struct loom_comm *tp) {
    if (!be->ops->moe_permute || !be->ops->grouped_linear_forward)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--num-experts: MoE layers are not supported on "
                         "%s yet (run them on the cpu backend)", be->ops->name);
    struct loom_moe *m = calloc(1, sizeof *m);
    if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory for the MoE layers");
    m->c = *c;
    m->be = be;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->C = C;
    m->E = c->num_experts;
    m->K = c->topk;
    const int tps = tp ? loom_comm_size(tp) : 1;
    m->tp = tps > 1 ? tp : NULL;
    m->tp_rank = tps > 1 ? loom_comm_rank(tp) : 0;
    m->F = c->ffn_hidden / tps;
    m->F1 = swiglu ? 2 * m->F : m->F;
    m->Fs = c->shared_ffn / tps;
    m->F1s = swiglu ? 2 * m->Fs : m->Fs;
    m->swiglu = swiglu;
    m->gelu = gelu;
    m->bias = bias;
    m->nacts = nacts;
    m->Rmax = loom_moe_max_rows(c, m->N);
    const int64_t N = m->N, R = m->Rmax;
    int bad = 0;
    m->acts = calloc((size_t)(nacts > 0 ? nacts : 1), sizeof *m->acts);
    if (!m->acts) bad = 1;
    for (int64_t i = 0; !bad && i < nacts; i++) {
        struct moe_act *a = &m->acts[i];
        if (loom_moe_route_alloc(&a->route, c, N, B) != LOOM_OK) {
            bad = 1;
            break;
        }
        a->tok = dev(m, (size_t)R * sizeof(int32_t), &bad);
        a->prob = dev(m, FL(R), &bad);
        a->xp = dev(m, FL(R * C), &bad);
        a->f1 = dev(m, FL(R * m->F1), &bad);
        a->a = dev(m, FL(R * m->F), &bad);
        a->eo = dev(m, FL(R * C), &bad);
        if (m->Fs > 0) {
            a->sf1 = dev(m, FL(N * m->F1s), &bad);
            a->sa = dev(m, FL(N * m->Fs), &bad);
            a->sout = dev(m, FL(N * C), &bad);
            a->gate = dev(m, FL(N), &bad);
        }
    }
    m->ident = dev(m, (size_t)N * sizeof(int32_t), &bad);
    m->deo = dev(m, FL(R * C), &bad);
    m->da = dev(m, FL(R * m->F), &bad);
    m->df1 = dev(m, FL(R * m->F1), &bad);
    m->dxp = dev(m, FL(R * C), &bad);
    m->drow = dev(m, FL(R > N ? R : N), &bad);
    m->dtmp = dev(m, FL(N * C), &bad);
    if (m->Fs > 0) {
        m->ds_out = dev(m, FL(N * C), &bad);
        m->ds_a = dev(m, FL(N * m->Fs), &bad);
        m->ds_f1 = dev(m, FL(N * m->F1s), &bad);
    }
    m->hx = malloc(FL(N * C));
    m->hw = malloc(FL(m->E * C > C ? m->E * C : C));
    m->hb = malloc(FL(m->E));
    m->hrow = malloc(FL(R > N ? R : N));
    m->hdx = malloc(FL(N * C));
    m->hg = malloc(FL(m->E * C > C ? m->E * C : C));
    m->htok = malloc((size_t)(R > N ? R : N) * sizeof(int32_t));
    m->dprob = malloc((size_t)(N * m->K) * sizeof(double));
    m->dlog = malloc((size_t)(N * m->E) * sizeof(double));
    if (bad || !m->hx || !m->hw || !m->hb || !m->hrow || !m->hdx || !m->hg || !m->htok ||
        !m->dprob || !m->dlog) {
        loom_moe_free(m);
        return loom_fail(LOOM_ERR_OOM, "out of memory for the MoE layers' activations (%lld "
                         "rows of %lld experts; lower --micro-batch-size or "
                         "--moe-expert-capacity-factor)", (long long)R, (long long)c->num_experts);
    }
    for (int64_t t = 0; t < N; t++) m->htok[t] = (int32_t)t;
    be->ops->to_device(be, m->ident, m->htok, (size_t)N * sizeof(int32_t));
    *out = m;
    return LOOM_OK;
}

void loom_moe_free(struct loom_moe *m) {
    if (!m) return;
    for (int64_t i = 0; m->acts && i < m->nacts; i++) {
        struct moe_act *a = &m->acts[i];
        loom_moe_route_free(&a->route);
        devfree(m, a->tok);
        devfree(m, a->prob);
        devfree(m, a->xp);
        devfree(m, a->f1);
        devfree(m, a->a);
        devfree(m, a->eo);
        devfree(m, a->sf1);
        devfree(m, a->sa);
        devfree(m, a->sout);
        devfree(m, a->gate);
    }
    free(m->acts);
    float *devs[] = {(float *)m->ident, m->deo, m->da, m->df1, m->dxp, m->drow, m->dtmp,
                     m->ds_out, m->ds_a, m->ds_f1};
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) devfree(m, devs[i]);
    free(m->hx);
    free(m->hw);
    free(m->hb);
    free(m->hrow);
    free(m->hdx);
    free(m->hg);
    free(m->htok);
    free(m->dprob);
    free(m->dlog);
    free(m);
}

const struct loom_moe_route *loom_moe_route_of(const struct loom_moe *m, int64_t act) {
    return &m->acts[act].route;
}

static void activation(struct loom_moe *m, float *a, const float *f1, int64_t rows, int64_t F) {
    if (m->swiglu)
        loom_op(m->be, swiglu_forward, a, f1, LOOM_DTYPE_F32, rows, F);
    else
        loom_op(m->be, gelu_forward, m->gelu, a, f1, rows * F);
}
static void activation_backward(struct loom_moe *m, float *df1, const float *da, const float *f1,
                                int64_t rows, int64_t F) {
    if (m->swiglu)
        loom_op(m->be, swiglu_backward, df1, da, f1, LOOM_DTYPE_F32, rows, F);
    else
        loom_op(m->be, gelu_backward, m->gelu, df1, da, f1, rows * F);
}

static float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

enum loom_status loom_moe_forward(struct loom_moe *m, int64_t act, float *y, const float *x,
                                  const struct loom_moe_weights *w) {
    struct loom_backend *be = m->be;
    struct moe_act *a = &m->acts[act];
    struct loom_moe_route *r = &a->route;
    const int64_t N = m->N, C = m->C, E = m->E;
    /* route on the host */
    be->ops->to_host(be, m->hx, x, FL(N * C));
    be->ops->to_host(be, m->hw, w->router_w, FL(E * C));
    if (w->expert_bias) be->ops->to_host(be, m->hb, w->expert_bias, FL(E));
    loom_moe_route(r, &m->c, m->hx, m->hw, w->expert_bias ? m->hb : NULL, C);
    const int64_t R = r->R;
    for (int64_t i = 0; i < R; i++) {
        m->htok[i] = r->row_token[i];
        m->hrow[i] = r->row_pair[i] >= 0 ? (float)r->prob[r->row_pair[i]] : 0.0f;
    }
    be->ops->to_device(be, a->tok, m->htok, (size_t)R * sizeof(int32_t));
    be->ops->to_device(be, a->prob, m->hrow, FL(R));
    /* dispatch, the experts' grouped products, combine */
    loom_op(be, moe_permute, a->xp, x, a->tok, NULL, R, C);
    loom_op(be, grouped_linear_forward, a->f1, a->xp, (const float *const *)w->fc1_w,
            (const float *const *)w->fc1_b, r->rows, E, C, m->F1);
    activation(m, a->a, a->f1, R, m->F);
    /* fc2's bias: once over the tensor-parallel ranks (rank 0's share) */
    float *const *fc2_b = m->tp_rank == 0 ? w->fc2_b : NULL;
    loom_op(be, grouped_linear_forward, a->eo, a->a, (const float *const *)w->fc2_w,
            (const float *const *)fc2_b, r->rows, E, m->F, C);
    be->ops->zero(be, y, FL(N * C));
    loom_op(be, moe_unpermute, y, a->eo, a->tok, a->prob, R, N, C);
    if (m->Fs <= 0) return LOOM_OK;
    /* shared experts: every token, times its gate */
    loom_op(be, linear_forward, a->sf1, x, w->sh_fc1_w, w->sh_fc1_b, N, C, m->F1s);
    activation(m, a->sa, a->sf1, N, m->Fs);
    loom_op(be, linear_forward, a->sout, a->sa, w->sh_fc2_w, m->tp_rank == 0 ? w->sh_fc2_b : NULL,
            N, m->Fs, C);
    if (!w->sh_gate_w) {
        be->ops->add(be, y, y, a->sout, N * C);
        return LOOM_OK;
    }
    be->ops->to_host(be, m->hg, w->sh_gate_w, FL(C));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++) {
        float acc = 0;
        for (int64_t i = 0; i < C; i++) acc += m->hx[t * C + i] * m->hg[i];
        m->hrow[t] = sigmoidf_(acc);
    }
    be->ops->to_device(be, a->gate, m->hrow, FL(N));
    loom_op(be, moe_unpermute, y, a->sout, m->ident, a->gate, N, N, C);
    return LOOM_OK;
}

/* g[rows, C] += sum over the tokens of coef[t, row] x[t] (coef [N, rows], fp64) on the host,
 * through a host copy of the device gradient */
static void host_weight_grad(struct loom_moe *m, float *g_dev, const double *coef, int64_t rows) {
    struct loom_backend *be = m->be;
    const int64_t N = m->N, C = m->C;
    be->ops->to_host(be, m->hg, g_dev, FL(rows * C));
    /* by blocks of columns, the tokens in order within each: contiguous reads of x */
    const int64_t blk = 64;
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < C; i0 += blk) {
        const int64_t n = i0 + blk < C ? blk : C - i0;
        double acc[64];
        for (int64_t e = 0; e < rows; e++) {
            for (int64_t i = 0; i < n; i++) acc[i] = 0;
            for (int64_t t = 0; t < N; t++) {
                const double k = coef[t * rows + e];
                const float *x = m->hx + t * C + i0;
                for (int64_t i = 0; i < n; i++) acc[i] += k * (double)x[i];
            }
            for (int64_t i = 0; i < n; i++) m->hg[e * C + i0 + i] += (float)acc[i];
        }
    }
    be->ops->to_device(be, g_dev, m->hg, FL(rows * C));
}

enum loom_status loom_moe_backward(struct loom_moe *m, int64_t act, float *dx, const float *dy,
                                   const float *x, const struct loom_moe_weights *w,
                                   const struct loom_moe_weights *g, double scale) {
    struct loom_backend *be = m->be;
    struct moe_act *a = &m->acts[act];
    const struct loom_moe_route *r = &a->route;
    const int64_t N = m->N, C = m->C, E = m->E, K = m->K, R = r->R;
    /* the experts: d(prob) of each row, then back through fc2, the activation and fc1 */
    loom_op(be, moe_row_dot, m->drow, a->eo, dy, a->tok, R, C);
    be->ops->to_host(be, m->hrow, m->drow, FL(R));
    if (m->tp) /* each rank's rows are its share of the experts' outputs */
        LOOM_CHECK(loom_comm_allreduce(m->tp, m->hrow, R, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    loom_op(be, moe_permute, m->deo, dy, a->tok, a->prob, R, C);
    loom_op(be, grouped_linear_backward, m->da, g->fc2_w, g->fc2_b, m->deo, a->a,
            (const float *const *)w->fc2_w, r->rows, E, m->F, C);
    activation_backward(m, m->df1, m->da, a->f1, R, m->F);
    loom_op(be, grouped_linear_backward, m->dxp, g->fc1_w, g->fc1_b, m->df1, a->xp,
            (const float *const *)w->fc1_w, r->rows, E, C, m->F1);
    be->ops->zero(be, dx, FL(N * C));
    loom_op(be, moe_unpermute, dx, m->dxp, a->tok, NULL, R, N, C);
    /* the router: d(logits) on the host, then its weight's and its input's gradients */
    memset(m->dprob, 0, (size_t)(N * K) * sizeof(double));
    for (int64_t i = 0; i < R; i++)
        if (r->row_pair[i] >= 0) m->dprob[r->row_pair[i]] = (double)m->hrow[i];
    loom_moe_route_backward(r, &m->c, m->dprob, scale, m->dlog);
    be->ops->to_host(be, m->hx, x, FL(N * C));
    be->ops->to_host(be, m->hw, w->router_w, FL(E * C));
    host_weight_grad(m, g->router_w, m->dlog, E);
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++)
        for (int64_t i = 0; i < C; i++) {
            double acc = 0;
            for (int64_t e = 0; e < E; e++) acc += m->dlog[t * E + e] * (double)m->hw[e * C + i];
            m->hdx[t * C + i] = (float)acc;
        }
    if (m->Fs > 0 && w->sh_gate_w) {
        /* the gate: d(gate logit)_t = (dy_t . sout_t) g_t (1 - g_t); its input's gradient
         * joins the router's on the host */
        loom_op(be, moe_row_dot, m->drow, a->sout, dy, m->ident, N, C);
        be->ops->to_host(be, m->hrow, m->drow, FL(N));
        if (m->tp)
            LOOM_CHECK(loom_comm_allreduce(m->tp, m->hrow, N, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
        float *gate = malloc(FL(N));
        double *dgl = malloc((size_t)N * sizeof(double));
        if (!gate || !dgl) {
            free(gate);
            free(dgl);
            return loom_fail(LOOM_ERR_OOM, "out of memory in the MoE backward");
        }
        be->ops->to_host(be, gate, a->gate, FL(N));
        for (int64_t t = 0; t < N; t++)
            dgl[t] = (double)m->hrow[t] * (double)gate[t] * (1.0 - (double)gate[t]);
        be->ops->to_host(be, m->hw, w->sh_gate_w, FL(C));
        for (int64_t t = 0; t < N; t++)
            for (int64_t i = 0; i < C; i++) m->hdx[t * C + i] += (float)(dgl[t] * m->hw[i]);
        host_weight_grad(m, g->sh_gate_w, dgl, 1);
        free(gate);
        free(dgl);
    }
    /* the replicated router's and gate's part of dx: once over the tensor-parallel ranks */
    if (m->tp_rank == 0) {
        be->ops->to_device(be, m->dtmp, m->hdx, FL(N * C));
        be->ops->add(be, dx, dx, m->dtmp, N * C);
    }
    if (m->Fs <= 0) return LOOM_OK;
    /* the shared experts */
    loom_op(be, moe_permute, m->ds_out, dy, m->ident, w->sh_gate_w ? a->gate : NULL, N, C);
    loom_op(be, linear_backward, m->ds_a, g->sh_fc2_w, g->sh_fc2_b, m->ds_out, a->sa, w->sh_fc2_w,
            N, m->Fs, C);
    activation_backward(m, m->ds_f1, m->ds_a, a->sf1, N, m->Fs);
    loom_op(be, linear_backward, m->dtmp, g->sh_fc1_w, g->sh_fc1_b, m->ds_f1, x, w->sh_fc1_w, N, C,
            m->F1s);
    be->ops->add(be, dx, dx, m->dtmp, N * C);
    return LOOM_OK;
}
