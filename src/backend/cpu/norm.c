/* CPU LayerNorm and RMSNorm over the last dimension: N rows of C.
 *
 * LayerNorm: xhat = (x - mean) * rstd, rstd = 1/sqrt(var + eps), out = xhat * w + b
 *   dxhat = dout * w
 *   dx   += rstd * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat))
 *   dw   += sum_rows dout * xhat;  db += sum_rows dout
 * RMSNorm: xhat = x * rstd, rstd = 1/sqrt(mean_c(x^2) + eps), out = xhat * w
 *   dx   += rstd * (dxhat - xhat * mean_c(dxhat * xhat));  dw += sum_rows dout * xhat
 * dx accumulates because a norm's input is the residual stream, whose gradient also flows
 * around the norm.
 *
 * Row statistics are summed in double (a residual stream can carry a large mean next to a small
 * spread). Rows are split over threads in static contiguous ranges; dw/db are summed per thread
 * in double and the thread sums are added in thread order, so results are bit-identical run to
 * run for a given thread count.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

/* Below this many elements the ops run on one thread. */
#define CPU_NORM_PAR_MIN 16384

static void layernorm_forward_f32(struct loom_backend *be, float *out, float *mean, float *rstd,
                                  const float *inp, const float *w, const float *b, int64_t N,
                                  int64_t C, float eps) {
    (void)be;
#pragma omp parallel for schedule(static) if (N * C >= CPU_NORM_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *restrict x = inp + i * C;
        float *restrict o = out + i * C;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; c++) s += x[c];
        const double md = s / (double)C;
        const float m = (float)md;
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < C; c++) {
            double d = (double)x[c] - md;
            ss += d * d;
        }
        const float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
        if (b) {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c];
        }
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = r;
    }
}

/* Adds the per-thread sums part[t][0..len) (t < nt, rows of stride `stride`) to dst, in thread
 * order, in parallel over the columns. */
static void cpu_norm_reduce(float *dst, const double *part, int nt, int64_t stride, int64_t len) {
#pragma omp parallel for schedule(static) if (len * nt >= CPU_NORM_PAR_MIN)
    for (int64_t c = 0; c < len; c++) {
        double s = 0.0;
        for (int t = 0; t < nt; t++) s += part[t * stride + c];
        dst[c] += (float)s;
    }
}

static void layernorm_backward_f32(struct loom_backend *be, float *dinp, float *dw, float *db,
                                   const float *dout, const float *inp, const float *w,
                                   const float *mean, const float *rstd, int64_t N, int64_t C) {
    (void)be;
    if (N <= 0 || C <= 0) return;
    const int maxt = N * C >= CPU_NORM_PAR_MIN ? omp_get_max_threads() : 1;
    /* per thread: dw sums [C] then db sums [C] */
    double *part = calloc((size_t)maxt * 2 * (size_t)C, sizeof *part);
    LOOM_ASSERT(part != NULL);
    int used = 1;
#pragma omp parallel num_threads(maxt)
    {
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
#pragma omp single
        used = nt;
        const int64_t r0 = N * id / nt, r1 = N * (id + 1) / nt;
        double *restrict pw = part + (size_t)id * 2 * (size_t)C;
        double *restrict pb = pw + C;
        for (int64_t i = r0; i < r1; i++) {
            const float *restrict x = inp + i * C;
            const float *restrict g = dout + i * C;
            float *restrict dx = dinp + i * C;
            const float m = mean[i], r = rstd[i];
            double sg = 0.0, sgx = 0.0;
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t c = 0; c < C; c++) {
                float gw = g[c] * w[c];
                sg += gw;
                sgx += gw * ((x[c] - m) * r);
            }
            const float a = (float)(sg / (double)C), bx = (float)(sgx / (double)C);
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                float xh = (x[c] - m) * r;
                dx[c] += r * (g[c] * w[c] - a - xh * bx);
                pw[c] += (double)(g[c] * xh);
                pb[c] += (double)g[c];
            }
        }
    }
    cpu_norm_reduce(dw, part, used, 2 * C, C);
    if (db) cpu_norm_reduce(db, part + C, used, 2 * C, C);
    free(part);
}

static void rmsnorm_forward_f32(struct loom_backend *be, float *out, float *rstd, const float *inp,
                                const float *w, int64_t N, int64_t C, float eps) {
    (void)be;
#pragma omp parallel for schedule(static) if (N * C >= CPU_NORM_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *restrict x = inp + i * C;
        float *restrict o = out + i * C;
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < C; c++) ss += (double)x[c] * (double)x[c];
        const float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
#pragma omp simd
        for (int64_t c = 0; c < C; c++) o[c] = x[c] * r * w[c];
        if (rstd) rstd[i] = r;
    }
}

