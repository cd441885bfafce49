/* CPU token and position embedding over a vocabulary shard.
 *
 * Shapes: tokens[B,T] (global ids), pos[B,T] (NULL: p = t), wte[Vl,C] (rows v0..v0+Vl-1 of the
 * vocabulary), wpe[Tmax,C], out/dout[B,T,C].
 * Forward:  out[b,t] = (v0 <= tok < v0+Vl ? wte[tok-v0] : 0) + (wpe ? wpe[pos0+p] : 0),
 *           p = pos[b,t] (the position within its document) or t
 * Backward: dwte[tok-v0] += dout[b,t] for owned tokens; dwpe[pos0+p] += dout[b,t] (if dwpe).
 * Under vocabulary parallelism each rank writes a partial output and the sum over ranks is the
 * full embedding, so wpe is passed on one rank only (or added after the reduction).
 */
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"

/* The position of token i of the N = B*T: pos[i] (checked to lie in [0, T)) or i % T */
static inline int64_t position(const int32_t *pos, int64_t i, int64_t T) {
    if (!pos) return i % T;
    LOOM_ASSERT(pos[i] >= 0 && pos[i] < T);
    return pos[i];
}

void loom_cpu_embedding_forward(struct loom_backend *be, float *out, const int32_t *tokens,
                                const int32_t *pos, const float *wte, const float *wpe, int64_t B,
                                int64_t T, int64_t C, int64_t v0, int64_t Vl, int64_t pos0) {
    (void)be;
    const int64_t N = B * T;
#pragma omp parallel for schedule(static) if (N * C >= 16384)
    for (int64_t i = 0; i < N; i++) {
        float *restrict o = out + i * C;
        const int64_t row = (int64_t)tokens[i] - v0;
        const float *restrict pe = wpe ? wpe + (pos0 + position(pos, i, T)) * C : NULL;
        if (row >= 0 && row < Vl) {
            const float *restrict e = wte + row * C;
            if (pe) {
#pragma omp simd
                for (int64_t c = 0; c < C; c++) o[c] = e[c] + pe[c];
            } else {
                memcpy(o, e, (size_t)C * sizeof *o);
            }
        } else if (pe) {
            memcpy(o, pe, (size_t)C * sizeof *o);
        } else {
            memset(o, 0, (size_t)C * sizeof *o);
        }
    }
}

/* Race-free and deterministic without atomics: each thread owns a contiguous range of the C
 * features and walks every token in order, so no element is touched by two threads and every
 * element's sum runs in token order (the result does not depend on the thread count). */
void loom_cpu_embedding_backward(struct loom_backend *be, float *dwte, float *dwpe,
                                 const float *dout, const int32_t *tokens, const int32_t *pos,
                                 int64_t B, int64_t T, int64_t C, int64_t v0, int64_t Vl,
                                 int64_t pos0) {
    (void)be;
    const int64_t N = B * T;
#pragma omp parallel if (N * C >= 16384)
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        int64_t chunk = (C + nt - 1) / nt;
        chunk = (chunk + 15) & ~(int64_t)15; /* whole 64-byte lines per thread */
        const int64_t c0 = id * chunk < C ? id * chunk : C;
        const int64_t c1 = c0 + chunk < C ? c0 + chunk : C;
        if (c0 < c1) {
            for (int64_t i = 0; i < N; i++) {
                const float *restrict g = dout + i * C;
                const int64_t row = (int64_t)tokens[i] - v0;
                if (row >= 0 && row < Vl) {
                    float *restrict w = dwte + row * C;
#pragma omp simd
                    for (int64_t c = c0; c < c1; c++) w[c] += g[c];
                }
                if (dwpe) {
                    float *restrict p = dwpe + (pos0 + position(pos, i, T)) * C;
#pragma omp simd
                    for (int64_t c = c0; c < c1; c++) p[c] += g[c];
                }
            }
        }
    }
}
