/* GELU (tanh form) and its derivative, shared by the activation kernels (act.cu) and the GELU
 * MLP's backward where cuBLASLt offers no DGELU epilogue (matmul_bf16.cu).
 *
 *   y = x/2 (1 + tanh(u)),  u = k (x + 0.044715 x^3),  k = sqrt(2/pi)
 *   computed as y = x s, s = sigmoid(2u) (the same function without the cancellation of
 *   1 + tanh(u) for negative x);  dy/dx = s + 2 x s (1 - s) k (1 + 3 * 0.044715 x^2)
 *
 * gelu16_of is for results rounded to 16 bits: 2^x and the reciprocal through the
 * special-function unit (relative error about 2^-21, against bf16's rounding of 2^-9); with expf
 * and the IEEE division the bf16 pass was bound by its arithmetic. For x very negative the
 * exponential overflows to infinity and its reciprocal is 0, as in the exact form. */
#ifndef LOOM_BACKEND_CUDA_GELU_CUH
#define LOOM_BACKEND_CUDA_GELU_CUH

#define LOOM_GELU_K 0.7978845608028654f
#define LOOM_GELU_A 0.044715f

__device__ __forceinline__ float gelu_of(float x) {
    float u = LOOM_GELU_K * (x + LOOM_GELU_A * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float gelu_grad_of(float x) {
    float u = LOOM_GELU_K * (x + LOOM_GELU_A * x * x * x);
    float du = LOOM_GELU_K * (1.0f + 3.0f * LOOM_GELU_A * x * x);
    float s = 1.0f / (1.0f + expf(-2.0f * u));
    return s + 2.0f * x * s * (1.0f - s) * du;
}

__device__ __forceinline__ float gelu16_of(float x) {
    float u = LOOM_GELU_K * (x + LOOM_GELU_A * x * x * x);
    return __fdividef(x, 1.0f + __expf(-2.0f * u));
}

#endif
