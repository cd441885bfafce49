/* A model that does not fit: creating it is an error (LOOM_ERR_OOM, the message naming what did
 * not fit), *out untouched, and everything made before the failure freed (built with
 * -fsanitize=address, LeakSanitizer reports any block left behind at exit).
 *
 * The CPU backend refuses an allocation beyond the memory available when it was made, so:
 *   - a micro-batch of 2^36 samples: the parameters fit, the activations do not (GPT-2-style, and
 *     Llama-style with query-key norms and zero-centred norm weights, whose norm weights' copy is
 *     made before the activations; one and two micro-batch slots);
 *   - a vocabulary of 2^29 tokens on a hidden size of 1024 (within the configuration's limits,
 *     2 TiB of parameters): the parameters do not fit;
 *   - BERT through its family's create, whose stack fails first.
 * A model that fits is then made and freed on the same backend. */
#include <stdio.h>
#include <string.h>

#include "loom/backend.h"
#include "loom/bert.h"
#include "loom/gpt.h"

static int g_pass, g_fail;

static void expect(const char *what, int ok) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    ok ? g_pass++ : g_fail++;
}

static void small(struct loom_transformer_config *c, int llama) {
    loom_gpt_config_default(c);
    c->num_layers = 2;
    c->hidden = 32;
    c->heads = 4;
    c->seq_length = 16;
    c->vocab_size = 97;
    if (llama) {
        c->query_groups = 2;
        c->norm = LOOM_NORM_RMSNORM;
        c->swiglu = 1;
        c->ffn_hidden = 48;
        c->posemb = LOOM_POSEMB_ROPE;
        c->bias = 0;
        c->untie = 1;
        c->qk_layernorm = 1;
        c->layernorm_1p = 1;
    }
}

/* loom_gpt_create of c fails with LOOM_ERR_OOM, naming `what` */
static void refused(const char *name, struct loom_transformer_config *c, struct loom_parallel *par,
                    struct loom_backend *be, int64_t B, int nslots, const char *what) {
    char line[160];
    struct loom_gpt *m = NULL;
    if (loom_gpt_config_finalize(c, 1, 1) != LOOM_OK) {
        loom_print_error();
        expect(name, 0);
        return;
    }
    enum loom_status s = loom_gpt_create(&m, c, par, be, B, nslots);
    const char *msg = loom_last_error();
    snprintf(line, sizeof line, "%s: LOOM_ERR_OOM (%s), *out untouched", name,
             msg ? msg : "no message");
    expect(line, s == LOOM_ERR_OOM && m == NULL && msg && strstr(msg, what));
    loom_clear_error();
}

int main(void) {
    struct loom_parallel par;
    struct loom_backend *be;
    if (loom_parallel_init_single(&par) || loom_backend_cpu_create(&be)) {
        loom_print_error();
        return 1;
    }
    const int64_t huge_batch = (int64_t)1 << 36;
    struct loom_transformer_config c;
    small(&c, 0);
    refused("gpt, activations", &c, &par, be, huge_batch, 1, "activations");
    small(&c, 1);
    refused("llama with qk norms and 1p, activations", &c, &par, be, huge_batch, 1, "activations");
    small(&c, 1);
    refused("llama, two slots, activations", &c, &par, be, huge_batch, 2, "activations");
    small(&c, 0);
    c.vocab_size = (int64_t)1 << 29; /* 2^29 x 1024: 5.5e11 parameters, 2 TiB, within the limits */
    c.hidden = 1024;
    c.heads = 8;
    refused("gpt, parameters", &c, &par, be, 2, 1, "parameters");

    /* BERT: the family's create */
    struct loom_transformer_config bc;
    small(&bc, 0);
    bc.encoder = 1;
    bc.num_tokentypes = 2;
    bc.lm_head_transform = bc.output_bias = bc.binary_head = 1;
    struct loom_model *bm = NULL;
    enum loom_status s = loom_gpt_config_finalize(&bc, 1, 1);
    if (s == LOOM_OK) s = loom_bert_family.create(&bm, &bc, &par, be, huge_batch, 1);
    expect("bert's create: LOOM_ERR_OOM, *out untouched", s == LOOM_ERR_OOM && bm == NULL);
    loom_clear_error();

    /* the backend still makes a model that fits */
    struct loom_gpt *m = NULL;
    small(&c, 1);
    s = loom_gpt_config_finalize(&c, 1, 1);
    if (s == LOOM_OK) s = loom_gpt_create(&m, &c, &par, be, 2, 2);
    if (s == LOOM_OK) s = loom_gpt_init_weights(m, 5);
    if (s != LOOM_OK) loom_print_error();
    expect("a model that fits is made after the failures", s == LOOM_OK && m != NULL);
    loom_gpt_free(m);

    loom_backend_destroy(be);
    loom_parallel_free(&par);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
