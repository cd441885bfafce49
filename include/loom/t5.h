/* The T5 family (src/models/t5): Megatron-LM's T5, an encoder-decoder transformer.
 *
 * A micro-batch row (struct loom_micro, T = enc_seq + dec_seq positions) holds the encoder's
 * positions [0, enc_seq) then the decoder's [enc_seq, enc_seq + dec_seq): tokens are the
 * encoder's input then the decoder's input, labels -1 on the encoder's positions and the
 * decoder's targets (-1: no loss) on the others, padding_mask 1 on real positions (a prefix of
 * each part), token_types 0 on the encoder's and 1 on the decoder's.
 *
 * The model (configuration: struct loom_transformer_config's t5 part):
 *   a shared word embedding E [Vp, C] for both stacks; learned absolute positions (one table
 *   for both) or T5's relative position bias (one [buckets, NH] table per stack, added to the
 *   self-attention scores of every layer of the stack: bidirectional buckets in the encoder,
 *   causal ones in the decoder; none on cross-attention);
 *   encoder layer: x += proj(attn(LN1(x))) with the encoder's padding mask, x += MLP(LN2(x));
 *   then the encoder's final LayerNorm: enc_out;
 *   decoder layer: x += proj(causal attn(LN1(x))), x += cproj(xattn(q = LNc(x), k, v = enc_out))
 *   with the encoder's padding mask, x += MLP(LN2(x)); then the decoder's final LayerNorm;
 *   LM head: logits = lnf E^T + b (tied to the embedding, with a bias); lm loss = per
 *   micro-batch mean of the cross-entropy over the positions with a label.
 * Scores are scale q k^T (+ the bias), scale = 1/sqrt(HS). */
#ifndef LOOM_T5_H
#define LOOM_T5_H

#include <stdint.h>

#include "loom/model.h"

extern const struct loom_family loom_t5_family;

/* T5's relative position bucket (Mesh TensorFlow's and Hugging Face's rule) of key position minus
 * query position `rel`: bidirectional: half the buckets for keys after the query; then distances
 * below half the (remaining) buckets get one bucket each, larger ones logarithmically spaced
 * buckets up to max_distance, beyond which they share the last. */
int64_t loom_t5_relative_bucket(int64_t rel, int bidirectional, int64_t num_buckets,
                                int64_t max_distance);

#endif
