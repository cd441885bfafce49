/* Tensors and arenas.
 *
 * A tensor is a view: data pointer, dtype, int64 shape, device. Memory is owned by arenas (one
 * big allocation carved into aligned pieces) or by whoever allocated it; tensors never free.
 */
#ifndef LOOM_TENSOR_H
#define LOOM_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "loom/status.h"

enum loom_dtype {
    LOOM_DTYPE_F32 = 0,
    LOOM_DTYPE_BF16,
    LOOM_DTYPE_F16,
    LOOM_DTYPE_F8_E4M3,
    LOOM_DTYPE_F8_E5M2,
    LOOM_DTYPE_I32,
    LOOM_DTYPE_I64,
    LOOM_DTYPE_U16,
    LOOM_DTYPE_U8,
    LOOM_DTYPE_F64,
    LOOM_DTYPE_COUNT
};

enum loom_device { LOOM_DEVICE_CPU = 0, LOOM_DEVICE_CUDA, LOOM_DEVICE_COUNT };

#define LOOM_MAX_DIMS 4

struct loom_tensor {
    void *data;
    enum loom_dtype dtype;
    enum loom_device device;
    int ndim;
    int64_t shape[LOOM_MAX_DIMS];
};

size_t loom_dtype_size(enum loom_dtype dt);
/* Name used in safetensors headers ("F32", "BF16", ...). */
const char *loom_dtype_name(enum loom_dtype dt);
/* Parse a safetensors dtype name; returns LOOM_ERR_FORMAT for an unknown name. */
enum loom_status loom_dtype_from_name(const char *name, enum loom_dtype *out);
const char *loom_device_name(enum loom_device d);

int64_t loom_shape_numel(int ndim, const int64_t *shape);
static inline int64_t loom_tensor_numel(const struct loom_tensor *t) {
    return loom_shape_numel(t->ndim, t->shape);
}
static inline size_t loom_tensor_nbytes(const struct loom_tensor *t) {
    return (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype);
}
void loom_tensor_init(struct loom_tensor *t, void *data, enum loom_dtype dt, enum loom_device dev,
                      int ndim, const int64_t *shape);

/* Arena: one allocation, carved into 64-byte aligned pieces, freed at once. The allocation itself
 * comes from the caller (host malloc or a backend's device allocator). */
struct loom_arena {
    char *base;
    size_t size;
    size_t used;
};
void loom_arena_init(struct loom_arena *a, void *base, size_t size);
/* Returns NULL when the arena is exhausted. */
void *loom_arena_alloc(struct loom_arena *a, size_t bytes);
/* Bytes a sequence of allocations needs, to size an arena in a first pass. */
static inline size_t loom_arena_round(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

#endif
