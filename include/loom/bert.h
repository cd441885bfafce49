/* The BERT family (src/models/bert): Megatron-LM's BERT on the transformer stack of the GPT
 * family in its encoder form (loom/gpt.h's struct loom_transformer_config: encoder, num_tokentypes,
 * lm_head_transform, output_bias, binary_head), with BERT's LM head, pooler and sentence-order
 * head. A struct loom_model of the family is a struct loom_gpt. */
#ifndef LOOM_BERT_H
#define LOOM_BERT_H

#include "loom/gpt.h"

extern const struct loom_family loom_bert_family;
/* Its Hugging Face form, Megatron-BERT (loom/hf_map.h; src/models/bert/bert_hf.c) */
struct loom_hf_map;
extern const struct loom_hf_map loom_bert_hf_map;

#endif
