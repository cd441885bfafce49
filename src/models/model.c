/* What every model family shares: the parameter table's index map and look-up, the tensor-
 * parallel sums the roles ask for, and which stage owns a parameter. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/hf_map.h"
#include "loom/model.h"
#include "loom/rng.h"

int64_t loom_param_global_index(const struct loom_param *p, int tp_rank, int tp_size, int64_t i) {
    if (p->tp_dim < 0 || tp_size == 1) return i;
    if (p->ndim == 1) {
        int64_t per = p->shape[0] / p->tp_chunks, lper = per / tp_size;
        int64_t c = i / lper, w = i % lper;
        return c * per + (int64_t)tp_rank * lper + w;
    }
    int64_t lcols = p->local_shape[1];
    int64_t r = i / lcols, col = i % lcols;
    if (p->tp_dim == 0) {
        int64_t per = p->shape[0] / p->tp_chunks, lper = per / tp_size;
        int64_t c = r / lper, w = r % lper;
        int64_t gr = c * per + (int64_t)tp_rank * lper + w;
        return gr * p->shape[1] + col;
    }
    int64_t per = p->shape[1] / p->tp_chunks, lper = per / tp_size;
    int64_t c = col / lper, w = col % lper;
    int64_t gc = c * per + (int64_t)tp_rank * lper + w;
    return r * p->shape[1] + gc;
}

enum loom_status loom_model_init_params(struct loom_model *m, uint64_t seed, double std,
                                        double scaled_std, int xavier_init) {
    const int tp = loom_tp_size(m->par), tpr = loom_tp_rank(m->par);
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local) continue;
        int64_t n = p->local_shape[0] * p->local_shape[1];
        float *host = malloc((size_t)n * sizeof(float));
        if (!host) return loom_fail(LOOM_ERR_OOM, "out of memory initialising %s", p->name);
        uint64_t purpose = loom_hash_str(p->name);
        const double sd = p->init == LOOM_INIT_NORMAL_SCALED ? scaled_std : std;
        /* --init-method-xavier-uniform (Megatron-LM's, torch's xavier_uniform_ of the whole
         * logical matrix): every matrix, the embeddings and the output layers' too, uniform in
         * +-sqrt(6 / (fan_in + fan_out)) */
        const int xavier = xavier_init && p->ndim == 2 &&
                           (p->init == LOOM_INIT_NORMAL || p->init == LOOM_INIT_NORMAL_SCALED);
        const double bound = xavier ? sqrt(6.0 / (double)(p->shape[0] + p->shape[1])) : 0.0;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < n; k++) {
            switch (p->init) {
            case LOOM_INIT_ONES: host[k] = 1.0f; break;
            case LOOM_INIT_ZEROS: host[k] = 0.0f; break;
            default: {
                int64_t g = loom_param_global_index(p, tpr, tp, k);
                host[k] = xavier
                              ? (float)(bound *
                                        (2.0 * loom_rng_uniform(seed, purpose, (uint64_t)g) - 1.0))
                              : (float)(sd * loom_rng_normal(seed, purpose, (uint64_t)g));
            }
            }
        }
        m->be->ops->to_device(m->be, m->param_mem + p->offset, host, (size_t)n * sizeof(float));
        free(host);
    }
    return LOOM_OK;
}

/* Every family loom has; a new family is one more entry (its declaration in its header). */
extern const struct loom_family loom_gpt_family, loom_bert_family, loom_t5_family;
static const struct loom_family *const families[] = {&loom_gpt_family, &loom_bert_family,
                                                     &loom_t5_family};

const struct loom_family *loom_family_find(const char *name) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i]->name, name) == 0) return families[i];
    return NULL;
}

const struct loom_param *loom_model_find_param(const struct loom_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
    return NULL;
}

void loom_model_free(struct loom_model *m) {
    if (m) m->family->free(m);
}

int64_t loom_model_num_params(const struct loom_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++) n += m->params[i].shape[0] * m->params[i].shape[1];
    return n;
}

enum loom_status loom_model_sync_tp_partial(struct loom_model *m, int64_t unit) {
    struct loom_comm *tp = m->par->group[LOOM_PDIM_TP];
    if (!tp || loom_comm_size(tp) == 1) return LOOM_OK;
    for (int i = 0; i < m->nparams; i++) {
        const struct loom_param *p = &m->params[i];
        if (!p->local || p->layer != unit || !(p->roles & LOOM_ROLE_TP_PARTIAL)) continue;
        LOOM_CHECK(loom_comm_allreduce(tp, m->grad_mem + p->offset,
                                       p->local_shape[0] * p->local_shape[1], LOOM_DTYPE_F32,
                                       LOOM_REDOP_SUM));
    }
    return LOOM_OK;
}

int loom_model_param_stage(const struct loom_model *m, const struct loom_param *p) {
    const int pp = loom_pp_size(m->par), vpp = m->par->vpp > 0 ? m->par->vpp : 1;
    if (p->layer == LOOM_UNIT_FIRST) return 0;
    if (p->layer == LOOM_UNIT_LAST) return pp - 1;
    for (int chunk = 0; chunk < vpp; chunk++)
        for (int s = 0; s < pp; s++) {
            int64_t l0, l1;
            m->family->chunk_layers(m, s, chunk, &l0, &l1);
            if (p->layer >= l0 && p->layer < l1) return s;
        }
    return -1;
}

/* Every family's Hugging Face mapping (loom/hf_map.h), in the order of the families above */
extern const struct loom_hf_map loom_gpt_hf_map, loom_bert_hf_map;
static const struct loom_hf_map *const hf_maps[] = {&loom_gpt_hf_map, &loom_bert_hf_map};
#define NHF_MAPS (sizeof hf_maps / sizeof hf_maps[0])

static int in_list(const char *const *list, const char *s) {
    for (; list && *list; list++)
        if (!strcmp(*list, s)) return 1;
    return 0;
}

const struct loom_hf_map *loom_hf_map_for_type(const char *type) {
    for (size_t i = 0; type && i < NHF_MAPS; i++)
        if (in_list(hf_maps[i]->model_types, type) || in_list(hf_maps[i]->refused_types, type))
            return hf_maps[i];
    return NULL;
}

const struct loom_hf_map *loom_hf_map_for_family(const char *family) {
    for (size_t i = 0; family && i < NHF_MAPS; i++)
        if (!strcmp(hf_maps[i]->family, family)) return hf_maps[i];
    return NULL;
}

const char *loom_hf_map_type_names(void) {
    static char names[256];
    if (!names[0])
        for (size_t i = 0; i < NHF_MAPS; i++)
            for (const char *const *t = hf_maps[i]->model_types; t && *t; t++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         names[0] ? ", " : "", *t);
    return names;
}
