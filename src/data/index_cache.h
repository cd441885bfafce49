/* Megatron-core's dataset index cache (--data-cache-path): file names, descriptions, .npy files.
 *
 * A GPT dataset split's indices live in CACHE/<md5>-GPTDataset-<split>-{description.txt,
 * document_index.npy, sample_index.npy, shuffle_index.npy}, a blend's in
 * CACHE/<md5>-BlendedDataset-<split>-{description.txt, dataset_index.npy,
 * dataset_sample_index.npy}; <md5> is the MD5 of the description, the JSON text (Python's
 * json.dumps with indent=4) of what identifies the request. A cache entry is used only when its
 * description is byte for byte the one this request writes and its arrays parse; the caller then
 * checks their contents (gpt_dataset.c). Files are written to temporaries and renamed, the
 * description last, so a reader never takes a half-written entry. */
#ifndef LOOM_DATA_INDEX_CACHE_H
#define LOOM_DATA_INDEX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "loom/data.h"

struct loom_index_cache_key {
    const char *cache_path;
    const char *dataset_path;
    int64_t num_samples;
    enum loom_split which;
    uint32_t seed;
    int64_t seq_length;
    const char *split; /* --split; NULL for a dataset of its own per split (null there) */
    const char *tokenizer_type, *vocab_file, *merge_file; /* NULL where not given */
};

struct loom_blend_cache_key {
    const char *cache_path;
    enum loom_split which;
    const struct loom_index_cache_key *datasets;
    int n;
    const double *weights;
    int64_t size;
};

/* The description text (malloc'ed; NULL when out of memory). */
char *loom_index_cache_description(const struct loom_index_cache_key *k);
char *loom_blend_cache_description(const struct loom_blend_cache_key *k);

/* Read a GPT split's indices: doc[ndoc] (int32), sample[nsample][2] and shuffle[nshuffle]
 * (int64). LOOM_OK only on a hit whose three arrays parse; anything else leaves nothing
 * allocated and returns an error code (a miss is LOOM_ERR_IO). */
enum loom_status loom_index_cache_load(const struct loom_index_cache_key *k, int32_t **doc,
                                       int64_t *ndoc, int64_t **sample, int64_t *nsample,
                                       int64_t **shuffle, int64_t *nshuffle);
/* Write them (document_index int32, sample_index int32 where every value fits, else int64,
 * shuffle_index uint32 below 2^32 - 1 samples, else int64, as Megatron's dtypes). */
enum loom_status loom_index_cache_save(const struct loom_index_cache_key *k, const int32_t *doc,
                                       int64_t ndoc, const int64_t *sample, int64_t num_samples,
                                       const int64_t *shuffle);
enum loom_status loom_blend_cache_load(const struct loom_blend_cache_key *k, int64_t **source,
                                       int64_t **sample, int64_t *n);
enum loom_status loom_blend_cache_save(const struct loom_blend_cache_key *k,
                                       const int64_t *source, const int64_t *sample);

/* .npy (format 1.0/2.0/3.0, little-endian integers of 1, 2, 4 or 8 bytes, C order, 1 or 2
 * dimensions) -> int64 values; *cols is 0 for a 1-D array. */
enum loom_status loom_npy_load(const char *path, int64_t **v, int64_t *rows, int64_t *cols);
/* descr: "<i2", "<i4", "<u4" or "<i8"; cols 0 for 1-D. Temporary + rename. */
enum loom_status loom_npy_save(const char *path, const char *descr, const int64_t *v,
                               int64_t rows, int64_t cols);

/* MD5 of data[0, n) as 32 lowercase hex digits and a NUL. */
void loom_md5_hex(const void *data, size_t n, char out[33]);

#endif
