/* Activations and dropout.
 *
 * GELU (tanh or erf form): gelu.cuh (bf16 arrays through gelu16_of, fp32 ones through gelu_of)
 * SwiGLU: inp[N, 2F] = [gate | up], out[N, F] = silu(gate) * up, silu(g) = g * sigmoid(g)
 *   dgate = dout * up * s (1 + g (1 - s)),  dup = dout * silu(g),  s = sigmoid(g)
 * Dropout over a local [B,T,C] block: element (b,t,c) is kept when
 *   loom_rng_keep(seed, key, ((sample0 + b) * T_global + pos0 + t) * C_global + feat0 + c, p)
 *   out = inp * keep / (1 - p),  dinp = dout * keep / (1 - p)
 */
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gelu.cuh"

#define LOOM_ACT_THREADS 256

/* Elementwise over n elements; four a thread (16-byte loads) where every pointer is 16-byte
 * aligned and n a multiple of 4, else one. ERF: the form (gelu.cuh). */
template <bool ERF> __global__ void gelu_forward_kernel(float *out, const float *inp, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gelu_of<ERF>(inp[i]);
}

template <bool ERF>
__global__ void gelu_forward_x4_kernel(float4 *__restrict__ out, const float4 *__restrict__ inp,
                                       int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 x = inp[i];
        out[i] =
            make_float4(gelu_of<ERF>(x.x), gelu_of<ERF>(x.y), gelu_of<ERF>(x.z), gelu_of<ERF>(x.w));
    }
}

template <bool ERF>
__global__ void gelu_backward_kernel(float *dinp, const float *dout, const float *inp, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dinp[i] = dout[i] * gelu_grad_of<ERF>(inp[i]);
}

template <bool ERF>
__global__ void gelu_backward_x4_kernel(float4 *dinp, const float4 *dout,
                                        const float4 *__restrict__ inp, int64_t n4) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 x = inp[i], d = dout[i];
        dinp[i] = make_float4(d.x * gelu_grad_of<ERF>(x.x), d.y * gelu_grad_of<ERF>(x.y),
                              d.z * gelu_grad_of<ERF>(x.z), d.w * gelu_grad_of<ERF>(x.w));
    }
}

/* bf16 arrays: eight elements a thread (16-byte accesses) where aligned, else one */
template <bool ERF>
__global__ void gelu16_forward_x8_kernel(uint4 *__restrict__ out, const uint4 *__restrict__ inp,
                                         int64_t n8) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint4 v = inp[i];
        __nv_bfloat162 *h = (__nv_bfloat162 *)&v;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float2 f = __bfloat1622float2(h[j]);
            h[j] = __floats2bfloat162_rn(gelu16_of<ERF>(f.x), gelu16_of<ERF>(f.y));
        }
        out[i] = v;
    }
}

template <bool ERF>
__global__ void gelu16_forward_kernel(__nv_bfloat16 *out, const __nv_bfloat16 *inp, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16_rn(gelu16_of<ERF>(__bfloat162float(inp[i])));
}

template <bool ERF>
static void gelu16_forward(cudaStream_t st, void *out, const void *inp, int64_t n) {
    if (n % 8 == 0 && loom_aligned(16, out, inp))
        gelu16_forward_x8_kernel<ERF>
            <<<loom_cuda_grid(n / 8, LOOM_ACT_THREADS), LOOM_ACT_THREADS, 0, st>>>(
                (uint4 *)out, (const uint4 *)inp, n / 8);
    else
        gelu16_forward_kernel<ERF>
            <<<loom_cuda_grid(n, LOOM_ACT_THREADS), LOOM_ACT_THREADS, 0, st>>>(
                (__nv_bfloat16 *)out, (const __nv_bfloat16 *)inp, n);
}

template <bool ERF>
static void gelu_forward(cudaStream_t st, float *out, const float *inp, int64_t n) {
    if (n % 4 == 0 && loom_aligned(16, out, inp))
        gelu_forward_x4_kernel<ERF>
            <<<loom_cuda_grid(n / 4, LOOM_ACT_THREADS), LOOM_ACT_THREADS, 0, st>>>(
                (float4 *)out, (const float4 *)inp, n / 4);
    else
        gelu_forward_kernel<ERF>
            <<<loom_cuda_grid(n, LOOM_ACT_THREADS), LOOM_ACT_THREADS, 0, st>>>(out, inp, n);
}

