/* The optimizer's kernels: AdamW and the gradient norm's sum of squares over parameter ranges.
 *
 * AdamW (torch.optim.AdamW semantics), one thread per element:
 *   g = grad * grad_scale
 *   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / (1 - beta1^step),
 *                                                    vhat = v / (1 - beta2^step)
 * evaluated as torch does: p = p (1 - lr wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
 * The decay uses p before the update (decoupled weight decay); step is 1-based. The constants
 * are computed once on the host in double.
 *
 * adamw_ranges: every range is cut into pieces of LOOM_ADAMW_PIECE elements and one block
 * updates one piece (a table of the ranges in the scratch buffer tells each block its range), so
 * the whole optimizer step is one launch however many parameters there are. Its elements get
 * the arithmetic of adamw_kernel, rounding by rounding. With 16-bit products over registered
 * parameters the same pass writes their 16-bit copy, which the next step's products read.
 *
 * sumsq_ranges: every range is cut into pieces of LOOM_SUMSQ_PIECE elements, one block per
 * piece writes its sum in double (a thread adding its elements in order, four a load where the
 * piece is 16-byte aligned and a multiple of 4 long), and one block adds the pieces in order: a
 * fixed summation order (the same bits every run) and a single wait for the device.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "backend/cuda/common.cuh"

#define LOOM_ADAMW_THREADS 256
#define LOOM_ADAMW_PIECE 4096

/* The constants of a step, from the host: all but the weight decay's factor. */
struct adamw_consts {
    float beta1, beta2, eps, step_size, inv_sqrt_bc2, grad_scale;
};

static struct adamw_consts adamw_consts_of(float lr, float beta1, float beta2, float eps,
                                           int64_t step, float grad_scale) {
    LOOM_ASSERT(step >= 1);
    const double bc1 = 1.0 - pow((double)beta1, (double)step);
    const double bc2 = 1.0 - pow((double)beta2, (double)step);
    struct adamw_consts k;
    k.beta1 = beta1;
    k.beta2 = beta2;
    k.eps = eps;
    k.step_size = (float)((double)lr / bc1);
    k.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    k.grad_scale = grad_scale;
    return k;
}

/* p (1 - lr wd): the factor the weight decay puts on p */
static float adamw_decay(float lr, float wd) { return (float)(1.0 - (double)lr * (double)wd); }

/* AdamW on one element's values, with explicit roundings (no fused multiply-add): the same bits
 * as the CPU backend. m and v are updated in place; returns the new parameter. */
__device__ __forceinline__ float adamw_update(float param, float grad, float &m, float &v,
                                              const struct adamw_consts &k, float decay) {
    float g = __fmul_rn(grad, k.grad_scale);
    m = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(1.0f - k.beta1, g));
    v = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(__fmul_rn(1.0f - k.beta2, g), g));
    float den = __fadd_rn(__fmul_rn(sqrtf(v), k.inv_sqrt_bc2), k.eps);
    return __fsub_rn(__fmul_rn(param, decay), __fdiv_rn(__fmul_rn(k.step_size, m), den));
}

/* AdamW on element i of the arrays. Returns the new parameter. */
__device__ __forceinline__ float adamw_element(float *param, const float *grad, float *m, float *v,
                                               int64_t i, const struct adamw_consts &k,
                                               float decay) {
    float mi = m[i], vi = v[i];
    const float p = adamw_update(param[i], grad[i], mi, vi, k, decay);
    m[i] = mi;
    v[i] = vi;
    param[i] = p;
    return p;
}

__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, int64_t n,
                             struct adamw_consts k, float decay) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        adamw_element(param, grad, m, v, i, k, decay);
}

void loom_cuda_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                     int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                     int64_t step, float grad_scale) {
    if (n <= 0) return;
    const struct adamw_consts k = adamw_consts_of(lr, beta1, beta2, eps, step, grad_scale);
    loom_cuda_wrote(be, param, (size_t)n * sizeof(float));
    adamw_kernel<<<loom_cuda_grid(n, LOOM_ADAMW_THREADS), LOOM_ADAMW_THREADS, 0,
                   loom_cuda_stream(be)>>>(param, grad, m, v, n, k, adamw_decay(lr, wd));
    LOOM_CUDA_LAUNCHED();
}

