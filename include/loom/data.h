/* Training data: Megatron indexed datasets (.bin/.idx), the GPT sample index (split, epochs,
 * shuffles, blends) and the JSON-lines preprocessor behind `loom preprocess`.
 *
 * File format: see FORMATS.md ("Megatron indexed dataset"). A "sequence" is one token array of
 * the .bin; a "document" is a run of sequences given by the document index. Files written by
 * `loom preprocess` have one sequence per non-empty document.
 *
 * Thread safety: an opened struct loom_indexed and a built struct loom_gpt_dataset are read-only;
 * any number of threads may read from them at once. Builders are single-threaded.
 */
#ifndef LOOM_DATA_H
#define LOOM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"

/* ------------------------------------------------------------------------------------------ */
/* Indexed dataset                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Element type codes of the .idx header (the values are the on-disk codes). */
enum loom_idx_dtype {
    LOOM_IDX_DTYPE_U8 = 1,
    LOOM_IDX_DTYPE_I8 = 2,
    LOOM_IDX_DTYPE_I16 = 3,
    LOOM_IDX_DTYPE_I32 = 4,
    LOOM_IDX_DTYPE_I64 = 5,
    LOOM_IDX_DTYPE_F64 = 6,
    LOOM_IDX_DTYPE_F32 = 7,
    LOOM_IDX_DTYPE_U16 = 8,
};

/* Bytes per element; 0 for a code that is not one of the above. */
size_t loom_idx_dtype_size(int code);
/* "u8", "i8", "i16", "i32", "i64", "f64", "f32", "u16"; "?" for an unknown code. */
const char *loom_idx_dtype_name(int code);
/* The dtype Megatron's preprocess picks for a vocabulary: u16 below 65500 tokens, else i32. */
enum loom_idx_dtype loom_idx_dtype_for_vocab(int64_t vocab_size);

/* Reader. Both files are memory-mapped; opening validates everything that can be validated
 * without reading the token data (header, sizes of both files, offsets against lengths,
 * document index), and any inconsistency is a one-line LOOM_ERR_FORMAT (or LOOM_ERR_IO) error
 * naming the file and what is wrong. */
struct loom_indexed;

/* Open PREFIX.idx and PREFIX.bin. */
enum loom_status loom_indexed_open(struct loom_indexed **out, const char *prefix);
void loom_indexed_free(struct loom_indexed *ds);

const char *loom_indexed_prefix(const struct loom_indexed *ds);
enum loom_idx_dtype loom_indexed_dtype(const struct loom_indexed *ds);
/* S: number of sequences. */
int64_t loom_indexed_num_sequences(const struct loom_indexed *ds);
/* D - 1: number of documents. */
int64_t loom_indexed_num_documents(const struct loom_indexed *ds);
/* Total number of tokens (elements) in the .bin. */
int64_t loom_indexed_num_tokens(const struct loom_indexed *ds);
/* Length in tokens of sequence i, 0 <= i < S (i out of range aborts: a caller's bug). */
int64_t loom_indexed_sequence_length(const struct loom_indexed *ds, int64_t i);
/* Entry k of the document index, 0 <= k <= num_documents: document k is sequences
 * [doc_index(k), doc_index(k+1)). */
int64_t loom_indexed_doc_index(const struct loom_indexed *ds, int64_t k);
/* 1 when the .idx carries the optional per-sequence mode array. */
int loom_indexed_has_modes(const struct loom_indexed *ds);
/* Mode byte of sequence i (0 when the file has no modes). */
int loom_indexed_mode(const struct loom_indexed *ds, int64_t i);

/* Raw view of sequence i: pointer into the mapped .bin (NOT aligned to the element size: read
 * with memcpy) and its length in elements. */
enum loom_status loom_indexed_get(const struct loom_indexed *ds, int64_t i, const void **data,
                                  int64_t *len);
/* Copy tokens [offset, offset+count) of sequence i into out[count], converting any integer
 * dtype to int32. Errors: indices out of range (LOOM_ERR_INVALID_ARG), a float dtype or a value
 * that does not fit int32 (LOOM_ERR_FORMAT). */
enum loom_status loom_indexed_read(const struct loom_indexed *ds, int64_t i, int64_t offset,
                                   int64_t count, int32_t *out);

/* Writer. Tokens go to temporary files next to the destination (PREFIX.bin.tmp.<pid>.<n>,
 * PREFIX.idx.tmp.<pid>.<n>); finish fsyncs both and renames them into place, .bin first then
 * .idx, so a reader never sees an .idx without its complete .bin. Abandoning a builder (free
 * without finish, or any failure) removes the temporaries and leaves existing files alone. */
