/* BERT pretraining samples (Megatron-LM's BertDataset) over a sentence-split indexed dataset.
 *
 * The input is ONE indexed dataset (PREFIX.bin/.idx, not a blend) whose sequences are
 * sentences and whose document index groups them into documents, as `loom preprocess
 * --split-sentences` writes it (PREFIX_{key}_sentence). --split cuts the DOCUMENTS (not the
 * sentences) into train/valid/test with loom_data_split_bounds, as Megatron's BERT does.
 *
 * Sample mapping (Megatron's build_mapping), built at open for the chosen split:
 *  - each document's sentences are walked in order, accumulating sentences until their tokens
 *    reach the target length; a sample then ends if at least `min` sentences were taken (2 with
 *    the binary head, 1 without) and more than one sentence is left in the document; the
 *    document's last sentence always ends a sample (so a sample never leaves one sentence
 *    behind). Target length: max_seq_length - 3 (room for [CLS] [SEP] [SEP]; in general
 *    max_seq_length - added_tokens), or, with probability short_seq_prob, uniform in
 *    [2, max_seq_length - 3], drawn again after each sample;
 *  - documents with fewer than `min` sentences are skipped, and so are documents of 2 or more
 *    sentences holding a sentence longer than LOOM_BERT_LONG_SENTENCE tokens (Megatron's
 *    LONG_SENTENCE_LEN; a longer single-sentence document is kept and truncated);
 *  - whole epochs over the split's documents are built (each drawing new target lengths) until
 *    there are at least num_samples samples (num_samples 0: one epoch), then the samples are
 *    shuffled. A mapping entry is (first sentence, end sentence, target length).
 *
 * Sample k (Megatron's build_training_sample, create_masked_lm_predictions with whole words and
 * n-grams up to 3, and pad_and_convert_to_numpy):
 *  - segments: with the binary head the n >= 2 sentences are split at a_end, uniform in
 *    [1, n-1] (1 when n = 2): A = sentences [0, a_end), B = the rest; with probability 0.5 A and
 *    B swap and is_random = 1 (sentence-order prediction). Without it A is every sentence, B is
 *    empty and is_random = 0;
 *  - truncation to the target length: while len(A) + len(B) > target, one token goes from the
 *    longer segment (B on a tie), from its front or back with probability 0.5 each;
 *  - tokens [CLS] A [SEP] B [SEP] ([CLS] A [SEP] without B), token types 0 for [CLS] A [SEP] and
 *    1 for B [SEP];
 *  - masking: the candidates are whole words (a token and the "##" pieces that follow it; a
 *    "##" piece right after [CLS] or [SEP] starts a word of its own), [CLS] and [SEP] never.
 *    Budget num_to_predict = min(mask_prob * target, max(1, round_half_even(len(tokens) *
 *    mask_prob))). The words are shuffled; for each in turn (until the budget is reached) n is
 *    drawn from {1, 2, 3} with probability proportional to 1/n (6:3:2; only n up to the words
 *    left from it), the span is its n consecutive words, shortened word by word while it
 *    exceeds the budget, skipped if even one word exceeds it or if it touches a masked token.
 *    Each token of a taken span: 80% [MASK], 10% kept, 10% a uniformly random vocabulary id;
 *  - padding to seq_length with [PAD].
 *
 * Every random choice is Philox (loom/rng.h) keyed by (seed, split, purpose, index): the mapping
 * by the seed, sample k by (seed, split, k) alone. A sample does not depend on which samples
 * were read before it or by whom: any data-parallel layout reads the same samples.
 *
 * Differences from Megatron-LM: numpy's/mt19937's draws are replaced by Philox ones (the same
 * distributions, not the same numbers); the short target is taken with probability
 * short_seq_prob itself (Megatron uses 1 / round(1 / short_seq_prob)); an n-gram is drawn only
 * among the lengths that fit in the words left (Megatron clips the span at the end instead); a
 * "##" piece after [SEP] is not joined to the word before the [SEP]; nothing is cached on disk.
 *
 * Thread safety: an opened dataset is read-only; threads may call get at once, each with its
 * own struct loom_bert_sample.
 */
#ifndef LOOM_BERT_DATASET_H
#define LOOM_BERT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "loom/data.h"
#include "loom/status.h"
#include "loom/tokenizer.h"

/* Documents of 2+ sentences holding a sentence longer than this are skipped (Megatron's). */
#define LOOM_BERT_LONG_SENTENCE 512
/* Longest masked span, in whole words (Megatron's max_ngrams). */
#define LOOM_BERT_MAX_NGRAM 3

struct loom_bert_dataset_config {
    const char *data_path;    /* PREFIX of one indexed dataset (sentence-split) */
    const struct loom_tokenizer *tokenizer; /* WordPiece (BertWordPieceLowerCase or
                                             * BertWordPieceCase): special ids, "##" pieces,
                                             * vocabulary size; read during open only */
    const char *split;        /* --split over documents (NULL: "969,30,1") */
    enum loom_split which;    /* the split to build */
    int64_t num_samples;      /* at least this many samples (>= 0; 0: exactly one epoch) */
    int64_t seq_length;       /* --seq-length (max_seq_length), >= 5 */
    uint64_t seed;            /* --seed */
    double short_seq_prob;    /* [0, 1], default 0.1 */
    double mask_prob;         /* --mask-prob, masked_lm_prob, [0, 1], default 0.15 */
    int binary_head;          /* 1 (default): two segments and SOP; 0: --bert-no-binary-head */
    int64_t added_tokens;     /* tokens a sample adds to its sentences, kept out of the
                               * mapping's target lengths: 3 (default, BERT's [CLS] [SEP]
                               * [SEP]) or 2 (T5's, Megatron-LM's max_seq_length - 2);
                               * loom_bert_dataset_get needs 3 */
};

