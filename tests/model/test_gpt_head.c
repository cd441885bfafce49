/* The GPT head without tensor parallelism: the output layer and the loss run fused, in chunks of
 * rows, and the head forward already makes d(final norm output) and the output weight's
 * gradient when training.
 *
 * On a small model (GPT-2-style with tied embeddings, and Llama-style untied), B = 2, T = 12,
 * some targets ignored:
 *   - after a training forward in chunks of 5 rows, the loss, the token count, d(lnf) and the
 *     output weight's gradient equal the unfused ops applied to the final norm's output
 *     (linear_forward, xent_forward, the loss formed from the statistics, xent_backward,
 *     linear_backward), within 1e-5;
 *   - forward and backward in chunks of 5 rows give the loss and every gradient of one chunk
 *     holding all rows, within 1e-5;
 *   - an evaluation forward (training 0) gives the same loss and leaves every gradient zero. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/gpt.h"
#include "models/gpt/gpt_internal.h"

static int g_pass, g_fail;

static void check(const char *what, double err, double tol) {
    int ok = err <= tol; /* false for NaN */
    printf("%s %-66s err %.3g (tol %.3g)\n", ok ? "ok  " : "FAIL", what, err, tol);
    ok ? g_pass++ : g_fail++;
}

/* max_i |a_i - b_i| / max_i |b_i| */
static double norm_err(const float *a, const float *b, int64_t n) {
    double mx = 0.0, e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs((double)b[i]) > mx) mx = fabs((double)b[i]);
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e)) e = d;
    }
    return mx > 0.0 ? e / mx : e;
}

static float *copy_of(const float *x, int64_t n) {
    float *p = malloc((size_t)n * sizeof *p);
    if (!p) exit(2);
    memcpy(p, x, (size_t)n * sizeof *p);
    return p;
}

