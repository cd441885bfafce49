/* The GPT family's Hugging Face mapping (src/models/gpt/gpt_hf.c; loom/hf_map.h). */
#ifndef LOOM_GPT_HF_H
#define LOOM_GPT_HF_H

#include "loom/hf_map.h"

extern const struct loom_hf_map loom_gpt_hf_map;
/* The parameter table of c (finalized) on one rank, nothing allocated: *params (the caller frees
 * it) and *nparams. The table of every family on the transformer stack (struct loom_hf_map's
 * table hook of GPT's and BERT's mappings). */
enum loom_status loom_gpt_hf_table(const struct loom_transformer_config *c,
                                   struct loom_param **params, int *nparams);

#endif
