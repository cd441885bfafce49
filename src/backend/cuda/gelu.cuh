/* GELU and its derivative in both forms (enum loom_gelu; ERF a template flag), shared by the
 * activation kernels (act.cu) and the GELU MLP's backward where cuBLASLt's DGELU epilogue does not
 * apply (matmul_bf16.cu: no algorithm for it, or the erf form, which the epilogue does not have).
 *
 *   tanh: y = x/2 (1 + tanh(u)),  u = k (x + 0.044715 x^3),  k = sqrt(2/pi)
 *         computed as y = x s, s = sigmoid(2u) (the same function without the cancellation of
 *         1 + tanh(u) for negative x);  dy/dx = s + 2 x s (1 - s) k (1 + 3 * 0.044715 x^2)
 *   erf:  y = x Phi(x) = x/2 erfc(-x/sqrt(2)) (erfc rather than 1 + erf, for the same reason);
 *         dy/dx = Phi(x) + x exp(-x^2/2) / sqrt(2 pi)
 *
 * gelu16_of is for results rounded to 16 bits: in the tanh form, 2^x and the reciprocal through
 * the special-function unit (relative error about 2^-21, against bf16's rounding of 2^-9); with
 * expf and the IEEE division the bf16 pass was bound by its arithmetic. For x very negative the
 * exponential overflows to infinity and its reciprocal is 0, as in the exact form. In the erf
 * form, erfc from a Chebyshev fit of fractional error below 1.2e-7 (gelu_of takes erfcf). */
#ifndef LOOM_BACKEND_CUDA_GELU_CUH
#define LOOM_BACKEND_CUDA_GELU_CUH

#define LOOM_GELU_K 0.7978845608028654f
#define LOOM_GELU_A 0.044715f
#define LOOM_GELU_SQRT1_2 0.70710678118654752f      /* 1/sqrt(2) */
#define LOOM_GELU_INV_SQRT_2PI 0.39894228040143268f /* 1/sqrt(2 pi) */

template <bool ERF> __device__ __forceinline__ float gelu_of(float x) {
    if constexpr (ERF) return 0.5f * x * erfcf(-x * LOOM_GELU_SQRT1_2);
    float u = LOOM_GELU_K * (x + LOOM_GELU_A * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

template <bool ERF> __device__ __forceinline__ float gelu_grad_of(float x) {
    if constexpr (ERF) {
        float cdf = 0.5f * erfcf(-x * LOOM_GELU_SQRT1_2);
        return cdf + x * LOOM_GELU_INV_SQRT_2PI * expf(-0.5f * x * x);
    }
    float u = LOOM_GELU_K * (x + LOOM_GELU_A * x * x * x);
    float du = LOOM_GELU_K * (1.0f + 3.0f * LOOM_GELU_A * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * du;
}

template <bool ERF> __device__ __forceinline__ float gelu16_of(float x) {
    if constexpr (ERF) {
        /* erfc(z), z = |x|/sqrt(2) >= 0, as t exp(-z^2 + P(t)), t = 1/(1 + z/2), P a degree-9
         * Chebyshev fit (fractional error below 1.2e-7), with 2^x and the reciprocal of the
         * special-function unit; Phi(x) = erfc(z)/2 for x < 0, 1 - erfc(z)/2 else */
        const float z = fabsf(x) * LOOM_GELU_SQRT1_2;
        const float t = __fdividef(1.0f, 1.0f + 0.5f * z);
        float p = 0.17087277f;
        p = fmaf(p, t, -0.82215223f);
        p = fmaf(p, t, 1.48851587f);
        p = fmaf(p, t, -1.13520398f);
        p = fmaf(p, t, 0.27886807f);
        p = fmaf(p, t, -0.18628806f);
        p = fmaf(p, t, 0.09678418f);
        p = fmaf(p, t, 0.37409196f);
        p = fmaf(p, t, 1.00002368f);
        p = fmaf(p, t, -1.26551223f);
        const float half_erfc = 0.5f * t * __expf(p - z * z);
        return x * (x < 0.0f ? half_erfc : 1.0f - half_erfc);
    }
    float u = LOOM_GELU_K * (x + LOOM_GELU_A * x * x * x);
    return __fdividef(x, 1.0f + __expf(-2.0f * u));
}

#endif
