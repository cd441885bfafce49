/* Microbenchmark of the bf16 tensor-core attention (attention_bf16.cu) through the backend's
 * attention ops, as the trainer calls them with --bf16: the forward includes its conversion of
 * k and v to bf16; the backward includes D = rowsum(dout * out) and the conversion of q, k, v
 * and dout. Causal, at the shapes of the GPU runs: GPT-2 124M (micro-batch 16, sequence 1024,
 * 12 heads of 64), 350M (16 heads of 64), head size 128 (16 heads of 128, as the 1.3B model's
 * 2048 / 16) and grouped-query attention as in Llama-style 8B models (micro-batch 4, sequence
 * 2048, 32 query heads of 128 sharing 8 key/value heads). Inputs are normal random numbers (qkv sd
 * 1, dout sd 0.1); each op runs 3 times to warm up, then `calls` times between two CUDA events on
 * the backend's stream; the mean is printed with the rate in TFLOP/s of the causal count: forward 4
 * B NH T^2 HS / 2 FLOPs (the two products over the lower triangle), backward 2.5 times that. Each
 * shape runs on bf16 arrays (loom_attn.dt, as the GPT passes them) with each attention backend:
 * loom's flash kernel and, where built in, cuDNN's fused attention (--attention-backend flash,
 * fused).
 *
 *   bench_cuda_attention [calls]      (default 50)
 */
#include "bench_cuda.cuh"

struct bench_shape {
    const char *name;
    int64_t B, T, NH, NKV, HS;
};

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 50;
    if (calls < 1) calls = 1;
    struct loom_backend *be;
    if (loom_backend_create(&be, "cuda", 0) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    if (be->ops->set_matmul_dtype(be, LOOM_DTYPE_BF16, NULL, 0) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    const struct bench_shape shapes[] = {
        {"124M", 16, 1024, 12, 12, 64},
        {"350M", 16, 1024, 16, 16, 64},
        {"HS128", 16, 1024, 16, 16, 128},
        {"GQA", 4, 2048, 32, 8, 128},
    };
    printf("bf16 attention, causal, mean of %d calls after 3 warm-up calls\n", calls);
    printf("%-6s %-6s %3s %5s %3s %3s %4s | %9s %8s | %9s %8s\n", "shape", "kernel", "B", "T", "NH",
           "NKV", "HS", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s");
    const enum loom_attn_backend kinds[] = {LOOM_ATTN_FLASH, LOOM_ATTN_FUSED};
    const char *kind_names[] = {"flash", "fused"};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int kind = 0; kind < 2; kind++) {
            const struct bench_shape *sh = &shapes[s];
            if (be->ops->set_attention_backend(be, kinds[kind]) != LOOM_OK) {
                printf("%-6s %-6s: ", sh->name, kind_names[kind]);
                loom_print_error();
                continue;
            }
            struct loom_attn a = {};
            a.dt = LOOM_DTYPE_BF16;
            a.B = sh->B;
            a.T = sh->T;
            a.NH = sh->NH;
            a.NKV = sh->NKV;
            a.HS = sh->HS;
            a.causal = 1;
            a.scale = 1.0f / sqrtf((float)sh->HS);
            a.NH_global = sh->NH;
            if (!loom_cuda_attention_bf16_ok(be, &a)) {
                printf("%-6s: not on the bf16 attention path\n", sh->name);
                continue;
            }
            /* bf16 arrays; lse fp32 */
            const int64_t nqkv = a.B * a.T * (a.NH + 2 * a.NKV) * a.HS,
                          nout = a.B * a.T * a.NH * a.HS;
            __nv_bfloat16 *qkv = (__nv_bfloat16 *)bench_alloc(be, (size_t)nqkv * 2);
            __nv_bfloat16 *dout = (__nv_bfloat16 *)bench_alloc(be, (size_t)nout * 2);
            void *out = bench_alloc(be, (size_t)nout * 2),
                 *dqkv = bench_alloc(be, (size_t)nqkv * 2);
            float *lse = (float *)bench_alloc(be, (size_t)(a.B * a.NH * a.T) * sizeof(float));
            bench_fill(be, qkv, nqkv, 1, 1.0f);
            bench_fill(be, dout, nout, 2, 0.1f);
            double us[2];
            BENCH_US(be, calls, us[0], be->ops->attention_forward(be, out, lse, qkv, &a));
            BENCH_US(be, calls, us[1],
                     be->ops->attention_backward(be, dqkv, dout, out, lse, qkv, &a));
            const double ms[2] = {us[0] / 1000.0, us[1] / 1000.0};
            const double flops = 4.0 * a.B * a.NH * (double)a.T * a.T * a.HS / 2;
            printf("%-6s %-6s %3lld %5lld %3lld %3lld %4lld | %9.4f %8.1f | %9.4f %8.1f\n",
                   sh->name, kind_names[kind], (long long)a.B, (long long)a.T, (long long)a.NH,
                   (long long)a.NKV, (long long)a.HS, ms[0], flops / (ms[0] * 1e9), ms[1],
                   2.5 * flops / (ms[1] * 1e9));
            void *bufs[] = {qkv, dout, out, dqkv, lse};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
                be->ops->free(be, bufs[i]);
        }
    loom_backend_destroy(be);
    return 0;
}
