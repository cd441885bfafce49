/* CPU linear layer on OpenBLAS.
 *
 * Shapes: inp[N,C], w[OC,C] (row-major, PyTorch's nn.Linear layout), b[OC], out/dout[N,OC].
 * Forward:  out  = inp . w^T + b
 * Backward: dinp = dout . w          (assigned; skipped when dinp is NULL)
 *           dw  += dout^T . inp      (accumulates)
 *           db  += sum_rows dout     (accumulates; skipped when db is NULL)
 *
 * Threading: every product is cut into one block per OpenMP thread along one of its output
 * dimensions and each thread calls a single-threaded sgemm on its block. OpenBLAS's own thread
 * pool stays at one thread: two pools on the same cores (OpenMP workers spinning after a region
 * while OpenBLAS workers spin after a GEMM) slow both down several times over. No output element
 * is ever summed across threads, so results are bit-identical run to run. The dimension cut is
 * the one that makes the threads re-read the smaller operand.
 */
#include <cblas.h>
#include <omp.h>

#include "backend/cpu/cpu_ops.h"

/* Called outside parallel regions, before the threads call sgemm. Checked on every call, as
 * other code may have changed the setting in between. */
static void cpu_blas_single_thread(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

/* Block [lo, hi) of a dimension of size n for thread id of nt, in multiples of 16 so that column
 * blocks start on 64-byte boundaries. */
static void cpu_split(int64_t n, int id, int nt, int64_t *lo, int64_t *hi) {
    int64_t chunk = (n + nt - 1) / nt;
    chunk = (chunk + 15) & ~(int64_t)15;
    *lo = (int64_t)id * chunk < n ? (int64_t)id * chunk : n;
    *hi = *lo + chunk < n ? *lo + chunk : n;
}

/* Threads worth using for m*n outputs with k-long dot products (small products run alone). */
static int cpu_gemm_threads(int64_t m, int64_t n, int64_t k) {
    return (double)m * (double)n * (double)k >= 262144.0 ? omp_get_max_threads() : 1;
}

void loom_cpu_linear_forward(struct loom_backend *be, float *out, const float *inp, const float *w,
                             const float *b, int64_t N, int64_t C, int64_t OC) {
    (void)be;
    if (N <= 0 || OC <= 0) return;
    cpu_blas_single_thread();
    /* Cutting N makes every thread read all of w; cutting OC, all of inp. */
    const int split_rows = OC <= N ? 1 : 0;
#pragma omp parallel num_threads(cpu_gemm_threads(N, OC, C))
    {
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t lo, hi;
        cpu_split(split_rows ? N : OC, id, nt, &lo, &hi);
        if (lo < hi) {
            const int64_t rn = split_rows ? hi - lo : N, cn = split_rows ? OC : hi - lo;
            float *o = split_rows ? out + lo * OC : out + lo;
            const float *a = split_rows ? inp + lo * C : inp;
            const float *wb = split_rows ? w : w + lo * C;
            float beta = 0.0f;
            if (b) {
                const float *bb = split_rows ? b : b + lo;
                for (int64_t i = 0; i < rn; i++) {
                    float *restrict orow = o + i * OC;
#pragma omp simd
                    for (int64_t j = 0; j < cn; j++) orow[j] = bb[j];
                }
                beta = 1.0f;
            }
            if (C > 0) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rn, (int)cn, (int)C, 1.0f,
                            a, (int)C, wb, (int)C, beta, o, (int)OC);
            } else if (!b) {
                for (int64_t i = 0; i < rn; i++)
                    for (int64_t j = 0; j < cn; j++) o[i * OC + j] = 0.0f;
            }
        }
    }
}

/* db[OC] += column sums of dout[N,OC]: threads own column blocks and walk every row, summing
 * in double. */
void loom_cpu_colsum(float *db, const float *dout, int64_t N, int64_t OC) {
    enum { CB = 128 };
    const int64_t nblk = (OC + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (N * OC >= 65536)
    for (int64_t k = 0; k < nblk; k++) {
        const int64_t j0 = k * CB, len = j0 + CB < OC ? CB : OC - j0;
        double acc[CB];
        for (int64_t j = 0; j < len; j++) acc[j] = 0.0;
        for (int64_t i = 0; i < N; i++) {
            const float *restrict g = dout + i * OC + j0;
#pragma omp simd
            for (int64_t j = 0; j < len; j++) acc[j] += (double)g[j];
        }
        for (int64_t j = 0; j < len; j++) db[j0 + j] += (float)acc[j];
    }
}

void loom_cpu_linear_backward(struct loom_backend *be, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, int64_t N,
                              int64_t C, int64_t OC) {
    (void)be;
    if (N <= 0 || C <= 0) {
        if (db && N > 0) loom_cpu_colsum(db, dout, N, OC);
        return;
    }
    cpu_blas_single_thread();
    if (dinp) {
        if (OC <= 0) {
            for (int64_t i = 0; i < N * C; i++) dinp[i] = 0.0f;
        } else {
            /* dinp[N,C] = dout[N,OC] . w[OC,C]. Cutting N re-reads w; cutting C re-reads dout. */
            const int split_rows = C <= N ? 1 : 0;
#pragma omp parallel num_threads(cpu_gemm_threads(N, C, OC))
            {
                const int nt = omp_get_num_threads(), id = omp_get_thread_num();
                int64_t lo, hi;
                cpu_split(split_rows ? N : C, id, nt, &lo, &hi);
                if (lo < hi) {
                    if (split_rows)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo),
                                    (int)C, (int)OC, 1.0f, dout + lo * OC, (int)OC, w, (int)C,
                                    0.0f, dinp + lo * C, (int)C);
                    else
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N,
                                    (int)(hi - lo), (int)OC, 1.0f, dout, (int)OC, w + lo, (int)C,
                                    0.0f, dinp + lo, (int)C);
                }
            }
        }
    }
    if (OC <= 0) return;
    /* dw[OC,C] += dout^T[OC,N] . inp[N,C]. Cutting OC re-reads inp; cutting C re-reads dout. */
    const int split_oc = C <= OC ? 1 : 0;
