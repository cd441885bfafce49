/* AdamW over the parameter table, and the global gradient norm. */
#include <math.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/optim.h"

enum loom_status loom_adamw_init(struct loom_adamw *o, struct loom_gpt *model) {
    struct loom_backend *be = model->be;
    size_t bytes = (size_t)model->num_local * sizeof(float);
    o->step = 0;
    o->m = be->ops->malloc(be, bytes);
    o->v = be->ops->malloc(be, bytes);
    if (!o->m || !o->v)
        return loom_fail(LOOM_ERR_OOM, "out of memory for the optimizer state (%zu MiB)",
                         (2 * bytes) >> 20);
    be->ops->zero(be, o->m, bytes);
    be->ops->zero(be, o->v, bytes);
    return LOOM_OK;
}

void loom_adamw_free(struct loom_adamw *o, struct loom_gpt *model) {
    if (o->m) model->be->ops->free(model->be, o->m);
    if (o->v) model->be->ops->free(model->be, o->v);
    o->m = o->v = NULL;
}

void loom_adamw_step(struct loom_adamw *o, struct loom_gpt *model, double lr, double grad_scale) {
    struct loom_backend *be = model->be;
    o->step++;
    for (int i = 0; i < model->nparams; i++) {
        const struct loom_param *p = &model->params[i];
        if (!p->local) continue;
        int64_t n = p->local_shape[0] * p->local_shape[1];
        int64_t off = p->offset;
        loom_op(be, adamw, model->param_mem + off, model->grad_mem + off, o->m + off, o->v + off, n,
                (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                p->weight_decay ? (float)o->weight_decay : 0.0f, o->step, (float)grad_scale);
    }
}

enum loom_status loom_grad_norm(struct loom_gpt *model, double *norm) {
    struct loom_parallel *par = model->par;
    int tpr = loom_tp_rank(par);
    double ss = 0;
    for (int i = 0; i < model->nparams; i++) {
        const struct loom_param *p = &model->params[i];
        if (!p->local) continue;
        if (p->tp_dim < 0 && tpr != 0) continue;
        if (!model->first_stage && !model->cfg.untie &&
            strcmp(p->name, "embedding.word_embeddings.weight") == 0)
            continue;
        int64_t n = p->local_shape[0] * p->local_shape[1];
        ss += loom_op(model->be, sumsq, model->grad_mem + p->offset, n);
    }
    if (loom_tp_size(par) > 1)
        LOOM_CHECK(loom_comm_allreduce(par->group[LOOM_PDIM_TP], &ss, 1, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
    if (loom_pp_size(par) > 1)
        LOOM_CHECK(loom_comm_allreduce(par->group[LOOM_PDIM_PP], &ss, 1, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
    *norm = sqrt(ss);
    return LOOM_OK;
}