/* The range of piece p in a table of ranges of `width` int64 each whose third entry is the
 * range's first piece: the last range whose first piece is <= p (binary search). */
__device__ __forceinline__ int range_of_piece(const int64_t *desc, int width, int nranges,
                                              int64_t p) {
    int lo = 0, hi = nranges - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (desc[width * mid + 2] <= p) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* desc holds, per range, (offset, length, first piece, decay flag, the moments' offset); block p
 * updates piece p with decay_on or decay_off as its range's flag says. Where the piece's elements
 * are 16-byte aligned in every array (its 16-bit copy's 4 elements aligned to theirs) and come in
 * fours, a thread moves four of each at a time; else one (the same arithmetic per element either
 * way). */
/* copy (T16 = float: none) gets each new parameter rounded to nearest even, at its index */
template <typename T16>
__global__ void adamw_ranges_kernel(float *__restrict__ param, const float *__restrict__ grad,
                                    float *__restrict__ m, float *__restrict__ v,
                                    T16 *__restrict__ copy, const int64_t *desc, int nranges,
                                    struct adamw_consts k, float decay_on, float decay_off) {
    constexpr bool has_copy = !std::is_same_v<T16, float>;
    const int64_t p = blockIdx.x;
    const int64_t *d = desc + 5 * range_of_piece(desc, 5, nranges, p);
    const int64_t start = (p - d[2]) * LOOM_ADAMW_PIECE;
    const int64_t n = d[1] - start < LOOM_ADAMW_PIECE ? d[1] - start : LOOM_ADAMW_PIECE;
    const int64_t base = d[0] + start, sbase = d[4] + start; /* the piece's, its moments' */
    const float decay = d[3] ? decay_on : decay_off;
    param += base;
    grad += base;
    m += sbase;
    v += sbase;
    if constexpr (has_copy) copy += base;
    const bool vec = n % 4 == 0 && loom_aligned(16, param, grad, m, v) &&
                     (!has_copy || loom_aligned(4 * sizeof(T16), copy));
    if (vec) {
        float4 *p4 = (float4 *)param, *m4 = (float4 *)m, *v4 = (float4 *)v;
        const float4 *g4 = (const float4 *)grad;
        for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            float4 pp = p4[i], mm = m4[i], vv = v4[i];
            const float4 gg = g4[i];
            pp.x = adamw_update(pp.x, gg.x, mm.x, vv.x, k, decay);
            pp.y = adamw_update(pp.y, gg.y, mm.y, vv.y, k, decay);
            pp.z = adamw_update(pp.z, gg.z, mm.z, vv.z, k, decay);
            pp.w = adamw_update(pp.w, gg.w, mm.w, vv.w, k, decay);
            m4[i] = mm;
            v4[i] = vv;
            p4[i] = pp;
            if constexpr (has_copy) {
                loom_vec<T16, 4> c;
                c.v[0] = loom_from_f32<T16>(pp.x);
                c.v[1] = loom_from_f32<T16>(pp.y);
                c.v[2] = loom_from_f32<T16>(pp.z);
                c.v[3] = loom_from_f32<T16>(pp.w);
                reinterpret_cast<loom_vec<T16, 4> *>(copy)[i] = c;
            }
        }
        return;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float np = adamw_element(param, grad, m, v, i, k, decay);
        if constexpr (has_copy) copy[i] = loom_from_f32<T16>(np);
    }
}

void loom_cuda_adamw_ranges(struct loom_backend *be, float *param, const float *grad, float *m,
                            float *v, const int64_t *off, const int64_t *soff, const int64_t *len,
                            const uint8_t *decay, int nranges, float lr, float beta1, float beta2,
                            float eps, float wd, int64_t step, float grad_scale) {
    const struct adamw_consts k = adamw_consts_of(lr, beta1, beta2, eps, step, grad_scale);
    struct loom_cuda *c = loom_cuda_impl(be);
    /* Where every range lies in the registered parameters (set_matmul_dtype), the kernel also
     * writes the new values' 16-bit copy, as the next product would make it (loom_cuda_to16):
     * the copy stays as fresh as it was, and that product need not convert the parameters. */
    int in_copy = c->params_bf16 != NULL;
    for (int r = 0; r < nranges && in_copy; r++)
        if (len[r] > 0 &&
            (param + off[r] < c->params || param + off[r] + len[r] > c->params + c->nparams))
            in_copy = 0;
    int64_t pieces = 0;
    int used = 0;
    int64_t *desc = (int64_t *)malloc((size_t)(nranges > 0 ? nranges : 1) * 5 * sizeof(int64_t));
    LOOM_ASSERT(desc);
    for (int r = 0; r < nranges; r++) {
        if (len[r] <= 0) continue;
        if (!in_copy) loom_cuda_wrote(be, param + off[r], (size_t)len[r] * sizeof(float));
        desc[5 * used] = off[r];
        desc[5 * used + 1] = len[r];
        desc[5 * used + 2] = pieces;
        desc[5 * used + 3] = decay[r] != 0;
        desc[5 * used + 4] = soff ? soff[r] : off[r];
        pieces += (len[r] + LOOM_ADAMW_PIECE - 1) / LOOM_ADAMW_PIECE;
        used++;
    }
    if (used == 0) {
        free(desc);
        return;
    }
    LOOM_ASSERT(pieces < (int64_t)1 << 31);
    cudaStream_t s = loom_cuda_stream(be);
    const size_t bytes = (size_t)used * 5 * sizeof(int64_t);
    int64_t *ddesc = (int64_t *)loom_cuda_scratch(be, bytes);
    /* from pageable memory: the table is staged before the call returns, so it may be freed */
    LOOM_CUDA_CHECK(cudaMemcpyAsync(ddesc, desc, bytes, cudaMemcpyHostToDevice, s));
    free(desc);
    const float on = adamw_decay(lr, wd), off0 = adamw_decay(lr, 0.0f);
    const int64_t at = in_copy ? param - c->params : 0; /* param[0]'s place in the copy */
    if (!in_copy)
        adamw_ranges_kernel<float><<<(unsigned)pieces, LOOM_ADAMW_THREADS, 0, s>>>(
            param, grad, m, v, NULL, ddesc, used, k, on, off0);
    else if (c->matmul_f16)
        adamw_ranges_kernel<__half><<<(unsigned)pieces, LOOM_ADAMW_THREADS, 0, s>>>(
            param, grad, m, v, (__half *)c->params_bf16 + at, ddesc, used, k, on, off0);
    else
        adamw_ranges_kernel<__nv_bfloat16><<<(unsigned)pieces, LOOM_ADAMW_THREADS, 0, s>>>(
            param, grad, m, v, (__nv_bfloat16 *)c->params_bf16 + at, ddesc, used, k, on, off0);
    LOOM_CUDA_LAUNCHED();
}

#define LOOM_SUMSQ_PIECE 16384
#define LOOM_SUMSQ_RANGE_THREADS 256

/* desc holds, per range, (offset, length, first piece); piece p belongs to the last range whose
 * first piece is <= p. ZEROS: the elements equal to zero also counted into *zeros (an integer
 * count: the order of the atomic additions does not matter). */
template <bool ZEROS>
__global__ void sumsq_pieces_kernel(double *partial, unsigned long long *zeros, const float *x,
                                    const int64_t *desc, int nranges) {
    __shared__ double sh[32];
    int64_t p = blockIdx.x;
    int lo = range_of_piece(desc, 3, nranges, p);
    int64_t start = (p - desc[3 * lo + 2]) * LOOM_SUMSQ_PIECE;
    int64_t n = desc[3 * lo + 1] - start < LOOM_SUMSQ_PIECE ? desc[3 * lo + 1] - start : LOOM_SUMSQ_PIECE;
    const float *xp = x + desc[3 * lo] + start;
    double acc = 0.0;
    unsigned z = 0;
    if (n % 4 == 0 && loom_aligned(16, xp)) { /* four elements a load, added in order */
        const float4 *x4 = (const float4 *)xp;
#pragma unroll 4
        for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 f = x4[i];
            const double a = f.x, b = f.y, c = f.z, e = f.w;
            acc += a * a;
            acc += b * b;
            acc += c * c;
            acc += e * e;
            if (ZEROS) z += (f.x == 0.0f) + (f.y == 0.0f) + (f.z == 0.0f) + (f.w == 0.0f);
        }
    } else {
#pragma unroll 8 /* loads in flight ahead of the (ordered) sum */
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            double v = (double)xp[i];
            acc += v * v;
            if (ZEROS) z += xp[i] == 0.0f;
        }
    }
    acc = loom_block_sum_d(acc, sh);
    if (threadIdx.x == 0) partial[p] = acc;
    if (ZEROS) {
        z = __reduce_add_sync(0xffffffffu, z);
        if ((threadIdx.x & 31) == 0 && z) atomicAdd(zeros, (unsigned long long)z);
    }
}

