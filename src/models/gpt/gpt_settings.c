/* GPT's model settings: one row each (loom/settings.h), and the family hooks for what a row cannot
 * say: the flags that are other forms of a setting, the GELU's form by Megatron-LM's rule, Llama
 * 3.1's rope scaling (an object in meta.json), the head size as meta.json keeps it, and the
 * start-up notes that combine settings. */
#include "models/gpt/gpt_settings.h"
#include "models/gpt/gpt_settings_rows.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(enum loom_norm) == sizeof(int) && sizeof(enum loom_posemb) == sizeof(int) &&
                   sizeof(enum loom_gelu) == sizeof(int),
               "ENUM settings are stored as int");

/* In the order --help lists the flags: every group of rows (models/gpt/gpt_settings_rows.h). */
const struct loom_setting loom_gpt_settings[] = {
    LOOM_GPT_ROWS_SHAPE
    LOOM_GPT_ROWS_GQA
    LOOM_GPT_ROWS_SIZES
    LOOM_GPT_ROWS_SWIGLU
    LOOM_GPT_ROWS_NORM_1P
    LOOM_GPT_ROWS_QK_NORM
    LOOM_GPT_ROWS_GELU_POSEMB
    LOOM_GPT_ROWS_ROPE
    LOOM_GPT_ROWS_BIAS
    LOOM_GPT_ROWS_QKV_BIAS_UNTIE
    LOOM_GPT_ROWS_MOE
    LOOM_GPT_ROWS_DROPOUT_INIT
};
const int loom_gpt_num_settings = (int)(sizeof loom_gpt_settings / sizeof loom_gpt_settings[0]);


static const char *posemb_name(enum loom_posemb p) {
    return p == LOOM_POSEMB_ROPE ? "rope" : p == LOOM_POSEMB_NONE ? "none" : "learned_absolute";
}

/* The table's defaults and the settings without a row: Llama 3.1's scaling's other factors
 * (Megatron-LM's --use-rope-scaling fixes them) */
static void gpt_defaults(void *cfg) {
    struct loom_transformer_config *c = cfg;
    memset(c, 0, sizeof *c);
    loom_settings_defaults(&loom_gpt_config_desc, c);
    c->rope_low_freq_factor = 1.0;
    c->rope_high_freq_factor = 4.0;
    c->rope_original_max_positions = 8192;
}

static enum loom_status gpt_finalize(void *cfg, int tp, int pp) {
    return loom_gpt_config_finalize(cfg, tp, pp);
}

/* Megatron-LM's other names: --encoder-seq-length for --seq-length, and the older
 * --use-rotary-position-embeddings / --no-position-embedding for --position-embedding-type */
static enum loom_status gpt_after_parse(void *cfg, struct loom_flag *flags, int nflags) {
    struct loom_transformer_config *c = cfg;
    if (c->in.encoder_seq != 0) {
        struct loom_flag *sl = loom_flags_find(flags, nflags, "--seq-length");
        if (sl->given && c->seq_length != c->in.encoder_seq)
            return loom_fail(LOOM_ERR_INVALID_ARG,
                             "--encoder-seq-length %lld contradicts --seq-length %lld (one "
                             "sequence length; give one of them)",
                             (long long)c->in.encoder_seq, (long long)c->seq_length);
        c->seq_length = c->in.encoder_seq;
        sl->given = 1;
    }
    if (c->in.use_rope || c->in.no_posemb) {
        struct loom_flag *pe = loom_flags_find(flags, nflags, "--position-embedding-type");
        const int rope = c->in.use_rope || (pe->given && c->posemb == LOOM_POSEMB_ROPE);
        const enum loom_posemb want = rope ? LOOM_POSEMB_ROPE : LOOM_POSEMB_NONE;
        if (pe->given && c->posemb != want)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s contradicts --position-embedding-type %s",
                             c->in.use_rope ? "--use-rotary-position-embeddings"
                                            : "--no-position-embedding",
                             posemb_name(c->posemb));
        c->posemb = want;
        pe->given = 1; /* as if given: a checkpoint's must agree */
    }
    return LOOM_OK;
}

