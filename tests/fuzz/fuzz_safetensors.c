/* safetensors reader (src/ckpt/safetensors.c). Input: the file. */
#include "fuzz_util.h"
#include "loom/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fz_write("m.safetensors", data, size, path, sizeof path);
    struct loom_safetensors *st;
    if (loom_safetensors_open(&st, path) != LOOM_OK) return 0;
    for (int64_t i = 0; i < loom_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        loom_safetensors_metadata_at(st, i, &k, &v);
        if (loom_safetensors_metadata_get(st, k) == NULL) abort();
        (void)strlen(v);
    }
    for (int64_t i = 0; i < loom_safetensors_count(st); i++) {
        const struct loom_safetensors_entry *e = loom_safetensors_entry_at(st, i);
        if (loom_safetensors_find(st, e->name) != e) abort();
        (void)loom_safetensors_expect_shape(st, e->name, e->ndim, e->shape);
        if (e->nbytes) {
            volatile uint8_t sink = ((const uint8_t *)e->data)[0];
            sink = ((const uint8_t *)e->data)[e->nbytes - 1];
            (void)sink;
        }
        int64_t numel = e->numel;
        if (numel < 0 || numel > (1 << 20)) continue;
        float *x = malloc(sizeof(float) * (size_t)(numel ? numel : 1));
        if (!x) abort();
        (void)loom_safetensors_read_f32(st, e->name, x, numel);
        (void)loom_safetensors_read_f32(st, e->name, x, numel ? numel - 1 : 0);
        free(x);
    }
    (void)loom_safetensors_find(st, "__metadata__");
    loom_safetensors_close(st);
    return 0;
}
