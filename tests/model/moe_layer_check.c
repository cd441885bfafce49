/* One MoE layer on the cpu backend, for tests/ref/moe_ref.py: moe_layer_check IN OUT.
 *
 * IN (safetensors, F32): x [N, C] and dy [N, C]; router.weight [E, C], router.expert_bias [E]
 * (with expert_bias), experts.{e}.fc1 [F1, C], experts.{e}.fc2 [C, F], shared.fc1, shared.fc2,
 * shared.gate [1, C] (with shared experts / their gate); bias_x.{s} [N, C] for the bias steps.
 * Its metadata gives the configuration: B, T, swiglu, scale (the weight of the balancing and
 * z-loss gradients), bias_steps, and the MoE settings under loom/moe.h's field names
 * (num_experts, topk, ffn_hidden, pre_softmax, score "softmax|sigmoid", topk_scaling,
 * num_groups, group_topk, router_dtype "fp32|fp64", balance "aux_loss|seq_aux_loss|none",
 * aux_coeff, z_coeff,
 * expert_bias, capacity_factor, drop_policy "probs|position", pad_to_capacity, shared_ffn,
 * shared_gate).
 * OUT: y, dx, expert [N, K], kept [N, K], prob [N, K], aux [1], z [1], the gradients as
 * grad.<name>, and after bias_steps routings of bias_x.{s} each followed by the expert bias
 * update, bias_final [E]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/moe.h"
#include "loom/safetensors.h"

#define CK(x)                                                                                      \
    do {                                                                                           \
        if ((x) != LOOM_OK) {                                                                      \
            fprintf(stderr, "moe_layer_check: %s\n", loom_last_error());                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const struct loom_safetensors *g_in;
static double meta_num(const char *key, double dflt) {
    const char *v = loom_safetensors_metadata_get(g_in, key);
    return v ? atof(v) : dflt;
}
static int meta_is(const char *key, const char *value) {
    const char *v = loom_safetensors_metadata_get(g_in, key);
    return v && !strcmp(v, value);
}

static struct loom_backend *g_be;
static struct loom_safetensors_writer *g_out;

/* a device tensor of n floats from IN's `name` (NULL when absent and !need), and its gradient
 * (zeroed device memory) in *grad */
static float *load(const char *name, int64_t n, int need, float **grad) {
    if (!loom_safetensors_find(g_in, name)) {
        if (need) {
            fprintf(stderr, "moe_layer_check: no tensor %s\n", name);
            exit(1);
        }
        if (grad) *grad = NULL;
        return NULL;
    }
    float *h = malloc((size_t)n * sizeof(float));
    CK(loom_safetensors_read_f32(g_in, name, h, n));
    float *d = g_be->ops->malloc(g_be, (size_t)n * sizeof(float));
    g_be->ops->to_device(g_be, d, h, (size_t)n * sizeof(float));
    free(h);
    if (grad) {
        *grad = g_be->ops->malloc(g_be, (size_t)n * sizeof(float));
        g_be->ops->zero(g_be, *grad, (size_t)n * sizeof(float));
    }
    return d;
}