struct loom_indexed_builder;

/* dtype: any integer code (u8, i8, i16, i32, i64, u16). */
enum loom_status loom_indexed_builder_init(struct loom_indexed_builder **out, const char *prefix,
                                           enum loom_idx_dtype dtype);
/* Append one sequence (n may be 0). A token that does not fit the dtype is LOOM_ERR_INVALID_ARG. */
enum loom_status loom_indexed_builder_add_sequence(struct loom_indexed_builder *b,
                                                   const int32_t *tokens, int64_t n);
/* Close the current document (the sequences added since the previous end_document; may be none,
 * which records an empty document, as Megatron does for an empty text). */
enum loom_status loom_indexed_builder_end_document(struct loom_indexed_builder *b);
/* add_sequence + end_document. */
enum loom_status loom_indexed_builder_add_document(struct loom_indexed_builder *b,
                                                   const int32_t *tokens, int64_t n);
int64_t loom_indexed_builder_num_sequences(const struct loom_indexed_builder *b);
int64_t loom_indexed_builder_num_tokens(const struct loom_indexed_builder *b);
/* Write the .idx temporary and fsync both temporaries; nothing is renamed yet. A document left
 * open is closed first. Lets a caller that writes several datasets make all of them durable
 * before publishing any. Idempotent. */
enum loom_status loom_indexed_builder_flush(struct loom_indexed_builder *b);
/* flush (if not done), rename PREFIX.bin then PREFIX.idx into place, fsync the directory. */
enum loom_status loom_indexed_builder_finish(struct loom_indexed_builder *b);
/* Release; removes temporaries unless finish succeeded. NULL is fine. */
void loom_indexed_builder_free(struct loom_indexed_builder *b);

/* ------------------------------------------------------------------------------------------ */
/* Train/valid/test split and blends                                                          */
/* ------------------------------------------------------------------------------------------ */

enum loom_split { LOOM_SPLIT_TRAIN = 0, LOOM_SPLIT_VALID, LOOM_SPLIT_TEST, LOOM_SPLIT_COUNT };

/* Parse --split ("969,30,1", "98/2/0", "1"): up to three non-negative numbers separated by ','
 * or '/', missing ones are 0, normalised as Megatron's normalize() (sum must be > 0). */
enum loom_status loom_data_parse_split(const char *split, double weights[3]);
/* Current Megatron-core's split matrix over n documents (see data_split.c): split s is
 * [bounds[s], bounds[s+1]); present[s] (may be NULL) is 0 for a split of weight 0, which is
 * absent (not built, not evaluated). */
enum loom_status loom_data_split_bounds(const char *split, int64_t n, int64_t bounds[4],
                                        int present[3]);
/* numpy.sum over n doubles (pairwise summation, bit for bit), and w / numpy.sum(w) in place. */
double loom_data_np_sum(const double *a, int64_t n);
void loom_data_normalize(double *w, int64_t n);

/* Parse --data-path: "PREFIX" (one dataset, *weights[0] = 1, *is_blend = 0) or
 * "W1 P1 W2 P2 ..." (weights >= 0, normalised to sum 1, *is_blend = 1). Release the returned
 * arrays with loom_data_blend_free. */
enum loom_status loom_data_parse_blend(const char *data_path, int *n, char ***prefixes,
                                       double **weights, int *is_blend);
void loom_data_blend_free(int n, char **prefixes, double *weights);

/* ------------------------------------------------------------------------------------------ */
/* GPT dataset (Megatron GPTDataset + BlendedDataset semantics)                               */
/* ------------------------------------------------------------------------------------------ */

/* One split (train, valid or test) of --data-path. A sample is seq_length+1 consecutive tokens
 * (inputs are [0, T), labels [1, T+1)); samples run across document boundaries, consecutive
 * samples share one token, documents are shuffled, as many epochs are built as the requested
 * number of samples needs, and the sample order is shuffled, everything keyed by `seed` only:
 * sample k is the same whatever the number of data-parallel ranks reading the dataset. */
struct loom_gpt_dataset;

struct loom_gpt_dataset_config {
    const char *data_path; /* --data-path: "PREFIX" or "W1 P1 W2 P2 ..." */
    const char *split;     /* --split, e.g. "969,30,1" (NULL: "969,30,1", Megatron's default) */
    enum loom_split which; /* the split to build */
    int64_t num_samples;   /* samples the trainer will draw from this split (>= 0) */
    int64_t seq_length;    /* --seq-length T (> 0) */
    uint64_t seed;         /* --seed (0 .. 2^32-1: numpy's RandomState(seed)) */
    int per_split;         /* data_path is this split's own dataset(s), whole (--train-data-path,
                              --valid-data-path, --test-data-path); `split` unused */
    const char *cache_path; /* --data-cache-path: Megatron's index cache; NULL: none */
    /* the tokenizer, as the cache's description names it (NULL where not given) */
    const char *tokenizer_type, *vocab_file, *merge_file;
};

