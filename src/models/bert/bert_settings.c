/* BERT's model settings (Megatron-LM's BertModel): the transformer rows it shares with GPT (the
 * groups of models/gpt/gpt_settings_rows.h: shape, sizes, norm, GELU, biases, dropouts and
 * initialisation), then its own: the binary (sentence-order) head and the encoder form's fixed
 * settings, kept in meta.json. The hooks are GPT's (the other flag forms, the GELU rule, the head
 * size in meta.json) plus what BERT adds: the GELU of the language-model head, and the refusals
 * of what this family does not take (rotary or no position embedding, RMSNorm). */
#include "models/bert/bert_settings.h"

#include <stdio.h>
#include <string.h>

#include "models/gpt/gpt_settings.h"
#include "models/gpt/gpt_settings_rows.h"

/* In the order --help lists the flags. */
const struct loom_setting loom_bert_settings[] = {
    LOOM_GPT_ROWS_SHAPE
    LOOM_GPT_ROWS_SIZES
    LOOM_GPT_ROWS_NORM_1P
    LOOM_GPT_ROWS_GELU_POSEMB
    LOOM_GPT_ROWS_BIAS
    LOOM_GPT_ROWS_DROPOUT_INIT
    {.name = "binary_head", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(binary_head),
     .flag = "--bert-no-binary-head", .negate = 1, .dflt = 1, .meta = "binary_head",
     .load = LOOM_LOAD_ARCH,
     .help = "no binary head: no pooler, no sentence-order loss, and samples of one segment"},
    /* the encoder form: fixed for the family, kept so that a checkpoint says what it holds */
    {.name = "encoder", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(encoder), .dflt = 1,
     .meta = "encoder", .load = LOOM_LOAD_CKPT},
    {.name = "num_tokentypes", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(num_tokentypes),
     .dflt = 2, .meta = "num_tokentypes", .load = LOOM_LOAD_CKPT},
    {.name = "lm_head_transform", .type = LOOM_SETTING_BOOL,
     .offset = LOOM_GPT_AT(lm_head_transform), .dflt = 1, .meta = "lm_head_transform",
     .load = LOOM_LOAD_CKPT},
    {.name = "output_bias", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(output_bias),
     .dflt = 1, .meta = "output_bias", .load = LOOM_LOAD_CKPT},
    /* the language-model head's GELU: erf (Megatron-LM's BertLMHead), tanh with --openai-gelu;
     * from_flags and load_check set it */
    {.name = "head_gelu", .type = LOOM_SETTING_ENUM, .offset = LOOM_GPT_AT(head_gelu),
     .names = "tanh|erf", .dflt = LOOM_GELU_ERF, .meta = "head_gelu", .load = LOOM_LOAD_FAMILY},
};
const int loom_bert_num_settings = (int)(sizeof loom_bert_settings / sizeof loom_bert_settings[0]);

#define GPT (&loom_gpt_config_desc)

/* The table's defaults and GPT's settings without a row */
static void bert_defaults(void *cfg) {
    struct loom_transformer_config *c = cfg;
    GPT->defaults(c); /* every field, GPT's rows and those without one */
    loom_settings_defaults(&loom_bert_config_desc, c);
}

static enum loom_status bert_finalize(void *cfg, int tp, int pp) {
    struct loom_transformer_config *c = cfg;
    if (c->posemb != LOOM_POSEMB_LEARNED)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--position-embedding-type %s: BERT models take learned absolute "
                         "positions only (learned_absolute)",
                         c->posemb == LOOM_POSEMB_ROPE ? "rope" : "none");
    if (c->norm != LOOM_NORM_LAYERNORM)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--normalization RMSNorm: BERT models take LayerNorm only");
    if (c->seq_length < 5)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--seq-length %lld: a BERT sample needs at least 5 positions ([CLS], "
                         "two segments and two [SEP])",
                         (long long)c->seq_length);
    if (!c->encoder || c->num_tokentypes < 1)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "a BERT model is an encoder with token types (encoder %d, "
                         "num_tokentypes %lld)",
                         c->encoder, (long long)c->num_tokentypes);
    return GPT->finalize(c, tp, pp);
}

/* --load: GPT's checks (the MLP's GELU), then the head's GELU: the checkpoint's, unless
 * --openai-gelu asks for the tanh form the checkpoint was not trained with */
static enum loom_status bert_load_check(void *cfg, const void *saved_cfg,
                                        const struct loom_flag *flags, int nflags,
                                        const char *load) {
    struct loom_transformer_config *c = cfg;
    const struct loom_transformer_config *saved = saved_cfg;
    LOOM_CHECK(GPT->load_check(cfg, saved_cfg, flags, nflags, load));
    if (loom_settings_flag_given(flags, nflags, "--openai-gelu") &&
        saved->head_gelu != LOOM_GELU_TANH)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--openai-gelu asks for the tanh GELU in the language-model head, which "
                         "contradicts the checkpoint %s (trained with the erf form); leave it out "
                         "to use the checkpoint's",
                         load);
    c->head_gelu = saved->head_gelu;
    return LOOM_OK;
}

/* GPT's rules (the MLP's GELU form), then the head's GELU: tanh with --openai-gelu, else as it
 * is (erf by default, the checkpoint's on --load) */
static enum loom_status bert_from_flags(void *cfg, const struct loom_flag *flags, int nflags) {
    struct loom_transformer_config *c = cfg;
    LOOM_CHECK(GPT->from_flags(cfg, flags, nflags));
    if (loom_settings_flag_given(flags, nflags, "--openai-gelu")) c->head_gelu = LOOM_GELU_TANH;
    return LOOM_OK;
}

static void bert_describe(const void *cfg, char *buf, size_t cap) {
    const struct loom_transformer_config *c = cfg;
    GPT->describe(cfg, buf, cap);
    snprintf(buf + strlen(buf), cap - strlen(buf), ", BERT encoder (%s, head GELU %s)",
             c->binary_head ? "lm and sop losses" : "lm loss, no binary head",
             c->head_gelu == LOOM_GELU_ERF ? "erf" : "tanh");
}

static void bert_meta_write(const void *cfg, struct json_t *model) { GPT->meta_write(cfg, model); }
static enum loom_status bert_meta_read(struct json_t *model, const char *file, void *cfg) {
    return GPT->meta_read(model, file, cfg);
}
static enum loom_status bert_after_parse(void *cfg, struct loom_flag *flags, int nflags) {
    return GPT->after_parse(cfg, flags, nflags);
}
static void bert_ckpt_as_flags(void *cfg) { GPT->ckpt_as_flags(cfg); }

const struct loom_family_config_desc loom_bert_config_desc = {
    .name = "bert",
    .ckpt_format = "loom-bert",
    .config_size = sizeof(struct loom_transformer_config),
    .settings = loom_bert_settings,
    .nsettings = (int)(sizeof loom_bert_settings / sizeof loom_bert_settings[0]),
    .defaults = bert_defaults,
    .finalize = bert_finalize,
    .after_parse = bert_after_parse,
    .ckpt_as_flags = bert_ckpt_as_flags,
    .load_check = bert_load_check,
    .from_flags = bert_from_flags,
    .meta_write = bert_meta_write,
    .meta_read = bert_meta_read,
    .describe = bert_describe,
    .open_source = loom_bert_open_source,
    .mock_source = loom_bert_mock_source_of,
    .data_tokenizer = loom_bert_data_tokenizer,
};
