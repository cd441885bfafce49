/* Rotary position embeddings: which values of a head rotate, and at what frequencies. Header-only
 * so that the CPU code and the CUDA kernels compute the same frequencies.
 *
 * Pair i (i < dims / 2) of a query or key head, the values (x_i, x_{i + dims/2}) of its first
 * dims, rotates by the angle p * f_i at position p, f_i = theta^(-2i / dims); the head's values
 * past dims pass through unchanged (Megatron-LM's --rotary-percent: dims = HS * percent).
 *
 * With factor > 0 the frequencies are rescaled as Llama 3.1's are (Megatron-LM's
 * --use-rope-scaling with --rope-scaling-factor, Hugging Face's rope_scaling of rope_type
 * "llama3"): with the wavelength w = 2 pi / f and L the original context length
 * (original_max_positions), f is kept where w < L / high_freq_factor (high frequencies), divided
 * by factor where w > L / low_freq_factor (low ones), and between the two becomes
 * (1 - s) f / factor + s f with s = (L / w - low_freq_factor) / (high_freq_factor -
 * low_freq_factor).
 *
 * With interpolation > 0 every frequency is then divided by it: positions interpolated linearly,
 * p / interpolation taking p's place (Megatron-LM's --rotary-seq-len-interpolation-factor, Hugging
 * Face's rope_scaling of rope_type "linear").
 */
#ifndef LOOM_ROPE_H
#define LOOM_ROPE_H

#include <math.h>
#include <stdint.h>

#include "loom/hd.h"

struct loom_rope {
    double theta;  /* the base */
    int64_t dims;  /* values of a head that rotate: even, at most HS; 0 = all HS */
    double factor; /* Llama 3.1's rescaling: 0 = none */
    double low_freq_factor, high_freq_factor, original_max_positions;
    double interpolation; /* positions divided by it: 0 = none */
};

/* The rotated values of a head of HS */
LOOM_HD int64_t loom_rope_dims(const struct loom_rope *r, int64_t HS) {
    return r->dims > 0 ? r->dims : HS;
}

/* f_i before the interpolation, in double, for a head of HS */
LOOM_HD double loom_rope_freq_scaled(const struct loom_rope *r, int64_t HS, int64_t i) {
    const double dims = (double)loom_rope_dims(r, HS);
    const double f = pow(r->theta, -2.0 * (double)i / dims);
    if (!(r->factor > 0)) return f;
    const double w = 6.283185307179586 / f, L = r->original_max_positions;
    if (w < L / r->high_freq_factor) return f;
    if (w > L / r->low_freq_factor) return f / r->factor;
    const double s = (L / w - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
    return (1.0 - s) * f / r->factor + s * f;
}

/* f_i, in double, for a head of HS: after the scaling, the interpolation */
LOOM_HD double loom_rope_freq(const struct loom_rope *r, int64_t HS, int64_t i) {
    const double f = loom_rope_freq_scaled(r, HS, i);
    return r->interpolation > 0 ? f / r->interpolation : f;
}

#endif
