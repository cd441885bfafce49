/* T5's settings table and family description (src/models/t5/t5_settings.c); see loom/settings.h.
 * Its configuration is struct loom_transformer_config with its t5 part. */
#ifndef LOOM_T5_SETTINGS_H
#define LOOM_T5_SETTINGS_H

#include "loom/settings.h"
#include "loom/transformer.h"

extern const struct loom_family_config_desc loom_t5_config_desc;

/* its synthetic samples for the trainer (src/models/t5/t5_data.c) */
enum loom_status loom_t5_mock_source_of(struct loom_sample_source *src,
                                        const struct loom_train_config *c, int split);

/* its samples over a dataset: span corruption (src/models/t5/t5_spans.c) */
enum loom_status loom_t5_open_source(struct loom_sample_source *src,
                                     const struct loom_train_config *c,
                                     const struct loom_tokenizer *tok, int split,
                                     const char *path, const char *weights, int64_t n);

#endif
