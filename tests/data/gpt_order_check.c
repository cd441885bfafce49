/* Prints a GPT dataset split as loom builds it, for tests/data/test_megatron_order.sh to compare
 * with tests/ref/megatron_data_ref.py:
 *   gpt_order_check DATA_PATH SPLIT WHICH NUM_SAMPLES SEQ_LENGTH SEED PER_SPLIT COUNT [CACHE]
 * SPLIT "-" with PER_SPLIT 1; WHICH train|valid|test. Output: "len L cached C", then one line
 * per sample k < min(COUNT, L): "k source unshuffled_sample_in_source: t0 t1 ... tT". With
 * CACHE the tokenizer named in the description is GPT2BPETokenizer with vocab.json and
 * merges.txt (the names the test's reference uses too). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/data.h"

int main(int argc, char **argv) {
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: gpt_order_check DATA_PATH SPLIT WHICH NUM_SAMPLES SEQ_LENGTH SEED "
                        "PER_SPLIT COUNT [CACHE]\n");
        return 2;
    }
    struct loom_gpt_dataset_config c = {
        .data_path = argv[1],
        .split = strcmp(argv[2], "-") ? argv[2] : NULL,
        .which = strcmp(argv[3], "train") == 0   ? LOOM_SPLIT_TRAIN
                 : strcmp(argv[3], "valid") == 0 ? LOOM_SPLIT_VALID
                                                 : LOOM_SPLIT_TEST,
        .num_samples = strtoll(argv[4], NULL, 10),
        .seq_length = strtoll(argv[5], NULL, 10),
        .seed = strtoull(argv[6], NULL, 10),
        .per_split = atoi(argv[7]),
        .cache_path = argc == 10 ? argv[9] : NULL,
        .tokenizer_type = argc == 10 ? "GPT2BPETokenizer" : NULL,
        .vocab_file = argc == 10 ? "vocab.json" : NULL,
        .merge_file = argc == 10 ? "merges.txt" : NULL,
    };
    int64_t count = strtoll(argv[8], NULL, 10);
    struct loom_gpt_dataset *ds;
    if (loom_gpt_dataset_open(&ds, &c) != LOOM_OK) {
        fprintf(stderr, "gpt_order_check: %s\n", loom_last_error());
        return 1;
    }
    int64_t len = loom_gpt_dataset_len(ds), T = c.seq_length;
    printf("len %" PRId64 " cached %d\n", len, loom_gpt_dataset_from_cache(ds));
    int32_t *tok = malloc((size_t)(T + 1) * sizeof *tok);
    if (!tok) return 1;
    for (int64_t k = 0; k < len && k < count; k++) {
        int src;
        int64_t j;
        if (loom_gpt_dataset_locate(ds, k, &src, &j) != LOOM_OK ||
            loom_gpt_dataset_get(ds, k, tok) != LOOM_OK) {
            fprintf(stderr, "gpt_order_check: %s\n", loom_last_error());
            return 1;
        }
        printf("%" PRId64 " %d %" PRId64 ":", k, src, j);
        for (int64_t t = 0; t <= T; t++) printf(" %" PRId32, tok[t]);
        printf("\n");
    }
    free(tok);
    loom_gpt_dataset_free(ds);
    return 0;
}
