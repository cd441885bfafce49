/* The rows of the settings tables of the families whose configuration is struct loom_transformer_config
 * (GPT's, src/models/gpt/gpt_settings.c, and BERT's, src/models/bert/bert_settings.c), as groups of
 * table rows (struct loom_setting initialisers, each ending with a comma): a family's table lists
 * the groups it has, so a row shared by two families is written once. GPT's table is every group,
 * in this order (the order --help lists the flags). */
#ifndef LOOM_GPT_SETTINGS_ROWS_H
#define LOOM_GPT_SETTINGS_ROWS_H

#include <stddef.h>

#include "loom/gpt.h"
#include "loom/settings.h"
#include "models/gpt/gpt_settings.h"

#define LOOM_GPT_AT(f) offsetof(struct loom_transformer_config, f)

/* the shape: layers, hidden size, heads, head size */
#define LOOM_GPT_ROWS_SHAPE \
    {.name = "num_layers", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(num_layers), \
     .flag = "--num-layers", .dflt = 12, .meta = "num_layers", .load = LOOM_LOAD_ARCH, \
     .hf = {[LOOM_GPT_HF_GPT2] = {"n_layer", LOOM_HF_REQUIRED, 0}, [LOOM_GPT_HF_LLAMA] = {"num_hidden_layers", LOOM_HF_REQUIRED, 0}}, \
     .help = "decoder layers"}, \
    {.name = "hidden_size", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(hidden), \
     .flag = "--hidden-size", .dflt = 768, .meta = "hidden_size", .load = LOOM_LOAD_ARCH, \
     .hf = {[LOOM_GPT_HF_GPT2] = {"n_embd", LOOM_HF_REQUIRED, 0}, [LOOM_GPT_HF_LLAMA] = {"hidden_size", LOOM_HF_REQUIRED, 0}}, \
     .help = "hidden size"}, \
    {.name = "num_attention_heads", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(heads), \
     .flag = "--num-attention-heads", .dflt = 12, .meta = "num_attention_heads", \
     .meta_flags = LOOM_META_POSITIVE, .load = LOOM_LOAD_ARCH, \
     .hf = {[LOOM_GPT_HF_GPT2] = {"n_head", LOOM_HF_REQUIRED, 0}, [LOOM_GPT_HF_LLAMA] = {"num_attention_heads", LOOM_HF_REQUIRED, 0}}, \
     .help = "attention heads"}, \
    /* meta.json keeps the head size itself (the meta_write hook), Hugging Face's head_dim is the \
     * hooks' of hf_convert.c */ \
    {.name = "kv_channels", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(head_size), \
     .flag = "--kv-channels", .dflt = 0, .meta = "kv_channels", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_POSITIVE, .load = LOOM_LOAD_ARCH, \
     .help = "the size of each attention head (0 = --hidden-size / --num-attention-heads): the qkv " \
             "projection is (heads + 2 x query groups) x this wide, the output projection takes " \
             "heads x this inputs"}, \
    /* end */

/* grouped-query attention (GPT only) */
#define LOOM_GPT_ROWS_GQA \
    {.name = "group_query_attention", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(in.gqa), \
     .flag = "--group-query-attention", .load = LOOM_LOAD_CKPT, \
     .help = "grouped-query attention"}, \
    {.name = "num_query_groups", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(query_groups), \
     .flag = "--num-query-groups", .dflt = 0, .meta = "num_query_groups", .load = LOOM_LOAD_ARCH, \
     .hf = {[LOOM_GPT_HF_LLAMA] = {"num_key_value_heads", 0, 0}}, \
     .help = "key/value groups with --group-query-attention (0 = heads)"}, \
    /* end */

/* MLP size, sequence length and positions, vocabulary and its padding, the norm and its epsilon
 * (the encoder-decoder form, T5, has lengths of its own: the three groups apart) */