#pragma omp parallel num_threads(cpu_gemm_threads(OC, C, N))
    {
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t lo, hi;
        cpu_split(split_oc ? OC : C, id, nt, &lo, &hi);
        if (lo < hi) {
            if (split_oc)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)(hi - lo), (int)C,
                            (int)N, 1.0f, dout + lo, (int)OC, inp, (int)C, 1.0f, dw + lo * C,
                            (int)C);
            else
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)OC, (int)(hi - lo),
                            (int)N, 1.0f, dout, (int)OC, inp + lo, (int)C, 1.0f, dw + lo,
                            (int)C);
        }
    }
    if (db) loom_cpu_colsum(db, dout, N, OC);
}

/* Linear then GELU, and the backward through both: the linear ops above with gelu_forward /
 * gelu_backward (act.c), so the results are those of the separate ops. fp32 activations only. */
void loom_cpu_linear_gelu_forward(struct loom_backend *be, enum loom_gelu form, void *out,
                                  void *pre, enum loom_dtype act_dt, const void *inp,
                                  enum loom_dtype inp_dt, const float *w, const float *b, int64_t N,
                                  int64_t C, int64_t OC) {
    loom_cpu_need_f32(act_dt, "linear_gelu_forward");
    loom_cpu_need_f32(inp_dt, "linear_gelu_forward");
    loom_cpu_linear_forward(be, (float *)pre, (const float *)inp, w, b, N, C, OC);
    if (N > 0 && OC > 0) loom_cpu_gelu_forward(be, form, (float *)out, (const float *)pre, N * OC);
}

void loom_cpu_linear_gelu_backward(struct loom_backend *be, enum loom_gelu form, void *dpre,
                                   enum loom_dtype act_dt, float *dpre_b, float *dw, float *db,
                                   const void *dout, enum loom_dtype dout_dt, const void *act,
                                   const void *pre, const float *w, int64_t N, int64_t C,
                                   int64_t OC) {
    loom_cpu_need_f32(act_dt, "linear_gelu_backward");
    loom_cpu_need_f32(dout_dt, "linear_gelu_backward");
    float *d = (float *)dpre;
    loom_cpu_linear_backward(be, d, dw, db, (const float *)dout, (const float *)act, w, N, C, OC);
    if (N <= 0 || C <= 0) return;
    loom_cpu_gelu_backward(be, form, d, d, (const float *)pre, N * C);
    if (dpre_b) loom_cpu_colsum(dpre_b, d, N, C);
}

/* The plain linear ops with typed activations: fp32 only, as they are. */
void loom_cpu_linear_forward_typed(struct loom_backend *be, void *out, enum loom_dtype out_dt,
                                   const void *inp, enum loom_dtype inp_dt, const float *w,
                                   const float *b, int64_t N, int64_t C, int64_t OC) {
    loom_cpu_need_f32(out_dt, "linear_forward_typed");
    loom_cpu_need_f32(inp_dt, "linear_forward_typed");
    loom_cpu_linear_forward(be, (float *)out, (const float *)inp, w, b, N, C, OC);
}

void loom_cpu_linear_backward_typed(struct loom_backend *be, void *dinp, enum loom_dtype dinp_dt,
                                    float *dw, float *db, const void *dout,
                                    enum loom_dtype dout_dt, const void *inp,
                                    enum loom_dtype inp_dt, const float *w, int64_t N, int64_t C,
                                    int64_t OC) {
    loom_cpu_need_f32(dinp_dt, "linear_backward_typed");
    loom_cpu_need_f32(dout_dt, "linear_backward_typed");
    loom_cpu_need_f32(inp_dt, "linear_backward_typed");
    loom_cpu_linear_backward(be, (float *)dinp, dw, db, (const float *)dout, (const float *)inp,
                             w, N, C, OC);
}
