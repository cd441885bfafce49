/* T5's model settings (Megatron-LM's T5Model): the transformer rows it shares with GPT (the shape,
 * the MLP's size, positions, vocabulary and norm, the GELU, biases, dropouts and initialisation),
 * then its own: the two stacks' layers and lengths, and the position embedding with T5's relative
 * bias and its buckets. Its finalize checks what the family takes and derives the stacks' layers
 * (--num-layers where not given), the micro-batch row (encoder then decoder positions) and,
 * through GPT's rules, the vocabulary padding and the defaults of the other sizes. */
#include "models/t5/t5_settings.h"

#include <stdio.h>
#include <string.h>

#include "loom/gpt.h"
#include "models/gpt/gpt_settings.h"
#include "models/gpt/gpt_settings_rows.h"
#include "models/bert/bert_settings.h"

#define T5_AT(f) offsetof(struct loom_transformer_config, t5.f)

static const struct loom_setting t5_settings[] = {
    LOOM_GPT_ROWS_SHAPE
    {.name = "encoder_num_layers", .type = LOOM_SETTING_INT, .offset = T5_AT(enc_layers),
     .flag = "--encoder-num-layers", .dflt = 0, .meta = "encoder_num_layers",
     .load = LOOM_LOAD_ARCH, .help = "the encoder's layers (0 = --num-layers)"},
    {.name = "decoder_num_layers", .type = LOOM_SETTING_INT, .offset = T5_AT(dec_layers),
     .flag = "--decoder-num-layers", .dflt = 0, .meta = "decoder_num_layers",
     .load = LOOM_LOAD_ARCH, .help = "the decoder's layers (0 = --num-layers)"},
    LOOM_GPT_ROWS_FFN
    /* another length may fine-tune a checkpoint (learned positions must cover it) */
    {.name = "seq_length", .type = LOOM_SETTING_INT, .offset = T5_AT(enc_seq),
     .flag = "--seq-length", .dflt = 512, .meta = "encoder_seq_length",
     .load = LOOM_LOAD_OVERRIDE, .help = "the encoder's sequence length"},
    {.name = "encoder_seq_length", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(in.encoder_seq),
     .flag = "--encoder-seq-length",
     .help = "the encoder's sequence length under its other Megatron-LM name (as --seq-length; "
             "0 = not given)"},
    {.name = "decoder_seq_length", .type = LOOM_SETTING_INT, .offset = T5_AT(dec_seq),
     .flag = "--decoder-seq-length", .dflt = 128, .meta = "decoder_seq_length",
     .load = LOOM_LOAD_OVERRIDE, .help = "the decoder's sequence length"},
    LOOM_GPT_ROWS_POS_VOCAB_NORM
    LOOM_GPT_ROWS_GELU
    {.name = "position_embedding_type", .type = LOOM_SETTING_ENUM, .offset = LOOM_GPT_AT(posemb),
     .flag = "--position-embedding-type", .names = "learned_absolute|rope|none|relative",
     .dflt = LOOM_POSEMB_LEARNED, .meta = "position_embedding_type", .load = LOOM_LOAD_ARCH,
     .help = "position embedding: learned_absolute (one table for both stacks) or relative (T5's "
             "relative position bias, one table per stack)"},
    {.name = "relative_attention_num_buckets", .type = LOOM_SETTING_INT,
     .offset = T5_AT(rel_buckets), .flag = "--relative-attention-num-buckets", .dflt = 32,
     .meta = "relative_attention_num_buckets", .load = LOOM_LOAD_ARCH,
     .help = "the relative position bias's buckets (with --position-embedding-type relative)"},
    {.name = "relative_attention_max_distance", .type = LOOM_SETTING_INT,
     .offset = T5_AT(rel_max_distance), .flag = "--relative-attention-max-distance", .dflt = 128,
     .meta = "relative_attention_max_distance", .load = LOOM_LOAD_ARCH,
     .help = "the distance from which positions share the relative bias's last bucket"},
    LOOM_GPT_ROWS_BIAS
    LOOM_GPT_ROWS_DROPOUT_INIT
};

#define GPT (&loom_gpt_config_desc)
#define BAD(...) return loom_fail(LOOM_ERR_INVALID_ARG, __VA_ARGS__)

static void t5_defaults(void *cfg) {
    struct loom_transformer_config *c = cfg;
    GPT->defaults(c); /* every field, GPT's rows and those without one */
    loom_settings_defaults(&loom_t5_config_desc, c);
}

