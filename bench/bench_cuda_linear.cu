/* Microbenchmark of the linear ops of the CUDA backend with bf16 matrix products, as the trainer
 * calls them with --bf16, at GPT-2 124M's shapes (N = 16 x 1024 rows, hidden 768, FFN 3072):
 * qkv (768 -> 2304), proj (768 -> 768), fc1 (768 -> 3072, with GELU) and fc2 (3072 -> 768).
 * The weights lie in one registered parameter buffer (set_matmul_dtype), as the model's do, so
 * their bf16 copy is made once; activations are fp32 or bf16 as each op takes them. Each case
 * runs 3 times to warm up, then `calls` times between two CUDA events on the backend's stream;
 * the mean is printed with the rate of its matrix products (2 N C OC FLOPs each: one for a
 * forward, one for a backward's dinp, one for its dw). The backward is also timed with only
 * dinp and only dw, to split it.
 *
 * Then the bias gradients' column sums alone, the weight-gradient product with and without a
 * column of ones (what carrying the bias gradient in it would cost), and the fused output layer
 * and loss (linear_xent) on one 4096-row chunk of the 124M head.
 *
 *   bench_cuda_linear [calls [layer]]   (default 30 calls, every layer; qkv, proj, fc1, fc2,
 *                                        colsum, aug, head)
 */
#include <string.h>

#include "bench_cuda.cuh"

struct lin {
    const char *name;
    int64_t C, OC;
    int gelu; /* the product carries the GELU (fc1's forward; fc2's backward goes through it) */
};

static int g_calls;

#define TIME(label, products, N, C, OC, call)                                                 \
    do {                                                                                      \
        double us_;                                                                           \
        BENCH_US(be, g_calls, us_, call);                                                     \
        printf("  %-44s %9.1f us %7.0f TFLOP/s\n", label, us_,                                \
               (products) * 2.0 * (double)(N) * (C) * (OC) / (us_ * 1e6));                    \
    } while (0)

