/* CPU activations: GELU (tanh approximation or exact), SwiGLU, dropout.
 *
 * GELU, tanh form:  y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
 *         written as y = x s with s = sigmoid(2u) (the same function, without the cancellation
 *         of 1 + tanh(u) for negative x);  dy/dx = s + 2 x s (1 - s) du/dx,
 *         du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * GELU, erf form:   y = x Phi(x) = 0.5 x erfc(-x/sqrt(2)) (erfc, not 1 + erf, for the same reason);
 *         dy/dx = Phi(x) + x exp(-x^2/2) / sqrt(2 pi)
 * SwiGLU: inp row = [g (F) | u (F)], y = silu(g) u, silu(g) = g sigmoid(g)
 *         dg = dy u sigmoid(g) (1 + g (1 - sigmoid(g))),  du = dy silu(g)
 * Dropout: y = x keep / (1 - p); the keep decision of local element (b, t, c) is
 *         loom_rng_keep(seed, key, ((sample0 + b) T_global + pos0 + t) C_global + feat0 + c, p),
 *         so every parallel layout draws the same mask; backward applies the same mask to dy.
 * Gradients of activations are assigned.
 */
#include <omp.h>
#include <string.h>

#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_ops.h"
#include "loom/rng.h"

/* Below this many elements the ops run on one thread. */
#define CPU_ACT_PAR_MIN 16384

#define CPU_GELU_A 0.7978845608028654f /* sqrt(2/pi) */
#define CPU_GELU_B 0.044715f
#define CPU_SQRT1_2 0.70710678118654752f      /* 1/sqrt(2) */
#define CPU_INV_SQRT_2PI 0.39894228040143268f /* 1/sqrt(2 pi) */

/* The loops of the two forms are separate so that the tanh form's stays one vector loop. */
void loom_cpu_gelu_forward(struct loom_backend *be, enum loom_gelu form, float *out,
                           const float *inp, int64_t n) {
    (void)be;
    if (form == LOOM_GELU_ERF) {
#pragma omp parallel for schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            out[i] = 0.5f * inp[i] * erfcf(-inp[i] * CPU_SQRT1_2);
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= CPU_ACT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = CPU_GELU_A * (x + CPU_GELU_B * x * x * x);
        out[i] = x / (1.0f + loom_cpu_expf(-2.0f * u));
    }
}

void loom_cpu_gelu_forward_typed(struct loom_backend *be, enum loom_gelu form, void *out,
                                 const void *inp, enum loom_dtype dt, int64_t n) {
    loom_cpu_need_f32(dt, "gelu_forward_typed");
    loom_cpu_gelu_forward(be, form, (float *)out, (const float *)inp, n);
}

void loom_cpu_gelu_backward(struct loom_backend *be, enum loom_gelu form, float *dinp,
                            const float *dout, const float *inp, int64_t n) {
    (void)be;
    if (form == LOOM_GELU_ERF) {
#pragma omp parallel for schedule(static) if (n >= CPU_ACT_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float x = inp[i];
            float cdf = 0.5f * erfcf(-x * CPU_SQRT1_2);
            dinp[i] = dout[i] * (cdf + x * CPU_INV_SQRT_2PI * loom_cpu_expf(-0.5f * x * x));
        }
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= CPU_ACT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = CPU_GELU_A * (x + CPU_GELU_B * x * x * x);
        float du = CPU_GELU_A * (1.0f + 3.0f * CPU_GELU_B * x * x);
        float s = 1.0f / (1.0f + loom_cpu_expf(-2.0f * u));
        dinp[i] = dout[i] * (s + 2.0f * x * s * (1.0f - s) * du);
    }
}

void loom_cpu_swiglu_forward(struct loom_backend *be, void *out_, const void *inp_,
                             enum loom_dtype dt, int64_t N, int64_t F) {
    (void)be;
    loom_cpu_need_f32(dt, "swiglu_forward");
    float *out = out_;
    const float *inp = inp_;
#pragma omp parallel for schedule(static) if (N * F >= CPU_ACT_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *restrict g = inp + i * 2 * F;
        const float *restrict u = g + F;
        float *restrict o = out + i * F;
#pragma omp simd
        for (int64_t j = 0; j < F; j++) o[j] = g[j] / (1.0f + loom_cpu_expf(-g[j])) * u[j];
    }
}

void loom_cpu_swiglu_backward(struct loom_backend *be, void *dinp_, const void *dout_,
                              const void *inp_, enum loom_dtype dt, int64_t N, int64_t F) {
    (void)be;
    loom_cpu_need_f32(dt, "swiglu_backward");
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_;
#pragma omp parallel for schedule(static) if (N * F >= CPU_ACT_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *restrict g = inp + i * 2 * F;
        const float *restrict u = g + F;
        const float *restrict dy = dout + i * F;
        float *restrict dg = dinp + i * 2 * F;
        float *restrict du = dg + F;
#pragma omp simd
        for (int64_t j = 0; j < F; j++) {
            float s = 1.0f / (1.0f + loom_cpu_expf(-g[j]));
            float silu = g[j] * s;
            dg[j] = dy[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));
            du[j] = dy[j] * silu;
        }
    }
}

/* y = x * mask / (1 - p) over a local [B,T,C] block; y may alias x. */
static void cpu_dropout_apply(float *y, const float *x, int64_t B, int64_t T, int64_t C,
                              const struct loom_dropout *d) {
    const int64_t N = B * T;
    if (d->p <= 0.0f) {
        if (y != x) memmove(y, x, (size_t)(N * C) * sizeof *y);
        return;
    }
    if (d->p >= 1.0f) {
        memset(y, 0, (size_t)(N * C) * sizeof *y);
        return;
    }
    const float p = d->p, scale = 1.0f / (1.0f - p);
    const uint64_t seed = d->seed, key = d->key;
#pragma omp parallel for schedule(static) if (N * C >= 4096)
    for (int64_t i = 0; i < N; i++) {
        const int64_t bi = i / T, t = i % T;
        const uint64_t base =
            (uint64_t)(((d->sample0 + bi) * d->T_global + d->pos0 + t) * d->C_global + d->feat0);
        const float *xr = x + i * C;
        float *yr = y + i * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            yr[c] = loom_rng_keep(seed, key, base + (uint64_t)c, p) ? xr[c] * scale : 0.0f;
    }
}

void loom_cpu_dropout_forward(struct loom_backend *be, float *out, const float *inp, int64_t B,
                              int64_t T, int64_t C, const struct loom_dropout *d) {
    (void)be;
    cpu_dropout_apply(out, inp, B, T, C, d);
}

void loom_cpu_dropout_backward(struct loom_backend *be, float *dinp, const float *dout, int64_t B,
                               int64_t T, int64_t C, const struct loom_dropout *d) {
    (void)be;
    cpu_dropout_apply(dinp, dout, B, T, C, d);
}