#define LOOM_GPT_ROWS_SIZES LOOM_GPT_ROWS_FFN LOOM_GPT_ROWS_SEQ LOOM_GPT_ROWS_POS_VOCAB_NORM
#define LOOM_GPT_ROWS_FFN \
    {.name = "ffn_hidden_size", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(ffn_hidden), \
     .flag = "--ffn-hidden-size", .dflt = 0, .meta = "ffn_hidden_size", .load = LOOM_LOAD_ARCH, \
     .hf = {[LOOM_GPT_HF_LLAMA] = {"intermediate_size", LOOM_HF_REQUIRED, 0}}, \
     .help = "MLP hidden size (0 = 4 x hidden)"}, \
    /* end */
#define LOOM_GPT_ROWS_SEQ \
    /* another length may fine-tune a checkpoint (learned positions must cover it) */ \
    {.name = "seq_length", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(seq_length), \
     .flag = "--seq-length", .dflt = 1024, .meta = "seq_length", .load = LOOM_LOAD_OVERRIDE, \
     .help = "sequence length"}, \
    {.name = "encoder_seq_length", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(in.encoder_seq), \
     .flag = "--encoder-seq-length", \
     .help = "the sequence length under its other Megatron-LM name (as --seq-length; 0 = not " \
             "given)"}, \
    /* end */
#define LOOM_GPT_ROWS_POS_VOCAB_NORM \
    {.name = "max_position_embeddings", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(max_positions), \
     .flag = "--max-position-embeddings", .dflt = 0, .meta = "max_position_embeddings", \
     .load = LOOM_LOAD_ARCH, \
     .hf = {[LOOM_GPT_HF_GPT2] = {"n_positions", 0, 1024}, [LOOM_GPT_HF_LLAMA] = {"max_position_embeddings", 0, 2048}}, \
     .help = "learned position rows (0 = seq length)"}, \
    {.name = "vocab_size", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(vocab_size), \
     .flag = "--vocab-size", .dflt = 0, .meta = "vocab_size", .load = LOOM_LOAD_ARCH, \
     .hf = {[LOOM_GPT_HF_GPT2] = {"vocab_size", LOOM_HF_REQUIRED, 0}, [LOOM_GPT_HF_LLAMA] = {"vocab_size", LOOM_HF_REQUIRED, 0}}, \
     .help = "vocabulary size (0 = from --vocab-file, or 50257)"}, \
    {.name = "padded_vocab_size", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(padded_vocab), \
     .meta = "padded_vocab_size", .meta_flags = LOOM_META_WRITE_ONLY}, \
    {.name = "make_vocab_size_divisible_by", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(divisible_by), \
     .flag = "--make-vocab-size-divisible-by", .dflt = 128, .meta = "make_vocab_size_divisible_by", \
     .load = LOOM_LOAD_ARCH, .help = "pad the vocabulary to a multiple of this x TP"}, \
    {.name = "normalization", .type = LOOM_SETTING_ENUM, .offset = LOOM_GPT_AT(norm), \
     .flag = "--normalization", .names = "LayerNorm|RMSNorm", .dflt = LOOM_NORM_LAYERNORM, \
     .meta = "normalization", .load = LOOM_LOAD_ARCH, .help = "norm layer"}, \
    /* taken from the checkpoint on --load whatever the flag says */ \
    {.name = "norm_epsilon", .type = LOOM_SETTING_DOUBLE, .offset = LOOM_GPT_AT(norm_eps), \
     .flag = "--norm-epsilon", .dflt = 1e-5, .meta = "norm_epsilon", .load = LOOM_LOAD_CKPT, \
     .hf = {[LOOM_GPT_HF_GPT2] = {"layer_norm_epsilon", 0, 1e-5}, [LOOM_GPT_HF_LLAMA] = {"rms_norm_eps", 0, 1e-6}}, \
     .help = "norm epsilon"}, \
    /* end */

/* the SwiGLU MLP (GPT only) */
#define LOOM_GPT_ROWS_SWIGLU \
    {.name = "swiglu", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(swiglu), .flag = "--swiglu", \
     .meta = "swiglu", .load = LOOM_LOAD_ARCH, .help = "SwiGLU MLP instead of GELU"}, \
    /* end */

/* zero-centred norm weights */
#define LOOM_GPT_ROWS_NORM_1P \
    {.name = "apply_layernorm_1p", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(layernorm_1p), \
     .flag = "--apply-layernorm-1p", .meta = "apply_layernorm_1p", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_ARCH, \
     .note = ", norms zero-centred (1 + w)", \
     .help = "zero-centred norm weights: each norm's weight w starts at 0 and the norm scales by " \
             "1 + w"}, \
    /* end */

