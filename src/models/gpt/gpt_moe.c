/* The GPT family's MoE layers: which layers have one (--moe-layer-freq), their parameters'
 * pointers from the table, the layer's forward and backward in place of the dense MLP
 * (src/models/moe/moe_layer.c), and after each step the expert bias update and the statistics
 * the trainer logs: load_balancing_loss and z_loss (each MoE layer's mean over the micro-batches,
 * averaged over the layers and the iterations since the last log, as Megatron-LM reports them,
 * without their coefficients) and each layer's expert load (its experts' shares of the routed
 * (token, expert) pairs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "models/gpt/gpt_internal.h"

struct loom_gpt_moe {
    struct loom_moe *layer;
    uint8_t *is_moe;       /* [L] */
    int64_t *local_index;  /* [L] the layer's saved forwards are local_index * nslots + slot */
    int64_t *global_index; /* [L] among every MoE layer of the model (-1: dense) */
    int64_t nmoe, nlocal, E;
    struct loom_moe_weights *w, *g; /* [L] */
    float **ptrs;                   /* the experts' pointer arrays */
    /* since the last report, by global MoE layer: [nmoe] sums and micro-batches, [nmoe, E] load */
    double *aux, *z, *micro, *load;
    double *bias_counts; /* this step's kept pairs per expert, [nmoe, E] */
    char *lines, *metrics;
};

int loom_gpt_moe_layer(const struct loom_gpt *m, int64_t l) {
    return m->moe && m->moe->is_moe[l];
}

static float *param_ptr(struct loom_gpt *m, float *base, const char *name) {
    const struct loom_param *p = loom_model_find_param(&m->base, name);
    return p && p->local ? base + p->offset : NULL;
}

/* the experts' per-expert pointers of layer l into base (parameters or gradients) */
static void expert_ptrs(struct loom_gpt *m, int64_t l, float *base, struct loom_moe_weights *w,
                        float **slots) {
    const int64_t E = m->moe->E;
    char name[128];
    float **arr[4] = {slots, slots + E, slots + 2 * E, slots + 3 * E};
    const char *suffix[4] = {"linear_fc1.weight", "linear_fc1.bias", "linear_fc2.weight",
                             "linear_fc2.bias"};
    for (int k = 0; k < 4; k++)
        for (int64_t e = 0; e < E; e++) {
            snprintf(name, sizeof name, "decoder.layers.%lld.mlp.experts.local_experts.%lld.%s",
                     (long long)l, (long long)e, suffix[k]);
            arr[k][e] = param_ptr(m, base, name);
        }
    w->fc1_w = arr[0];
    w->fc1_b = m->cfg.bias ? arr[1] : NULL;
    w->fc2_w = arr[2];
    w->fc2_b = m->cfg.bias ? arr[3] : NULL;
    const struct loom_gpt_layer_ptrs *lp = base == m->base.param_mem ? &m->w.layers[l]
                                                                      : &m->g.layers[l];
    w->router_w = lp->router_w;
    w->expert_bias = lp->expert_bias;
    w->sh_fc1_w = lp->sh_fc1_w;
    w->sh_fc1_b = lp->sh_fc1_b;
    w->sh_fc2_w = lp->sh_fc2_w;
    w->sh_fc2_b = lp->sh_fc2_b;
    w->sh_gate_w = lp->sh_gate_w;
}

