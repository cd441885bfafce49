/* CPU ops of the mixture-of-experts layer (loom/backend.h, loom/moe.h): moving rows between the
 * token order [N,C] and the experts' permuted order [R,C], and the experts' products grouped
 * over the permuted rows: one call walks every expert's block of consecutive rows, each block a
 * product with its own weights (the threads of one product at a time, as linear_forward).
 *
 * unpermute accumulates row by row in the order of r within each column block, so its sums are
 * the same on every run. */
#include "backend/cpu/cpu_ops.h"

void loom_cpu_moe_permute(struct loom_backend *be, float *out, const float *inp, const int32_t *tok,
                          const float *scale, int64_t R, int64_t C) {
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        float *o = out + r * C;
        if (tok[r] < 0) {
            for (int64_t i = 0; i < C; i++) o[i] = 0.0f;
            continue;
        }
        const float *x = inp + (int64_t)tok[r] * C;
        const float s = scale ? scale[r] : 1.0f;
        for (int64_t i = 0; i < C; i++) o[i] = s * x[i];
    }
}

void loom_cpu_moe_unpermute(struct loom_backend *be, float *out, const float *inp,
                            const int32_t *tok, const float *scale, int64_t R, int64_t N,
                            int64_t C) {
    (void)be;
    (void)N;
    /* column blocks: each thread owns its columns of every output row */
    const int64_t blk = 64;
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += blk) {
        const int64_t c1 = c0 + blk < C ? c0 + blk : C;
        for (int64_t r = 0; r < R; r++) {
            if (tok[r] < 0) continue;
            float *o = out + (int64_t)tok[r] * C;
            const float *x = inp + r * C;
            const float s = scale ? scale[r] : 1.0f;
            for (int64_t i = c0; i < c1; i++) o[i] += s * x[i];
        }
    }
}

void loom_cpu_moe_row_dot(struct loom_backend *be, float *out, const float *inp,
                          const float *other, const int32_t *tok, int64_t R, int64_t C) {
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        if (tok[r] < 0) {
            out[r] = 0.0f;
            continue;
        }
        const float *a = inp + r * C, *b = other + (int64_t)tok[r] * C;
        double acc = 0;
        for (int64_t i = 0; i < C; i++) acc += (double)a[i] * (double)b[i];
        out[r] = (float)acc;
    }
}

void loom_cpu_grouped_linear_forward(struct loom_backend *be, float *out, const float *inp,
                                     const float *const *w, const float *const *b,
                                     const int64_t *rows, int64_t G, int64_t C, int64_t OC) {
    int64_t r0 = 0;
    for (int64_t g = 0; g < G; g++) {
        if (rows[g] > 0)
            loom_cpu_linear_forward(be, out + r0 * OC, inp + r0 * C, w[g], b ? b[g] : NULL,
                                    rows[g], C, OC);
        r0 += rows[g];
    }
}

void loom_cpu_grouped_linear_backward(struct loom_backend *be, float *dinp, float *const *dw,
                                      float *const *db, const float *dout, const float *inp,
                                      const float *const *w, const int64_t *rows, int64_t G,
                                      int64_t C, int64_t OC) {
    int64_t r0 = 0;
    for (int64_t g = 0; g < G; g++) {
        if (rows[g] > 0)
            loom_cpu_linear_backward(be, dinp ? dinp + r0 * C : NULL, dw[g], db ? db[g] : NULL,
                                     dout + r0 * OC, inp + r0 * C, w[g], rows[g], C, OC);
        r0 += rows[g];
    }
}
