/* Megatron indexed dataset reader (src/data/indexed.c). Input: the .idx, FZ_SEP, the .bin. */
#include "fuzz_util.h"
#include "loom/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data, size, 2, part, len);
    char idx[512], bin[512], prefix[512];
    fz_write("d.idx", part[0], len[0], idx, sizeof idx);
    fz_write("d.bin", part[1], len[1], bin, sizeof bin);
    snprintf(prefix, sizeof prefix, "%s/d", fz_dir());
    struct loom_indexed *ds;
    if (loom_indexed_open(&ds, prefix) != LOOM_OK) return 0;
    int64_t n = loom_indexed_num_sequences(ds), docs = loom_indexed_num_documents(ds);
    (void)loom_indexed_num_tokens(ds);
    (void)loom_idx_dtype_name(loom_indexed_dtype(ds));
    for (int64_t k = 0; k <= docs && k < 64; k++) (void)loom_indexed_doc_index(ds, k);
    int32_t out[256];
    for (int64_t i = 0; i < n && i < 64; i++) {
        int64_t l = loom_indexed_sequence_length(ds, i);
        (void)loom_indexed_mode(ds, i);
        const void *p;
        int64_t pl;
        if (loom_indexed_get(ds, i, &p, &pl) == LOOM_OK && pl > 0) {
            size_t es = loom_idx_dtype_size(loom_indexed_dtype(ds));
            volatile uint8_t sink = ((const uint8_t *)p)[(size_t)pl * es - 1];
            (void)sink;
        }
        int64_t c = l < 256 ? l : 256;
        (void)loom_indexed_read(ds, i, 0, c, out);
        if (l > 1) (void)loom_indexed_read(ds, i, l - 1, 1, out);
        (void)loom_indexed_read(ds, i, l, 1, out); /* out of range: an error, not a read */
    }
    loom_indexed_free(ds);
    return 0;
}