template <bool ERF>
static void gelu_backward(cudaStream_t st, float *dinp, const float *dout, const float *inp,
                          int64_t n) {
    if (n % 4 == 0 && loom_aligned(16, dinp, dout, inp))
        gelu_backward_x4_kernel<ERF>
            <<<loom_cuda_grid(n / 4, LOOM_ACT_THREADS), LOOM_ACT_THREADS, 0, st>>>(
                (float4 *)dinp, (const float4 *)dout, (const float4 *)inp, n / 4);
    else
        gelu_backward_kernel<ERF>
            <<<loom_cuda_grid(n, LOOM_ACT_THREADS), LOOM_ACT_THREADS, 0, st>>>(dinp, dout, inp, n);
}

void loom_cuda_gelu16_forward(struct loom_backend *be, enum loom_gelu form, void *out,
                              const void *inp, int64_t n) {
    if (n <= 0) return;
    if (form == LOOM_GELU_ERF)
        gelu16_forward<true>(loom_cuda_stream(be), out, inp, n);
    else
        gelu16_forward<false>(loom_cuda_stream(be), out, inp, n);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_gelu_forward_typed(struct loom_backend *be, enum loom_gelu form, void *out,
                                  const void *inp, enum loom_dtype dt, int64_t n) {
    if (dt == LOOM_DTYPE_F32)
        loom_cuda_gelu_forward(be, form, (float *)out, (const float *)inp, n);
    else if (dt == LOOM_DTYPE_BF16)
        loom_cuda_gelu16_forward(be, form, out, inp, n);
    else
        loom_abort(__FILE__, __LINE__, "cuda: gelu_forward_typed on %s arrays (valid: f32, bf16)",
                   loom_dtype_name(dt));
}

void loom_cuda_gelu_forward(struct loom_backend *be, enum loom_gelu form, float *out,
                            const float *inp, int64_t n) {
    if (n <= 0) return;
    if (form == LOOM_GELU_ERF)
        gelu_forward<true>(loom_cuda_stream(be), out, inp, n);
    else
        gelu_forward<false>(loom_cuda_stream(be), out, inp, n);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_gelu_backward(struct loom_backend *be, enum loom_gelu form, float *dinp,
                             const float *dout, const float *inp, int64_t n) {
    if (n <= 0) return;
    if (form == LOOM_GELU_ERF)
        gelu_backward<true>(loom_cuda_stream(be), dinp, dout, inp, n);
    else
        gelu_backward<false>(loom_cuda_stream(be), dinp, dout, inp, n);
    LOOM_CUDA_LAUNCHED();
}

/* SwiGLU on rows of 2F elements (gate | up) of T (fp32 or bf16; the math in fp32, each result
 * rounded once at its store): the forward writes y = out[N, F]; the backward (BWD) reads
 * dy = dout[N, F] and writes y = dinp[N, 2F]. A thread takes V adjacent columns of a row (one
 * 16-byte access per operand where every row start is aligned to it, else V = 1); columns run
 * over blockIdx.x, rows over blockIdx.y with a stride of gridDim.y, so no thread divides by F. */
template <typename T, int V, bool BWD>
__global__ void swiglu_kernel(T *y, const T *dy, const T *inp, int64_t N, int64_t F) {
    typedef loom_vec<T, V> vec;
    const int64_t f = V * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (f >= F) return;
    for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
        const vec g = *reinterpret_cast<const vec *>(inp + r * 2 * F + f);
        const vec u = *reinterpret_cast<const vec *>(inp + r * 2 * F + F + f);
        if constexpr (!BWD) {
            vec o;
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float x = loom_to_f32(g.v[j]);
                o.v[j] = loom_from_f32<T>(x / (1.0f + expf(-x)) * loom_to_f32(u.v[j]));
            }
            *reinterpret_cast<vec *>(y + r * F + f) = o;
        } else {
            const vec d = *reinterpret_cast<const vec *>(dy + r * F + f);
            vec dg, du;
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float x = loom_to_f32(g.v[j]), e = loom_to_f32(d.v[j]);
                const float s = 1.0f / (1.0f + expf(-x));
                dg.v[j] = loom_from_f32<T>(e * loom_to_f32(u.v[j]) * s * (1.0f + x * (1.0f - s)));
                du.v[j] = loom_from_f32<T>(e * x * s);
            }
            *reinterpret_cast<vec *>(y + r * 2 * F + f) = dg;
            *reinterpret_cast<vec *>(y + r * 2 * F + F + f) = du;
        }
    }
}

