/* Checkpoint conversion between loom and Hugging Face model directories.
 *
 * Hugging Face side: DIR/config.json + DIR/model.safetensors, fp32.
 *   GPT-2 ("model_type": "gpt2"): names wte, wpe, h.{i}.(...), ln_f (optionally prefixed "transformer."),
 *     Conv1D weights stored [in, out]; c_attn is [q | k | v] along its output.
 *   Llama ("model_type": "llama"): model.embed_tokens, model.layers.{i}.self_attn.{q,k,v,o}_proj,
 *     mlp.{gate,up,down}_proj, input_layernorm, post_attention_layernorm, model.norm, lm_head;
 *     Linear weights [out, in]; rotary with the rotate-half convention (as loom).
 *   Megatron-BERT ("model_type": "megatron-bert"): the BERT family's (src/models/bert/bert_hf.c).
 * The family's mapping (loom/hf_map.h) is picked by config.json's model_type or meta.json's
 * family.
 * loom side: a checkpoint directory (meta.json + model.safetensors), see loom/ckpt.h; loom's
 * qkv weight groups query heads with their key/value head (loom/backend.h). */
#ifndef LOOM_CONVERT_H
#define LOOM_CONVERT_H

#include "loom/status.h"

enum loom_status loom_convert_hf_to_loom(const char *hf_dir, const char *loom_dir);
enum loom_status loom_convert_loom_to_hf(const char *loom_dir, const char *hf_dir);

#endif
