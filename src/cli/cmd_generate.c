/* `loom generate`: load a checkpoint, tokenize --prompt, sample --max-new-tokens tokens with a
 * key/value cache (one position's work per token), print the decoded text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "loom/args.h"
#include "loom/ckpt.h"
#include "loom/log.h"
#include "loom/model.h"
#include "loom/rng.h"
#include "loom/settings.h"
#include "loom/tokenizer.h"

struct sample_cfg {
    double temperature, top_p;
    int64_t top_k;
    int greedy;
    uint64_t seed;
};

struct cand {
    float logit;
    int32_t id;
};
static int by_logit_desc(const void *a, const void *b) {
    float x = ((const struct cand *)a)->logit, y = ((const struct cand *)b)->logit;
    if (x != y) return x < y ? 1 : -1;
    return ((const struct cand *)a)->id - ((const struct cand *)b)->id;
}

/* Pick the next token: greedy argmax, or softmax(logits / T) restricted to the top-k and then to
 * the smallest prefix holding top-p of the mass, sampled with the counter-based RNG. */
static int32_t pick(const float *logits, int64_t V, const struct sample_cfg *s, int64_t step,
                    struct cand *c) {
    if (s->greedy || s->temperature == 0) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return (int32_t)best;
    }
    for (int64_t i = 0; i < V; i++) {
        c[i].logit = (float)(logits[i] / s->temperature);
        c[i].id = (int32_t)i;
    }
    qsort(c, (size_t)V, sizeof *c, by_logit_desc);
    int64_t n = (s->top_k > 0 && s->top_k < V) ? s->top_k : V;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)(c[i].logit - c[0].logit));
    if (s->top_p > 0 && s->top_p < 1) {
        double acc = 0;
        int64_t keep = n;
        for (int64_t i = 0; i < n; i++) {
            acc += exp((double)(c[i].logit - c[0].logit)) / sum;
            if (acc >= s->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        sum = 0;
        for (int64_t i = 0; i < n; i++) sum += exp((double)(c[i].logit - c[0].logit));
    }
    double u = loom_rng_uniform(s->seed, loom_hash_str("generate"), (uint64_t)step) * sum, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += exp((double)(c[i].logit - c[0].logit));
        if (u <= acc) return c[i].id;
    }
    return c[n - 1].id;
}

