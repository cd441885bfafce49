/* The BERT family's samples for the trainer (struct loom_family_config_desc's open_source,
 * mock_source and data_tokenizer): Megatron-LM's BertDataset over a sentence-split --data-path,
 * read with the WordPiece tokenizer, or the synthetic samples of --mock-data. */
#include "loom/bert_dataset.h"
#include "loom/data.h"
#include "loom/tokenizer.h"
#include "loom/train.h"
#include "loom/settings.h"
#include "models/bert/bert_settings.h"

enum loom_status loom_bert_open_source(struct loom_sample_source *src,
                                       const struct loom_train_config *c,
                                       const struct loom_tokenizer *tok, int split,
                                       const char *path, const char *weights, int64_t n) {
    struct loom_bert_dataset_config dc;
    loom_bert_dataset_config_default(&dc);
    dc.data_path = path;
    dc.tokenizer = tok;
    dc.split = weights;
    dc.which = (enum loom_split)split;
    dc.num_samples = n;
    dc.seq_length = c->model.seq_length;
    dc.seed = c->seed;
    dc.short_seq_prob = c->short_seq_prob;
    dc.mask_prob = c->mask_prob;
    dc.binary_head = c->model.binary_head;
    return loom_bert_data_source(src, &dc, c->model.vocab_size);
}

enum loom_status loom_bert_mock_source_of(struct loom_sample_source *src,
                                          const struct loom_train_config *c, int split) {
    return loom_bert_mock_source(src, c->model.vocab_size, c->model.seq_length, c->seed, split,
                                 c->model.binary_head);
}

/* BERT's dataset (and T5's, built over it) reads the tokenizer's special ids and word pieces
 * while it opens */
enum loom_status loom_bert_data_tokenizer(const struct loom_train_config *c,
                                          struct loom_tokenizer **tok) {
    if (!c->vocab_file)
        return loom_fail(LOOM_ERR_INVALID_ARG, "--model %s with --data-path needs the WordPiece "
                         "vocabulary: --tokenizer-type BertWordPieceLowerCase (or "
                         "BertWordPieceCase) --vocab-file VOCAB",
                         c->family ? c->family->name : "bert");
    return loom_tokenizer_load(tok, c->tokenizer_type, c->vocab_file, c->merge_file);
}
