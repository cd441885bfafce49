/* AdamW (torch.optim.AdamW semantics), one thread per element:
 *   g = grad * grad_scale
 *   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p),  mhat = m / (1 - beta1^step),
 *                                                    vhat = v / (1 - beta2^step)
 * evaluated as torch does: p = p (1 - lr wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps).
 * The decay uses p before the update (decoupled weight decay); step is 1-based. The constants
 * are computed once on the host in double.
 */
#include <math.h>

#include "backend/cuda/common.cuh"

#define LOOM_ADAMW_THREADS 256

__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, int64_t n,
                             float beta1, float beta2, float eps, float decay, float step_size,
                             float inv_sqrt_bc2, float grad_scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        /* explicit roundings (no fused multiply-add): the same bits as the CPU backend */
        float g = __fmul_rn(grad[i], grad_scale);
        float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, g));
        float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
        m[i] = mi;
        v[i] = vi;
        float den = __fadd_rn(__fmul_rn(sqrtf(vi), inv_sqrt_bc2), eps);
        param[i] = __fsub_rn(__fmul_rn(param[i], decay), __fdiv_rn(__fmul_rn(step_size, mi), den));
    }
}

void loom_cuda_adamw(struct loom_backend *be, float *param, const float *grad, float *m, float *v,
                     int64_t n, float lr, float beta1, float beta2, float eps, float wd,
                     int64_t step, float grad_scale) {
    if (n <= 0) return;
    LOOM_ASSERT(step >= 1);
    loom_cuda_wrote(be, param, (size_t)n * sizeof(float));
    const double bc1 = 1.0 - pow((double)beta1, (double)step);
    const double bc2 = 1.0 - pow((double)beta2, (double)step);
    const float step_size = (float)((double)lr / bc1);
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    const float decay = (float)(1.0 - (double)lr * (double)wd);
    adamw_kernel<<<loom_cuda_grid(n, LOOM_ADAMW_THREADS), LOOM_ADAMW_THREADS, 0,
                   loom_cuda_stream(be)>>>(param, grad, m, v, n, beta1, beta2, eps, decay,
                                           step_size, inv_sqrt_bc2, grad_scale);
    LOOM_CUDA_LAUNCHED();
}
