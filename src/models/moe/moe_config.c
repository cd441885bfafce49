/* The MoE flags' checks and --moe-layer-freq's layer pattern (loom/moe.h). Every bad setting is a
 * one-line error naming the flag and what is valid, before any work. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "loom/moe.h"

#define BAD(...) return loom_fail(LOOM_ERR_INVALID_ARG, __VA_ARGS__)

/* A Python-like list expression, as Megatron-LM evaluates --moe-layer-freq: terms joined by +,
 * each a list of 0/1 "[a,b,...]" optionally repeated "*n"; the whole may be parenthesised. */
enum loom_status loom_moe_layer_pattern(const char *freq, int64_t L, uint8_t *is_moe) {
    const char *p = freq;
    while (isspace((unsigned char)*p)) p++;
    if (isdigit((unsigned char)*p)) { /* an integer N: layers 0, N, 2N, ... */
        char *end;
        const long long n = strtoll(p, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (*end || n < 1)
            BAD("--moe-layer-freq '%s': an integer >= 1 or a list of 0/1 per layer such as "
                "\"[0,1,1]\" or \"([0]*3+[1]*29)\"", freq);
        for (int64_t l = 0; l < L; l++) is_moe[l] = l % n == 0;
        return LOOM_OK;
    }
    int64_t n = 0;
    int paren = 0;
    if (*p == '(') {
        paren = 1;
        p++;
    }
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p != '[') break;
        p++;
        uint8_t term[LOOM_MOE_FREQ_LEN];
        int64_t tn = 0;
        for (;;) {
            while (isspace((unsigned char)*p)) p++;
            if (*p == ']') break;
            if ((*p != '0' && *p != '1') || tn >= LOOM_MOE_FREQ_LEN) goto bad;
            term[tn++] = (uint8_t)(*p++ - '0');
            while (isspace((unsigned char)*p)) p++;
            if (*p == ',') p++;
            else if (*p != ']') goto bad;
        }
        p++;
        long long rep = 1;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '*') {
            char *end;
            rep = strtoll(p + 1, &end, 10);
            if (end == p + 1 || rep < 0) goto bad;
            p = end;
        }
        for (long long r = 0; r < rep; r++)
            for (int64_t i = 0; i < tn; i++, n++)
                if (n < L) is_moe[n] = term[i];
        while (isspace((unsigned char)*p)) p++;
        if (*p != '+') break;
        p++;
    }
    if (paren) {
        if (*p != ')') goto bad;
        p++;
    }
    while (isspace((unsigned char)*p)) p++;
    if (*p || n == 0) goto bad;
    if (n != L)
        BAD("--moe-layer-freq '%s' gives %lld layers; --num-layers is %lld", freq, (long long)n,
            (long long)L);
    return LOOM_OK;
bad:
    BAD("--moe-layer-freq '%s': an integer >= 1 or a list of 0/1 per layer such as \"[0,1,1]\" "
        "or \"([0]*3+[1]*29)\"", freq);
}

enum loom_status loom_moe_config_check(struct loom_moe_config *c, int64_t L, int64_t ffn, int tp) {
    const int64_t E = c->num_experts;
    if (E < 0) BAD("--num-experts must be >= 0 (got %lld; 0: no MoE layers)", (long long)E);
    if (E == 0) return LOOM_OK;
    if (E > LOOM_MOE_MAX_EXPERTS)
        BAD("--num-experts %lld: at most %d", (long long)E, LOOM_MOE_MAX_EXPERTS);
    uint8_t *m = malloc((size_t)(L > 0 ? L : 1));
    if (!m) return loom_fail(LOOM_ERR_OOM, "out of memory checking --moe-layer-freq");
    enum loom_status s = loom_moe_layer_pattern(c->layer_freq, L, m);
    free(m);
    if (s != LOOM_OK) return s;
    if (c->topk < 1 || c->topk > E)
        BAD("--moe-router-topk %lld: must be between 1 and --num-experts %lld", (long long)c->topk,
            (long long)E);
    if (c->ffn_hidden == 0) c->ffn_hidden = ffn;
    if (c->ffn_hidden < 1) BAD("--moe-ffn-hidden-size must be positive (got %lld)",
                               (long long)c->ffn_hidden);
    if (c->shared_ffn < 0) BAD("--moe-shared-expert-intermediate-size must be >= 0 (got %lld)",
                               (long long)c->shared_ffn);
    if (c->shared_gate && c->shared_ffn == 0)
        BAD("--moe-shared-expert-gate needs --moe-shared-expert-intermediate-size");
    if (c->pre_softmax && c->score != LOOM_MOE_SCORE_SOFTMAX)
        BAD("--moe-router-pre-softmax goes with --moe-router-score-function softmax, not sigmoid");
    if (c->expert_bias && c->score != LOOM_MOE_SCORE_SIGMOID)
        BAD("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid (the bias "
            "is added to sigmoid scores)");
    if (c->expert_bias && !(c->bias_rate > 0))
        BAD("--moe-router-bias-update-rate must be positive (got %g)", c->bias_rate);
    if (c->topk_scaling < 0)
        BAD("--moe-router-topk-scaling-factor must be positive (got %g)", c->topk_scaling);
    if (c->num_groups || c->group_topk) {
        if (c->num_groups < 1 || c->group_topk < 1)
            BAD("--moe-router-num-groups %lld and --moe-router-group-topk %lld go together, both "
                ">= 1", (long long)c->num_groups, (long long)c->group_topk);
        if (E % c->num_groups)
            BAD("--moe-router-num-groups %lld must divide --num-experts %lld",
                (long long)c->num_groups, (long long)E);
        if (c->group_topk > c->num_groups)
            BAD("--moe-router-group-topk %lld exceeds --moe-router-num-groups %lld",
                (long long)c->group_topk, (long long)c->num_groups);
        if (c->topk % c->group_topk)
            BAD("--moe-router-group-topk %lld must divide --moe-router-topk %lld",
                (long long)c->group_topk, (long long)c->topk);
        if (c->topk / c->group_topk > E / c->num_groups)
            BAD("--moe-router-topk %lld over --moe-router-group-topk %lld groups takes %lld "
                "experts a group, more than the %lld in each of --moe-router-num-groups %lld",
                (long long)c->topk, (long long)c->group_topk, (long long)(c->topk / c->group_topk),
                (long long)(E / c->num_groups), (long long)c->num_groups);
    }
    if (c->capacity_factor < 0)
        BAD("--moe-expert-capacity-factor must be positive (got %g; leave it out for dropless "
            "routing)", c->capacity_factor);
    if (c->pad_to_capacity && c->capacity_factor <= 0)
        BAD("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor");
    if (c->aux_coeff < 0) BAD("--moe-aux-loss-coeff must be >= 0 (got %g)", c->aux_coeff);
    if (c->z_coeff < 0) BAD("--moe-z-loss-coeff must be >= 0 (got %g)", c->z_coeff);
    if (c->ffn_hidden % tp)
        BAD("--tensor-model-parallel-size %d does not divide the experts' hidden size %lld "
            "(--moe-ffn-hidden-size, by default --ffn-hidden-size)", tp, (long long)c->ffn_hidden);
    if (c->shared_ffn % tp)
        BAD("--tensor-model-parallel-size %d does not divide "
            "--moe-shared-expert-intermediate-size %lld", tp, (long long)c->shared_ffn);
    return LOOM_OK;
}
