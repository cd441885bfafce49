/* GPT-2 byte-level BPE tokenizer (src/data/tokenizer_gpt2.c): loading vocab.json and merges.txt,
 * then encoding a text and decoding the ids. Input: vocab.json, FZ_SEP, merges.txt, FZ_SEP, text. */
#include "fuzz_util.h"
#include "loom/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[3];
    size_t len[3];
    fz_split(data, size, 3, part, len);
    char vocab[512], merges[512];
    fz_write("vocab.json", part[0], len[0], vocab, sizeof vocab);
    fz_write("merges.txt", part[1], len[1], merges, sizeof merges);
    struct loom_tokenizer *t;
    if (loom_tokenizer_load(&t, "GPT2BPETokenizer", vocab, merges) != LOOM_OK) return 0;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    if (loom_tokenizer_encode(t, (const char *)part[2], len[2], &ids, &n, &cap) == LOOM_OK) {
        char *text = NULL;
        size_t tl = 0;
        if (loom_tokenizer_decode(t, ids, n, &text, &tl) == LOOM_OK) {
            /* byte-level BPE is lossless on valid UTF-8 */
            if (tl != len[2] || memcmp(text, part[2], tl) != 0) abort();
            free(text);
        }
    }
    free(ids);
    (void)loom_tokenizer_vocab_size(t);
    (void)loom_tokenizer_eod(t);
    loom_tokenizer_free(t);
    return 0;
}