/* The GELU's form by Megatron-LM's rule: its fused bias-GELU (on unless --no-bias-gelu-fusion;
 * it needs the biases) and --openai-gelu compute the tanh form, its F.gelu the exact one. */
static enum loom_gelu gelu_form(const struct loom_transformer_config *c) {
    return c->in.openai_gelu || (c->bias && !c->in.no_gelu_fusion) ? LOOM_GELU_TANH
                                                                    : LOOM_GELU_ERF;
}

/* A checkpoint's configuration as flags: the head size given, grouped-query attention as
 * --group-query-attention with its groups (0 without) */
static void gpt_ckpt_as_flags(void *cfg) {
    struct loom_transformer_config *c = cfg;
    c->head_size = loom_gpt_head_size(c);
    c->in.gqa = c->query_groups != c->heads;
    if (!c->in.gqa) c->query_groups = 0;
}

static enum loom_status gpt_load_check(void *cfg, const void *saved_cfg,
                                       const struct loom_flag *flags, int nflags,
                                       const char *load) {
    struct loom_transformer_config *c = cfg;
    const struct loom_transformer_config *saved = saved_cfg;
    /* the checkpoint's GELU form, unless a GELU flag asks for the other one */
    const int gelu_flag = loom_settings_flag_given(flags, nflags, "--openai-gelu") ||
                          loom_settings_flag_given(flags, nflags, "--no-bias-gelu-fusion");
    if (gelu_flag && !saved->swiglu && gelu_form(c) != saved->gelu)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--openai-gelu / --no-bias-gelu-fusion ask for the GELU's %s form, which "
                         "contradicts the checkpoint %s (trained with the %s form); leave them "
                         "out to use the checkpoint's",
                         gelu_form(c) == LOOM_GELU_ERF ? "erf" : "tanh", load,
                         saved->gelu == LOOM_GELU_ERF ? "erf" : "tanh");
    /* the checkpoint's form, as the flags that give it */
    c->in.openai_gelu = saved->gelu == LOOM_GELU_TANH;
    c->in.no_gelu_fusion = saved->gelu == LOOM_GELU_ERF;
    /* Llama 3.1's scaling: the checkpoint's unless --use-rope-scaling is given (then the flags'
     * factor and Megatron-LM's fixed others); --rope-scaling-factor alone changes its factor */
    if (!loom_settings_flag_given(flags, nflags, "--use-rope-scaling") && saved->rope_factor > 0) {
        c->in.rope_scaling = 1;
        if (!loom_settings_flag_given(flags, nflags, "--rope-scaling-factor"))
            c->in.rope_scaling_factor = saved->rope_factor;
        c->rope_low_freq_factor = saved->rope_low_freq_factor;
        c->rope_high_freq_factor = saved->rope_high_freq_factor;
        c->rope_original_max_positions = saved->rope_original_max_positions;
    }
    return LOOM_OK;
}

static enum loom_status gpt_from_flags(void *cfg, const struct loom_flag *flags, int nflags) {
    struct loom_transformer_config *c = cfg;
    if (c->query_groups && !c->in.gqa)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--num-query-groups needs --group-query-attention");
    if (loom_settings_flag_given(flags, nflags, "--rope-scaling-factor") && !c->in.rope_scaling)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--rope-scaling-factor %g needs --use-rope-scaling",
                         c->in.rope_scaling_factor);
    if (c->in.rope_scaling && !(c->in.rope_scaling_factor > 0))
        return loom_fail(LOOM_ERR_INVALID_ARG, "--rope-scaling-factor must be positive (got %g)",
                         c->in.rope_scaling_factor);
    if (!c->in.gqa) c->query_groups = 0;
    c->gelu = gelu_form(c);
    c->rope_factor = c->in.rope_scaling ? c->in.rope_scaling_factor : 0;
    return LOOM_OK;
}

