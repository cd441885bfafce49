/* The BERT family's model on one rank (CPU, fp32): every parameter's gradient from the family's
 * pieces (micro_begin, first_forward, the layers, last_forward with its lm and sop losses, and
 * the backwards) against central finite differences of the loss lm + sop, on a small model
 * (2 layers, hidden 16, 4 heads, vocabulary 23 padded to 32) and a micro-batch of 3 samples of
 * 10 positions with padding (lengths 10, 7, 4), token types, labels at some positions and sop
 * labels of both kinds. Also: changing a padded position's token id changes neither loss (the
 * padding mask), and with the sop labels flipped the sop loss changes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "loom/backend.h"
#include "loom/bert.h"

enum { B = 3, T = 10, N = B * T };

static struct loom_model *m;
static int32_t tokens[N], labels[N], types[N], pad[N], sop[B];

/* lm loss and sop loss of the micro-batch; with grad, the backward too */
static void run(double *lm, double *sopl, int grad) {
    struct loom_micro mb = {B, T, tokens, labels, types, pad, sop, 0};
    struct loom_step_ctx ctx = {.seed = 1, .iteration = 1, .training = grad, .dloss = 1.0f,
                                .per_micro_mean = 1};
    const struct loom_family *f = m->family;
    struct loom_losses l;
    memset(&l, 0, sizeof l);
    f->prepare(m);
    EXPECT_OK(f->micro_begin(m, 0, &mb, &ctx));
    EXPECT_OK(f->first_forward(m, 0, &mb, &ctx));
    for (int64_t k = 0; k < m->num_layers; k++) EXPECT_OK(f->layer_forward(m, 0, k, &ctx));
    EXPECT_OK(f->last_forward(m, 0, &mb, &ctx, &l));
    *lm = l.sum[0];
    *sopl = l.sum[1];
    if (!grad) return;
    EXPECT_OK(f->last_backward(m, 0, &mb, &ctx));
    for (int64_t k = m->num_layers - 1; k >= 0; k--) EXPECT_OK(f->layer_backward(m, 0, k, &ctx));
    EXPECT_OK(f->first_backward(m, 0, &ctx));
}

int main(void) {
    struct loom_transformer_config c;
    loom_gpt_config_default(&c);
    c.num_layers = 2;
    c.hidden = 16;
    c.heads = 4;
    c.seq_length = T;
    c.vocab_size = 23;
    c.divisible_by = 32;
    c.hidden_dropout = c.attention_dropout = 0;
    c.init_std = 0.4;
    c.encoder = 1;
    c.num_tokentypes = 2;
    c.lm_head_transform = c.output_bias = c.binary_head = 1;
    c.head_gelu = LOOM_GELU_ERF;
    struct loom_parallel par;
    struct loom_backend *be;
    if (loom_gpt_config_finalize(&c, 1, 1) || loom_parallel_init_single(&par) ||
        loom_backend_cpu_create(&be) || loom_bert_family.create(&m, &c, &par, be, B, 1) ||
        m->family->init_weights(m, 5)) {
        loom_print_error();
        return 1;
    }
    /* biases and norm weights away from 0 and 1, so a wrong wiring of one shows */
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (p->ndim != 1) continue;
        for (int64_t k = 0; k < p->shape[0]; k++)
            m->param_mem[p->offset + k] += 0.3f * sinf((float)(k * 7 + i));
    }
    const int lens[B] = {10, 7, 4};
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int i = b * T + t, real = t < lens[b];
            tokens[i] = real ? (t == 0 ? 1 : 4 + (i * 5 + 3) % 19) : 0;
            pad[i] = real;
            types[i] = real && t >= lens[b] / 2;
            labels[i] = real && t > 0 && (t + b) % 3 == 0 ? (i * 7) % 23 : -1;
        }
    sop[0] = 1;
    sop[1] = 0;
    sop[2] = 1;

    const int64_t P = m->num_local;
    memset(m->grad_mem, 0, (size_t)P * sizeof(float));
    double lm, so;
    run(&lm, &so, 1);
    printf("lm loss %.6f, sop loss %.6f\n", lm, so);
    EXPECT(lm > 0 && so > 0);
    float *grad = malloc((size_t)P * sizeof(float));
    memcpy(grad, m->grad_mem, (size_t)P * sizeof(float));

    /* every parameter: a few elements each, central differences in fp32 (eps 1e-2) */
    int bad = 0, checked = 0;
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        const int64_t n = p->local_shape[0] * p->local_shape[1];
        double worst = 0;
        for (int k = 0; k < 4; k++) {
            int64_t e = (int64_t)((k * 2654435761u + (unsigned)i * 97u) % (uint64_t)n);
            if (p->roles & LOOM_ROLE_VOCAB_ROWS) { /* a real vocabulary row */
                const int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
                e = ((e / cols) % 23) * cols + e % cols;
            }
            float *w = &m->param_mem[p->offset + e];
            const float keep = *w, h = 1e-2f;
            double l1, s1, l2, s2;
            *w = keep + h;
            run(&l1, &s1, 0);
            *w = keep - h;
            run(&l2, &s2, 0);
            *w = keep;
            const double fd = ((l1 + s1) - (l2 + s2)) / (2.0 * h), g = grad[p->offset + e];
            const double err = fabs(fd - g) / fmax(1e-2, fmax(fabs(fd), fabs(g)));
            if (err > worst) worst = err;
            checked++;
        }
        if (worst > 2e-2) {
            printf("FAIL %-50s gradient vs finite differences: relative %.3g\n", p->name, worst);
            bad++;
        }
    }
    printf("%d parameters, %d elements checked, %d parameters off\n", m->nparams, checked, bad);
    EXPECT(bad == 0);

    /* the padding mask: a padded position's token changes nothing */
    double lm2, so2;
    tokens[2 * T + 8] = 17;
    run(&lm2, &so2, 0);
    EXPECTF(lm2 == lm && so2 == so, "a padded token changed the losses: %.9g %.9g\n", lm2, so2);
    tokens[2 * T + 8] = 0;
    sop[1] = 1;
    run(&lm2, &so2, 0);
    EXPECTF(lm2 == lm && so2 != so, "flipping a sop label: lm %.9g sop %.9g\n", lm2, so2);
    free(grad);
    loom_model_free(m);
    loom_backend_destroy(be);
    loom_parallel_free(&par);
    return expect_finish("test_bert_grad");
}