/* Megatron's defaults: split "969,30,1", train split, seq_length 512, seed 1234,
 * short_seq_prob 0.1, mask_prob 0.15, binary head, 3 added tokens; data_path, tokenizer NULL;
 * num_samples 0. */
void loom_bert_dataset_config_default(struct loom_bert_dataset_config *cfg);

/* One sample, host arrays of seq_length T each (allocated by loom_bert_sample_alloc). */
struct loom_bert_sample {
    int64_t seq_length;    /* T */
    int32_t *tokens;       /* [CLS] A [SEP] B [SEP] [PAD]...: ids, masked positions replaced */
    int32_t *labels;       /* the original id at masked positions, -1 elsewhere */
    int32_t *loss_mask;    /* 1 at masked positions, 0 elsewhere */
    int32_t *token_types;  /* 0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding */
    int32_t *padding_mask; /* 1 for the real tokens, 0 for padding */
    int is_random;         /* 1 when A and B were swapped (sentence-order label) */
    int64_t num_tokens;    /* real tokens (the 1s of padding_mask) */
    /* scratch reused by loom_bert_dataset_get */
    int32_t *work_;
    size_t work_cap_;
};
enum loom_status loom_bert_sample_alloc(struct loom_bert_sample *s, int64_t seq_length);
void loom_bert_sample_free(struct loom_bert_sample *s);

/* What get decided for a sample (tests and inspection). */
struct loom_bert_sample_stats {
    int64_t first_sentence;       /* the mapping entry: sentences [first, end) */
    int64_t end_sentence;
    int64_t target_length;        /* its target (tokens of A + B) */
    int64_t a_sentences;          /* a_end: sentences in the first segment before any swap */
    int64_t len_a, len_b;         /* segment lengths after truncation (after the swap) */
    int truncated;                /* 1 when tokens were removed */
    double num_to_predict;        /* the masking budget */
    int64_t num_words;            /* candidate whole words */
    int64_t num_masked;           /* tokens masked (labels set) */
    int64_t num_mask_token;       /* ... replaced by [MASK] */
    int64_t num_random_token;     /* ... replaced by a random id */
    int64_t num_kept_token;       /* ... kept */
    int64_t ngram_drawn[LOOM_BERT_MAX_NGRAM + 1]; /* n drawn (index n), before any backing off */
    int64_t ngram_taken[LOOM_BERT_MAX_NGRAM + 1]; /* spans masked, by words after backing off */
};

struct loom_bert_dataset;

/* Opens the dataset and builds the mapping. Errors (one line each, LOOM_ERR_INVALID_ARG unless
 * said): a bad config value (naming the flag and what is valid), a tokenizer without
 * [CLS]/[SEP]/[MASK]/[PAD] (not WordPiece), the files (LOOM_ERR_IO / LOOM_ERR_FORMAT from
 * loom_indexed_open), a split without documents, and a split that yields no sample: with the
 * binary head, a dataset of one sequence per document (not preprocessed with
 * --split-sentences) is refused so, naming --split-sentences and --bert-no-binary-head. */
enum loom_status loom_bert_dataset_open(struct loom_bert_dataset **out,
                                        const struct loom_bert_dataset_config *cfg);
void loom_bert_dataset_free(struct loom_bert_dataset *ds);

/* Samples in the mapping: every sample of the epochs built (>= num_samples). */
int64_t loom_bert_dataset_len(const struct loom_bert_dataset *ds);
int64_t loom_bert_dataset_seq_length(const struct loom_bert_dataset *ds);
int64_t loom_bert_dataset_num_epochs(const struct loom_bert_dataset *ds);
/* The split's documents [begin, end) of the dataset's document index, and how many of them
 * the mapping uses (not skipped). */
void loom_bert_dataset_documents(const struct loom_bert_dataset *ds, int64_t *begin,
                                 int64_t *end, int64_t *used);
/* Mapping entry of sample k, 0 <= k < len. */
enum loom_status loom_bert_dataset_mapping(const struct loom_bert_dataset *ds, int64_t k,
                                           int64_t *first_sentence, int64_t *end_sentence,
                                           int64_t *target_length);

/* The ids of sample k's sentences (its mapping entry), one after another, into *ids (realloc'd
 * to *cap entries as needed; it may start as NULL with *cap = 0): *n ids, and the entry's
 * target length. The other samples built over the same mapping (T5's span corruption) start
 * here. Ids outside the tokenizer's vocabulary are a LOOM_ERR_FORMAT error. */
enum loom_status loom_bert_dataset_sentences(const struct loom_bert_dataset *ds, int64_t k,
                                             int32_t **ids, size_t *cap, int64_t *n,
                                             int64_t *target_length);
/* 1 when id is a "##" continuation piece of the tokenizer's vocabulary (a whole word is a token
 * and the pieces after it), else 0. */
int loom_bert_dataset_is_piece(const struct loom_bert_dataset *ds, int32_t id);

/* Sample k, 0 <= k < len, into `out` (allocated for this dataset's seq_length). A token id of
 * the file outside the tokenizer's vocabulary is a LOOM_ERR_FORMAT error. */
enum loom_status loom_bert_dataset_get(const struct loom_bert_dataset *ds, int64_t k,
                                       struct loom_bert_sample *out);
/* The same, also filling *stats (may be NULL). */
enum loom_status loom_bert_dataset_get_stats(const struct loom_bert_dataset *ds, int64_t k,
                                             struct loom_bert_sample *out,
                                             struct loom_bert_sample_stats *stats);

#endif
