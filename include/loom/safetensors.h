/* safetensors files: writer and validating reader (format in FORMATS.md).
 *
 *   u64 little-endian N | N bytes of JSON header | data section
 *   header: {"__metadata__": {"k": "v", ...},
 *            "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 *   offsets are relative to the start of the data section; tensors are row-major, little-endian.
 *
 * Writer: collect entries (name, dtype, shape, host pointer) and string metadata, then save. The
 * layout is deterministic: tensors are laid out by element size, largest first, then by name
 * (the order Hugging Face's writer uses), so that with the header padded with spaces to a multiple
 * of 8 bytes every tensor starts at a file offset that is a multiple of its element size. The
 * header lists "__metadata__" first, then the tensors in data order. The file is written through
 * loom_atomic_file: a crash leaves the previous file or the new one, never a torn one.
 *
 * Reader: maps the file and validates all of it on open, so that every later lookup is safe:
 * size >= 8, a header length within the file (and at most 100 MB), a header that is a JSON object,
 * a known dtype, a shape of non-negative integers and data_offsets [begin, end] within the data
 * section holding exactly numel * element size bytes for every tensor, no two tensors
 * overlapping, "__metadata__" an object of strings. Each violation is a one-line LOOM_ERR_FORMAT
 * error naming the file and the tensor.
 */
#ifndef LOOM_SAFETENSORS_H
#define LOOM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"
#include "loom/tensor.h"

/* Most dimensions a tensor of a safetensors file may have here. */
#define LOOM_SAFETENSORS_MAX_DIMS 8
/* Largest header accepted (the same bound as Hugging Face's reader). */
#define LOOM_SAFETENSORS_MAX_HEADER 100000000u

/* ---- writer ---------------------------------------------------------------------------------- */

struct loom_safetensors_writer;

enum loom_status loom_safetensors_writer_init(struct loom_safetensors_writer **out);
void loom_safetensors_writer_free(struct loom_safetensors_writer *w);

/* Add a tensor. `data` is a host pointer to numel * element size bytes that must stay valid until
 * loom_safetensors_writer_save returns (it is not copied); it may be NULL only when numel == 0.
 * ndim may be 0 (a scalar). Names must be non-empty, valid UTF-8, unique and not "__metadata__";
 * violations are LOOM_ERR_INVALID_ARG naming the tensor. */
enum loom_status loom_safetensors_writer_add(struct loom_safetensors_writer *w, const char *name,
                                             enum loom_dtype dtype, int ndim, const int64_t *shape,
                                             const void *data);
/* Same for a loom tensor; it must be in host memory. */
enum loom_status loom_safetensors_writer_add_tensor(struct loom_safetensors_writer *w,
                                                    const char *name, const struct loom_tensor *t);
/* Set a "__metadata__" entry (UTF-8 strings, copied); setting a key again replaces its value. */
enum loom_status loom_safetensors_writer_set_metadata(struct loom_safetensors_writer *w,
                                                      const char *key, const char *value);
/* Write the file atomically. The writer can be saved again or freed afterwards. */
enum loom_status loom_safetensors_writer_save(struct loom_safetensors_writer *w, const char *path);

/* ---- reader ---------------------------------------------------------------------------------- */

struct loom_safetensors;

struct loom_safetensors_entry {
    const char *name;
    /* LOOM_DTYPE_COUNT for a dtype that safetensors defines but loom has no enum value for
     * (BOOL, I8, I16, U32, U64, F8_E8M0): such an entry is validated and listed, and dtype_name
     * says what it is, but loom_safetensors_read_f32 refuses it. */
    enum loom_dtype dtype;
    const char *dtype_name; /* as written in the header: "F32", "BF16", ... */
    int ndim;
    const int64_t *shape;
    int64_t numel;
    size_t nbytes;
    uint64_t offset;  /* begin of data_offsets, relative to the data section */
    const void *data; /* inside the mapped file, valid until close. Aligned only as the file's
                       * layout makes it (files from this writer: to the element size; files
                       * from elsewhere: maybe not at all); read through memcpy or read_f32. */
};

/* Open, map and validate a file. On failure *out is NULL and the error names the file. */
enum loom_status loom_safetensors_open(struct loom_safetensors **out, const char *path);
void loom_safetensors_close(struct loom_safetensors *st);

const char *loom_safetensors_path(const struct loom_safetensors *st);
int64_t loom_safetensors_count(const struct loom_safetensors *st);
/* The i-th tensor, 0 <= i < count, in the order of their data in the file. */
const struct loom_safetensors_entry *loom_safetensors_entry_at(const struct loom_safetensors *st,
                                                                int64_t i);
/* Lookup by name; NULL when there is no such tensor. */
const struct loom_safetensors_entry *loom_safetensors_find(const struct loom_safetensors *st,
                                                            const char *name);
/* Lookup by name; a missing tensor is a LOOM_ERR_FORMAT error naming the file and the tensor. */
enum loom_status loom_safetensors_get(const struct loom_safetensors *st, const char *name,
                                      const struct loom_safetensors_entry **out);

int64_t loom_safetensors_metadata_count(const struct loom_safetensors *st);
/* The i-th "__metadata__" pair, in header order. */
void loom_safetensors_metadata_at(const struct loom_safetensors *st, int64_t i, const char **key,
                                  const char **value);
/* The value for `key`, or NULL when absent. */
const char *loom_safetensors_metadata_get(const struct loom_safetensors *st, const char *key);

/* LOOM_ERR_FORMAT unless tensor `name` exists with exactly this shape; the message names the file,
 * the tensor, the expected and the found shape. */
enum loom_status loom_safetensors_expect_shape(const struct loom_safetensors *st, const char *name,
                                               int ndim, const int64_t *shape);
/* Copy tensor `name` to dst as float32, converting from F32, BF16 or F16 (exactly: every such
 * value, NaN payloads included, is representable in float32). A tensor whose element count is not
 * expected_numel is a LOOM_ERR_FORMAT error naming the tensor, the expected element count and the
 * found shape; so is a tensor of another dtype. */
enum loom_status loom_safetensors_read_f32(const struct loom_safetensors *st, const char *name,
                                           float *dst, int64_t expected_numel);

#endif
