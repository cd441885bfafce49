/* Vectorisable float math shared by the CPU kernels. */
#ifndef LOOM_CPU_MATH_H
#define LOOM_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* a * b + c, fused (one rounding) where the target has FMA instructions, so that the vectoriser
 * emits vfmadd; a separate product and sum elsewhere (a libm fmaf call would not vectorise). */
#if defined(__FMA__) || defined(__AVX512F__)
#define LOOM_CPU_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define LOOM_CPU_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* exp(x) in float, written so that loops over it vectorise (libm's expf does not without
 * -ffast-math). x = k ln2 + r with |r| <= ln2/2; exp(r) by its Taylor series to degree 7
 * (truncation below 1e-8 relative) in Horner form with fused multiply-adds; 2^k through the
 * exponent bits. 0 below -87.33 (where the result would be subnormal); the argument is clamped
 * at 88.37 (just below FLT_MAX); NaN gives NaN. */
static inline float loom_cpu_expf(float x) {
    const float lo = -87.33f;
    float xc = x < lo ? lo : x;
    xc = xc > 88.37f ? 88.37f : xc;
    xc = xc == xc ? xc : 0.0f; /* NaN: any finite k (the result is x itself, below) */
    const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float k = LOOM_CPU_FMA(xc, 1.44269504088896341f, shift) - shift;
    float r = LOOM_CPU_FMA(-k, 0.693145751953125f, xc); /* ln2 in a short high part and the rest */
    r = LOOM_CPU_FMA(-k, 1.42860682030941723e-6f, r);
    float p = 1.0f / 5040.0f;
    p = LOOM_CPU_FMA(p, r, 1.0f / 720.0f);
    p = LOOM_CPU_FMA(p, r, 1.0f / 120.0f);
    p = LOOM_CPU_FMA(p, r, 1.0f / 24.0f);
    p = LOOM_CPU_FMA(p, r, 1.0f / 6.0f);
    p = LOOM_CPU_FMA(p, r, 0.5f);
    p = LOOM_CPU_FMA(p, r, 1.0f);
    p = LOOM_CPU_FMA(p, r, 1.0f);
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23; /* k + 127 is in [1, 255] */
    float s;
    memcpy(&s, &bits, sizeof s);
    return x < lo ? 0.0f : x == x ? p * s : x;
}

#endif