/* out[0] = sum of partial[0..n) by one block: thread t adds t, t + blockDim, ... in order, then the
 * warps' sums are added in order. */
__global__ void sumsq_total_kernel(double *out, const double *partial, int64_t n) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = loom_block_sum_d(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

double loom_cuda_sumsq_ranges(struct loom_backend *be, const float *x, const int64_t *off,
                              const int64_t *len, int nranges, int64_t *zeros) {
    struct loom_cuda *c = loom_cuda_impl(be);
    int64_t pieces = 0, used = 0;
    int64_t *desc = (int64_t *)malloc((size_t)(nranges > 0 ? nranges : 1) * 3 * sizeof(int64_t));
    LOOM_ASSERT(desc);
    for (int k = 0; k < nranges; k++) {
        if (len[k] <= 0) continue;
        desc[3 * used] = off[k];
        desc[3 * used + 1] = len[k];
        desc[3 * used + 2] = pieces;
        pieces += (len[k] + LOOM_SUMSQ_PIECE - 1) / LOOM_SUMSQ_PIECE;
        used++;
    }
    if (zeros) *zeros = 0;
    if (used == 0) {
        free(desc);
        return 0.0;
    }
    LOOM_ASSERT(pieces < (int64_t)1 << 31);
    /* scratch: [total | zeros | partial[pieces] | desc[3 * used]] */
    size_t bytes = (size_t)(2 + pieces) * sizeof(double) + (size_t)used * 3 * sizeof(int64_t);
    double *d = (double *)loom_cuda_scratch(be, bytes);
    unsigned long long *dz = (unsigned long long *)(d + 1);
    int64_t *ddesc = (int64_t *)(d + 2 + pieces);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(ddesc, desc, (size_t)used * 3 * sizeof(int64_t),
                                    cudaMemcpyHostToDevice, c->stream));
    if (zeros) {
        LOOM_CUDA_CHECK(cudaMemsetAsync(dz, 0, sizeof *dz, c->stream));
        sumsq_pieces_kernel<true><<<(unsigned)pieces, LOOM_SUMSQ_RANGE_THREADS, 0, c->stream>>>(
            d + 2, dz, x, ddesc, (int)used);
    } else {
        sumsq_pieces_kernel<false><<<(unsigned)pieces, LOOM_SUMSQ_RANGE_THREADS, 0, c->stream>>>(
            d + 2, NULL, x, ddesc, (int)used);
    }
    LOOM_CUDA_LAUNCHED();
    sumsq_total_kernel<<<1, 1024, 0, c->stream>>>(d, d + 2, pieces);
    LOOM_CUDA_LAUNCHED();
    LOOM_CUDA_CHECK(cudaMemcpyAsync(c->host_double, d, (zeros ? 2 : 1) * sizeof(double),
                                    cudaMemcpyDeviceToHost, c->stream));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* also keeps desc alive for the copy */
    free(desc);
    if (zeros) {
        unsigned long long z;
        memcpy(&z, c->host_double + 1, sizeof z);
        *zeros = (int64_t)z;
    }
    return c->host_double[0];
}
