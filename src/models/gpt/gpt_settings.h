/* GPT's settings table and family description (src/models/gpt_settings.c); see loom/settings.h. */
#ifndef LOOM_GPT_SETTINGS_H
#define LOOM_GPT_SETTINGS_H

#include "loom/gpt.h"
#include "loom/settings.h"

/* Hugging Face dialects of GPT's rows (struct loom_setting's hf[]) */
enum { LOOM_GPT_HF_GPT2 = 0, LOOM_GPT_HF_LLAMA = 1 };

extern const struct loom_setting loom_gpt_settings[];
extern const int loom_gpt_num_settings;
extern const struct loom_family_config_desc loom_gpt_config_desc;

/* its samples for the trainer (src/models/gpt/gpt_data.c) */
struct loom_sample_source;
struct loom_train_config;
struct loom_tokenizer;
enum loom_status loom_gpt_open_source(struct loom_sample_source *src,
                                      const struct loom_train_config *c,
                                      const struct loom_tokenizer *tok, int split,
                                      const char *path, const char *weights, int64_t n);
enum loom_status loom_gpt_mock_source(struct loom_sample_source *src,
                                      const struct loom_train_config *c, int split);

#endif
