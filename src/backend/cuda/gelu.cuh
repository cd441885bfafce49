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
 * exponential overflows to infinity and its reciprocal is 0, as in the exact form. The erf form
 * takes erfcf there too. */
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
    if constexpr (ERF) return gelu_of<true>(x);
    float u = LOOM_GELU_K * (x + LOOM_GELU_A * x * x * x);
    return __fdividef(x, 1.0f + __expf(-2.0f * u));
}

#endif
