#include "loom/tensor.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} g_dtypes[] = {
    [LOOM_DTYPE_F32] = {"F32", 4},     [LOOM_DTYPE_BF16] = {"BF16", 2},
    [LOOM_DTYPE_F16] = {"F16", 2},     [LOOM_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [LOOM_DTYPE_F8_E5M2] = {"F8_E5M2", 1}, [LOOM_DTYPE_I32] = {"I32", 4},
    [LOOM_DTYPE_I64] = {"I64", 8},     [LOOM_DTYPE_U16] = {"U16", 2},
    [LOOM_DTYPE_U8] = {"U8", 1},       [LOOM_DTYPE_F64] = {"F64", 8},
};
_Static_assert(sizeof(g_dtypes) / sizeof(g_dtypes[0]) == LOOM_DTYPE_COUNT, "dtype table");

size_t loom_dtype_size(enum loom_dtype dt) { return g_dtypes[dt].size; }
const char *loom_dtype_name(enum loom_dtype dt) { return g_dtypes[dt].name; }

enum loom_status loom_dtype_from_name(const char *name, enum loom_dtype *out) {
    for (int i = 0; i < LOOM_DTYPE_COUNT; i++)
        if (strcmp(name, g_dtypes[i].name) == 0) {
            *out = (enum loom_dtype)i;
            return LOOM_OK;
        }
    return loom_fail(LOOM_ERR_FORMAT, "unknown dtype '%s'", name);
}

const char *loom_device_name(enum loom_device d) { return d == LOOM_DEVICE_CUDA ? "cuda" : "cpu"; }

int64_t loom_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

void loom_tensor_init(struct loom_tensor *t, void *data, enum loom_dtype dt, enum loom_device dev,
                      int ndim, const int64_t *shape) {
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dt;
    t->device = dev;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
}

void loom_arena_init(struct loom_arena *a, void *base, size_t size) {
    a->base = base;
    a->size = size;
    a->used = 0;
}

void *loom_arena_alloc(struct loom_arena *a, size_t bytes) {
    size_t n = loom_arena_round(bytes);
    if (a->used + n > a->size) return NULL;
    void *p = a->base + a->used;
    a->used += n;
    return p;
}
