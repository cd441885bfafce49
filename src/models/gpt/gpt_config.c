/* GPT configuration: defaults, validation against the layout, vocabulary padding. */
#include <stdlib.h>
#include <string.h>

#include "loom/gpt.h"
#include "models/gpt/gpt_settings.h"

void loom_gpt_config_default(struct loom_transformer_config *c) {
    loom_gpt_config_desc.defaults(c);
    c->vocab_size = 50257; /* the flag's 0 means: from the tokenizer, else this */
}

#define BAD(...) return loom_fail(LOOM_ERR_INVALID_ARG, __VA_ARGS__)

enum loom_status loom_gpt_config_finalize(struct loom_transformer_config *c, int tp, int pp) {
    if (c->encoder && c->layernorm_1p)
        BAD("--apply-layernorm-1p: not supported for an encoder (BERT) model yet (its LM head's "
            "norm has plain weights); leave it out");
    if (c->lm_head_transform && c->norm != LOOM_NORM_LAYERNORM)
        BAD("--normalization %s: an encoder (BERT) model takes LayerNorm", "RMSNorm");
    if (c->num_layers < 1) BAD("--num-layers must be at least 1 (got %lld)", (long long)c->num_layers);
    /* bounds that keep every size product below in range (and the parameter table's count, an
     * int, too): far above any model a machine holds, so a size read from a file that is wrong
     * by orders of magnitude is an error here, not an allocation that never ends */
    const struct {
        const char *flag;
        int64_t v, max;
    } dims[] = {
        {"--num-layers", c->num_layers, LOOM_GPT_MAX_LAYERS},
        {"--hidden-size", c->hidden, LOOM_GPT_MAX_DIM},
        {"--num-attention-heads", c->heads, LOOM_GPT_MAX_DIM},
        {"--kv-channels", c->head_size, LOOM_GPT_MAX_DIM},
        {"--num-query-groups", c->query_groups, LOOM_GPT_MAX_DIM},
        {"--ffn-hidden-size", c->ffn_hidden, LOOM_GPT_MAX_DIM},
        {"--seq-length", c->seq_length, LOOM_GPT_MAX_DIM},
        {"--max-position-embeddings", c->max_positions, LOOM_GPT_MAX_DIM},
        {"--vocab-size", c->vocab_size, LOOM_GPT_MAX_DIM},
        {"--make-vocab-size-divisible-by", c->divisible_by, LOOM_GPT_MAX_DIM},
        {"--num-tokentypes", c->num_tokentypes, LOOM_GPT_MAX_DIM},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v > dims[i].max)
            BAD("%s %lld is too large (at most %lld)", dims[i].flag, (long long)dims[i].v,
                (long long)dims[i].max);
    if (c->hidden < 1) BAD("--hidden-size must be positive (got %lld)", (long long)c->hidden);
    if (c->heads < 1) BAD("--num-attention-heads must be positive (got %lld)", (long long)c->heads);
    if (c->head_size < 0)
        BAD("--kv-channels must be positive, or 0 for --hidden-size / --num-attention-heads (got "
            "%lld)",
            (long long)c->head_size);
    /* the head size defaults to hidden / heads, which must then divide; --kv-channels sets it */
    if (c->head_size == 0 && c->hidden % c->heads)
        BAD("--num-attention-heads %lld does not divide --hidden-size %lld (or give the head size "
            "with --kv-channels)",
            (long long)c->heads, (long long)c->hidden);
    if (c->query_groups == 0) c->query_groups = c->heads;
    if (c->query_groups < 1 || c->heads % c->query_groups)
        BAD("--num-query-groups %lld must divide --num-attention-heads %lld",
            (long long)c->query_groups, (long long)c->heads);
    if (c->ffn_hidden == 0) c->ffn_hidden = 4 * c->hidden;
    if (c->ffn_hidden < 1) BAD("--ffn-hidden-size must be positive");
    if (c->seq_length < 1) BAD("--seq-length must be positive (got %lld)", (long long)c->seq_length);
    if (c->max_positions == 0) c->max_positions = c->seq_length;
    if (c->posemb == LOOM_POSEMB_LEARNED && c->max_positions < c->seq_length)
        BAD("--max-position-embeddings %lld is smaller than --seq-length %lld",
            (long long)c->max_positions, (long long)c->seq_length);
    if (c->posemb == LOOM_POSEMB_ROPE && (loom_gpt_head_size(c) % 2))
        BAD("--position-embedding-type rope needs an even head size (got %lld, %s)",
            (long long)loom_gpt_head_size(c),
            c->head_size > 0 ? "--kv-channels" : "--hidden-size / --num-attention-heads");
    if (c->posemb == LOOM_POSEMB_ROPE && !(c->rope_theta > 0))
        BAD("--rotary-base (rope_theta) must be positive (got %g)", c->rope_theta);
    if (!(c->rotary_percent > 0 && c->rotary_percent <= 1))
        BAD("--rotary-percent must be in (0, 1] (got %g)", c->rotary_percent);
    if (c->posemb != LOOM_POSEMB_ROPE && c->rotary_percent != 1)
        BAD("--rotary-percent %g needs --position-embedding-type rope", c->rotary_percent);
    if (c->posemb == LOOM_POSEMB_ROPE && c->rotary_percent != 1) {
        const struct loom_rope r = loom_gpt_rope(c);
        if (r.dims < 2 || r.dims % 2)
            BAD("--rotary-percent %g rotates %lld of each head's %lld values: that must be an even "
                "count of at least 2",
                c->rotary_percent, (long long)r.dims, (long long)loom_gpt_head_size(c));
    }
    if (c->rope_factor < 0 || c->rope_factor != c->rope_factor)
        BAD("--rope-scaling-factor must be positive (got %g)", c->rope_factor);
    if (c->rope_interpolation < 0 || c->rope_interpolation != c->rope_interpolation)
        BAD("--rotary-seq-len-interpolation-factor must be positive (got %g)",
            c->rope_interpolation);
    if (c->rope_interpolation > 0 && c->posemb != LOOM_POSEMB_ROPE)
        BAD("--rotary-seq-len-interpolation-factor needs --position-embedding-type rope");
    if (c->rope_factor > 0) {
        if (c->posemb != LOOM_POSEMB_ROPE)
            BAD("--use-rope-scaling needs --position-embedding-type rope");
        if (!(c->rope_low_freq_factor > 0 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
              c->rope_original_max_positions > 0))
            BAD("rope scaling needs 0 < low_freq_factor < high_freq_factor and a positive original "
                "context (got %g, %g, %g)",
                c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_original_max_positions);
    }
    if (c->vocab_size < 2) BAD("--vocab-size must be at least 2 (got %lld)", (long long)c->vocab_size);
    if (c->divisible_by < 1)
        BAD("--make-vocab-size-divisible-by must be positive (got %lld)", (long long)c->divisible_by);
    if (c->hidden_dropout < 0 || c->hidden_dropout >= 1)
        BAD("--hidden-dropout must be in [0, 1) (got %g)", c->hidden_dropout);
    if (c->attention_dropout < 0 || c->attention_dropout >= 1)
        BAD("--attention-dropout must be in [0, 1) (got %g)", c->attention_dropout);
    if (!(c->init_std > 0)) BAD("--init-method-std must be positive (got %g)", c->init_std);
    if (!(c->norm_eps > 0)) BAD("--norm-epsilon must be positive (got %g)", c->norm_eps);
    /* tensor parallel divisibility */
    if (tp < 1) BAD("--tensor-model-parallel-size must be at least 1");
    if (c->heads % tp)
        BAD("--tensor-model-parallel-size %d does not divide --num-attention-heads %lld", tp,
            (long long)c->heads);
    if (c->query_groups % tp)
        BAD("--tensor-model-parallel-size %d does not divide the %lld query groups "
            "(--num-query-groups)", tp, (long long)c->query_groups);
    if (c->ffn_hidden % tp)
        BAD("--tensor-model-parallel-size %d does not divide --ffn-hidden-size %lld", tp,
            (long long)c->ffn_hidden);
    if (pp < 1) BAD("--pipeline-model-parallel-size must be at least 1");
    if (c->first_stage_layers < 0 || c->last_stage_layers < 0)
        BAD("--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers must be "
            "positive (got %lld, %lld)",
            (long long)c->first_stage_layers, (long long)c->last_stage_layers);
    if (c->first_stage_layers || c->last_stage_layers) {
        const int lo = c->first_stage_layers > 0, hi = c->last_stage_layers > 0,
                  nmid = pp - lo - hi;
        const int64_t rest = c->num_layers - c->first_stage_layers - c->last_stage_layers;
        if (pp < 2)
            BAD("--decoder-first/last-pipeline-num-layers need --pipeline-model-parallel-size > 1");
        if (nmid < 0 || rest < 0 || (nmid == 0 && rest != 0) ||
            (nmid > 0 && (rest < nmid || rest % nmid)))
            BAD("--decoder-first-pipeline-num-layers %lld and --decoder-last-pipeline-num-layers "
                "%lld leave %lld of --num-layers %lld to %d middle stages: each must get the same "
                "number, at least 1",
                (long long)c->first_stage_layers, (long long)c->last_stage_layers, (long long)rest,
                (long long)c->num_layers, nmid > 0 ? nmid : 0);
    } else if (c->num_layers % pp) {
        BAD("--pipeline-model-parallel-size %d does not divide --num-layers %lld (or give the "
            "first and last stages' layers: --decoder-first/last-pipeline-num-layers)",
            pp, (long long)c->num_layers);
    }
    LOOM_CHECK(loom_moe_config_check(&c->moe, c->num_layers, c->ffn_hidden, tp));
    /* Megatron pads the vocabulary to a multiple of divisible_by * tp */
    int64_t m = c->divisible_by * tp;
    c->padded_vocab = (c->vocab_size + m - 1) / m * m;
    /* the parameter count, in floating point (no overflow), bounded before any table or buffer
     * of that size is made */
    const double np = loom_gpt_num_params_approx(c);
    if (!(np <= LOOM_GPT_MAX_PARAMS))
        BAD("the model is too large: %.3g parameters (at most %.3g; --num-layers %lld, "
            "--hidden-size %lld, --ffn-hidden-size %lld, vocabulary %lld)",
            np, LOOM_GPT_MAX_PARAMS, (long long)c->num_layers, (long long)c->hidden,
            (long long)c->ffn_hidden, (long long)c->padded_vocab);
    return LOOM_OK;
}