static void rmsnorm_backward_f32(struct loom_backend *be, float *dinp, float *dw, const float *dout,
                                 const float *inp, const float *w, const float *rstd, int64_t N,
                                 int64_t C) {
    (void)be;
    if (N <= 0 || C <= 0) return;
    const int maxt = N * C >= CPU_NORM_PAR_MIN ? omp_get_max_threads() : 1;
    double *part = calloc((size_t)maxt * (size_t)C, sizeof *part);
    LOOM_ASSERT(part != NULL);
    int used = 1;
#pragma omp parallel num_threads(maxt)
    {
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
#pragma omp single
        used = nt;
        const int64_t r0 = N * id / nt, r1 = N * (id + 1) / nt;
        double *restrict pw = part + (size_t)id * (size_t)C;
        for (int64_t i = r0; i < r1; i++) {
            const float *restrict x = inp + i * C;
            const float *restrict g = dout + i * C;
            float *restrict dx = dinp + i * C;
            const float r = rstd[i];
            double sgx = 0.0;
#pragma omp simd reduction(+ : sgx)
            for (int64_t c = 0; c < C; c++) sgx += (g[c] * w[c]) * (x[c] * r);
            const float bx = (float)(sgx / (double)C);
#pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                float xh = x[c] * r;
                dx[c] += r * (g[c] * w[c] - xh * bx);
                pw[c] += (double)(g[c] * xh);
            }
        }
    }
    cpu_norm_reduce(dw, part, used, C, C);
    free(part);
}

/* The ops (fp32 arrays only). Residual add, then the norm: the two ops in sequence (so the
 * results are theirs). */
void loom_cpu_layernorm_forward(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                float *mean, float *rstd, const float *inp, const float *w,
                                const float *b, int64_t N, int64_t C, float eps) {
    loom_cpu_need_f32(out_dt, "layernorm_forward");
    layernorm_forward_f32(be, (float *)out, mean, rstd, inp, w, b, N, C, eps);
}

/* What the norm backwards do for the product that reads dinp next: the column sums (a 16-bit
 * copy is not for the cpu, whose activations are fp32) */
static void dinp_for_next(float *dinp, void *dinp_copy, float *dinp_sum, int64_t N, int64_t C,
                          const char *op) {
    if (dinp_copy) loom_cpu_need_f32(LOOM_DTYPE_BF16, op);
    if (dinp && dinp_sum && N > 0 && C > 0) loom_cpu_colsum(dinp_sum, dinp, N, C);
}

void loom_cpu_layernorm_backward(struct loom_backend *be, float *dinp, void *dinp_copy,
                                 float *dinp_sum, float *dw, float *db, const void *dout,
                                 enum loom_dtype dout_dt, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int64_t N, int64_t C) {
    loom_cpu_need_f32(dout_dt, "layernorm_backward");
    layernorm_backward_f32(be, dinp, dw, db, (const float *)dout, inp, w, mean, rstd, N, C);
    dinp_for_next(dinp, dinp_copy, dinp_sum, N, C, "layernorm_backward");
}

void loom_cpu_rmsnorm_forward(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                              float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                              float eps) {
    loom_cpu_need_f32(out_dt, "rmsnorm_forward");
    rmsnorm_forward_f32(be, (float *)out, rstd, inp, w, N, C, eps);
}

void loom_cpu_rmsnorm_backward(struct loom_backend *be, float *dinp, void *dinp_copy,
                               float *dinp_sum, float *dw, const void *dout,
                               enum loom_dtype dout_dt, const float *inp, const float *w,
                               const float *rstd, int64_t N, int64_t C) {
    loom_cpu_need_f32(dout_dt, "rmsnorm_backward");
    rmsnorm_backward_f32(be, dinp, dw, (const float *)dout, inp, w, rstd, N, C);
    dinp_for_next(dinp, dinp_copy, dinp_sum, N, C, "rmsnorm_backward");
}

void loom_cpu_residual_layernorm_forward(struct loom_backend *be, float *xs, void *out,
                                         enum loom_dtype out_dt, float *mean, float *rstd,
                                         const float *x, const void *r, enum loom_dtype r_dt,
                                         const float *w, const float *b, int64_t N, int64_t C,
                                         float eps) {
    loom_cpu_need_f32(out_dt, "residual_layernorm_forward");
    loom_cpu_need_f32(r_dt, "residual_layernorm_forward");
    loom_cpu_add(be, xs, x, (const float *)r, N * C);
    layernorm_forward_f32(be, (float *)out, mean, rstd, xs, w, b, N, C, eps);
}

void loom_cpu_residual_rmsnorm_forward(struct loom_backend *be, float *xs, void *out,
                                       enum loom_dtype out_dt, float *rstd, const float *x,
                                       const void *r, enum loom_dtype r_dt, const float *w,
                                       int64_t N, int64_t C, float eps) {
    loom_cpu_need_f32(out_dt, "residual_rmsnorm_forward");
    loom_cpu_need_f32(r_dt, "residual_rmsnorm_forward");
    loom_cpu_add(be, xs, x, (const float *)r, N * C);
    rmsnorm_forward_f32(be, (float *)out, rstd, xs, w, N, C, eps);
}
