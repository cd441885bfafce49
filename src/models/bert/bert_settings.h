/* BERT's settings table and family description (src/models/bert/bert_settings.c); see
 * loom/settings.h. Its configuration is struct loom_transformer_config in the encoder form. */
#ifndef LOOM_BERT_SETTINGS_H
#define LOOM_BERT_SETTINGS_H

#include "loom/gpt.h"
#include "loom/settings.h"

extern const struct loom_setting loom_bert_settings[];
extern const int loom_bert_num_settings;
extern const struct loom_family_config_desc loom_bert_config_desc;

/* its samples for the trainer (src/models/bert/bert_data.c) */
struct loom_sample_source;
struct loom_train_config;
struct loom_tokenizer;
enum loom_status loom_bert_open_source(struct loom_sample_source *src,
                                       const struct loom_train_config *c,
                                       const struct loom_tokenizer *tok, int split,
                                       const char *path, const char *weights, int64_t n);
enum loom_status loom_bert_mock_source_of(struct loom_sample_source *src,
                                          const struct loom_train_config *c, int split);
enum loom_status loom_bert_data_tokenizer(const struct loom_train_config *c,
                                          struct loom_tokenizer **tok);

#endif
