/* GPT's model settings: one row each (loom/settings.h), and the family hooks for what a row cannot
 * say: the flags that are other forms of a setting, the GELU's form by Megatron-LM's rule, Llama
 * 3.1's rope scaling (an object in meta.json), the head size as meta.json keeps it, and the
 * start-up notes that combine settings. */
#include "models/gpt/gpt_settings.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(enum loom_norm) == sizeof(int) && sizeof(enum loom_posemb) == sizeof(int) &&
                   sizeof(enum loom_gelu) == sizeof(int),
               "ENUM settings are stored as int");

#define AT(f) offsetof(struct loom_gpt_config, f)
#define REQ LOOM_HF_REQUIRED
#define GPT2 LOOM_GPT_HF_GPT2
#define LLAMA LOOM_GPT_HF_LLAMA

/* In the order --help lists the flags. */
const struct loom_setting loom_gpt_settings[] = {
    {.name = "num_layers", .type = LOOM_SETTING_INT, .offset = AT(num_layers),
     .flag = "--num-layers", .dflt = 12, .meta = "num_layers", .load = LOOM_LOAD_ARCH,
     .hf = {[GPT2] = {"n_layer", REQ, 0}, [LLAMA] = {"num_hidden_layers", REQ, 0}},
     .help = "decoder layers"},
    {.name = "hidden_size", .type = LOOM_SETTING_INT, .offset = AT(hidden),
     .flag = "--hidden-size", .dflt = 768, .meta = "hidden_size", .load = LOOM_LOAD_ARCH,
     .hf = {[GPT2] = {"n_embd", REQ, 0}, [LLAMA] = {"hidden_size", REQ, 0}},
     .help = "hidden size"},
    {.name = "num_attention_heads", .type = LOOM_SETTING_INT, .offset = AT(heads),
     .flag = "--num-attention-heads", .dflt = 12, .meta = "num_attention_heads",
     .meta_flags = LOOM_META_POSITIVE, .load = LOOM_LOAD_ARCH,
     .hf = {[GPT2] = {"n_head", REQ, 0}, [LLAMA] = {"num_attention_heads", REQ, 0}},
     .help = "attention heads"},
    /* meta.json keeps the head size itself (the meta_write hook), Hugging Face's head_dim is the
     * hooks' of hf_convert.c */
    {.name = "kv_channels", .type = LOOM_SETTING_INT, .offset = AT(head_size),
     .flag = "--kv-channels", .dflt = 0, .meta = "kv_channels",
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_POSITIVE, .load = LOOM_LOAD_ARCH,
     .help = "the size of each attention head (0 = --hidden-size / --num-attention-heads): the qkv "
             "projection is (heads + 2 x query groups) x this wide, the output projection takes "
             "heads x this inputs"},
    {.name = "group_query_attention", .type = LOOM_SETTING_BOOL, .offset = AT(in.gqa),
     .flag = "--group-query-attention", .load = LOOM_LOAD_CKPT,
     .help = "grouped-query attention"},
    {.name = "num_query_groups", .type = LOOM_SETTING_INT, .offset = AT(query_groups),
     .flag = "--num-query-groups", .dflt = 0, .meta = "num_query_groups", .load = LOOM_LOAD_ARCH,
     .hf = {[LLAMA] = {"num_key_value_heads", 0, 0}},
     .help = "key/value groups with --group-query-attention (0 = heads)"},
    {.name = "ffn_hidden_size", .type = LOOM_SETTING_INT, .offset = AT(ffn_hidden),
     .flag = "--ffn-hidden-size", .dflt = 0, .meta = "ffn_hidden_size", .load = LOOM_LOAD_ARCH,
     .hf = {[LLAMA] = {"intermediate_size", REQ, 0}},
     .help = "MLP hidden size (0 = 4 x hidden)"},
    /* another length may fine-tune a checkpoint (learned positions must cover it) */
    {.name = "seq_length", .type = LOOM_SETTING_INT, .offset = AT(seq_length),
     .flag = "--seq-length", .dflt = 1024, .meta = "seq_length", .load = LOOM_LOAD_OVERRIDE,
     .help = "sequence length"},
    {.name = "encoder_seq_length", .type = LOOM_SETTING_INT, .offset = AT(in.encoder_seq),
     .flag = "--encoder-seq-length",
     .help = "the sequence length under its other Megatron-LM name (as --seq-length; 0 = not "
             "given)"},
    {.name = "max_position_embeddings", .type = LOOM_SETTING_INT, .offset = AT(max_positions),
     .flag = "--max-position-embeddings", .dflt = 0, .meta = "max_position_embeddings",
     .load = LOOM_LOAD_ARCH,
     .hf = {[GPT2] = {"n_positions", 0, 1024}, [LLAMA] = {"max_position_embeddings", 0, 2048}},
     .help = "learned position rows (0 = seq length)"},
    {.name = "vocab_size", .type = LOOM_SETTING_INT, .offset = AT(vocab_size),
     .flag = "--vocab-size", .dflt = 0, .meta = "vocab_size", .load = LOOM_LOAD_ARCH,
     .hf = {[GPT2] = {"vocab_size", REQ, 0}, [LLAMA] = {"vocab_size", REQ, 0}},
     .help = "vocabulary size (0 = from --vocab-file, or 50257)"},
    {.name = "padded_vocab_size", .type = LOOM_SETTING_INT, .offset = AT(padded_vocab),
     .meta = "padded_vocab_size", .meta_flags = LOOM_META_WRITE_ONLY},
    {.name = "make_vocab_size_divisible_by", .type = LOOM_SETTING_INT, .offset = AT(divisible_by),
     .flag = "--make-vocab-size-divisible-by", .dflt = 128, .meta = "make_vocab_size_divisible_by",
     .load = LOOM_LOAD_ARCH, .help = "pad the vocabulary to a multiple of this x TP"},
    {.name = "normalization", .type = LOOM_SETTING_ENUM, .offset = AT(norm),
     .flag = "--normalization", .names = "LayerNorm|RMSNorm", .dflt = LOOM_NORM_LAYERNORM,
     .meta = "normalization", .load = LOOM_LOAD_ARCH, .help = "norm layer"},
    /* taken from the checkpoint on --load whatever the flag says */
    {.name = "norm_epsilon", .type = LOOM_SETTING_DOUBLE, .offset = AT(norm_eps),
     .flag = "--norm-epsilon", .dflt = 1e-5, .meta = "norm_epsilon", .load = LOOM_LOAD_CKPT,
     .hf = {[GPT2] = {"layer_norm_epsilon", 0, 1e-5}, [LLAMA] = {"rms_norm_eps", 0, 1e-6}},
     .help = "norm epsilon"},
    {.name = "swiglu", .type = LOOM_SETTING_BOOL, .offset = AT(swiglu), .flag = "--swiglu",
     .meta = "swiglu", .load = LOOM_LOAD_ARCH, .help = "SwiGLU MLP instead of GELU"},
    {.name = "apply_layernorm_1p", .type = LOOM_SETTING_BOOL, .offset = AT(layernorm_1p),
     .flag = "--apply-layernorm-1p", .meta = "apply_layernorm_1p",
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_ARCH,
     .note = ", norms zero-centred (1 + w)",
     .help = "zero-centred norm weights: each norm's weight w starts at 0 and the norm scales by "
             "1 + w"},
    {.name = "qk_layernorm", .type = LOOM_SETTING_BOOL, .offset = AT(qk_layernorm),
     .flag = "--qk-layernorm", .meta = "qk_layernorm",
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_ARCH,
     .note = ", queries and keys normalised",
     .help = "normalise each attention head's query and key vectors (the --normalization norm "
             "over the head size, one weight for queries and one for keys per layer), before the "
             "rotary embedding"},
    {.name = "openai_gelu", .type = LOOM_SETTING_BOOL, .offset = AT(in.openai_gelu),
     .flag = "--openai-gelu", .load = LOOM_LOAD_FAMILY,
     .help = "the GELU's tanh form in every case"},
    {.name = "no_bias_gelu_fusion", .type = LOOM_SETTING_BOOL, .offset = AT(in.no_gelu_fusion),
     .flag = "--no-bias-gelu-fusion", .load = LOOM_LOAD_FAMILY,
     .help = "the GELU's exact (erf) form, as Megatron-LM computes it without its fused bias-GELU"},
    /* the form those two give (from_flags); absent from older checkpoints: tanh, all they had */
    {.name = "gelu", .type = LOOM_SETTING_ENUM, .offset = AT(gelu), .names = "tanh|erf",
     .dflt = LOOM_GELU_TANH, .meta = "gelu", .meta_flags = LOOM_META_OPTIONAL,
     .load = LOOM_LOAD_FAMILY},
    {.name = "position_embedding_type", .type = LOOM_SETTING_ENUM, .offset = AT(posemb),
     .flag = "--position-embedding-type", .names = "learned_absolute|rope|none",
     .dflt = LOOM_POSEMB_LEARNED, .meta = "position_embedding_type", .load = LOOM_LOAD_ARCH,
     .help = "position embedding"},
    /* the rotary settings shape no parameter: a flag given on --load changes them */
    {.name = "rotary_base", .type = LOOM_SETTING_DOUBLE, .offset = AT(rope_theta),
     .flag = "--rotary-base", .dflt = 10000, .meta = "rotary_base", .load = LOOM_LOAD_OVERRIDE,
     .hf = {[LLAMA] = {"rope_theta", 0, 10000}}, .help = "rotary base theta"},
    {.name = "rotary_percent", .type = LOOM_SETTING_DOUBLE, .offset = AT(rotary_percent),
     .flag = "--rotary-percent", .dflt = 1, .meta = "rotary_percent",
     .meta_flags = LOOM_META_OPTIONAL, .load = LOOM_LOAD_OVERRIDE,
     .help = "share of each head's values that rotate: the first head size x this (an even "
             "count), the rest pass through"},
    {.name = "use_rope_scaling", .type = LOOM_SETTING_BOOL, .offset = AT(in.rope_scaling),
     .flag = "--use-rope-scaling", .load = LOOM_LOAD_FAMILY,
     .help = "rescale the rotary frequencies as Llama 3.1 does (by --rope-scaling-factor; "
             "low/high frequency factors 1 and 4, original context 8192)"},
    {.name = "rotary_seq_len_interpolation_factor", .type = LOOM_SETTING_DOUBLE,
     .offset = AT(rope_interpolation), .flag = "--rotary-seq-len-interpolation-factor",
     .dflt = 0, .meta = "rotary_seq_len_interpolation_factor",
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_OVERRIDE,
     .note = ", rotary positions divided by %g",
     .help = "divide the rotary positions by this (linear interpolation to a longer context; 0 = "
             "none)"},
    {.name = "rope_scaling_factor", .type = LOOM_SETTING_DOUBLE,
     .offset = AT(in.rope_scaling_factor), .flag = "--rope-scaling-factor", .dflt = 8,
     .load = LOOM_LOAD_FAMILY,
     .help = "Llama 3.1's rotary scaling factor (with --use-rope-scaling)"},
    {.name = "use_rotary_position_embeddings", .type = LOOM_SETTING_BOOL, .offset = AT(in.use_rope),
     .flag = "--use-rotary-position-embeddings",
     .help = "as --position-embedding-type rope (older Megatron-LM)"},
    {.name = "no_position_embedding", .type = LOOM_SETTING_BOOL, .offset = AT(in.no_posemb),
     .flag = "--no-position-embedding",
     .help = "no learned absolute position embedding (older Megatron-LM)"},
    {.name = "add_bias_linear", .type = LOOM_SETTING_BOOL, .offset = AT(bias),
     .flag = "--disable-bias-linear", .negate = 1, .dflt = 1, .meta = "add_bias_linear",
     .load = LOOM_LOAD_ARCH,
     .help = "no biases in linear layers (a GELU MLP then has the exact erf GELU, as in "
             "Megatron-LM; --openai-gelu keeps the tanh form)"},
    {.name = "add_qkv_bias", .type = LOOM_SETTING_BOOL, .offset = AT(qkv_bias),
     .flag = "--add-qkv-bias", .meta = "add_qkv_bias", .meta_flags = LOOM_META_OPTIONAL,
     .load = LOOM_LOAD_ARCH,
     .help = "a bias on the qkv product even with --disable-bias-linear (Qwen2's attention)"},
    {.name = "untie_embeddings_and_output_weights", .type = LOOM_SETTING_BOOL, .offset = AT(untie),
     .flag = "--untie-embeddings-and-output-weights", .meta = "untie_embeddings_and_output_weights",
     .load = LOOM_LOAD_ARCH, .help = "separate output layer"},
    /* kept as trained, but the flags hold on --load */
    {.name = "hidden_dropout", .type = LOOM_SETTING_DOUBLE, .offset = AT(hidden_dropout),
     .flag = "--hidden-dropout", .dflt = 0.1, .meta = "hidden_dropout",
     .hf = {[GPT2] = {"resid_pdrop", 0, 0}}, .help = "dropout on hidden states"},
    {.name = "attention_dropout", .type = LOOM_SETTING_DOUBLE, .offset = AT(attention_dropout),
     .flag = "--attention-dropout", .dflt = 0.1, .meta = "attention_dropout",
     .hf = {[GPT2] = {"attn_pdrop", 0, 0}, [LLAMA] = {"attention_dropout", LOOM_HF_READ_ONLY, 0}},
     .help = "dropout on attention probabilities"},
    {.name = "init_method_std", .type = LOOM_SETTING_DOUBLE, .offset = AT(init_std),
     .flag = "--init-method-std", .dflt = 0.02, .meta = "init_method_std",
     .hf = {[GPT2] = {"initializer_range", 0, 0.02}, [LLAMA] = {"initializer_range", 0, 0.02}},
     .help = "std of the normal initialisation"},
    {.name = "init_method_xavier_uniform", .type = LOOM_SETTING_BOOL, .offset = AT(xavier_init),
     .flag = "--init-method-xavier-uniform",
     .help = "initialise every matrix uniform in +-sqrt(6 / (rows + columns)) (torch's "
             "xavier_uniform_) instead of normal"},
};
const int loom_gpt_num_settings = (int)(sizeof loom_gpt_settings / sizeof loom_gpt_settings[0]);

