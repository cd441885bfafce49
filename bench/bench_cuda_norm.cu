/* Microbenchmark of the CUDA backend's LayerNorm and RMSNorm (norm.cu) at a GPT-2 124M training
 * step's rows (N = 16 x 1024 by default): forward, residual add + forward, and backward (dinp, dw,
 * db; also split into dinp alone and the weight gradients alone), in fp32 at C = 768, 1024 and
 * 2048, and at C = 768 and 1024 with a bf16 out (forward) or a bf16 dout (backward). Each op runs 3
 * times to warm up, then `calls` times between two CUDA events on the backend's stream; the mean
 * time is printed with the rate of the traffic the op cannot avoid (each array read or written
 * once: forward x and out; residual x, r, xs and out; backward x, dout, dinp read and written; the
 * per-row statistics and the weights are counted, the weight gradients' partial sums are not).
 * Then the query and key head norms (head_norm.cu) of bf16 qkv rows at GPT-2 124M's and 350M's
 * heads (12 and 16 of 64).
 *
 *   bench_cuda_norm [calls [N]]      (default 50 calls, N = 16384)
 */
#include "bench_cuda.cuh"

static int g_calls;

typedef __nv_bfloat16 bf16;

/* times `call`, prints us/call and GB/s for `bytes` moved a call */
#define TIME(label, bytes, call)                                                              \
    do {                                                                                      \
        double us_;                                                                           \
        BENCH_US(be, g_calls, us_, call);                                                     \
        printf("  %-46s %9.1f us %7.0f GB/s\n", label, us_, (double)(bytes) / (us_ * 1e3));   \
    } while (0)

