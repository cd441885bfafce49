/* Learning-rate schedule (Megatron's OptimizerParamScheduler semantics for warmup and decay). */
#include <math.h>

#include "loom/optim.h"

double loom_lr_at(const struct loom_lr_schedule *s, int64_t steps) {
    if (s->warmup_iters > 0 && steps <= s->warmup_iters)
        return s->max_lr * (double)steps / (double)s->warmup_iters;
    if (s->style == LOOM_LR_CONSTANT) return s->max_lr;
    if (steps > s->decay_iters) return s->min_lr;
    double span = (double)(s->decay_iters - s->warmup_iters);
    double ratio = span > 0 ? (double)(steps - s->warmup_iters) / span : 1.0;
    double coeff = s->style == LOOM_LR_LINEAR ? 1.0 - ratio : 0.5 * (cos(M_PI * ratio) + 1.0);
    return s->min_lr + coeff * (s->max_lr - s->min_lr);
}
