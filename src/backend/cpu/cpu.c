/* CPU backend: host memory, OpenBLAS for matrix products, OpenMP for the rest.
 *
 * Memory: blocks of 2 MiB and more (parameters, gradients, optimizer state, activations) are
 * aligned to 2 MiB, rounded up to a multiple of it and marked MADV_HUGEPAGE, so that where
 * transparent huge pages are enabled (as "madvise", the common default) the kernel backs them
 * with 2 MiB pages: first touch costs one page fault per 2 MiB instead of 512, and the matrix
 * kernels' streams miss the TLB far less. Smaller blocks are 64-byte aligned.
 *
 * The backend's live blocks may not exceed the memory the system reported available when the
 * first backend was made (MemAvailable): a larger request gets NULL, so the caller reports which
 * buffer did not fit, where Linux would grant it and later kill the process when it is touched. */
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <omp.h>

#define CPU_HUGE_PAGE ((size_t)2 << 20)

#include "backend/cpu/cpu_ops.h"

void loom_cpu_need_f32(enum loom_dtype dt, const char *op) {
    if (dt != LOOM_DTYPE_F32)
        loom_abort(__FILE__, __LINE__,
                   "cpu: %s with %s activations (the cpu backend has fp32 only)", op,
                   loom_dtype_name(dt));
}

static size_t g_cpu_limit;        /* bytes; 0: not known (no limit) */
static _Atomic size_t g_cpu_live; /* bytes of the live blocks, as malloc_usable_size says */

/* MemAvailable of /proc/meminfo, else the physical memory, else 0 */
static size_t cpu_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
                fclose(f);
                return (size_t)kib * 1024;
            }
        fclose(f);
    }
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
}

static void *cpu_malloc(struct loom_backend *be, size_t bytes) {
    (void)be;
    if (g_cpu_limit && (bytes > g_cpu_limit || atomic_load(&g_cpu_live) > g_cpu_limit - bytes))
        return NULL;
    void *p = NULL;
    if (bytes >= CPU_HUGE_PAGE && bytes <= SIZE_MAX - CPU_HUGE_PAGE) {
        size_t rounded = (bytes + CPU_HUGE_PAGE - 1) & ~(CPU_HUGE_PAGE - 1);
        if (posix_memalign(&p, CPU_HUGE_PAGE, rounded) != 0) return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: 4 KiB pages if refused */
#endif
    } else if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        return NULL;
    }
    atomic_fetch_add(&g_cpu_live, malloc_usable_size(p));
    return p;
}
static void cpu_free(struct loom_backend *be, void *p) {
    (void)be;
    if (!p) return;
    atomic_fetch_sub(&g_cpu_live, malloc_usable_size(p));
    free(p);
}
static void cpu_copy(struct loom_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}
static void cpu_zero(struct loom_backend *be, void *p, size_t bytes) {
    (void)be;
    if (bytes) memset(p, 0, bytes);
}
static void cpu_zero_strided(struct loom_backend *be, float *p, int64_t count, int64_t len,
                             int64_t stride) {
    (void)be;
    for (int64_t k = 0; k < count; k++) memset(p + k * stride, 0, (size_t)len * sizeof(float));
}
static void cpu_synchronize(struct loom_backend *be) { (void)be; }
static void cpu_destroy(struct loom_backend *be) { free(be); }

static const struct loom_backend_ops g_cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .malloc = cpu_malloc,
    .free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .zero_strided = cpu_zero_strided,
    .synchronize = cpu_synchronize,
    .add = loom_cpu_add,
    .axpy = loom_cpu_axpy,
    .scale = loom_cpu_scale,
    .sumsq = loom_cpu_sumsq,
    .embedding_forward = loom_cpu_embedding_forward,
    .embedding_backward = loom_cpu_embedding_backward,
    .layernorm_forward = loom_cpu_layernorm_forward,
    .layernorm_backward = loom_cpu_layernorm_backward,
    .rmsnorm_forward = loom_cpu_rmsnorm_forward,
    .rmsnorm_backward = loom_cpu_rmsnorm_backward,
    .residual_layernorm_forward = loom_cpu_residual_layernorm_forward,
    .residual_rmsnorm_forward = loom_cpu_residual_rmsnorm_forward,
    .head_norm_forward = loom_cpu_head_norm_forward,
    .head_norm_backward = loom_cpu_head_norm_backward,
    .linear_forward = loom_cpu_linear_forward,
    .linear_backward = loom_cpu_linear_backward,
    .linear_gelu_forward = loom_cpu_linear_gelu_forward,
    .linear_gelu_backward = loom_cpu_linear_gelu_backward,
    .linear_forward_typed = loom_cpu_linear_forward_typed,
    .linear_backward_typed = loom_cpu_linear_backward_typed,
    .rope = loom_cpu_rope,
    .attention_forward = loom_cpu_attention_forward,
    .attention_backward = loom_cpu_attention_backward,
    .attention_general_forward = loom_cpu_attention_general_forward,
    .attention_general_backward = loom_cpu_attention_general_backward,
    .attention_decode = loom_cpu_attention_decode,
    .gelu_forward = loom_cpu_gelu_forward,
    .gelu_forward_typed = loom_cpu_gelu_forward_typed,
    .gelu_backward = loom_cpu_gelu_backward,
    .swiglu_forward = loom_cpu_swiglu_forward,
    .swiglu_backward = loom_cpu_swiglu_backward,
    .dropout_forward = loom_cpu_dropout_forward,
    .dropout_backward = loom_cpu_dropout_backward,
    .xent_forward = loom_cpu_xent_forward,
    .xent_backward = loom_cpu_xent_backward,
    .xent_fused = loom_cpu_xent_fused,
    .linear_xent = loom_cpu_linear_xent,
    .adamw = loom_cpu_adamw,
    .adamw_ranges = loom_cpu_adamw_ranges,
    .sumsq_ranges = loom_cpu_sumsq_ranges,
};

enum loom_status loom_backend_cpu_create(struct loom_backend **out) {
    struct loom_backend *be = calloc(1, sizeof *be);
    if (!be) return loom_fail(LOOM_ERR_OOM, "out of memory creating the cpu backend");
    be->ops = &g_cpu_ops;
    be->device = LOOM_DEVICE_CPU;
    be->num_threads = omp_get_max_threads();
    if (!g_cpu_limit) g_cpu_limit = cpu_available_bytes();
    *out = be;
    return LOOM_OK;
}
