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
_Static_assert(LOOM_MOE_FREQ_LEN == LOOM_SETTING_TEXT_LEN, "--moe-layer-freq is a TEXT setting");

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
/* mixture-of-experts MLPs (loom/moe.h), under Megatron-LM's flags and argument names */
#define LOOM_GPT_MOE_ROW(nm, ty, fld, fl, df, ld, hp) \
    {.name = nm, .type = ty, .offset = LOOM_GPT_AT(moe.fld), .flag = fl, .dflt = df, .meta = nm, \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = ld, .help = hp}
#define LOOM_GPT_ROWS_MOE \
    {.name = "num_experts", .type = LOOM_SETTING_INT, .offset = LOOM_GPT_AT(moe.num_experts), \
     .flag = "--num-experts", .dflt = 0, .meta = "num_experts", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_ARCH, \
     .note = ", MoE: %lld experts", \
     .help = "experts of each MoE layer (0 = no MoE layers: the dense MLP everywhere)"}, \
    {.name = "moe_layer_freq", .type = LOOM_SETTING_TEXT, .offset = LOOM_GPT_AT(moe.layer_freq), \
     .flag = "--moe-layer-freq", .names = "1", .meta = "moe_layer_freq", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_ARCH, \
     .note = " (MoE layers %s)", \
     .help = "which layers are MoE layers: N = every N-th from layer 0, or a list of 0/1 per " \
             "layer such as \"([0]*3+[1]*29)\""}, \
    LOOM_GPT_MOE_ROW("moe_ffn_hidden_size", LOOM_SETTING_INT, ffn_hidden, "--moe-ffn-hidden-size", \
                     0, LOOM_LOAD_ARCH, "an expert's MLP hidden size (0 = --ffn-hidden-size)"), \
    LOOM_GPT_MOE_ROW("moe_router_topk", LOOM_SETTING_INT, topk, "--moe-router-topk", 2, \
                     LOOM_LOAD_ARCH, "experts each token is routed to (k)"), \
    LOOM_GPT_MOE_ROW("moe_router_pre_softmax", LOOM_SETTING_BOOL, pre_softmax, \
                     "--moe-router-pre-softmax", 0, LOOM_LOAD_ARCH, \
                     "softmax over all experts before the top-k (the k probabilities not " \
                     "renormalised)"), \
    {.name = "moe_router_score_function", .type = LOOM_SETTING_ENUM, \
     .offset = LOOM_GPT_AT(moe.score), .flag = "--moe-router-score-function", \
     .names = "softmax|sigmoid", .meta = "moe_router_score_function", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_ARCH, \
     .help = "the router's score function"}, \
    LOOM_GPT_MOE_ROW("moe_router_topk_scaling_factor", LOOM_SETTING_DOUBLE, topk_scaling, \
                     "--moe-router-topk-scaling-factor", 0, LOOM_LOAD_ARCH, \
                     "factor on the routing probabilities (0 = none)"), \
    LOOM_GPT_MOE_ROW("moe_router_num_groups", LOOM_SETTING_INT, num_groups, \
                     "--moe-router-num-groups", 0, LOOM_LOAD_ARCH, \
                     "expert groups of group-limited routing (0 = none)"), \
    LOOM_GPT_MOE_ROW("moe_router_group_topk", LOOM_SETTING_INT, group_topk, \
                     "--moe-router-group-topk", 0, LOOM_LOAD_ARCH, \
                     "groups kept by group-limited routing"), \
    {.name = "moe_router_dtype", .type = LOOM_SETTING_ENUM, .offset = LOOM_GPT_AT(moe.router_dtype), \
     .flag = "--moe-router-dtype", .names = "fp32|fp64", .meta = "moe_router_dtype", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_OVERRIDE, \
     .help = "the router's product in this type (its scores and losses are in double)"}, \
    {.name = "moe_router_load_balancing_type", .type = LOOM_SETTING_ENUM, \
     .offset = LOOM_GPT_AT(moe.balance), .flag = "--moe-router-load-balancing-type", \
     .names = "aux_loss|seq_aux_loss|none", .meta = "moe_router_load_balancing_type", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_OVERRIDE, \
     .help = "the load-balancing loss"}, \
    LOOM_GPT_MOE_ROW("moe_aux_loss_coeff", LOOM_SETTING_DOUBLE, aux_coeff, "--moe-aux-loss-coeff", \
                     0, LOOM_LOAD_OVERRIDE, "weight of the load-balancing loss"), \
    LOOM_GPT_MOE_ROW("moe_z_loss_coeff", LOOM_SETTING_DOUBLE, z_coeff, "--moe-z-loss-coeff", 0, \
                     LOOM_LOAD_OVERRIDE, "weight of the router's z-loss (0 = none)"), \
    LOOM_GPT_MOE_ROW("moe_router_enable_expert_bias", LOOM_SETTING_BOOL, expert_bias, \
                     "--moe-router-enable-expert-bias", 0, LOOM_LOAD_ARCH, \
                     "aux-loss-free balancing: a bias per expert on the sigmoid scores for the " \
                     "selection, updated after each global batch"), \
    LOOM_GPT_MOE_ROW("moe_router_bias_update_rate", LOOM_SETTING_DOUBLE, bias_rate, \
                     "--moe-router-bias-update-rate", 1e-3, LOOM_LOAD_OVERRIDE, \
                     "the expert bias's step per global batch"), \
    LOOM_GPT_MOE_ROW("moe_expert_capacity_factor", LOOM_SETTING_DOUBLE, capacity_factor, \
                     "--moe-expert-capacity-factor", 0, LOOM_LOAD_OVERRIDE, \
                     "an expert takes at most ceil(tokens x k / experts x this) tokens (0 = " \
                     "dropless)"), \
    {.name = "moe_token_drop_policy", .type = LOOM_SETTING_ENUM, \
     .offset = LOOM_GPT_AT(moe.drop_policy), .flag = "--moe-token-drop-policy", \
     .names = "probs|position", .meta = "moe_token_drop_policy", \
     .meta_flags = LOOM_META_OPTIONAL | LOOM_META_IF_SET, .load = LOOM_LOAD_OVERRIDE, \
     .help = "which tokens over the capacity are dropped: the lowest probabilities or the " \
             "latest positions"}, \
    LOOM_GPT_MOE_ROW("moe_pad_expert_input_to_capacity", LOOM_SETTING_BOOL, pad_to_capacity, \
                     "--moe-pad-expert-input-to-capacity", 0, LOOM_LOAD_OVERRIDE, \
                     "every expert computes exactly its capacity of rows"), \
    LOOM_GPT_MOE_ROW("moe_shared_expert_intermediate_size", LOOM_SETTING_INT, shared_ffn, \
                     "--moe-shared-expert-intermediate-size", 0, LOOM_LOAD_ARCH, \
                     "hidden size of the shared experts' MLP, which every token takes (0 = " \
                     "none)"), \
    LOOM_GPT_MOE_ROW("moe_shared_expert_gate", LOOM_SETTING_BOOL, shared_gate, \
                     "--moe-shared-expert-gate", 0, LOOM_LOAD_ARCH, \
                     "the shared experts' output times sigmoid(x . g)"), \
    /* end */

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