/* query-key norms (GPT only) */
#define LOOM_GPT_ROWS_QK_NORM \
    {.name = "qk_layernorm", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(qk_layernorm), \
     .flag = "--qk-layernorm", .meta = "qk_layernorm", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_ARCH, \
     .note = ", queries and keys normalised", \
     .help = "normalise each attention head's query and key vectors (the --normalization norm " \
             "over the head size, one weight for queries and one for keys per layer), before the " \
             "rotary embedding"}, \
    /* end */

/* the GELU's form by Megatron-LM's rule, and the position embedding's type (T5 has its own) */
#define LOOM_GPT_ROWS_GELU_POSEMB LOOM_GPT_ROWS_GELU LOOM_GPT_ROWS_POSEMB
#define LOOM_GPT_ROWS_GELU \
    {.name = "openai_gelu", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(in.openai_gelu), \
     .flag = "--openai-gelu", .load = LOOM_LOAD_FAMILY, \
     .help = "the GELU's tanh form in every case"}, \
    {.name = "no_bias_gelu_fusion", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(in.no_gelu_fusion), \
     .flag = "--no-bias-gelu-fusion", .load = LOOM_LOAD_FAMILY, \
     .help = "the GELU's exact (erf) form, as Megatron-LM computes it without its fused bias-GELU"}, \
    /* the form those two give (from_flags); absent from older checkpoints: tanh, all they had */ \
    {.name = "gelu", .type = LOOM_SETTING_ENUM, .offset = LOOM_GPT_AT(gelu), .names = "tanh|erf", \
     .dflt = LOOM_GELU_TANH, .meta = "gelu", .meta_flags = LOOM_META_OPTIONAL, \
     .load = LOOM_LOAD_FAMILY}, \
    /* end */
#define LOOM_GPT_ROWS_POSEMB \
    {.name = "position_embedding_type", .type = LOOM_SETTING_ENUM, .offset = LOOM_GPT_AT(posemb), \
     .flag = "--position-embedding-type", .names = "learned_absolute|rope|none", \
     .dflt = LOOM_POSEMB_LEARNED, .meta = "position_embedding_type", .load = LOOM_LOAD_ARCH, \
     .help = "position embedding"}, \
    /* end */

/* the rotary embedding's settings and the older position flags (GPT only) */
#define LOOM_GPT_ROWS_ROPE \
    /* the rotary settings shape no parameter: a flag given on --load changes them */ \
    {.name = "rotary_base", .type = LOOM_SETTING_DOUBLE, .offset = LOOM_GPT_AT(rope_theta), \
     .flag = "--rotary-base", .dflt = 10000, .meta = "rotary_base", .load = LOOM_LOAD_OVERRIDE, \
     .hf = {[LOOM_GPT_HF_LLAMA] = {"rope_theta", 0, 10000}}, .help = "rotary base theta"}, \
    {.name = "rotary_percent", .type = LOOM_SETTING_DOUBLE, .offset = LOOM_GPT_AT(rotary_percent), \
     .flag = "--rotary-percent", .dflt = 1, .meta = "rotary_percent", \
     .meta_flags = LOOM_META_OPTIONAL, .load = LOOM_LOAD_OVERRIDE, \
     .help = "share of each head's values that rotate: the first head size x this (an even " \
             "count), the rest pass through"}, \
    {.name = "use_rope_scaling", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(in.rope_scaling), \
     .flag = "--use-rope-scaling", .load = LOOM_LOAD_FAMILY, \
     .help = "rescale the rotary frequencies as Llama 3.1 does (by --rope-scaling-factor; " \
             "low/high frequency factors 1 and 4, original context 8192)"}, \
    {.name = "rotary_seq_len_interpolation_factor", .type = LOOM_SETTING_DOUBLE, \
     .offset = LOOM_GPT_AT(rope_interpolation), .flag = "--rotary-seq-len-interpolation-factor", \
     .dflt = 0, .meta = "rotary_seq_len_interpolation_factor", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_OVERRIDE, \
     .note = ", rotary positions divided by %g", \
     .help = "divide the rotary positions by this (linear interpolation to a longer context; 0 = " \
             "none)"}, \
    {.name = "rope_scaling_factor", .type = LOOM_SETTING_DOUBLE, \
     .offset = LOOM_GPT_AT(in.rope_scaling_factor), .flag = "--rope-scaling-factor", .dflt = 8, \
     .load = LOOM_LOAD_FAMILY, \
     .help = "Llama 3.1's rotary scaling factor (with --use-rope-scaling)"}, \
    {.name = "use_rotary_position_embeddings", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(in.use_rope), \
     .flag = "--use-rotary-position-embeddings", \
     .help = "as --position-embedding-type rope (older Megatron-LM)"}, \
    {.name = "no_position_embedding", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(in.no_posemb), \
     .flag = "--no-position-embedding", \
     .help = "no learned absolute position embedding (older Megatron-LM)"}, \
    /* end */