#undef AT
#undef REQ
#undef GPT2
#undef LLAMA

static const char *posemb_name(enum loom_posemb p) {
    return p == LOOM_POSEMB_ROPE ? "rope" : p == LOOM_POSEMB_NONE ? "none" : "learned_absolute";
}

/* The table's defaults and the settings without a row: Llama 3.1's scaling's other factors
 * (Megatron-LM's --use-rope-scaling fixes them) */
static void gpt_defaults(void *cfg) {
    struct loom_gpt_config *c = cfg;
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
    struct loom_gpt_config *c = cfg;
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
static enum loom_gelu gelu_form(const struct loom_gpt_config *c) {
    return c->in.openai_gelu || (c->bias && !c->in.no_gelu_fusion) ? LOOM_GELU_TANH
                                                                    : LOOM_GELU_ERF;
}

/* A checkpoint's configuration as flags: the head size given, grouped-query attention as
 * --group-query-attention with its groups (0 without) */
static void gpt_ckpt_as_flags(void *cfg) {
    struct loom_gpt_config *c = cfg;
    c->head_size = loom_gpt_head_size(c);
    c->in.gqa = c->query_groups != c->heads;
    if (!c->in.gqa) c->query_groups = 0;
}

static enum loom_status gpt_load_check(void *cfg, const void *saved_cfg,
                                       const struct loom_flag *flags, int nflags,
                                       const char *load) {
    struct loom_gpt_config *c = cfg;
    const struct loom_gpt_config *saved = saved_cfg;
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
    struct loom_gpt_config *c = cfg;
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
    const struct loom_gpt_config *c = cfg;
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
    struct loom_gpt_config *c = cfg;
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
    const struct loom_gpt_config *c = cfg;
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
    .config_size = sizeof(struct loom_gpt_config),
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
};