/* Builds the indices (document, sample and shuffle index; for a blend, the dataset and dataset
 * sample index), or reads them from cache_path. A split of weight 0 or with no documents is an
 * error naming it (the caller leaves out a split that is absent). */
enum loom_status loom_gpt_dataset_open(struct loom_gpt_dataset **out,
                                       const struct loom_gpt_dataset_config *cfg);
void loom_gpt_dataset_free(struct loom_gpt_dataset *ds);
/* The documents of split `which` (--split weights `split`, NULL for the default) over every
 * dataset of data_path, as loom_gpt_dataset_open would take them; *present 0 (and *ndocs 0) for
 * a split of weight 0. */
enum loom_status loom_data_split_documents(const char *data_path, const char *split,
                                          enum loom_split which, int64_t *ndocs, int *present);
/* 1 when every index of the dataset was read from --data-cache-path rather than built */
int loom_gpt_dataset_from_cache(const struct loom_gpt_dataset *ds);

/* Number of samples available: for one dataset, every sample of the epochs built (>=
 * num_samples, as Megatron's GPTDataset); for a blend, sum over datasets of
 * ceil(num_samples * w_d) (as its BlendedDataset). */
int64_t loom_gpt_dataset_len(const struct loom_gpt_dataset *ds);
int64_t loom_gpt_dataset_seq_length(const struct loom_gpt_dataset *ds);
/* Sample k of the global order, 0 <= k < len: tokens_out[seq_length + 1]. */
enum loom_status loom_gpt_dataset_get(const struct loom_gpt_dataset *ds, int64_t k,
                                      int32_t *tokens_out);

/* Which global sample a data-parallel rank reads, as Megatron's pretraining sampler: the
 * `consumed` samples before this micro-step are skipped, then each of the dp ranks takes a
 * contiguous block of micro_batch samples, rank r the r-th block. Element j of rank r's
 * micro-batch is global sample consumed + r * micro_batch + j. */
static inline int64_t loom_data_sample_index(int64_t consumed, int64_t micro_batch,
                                             int64_t dp_rank, int64_t j) {
    return consumed + dp_rank * micro_batch + j;
}

/* Introspection (tests, logging). A "source" is one dataset of the blend (0 for a single one). */
int loom_gpt_dataset_num_sources(const struct loom_gpt_dataset *ds);
struct loom_gpt_source_info {
    const struct loom_indexed *indexed;
    double weight;            /* normalised blend weight (1 for a single dataset) */
    int64_t doc_begin;        /* the split's documents: sequences [doc_begin, doc_end) */
    int64_t doc_end;
    int64_t tokens_per_epoch; /* tokens in the split's documents */
    int64_t num_epochs;
    int separate_last_epoch;  /* the last epoch was shuffled on its own (Megatron's 80% rule) */
    int64_t num_requested;    /* samples asked of this source */
    int64_t num_samples;      /* samples built: (num_epochs * tokens_per_epoch - 1) / T */
    const int32_t *doc_order; /* num_epochs * (doc_end - doc_begin) document ids */
    int64_t doc_order_len;
};
enum loom_status loom_gpt_dataset_source(const struct loom_gpt_dataset *ds, int source,
                                         struct loom_gpt_source_info *info);
/* Where global sample k comes from: its source and its position before the sample shuffle,
 * i.e. the sample starts at token `unshuffled * seq_length` of the concatenation of the
 * source's doc_order. */
enum loom_status loom_gpt_dataset_locate(const struct loom_gpt_dataset *ds, int64_t k,
                                         int *source, int64_t *unshuffled);

/* ------------------------------------------------------------------------------------------ */
/* JSON lines -> indexed dataset (the library part of `loom preprocess`)                      */
/* ------------------------------------------------------------------------------------------ */

/* Appends the ids of text[0, len) to (*ids, *n, *cap), growing it with realloc. Must be
 * thread-safe: workers call it concurrently. */
typedef enum loom_status (*loom_encode_fn)(const void *ctx, const char *text, size_t len,
                                           int32_t **ids, size_t *n, size_t *cap);

/* Sentences of one text (loom_split_sentences). Sentence i is the NUL-free bytes
 * text[i ? end[i-1] : 0, end[i]); text[len] is a NUL. Zero-initialise before the first use; the
 * buffers are reused by later calls and released by loom_sentences_free. */