enum loom_status loom_gpt_moe_create(struct loom_gpt *m) {
    const struct loom_transformer_config *c = &m->cfg;
    if (c->moe.num_experts <= 0) return LOOM_OK;
    const int64_t L = c->num_layers, E = c->moe.num_experts;
    struct loom_gpt_moe *s = calloc(1, sizeof *s);
    if (!s) return loom_fail(LOOM_ERR_OOM, "out of memory for the MoE layers");
    m->moe = s;
    s->E = E;
    s->is_moe = calloc((size_t)L, 1);
    s->local_index = malloc((size_t)L * sizeof(int64_t));
    s->global_index = malloc((size_t)L * sizeof(int64_t));
    s->w = calloc((size_t)L, sizeof *s->w);
    s->g = calloc((size_t)L, sizeof *s->g);
    if (!s->is_moe || !s->local_index || !s->global_index || !s->w || !s->g)
        return loom_fail(LOOM_ERR_OOM, "out of memory for the MoE layers");
    LOOM_CHECK(loom_moe_layer_pattern(c->moe.layer_freq, L, s->is_moe));
    for (int64_t l = 0; l < L; l++) {
        s->global_index[l] = s->is_moe[l] ? s->nmoe++ : -1;
        const int local = s->is_moe[l] && loom_gpt_layer_is_local(c, m->base.par, l);
        s->local_index[l] = local ? s->nlocal++ : -1;
    }
    s->ptrs = calloc((size_t)(8 * E * (s->nlocal > 0 ? s->nlocal : 1)), sizeof(float *));
    const size_t nm = (size_t)(s->nmoe > 0 ? s->nmoe : 1);
    s->aux = calloc(nm * 3, sizeof(double));
    s->load = calloc(nm * (size_t)E, sizeof(double));
    s->bias_counts = calloc(nm * (size_t)E, sizeof(double));
    s->lines = calloc((size_t)(s->nmoe + 1) * ((size_t)E * 10 + 64), 1);
    s->metrics = calloc((size_t)(s->nmoe + 1) * ((size_t)E * 24 + 64), 1);
    if (!s->ptrs || !s->aux || !s->load || !s->bias_counts || !s->lines || !s->metrics)
        return loom_fail(LOOM_ERR_OOM, "out of memory for the MoE layers");
    s->z = s->aux + nm;
    s->micro = s->aux + 2 * nm;
    for (int64_t l = 0; l < L; l++) {
        if (s->local_index[l] < 0) continue;
        float **slots = s->ptrs + 8 * E * s->local_index[l];
        expert_ptrs(m, l, m->base.param_mem, &s->w[l], slots);
        expert_ptrs(m, l, m->base.grad_mem, &s->g[l], slots + 4 * E);
    }
    return loom_moe_create(&s->layer, &c->moe, m->base.be, m->base.B, c->seq_length, c->hidden,
                           c->swiglu, c->gelu, c->bias, s->nlocal * m->base.nslots,
                           m->base.par->group[LOOM_PDIM_TP]);
}

void loom_gpt_moe_free(struct loom_gpt *m) {
    struct loom_gpt_moe *s = m->moe;
    if (!s) return;
    loom_moe_free(s->layer);
    free(s->is_moe);
    free(s->local_index);
    free(s->global_index);
    free(s->w);
    free(s->g);
    free(s->ptrs);
    free(s->aux);
    free(s->load);
    free(s->bias_counts);
    free(s->lines);
    free(s->metrics);
    free(s);
    m->moe = NULL;
}

static int64_t act_of(const struct loom_gpt *m, int slot, int64_t l) {
    return m->moe->local_index[l] * m->base.nslots + slot;
}

enum loom_status loom_gpt_moe_forward(struct loom_gpt *m, int slot, int64_t l, float *y,
                                      const float *x, int training) {
    struct loom_gpt_moe *s = m->moe;
    const int64_t a = act_of(m, slot, l);
    LOOM_CHECK(loom_moe_forward(s->layer, a, y, x, &s->w[l]));
    if (!training) return LOOM_OK;
    const struct loom_moe_route *r = loom_moe_route_of(s->layer, a);
    const int64_t k = s->global_index[l], E = s->E;
    s->aux[k] += r->aux;
    s->z[k] += r->z;
    s->micro[k] += 1;
    for (int64_t e = 0; e < E; e++) s->load[k * E + e] += (double)r->count[e];
    for (int64_t n = 0; n < r->N * r->K; n++)
        if (r->kept[n]) s->bias_counts[k * E + r->expert[n]] += 1;
    return LOOM_OK;
}

enum loom_status loom_gpt_moe_backward(struct loom_gpt *m, int slot, int64_t l, float *dx,
                                       const float *dy, const float *x, double scale) {
    struct loom_gpt_moe *s = m->moe;
    return loom_moe_backward(s->layer, act_of(m, slot, l), dx, dy, x, &s->w[l], &s->g[l], scale);
}

