/* Prints loom's T5 relative position buckets (loom_t5_relative_bucket) for every key - query
 * distance in [-300, 300], bidirectional and causal, for the default 32 buckets / distance 128 and
 * a second setting (16 / 64): lines "NUM_BUCKETS MAX_DISTANCE BIDIRECTIONAL REL BUCKET", which
 * tests/ref/t5_ref.py buckets compares with T5's rule (tests/model/test_t5_torch.sh). */
#include <stdio.h>

#include "loom/t5.h"

int main(void) {
    const long long settings[][2] = {{32, 128}, {16, 64}};
    for (int s = 0; s < 2; s++)
        for (int bi = 0; bi <= 1; bi++)
            for (long long rel = -300; rel <= 300; rel++)
                printf("%lld %lld %d %lld %lld\n", settings[s][0], settings[s][1], bi, rel,
                       (long long)loom_t5_relative_bucket(rel, bi, settings[s][0],
                                                          settings[s][1]));
    return 0;
}