/* biases on the linear layers */
#define LOOM_GPT_ROWS_BIAS \
    {.name = "add_bias_linear", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(bias), \
     .flag = "--disable-bias-linear", .negate = 1, .dflt = 1, .meta = "add_bias_linear", \
     .load = LOOM_LOAD_ARCH, \
     .help = "no biases in linear layers (a GELU MLP then has the exact erf GELU, as in " \
             "Megatron-LM; --openai-gelu keeps the tanh form)"}, \
    /* end */

/* the qkv bias alone and the untied output layer (GPT only) */
#define LOOM_GPT_ROWS_QKV_BIAS_UNTIE \
    {.name = "add_qkv_bias", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(qkv_bias), \
     .flag = "--add-qkv-bias", .meta = "add_qkv_bias", .meta_flags = LOOM_META_OPTIONAL, \
     .load = LOOM_LOAD_ARCH, \
     .help = "a bias on the qkv product even with --disable-bias-linear (Qwen2's attention)"}, \
    {.name = "untie_embeddings_and_output_weights", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(untie), \
     .flag = "--untie-embeddings-and-output-weights", .meta = "untie_embeddings_and_output_weights", \
     .load = LOOM_LOAD_ARCH, .help = "separate output layer"}, \
    /* end */

/* dropouts and the initialisation */
#define LOOM_GPT_ROWS_DROPOUT_INIT \
    /* kept as trained, but the flags hold on --load */ \
    {.name = "hidden_dropout", .type = LOOM_SETTING_DOUBLE, .offset = LOOM_GPT_AT(hidden_dropout), \
     .flag = "--hidden-dropout", .dflt = 0.1, .meta = "hidden_dropout", \
     .hf = {[LOOM_GPT_HF_GPT2] = {"resid_pdrop", 0, 0}}, .help = "dropout on hidden states"}, \
    {.name = "attention_dropout", .type = LOOM_SETTING_DOUBLE, .offset = LOOM_GPT_AT(attention_dropout), \
     .flag = "--attention-dropout", .dflt = 0.1, .meta = "attention_dropout", \
     .hf = {[LOOM_GPT_HF_GPT2] = {"attn_pdrop", 0, 0}, [LOOM_GPT_HF_LLAMA] = {"attention_dropout", LOOM_HF_READ_ONLY, 0}}, \
     .help = "dropout on attention probabilities"}, \
    {.name = "init_method_std", .type = LOOM_SETTING_DOUBLE, .offset = LOOM_GPT_AT(init_std), \
     .flag = "--init-method-std", .dflt = 0.02, .meta = "init_method_std", \
     .hf = {[LOOM_GPT_HF_GPT2] = {"initializer_range", 0, 0.02}, [LOOM_GPT_HF_LLAMA] = {"initializer_range", 0, 0.02}}, \
     .help = "std of the normal initialisation"}, \
    {.name = "init_method_xavier_uniform", .type = LOOM_SETTING_BOOL, .offset = LOOM_GPT_AT(xavier_init), \
     .flag = "--init-method-xavier-uniform", \
     .help = "initialise every matrix uniform in +-sqrt(6 / (rows + columns)) (torch's " \
             "xavier_uniform_) instead of normal"}, \
    /* end */

#endif
