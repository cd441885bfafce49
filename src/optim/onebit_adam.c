/* 1-bit Adam as the optimizer of `loom train --optimizer onebit-adam` (loom/onebit.h): the
 * moments of every local parameter (the AdamW state's m and v, so that checkpoints hold them as
 * AdamW's), updated on the host over the runs of loom_adamw_init (the weight decay where it
 * applies, the decoupled learning rate where given). The error buffers are not checkpointed: a
 * run that resumes starts them from zero, as DeepSpeed does. */
#include <stdlib.h>
#include <string.h>

#include "loom/onebit.h"
#include "loom/optim.h"
#include "optim/onebit_adam.h"

struct loom_onebit_adam {
    struct loom_onebit ob;
    int W;
    float *p, *g, *m, *v; /* host copies [num_local] */
};

enum loom_status loom_onebit_adam_init(struct loom_adamw *o, struct loom_model *model,
                                       int64_t freeze_step) {
    if (o->distributed)
        return loom_fail(LOOM_ERR_INVALID_ARG, "1-bit Adam keeps the whole moments on every "
                         "data-parallel rank: not with the distributed optimizer");
    struct loom_onebit_adam *a = calloc(1, sizeof *a);
    if (!a) return loom_fail(LOOM_ERR_OOM, "out of memory");
    o->onebit = a;
    o->freeze_step = freeze_step;
    struct loom_comm *dp = model->par->group[LOOM_PDIM_DP];
    a->W = loom_comm_size(dp);
    const size_t n = (size_t)(model->num_local > 0 ? model->num_local : 1);
    a->p = malloc(4 * n * sizeof(float));
    if (!a->p) return loom_fail(LOOM_ERR_OOM, "out of memory for 1-bit Adam's host state");
    a->g = a->p + n;
    a->m = a->g + n;
    a->v = a->m + n;
    return loom_onebit_init(&a->ob, dp, model->be, model->num_local);
}

void loom_onebit_adam_free(struct loom_adamw *o) {
    struct loom_onebit_adam *a = o->onebit;
    if (!a) return;
    loom_onebit_free(&a->ob);
    free(a->p);
    free(a);
    o->onebit = NULL;
}

int loom_adamw_local_grads(const struct loom_adamw *o) {
    return o->onebit && o->onebit->W > 1 && o->step >= o->freeze_step;
}

enum loom_status loom_onebit_adam_step(struct loom_adamw *o, struct loom_model *model, double lr,
                                       double lr_decoupled, double grad_scale) {
    struct loom_onebit_adam *a = o->onebit;
    struct loom_backend *be = model->be;
    const int64_t n = model->num_local;
    const size_t bytes = (size_t)n * sizeof(float);
    /* the gradients are the ranks' own (each one's share of the mean: 1 / W of its own mean)
     * after the warmup, the all-reduced mean before */
    const int local = loom_adamw_local_grads(o);
    o->step++;
    be->ops->to_host(be, a->p, model->param_mem, bytes);
    be->ops->to_host(be, a->g, model->grad_mem, bytes);
    be->ops->to_host(be, a->m, o->m, bytes);
    be->ops->to_host(be, a->v, o->v, bytes);
    const int frozen = o->step > o->freeze_step;
    loom_onebit_moments(a->m, a->v, a->g, n, o->beta1, o->beta2,
                        (float)(grad_scale * (local ? a->W : 1)), frozen);
    if (local) LOOM_CHECK(loom_onebit_allreduce(&a->ob, a->m));
    for (int r = 0; r < o->nruns; r++) {
        const double rate = r < o->nruns_main ? lr : lr_decoupled;
        loom_onebit_update(a->p + o->run_off[r], a->m + o->run_soff[r], a->v + o->run_soff[r],
                           o->run_len[r], (float)rate, (float)o->eps,
                           o->run_decay[r] ? (float)o->weight_decay : 0.0f);
    }
    be->ops->to_device(be, model->param_mem, a->p, bytes);
    be->ops->to_device(be, o->m, a->m, bytes);
    be->ops->to_device(be, o->v, a->v, bytes);
    return LOOM_OK;
}
