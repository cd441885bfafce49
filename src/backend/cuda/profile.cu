/* Per-op time of the CUDA backend, for finding where a training step spends its time.
 *
 * With LOOM_CUDA_PROFILE=1 in the environment the backend's vtable is replaced by one whose
 * entries wait for the stream, run the op, wait again and add the elapsed wall time to the op's
 * total. The waits serialise the host with the device, so the step gets slower (launch latency
 * is no longer hidden) and each op is charged its own launch overhead; the split between op
 * families is what this is for. The table goes to stderr when the backend is destroyed. Time
 * outside the backend's ops (communication, host work of the loss) is what the step time
 * minus the table's total leaves.
 */
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>

#include "backend/cuda/common.cuh"

enum { PROF_MAX = 48 };

static const struct loom_backend_ops *g_base;
static struct loom_backend_ops g_prof;
static const char *g_name[PROF_MAX];
static double g_sec[PROF_MAX];
static long long g_calls[PROF_MAX];

template <int ID, auto M> struct prof_op;

template <int ID, typename R, typename... A,
          R (*loom_backend_ops::*M)(struct loom_backend *, A...)>
struct prof_op<ID, M> {
    static R call(struct loom_backend *be, A... a) {
        cudaStream_t s = loom_cuda_stream(be);
        LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
        double t0 = loom_time_s();
        if constexpr (std::is_void_v<R>) {
            (g_base->*M)(be, a...);
            LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
            g_sec[ID] += loom_time_s() - t0;
            g_calls[ID]++;
        } else {
            R r = (g_base->*M)(be, a...);
            LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
            g_sec[ID] += loom_time_s() - t0;
            g_calls[ID]++;
            return r;
        }
    }
};

#define PROF(id, field)                                                                       \
    do {                                                                                      \
        static_assert((id) < PROF_MAX, "PROF_MAX");                                           \
        g_name[id] = #field;                                                                  \
        if (g_base->field) g_prof.field = &prof_op<(id), &loom_backend_ops::field>::call;     \
    } while (0)

const struct loom_backend_ops *loom_cuda_profile_ops(const struct loom_backend_ops *base) {
    g_base = base;
    g_prof = *base;
    PROF(0, to_device);
    PROF(1, to_host);
    PROF(2, copy);
    PROF(3, zero);
    PROF(4, add);
    PROF(5, axpy);
    PROF(6, scale);
    PROF(7, sumsq);
    PROF(8, embedding_forward);
    PROF(9, embedding_backward);
    PROF(10, layernorm_forward);
    PROF(11, layernorm_backward);
    PROF(12, rmsnorm_forward);
    PROF(13, rmsnorm_backward);
    PROF(14, linear_forward);
    PROF(15, linear_backward);
    PROF(16, rope);
    PROF(17, attention_forward);
    PROF(18, attention_backward);
    PROF(19, gelu_forward);
    PROF(20, gelu_backward);
    PROF(21, swiglu_forward);
    PROF(22, swiglu_backward);
    PROF(23, dropout_forward);
    PROF(24, dropout_backward);
    PROF(25, xent_forward);
    PROF(26, xent_backward);
    PROF(44, xent_fused);
    PROF(45, linear_xent);
    PROF(27, adamw);
    PROF(32, residual_layernorm_forward);
    PROF(33, residual_rmsnorm_forward);
    PROF(34, linear_gelu_forward);
    PROF(35, linear_gelu_backward);
    PROF(46, linear_forward_typed);
    PROF(47, linear_backward_typed);
    PROF(40, sumsq_ranges);
    return &g_prof;
}

void loom_cuda_profile_report(void) {
    int idx[PROF_MAX], n = 0;
    double total = 0;
    for (int i = 0; i < PROF_MAX; i++)
        if (g_calls[i]) {
            idx[n++] = i;
            total += g_sec[i];
        }
    for (int i = 1; i < n; i++) /* by time, largest first */
        for (int j = i; j > 0 && g_sec[idx[j]] > g_sec[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    fprintf(stderr, "loom cuda profile (LOOM_CUDA_PROFILE): op, calls, total ms, share\n");
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        fprintf(stderr, "  %-20s %9lld %12.2f %6.1f%%\n", g_name[i], g_calls[i],
                1000.0 * g_sec[i], total > 0 ? 100.0 * g_sec[i] / total : 0.0);
    }
    fprintf(stderr, "  %-20s %9s %12.2f\n", "total", "", 1000.0 * total);
}