int main(int argc, char **argv) {
    g_calls = argc > 1 ? atoi(argv[1]) : 50;
    if (g_calls < 1) g_calls = 1;
    const int64_t N = argc > 2 ? atoll(argv[2]) : 16 * 1024;
    if (N < 1) return 1;
    struct loom_backend *be;
    if (loom_backend_create(&be, "cuda", 0) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    const int64_t Cmax = 2048, nmax = N * Cmax;
    const size_t big = (size_t)nmax * 4, row = (size_t)Cmax * 4, col = (size_t)N * 4;
    float *x = (float *)bench_alloc(be, big), *r = (float *)bench_alloc(be, big);
    float *xs = (float *)bench_alloc(be, big), *out = (float *)bench_alloc(be, big);
    float *dout = (float *)bench_alloc(be, big), *dinp = (float *)bench_alloc(be, big);
    void *out16 = bench_alloc(be, big / 2), *dout16 = bench_alloc(be, big / 2);
    void *r16 = bench_alloc(be, big / 2);
    float *w = (float *)bench_alloc(be, row), *b = (float *)bench_alloc(be, row);
    float *dw = (float *)bench_alloc(be, row), *db = (float *)bench_alloc(be, row);
    float *mean = (float *)bench_alloc(be, col), *rstd = (float *)bench_alloc(be, col);
    bench_fill(be, x, nmax, 1, 1.0f, 0.5f);
    bench_fill(be, r, nmax, 2, 1.0f, 0.0f);
    bench_fill(be, dout, nmax, 3, 0.01f, 0.0f);
    bench_fill(be, w, Cmax, 4, 0.1f, 1.0f);
    bench_fill(be, b, Cmax, 5, 0.1f, 0.0f);
    const enum loom_dtype f32 = LOOM_DTYPE_F32, bf = LOOM_DTYPE_BF16;
    const float eps = 1e-5f;
    printf("norms of the CUDA backend, N %lld rows, mean of %d calls\n", (long long)N, g_calls);
    const int64_t Cs[] = {768, 1024, 2048};
    for (int ci = 0; ci < 3; ci++) {
        const int64_t C = Cs[ci], n = N * C;
        const double stats = 8.0 * N, wts = 8.0 * C;
        printf("C = %lld, fp32\n", (long long)C);
        TIME("layernorm_forward", 8.0 * n + stats + wts,
             loom_cuda_layernorm_forward_typed(be, out, f32, mean, rstd, x, w, b, N, C, eps));
        TIME("residual_layernorm_forward", 16.0 * n + stats + wts,
             loom_cuda_residual_layernorm_forward_typed(be, xs, out, f32, mean, rstd, x, r, f32, w,
                                                        b, N, C, eps));
        TIME("layernorm_backward (dinp, dw, db)", 16.0 * n + stats + wts,
             loom_cuda_layernorm_backward_typed(be, dinp, NULL, NULL, dw, db, dout, f32, x, w, mean,
                                                rstd, N, C));
        TIME("layernorm_backward, dinp only", 16.0 * n + stats + wts,
             loom_cuda_layernorm_backward_typed(be, dinp, NULL, NULL, NULL, NULL, dout, f32, x, w,
                                                mean, rstd, N, C));
        TIME("layernorm_backward, dw and db only", 8.0 * n + stats + wts,
             loom_cuda_layernorm_backward_typed(be, NULL, NULL, NULL, dw, db, dout, f32, x, w, mean,
                                                rstd, N, C));
        TIME("rmsnorm_forward", 8.0 * n + stats / 2 + wts / 2,
             loom_cuda_rmsnorm_forward_typed(be, out, f32, rstd, x, w, N, C, eps));
        TIME("residual_rmsnorm_forward", 16.0 * n + stats / 2 + wts / 2,
             loom_cuda_residual_rmsnorm_forward_typed(be, xs, out, f32, rstd, x, r, f32, w, N, C,
                                                      eps));
        TIME("rmsnorm_backward (dinp, dw)", 16.0 * n + stats / 2 + wts,
             loom_cuda_rmsnorm_backward_typed(be, dinp, NULL, NULL, dw, dout, f32, x, w, rstd, N,
                                              C));
    }
    for (int ci = 0; ci < 2; ci++) {
        const int64_t C = Cs[ci], n = N * C;
        const double stats = 8.0 * N, wts = 8.0 * C;
        /* a bf16 dout: dout normalised by the RMSNorm forward (values of order 1) */
        loom_cuda_rmsnorm_forward_typed(be, dout16, bf, rstd, dout, w, N, C, eps);
        loom_cuda_rmsnorm_forward_typed(be, r16, bf, rstd, r, w, N, C, eps); /* a bf16 r */
        printf("C = %lld, bf16 out (forward) / bf16 dout (backward)\n", (long long)C);
        TIME("layernorm_forward, bf16 out", 6.0 * n + stats + wts,
             loom_cuda_layernorm_forward_typed(be, out16, bf, mean, rstd, x, w, b, N, C, eps));
        TIME("residual_layernorm_forward, bf16 out", 14.0 * n + stats + wts,
             loom_cuda_residual_layernorm_forward_typed(be, xs, out16, bf, mean, rstd, x, r, f32, w,
                                                        b, N, C, eps));
        TIME("residual_layernorm_forward, bf16 r and out", 12.0 * n + stats + wts,
             loom_cuda_residual_layernorm_forward_typed(be, xs, out16, bf, mean, rstd, x, r16, bf,
                                                        w, b, N, C, eps));
        TIME("layernorm_backward, bf16 dout", 14.0 * n + stats + wts,
             loom_cuda_layernorm_backward_typed(be, dinp, NULL, NULL, dw, db, dout16, bf, x, w,
                                                mean, rstd, N, C));
        /* with the next product's bf16 output gradient and bias gradient (as --bf16 runs it) */
        if (be->ops->set_matmul_dtype(be, bf, NULL, 0) != LOOM_OK) {
            loom_print_error();
            return 1;
        }
        TIME("layernorm_backward, bf16 dout, + dinp copy, sums", 16.0 * n + stats + wts,
             loom_cuda_layernorm_backward_typed(be, dinp, out16, b, dw, db, dout16, bf, x, w, mean,
                                                rstd, N, C));
        TIME("rmsnorm_forward, bf16 out", 6.0 * n + stats / 2 + wts / 2,
             loom_cuda_rmsnorm_forward_typed(be, out16, bf, rstd, x, w, N, C, eps));
        TIME("residual_rmsnorm_forward, bf16 out", 14.0 * n + stats / 2 + wts / 2,
             loom_cuda_residual_rmsnorm_forward_typed(be, xs, out16, bf, rstd, x, r, f32, w, N, C,
                                                      eps));
        TIME("rmsnorm_backward, bf16 dout", 14.0 * n + stats / 2 + wts,
             loom_cuda_rmsnorm_backward_typed(be, dinp, NULL, NULL, dw, dout16, bf, x, w, rstd, N,
                                              C));
    }
    /* the query and key head norms (--qk-layernorm) of bf16 qkv rows, NH heads of 64 (GPT-2
     * 124M: 12, 350M: 16): the bytes they must move are the query and key vectors read and
     * written, the kept copy written (forward), or dqkv's query and key part read and written and
     * the kept copy read (backward), and the statistics. (The gathers into fp32 rows, norms over
     * rows of 64 and scatters they replaced took 330 / 613 us at 12 heads: docs/benchmarks.md.) */
    const int64_t HS = 64;
    for (int64_t NH = 12; NH <= 16; NH += 4) {
        const int64_t NKV = NH, nv = N * (NH + NKV);
        /* bytes of the query and key vectors, of their statistics, of one weight row */
        const double qk = 2.0 * (double)(nv * HS), hstats = 8.0 * (double)nv, hw = 4.0 * HS;
        void *qkv16 = bench_alloc(be, (size_t)(N * (NH + 2 * NKV) * HS) * 2);
        void *dqkv16 = bench_alloc(be, (size_t)(N * (NH + 2 * NKV) * HS) * 2);
        void *keep16 = bench_alloc(be, (size_t)(nv * HS) * 2);
        float *hmean = (float *)bench_alloc(be, (size_t)nv * 4);
        float *hrstd = (float *)bench_alloc(be, (size_t)nv * 4);
        bench_fill(be, (bf16 *)qkv16, N * (NH + 2 * NKV) * HS, 6, 1.0f, 0.3f);
        bench_fill(be, (bf16 *)dqkv16, N * (NH + 2 * NKV) * HS, 7, 1.0f, 0.0f);
        printf("head norms, %lld tokens, %lld query and %lld key heads of %lld, bf16 qkv\n",
               (long long)N, (long long)NH, (long long)NKV, (long long)HS);
        TIME("head_norm_forward, layernorm", 3.0 * qk + hstats + 4.0 * hw,
             loom_cuda_head_norm_forward(be, 0, qkv16, bf, keep16, hmean, hrstd, w, b, w, b, N, NH,
                                         NKV, HS, eps));
        TIME("head_norm_backward, layernorm", 3.0 * qk + hstats + 4.0 * hw,
             loom_cuda_head_norm_backward(be, 0, dqkv16, bf, dw, db, dw, db, keep16, hmean, hrstd,
                                          w, w, N, NH, NKV, HS));
        TIME("head_norm_forward, rmsnorm", 3.0 * qk + hstats / 2 + 2.0 * hw,
             loom_cuda_head_norm_forward(be, 1, qkv16, bf, keep16, NULL, hrstd, w, NULL, w, NULL, N,
                                         NH, NKV, HS, eps));
        TIME("head_norm_backward, rmsnorm", 3.0 * qk + hstats / 2 + 2.0 * hw,
             loom_cuda_head_norm_backward(be, 1, dqkv16, bf, dw, NULL, dw, NULL, keep16, NULL,
                                          hrstd, w, w, N, NH, NKV, HS));
        void *hb[] = {qkv16, dqkv16, keep16, hmean, hrstd};
        for (int i = 0; i < 5; i++)
            be->ops->free(be, hb[i]);
    }
    loom_backend_destroy(be);
    return 0;
}
