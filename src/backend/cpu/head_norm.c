/* CPU query and key head norms (head_norm_forward, head_norm_backward; loom/backend.h): the
 * model's norm over each head vector of HS values, in place on a qkv row.
 *
 * Element arithmetic is that of norm.c: the sums of a vector in double, mean and rstd rounded to
 * fp32, then products and sums in fp32 one at a time (the build compiles C without contracting
 * them into fused multiply-adds). qkv and dqkv are fp32 or bf16: a bf16 element is widened
 * exactly and a result rounded to nearest even once.
 *
 * The vectors are split over threads in static contiguous ranges of the dense index. In the
 * backward each thread sums its weight gradients in double, and the thread sums are added in
 * thread order: the same bits run to run for a given thread count.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "backend/cpu/cpu_ops.h"

/* Below this many elements the ops run on one thread. */
#define CPU_HEAD_NORM_PAR_MIN 16384

static float hn_bf16_to_f32(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* rounded to nearest even; a NaN stays a (quiet) NaN */
static uint16_t hn_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static inline float hn_get(const void *p, int bf, int64_t i) {
    return bf ? hn_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static inline void hn_put(void *p, int bf, int64_t i, float v) {
    if (bf)
        ((uint16_t *)p)[i] = hn_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* Element offset in qkv of head vector v (the dense index of loom/backend.h) */
static inline int64_t hn_offset(int64_t v, int64_t N, int64_t NH, int64_t NKV, int64_t HS) {
    const int64_t R = NH / NKV, G = (R + 2) * HS, row = (NH + 2 * NKV) * HS;
    if (v < N * NH) {
        const int64_t n = v / NH, h = v % NH;
        return n * row + (h / R) * G + (h % R) * HS;
    }
    v -= N * NH;
    return (v / NKV) * row + (v % NKV) * G + R * HS;
}

/* Aborts unless the type and the head counts fit the op. Returns whether dt is bf16. */
static int hn_check(enum loom_dtype dt, int64_t NH, int64_t NKV, int64_t HS, const char *op) {
    if (dt != LOOM_DTYPE_F32 && dt != LOOM_DTYPE_BF16)
        loom_abort(__FILE__, __LINE__, "cpu %s: element type %s is not supported (f32, bf16)", op,
                   loom_dtype_name(dt));
    if (NKV < 1 || NH % NKV != 0 || HS < 1)
        loom_abort(__FILE__, __LINE__, "cpu %s: %lld query heads, %lld key heads of %lld values",
                   op, (long long)NH, (long long)NKV, (long long)HS);
    return dt == LOOM_DTYPE_BF16;
}

void loom_cpu_head_norm_forward(struct loom_backend *be, int rms, void *qkv, enum loom_dtype dt,
                                void *keep, float *mean, float *rstd, const float *wq,
                                const float *bq, const float *wk, const float *bk, int64_t N,
                                int64_t NH, int64_t NKV, int64_t HS, float eps) {
    (void)be;
    const int bf = hn_check(dt, NH, NKV, HS, "head_norm_forward");
    const int64_t nq = N * NH, nv = N * (NH + NKV);
    const size_t esz = loom_dtype_size(dt);
    if (rms) bq = bk = NULL;
#pragma omp parallel for schedule(static) if (nv * HS >= CPU_HEAD_NORM_PAR_MIN)
    for (int64_t v = 0; v < nv; v++) {
        const int64_t off = hn_offset(v, N, NH, NKV, HS);
        const float *w = v < nq ? wq : wk, *b = v < nq ? bq : bk;
        if (keep)
            memcpy((char *)keep + (size_t)(v * HS) * esz, (const char *)qkv + (size_t)off * esz,
                   (size_t)HS * esz);
        float m = 0.0f;
        double ss = 0.0;
        if (rms) {
            for (int64_t c = 0; c < HS; c++) {
                const double x = (double)hn_get(qkv, bf, off + c);
                ss += x * x;
            }
        } else {
            double s = 0.0;
            for (int64_t c = 0; c < HS; c++)
                s += (double)hn_get(qkv, bf, off + c);
            const double md = s / (double)HS;
            m = (float)md;
            for (int64_t c = 0; c < HS; c++) {
                const double d = (double)hn_get(qkv, bf, off + c) - md;
                ss += d * d;
            }
        }
        const float r = (float)(1.0 / sqrt(ss / (double)HS + (double)eps));
        for (int64_t c = 0; c < HS; c++) {
            const float x = hn_get(qkv, bf, off + c);
            float y = (rms ? x * r : (x - m) * r) * w[c];
            if (b) y = y + b[c];
            hn_put(qkv, bf, off + c, y);
        }
        if (mean && !rms) mean[v] = m;
        if (rstd) rstd[v] = r;
    }
}

void loom_cpu_head_norm_backward(struct loom_backend *be, int rms, void *dqkv, enum loom_dtype dt,
                                 float *dwq, float *dbq, float *dwk, float *dbk, const void *keep,
                                 const float *mean, const float *rstd, const float *wq,
                                 const float *wk, int64_t N, int64_t NH, int64_t NKV, int64_t HS) {
    (void)be;
    const int bf = hn_check(dt, NH, NKV, HS, "head_norm_backward");
    const int64_t nq = N * NH, nv = N * (NH + NKV);
    if (nv <= 0) return;
    if (rms) dbq = dbk = NULL;
    const int maxt = nv * HS >= CPU_HEAD_NORM_PAR_MIN ? omp_get_max_threads() : 1;
    /* per thread: the sums for dwq, dbq, dwk, dbk, HS each */
    double *part = calloc((size_t)maxt * 4 * (size_t)HS, sizeof *part);
    LOOM_ASSERT(part != NULL);
    int used = 1;
#pragma omp parallel num_threads(maxt)
    {
        const int nt = omp_get_num_threads(), id = omp_get_thread_num();
#pragma omp single
        used = nt;
        const int64_t v0 = nv * id / nt, v1 = nv * (id + 1) / nt;
        double *restrict mine = part + (size_t)id * 4 * (size_t)HS;
        for (int64_t v = v0; v < v1; v++) {
            const int64_t off = hn_offset(v, N, NH, NKV, HS), k = v * HS;
            const int q = v < nq;
            const float *w = q ? wq : wk;
            double *restrict pw = mine + (q ? 0 : 2 * HS), *restrict pb = pw + HS;
            const float m = rms ? 0.0f : mean[v], r = rstd[v];
            double sg = 0.0, sgx = 0.0;
            for (int64_t c = 0; c < HS; c++) {
                const float x = hn_get(keep, bf, k + c), d = hn_get(dqkv, bf, off + c);
                const float g = d * w[c], xh = rms ? x * r : (x - m) * r;
                sg += g;
                sgx += g * xh;
            }
            const float a = (float)(sg / (double)HS), bx = (float)(sgx / (double)HS);
            for (int64_t c = 0; c < HS; c++) {
                const float x = hn_get(keep, bf, k + c), d = hn_get(dqkv, bf, off + c);
                const float g = d * w[c], xh = rms ? x * r : (x - m) * r;
                const float u = (rms ? g : g - a) - xh * bx;
                hn_put(dqkv, bf, off + c, r * u);
                pw[c] += (double)(d * xh);
                pb[c] += (double)d;
            }
        }
    }
    float *dst[4] = {dwq, dbq, dwk, dbk};
    for (int j = 0; j < 4; j++) {
        if (!dst[j]) continue;
        for (int64_t c = 0; c < HS; c++) {
            double s = 0.0;
            for (int t = 0; t < used; t++)
                s += part[((size_t)t * 4 + (size_t)j) * (size_t)HS + c];
            dst[j][c] += (float)s;
        }
    }
    free(part);
}
