/* Prints a sequence of draws from loom's numpy RandomState stream for one seed (argv[1]):
 * tests/unit/test_np_random.sh makes numpy draw the same sequence and compares the text. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/np_random.h"

static const uint64_t g_max[] = {1, 2, 3, 5, 7, 100, 1000, 65535, 2147483648u, 4294967294u,
                                 4294967295u, 4294967296u, 1099511627779u, 9223372036854775807u};
static const int64_t g_n[] = {0, 1, 2, 7, 1000, 70000};

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: np_random_check SEED\n");
        return 2;
    }
    struct loom_np_random r;
    loom_np_random_seed(&r, (uint32_t)strtoul(argv[1], NULL, 10));
    printf("u32");
    for (int i = 0; i < 1500; i++) printf(" %" PRIu32, loom_np_random_u32(&r));
    printf("\nu64");
    for (int i = 0; i < 10; i++) printf(" %" PRIu64, loom_np_random_u64(&r));
    printf("\ninterval");
    for (size_t i = 0; i < sizeof g_max / sizeof *g_max; i++)
        for (int k = 0; k < 3; k++) printf(" %" PRIu64, loom_np_random_interval(&r, g_max[i]));
    printf("\nrandint");
    for (int k = 0; k < 5; k++) printf(" %" PRId64, loom_np_random_randint(&r, -7, 1000003));
    printf("\n");
    for (size_t i = 0; i < sizeof g_n / sizeof *g_n; i++) {
        int64_t n = g_n[i];
        int32_t *a = malloc((size_t)(n ? n : 1) * sizeof *a);
        int64_t *b = malloc((size_t)(n ? n : 1) * sizeof *b);
        if (!a || !b) return 1;
        for (int64_t j = 0; j < n; j++) a[j] = (int32_t)(j + 5), b[j] = j;
        loom_np_random_shuffle_i32(&r, a, n);
        loom_np_random_shuffle_i64(&r, b, n);
        printf("shuffle%" PRId64, n);
        for (int64_t j = 0; j < n; j++) printf(" %" PRId32, a[j]);
        printf("\npermutation%" PRId64, n);
        for (int64_t j = 0; j < n; j++) printf(" %" PRId64, b[j]);
        printf("\n");
        free(a);
        free(b);
    }
    return 0;
}
