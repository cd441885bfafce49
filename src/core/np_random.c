/* numpy's legacy RandomState stream (see loom/np_random.h for what is reproduced). */
#include "loom/np_random.h"

enum { NP_N = 624, NP_M = 397 };

void loom_np_random_seed(struct loom_np_random *r, uint32_t seed) {
    r->key[0] = seed;
    for (int i = 1; i < NP_N; i++) {
        uint32_t p = r->key[i - 1];
        r->key[i] = 1812433253u * (p ^ (p >> 30)) + (uint32_t)i;
    }
    r->pos = NP_N;
}

/* regenerate the 624 words (the MT19937 twist) */
static void np_twist(struct loom_np_random *r) {
    for (int i = 0; i < NP_N; i++) {
        uint32_t y = (r->key[i] & 0x80000000u) | (r->key[(i + 1) % NP_N] & 0x7fffffffu);
        uint32_t v = r->key[(i + NP_M) % NP_N] ^ (y >> 1);
        if (y & 1u) v ^= 0x9908b0dfu;
        r->key[i] = v;
    }
    r->pos = 0;
}

uint32_t loom_np_random_u32(struct loom_np_random *r) {
    if (r->pos >= NP_N) np_twist(r);
    uint32_t y = r->key[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t loom_np_random_u64(struct loom_np_random *r) {
    uint64_t hi = loom_np_random_u32(r);
    return hi << 32 | loom_np_random_u32(r);
}

uint64_t loom_np_random_interval(struct loom_np_random *r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t v;
    if (max <= 0xffffffffu) {
        do v = loom_np_random_u32(r) & mask;
        while (v > max);
    } else {
        do v = loom_np_random_u64(r) & mask;
        while (v > max);
    }
    return v;
}

int64_t loom_np_random_randint(struct loom_np_random *r, int64_t low, int64_t high) {
    uint64_t span = (uint64_t)high - (uint64_t)low - 1u;
    return (int64_t)((uint64_t)low + loom_np_random_interval(r, span));
}

void loom_np_random_shuffle_i32(struct loom_np_random *r, int32_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)loom_np_random_interval(r, (uint64_t)i);
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void loom_np_random_shuffle_i64(struct loom_np_random *r, int64_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)loom_np_random_interval(r, (uint64_t)i);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