/* meta.json: the head size resolved, and Llama 3.1's scaling under Hugging Face's names */
static void gpt_meta_write(const void *cfg, json_t *mc) {
    const struct loom_transformer_config *c = cfg;
    json_object_set_new(mc, "kv_channels", json_integer(loom_gpt_head_size(c)));
    if (c->rope_factor > 0) {
        json_t *rs = json_object();
        json_object_set_new(rs, "factor", json_real(c->rope_factor));
        json_object_set_new(rs, "low_freq_factor", json_real(c->rope_low_freq_factor));
        json_object_set_new(rs, "high_freq_factor", json_real(c->rope_high_freq_factor));
        json_object_set_new(rs, "original_max_position_embeddings",
                            json_real(c->rope_original_max_positions));
        json_object_set_new(mc, "rope_scaling", rs);
    }
}

static enum loom_status get_num(json_t *o, const char *key, const char *file, double *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" missing or not a number", file, key);
    *out = json_number_value(v);
    return LOOM_OK;
}

/* rope_scaling absent (older checkpoints, or none): the frequencies unscaled */
static enum loom_status gpt_meta_read(json_t *mc, const char *file, void *cfg) {
    struct loom_transformer_config *c = cfg;
    json_t *rs = json_object_get(mc, "rope_scaling");
    if (!rs) return LOOM_OK;
    if (!json_is_object(rs))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"rope_scaling\" must be an object", file);
    LOOM_CHECK(get_num(rs, "factor", file, &c->rope_factor));
    LOOM_CHECK(get_num(rs, "low_freq_factor", file, &c->rope_low_freq_factor));
    LOOM_CHECK(get_num(rs, "high_freq_factor", file, &c->rope_high_freq_factor));
    LOOM_CHECK(
        get_num(rs, "original_max_position_embeddings", file, &c->rope_original_max_positions));
    if (!(c->rope_factor > 0))
        return loom_fail(LOOM_ERR_FORMAT, "%s: \"rope_scaling\" \"factor\" must be positive", file);
    return LOOM_OK;
}

/* the start-up notes that take more than one setting */
static void gpt_describe(const void *cfg, char *buf, size_t cap) {
    const struct loom_transformer_config *c = cfg;
    if (c->qkv_bias && !c->bias) /* --add-qkv-bias */
        snprintf(buf + strlen(buf), cap - strlen(buf), ", qkv bias");
    if (c->posemb == LOOM_POSEMB_ROPE && c->rotary_percent != 1) /* --rotary-percent */
        snprintf(buf + strlen(buf), cap - strlen(buf), ", rotary on %lld of %lld values",
                 (long long)loom_gpt_rope(c).dims, (long long)loom_gpt_head_size(c));
    if (c->rope_factor > 0) /* --use-rope-scaling */
        snprintf(buf + strlen(buf), cap - strlen(buf),
                 ", rotary frequencies scaled (Llama 3.1: factor %g, low %g, high %g, context %g)",
                 c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor,
                 c->rope_original_max_positions);
}

const struct loom_family_config_desc loom_gpt_config_desc = {
    .name = "gpt",
    .ckpt_format = "loom-gpt",
    .config_size = sizeof(struct loom_transformer_config),
    .settings = loom_gpt_settings,
    .nsettings = (int)(sizeof loom_gpt_settings / sizeof loom_gpt_settings[0]),
    .defaults = gpt_defaults,
    .finalize = gpt_finalize,
    .after_parse = gpt_after_parse,
    .ckpt_as_flags = gpt_ckpt_as_flags,
    .load_check = gpt_load_check,
    .from_flags = gpt_from_flags,
    .meta_write = gpt_meta_write,
    .meta_read = gpt_meta_read,
    .describe = gpt_describe,
    .open_source = loom_gpt_open_source,
    .mock_source = loom_gpt_mock_source,
};
