/* Counter-based random numbers (Philox4x32-10).
 *
 * Every random number loom draws is a pure function of (seed, purpose, index): initial weights
 * are keyed by (seed, hash of the parameter name, element index in the full logical tensor),
 * dropout masks by (seed, hash of iteration/layer/site, global element index). Nothing depends on
 * how the model is split across ranks, nor on the order in which numbers are drawn, which is what
 * makes "any parallel layout gives the single-rank result" testable. Header-only so that CUDA
 * kernels use the very same function.
 */
#ifndef LOOM_RNG_H
#define LOOM_RNG_H

#include <math.h>
#include <stdint.h>

#include "loom/hd.h"

/* Philox4x32-10: counter (c0..c3), key (k0,k1) -> 4 random 32-bit words. */
LOOM_HD void loom_philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[1] = (uint32_t)p1;
        c[3] = (uint32_t)p0;
        c[0] = n0;
        c[2] = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* Four uniform 32-bit words for (seed, purpose, index). */
LOOM_HD void loom_rng_u32x4(uint64_t seed, uint64_t purpose, uint64_t index, uint32_t out[4]) {
    out[0] = (uint32_t)index;
    out[1] = (uint32_t)(index >> 32);
    out[2] = (uint32_t)purpose;
    out[3] = (uint32_t)(purpose >> 32);
    loom_philox(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in (0, 1], 24 bits of precision. */
LOOM_HD float loom_u32_to_unit(uint32_t x) { return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

/* Uniform (0,1] for element `index` of stream (seed, purpose). */
LOOM_HD float loom_rng_uniform(uint64_t seed, uint64_t purpose, uint64_t index) {
    uint32_t w[4];
    loom_rng_u32x4(seed, purpose, index, w);
    return loom_u32_to_unit(w[0]);
}

/* Standard normal for element `index` of stream (seed, purpose) (Box-Muller in double, so the
 * CPU and GPU agree to the last bit wherever libm does). */
LOOM_HD float loom_rng_normal(uint64_t seed, uint64_t purpose, uint64_t index) {
    uint32_t w[4];
    loom_rng_u32x4(seed, purpose, index, w);
    double u1 = ((double)w[0] + 1.0) * (1.0 / 4294967296.0); /* (0,1] */
    double u2 = (double)w[1] * (1.0 / 4294967296.0);         /* [0,1) */
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Dropout keep decision: element kept with probability 1-p. */
LOOM_HD int loom_rng_keep(uint64_t seed, uint64_t purpose, uint64_t index, float p) {
    return loom_rng_uniform(seed, purpose, index) > p;
}

/* 64-bit FNV-1a of a string, for purposes keyed by names (parameter init). */
LOOM_HD uint64_t loom_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    while (*s) {
        h ^= (uint8_t)*s++;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Mix several integers into one purpose key (splitmix64 finaliser over a running value). */
LOOM_HD uint64_t loom_hash_mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return h;
}

#endif