/* add device tensor d of shape [d0, d1] to OUT as `name` (host copy kept until the save) */
static void out_dev(const char *name, const float *d, int64_t d0, int64_t d1) {
    if (!d) return;
    float *h = malloc((size_t)(d0 * d1) * sizeof(float));
    g_be->ops->to_host(g_be, h, d, (size_t)(d0 * d1) * sizeof(float));
    const int64_t shape[2] = {d0, d1};
    CK(loom_safetensors_writer_add(g_out, strdup(name), LOOM_DTYPE_F32, 2, shape, h));
}
static void out_host(const char *name, const float *h, int64_t d0, int64_t d1) {
    const int64_t shape[2] = {d0, d1};
    CK(loom_safetensors_writer_add(g_out, strdup(name), LOOM_DTYPE_F32, 2, shape, h));
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: moe_layer_check IN.safetensors OUT.safetensors\n");
        return 2;
    }
    struct loom_safetensors *in;
    CK(loom_safetensors_open(&in, argv[1]));
    g_in = in;
    CK(loom_backend_cpu_create(&g_be));
    CK(loom_safetensors_writer_init(&g_out));
    struct loom_moe_config c = {0};
    const int64_t B = (int64_t)meta_num("B", 2), T = (int64_t)meta_num("T", 8), N = B * T;
    const int swiglu = (int)meta_num("swiglu", 0);
    c.num_experts = (int64_t)meta_num("num_experts", 4);
    snprintf(c.layer_freq, sizeof c.layer_freq, "1");
    c.topk = (int64_t)meta_num("topk", 2);
    c.ffn_hidden = (int64_t)meta_num("ffn_hidden", 8);
    c.pre_softmax = (int)meta_num("pre_softmax", 0);
    c.score = meta_is("score", "sigmoid") ? LOOM_MOE_SCORE_SIGMOID : LOOM_MOE_SCORE_SOFTMAX;
    c.topk_scaling = meta_num("topk_scaling", 0);
    c.num_groups = (int64_t)meta_num("num_groups", 0);
    c.group_topk = (int64_t)meta_num("group_topk", 0);
    c.balance = meta_is("balance", "seq_aux_loss") ? LOOM_MOE_SEQ_AUX_LOSS
                : meta_is("balance", "none")       ? LOOM_MOE_BALANCE_NONE
                                                   : LOOM_MOE_AUX_LOSS;
    c.aux_coeff = meta_num("aux_coeff", 0);
    c.z_coeff = meta_num("z_coeff", 0);
    c.expert_bias = (int)meta_num("expert_bias", 0);
    c.bias_rate = meta_num("bias_rate", 1e-3);
    c.capacity_factor = meta_num("capacity_factor", 0);
    c.drop_policy = meta_is("drop_policy", "position") ? LOOM_MOE_DROP_POSITION : LOOM_MOE_DROP_PROBS;
    c.pad_to_capacity = (int)meta_num("pad_to_capacity", 0);
    c.shared_ffn = (int64_t)meta_num("shared_ffn", 0);
    c.shared_gate = (int)meta_num("shared_gate", 0);
    c.router_dtype = meta_is("router_dtype", "fp64") ? LOOM_MOE_ROUTER_FP64 : LOOM_MOE_ROUTER_FP32;
    const double scale = meta_num("scale", 1);
    const int steps = (int)meta_num("bias_steps", 0);
    const struct loom_safetensors_entry *xe = loom_safetensors_find(in, "x");
    if (!xe) {
        fprintf(stderr, "moe_layer_check: no tensor x\n");
        return 1;
    }
    const int64_t C = xe->shape[1], E = c.num_experts, K = c.topk, F = c.ffn_hidden;
    const int64_t F1 = swiglu ? 2 * F : F, Fs = c.shared_ffn, F1s = swiglu ? 2 * Fs : Fs;
    CK(loom_moe_config_check(&c, 1, F, 1));

    struct loom_moe_weights w = {0}, g = {0};
    float *fc1[64], *fc2[64], *gfc1[64], *gfc2[64];
    if (E > 64) return 2;
    char name[96];
    w.router_w = load("router.weight", E * C, 1, &g.router_w);
    w.expert_bias = load("router.expert_bias", E, c.expert_bias, &g.expert_bias);
    for (int64_t e = 0; e < E; e++) {
        snprintf(name, sizeof name, "experts.%lld.fc1", (long long)e);
        fc1[e] = load(name, F1 * C, 1, &gfc1[e]);
        snprintf(name, sizeof name, "experts.%lld.fc2", (long long)e);
        fc2[e] = load(name, C * F, 1, &gfc2[e]);
    }
    w.fc1_w = fc1;
    w.fc2_w = fc2;
    g.fc1_w = gfc1;
    g.fc2_w = gfc2;
    if (Fs > 0) {
        w.sh_fc1_w = load("shared.fc1", F1s * C, 1, &g.sh_fc1_w);
        w.sh_fc2_w = load("shared.fc2", C * Fs, 1, &g.sh_fc2_w);
        w.sh_gate_w = load("shared.gate", C, c.shared_gate, &g.sh_gate_w);
    }
    float *x = load("x", N * C, 1, NULL), *dy = load("dy", N * C, 1, NULL);
    float *y = g_be->ops->malloc(g_be, (size_t)(N * C) * sizeof(float));
    float *dx = g_be->ops->malloc(g_be, (size_t)(N * C) * sizeof(float));

    struct loom_moe *moe;
    CK(loom_moe_create(&moe, &c, g_be, B, T, C, swiglu, LOOM_GELU_TANH, 0, 1, NULL));
    CK(loom_moe_forward(moe, 0, y, x, &w));
    CK(loom_moe_backward(moe, 0, dx, dy, x, &w, &g, scale));
    const struct loom_moe_route *r = loom_moe_route_of(moe, 0);
    float *expert = malloc((size_t)(N * K) * sizeof(float) * 3), *kept = expert + N * K,
          *prob = expert + 2 * N * K;
    for (int64_t n = 0; n < N * K; n++) {
        expert[n] = (float)r->expert[n];
        kept[n] = r->kept[n];
        prob[n] = (float)r->prob[n];
    }
    float losses[2] = {(float)r->aux, (float)r->z};
    out_dev("y", y, N, C);
    out_dev("dx", dx, N, C);
    out_host("expert", expert, N, K);
    out_host("kept", kept, N, K);
    out_host("prob", prob, N, K);
    out_host("aux", losses, 1, 1);
    out_host("z", losses + 1, 1, 1);
    out_dev("grad.router.weight", g.router_w, E, C);
    for (int64_t e = 0; e < E; e++) {
        snprintf(name, sizeof name, "grad.experts.%lld.fc1", (long long)e);
        out_dev(name, gfc1[e], F1, C);
        snprintf(name, sizeof name, "grad.experts.%lld.fc2", (long long)e);
        out_dev(name, gfc2[e], C, F);
    }
    out_dev("grad.shared.fc1", g.sh_fc1_w, F1s, C);
    out_dev("grad.shared.fc2", g.sh_fc2_w, C, Fs);
    out_dev("grad.shared.gate", g.sh_gate_w, 1, C);
    /* the aux-loss-free bias: route each step's tokens, count the kept pairs, update */
    if (steps > 0 && w.expert_bias) {
        float *hb = malloc((size_t)E * sizeof(float));
        double *cnt = malloc((size_t)E * sizeof(double));
        g_be->ops->to_host(g_be, hb, w.expert_bias, (size_t)E * sizeof(float));
        for (int s = 0; s < steps; s++) {
            snprintf(name, sizeof name, "bias_x.%d", s);
            float *xs = load(name, N * C, 1, NULL);
            CK(loom_moe_forward(moe, 0, y, xs, &w));
            memset(cnt, 0, (size_t)E * sizeof(double));
            for (int64_t n = 0; n < N * K; n++)
                if (r->kept[n]) cnt[r->expert[n]] += 1;
            loom_moe_bias_update(hb, cnt, E, c.bias_rate);
            g_be->ops->to_device(g_be, w.expert_bias, hb, (size_t)E * sizeof(float));
            g_be->ops->free(g_be, xs);
        }
        out_host("bias_final", hb, 1, E);
    }
    CK(loom_safetensors_writer_save(g_out, argv[2]));
    printf("moe_layer_check: %lld tokens, %lld experts, top-%lld, %lld rows\n", (long long)N,
           (long long)E, (long long)K, (long long)r->R);
    return 0;
}
