/* Linear layer through cuBLAS, fp32 with pedantic math (no TF32, no reduced-precision
 * reductions), on the backend's stream; with set_matmul_dtype(BF16), matmul_bf16.cu instead.
 *
 *   forward:  out[N,OC] = inp[N,C] . w[OC,C]^T + b[OC]
 *   backward: dinp[N,C] = dout[N,OC] . w[OC,C]        (assigned; skipped if dinp is NULL)
 *             dw[OC,C] += dout^T . inp                 db[OC] += sum over rows of dout
 *   linear + GELU: the same products with gelu_forward / gelu_backward (act.cu) and the column
 *             sums of dpre after them, so fp32 results equal the separate ops bit for bit; the
 *             bf16 path fuses them into the products' epilogues (matmul_bf16.cu).
 *   Activations in bf16 (act_dt, inp_dt, dout_dt other than fp32) go to matmul_bf16.cu, which
 *   needs bf16 products; fp32 ones take the paths above unchanged.
 *
 * cuBLAS is column-major: a row-major [R,K] matrix is a column-major K x R one, so each product
 * is written for the transposes: out^T = w . inp^T, dinp^T = w^T . dout^T, dw^T = inp^T . dout.
 */
#include <limits.h>

#include "backend/cuda/common.cuh"

static void gemm(struct loom_backend *be, cublasOperation_t ta, cublasOperation_t tb, int64_t m,
                 int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                 float beta, float *C, int64_t ldc) {
    LOOM_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX &&
                ldb <= INT_MAX && ldc <= INT_MAX);
    const float alpha = 1.0f;
    LOOM_CUBLAS_CHECK(cublasGemmEx(loom_cuda_impl(be)->cublas, ta, tb, (int)m, (int)n, (int)k,
                                   &alpha, A, CUDA_R_32F, (int)lda, B, CUDA_R_32F, (int)ldb, &beta,
                                   C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F_PEDANTIC,
                                   CUBLAS_GEMM_DEFAULT));
}

/* out[n, oc] = b[oc] (the product is then added with beta = 1, as b + sum) */
__global__ void fill_bias_kernel(float *out, const float *b, int64_t N, int64_t OC) {
    int64_t total = N * OC;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = b[i % OC];
}

void loom_cuda_fill_bias(struct loom_backend *be, float *out, const float *b, int64_t N,
                         int64_t OC) {
    fill_bias_kernel<<<loom_cuda_grid(N * OC, 256), 256, 0, loom_cuda_stream(be)>>>(out, b, N, OC);
    LOOM_CUDA_LAUNCHED();
}

void loom_cuda_linear_forward(struct loom_backend *be, float *out, const float *inp,
                              const float *w, const float *b, int64_t N, int64_t C, int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    if (C > 0 && loom_cuda_impl(be)->matmul_bf16) {
        loom_cuda_linear_forward_16(be, out, 0, inp, 0, w, b, N, C, OC);
        return;
    }
    if (b) {
        loom_cuda_fill_bias(be, out, b, N, OC);
    } else if (C <= 0) {
        LOOM_CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)(N * OC) * sizeof(float),
                                        loom_cuda_stream(be)));
    }
    if (C > 0) gemm(be, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, w, C, inp, C, b ? 1.0f : 0.0f, out, OC);
}

void loom_cuda_linear_backward(struct loom_backend *be, float *dinp, float *dw, float *db,
                               const float *dout, const float *inp, const float *w, int64_t N,
                               int64_t C, int64_t OC) {
    if (N <= 0) return;
    if (C > 0 && OC > 0 && loom_cuda_impl(be)->matmul_bf16) {
        loom_cuda_linear_backward_16(be, dinp, 0, dw, db, dout, 0, inp, 0, w, N, C, OC);
        return;
    }
    if (dinp && C > 0) {
        if (OC <= 0)
            LOOM_CUDA_CHECK(cudaMemsetAsync(dinp, 0, (size_t)(N * C) * sizeof(float),
                                            loom_cuda_stream(be)));
        else
            gemm(be, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, w, C, dout, OC, 0.0f, dinp, C);
    }
    if (OC <= 0) return;
    if (dw && C > 0) gemm(be, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dw, C);
    if (db) loom_cuda_colsum_accumulate(be, db, dout, N, OC);
}

