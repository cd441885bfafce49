/* The configuration of loom's transformer stack: the shapes and numerics of the layers that the
 * model families built on it share (the GPT family's decoders, loom/gpt.h, and the BERT family's
 * encoder form, loom/bert.h). Each of those families' settings table (loom/settings.h) has its
 * rows in this struct; the trainer's configuration (loom/train.h) carries one. */
#ifndef LOOM_TRANSFORMER_H
#define LOOM_TRANSFORMER_H

#include <stdint.h>

#include "loom/backend.h"

enum loom_norm { LOOM_NORM_LAYERNORM = 0, LOOM_NORM_RMSNORM };
/* RELATIVE: T5's relative position bias (the T5 family only) */
enum loom_posemb { LOOM_POSEMB_LEARNED = 0, LOOM_POSEMB_ROPE, LOOM_POSEMB_NONE, LOOM_POSEMB_RELATIVE };

struct loom_transformer_config {
    int64_t num_layers;      /* L */
    int64_t hidden;          /* C */
    int64_t heads;           /* NH */
    /* HS, the size of each query/key/value head (Megatron-LM's --kv-channels); 0 = hidden / heads.
     * The qkv projection is (NH + 2 NKV) HS wide and the output projection takes NH HS inputs,
     * which need not equal C. */
    int64_t head_size;
    int64_t query_groups;    /* NKV (= NH without grouped-query attention) */
    int64_t ffn_hidden;      /* F */
    int64_t seq_length;      /* T */
    int64_t max_positions;   /* rows of the learned position table */
    int64_t vocab_size;      /* real vocabulary */
    int64_t padded_vocab;    /* vocab_size rounded up to divisible_by * TP */
    int64_t divisible_by;    /* --make-vocab-size-divisible-by */
    enum loom_norm norm;
    double norm_eps;
    /* Megatron-LM's --apply-layernorm-1p (zero-centred gamma): each norm's weight parameter w is
     * initialised to 0 and the norm scales by 1 + w */
    int layernorm_1p;
    /* Megatron-LM's --qk-layernorm (Qwen3's q_norm, k_norm): each head's query and key vectors
     * normalised over the head size by the model's norm (its epsilon, layernorm_1p's weights),
     * with one weight (and LayerNorm bias) of HS for the queries and one for the keys per layer,
     * shared by the heads; after the qkv product, before the rotary embedding */
    int qk_layernorm;
    int swiglu;
    enum loom_gelu gelu; /* the GELU MLP's form (not used with swiglu) */
    enum loom_posemb posemb;
    double rope_theta;
    /* Megatron-LM's --rotary-percent: the share of each head's values that rotate (the first
     * HS * rotary_percent of them, an even count; 1 = all) */
    double rotary_percent;
    /* Llama 3.1's rescaling of the rotary frequencies (loom/rope.h): rope_factor 0 = none;
     * Megatron-LM's --use-rope-scaling takes --rope-scaling-factor (8) with low 1, high 4 and an
     * original context of 8192, Hugging Face's rope_scaling gives all four */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_positions;
    /* Megatron-LM's --rotary-seq-len-interpolation-factor: rotary positions divided by it (every
     * frequency, after the scaling above); 0 = none */
    double rope_interpolation;
    int bias;                /* biases on linear layers */
    int qkv_bias;            /* the qkv product's bias even without the others (--add-qkv-bias,
                                Qwen2's attention) */
    int xavier_init;         /* matrices drawn uniform in +-sqrt(6 / (rows + columns)) instead of
                                normal (--init-method-xavier-uniform; initialisation only) */
    int untie;               /* separate output layer */
    /* The encoder form (the BERT family; 0 for GPT's decoders). The transformer stack is the
     * same code; these change what is around it and how attention sees the keys:
     * encoder: bidirectional self-attention with the micro-batch's padding mask (a query sees
     *   the keys of its sample's real tokens) instead of the causal mask; layer names
     *   encoder.layers.{i}.*, encoder.final_layernorm.*;
     * num_tokentypes: rows of embedding.tokentype_embeddings.weight added to the word and
     *   position embeddings (BERT: 2; 0: none);
     * lm_head_transform: lm_head.dense (H -> H, bias), a GELU of form head_gelu and
     *   lm_head.layer_norm between the final norm and the output layer;
     * output_bias: output_layer.bias [padded vocabulary] added to the logits;
     * binary_head: pooler.dense (tanh of it at the first position of the final norm's output)
     *   and binary_head [2, H], the sentence-order loss (BERT without --bert-no-binary-head). */
    int encoder;
    int64_t num_tokentypes;
    int lm_head_transform, output_bias, binary_head;
    enum loom_gelu head_gelu;
    /* The encoder-decoder form (the T5 family, loom/t5.h; unused by the others): the encoder's
     * and the decoder's layers (0: num_layers) and sequence lengths, and the relative position
     * bias's buckets and largest distance (with posemb LOOM_POSEMB_RELATIVE). Its finalize sets
     * num_layers to enc_layers + dec_layers (the pipeline units: the encoder's layers, then the
     * decoder's) and seq_length to enc_seq + dec_seq (a micro-batch row: the encoder's positions,
     * then the decoder's). */
    struct loom_t5_config {
        int64_t enc_layers, dec_layers, enc_seq, dec_seq;
        int64_t rel_buckets, rel_max_distance;
    } t5;
    double hidden_dropout, attention_dropout;
    double init_std;
    /* Flags that give settings above without being one of their own (rows of GPT's settings
     * table, src/models/gpt/gpt_settings.c, whose from_flags hook turns them into the settings):
     * what `loom train` was given; not kept in checkpoints. */
    struct loom_transformer_flag_inputs {
        int gqa;                    /* --group-query-attention (query_groups counts only with it) */
        int64_t encoder_seq;        /* --encoder-seq-length (0: not given) */
        int use_rope, no_posemb;    /* --use-rotary-position-embeddings, --no-position-embedding */
        int openai_gelu, no_gelu_fusion; /* the GELU's form by Megatron-LM's rule */
        int rope_scaling;           /* --use-rope-scaling */
        double rope_scaling_factor; /* --rope-scaling-factor */
    } in;
    /* memory, not architecture: local layers (the last ones of the stage) that keep the MLP's
     * activation for the backward instead of remaking it from the pre-activation
     * (--kept-activation-layers; 0: remade in every layer) */
    int64_t kept_act_layers;
    /* layout, not architecture: the layers of the first and of the last pipeline stage
     * (Megatron-LM's --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers),
     * the other stages sharing the rest equally; 0: an equal share */
    int64_t first_stage_layers, last_stage_layers;
};

/* Head size HS: head_size, or hidden / heads when it is 0. */
static inline int64_t loom_transformer_head_size(const struct loom_transformer_config *c) {
    return c->head_size > 0 ? c->head_size : c->hidden / c->heads;
}

#endif
