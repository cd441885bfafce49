/* numpy's legacy random stream: numpy.random.RandomState(seed) for an integer seed, in C.
 *
 * Megatron-LM draws the GPT dataset's document and sample shuffles from RandomState(seed); to
 * give the same sample order loom draws the same numbers in the same order. What is reproduced:
 *  - the generator: MT19937, seeded as numpy seeds it from an integer in [0, 2^32) (Knuth's
 *    linear recurrence over the 624-word state, init_genrand), 32-bit outputs tempered;
 *  - 64-bit outputs: two 32-bit outputs, the first one the high half;
 *  - bounded integers as the legacy paths draw them (shuffle, permutation, randint): a uniform
 *    integer in [0, max] is the next output (32-bit when max < 2^32, else 64-bit) masked with the
 *    smallest all-ones mask covering max, redrawn while above max;
 *  - shuffle of a one-dimensional array: for i = n-1 down to 1, swap a[i] with a[j], j uniform
 *    in [0, i] (so n-1 bounded draws; none for n <= 1). permutation(n) is shuffle(arange(n)).
 * tests/unit/test_np_random.sh compares every function with /usr/bin/python3's numpy.
 */
#ifndef LOOM_NP_RANDOM_H
#define LOOM_NP_RANDOM_H

#include <stdint.h>

struct loom_np_random {
    uint32_t key[624];
    int pos;
};

/* RandomState(seed) */
void loom_np_random_seed(struct loom_np_random *r, uint32_t seed);
/* the next tempered 32-bit output; the next 64-bit output (high word first) */
uint32_t loom_np_random_u32(struct loom_np_random *r);
uint64_t loom_np_random_u64(struct loom_np_random *r);
/* uniform integer in [0, max] by masked rejection (max 0: 0, no draw) */
uint64_t loom_np_random_interval(struct loom_np_random *r, uint64_t max);
/* randint(low, high) for one value, low < high: low + interval(high - 1 - low) */
int64_t loom_np_random_randint(struct loom_np_random *r, int64_t low, int64_t high);
/* shuffle(a) of a one-dimensional array of n elements */
void loom_np_random_shuffle_i32(struct loom_np_random *r, int32_t *a, int64_t n);
void loom_np_random_shuffle_i64(struct loom_np_random *r, int64_t *a, int64_t n);

#endif