int loom_cmd_generate(int argc, char **argv) {
    const char *load = NULL, *prompt = "", *device = "cpu", *tok_type = "GPT2BPETokenizer",
               *vocab_file = NULL, *merge_file = NULL, *tok_model = NULL, *tik_pattern = NULL;
    int64_t tok_vocab_size = 0, tik_specials = 1000;
    char tok_json[4200];
    int64_t max_new = 64, top_k = 0, seed = 1234;
    double temperature = 1.0, top_p = 0.0;
    int greedy = 0, stop_at_eod = 0;
    struct loom_flag flags[] = {
        {"--load", LOOM_FLAG_STR, &load, "checkpoint directory", NULL, 0},
        {"--prompt", LOOM_FLAG_STR, &prompt, "text to continue", NULL, 0},
        {"--max-new-tokens", LOOM_FLAG_INT, &max_new, "tokens to generate", NULL, 0},
        {"--temperature", LOOM_FLAG_FLOAT, &temperature, "softmax temperature (0 = greedy)", NULL, 0},
        {"--top-k", LOOM_FLAG_INT, &top_k, "sample among the k most likely tokens (0 = all)", NULL, 0},
        {"--top-p", LOOM_FLAG_FLOAT, &top_p, "nucleus sampling mass (0 = off)", NULL, 0},
        {"--greedy", LOOM_FLAG_BOOL, &greedy, "always take the most likely token", NULL, 0},
        {"--seed", LOOM_FLAG_INT, &seed, "sampling seed", NULL, 0},
        {"--stop-at-eod", LOOM_FLAG_BOOL, &stop_at_eod, "stop at the end-of-document token", NULL, 0},
        {"--tokenizer-type", LOOM_FLAG_CHOICE, &tok_type, "tokenizer (HuggingFaceTokenizer when --load holds a tokenizer.json and no tokenizer file is given)", LOOM_TOKENIZER_CHOICES, 0},
        {"--tokenizer-model", LOOM_FLAG_STR, &tok_model, "tokenizer.json (or its folder), tokenizer.model or tiktoken rank file", NULL, 0},
        {"--tiktoken-pattern", LOOM_FLAG_STR, &tik_pattern, "TikTokenizer: v1, v2, cl100k, o200k", NULL, 0},
        {"--tiktoken-num-special-tokens", LOOM_FLAG_INT, &tik_specials, "TikTokenizer: special tokens before the ranks", NULL, 0},
        {"--vocab-size", LOOM_FLAG_INT, &tok_vocab_size, "NullTokenizer: ids before the end-of-document one", NULL, 0},
        {"--vocab-file", LOOM_FLAG_STR, &vocab_file, "tokenizer vocabulary", NULL, 0},
        {"--merge-file", LOOM_FLAG_STR, &merge_file, "GPT-2 merges", NULL, 0},
        {"--device", LOOM_FLAG_CHOICE, &device, "compute device", "cpu|cuda", 0},
    };
    int nf = (int)(sizeof flags / sizeof flags[0]), help;
    struct loom_tokenizer *tok = NULL;
    struct loom_backend *be = NULL;
    const struct loom_family_config_desc *fdesc = NULL;
    const struct loom_family *family = NULL;
    void *cfg = NULL;
    struct loom_model *m = NULL;
    void *dec = NULL;
    struct loom_parallel par;
    int par_ok = 0;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    float *logits = NULL;
    struct cand *cands = NULL;
    char *text = NULL;
    enum loom_status s = loom_flags_parse(flags, nf, argc, argv, 2, &help);
    if (s == LOOM_OK && help) {
        loom_flags_print_help("usage: loom generate --load CKPT [--vocab-file F [--merge-file F] | "
                              "--tokenizer-model F] "
                              "--prompt TEXT [flags]", flags, nf);
        return 0;
    }
#define FAIL(...) do { s = loom_fail(LOOM_ERR_INVALID_ARG, __VA_ARGS__); goto out; } while (0)
    if (s != LOOM_OK) goto out;
    if (!load) FAIL("--load CKPT is required");
    if (!vocab_file && !tok_model && strcmp(tok_type, "NullTokenizer") != 0) {
        /* the tokenizer files loom convert put beside the checkpoint */
        snprintf(tok_json, sizeof tok_json, "%s/tokenizer.json", load);
        FILE *tf = fopen(tok_json, "rb");
        if (!tf)
            FAIL("no tokenizer: give --vocab-file (and --merge-file) or --tokenizer-model, or "
                 "--load a checkpoint that holds a tokenizer.json (loom convert copies it)");
        fclose(tf);
        tok_type = "HuggingFaceTokenizer";
        tok_model = load;
    }
    if (max_new < 0) FAIL("--max-new-tokens must be >= 0");
    if (temperature < 0) FAIL("--temperature must be >= 0");
    if (top_k < 0) FAIL("--top-k must be >= 0");
    if (top_p < 0 || top_p > 1) FAIL("--top-p must be in [0, 1]");
    struct loom_tokenizer_spec tspec = {
        .type = tok_type, .vocab_file = vocab_file, .merge_file = merge_file,
        .tokenizer_model = tok_model, .vocab_size = tok_vocab_size,
        .tiktoken_pattern = tik_pattern, .tiktoken_num_special_tokens = tik_specials};
    if ((s = loom_tokenizer_open(&tok, &tspec)) != LOOM_OK) goto out;
    /* the checkpoint's family, which must generate text, and its configuration */
    struct loom_train_state st;
    int has_optim;
    if ((s = loom_ckpt_read_family(load, &fdesc)) != LOOM_OK) goto out;
    family = loom_family_find(fdesc->name);
    if (!family || !family->decode_config) {
        s = loom_fail(LOOM_ERR_UNSUPPORTED,
                      "loom generate: the checkpoint's model (family %s) does not generate text",
                      fdesc->name);
        goto out;
    }
    if (!(cfg = calloc(1, fdesc->config_size))) {
        s = loom_fail(LOOM_ERR_OOM, "out of memory");
        goto out;
    }
    if ((s = loom_ckpt_read_config(load, fdesc, cfg, &st, &has_optim)) != LOOM_OK) goto out;
    int64_t vocab, max_positions;
    family->decode_config(cfg, &vocab, &max_positions);
    if (loom_tokenizer_vocab_size(tok) > vocab)
        FAIL("the tokenizer has %lld tokens but the checkpoint's vocabulary is %lld",
             (long long)loom_tokenizer_vocab_size(tok), (long long)vocab);
    if ((s = loom_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n, &cap)) != LOOM_OK) goto out;
    if (n == 0) {
        /* an empty prompt starts from the end-of-document token, as a fresh document */
        ids = realloc(ids, sizeof *ids);
        ids[0] = loom_tokenizer_eod(tok);
        n = 1;
    }
    int64_t total = (int64_t)n + max_new;
    if (max_positions > 0 && total > max_positions)
        FAIL("the prompt (%zu tokens) + --max-new-tokens %lld exceeds the model's %lld positions",
             n, (long long)max_new, (long long)max_positions);
    if ((s = fdesc->finalize(cfg, 1, 1)) != LOOM_OK) goto out;
    if ((s = loom_parallel_init_single(&par)) != LOOM_OK) goto out;
    par_ok = 1;
    if ((s = loom_backend_create(&be, device, 0)) != LOOM_OK) goto out;
    if ((s = family->create(&m, cfg, &par, be, 1, 1)) != LOOM_OK) goto out;
    if ((s = loom_ckpt_load(load, m, NULL)) != LOOM_OK) goto out;
    if ((s = family->decoder_create(&dec, m, total)) != LOOM_OK) goto out;
    logits = malloc((size_t)vocab * sizeof(float));
    cands = malloc((size_t)vocab * sizeof *cands);
    ids = realloc(ids, (size_t)total * sizeof *ids);
    if (!logits || !cands || !ids) {
        s = loom_fail(LOOM_ERR_OOM, "out of memory");
        goto out;
    }
    struct sample_cfg sc = {temperature, top_p, top_k, greedy, (uint64_t)seed};
    double t0 = loom_time_s();
    for (size_t i = 0; i < n; i++)
        if ((s = family->decoder_step(dec, ids[i], logits)) != LOOM_OK) goto out;
    size_t prompt_len = n;
    for (int64_t k = 0; k < max_new; k++) {
        int32_t next = pick(logits, vocab, &sc, k, cands);
        ids[n++] = next;
        if (stop_at_eod && next == loom_tokenizer_eod(tok)) break;
        if (k + 1 < max_new && (s = family->decoder_step(dec, next, logits)) != LOOM_OK) goto out;
    }
    double dt = loom_time_s() - t0;
    size_t len;
    if ((s = loom_tokenizer_decode(tok, ids, n, &text, &len)) != LOOM_OK) goto out;
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    fprintf(stderr, "loom: generated %zu tokens after a %zu-token prompt in %.2f s (%.1f tokens/s)\n",
            n - prompt_len, prompt_len, dt, (double)n / (dt > 0 ? dt : 1e-9));
out:
    if (s != LOOM_OK) loom_print_error();
    free(text);
    free(cands);
    free(logits);
    free(ids);
    if (dec) family->decoder_free(dec);
    if (m) family->free(m);
    free(cfg);
    if (be) loom_backend_destroy(be);
    if (par_ok) loom_parallel_free(&par);
    if (tok) loom_tokenizer_free(tok);
    return s == LOOM_OK ? 0 : 1;
#undef FAIL
}