static enum loom_status t5_finalize(void *cfg, int tp, int pp) {
    struct loom_transformer_config *c = cfg;
    struct loom_t5_config *t = &c->t5;
    if (c->posemb == LOOM_POSEMB_ROPE || c->posemb == LOOM_POSEMB_NONE)
        BAD("--position-embedding-type %s: T5 models take learned_absolute or relative",
            c->posemb == LOOM_POSEMB_ROPE ? "rope" : "none");
    if (c->norm != LOOM_NORM_LAYERNORM) BAD("--normalization RMSNorm: T5 models take LayerNorm");
    if (c->layernorm_1p) BAD("--apply-layernorm-1p: not supported for T5 models");
    if (t->enc_layers < 0 || t->dec_layers < 0)
        BAD("--encoder-num-layers and --decoder-num-layers must be positive, or 0 for "
            "--num-layers (got %lld, %lld)",
            (long long)t->enc_layers, (long long)t->dec_layers);
    if (t->enc_layers == 0) t->enc_layers = c->num_layers;
    if (t->dec_layers == 0) t->dec_layers = c->num_layers;
    if (t->enc_layers < 1 || t->dec_layers < 1)
        BAD("a T5 model needs at least one encoder and one decoder layer (--encoder-num-layers "
            "%lld, --decoder-num-layers %lld)",
            (long long)t->enc_layers, (long long)t->dec_layers);
    if (t->enc_seq < 1 || t->dec_seq < 1)
        BAD("--seq-length (the encoder's) and --decoder-seq-length must be positive (got %lld, "
            "%lld)",
            (long long)t->enc_seq, (long long)t->dec_seq);
    if (c->posemb == LOOM_POSEMB_RELATIVE &&
        (t->rel_buckets < 2 || t->rel_buckets % 2 || t->rel_max_distance < t->rel_buckets / 2 ||
         t->rel_buckets > LOOM_GPT_MAX_DIM || t->rel_max_distance > LOOM_GPT_MAX_DIM))
        BAD("--relative-attention-num-buckets %lld must be even and at least 2, and "
            "--relative-attention-max-distance %lld at least half of it",
            (long long)t->rel_buckets, (long long)t->rel_max_distance);
    /* GPT's rules on the shared sizes, with the longer stack's length as the positions' need */
    struct loom_transformer_config g = *c;
    g.num_layers = t->enc_layers + t->dec_layers;
    g.seq_length = t->enc_seq > t->dec_seq ? t->enc_seq : t->dec_seq;
    g.posemb = c->posemb == LOOM_POSEMB_RELATIVE ? LOOM_POSEMB_NONE : LOOM_POSEMB_LEARNED;
    LOOM_CHECK(GPT->finalize(&g, tp, pp));
    c->query_groups = g.query_groups;
    c->ffn_hidden = g.ffn_hidden;
    c->max_positions = g.max_positions;
    c->padded_vocab = g.padded_vocab;
    c->seq_length = t->enc_seq + t->dec_seq; /* a micro-batch row */
    return LOOM_OK;
}

/* --encoder-seq-length, Megatron-LM's other name of the encoder's --seq-length */
static enum loom_status t5_after_parse(void *cfg, struct loom_flag *flags, int nflags) {
    struct loom_transformer_config *c = cfg;
    if (c->in.encoder_seq == 0) return LOOM_OK;
    struct loom_flag *sl = loom_flags_find(flags, nflags, "--seq-length");
    if (sl->given && c->t5.enc_seq != c->in.encoder_seq)
        BAD("--encoder-seq-length %lld contradicts --seq-length %lld (the encoder's length; give "
            "one of them)",
            (long long)c->in.encoder_seq, (long long)c->t5.enc_seq);
    c->t5.enc_seq = c->in.encoder_seq;
    sl->given = 1;
    return LOOM_OK;
}

static void t5_describe(const void *cfg, char *buf, size_t cap) {
    const struct loom_transformer_config *c = cfg;
    snprintf(buf + strlen(buf), cap - strlen(buf),
             ", T5 encoder-decoder (%lld + %lld layers, lengths %lld + %lld, %s)",
             (long long)c->t5.enc_layers, (long long)c->t5.dec_layers, (long long)c->t5.enc_seq,
             (long long)c->t5.dec_seq,
             c->posemb == LOOM_POSEMB_RELATIVE ? "relative position bias" : "learned positions");
}

static void t5_meta_write(const void *cfg, struct json_t *model) { GPT->meta_write(cfg, model); }
static enum loom_status t5_meta_read(struct json_t *model, const char *file, void *cfg) {
    return GPT->meta_read(model, file, cfg);
}
static void t5_ckpt_as_flags(void *cfg) { GPT->ckpt_as_flags(cfg); }
static enum loom_status t5_load_check(void *cfg, const void *saved, const struct loom_flag *flags,
                                      int nflags, const char *load) {
    return GPT->load_check(cfg, saved, flags, nflags, load);
}
static enum loom_status t5_from_flags(void *cfg, const struct loom_flag *flags, int nflags) {
    return GPT->from_flags(cfg, flags, nflags);
}

const struct loom_family_config_desc loom_t5_config_desc = {
    .name = "t5",
    .ckpt_format = "loom-t5",
    .config_size = sizeof(struct loom_transformer_config),
    .settings = t5_settings,
    .nsettings = (int)(sizeof t5_settings / sizeof t5_settings[0]),
    .defaults = t5_defaults,
    .finalize = t5_finalize,
    .after_parse = t5_after_parse,
    .ckpt_as_flags = t5_ckpt_as_flags,
    .load_check = t5_load_check,
    .from_flags = t5_from_flags,
    .meta_write = t5_meta_write,
    .meta_read = t5_meta_read,
    .describe = t5_describe,
    .open_source = loom_t5_open_source,
    .mock_source = loom_t5_mock_source_of,
    .data_tokenizer = loom_bert_data_tokenizer, /* T5's samples are built over BERT's dataset */
};