struct loom_sentences {
    char *text;
    size_t len, cap_text;
    size_t *end;
    size_t n, cap_end;
};

/* Split text[0, len) into sentences by loom's documented rule (src/data/sentence_split.c: a
 * sentence ends at '.', '!' or '?' runs, optionally followed by closing quotes or brackets, then
 * whitespace, except after a listed abbreviation or a single capital initial; a blank line also
 * ends one; empty sentences are dropped). keep_newlines keeps the line breaks inside a sentence
 * and those right after it (--keep-newlines); otherwise a whitespace run with a line break
 * becomes one space. Replaces out's previous contents. Errors: LOOM_ERR_OOM only. */
enum loom_status loom_split_sentences(const char *text, size_t len, int keep_newlines,
                                      struct loom_sentences *out);
void loom_sentences_free(struct loom_sentences *s);

struct loom_preprocess_config {
    const char *input;              /* JSON lines file */
    const char *const *json_keys;   /* keys to extract; one output dataset per key */
    int num_keys;
    const char *output_prefix;      /* outputs PREFIX_{key}_document.bin/.idx */
    loom_encode_fn encode;
    const void *encode_ctx;
    int64_t vocab_size;             /* picks the dtype (loom_idx_dtype_for_vocab) */
    int32_t eod;                    /* appended to each non-empty document with append_eod */
    int append_eod;
    int split_sentences;            /* --split-sentences: each text split by
                                     * loom_split_sentences, one sequence per sentence, outputs
                                     * named PREFIX_{key}_sentence.bin/.idx (Megatron's names) */
    int keep_newlines;              /* --keep-newlines (with split_sentences) */
    int workers;                    /* threads tokenizing in parallel (>= 1) */
    int64_t log_interval;           /* progress line every N documents; 0 = quiet */
};

struct loom_preprocess_stats {
    int64_t documents; /* JSON lines read (blank lines excluded) */
    int64_t tokens;    /* tokens written over all keys */
    int64_t bytes;     /* input bytes */
    double seconds;
};

/* Each JSON line is an object; its value under each key is a string (one sequence) or a list of
 * strings (one sequence per non-empty string, as Megatron's pre-split sentences); with
 * split_sentences every string is split further, one sequence per sentence, and the document
 * index counts the sentences of each line's document. Whitespace-only
 * lines are skipped. Output is identical for any worker count. A malformed line (bad JSON,
 * invalid UTF-8, missing key, wrong type) is a one-line error naming the input file and line
 * number, and no output file is created or changed. */
enum loom_status loom_preprocess_jsonl(const struct loom_preprocess_config *cfg,
                                       struct loom_preprocess_stats *stats);

/* ---- the families' sample sources (struct loom_sample_source, loom/train.h) ---- */
struct loom_sample_source;

/* Samples of one split (Megatron GPT dataset semantics, struct loom_gpt_dataset_config): the
 * first T of a sample's T + 1 tokens and the next-token labels, as the mock source's. Tokens
 * outside [0, vocab) are an error naming the dataset. */
enum loom_status loom_gpt_data_source(struct loom_sample_source *s,
                                      const struct loom_gpt_dataset_config *dc, int64_t vocab);

/* BERT's synthetic data (--mock-data --model bert), every choice drawn from the counter-based RNG
 * keyed by (seed, split, index): ids 0 [PAD], 1 [CLS], 2 [SEP], 3 [MASK], the others (4 ..
 * vocab - 1) random words; a length uniform in [T/2, T] (at least 5), the rest padding
 * (padding_mask 0, id 0); [CLS] A [SEP] B [SEP] with token types 0 then 1 (without the binary
 * head, [CLS] A [SEP] alone), A at least one word and B too; each word position labelled with
 * probability 0.15 (its id the label, [MASK] the input; no 80/10/10); the SOP label a fair coin
 * (0 without the binary head). vocab >= 5, T >= 5. */
enum loom_status loom_bert_mock_source(struct loom_sample_source *s, int64_t vocab, int64_t T,
                                       uint64_t seed, int split, int binary_head);

/* Samples of one split of a sentence-split dataset, Megatron-LM's BertDataset
 * (loom/bert_dataset.h; dc names the dataset, the tokenizer, split, seed, probabilities and
 * binary head): tokens, labels (the original id where the dataset's loss_mask is 1, -1
 * elsewhere), token types, padding mask and SOP label (is_random). Sample indices wrap around
 * the dataset's length. Ids outside [0, vocab) are an error naming the dataset. */
struct loom_bert_dataset_config;
enum loom_status loom_bert_data_source(struct loom_sample_source *s,
                                       const struct loom_bert_dataset_config *dc, int64_t vocab);

#endif