static void run(const char *arch, int llama) {
    struct loom_transformer_config c;
    loom_gpt_config_default(&c);
    c.num_layers = 2;
    c.hidden = 32;
    c.heads = 4;
    c.seq_length = 12;
    c.vocab_size = 77; /* padded to 128: 51 padded columns */
    c.hidden_dropout = c.attention_dropout = 0;
    c.init_std = 0.3; /* logits spread over several units */
    if (llama) {
        c.query_groups = 2;
        c.norm = LOOM_NORM_RMSNORM;
        c.swiglu = 1;
        c.ffn_hidden = 48;
        c.posemb = LOOM_POSEMB_ROPE;
        c.bias = 0;
        c.untie = 1;
    }
    const int64_t B = 2, T = c.seq_length, N = B * T;
    struct loom_parallel par;
    struct loom_backend *be;
    struct loom_gpt *m;
    if (loom_gpt_config_finalize(&c, 1, 1) || loom_parallel_init_single(&par) ||
        loom_backend_cpu_create(&be) || loom_gpt_create(&m, &c, &par, be, B, 1) ||
        loom_gpt_init_weights(m, 11)) {
        loom_print_error();
        exit(1);
    }
    const int64_t C = c.hidden, Vp = c.padded_vocab, V = c.vocab_size, P = m->base.num_local;
    int32_t tokens[24], targets[24];
    for (int64_t i = 0; i < N; i++) {
        tokens[i] = (int32_t)((i * 31 + 7) % V);
        targets[i] = i % 7 == 4 ? -1 : (int32_t)((i * 17 + 3) % V);
    }
    struct loom_step_ctx ctx = {.seed = 1, .iteration = 1, .training = 1, .dloss = 1.0f / 21.0f};
    struct loom_gpt_acts *a = &m->acts[0];
    const int64_t chunk_rows = a->xent_bytes / (Vp * (int64_t)sizeof(float)); /* fp32 logits */
    printf("-- %s: N %lld, C %lld, V %lld padded to %lld, one chunk holds %lld rows\n", arch,
           (long long)N, (long long)C, (long long)V, (long long)Vp, (long long)chunk_rows);
    if (chunk_rows < N) {
        printf("FAIL the default chunk should hold the %lld rows of this small model\n", (long long)N);
        g_fail++;
    }
    double loss1, loss5, loss_eval;
    int64_t count1, count5, count_eval;

    /* one chunk: forward and backward */
    be->ops->zero(be, m->base.grad_mem, (size_t)P * sizeof(float));
    if (loom_gpt_forward(m, tokens, targets, &ctx, &loss1, &count1) || loom_gpt_backward(m, &ctx)) {
        loom_print_error();
        exit(1);
    }
    float *grads1 = copy_of(m->base.grad_mem, P);
    if (c.bias) { /* the key bias only shifts a softmax row: its gradient is set to exactly 0 */
        const int64_t HS = C / c.heads, G = c.heads / c.query_groups;
        double kmax = 0.0, qvmax = 0.0;
        for (int64_t l = 0; l < c.num_layers; l++) {
            char name[96];
            snprintf(name, sizeof name, "decoder.layers.%lld.self_attention.linear_qkv.bias",
                     (long long)l);
            const struct loom_param *qb = loom_model_find_param(&m->base, name);
            const float *g = m->base.grad_mem + qb->offset;
            for (int64_t i = 0; i < qb->shape[0]; i++) {
                const int64_t slot = (i / HS) % (G + 2); /* [G query heads | k | v] per group */
                if (slot == G)
                    kmax = fmax(kmax, fabs((double)g[i]));
                else
                    qvmax = fmax(qvmax, fabs((double)g[i]));
            }
        }
        check("key-bias gradient exactly 0 (largest magnitude)", kmax, 0);
        check("query/value-bias gradients not all 0 (1 if they are)", qvmax > 0 ? 0 : 1, 0);
    }

    /* chunks of 5 rows (5, 5, 5, 5, 4): the head forward alone, against the unfused ops */
    a->xent_bytes = 5 * Vp * (int64_t)sizeof(float);
    be->ops->zero(be, m->base.grad_mem, (size_t)P * sizeof(float));
    if (loom_gpt_forward(m, tokens, targets, &ctx, &loss5, &count5)) {
        loom_print_error();
        exit(1);
    }
    float *logits = malloc((size_t)(N * Vp) * sizeof *logits), *st = malloc((size_t)N * 3 * sizeof *st);
    float *gs = malloc((size_t)N * 2 * sizeof *gs), *dl = malloc((size_t)N * sizeof *dl);
    float *dlnf = malloc((size_t)(N * C) * sizeof *dlnf), *dw = calloc((size_t)(Vp * C), sizeof *dw);
    if (!logits || !st || !gs || !dl || !dlnf || !dw) exit(2);
    loom_op(be, linear_forward, logits, a->lnf, m->w.out_w, NULL, N, C, Vp);
    loom_op(be, xent_forward, st, logits, targets, N, Vp, 0, V);
    double loss_ref = 0.0;
    int64_t count_ref = 0;
    for (int64_t n = 0; n < N; n++) {
        gs[2 * n] = st[3 * n];
        gs[2 * n + 1] = st[3 * n + 1];
        dl[n] = targets[n] < 0 ? 0.0f : ctx.dloss;
        if (targets[n] < 0) continue;
        loss_ref += (double)logf(st[3 * n + 1]) + (double)st[3 * n] - (double)st[3 * n + 2];
        count_ref++;
    }
    loom_op(be, xent_backward, logits, logits, targets, gs, dl, N, Vp, 0, V);
    loom_op(be, linear_backward, dlnf, dw, NULL, logits, a->lnf, m->w.out_w, N, C, Vp);
    check("chunks of 5: loss sum == unfused ops", fabs(loss5 - loss_ref) / fabs(loss_ref), 1e-5);
    check("chunks of 5: token count == unfused ops", (double)llabs(count5 - count_ref), 0);
    check("chunks of 5: d(lnf) made by the head forward == unfused ops", norm_err(a->dlnf, dlnf, N * C),
          1e-5);
    check("chunks of 5: output weight gradient after the forward == unfused ops",
          norm_err(m->g.out_w, dw, Vp * C), 1e-5);

    /* ... and after the backward, every gradient as with one chunk */
    if (loom_gpt_backward(m, &ctx)) {
        loom_print_error();
        exit(1);
    }
    check("chunks of 5 vs one chunk: loss", fabs(loss5 - loss1) / fabs(loss1), 1e-6);
    check("chunks of 5 vs one chunk: token count", (double)llabs(count5 - count1), 0);
    check("chunks of 5 vs one chunk: every gradient", norm_err(m->base.grad_mem, grads1, P), 1e-5);

    /* evaluation: the loss only */
    ctx.training = 0;
    be->ops->zero(be, m->base.grad_mem, (size_t)P * sizeof(float));
    if (loom_gpt_forward(m, tokens, targets, &ctx, &loss_eval, &count_eval)) {
        loom_print_error();
        exit(1);
    }
    check("evaluation forward: the training forward's loss", fabs(loss_eval - loss5) / fabs(loss5), 0);
    double gmax = 0.0;
    for (int64_t i = 0; i < P; i++) gmax = fmax(gmax, fabs((double)m->base.grad_mem[i]));
    check("evaluation forward: every gradient stays 0 (largest magnitude)", gmax, 0);

    free(grads1), free(logits), free(st), free(gs), free(dl), free(dlnf), free(dw);
    loom_gpt_free(m);
    loom_backend_destroy(be);
    loom_parallel_free(&par);
}

int main(void) {
    run("gpt2-style (LayerNorm, tied output layer)", 0);
    run("llama-style (RMSNorm, SwiGLU, rope, untied output layer)", 1);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}