/* Launches swiglu_kernel: V = 16 bytes of T where F is a multiple of it and every array is 16-byte
 * aligned, else 1; V-column chunks of a row over the grid's x, rows over y (at most 65535, the
 * rest taken in turn). */
template <typename T, bool BWD>
static void swiglu(struct loom_backend *be, T *y, const T *dy, const T *inp, int64_t N, int64_t F) {
    constexpr int wide = 16 / sizeof(T);
    const int v =
        F % wide == 0 && loom_aligned(16, y, inp, dy) ? wide : 1; /* dy NULL: 0, aligned */
    const dim3 grid((unsigned)((F / v + LOOM_ACT_THREADS - 1) / LOOM_ACT_THREADS),
                    (unsigned)(N < 65535 ? N : 65535));
    cudaStream_t st = loom_cuda_stream(be);
    if (v > 1)
        swiglu_kernel<T, wide, BWD><<<grid, LOOM_ACT_THREADS, 0, st>>>(y, dy, inp, N, F);
    else
        swiglu_kernel<T, 1, BWD><<<grid, LOOM_ACT_THREADS, 0, st>>>(y, dy, inp, N, F);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_swiglu_forward(struct loom_backend *be, void *out, const void *inp,
                              enum loom_dtype dt, int64_t N, int64_t F) {
    if (N <= 0 || F <= 0) return;
    typedef __nv_bfloat16 bf16;
    if (loom_cuda_typed16(be, dt, "swiglu_forward"))
        swiglu<bf16, false>(be, (bf16 *)out, NULL, (const bf16 *)inp, N, F);
    else
        swiglu<float, false>(be, (float *)out, NULL, (const float *)inp, N, F);
}

void loom_cuda_swiglu_backward(struct loom_backend *be, void *dinp, const void *dout,
                               const void *inp, enum loom_dtype dt, int64_t N, int64_t F) {
    if (N <= 0 || F <= 0) return;
    typedef __nv_bfloat16 bf16;
    if (loom_cuda_typed16(be, dt, "swiglu_backward"))
        swiglu<bf16, true>(be, (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, N, F);
    else
        swiglu<float, true>(be, (float *)dinp, (const float *)dout, (const float *)inp, N, F);
}

/* y = x * keep / (1 - p) over [B,T,C]; the same kernel serves forward and backward. */
__global__ void dropout_kernel(float *y, const float *x, int64_t B, int64_t T, int64_t C,
                               struct loom_dropout d) {
    int64_t total = B * T * C;
    float inv = 1.0f / (1.0f - d.p);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % C, bt = i / C;
        int64_t t = bt % T, b = bt / T;
        uint64_t g = (uint64_t)(((d.sample0 + b) * d.T_global + d.pos0 + t) * d.C_global +
                                d.feat0 + c);
        y[i] = loom_rng_keep(d.seed, d.key, g, d.p) ? x[i] * inv : 0.0f;
    }
}

static void dropout(struct loom_backend *be, float *y, const float *x, int64_t B, int64_t T,
                    int64_t C, const struct loom_dropout *d) {
    int64_t n = B * T * C;
    if (n <= 0) return;
    if (d->p <= 0.0f) {
        if (y != x)
            LOOM_CUDA_CHECK(cudaMemcpyAsync(y, x, (size_t)n * sizeof(float),
                                            cudaMemcpyDeviceToDevice, loom_cuda_stream(be)));
        return;
    }
    dropout_kernel<<<loom_cuda_grid(n, LOOM_ACT_THREADS), LOOM_ACT_THREADS, 0,
                     loom_cuda_stream(be)>>>(y, x, B, T, C, *d);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_dropout_forward(struct loom_backend *be, float *out, const float *inp, int64_t B,
                               int64_t T, int64_t C, const struct loom_dropout *d) {
    dropout(be, out, inp, B, T, C, d);
}

void loom_cuda_dropout_backward(struct loom_backend *be, float *dinp, const float *dout,
                                int64_t B, int64_t T, int64_t C, const struct loom_dropout *d) {
    dropout(be, dinp, dout, B, T, C, d);
}