/* What the MoE layers change in the count: each one's MLP (dense: fc1, fc2 and their biases)
 * replaced by the router (its weight and expert bias), the experts (every one, or with `active`
 * the k a token takes) and the shared experts with their gate */
static double moe_params_delta(const struct loom_transformer_config *c, int active) {
    const struct loom_moe_config *m = &c->moe;
    if (m->num_experts <= 0) return 0;
    const double C = (double)c->hidden, b = c->bias ? 1 : 0, F = (double)c->ffn_hidden;
    const double sw = c->swiglu ? 2 : 1;
    const double dense = sw * F * C + b * sw * F + C * F + b * C;
    const double Fe = (double)m->ffn_hidden, Fs = (double)m->shared_ffn;
    const double expert = sw * Fe * C + b * sw * Fe + C * Fe + b * C;
    double moe = (double)m->num_experts * (C + (m->expert_bias ? 1 : 0)) +
                 (active ? (double)m->topk : (double)m->num_experts) * expert;
    if (Fs > 0) moe += sw * Fs * C + b * sw * Fs + C * Fs + b * C + (m->shared_gate ? C : 0);
    double layers = 0;
    uint8_t *is_moe = malloc((size_t)(c->num_layers > 0 ? c->num_layers : 1));
    if (is_moe && loom_moe_layer_pattern(m->layer_freq, c->num_layers, is_moe) == LOOM_OK)
        for (int64_t l = 0; l < c->num_layers; l++) layers += is_moe[l];
    free(is_moe);
    return layers * (moe - dense);
}

