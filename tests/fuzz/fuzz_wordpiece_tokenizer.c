/* BERT WordPiece tokenizer (src/data/tokenizer_wordpiece.c), both variants: loading vocab.txt,
 * encoding a text, decoding the ids, the special ids. Input: vocab.txt, FZ_SEP, text. */
#include "fuzz_util.h"
#include "loom/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *part[2];
    size_t len[2];
    fz_split(data, size, 2, part, len);
    char vocab[512];
    fz_write("vocab.txt", part[0], len[0], vocab, sizeof vocab);
    static const char *const types[] = {"BertWordPieceLowerCase", "BertWordPieceCase"};
    static const char *const specials[] = {"[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "CLS"};
    for (int v = 0; v < 2; v++) {
        struct loom_tokenizer *t;
        if (loom_tokenizer_load(&t, types[v], vocab, NULL) != LOOM_OK) return 0;
        int32_t *ids = NULL;
        size_t n = 0, cap = 0;
        if (loom_tokenizer_encode(t, (const char *)part[1], len[1], &ids, &n, &cap) == LOOM_OK) {
            char *text = NULL;
            if (loom_tokenizer_decode(t, ids, n, &text, NULL) == LOOM_OK) free(text);
        }
        free(ids);
        for (int k = 0; k < 6; k++) (void)loom_tokenizer_special(t, specials[k]);
        (void)loom_tokenizer_vocab_size(t);
        loom_tokenizer_free(t);
    }
    return 0;
}