void loom_cuda_linear_gelu_forward(struct loom_backend *be, enum loom_gelu form, void *out,
                                   void *pre, enum loom_dtype act_dt, const void *inp,
                                   enum loom_dtype inp_dt, const float *w, const float *b,
                                   int64_t N, int64_t C, int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    const int i16 = loom_cuda_typed16(be, inp_dt, "linear_gelu_forward");
    if (loom_cuda_typed16(be, act_dt, "linear_gelu_forward")) {
        loom_cuda_linear_gelu_forward_act16(be, form, out, pre, inp, i16, w, b, N, C, OC);
        return;
    }
    float *o = (float *)out, *p = (float *)pre;
    if (i16 || (C > 0 && loom_cuda_impl(be)->matmul_bf16))
        loom_cuda_linear_forward_16(be, p, 0, inp, i16, w, b, N, C, OC);
    else
        loom_cuda_linear_forward(be, p, (const float *)inp, w, b, N, C, OC);
    loom_cuda_gelu_forward(be, form, o, p, N * OC);
}

void loom_cuda_linear_gelu_backward(struct loom_backend *be, enum loom_gelu form, void *dpre,
                                    enum loom_dtype act_dt, float *dpre_b, float *dw, float *db,
                                    const void *dout, enum loom_dtype dout_dt, const void *act,
                                    const void *pre, const float *w, int64_t N, int64_t C,
                                    int64_t OC) {
    if (N <= 0) return;
    const int a16 = loom_cuda_typed16(be, act_dt, "linear_gelu_backward");
    const int d16 = loom_cuda_typed16(be, dout_dt, "linear_gelu_backward");
    if (a16 || d16 || (C > 0 && OC > 0 && loom_cuda_impl(be)->matmul_bf16)) {
        loom_cuda_linear_gelu_backward_16(be, form, dpre, a16, dpre_b, dw, db, dout, d16, act, pre,
                                          w, N, C, OC);
        return;
    }
    float *d = (float *)dpre;
    loom_cuda_linear_backward(be, d, dw, db, (const float *)dout, (const float *)act, w, N, C, OC);
    loom_cuda_gelu_backward(be, form, d, d, (const float *)pre, N * C);
    if (dpre_b) loom_cuda_colsum_accumulate(be, dpre_b, d, N, C);
}

/* Typed arrays: fp32 ones take the ops above unchanged (loom_cuda_typed16 checks the others). */
void loom_cuda_linear_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                    const void *inp, enum loom_dtype inp_dt, const float *w,
                                    const float *b, int64_t N, int64_t C, int64_t OC) {
    const int o16 = loom_cuda_typed16(be, out_dt, "linear_forward_typed");
    const int i16 = loom_cuda_typed16(be, inp_dt, "linear_forward_typed");
    if (!o16 && !i16)
        loom_cuda_linear_forward(be, (float *)out, (const float *)inp, w, b, N, C, OC);
    else
        loom_cuda_linear_forward_16(be, out, o16, inp, i16, w, b, N, C, OC);
}

void loom_cuda_linear_backward_typed(struct loom_backend *be, void *dinp, enum loom_dtype dinp_dt,
                                     float *dw, float *db, const void *dout,
                                     enum loom_dtype dout_dt, const void *inp,
                                     enum loom_dtype inp_dt, const float *w, int64_t N, int64_t C,
                                     int64_t OC) {
    const int di16 = loom_cuda_typed16(be, dinp_dt, "linear_backward_typed");
    const int do16 = loom_cuda_typed16(be, dout_dt, "linear_backward_typed");
    const int i16 = loom_cuda_typed16(be, inp_dt, "linear_backward_typed");
    if (!di16 && !do16 && !i16)
        loom_cuda_linear_backward(be, (float *)dinp, dw, db, (const float *)dout,
                                  (const float *)inp, w, N, C, OC);
    else
        loom_cuda_linear_backward_16(be, dinp, di16, dw, db, dout, do16, inp, i16, w, N, C, OC);
}