double loom_gpt_num_params_approx(const struct loom_transformer_config *c) {
    const double C = (double)c->hidden, HS = (double)loom_gpt_head_size(c), NH = (double)c->heads;
    const double NKV = (double)c->query_groups, F = (double)c->ffn_hidden, b = c->bias ? 1 : 0;
    const double qkv = (NH + 2 * NKV) * HS, fc1 = c->swiglu ? 2 * F : F;
    const double norm = c->norm == LOOM_NORM_LAYERNORM ? 2 * C : C;
    double layer = norm + qkv * C + (b || c->qkv_bias ? qkv : 0) + C * NH * HS + b * C + norm +
                   fc1 * C + b * fc1 + C * F + b * C;
    if (c->qk_layernorm) layer += 2 * (c->norm == LOOM_NORM_LAYERNORM ? 2 * HS : HS);
    const double V = (double)c->padded_vocab;
    double n = (double)c->num_layers * layer + norm + V * C;
    if (c->posemb == LOOM_POSEMB_LEARNED) n += (double)c->max_positions * C;
    if (c->untie) n += V * C;
    n += (double)c->num_tokentypes * C;
    if (c->lm_head_transform) n += C * C + 3 * C;
    if (c->output_bias) n += V;
    if (c->binary_head) n += C * C + C + 2 * C + 2;
    return n + moe_params_delta(c, 0);
}

double loom_gpt_num_active_params(const struct loom_transformer_config *c) {
    return (double)loom_gpt_num_params(c) + moe_params_delta(c, 1) - moe_params_delta(c, 0);
}

int64_t loom_gpt_num_params(const struct loom_transformer_config *c) {
    int64_t C = c->hidden, HS = loom_gpt_head_size(c), NH = c->heads, NKV = c->query_groups;
    int64_t F = c->ffn_hidden, b = c->bias ? 1 : 0;
    int64_t qkv = (NH + 2 * NKV) * HS;
    int64_t fc1 = c->swiglu ? 2 * F : F;
    int64_t norm = c->norm == LOOM_NORM_LAYERNORM ? 2 * C : C;
    int64_t layer = norm + qkv * C + (b || c->qkv_bias ? qkv : 0) + C * NH * HS + b * C + norm +
                    fc1 * C + b * fc1 + C * F + b * C;
    if (c->qk_layernorm) /* q and k: a weight, and a bias with LayerNorm, of HS each */
        layer += 2 * (c->norm == LOOM_NORM_LAYERNORM ? 2 * HS : HS);
    int64_t n = c->num_layers * layer + norm + c->padded_vocab * C;
    if (c->posemb == LOOM_POSEMB_LEARNED) n += c->max_positions * C;
    if (c->untie) n += c->padded_vocab * C;
    n += c->num_tokentypes * C;
    if (c->lm_head_transform) n += C * C + 3 * C;
    if (c->output_bias) n += c->padded_vocab;
    if (c->binary_head) n += C * C + C + 2 * C + 2;
    return n + (int64_t)moe_params_delta(c, 0);
}
