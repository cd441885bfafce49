/* A model family's Hugging Face form, as `loom convert` (src/ckpt/hf_convert.c) uses it.
 *
 * The conversion itself is generic: config.json's model_type (import) or meta.json's family
 * (export) picks the family's struct loom_hf_map, whose hooks turn config.json into the
 * configuration and back and say, for each parameter of the family's table, which Hugging Face
 * tensors hold it and where each of its elements is. The families here are those on loom's
 * transformer stack, whose configuration is struct loom_transformer_config (loom/transformer.h):
 * GPT's mapping (GPT-2, Llama, Qwen2, Qwen3) is src/models/gpt/gpt_hf.c, BERT's is
 * src/models/bert/bert_hf.c. The list of mappings is
 * src/models/model.c's (loom_hf_map_for_type, loom_hf_map_for_family). */
#ifndef LOOM_HF_MAP_H
#define LOOM_HF_MAP_H

#include <stdint.h>

#include "loom/model.h"
#include "loom/transformer.h"
#include "loom/status.h"

struct json_t;            /* jansson's */
struct loom_safetensors;  /* loom/safetensors.h */

/* Which of a family's Hugging Face architectures a conversion is, as the family's hooks decide
 * (GPT: gpt2 or llama) and the prefix of its tensor names where the family has one ("" or GPT-2's
 * "transformer.") */
struct loom_hf_form {
    int variant;
    const char *prefix;
};

/* The Hugging Face tensors behind one loom parameter (up to three: q, k and v) */
#define LOOM_HF_MAX_SOURCES 3
struct loom_hf_sources {
    char name[LOOM_HF_MAX_SOURCES][160];
    int64_t shape[LOOM_HF_MAX_SOURCES][2]; /* shape[k][1] == 0: one dimension */
    int n;
};

struct loom_hf_map {
    const char *family;              /* meta.json's "family" (a loom_family_config_find name) */
    const char *const *model_types;  /* config.json's model_type values it takes, NULL-ended */
    /* model_type values it knows only to refuse (config_read says why), NULL-ended; may be NULL */
    const char *const *refused_types;
    /* config.json (the object o, read from `path`, of model_type `type`) into c: every field
     * (defaults included), not yet finalized; the form. A one-line error for what is refused. */
    enum loom_status (*config_read)(struct json_t *o, const char *path, const char *type,
                                    struct loom_transformer_config *c, struct loom_hf_form *form);
    /* After config.json and the finalize step, with the weights' file open: what the tensors
     * present say (optional heads, name prefixes) and their checks. NULL: nothing. */
    enum loom_status (*weights_read)(const struct loom_safetensors *st, struct loom_transformer_config *c,
                                     struct loom_hf_form *form);
    /* Whether tensor `name` of the weights' file, not one of the sources of any parameter, is
     * one the mapping knows and leaves (buffers, tied copies weights_read checked); any other
     * is an error naming it. NULL: none. */
    int (*tensor_known)(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                        const char *name);
    /* A finalized configuration (from a checkpoint): whether Hugging Face has it, as which form;
     * else a one-line error saying why not */
    enum loom_status (*export_check)(const struct loom_transformer_config *c, struct loom_hf_form *form);
    /* config.json's keys for c (torch_dtype is the caller's) */
    void (*config_write)(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                         struct json_t *o);
    /* The tensors behind parameter p of c's table */
    enum loom_status (*sources)(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                                const struct loom_param *p, struct loom_hf_sources *s);
    /* Element (row, col) of p (col 0 for one dimension): the index of its source tensor and the
     * flat index in it, or -1 where none holds it (padded vocabulary rows: zero on import,
     * dropped on export) */
    int (*locate)(const struct loom_transformer_config *c, const struct loom_hf_form *form,
                  const struct loom_param *p, int64_t row, int64_t col, int64_t *flat);
    /* The family's parameter table of c (finalized) on one rank, nothing allocated: *params
     * (malloc'd; the caller frees it) and *nparams */
    enum loom_status (*table)(const struct loom_transformer_config *c, struct loom_param **params,
                              int *nparams);
};

/* The mapping that takes or refuses config.json's model_type `type`, or NULL */
const struct loom_hf_map *loom_hf_map_for_type(const char *type);
/* The mapping of family `family` ("gpt"), or NULL */
const struct loom_hf_map *loom_hf_map_for_family(const char *family);
/* "gpt2, llama, ...": every model_type some mapping takes (static storage) */
const char *loom_hf_map_type_names(void);

#endif
