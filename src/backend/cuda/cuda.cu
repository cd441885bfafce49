/* CUDA backend: creation, device memory, the stream, and the vtable.
 *
 * One device, one stream (non-blocking), one cuBLAS handle bound to that stream with a fixed
 * workspace and pedantic fp32 math (no TF32), so fp32 results match the CPU backend closely and
 * repeat bit for bit run to run. Device memory comes from cudaMalloc (never managed memory).
 */
#include <stdlib.h>

#include "backend/cuda/common.cuh"

#define LOOM_CUDA_CUBLAS_WS_BYTES ((size_t)32 << 20)

/* ---- device memory: every allocation is listed, for memory_stats ---- */

void *loom_cuda_alloc(struct loom_backend *be, size_t bytes) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (!bytes) bytes = 256;
    if (c->nallocs == c->cap_allocs) {
        int cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        struct loom_cuda_alloc *a =
            (struct loom_cuda_alloc *)realloc(c->allocs, (size_t)cap * sizeof *a);
        if (!a) return NULL;
        c->allocs = a;
        c->cap_allocs = cap;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError(); /* clear the error so that later calls are not blamed */
        return NULL;
    }
    c->allocs[c->nallocs].p = p;
    c->allocs[c->nallocs].bytes = bytes;
    c->nallocs++;
    c->alloc_calls++;
    c->mem_in_use += bytes;
    if (c->mem_in_use > c->mem_peak) c->mem_peak = c->mem_in_use;
    return p;
}

void loom_cuda_release(struct loom_backend *be, void *p) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (!p) return;
    for (int i = c->nallocs - 1; i >= 0; i--)
        if (c->allocs[i].p == p) {
            c->mem_in_use -= c->allocs[i].bytes;
            c->allocs[i] = c->allocs[--c->nallocs];
            break;
        }
    LOOM_CUDA_CHECK(cudaFree(p));
}

void loom_cuda_grow(struct loom_backend *be, void **buf, size_t *have, size_t bytes,
                    const char *what) {
    if (bytes <= *have) return;
    size_t want = bytes + bytes / 4;
    want = (want + 255) & ~(size_t)255;
    /* The old buffer may still be read by queued kernels: wait for them before freeing. */
    LOOM_CUDA_CHECK(cudaStreamSynchronize(loom_cuda_stream(be)));
    loom_cuda_release(be, *buf);
    *buf = NULL;
    *have = 0;
    *buf = loom_cuda_alloc(be, want);
    if (!*buf)
        loom_abort(__FILE__, __LINE__, "cuda: out of device memory for %zu bytes of %s", want,
                   what);
    *have = want;
}

void *loom_cuda_scratch(struct loom_backend *be, size_t bytes) {
    struct loom_cuda *c = loom_cuda_impl(be);
    loom_cuda_grow(be, &c->scratch, &c->scratch_bytes, bytes, "scratch");
    return c->scratch;
}

int loom_cuda_fastest(struct loom_backend *be, int n, int (*run)(void *ctx, int i), void *ctx) {
    cudaStream_t st = loom_cuda_stream(be);
    cudaEvent_t e0, e1;
    LOOM_CUDA_CHECK(cudaEventCreate(&e0));
    LOOM_CUDA_CHECK(cudaEventCreate(&e1));
    float best = 0.0f;
    int besti = -1;
    for (int i = 0; i < n; i++) {
        int ok = run(ctx, i);
        if (!ok) continue;
        LOOM_CUDA_CHECK(cudaEventRecord(e0, st));
        for (int r = 0; r < 3 && ok; r++)
            ok = run(ctx, i);
        LOOM_CUDA_CHECK(cudaEventRecord(e1, st));
        LOOM_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0.0f;
        LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (ok && (besti < 0 || ms < best)) {
            best = ms;
            besti = i;
        }
    }
    LOOM_CUDA_CHECK(cudaEventDestroy(e0));
    LOOM_CUDA_CHECK(cudaEventDestroy(e1));
    return besti;
}

static int g_profiling; /* LOOM_CUDA_PROFILE: the ops are timed (profile.cu) */

static void cuda_destroy(struct loom_backend *be) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (g_profiling && c) loom_cuda_profile_report();
    if (c) {
        cudaSetDevice(c->device);
        if (c->stream) cudaStreamSynchronize(c->stream);
        loom_cuda_matmul_free(be);
        loom_cuda_cudnn_free(be);
        if (c->cublas) cublasDestroy(c->cublas);
        if (c->host_double) cudaFreeHost(c->host_double);
        if (c->stream) cudaStreamDestroy(c->stream);
        for (int i = 0; i < c->nallocs; i++) cudaFree(c->allocs[i].p); /* workspaces, leaks */
        free(c->allocs);
        free(c);
    }
    free(be);
}

