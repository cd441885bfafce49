/* Single-position attention against a key/value cache (generation).
 * out[h] = sum_j softmax_j(scale * q[h] . k[j, g]) v[j, g], g = h / (NH/NKV), j < L. */
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

void loom_cpu_attention_decode(struct loom_backend *be, float *out, const float *q,
                               const float *kcache, const float *vcache, int64_t L, int64_t NH,
                               int64_t NKV, int64_t HS, float scale) {
    (void)be;
    int64_t R = NH / NKV;
#pragma omp parallel for schedule(static) if (L * NH * HS > 65536)
    for (int64_t h = 0; h < NH; h++) {
        int64_t g = h / R;
        const float *qh = q + h * HS;
        float *s = malloc((size_t)L * sizeof(float));
        LOOM_ASSERT(s);
        float mx = -INFINITY;
        for (int64_t j = 0; j < L; j++) {
            const float *k = kcache + (j * NKV + g) * HS;
            float dot = 0;
            for (int64_t d = 0; d < HS; d++) dot += qh[d] * k[d];
            s[j] = dot * scale;
            if (s[j] > mx) mx = s[j];
        }
        double sum = 0;
        for (int64_t j = 0; j < L; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        float *o = out + h * HS;
        for (int64_t d = 0; d < HS; d++) o[d] = 0;
        for (int64_t j = 0; j < L; j++) {
            const float *v = vcache + (j * NKV + g) * HS;
            float p = (float)(s[j] / sum);
            for (int64_t d = 0; d < HS; d++) o[d] += p * v[d];
        }
        free(s);
    }
}