int main(int argc, char **argv) {
    g_calls = argc > 1 ? atoi(argv[1]) : 30;
    if (g_calls < 1) g_calls = 1;
    struct loom_backend *be;
    if (loom_backend_create(&be, "cuda", 0) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    const int64_t N = 16 * 1024;
    const struct lin lins[] = {
        {"qkv", 768, 2304, 0}, {"proj", 768, 768, 0}, {"fc1", 768, 3072, 1}, {"fc2", 3072, 768, 0}};
    const int nl = (int)(sizeof lins / sizeof lins[0]);
    /* the registered parameters: each weight then its bias */
    int64_t off[8], np = 0;
    for (int i = 0; i < nl; i++) {
        off[i] = np;
        np += lins[i].OC * lins[i].C + lins[i].OC;
    }
    float *params = (float *)bench_alloc(be, (size_t)np * sizeof(float));
    float *grads = (float *)bench_alloc(be, (size_t)np * sizeof(float));
    bench_fill(be, params, np, 1, 0.02f);
    if (be->ops->set_matmul_dtype(be, LOOM_DTYPE_BF16, params, np) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    const enum loom_dtype bf = LOOM_DTYPE_BF16, f32 = LOOM_DTYPE_F32;
    const int64_t wide = N * 3072;
    float *x32 = (float *)bench_alloc(be, (size_t)wide * 4), *y32 = (float *)bench_alloc(be, (size_t)wide * 4);
    float *d32 = (float *)bench_alloc(be, (size_t)wide * 4), *g32 = (float *)bench_alloc(be, (size_t)wide * 4);
    void *x16 = bench_alloc(be, (size_t)wide * 2), *y16 = bench_alloc(be, (size_t)wide * 2);
    void *p16 = bench_alloc(be, (size_t)wide * 2), *d16 = bench_alloc(be, (size_t)wide * 2);
    bench_fill(be, x32, wide, 2, 1.0f);
    bench_fill(be, d32, wide, 3, 0.01f);
    bench_fill(be, y32, wide, 4, 1.0f);
    bench_fill(be, (__nv_bfloat16 *)x16, wide, 10, 1.0f);
    bench_fill(be, (__nv_bfloat16 *)y16, wide, 11, 1.0f);
    bench_fill(be, (__nv_bfloat16 *)p16, wide, 12, 1.0f);
    bench_fill(be, (__nv_bfloat16 *)d16, wide, 13, 0.01f);
    printf("bf16 linear ops at GPT-2 124M shapes, N %lld rows, mean of %d calls\n", (long long)N,
           g_calls);
    for (int i = 0; i < nl; i++) {
        const struct lin *L = &lins[i];
        if (argc > 2 && strcmp(argv[2], L->name) != 0) continue;
        const int64_t C = L->C, OC = L->OC;
        const float *w = params + off[i], *b = w + OC * C;
        float *dw = grads + off[i], *db = dw + OC * C;
        char lab[96];
        printf("%s: C %lld -> OC %lld\n", L->name, (long long)C, (long long)OC);
        snprintf(lab, sizeof lab, "linear_forward (fp32 in/out, bias)");
        TIME(lab, 1, N, C, OC, be->ops->linear_forward(be, y32, x32, w, b, N, C, OC));
        snprintf(lab, sizeof lab, "linear_forward_typed (bf16 in, fp32 out, bias)");
        TIME(lab, 1, N, C, OC,
             be->ops->linear_forward_typed(be, y32, f32, x16, bf, w, b, N, C, OC));
        snprintf(lab, sizeof lab, "linear_backward (fp32, dinp + dw + db)");
        TIME(lab, 2, N, C, OC, be->ops->linear_backward(be, g32, dw, db, d32, x32, w, N, C, OC));
        snprintf(lab, sizeof lab, "linear_backward dinp only");
        TIME(lab, 1, N, C, OC, be->ops->linear_backward(be, g32, NULL, NULL, d32, x32, w, N, C, OC));
        snprintf(lab, sizeof lab, "linear_backward dw only");
        TIME(lab, 1, N, C, OC, be->ops->linear_backward(be, NULL, dw, NULL, d32, x32, w, N, C, OC));
        snprintf(lab, sizeof lab, "linear_backward dw + db");
        TIME(lab, 1, N, C, OC, be->ops->linear_backward(be, NULL, dw, db, d32, x32, w, N, C, OC));
        snprintf(lab, sizeof lab, "linear_backward_typed (bf16 dout, dinp+dw)");
        TIME(lab, 2, N, C, OC,
             be->ops->linear_backward_typed(be, g32, f32, dw, NULL, d16, bf, x32, f32, w, N, C, OC));
        if (L->gelu) {
            snprintf(lab, sizeof lab, "linear_gelu_forward (bf16 act, bias)");
            TIME(lab, 1, N, C, OC,
                 be->ops->linear_gelu_forward(be, LOOM_GELU_TANH, y16, p16, bf, x32, LOOM_DTYPE_F32,
                                              w, b, N, C, OC));
            snprintf(lab, sizeof lab, "linear_gelu_forward erf form (bf16 act, bias)");
            TIME(lab, 1, N, C, OC,
                 be->ops->linear_gelu_forward(be, LOOM_GELU_ERF, y16, p16, bf, x32, LOOM_DTYPE_F32,
                                              w, b, N, C, OC));
            snprintf(lab, sizeof lab, "linear_gelu_forward (fp32 act, bias)");
            TIME(lab, 1, N, C, OC,
                 be->ops->linear_gelu_forward(be, LOOM_GELU_TANH, y32, g32, f32, x32,
                                              LOOM_DTYPE_F32, w, b, N, C, OC));
        }
        if (i == 3) { /* fc2's backward through fc1's GELU: dpre[N,3072], act/pre bf16 */
            float *db1 = grads + off[2] + 3072 * 768;
            snprintf(lab, sizeof lab, "linear_gelu_backward (bf16, dinp+dw+db+dpre_b)");
            TIME(lab, 2, N, C, OC,
                 be->ops->linear_gelu_backward(be, LOOM_GELU_TANH, d16, bf, db1, dw, db, d32,
                                               LOOM_DTYPE_F32, y16, p16, w, N, C, OC));
            snprintf(lab, sizeof lab, "linear_gelu_backward erf form (bf16, dinp+dw+db+dpre_b)");
            TIME(lab, 2, N, C, OC,
                 be->ops->linear_gelu_backward(be, LOOM_GELU_ERF, d16, bf, db1, dw, db, d32,
                                               LOOM_DTYPE_F32, y16, p16, w, N, C, OC));
            snprintf(lab, sizeof lab, "linear_gelu_backward dpre only (no sums)");
            TIME(lab, 1, N, C, OC,
                 be->ops->linear_gelu_backward(be, LOOM_GELU_TANH, d16, bf, NULL, NULL, NULL, d32,
                                               LOOM_DTYPE_F32, y16, p16, w, N, C, OC));
            snprintf(lab, sizeof lab, "linear_gelu_backward dpre + dpre_b");
            TIME(lab, 1, N, C, OC,
                 be->ops->linear_gelu_backward(be, LOOM_GELU_TANH, d16, bf, db1, NULL, NULL, d32,
                                               LOOM_DTYPE_F32, y16, p16, w, N, C, OC));
            snprintf(lab, sizeof lab, "linear_gelu_backward (fp32, dinp+dw+db+dpre_b)");
            TIME(lab, 2, N, C, OC,
                 be->ops->linear_gelu_backward(be, LOOM_GELU_TANH, g32, f32, db1, dw, db, d32,
                                               LOOM_DTYPE_F32, y32, x32, w, N, C, OC));
        }
    }
    if (argc <= 2 || strcmp(argv[2], "colsum") == 0) {
        /* the bias gradients' column sums alone: of a bf16 gradient (qkv's and fc1's at 124M and
         * 350M), and of an fp32 one converted to bf16 in the same pass (the residual gradient) */
        const int64_t cs[] = {2304, 3072, 4096};
        float *sums = (float *)bench_alloc(be, 4096 * sizeof(float));
        void *g16 = bench_alloc(be, (size_t)(N * 4096) * 2);
        bench_fill(be, (__nv_bfloat16 *)g16, N * 4096, 14, 0.01f);
        printf("colsum: N %lld rows\n", (long long)N);
        for (int i = 0; i < 3; i++) {
            double us;
            BENCH_US(be, g_calls, us,
                     loom_cuda_colsum_convert(be, sums, NULL, bf, g16, bf, N, cs[i]));
            printf("  column sums of bf16 [N, %lld]                %9.1f us %7.0f GB/s\n",
                   (long long)cs[i], us, (double)(N * cs[i]) * 2 / (us * 1e3));
        }
        for (int64_t C = 768; C <= 1024; C += 256) {
            double us;
            BENCH_US(be, g_calls, us,
                     loom_cuda_colsum_convert(be, sums, x16, bf, d32, f32, N, C));
            printf("  column sums of fp32 [N, %lld] + bf16 copy     %9.1f us %7.0f GB/s\n",
                   (long long)C, us, (double)(N * C) * 6 / (us * 1e3));
        }
        be->ops->free(be, sums);
        be->ops->free(be, g16);
    }
    if (argc <= 2 || strcmp(argv[2], "aug") == 0) {
        /* The weight-gradient product dw[OC, C] += dout^T . x over the N rows (as
         * product_weight_grad, column-major m = C, n = OC, k = N), plain and with x widened by a
         * column of ones (m = C + 1 of rows of C + 8 columns: the product's last row is then the
         * bias gradient, the sums of dout's columns, which a separate pass takes now; see the
         * colsum section). cuBLAS's default algorithm for all three, fp32 out. */
        struct loom_cuda *cu = loom_cuda_impl(be);
        LOOM_CUBLAS_CHECK(cublasSetStream(cu->cublas, loom_cuda_stream(be)));
        const int64_t shapes[][2] = {{768, 2304}, {768, 3072}, {1024, 3072}, {1024, 4096}};
        void *xa = bench_alloc(be, (size_t)(N * 1032) * 2),
             *da = bench_alloc(be, (size_t)(N * 4096) * 2);
        float *wa = (float *)bench_alloc(be, (size_t)(1032 * 4096) * 4);
        bench_fill(be, (__nv_bfloat16 *)xa, N * 1032, 15, 1.0f);
        bench_fill(be, (__nv_bfloat16 *)da, N * 4096, 16, 0.01f);
        const float one = 1.0f;
        printf("aug: the weight-gradient product, N %lld rows\n", (long long)N);
        for (int i = 0; i < 4; i++) {
            const int64_t C = shapes[i][0], OC = shapes[i][1];
            const struct {
                const char *what;
                int64_t m, ld;
            } v[] = {{"plain", C, C},
                     {"rows of C + 8", C, C + 8},
                     {"C + 1 (ones column)", C + 1, C + 8},
                     {"C + 8 (ones, 7 zeros)", C + 8, C + 8}};
            for (int j = 0; j < 4; j++) {
                double us;
                BENCH_US(be, g_calls, us,
                         LOOM_CUBLAS_CHECK(cublasGemmEx(cu->cublas, CUBLAS_OP_N, CUBLAS_OP_T,
                                                        (int)v[j].m, (int)OC, (int)N, &one, xa,
                                                        CUDA_R_16BF, (int)v[j].ld, da, CUDA_R_16BF,
                                                        (int)OC, &one, wa, CUDA_R_32F, (int)v[j].ld,
                                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)));
                printf("  dw %4lld -> %4lld, %-22s %9.1f us %7.0f TFLOP/s\n", (long long)C,
                       (long long)OC, v[j].what, us, 2.0 * (double)N * C * OC / (us * 1e6));
            }
        }
        /* the bias gradient alone as a product with ones: db[OC] = dout^T . 1 (m = OC, n = 8
         * columns of ones, k = N), against the column-sum pass above */
        for (int i = 0; i < 4; i++) {
            const int64_t OC = shapes[i][1];
            double us;
            BENCH_US(be, g_calls, us,
                     LOOM_CUBLAS_CHECK(cublasGemmEx(
                         cu->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)OC, 8, (int)N, &one, da,
                         CUDA_R_16BF, (int)OC, xa, CUDA_R_16BF, (int)N, &one, wa, CUDA_R_32F,
                         (int)OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)));
            printf("  db [%4lld] as dout^T . ones[N, 8]          %9.1f us %7.0f GB/s\n",
                   (long long)OC, us, (double)(N * OC) * 2 / (us * 1e3));
        }
        be->ops->free(be, xa);
        be->ops->free(be, da);
        be->ops->free(be, wa);
    }
    if (argc <= 2 || strcmp(argv[2], "head") == 0) {
        /* the fused output layer + loss on one chunk of 4096 rows (the trainer's chunk at
         * 124M), the weight outside the registered range (as wte's bf16 copy is not: close
         * enough for timing), logits in the products' 16-bit type */
        const int64_t R = 4096, C = 768, V = 50304;
        float *w = (float *)bench_alloc(be, (size_t)(V * C) * 4),
              *dw = (float *)bench_alloc(be, (size_t)(V * C) * 4);
        bench_fill(be, w, V * C, 20, 0.02f);
        void *logits = bench_alloc(be, (size_t)(R * V) * 2);
        float *losses = (float *)bench_alloc(be, (size_t)R * 4);
        int32_t *tg = (int32_t *)bench_alloc(be, (size_t)R * 4);
        const enum loom_dtype ldt = be->ops->linear_xent_dtype(be);
        printf("head: %lld rows, C %lld -> V %lld, logits %s\n", (long long)R, (long long)C,
               (long long)V, loom_dtype_name(ldt));
        TIME("linear_xent (forward, loss, dinp, dw)", 3, R, C, V,
             be->ops->linear_xent(be, losses, g32, dw, logits, x32, w, tg, 1.0f, R, C, V, 50257));
        TIME(
            "linear_xent losses only", 1, R, C, V,
            be->ops->linear_xent(be, losses, NULL, NULL, logits, x32, w, tg, 1.0f, R, C, V, 50257));
        TIME("xent_fused with grad (no products)", 0, R, C, V,
             be->ops->xent_fused(be, losses, logits, ldt, tg, 1.0f, 1, R, V, 50257));
        be->ops->free(be, w);
        be->ops->free(be, dw);
        be->ops->free(be, logits);
        be->ops->free(be, losses);
        be->ops->free(be, tg);
    }
    loom_backend_destroy(be);
    return 0;
}