static void *cuda_malloc(struct loom_backend *be, size_t bytes) {
    return loom_cuda_alloc(be, bytes);
}

static void cuda_free(struct loom_backend *be, void *p) {
    if (p) {
        /* kernels queued on the stream may still use p: cudaFree waits for the device */
        loom_cuda_release(be, p);
    }
}

static void cuda_memory_stats(struct loom_backend *be, struct loom_mem_stats *st) {
    struct loom_cuda *c = loom_cuda_impl(be);
    st->in_use = c->mem_in_use;
    st->peak = c->mem_peak;
    st->allocations = c->alloc_calls;
}

static void *cuda_stream(struct loom_backend *be) { return (void *)loom_cuda_stream(be); }

/* Host <-> device copies complete before returning: the host buffer may be reused at once. */
static void cuda_to_device(struct loom_backend *be, void *dst, const void *host_src,
                           size_t bytes) {
    if (!bytes) return;
    loom_cuda_wrote(be, dst, bytes);
    cudaStream_t s = loom_cuda_stream(be);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, s));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
}

static void cuda_to_host(struct loom_backend *be, void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    cudaStream_t s = loom_cuda_stream(be);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, s));
    LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
}

static void cuda_copy(struct loom_backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    loom_cuda_wrote(be, dst, bytes);
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, loom_cuda_stream(be)));
}

static void cuda_written(struct loom_backend *be, const void *p, size_t bytes) {
    loom_cuda_wrote(be, p, bytes);
}

static void cuda_zero(struct loom_backend *be, void *p, size_t bytes) {
    if (!bytes) return;
    loom_cuda_wrote(be, p, bytes);
    LOOM_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, loom_cuda_stream(be)));
}

/* one 2D memset: a launch instead of count */
static void cuda_zero_strided(struct loom_backend *be, float *p, int64_t count, int64_t len,
                              int64_t stride) {
    if (count <= 0 || len <= 0) return;
    loom_cuda_wrote(be, p, (size_t)((count - 1) * stride + len) * sizeof(float));
    LOOM_CUDA_CHECK(cudaMemset2DAsync(p, (size_t)stride * sizeof(float), 0,
                                      (size_t)len * sizeof(float), (size_t)count,
                                      loom_cuda_stream(be)));
}

static void cuda_synchronize(struct loom_backend *be) {
    LOOM_CUDA_CHECK(cudaStreamSynchronize(loom_cuda_stream(be)));
}

static const struct loom_backend_ops g_cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .malloc = cuda_malloc,
    .free = cuda_free,
    .to_device = cuda_to_device,
    .to_host = cuda_to_host,
    .copy = cuda_copy,
    .zero = cuda_zero,
    .zero_strided = cuda_zero_strided,
    .synchronize = cuda_synchronize,
    .written = cuda_written,
    .add = loom_cuda_add,
    .axpy = loom_cuda_axpy,
    .scale = loom_cuda_scale,
    .sumsq = loom_cuda_sumsq,
    .embedding_forward = loom_cuda_embedding_forward,
    .embedding_backward = loom_cuda_embedding_backward,
    .layernorm_forward = loom_cuda_layernorm_forward_typed,
    .layernorm_backward = loom_cuda_layernorm_backward_typed,
    .rmsnorm_forward = loom_cuda_rmsnorm_forward_typed,
    .rmsnorm_backward = loom_cuda_rmsnorm_backward_typed,
    .residual_layernorm_forward = loom_cuda_residual_layernorm_forward_typed,
    .residual_rmsnorm_forward = loom_cuda_residual_rmsnorm_forward_typed,
    .head_norm_forward = loom_cuda_head_norm_forward,
    .head_norm_backward = loom_cuda_head_norm_backward,
    .linear_forward = loom_cuda_linear_forward,
    .linear_backward = loom_cuda_linear_backward,
    .linear_gelu_forward = loom_cuda_linear_gelu_forward,
    .linear_gelu_backward = loom_cuda_linear_gelu_backward,
    .linear_forward_typed = loom_cuda_linear_forward_typed,
    .linear_backward_typed = loom_cuda_linear_backward_typed,
    .rope = loom_cuda_rope,
    .attention_forward = loom_cuda_attention_forward,
    .attention_backward = loom_cuda_attention_backward,
    .attention_general_forward = NULL, /* T5: not on cuda yet */
    .attention_general_backward = NULL,
    .attention_decode = loom_cuda_attention_decode,
    .gelu_forward = loom_cuda_gelu_forward,
    .gelu_forward_typed = loom_cuda_gelu_forward_typed,
    .gelu_backward = loom_cuda_gelu_backward,
    .swiglu_forward = loom_cuda_swiglu_forward,
    .swiglu_backward = loom_cuda_swiglu_backward,
    .dropout_forward = loom_cuda_dropout_forward,
    .dropout_backward = loom_cuda_dropout_backward,
    .xent_forward = loom_cuda_xent_forward,
    .xent_backward = loom_cuda_xent_backward,
    .xent_fused = loom_cuda_xent_fused,
    .linear_xent = loom_cuda_linear_xent,
    .adamw = loom_cuda_adamw,
    .adamw_ranges = loom_cuda_adamw_ranges,
    .sumsq_ranges = loom_cuda_sumsq_ranges,
    .set_matmul_dtype = loom_cuda_set_matmul_dtype,
    .linear_xent_dtype = loom_cuda_linear_xent_dtype,
    .activation_dtype = loom_cuda_activation_dtype,
    .set_attention_backend = loom_cuda_set_attention_backend,
    .set_deterministic = loom_cuda_set_deterministic,
    .memory_stats = cuda_memory_stats,
    .stream = cuda_stream,
};