/* sum v[n] over the pipeline and data-parallel groups */
static enum loom_status sum_over(struct loom_parallel *par, double *v, int64_t n, int pp) {
    if (pp && loom_pp_size(par) > 1)
        LOOM_CHECK(loom_comm_allreduce(par->group[LOOM_PDIM_PP], v, n, LOOM_DTYPE_F64,
                                       LOOM_REDOP_SUM));
    if (loom_dp_size(par) > 1)
        LOOM_CHECK(loom_comm_allreduce(par->group[LOOM_PDIM_DP], v, n, LOOM_DTYPE_F64,
                                       LOOM_REDOP_SUM));
    return LOOM_OK;
}

enum loom_status loom_gpt_moe_step_end(struct loom_model *mm, int report,
                                       struct loom_step_report *rep) {
    struct loom_gpt *m = loom_gpt_of(mm);
    struct loom_gpt_moe *s = m->moe;
    memset(rep, 0, sizeof *rep);
    if (!s) return LOOM_OK;
    const struct loom_moe_config *c = &m->cfg.moe;
    const int64_t E = s->E, L = m->cfg.num_layers;
    struct loom_backend *be = m->base.be;
    if (c->expert_bias) { /* counts over the data-parallel ranks, then each local layer's step */
        LOOM_CHECK(sum_over(m->base.par, s->bias_counts, s->nmoe * E, 0));
        float *hb = malloc((size_t)E * sizeof(float));
        if (!hb) return loom_fail(LOOM_ERR_OOM, "out of memory updating the expert bias");
        for (int64_t l = 0; l < L; l++) {
            if (s->local_index[l] < 0) continue;
            float *b = m->w.layers[l].expert_bias;
            be->ops->to_host(be, hb, b, (size_t)E * sizeof(float));
            loom_moe_bias_update(hb, s->bias_counts + s->global_index[l] * E, E, c->bias_rate);
            be->ops->to_device(be, b, hb, (size_t)E * sizeof(float));
        }
        free(hb);
    }
    memset(s->bias_counts, 0, (size_t)(s->nmoe * E) * sizeof(double));
    if (!report) return LOOM_OK;
    LOOM_CHECK(sum_over(m->base.par, s->aux, 3 * s->nmoe, 1));
    LOOM_CHECK(sum_over(m->base.par, s->load, s->nmoe * E, 1));
    double aux = 0, z = 0;
    int64_t layers = 0;
    for (int64_t k = 0; k < s->nmoe; k++)
        if (s->micro[k] > 0) {
            aux += s->aux[k] / s->micro[k];
            z += s->z[k] / s->micro[k];
            layers++;
        }
    if (layers > 0 && c->balance != LOOM_MOE_BALANCE_NONE) {
        rep->names[rep->n] = "load_balancing_loss";
        rep->values[rep->n++] = aux / (double)layers;
    }
    if (layers > 0 && c->z_coeff > 0) {
        rep->names[rep->n] = "z_loss";
        rep->values[rep->n++] = z / (double)layers;
    }
    /* the expert load: a line per MoE layer, and "expert_load": [[...], ...] */
    char *ln = s->lines, *mt = s->metrics;
    ln[0] = mt[0] = 0;
    mt += sprintf(mt, "\"expert_load\": [");
    for (int64_t l = 0, k = 0; l < L && layers > 0; l++) {
        if (s->global_index[l] < 0) continue;
        double total = 0;
        for (int64_t e = 0; e < E; e++) total += s->load[k * E + e];
        ln += sprintf(ln, "%s expert load layer %lld:", k ? "\n" : "", (long long)l);
        mt += sprintf(mt, "%s[", k ? ", " : "");
        for (int64_t e = 0; e < E; e++) {
            const double share = total > 0 ? s->load[k * E + e] / total : 0;
            ln += sprintf(ln, " %.3f", share);
            mt += sprintf(mt, "%s%.6g", e ? ", " : "", share);
        }
        mt += sprintf(mt, "]");
        k++;
    }
    sprintf(mt, "]");
    rep->lines = layers > 0 ? s->lines : NULL;
    rep->metrics = layers > 0 ? s->metrics : NULL;
    memset(s->aux, 0, (size_t)(3 * s->nmoe) * sizeof(double));
    memset(s->load, 0, (size_t)(s->nmoe * E) * sizeof(double));
    return LOOM_OK;
}
