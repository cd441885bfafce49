/* BERT's settings table and family description (src/models/bert/bert_settings.c); see
 * loom/settings.h. Its configuration is struct loom_gpt_config in the encoder form. */
#ifndef LOOM_BERT_SETTINGS_H
#define LOOM_BERT_SETTINGS_H

#include "loom/gpt.h"
#include "loom/settings.h"

extern const struct loom_setting loom_bert_settings[];
extern const int loom_bert_num_settings;
extern const struct loom_family_config_desc loom_bert_config_desc;

#endif
