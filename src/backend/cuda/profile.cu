/* Per-op time of the CUDA backend, for finding where a training step spends its time.
 *
 * With LOOM_CUDA_PROFILE=1 in the environment the backend's vtable is replaced by one whose
 * entries record a CUDA event on the stream before and after the op: the time charged to an op
 * is the device time between its two events, so the host keeps running ahead as it does without
 * the profile and the step time stays what it is. Rows are kept per op and per shape (the op's
 * first three integer arguments, e.g. N, C, OC of a linear op), so that the products of a layer
 * are told apart. Steps are counted at the optimizer (the first adamw or adamw_ranges call after
 * other ops); the first step (plans, workspaces, first touches) is left out, up to the end of its
 * optimizer. The table goes to stderr when the backend is destroyed, in ms per counted step; the
 * step time minus the table's total is the time the stream spent outside the backend's ops
 * (waiting for communication or the host).
 */
#include <stdio.h>
#include <stdlib.h>
#include <type_traits>

#include "backend/cuda/common.cuh"

enum { PROF_MAX = 48, PROF_ROWS = 256, PROF_PENDING = 4096 };

static const struct loom_backend_ops *g_base;
static struct loom_backend_ops g_prof;
static const char *g_name[PROF_MAX];

struct prof_row {
    int id;
    int64_t dims[3];
    double ms;
    long long calls;
};
static struct prof_row g_rows[PROF_ROWS];
static int g_nrows;

/* events recorded but not yet read back: pairs (start, end) and the row they belong to */
static cudaEvent_t g_ev[2 * PROF_PENDING];
static int g_pending_row[PROF_PENDING];
static int g_npending, g_have_events;
static int g_last_id = -1;
static long long g_steps; /* optimizer steps begun (an optimizer op after another op) */
static int g_counting;     /* from the first op after the first step's optimizer on */

static int row_of(int id, const int64_t *dims) {
    for (int i = 0; i < g_nrows; i++)
        if (g_rows[i].id == id && g_rows[i].dims[0] == dims[0] && g_rows[i].dims[1] == dims[1] &&
            g_rows[i].dims[2] == dims[2])
            return i;
    if (g_nrows == PROF_ROWS) return PROF_ROWS - 1; /* the last row takes the overflow */
    struct prof_row *r = &g_rows[g_nrows];
    r->id = id;
    for (int k = 0; k < 3; k++) r->dims[k] = dims[k];
    return g_nrows++;
}

/* Read back every pending pair (waiting for the last one) and add it to its row. */
static void harvest(void) {
    if (!g_npending) return;
    LOOM_CUDA_CHECK(cudaEventSynchronize(g_ev[2 * g_npending - 1]));
    for (int k = 0; k < g_npending; k++) {
        float ms = 0;
        LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, g_ev[2 * k], g_ev[2 * k + 1]));
        g_rows[g_pending_row[k]].ms += ms;
        g_rows[g_pending_row[k]].calls++;
    }
    g_npending = 0;
}

/* the optimizer's ops (adamw, adamw_ranges), which mark the steps */
static constexpr bool prof_optimizer(int id) { return id == 27 || id == 30; }

template <int ID, auto M> struct prof_op;

template <int ID, typename R, typename... A,
          R (*loom_backend_ops::*M)(struct loom_backend *, A...)>
struct prof_op<ID, M> {
    static R call(struct loom_backend *be, A... a) {
        if (prof_optimizer(ID) && !prof_optimizer(g_last_id)) g_steps++; /* a step begins */
        g_last_id = ID;
        if (g_steps >= 1 && !prof_optimizer(ID)) g_counting = 1;
        if (!g_counting) return (g_base->*M)(be, a...);
        if (!g_have_events) {
            for (int i = 0; i < 2 * PROF_PENDING; i++)
                LOOM_CUDA_CHECK(cudaEventCreate(&g_ev[i]));
            g_have_events = 1;
        }
        if (g_npending == PROF_PENDING) harvest();
        int64_t dims[3] = {0, 0, 0};
        int nd = 0;
        auto grab = [&](auto v) {
            if constexpr (std::is_same_v<decltype(v), int64_t>)
                if (nd < 3) dims[nd++] = v;
        };
        (grab(a), ...);
        if (ID == 27) dims[1] = dims[2] = 0; /* adamw: its n (the rest is the step) */
        if (ID == 30) dims[0] = 0;           /* adamw_ranges: one row (its integer is the step) */
        const int k = g_npending++;
        g_pending_row[k] = row_of(ID, dims);
        cudaStream_t s = loom_cuda_stream(be);
        LOOM_CUDA_CHECK(cudaEventRecord(g_ev[2 * k], s));
        if constexpr (std::is_void_v<R>) {
            (g_base->*M)(be, a...);
            LOOM_CUDA_CHECK(cudaEventRecord(g_ev[2 * k + 1], s));
        } else {
            R r = (g_base->*M)(be, a...);
            LOOM_CUDA_CHECK(cudaEventRecord(g_ev[2 * k + 1], s));
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
    PROF(30, adamw_ranges);
    PROF(32, residual_layernorm_forward);
    PROF(33, residual_rmsnorm_forward);
    PROF(36, head_norm_forward);
    PROF(37, head_norm_backward);
    PROF(34, linear_gelu_forward);
    PROF(35, linear_gelu_backward);
    PROF(46, linear_forward_typed);
    PROF(47, linear_backward_typed);
    PROF(40, sumsq_ranges);
    PROF(28, zero_strided);
    PROF(29, gelu_forward_typed);
    return &g_prof;
}

void loom_cuda_profile_report(void) {
    harvest();
    const double steps = g_steps > 1 ? (double)(g_steps - 1) : 1.0; /* steps 2 .. last */
    int idx[PROF_ROWS];
    double total = 0;
    for (int i = 0; i < g_nrows; i++) {
        idx[i] = i;
        total += g_rows[i].ms;
    }
    for (int i = 1; i < g_nrows; i++) /* by time, largest first */
        for (int j = i; j > 0 && g_rows[idx[j]].ms > g_rows[idx[j - 1]].ms; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    fprintf(stderr, "loom cuda profile (LOOM_CUDA_PROFILE, device time between events, %.0f "
                    "steps after the first): op, shape, calls/step, ms/step, us/call, share\n",
            steps);
    for (int k = 0; k < g_nrows; k++) {
        const struct prof_row *r = &g_rows[idx[k]];
        char shape[64];
        snprintf(shape, sizeof shape, "%lld,%lld,%lld", (long long)r->dims[0],
                 (long long)r->dims[1], (long long)r->dims[2]);
        fprintf(stderr, "  %-26s %-20s %7.1f %9.3f %9.1f %6.1f%%\n", g_name[r->id], shape,
                (double)r->calls / steps, r->ms / steps, 1000.0 * r->ms / (double)r->calls,
                total > 0 ? 100.0 * r->ms / total : 0.0);
    }
    fprintf(stderr, "  %-26s %-20s %7s %9.3f\n", "total", "", "", total / steps);
}