/* Undo a half-finished creation and report why. */
static enum loom_status cuda_create_failed(struct loom_backend *be, enum loom_status s,
                                           const char *what, int device_index, const char *why) {
    cuda_destroy(be);
    return loom_fail(s, "--device cuda: %s on device %d failed: %s", what, device_index, why);
}

extern "C" enum loom_status loom_backend_cuda_create(struct loom_backend **out,
                                                     int device_index) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return loom_fail(LOOM_ERR_UNSUPPORTED, "--device cuda: no CUDA device is visible (%s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device_index < 0) device_index = loom_comm_local_rank() % count;
    if (device_index >= count)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--device cuda: device index %d is out of range; valid: 0..%d",
                         device_index, count - 1);

    struct loom_backend *be = (struct loom_backend *)calloc(1, sizeof *be);
    struct loom_cuda *c = (struct loom_cuda *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return loom_fail(LOOM_ERR_OOM, "out of memory creating the cuda backend");
    }
    be->ops = &g_cuda_ops;
    be->device = LOOM_DEVICE_CUDA;
    be->num_threads = 1;
    be->impl = c;
    c->device = device_index;

    if ((e = cudaSetDevice(device_index)) != cudaSuccess)
        return cuda_create_failed(be, LOOM_ERR_UNSUPPORTED, "cudaSetDevice", device_index,
                                  cudaGetErrorString(e));
    if ((e = cudaDeviceGetAttribute(&c->num_sms, cudaDevAttrMultiProcessorCount,
                                    device_index)) != cudaSuccess)
        return cuda_create_failed(be, LOOM_ERR_UNSUPPORTED, "reading the device", device_index,
                                  cudaGetErrorString(e));
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return cuda_create_failed(be, LOOM_ERR_UNSUPPORTED, "creating a stream", device_index,
                                  cudaGetErrorString(e));
    if ((e = cudaMallocHost((void **)&c->host_double, 2 * sizeof(double))) != cudaSuccess)
        return cuda_create_failed(be, LOOM_ERR_OOM, "pinned host allocation", device_index,
                                  cudaGetErrorString(e));
    c->cublas_ws_bytes = LOOM_CUDA_CUBLAS_WS_BYTES;
    if (!(c->cublas_ws = loom_cuda_alloc(be, c->cublas_ws_bytes)))
        return cuda_create_failed(be, LOOM_ERR_OOM, "cuBLAS workspace allocation", device_index,
                                  "out of device memory");

    cublasStatus_t bs = cublasCreate(&c->cublas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        c->cublas = NULL;
        return cuda_create_failed(be, LOOM_ERR_UNSUPPORTED, "cublasCreate", device_index,
                                  cublasGetStatusString(bs));
    }
    if ((bs = cublasSetStream(c->cublas, c->stream)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetWorkspace(c->cublas, c->cublas_ws, c->cublas_ws_bytes)) !=
            CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetMathMode(c->cublas, CUBLAS_PEDANTIC_MATH)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetAtomicsMode(c->cublas, CUBLAS_ATOMICS_NOT_ALLOWED)) !=
            CUBLAS_STATUS_SUCCESS)
        return cuda_create_failed(be, LOOM_ERR_UNSUPPORTED, "configuring cuBLAS", device_index,
                                  cublasGetStatusString(bs));
    const char *prof = getenv("LOOM_CUDA_PROFILE");
    if (prof && prof[0] == '1') {
        be->ops = loom_cuda_profile_ops(&g_cuda_ops);
        g_profiling = 1;
    }
    *out = be;
    return LOOM_OK;
}
