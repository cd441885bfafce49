/* Incremental decoding with the key/value cache gives the same next-token logits, position by
 * position, as the full causal forward pass over the whole sequence (GPT-2-style and
 * Llama-style configurations, and a GPT-2-style one with zero-centred norm weights w set away
 * from 0, whose norms both passes must scale by 1 + w; with query-key norms, --qk-layernorm:
 * Llama-style with RMSNorm, GPT-2-style with LayerNorm and zero-centred weights, their weights and
 * biases set away from their initial 1 (or 0) and 0; and both styles with a head size other than
 * hidden / heads, Megatron-LM's --kv-channels: 20 and 16 on hidden 48 with 4 heads). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/gpt.h"
#include "models/gpt/gpt_internal.h"

static int check(const char *what, int llama, int ln1p, int qk, int64_t head_size) {
    struct loom_transformer_config c;
    loom_gpt_config_default(&c);
    c.num_layers = 2;
    c.hidden = 48;
    c.heads = 4;
    c.seq_length = 12;
    c.vocab_size = 77;
    c.hidden_dropout = c.attention_dropout = 0;
    c.layernorm_1p = ln1p;
    c.qk_layernorm = qk;
    c.head_size = head_size;
    if (llama) {
        c.query_groups = 2;
        c.norm = LOOM_NORM_RMSNORM;
        c.swiglu = 1;
        c.ffn_hidden = 80;
        c.posemb = LOOM_POSEMB_ROPE;
        c.bias = 0;
        c.untie = 1;
    }
    struct loom_parallel par;
    struct loom_backend *be;
    struct loom_gpt *m;
    struct loom_gpt_decoder *d;
    if (loom_gpt_config_finalize(&c, 1, 1) || loom_parallel_init_single(&par) ||
        loom_backend_cpu_create(&be) || loom_gpt_create(&m, &c, &par, be, 1, 1) ||
        loom_gpt_init_weights(m, 5)) {
        loom_print_error();
        return 1;
    }
    /* norm weights away from their start (1 + w is not w, nor 1), and with query-key norms every
     * norm's bias away from 0 */
    for (int i = 0; (ln1p || qk) && i < m->base.nparams; i++) {
        const struct loom_param *p = &m->base.params[i];
        const size_t nl = strlen(p->name);
        const int weight = nl >= 16 && !strcmp(p->name + nl - 16, "layernorm.weight");
        const int bias = qk && nl >= 14 && !strcmp(p->name + nl - 14, "layernorm.bias");
        if (!weight && !bias) continue;
        float *w = m->base.param_mem + p->offset;
        for (int64_t k = 0; k < p->shape[0]; k++)
            w[k] =
                (weight && !ln1p ? 1.0f : 0.0f) + (weight ? 0.3f : 0.1f) * sinf((float)(k + 3 * i));
    }
    if (loom_gpt_decoder_create(&d, m, c.seq_length)) {
        loom_print_error();
        return 1;
    }
    int64_t T = c.seq_length, V = c.vocab_size, Vp = c.padded_vocab;
    int32_t tokens[12], targets[12];
    for (int64_t t = 0; t < T; t++) {
        tokens[t] = (int32_t)((t * 31 + 7) % V);
        targets[t] = (int32_t)((t * 17 + 3) % V);
    }
    struct loom_step_ctx ctx = {.seed = 1, .iteration = 1, .training = 0, .dloss = 1.0f};
    double loss;
    int64_t count;
    if (loom_gpt_forward(m, tokens, targets, &ctx, &loss, &count)) {
        loom_print_error();
        return 1;
    }
    /* the full pass's logits, from the final norm's output it leaves (the head itself keeps
     * no logits beyond a chunk) */
    float *full = malloc((size_t)(T * Vp) * sizeof(float)); /* [T, Vp] on the cpu */
    loom_op(be, linear_forward, full, m->acts[0].lnf, m->w.out_w, NULL, T, c.hidden, Vp);
    float *step = malloc((size_t)V * sizeof(float));
    double worst = 0;
    for (int64_t t = 0; t < T; t++) {
        if (loom_gpt_decoder_step(d, tokens[t], step)) {
            loom_print_error();
            return 1;
        }
        for (int64_t v = 0; v < V; v++) {
            double e = fabs((double)step[v] - full[t * Vp + v]) / (fabs(full[t * Vp + v]) + 1e-3);
            if (e > worst) worst = e;
        }
    }
    int ok = worst < 1e-4;
    printf("%s %s: worst relative difference of cached-decode logits vs full forward over %lld "
           "positions: %.3e\n", ok ? "ok  " : "FAIL", what, (long long)T, worst);
    free(step);
    free(full);
    loom_gpt_decoder_free(d);
    loom_gpt_free(m);
    loom_backend_destroy(be);
    loom_parallel_free(&par);
    return !ok;
}

int main(void) {
    int fails = check("gpt2-style", 0, 0, 0, 0) +
                check("llama-style (rope, GQA, SwiGLU, RMSNorm)", 1, 0, 0, 0) +
                check("gpt2-style, zero-centred norm weights (--apply-layernorm-1p)", 0, 1, 0, 0) +
                check("llama-style, query-key norms (--qk-layernorm)", 1, 0, 1, 0) +
                check("gpt2-style, query-key LayerNorms, zero-centred weights", 0, 1, 1, 0) +
                check("llama-style, head size 20 (--kv-channels; hidden 48, 4 heads)", 1, 0, 0, 20) +
                check("gpt2-style, head size 16 (--kv-channels; hidden 48, 4 heads)", 0, 0, 0, 16);
    printf("%d passed, %d failed\n", 7 - fails, fails);
    return fails != 0;
}
