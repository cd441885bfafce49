/* The GPT family's samples for the trainer (struct loom_family_config_desc's open_source and
 * mock_source): Megatron's GPT dataset over --data-path, or the synthetic sequences of
 * --mock-data; next-token labels either way. */
#include "loom/data.h"
#include "loom/train.h"
#include "models/gpt/gpt_settings.h"

enum loom_status loom_gpt_open_source(struct loom_sample_source *src,
                                      const struct loom_train_config *c,
                                      const struct loom_tokenizer *tok, int split,
                                      const char *path, const char *weights, int64_t n) {
    (void)tok;
    const struct loom_gpt_dataset_config dc = {
        .data_path = path,
        .split = weights,
        .which = (enum loom_split)split,
        .num_samples = n,
        .seq_length = c->model.seq_length,
        .seed = c->seed,
        .per_split = c->train_data_path != NULL,
        .cache_path = c->data_cache_path,
        .tokenizer_type = c->tokenizer_type,
        .vocab_file = c->vocab_file,
        .merge_file = c->merge_file,
    };
    return loom_gpt_data_source(src, &dc, c->model.vocab_size);
}

enum loom_status loom_gpt_mock_source(struct loom_sample_source *src,
                                      const struct loom_train_config *c, int split) {
    return loom_mock_source(src, c->model.vocab_size, c->model.seq_length, c->seed, split);
}
