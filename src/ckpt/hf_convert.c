/* Hugging Face <-> loom checkpoint conversion (see loom/convert.h).
 *
 * The conversion is the same for every family with a Hugging Face mapping (loom/hf_map.h):
 * config.json's model_type or meta.json's family picks the mapping, whose hooks give the
 * configuration, the parameter table and, for each parameter, the Hugging Face tensors behind it
 * and where each of its elements is (GPT's mapping: src/models/gpt/gpt_hf.c; BERT's:
 * src/models/bert/bert_hf.c). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/ckpt.h"
#include "loom/convert.h"
#include "loom/fileio.h"
#include "loom/hf_map.h"
#include "loom/safetensors.h"
#include "loom/settings.h"

/* ---- the conversion, for every family's mapping ---- */


/* Everything one conversion holds: the family's mapping and the form, the table of the model,
 * the per-parameter sources, the loom tensors and the Hugging Face tensors (host, fp32). */
struct conversion {
    const struct loom_hf_map *map;
    struct loom_hf_form form;
    struct loom_transformer_config cfg;
    struct loom_param *params;
    int nparams;
    struct loom_hf_sources *maps;
    float **ld;
    float ***hd;
};

/* The model's table for cv->cfg on one rank, through the mapping (nothing allocated) */
static enum loom_status table_for(struct conversion *cv) {
    return cv->map->table(&cv->cfg, &cv->params, &cv->nparams);
}

/* Move every element between the loom tensors and the HF tensors. to_loom: HF -> loom. */
static void map_tensors(struct conversion *cv, int to_loom) {
    for (int i = 0; i < cv->nparams; i++) {
        const struct loom_param *p = &cv->params[i];
        int64_t rows = p->shape[0], cols = p->ndim > 1 ? p->shape[1] : 1;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t col = 0; col < cols; col++) {
                int64_t flat;
                int src = cv->map->locate(&cv->cfg, &cv->form, p, r, col, &flat);
                float *l = &cv->ld[i][r * cols + col];
                if (src < 0) {
                    if (to_loom) *l = 0.0f;
                    continue;
                }
                float *x = &cv->hd[i][src][flat];
                if (to_loom)
                    *l = *x;
                else
                    *x = *l;
            }
    }
}

static void conversion_free(struct conversion *cv) {
    for (int i = 0; i < cv->nparams; i++) {
        if (cv->ld) free(cv->ld[i]);
        if (cv->hd && cv->hd[i]) {
            for (int k = 0; k < LOOM_HF_MAX_SOURCES; k++) free(cv->hd[i][k]);
            free(cv->hd[i]);
        }
    }
    free(cv->ld);
    free(cv->hd);
    free(cv->maps);
    free(cv->params);
}

/* The table of cv->cfg, each parameter's sources and the buffers of both sides */
static enum loom_status conversion_init(struct conversion *cv, const char *what) {
    LOOM_CHECK(table_for(cv));
    const int n = cv->nparams;
    cv->maps = calloc((size_t)n, sizeof *cv->maps);
    cv->ld = calloc((size_t)n, sizeof *cv->ld);
    cv->hd = calloc((size_t)n, sizeof *cv->hd);
    if (!cv->maps || !cv->ld || !cv->hd)
        return loom_fail(LOOM_ERR_OOM, "out of memory converting %s", what);
    for (int i = 0; i < n; i++) {
        const struct loom_param *p = &cv->params[i];
        LOOM_CHECK(cv->map->sources(&cv->cfg, &cv->form, p, &cv->maps[i]));
        cv->ld[i] = calloc((size_t)(p->shape[0] * p->shape[1]), sizeof(float));
        cv->hd[i] = calloc(LOOM_HF_MAX_SOURCES, sizeof(float *));
        if (!cv->ld[i] || !cv->hd[i])
            return loom_fail(LOOM_ERR_OOM, "out of memory converting %s", what);
        for (int k = 0; k < cv->maps[i].n; k++) {
            const int64_t *shp = cv->maps[i].shape[k];
            if (!(cv->hd[i][k] = calloc((size_t)(shp[0] * (shp[1] ? shp[1] : 1)), sizeof(float))))
                return loom_fail(LOOM_ERR_OOM, "out of memory converting %s", what);
        }
    }
    return LOOM_OK;
}

static enum loom_status import_hf(struct conversion *cv, const struct loom_safetensors *st) {
    enum loom_status s = LOOM_OK;
    for (int64_t t = 0; t < loom_safetensors_count(st) && s == LOOM_OK; t++) {
        const char *name = loom_safetensors_entry_at(st, t)->name;
        int known = cv->map->tensor_known && cv->map->tensor_known(&cv->cfg, &cv->form, name);
        for (int i = 0; i < cv->nparams && !known; i++)
            for (int k = 0; k < cv->maps[i].n && !known; k++)
                known = !strcmp(cv->maps[i].name[k], name);
        if (!known)
            s = loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' is not one of the model that "
                          "config.json describes", loom_safetensors_path(st), name);
    }
    for (int i = 0; i < cv->nparams && s == LOOM_OK; i++)
        for (int k = 0; k < cv->maps[i].n && s == LOOM_OK; k++) {
            int64_t shp[2] = {cv->maps[i].shape[k][0], cv->maps[i].shape[k][1]};
            int nd = shp[1] ? 2 : 1;
            s = loom_safetensors_expect_shape(st, cv->maps[i].name[k], nd, shp);
            if (s == LOOM_OK)
                s = loom_safetensors_read_f32(st, cv->maps[i].name[k], cv->hd[i][k],
                                              shp[0] * (nd > 1 ? shp[1] : 1));
            if (s == LOOM_OK)
                s = loom_ckpt_check_finite(loom_safetensors_path(st), cv->maps[i].name[k],
                                           cv->hd[i][k], shp[0] * (nd > 1 ? shp[1] : 1));
        }
    if (s == LOOM_OK) map_tensors(cv, 1);
    return s;
}

static enum loom_status save_loom(struct conversion *cv, const struct loom_family_config_desc *fam,
                                  const char *loom_dir) {
    char path[4200];
    struct loom_safetensors_writer *w = NULL;
    LOOM_CHECK(loom_mkdir_p(loom_dir));
    LOOM_CHECK(loom_safetensors_writer_init(&w));
    enum loom_status s = LOOM_OK;
    for (int i = 0; i < cv->nparams && s == LOOM_OK; i++)
        s = loom_safetensors_writer_add(w, cv->params[i].name, LOOM_DTYPE_F32, cv->params[i].ndim,
                                        cv->params[i].shape, cv->ld[i]);
    if (s == LOOM_OK) {
        loom_safetensors_writer_set_metadata(w, "format", "loom");
        snprintf(path, sizeof path, "%s/model.safetensors", loom_dir);
        s = loom_safetensors_writer_save(w, path);
    }
    loom_safetensors_writer_free(w);
    if (s == LOOM_OK) {
        snprintf(path, sizeof path, "%s/meta.json", loom_dir);
        s = loom_ckpt_write_meta(path, fam, &cv->cfg, NULL, 0);
    }
    return s;
}

static enum loom_status load_loom(struct conversion *cv, const char *loom_dir) {
    char dir[4096], path[4200];
    LOOM_CHECK(loom_ckpt_resolve(loom_dir, dir, sizeof dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct loom_safetensors *st;
    LOOM_CHECK(loom_safetensors_open(&st, path));
    enum loom_status s = LOOM_OK;
    for (int64_t t = 0; t < loom_safetensors_count(st) && s == LOOM_OK; t++) {
        const char *name = loom_safetensors_entry_at(st, t)->name;
        int known = 0;
        for (int i = 0; i < cv->nparams && !known; i++) known = !strcmp(cv->params[i].name, name);
        if (!known)
            s = loom_fail(LOOM_ERR_FORMAT, "%s: tensor '%s' is not a parameter of the model its "
                          "meta.json describes", path, name);
    }
    for (int i = 0; i < cv->nparams && s == LOOM_OK; i++) {
        const struct loom_param *p = &cv->params[i];
        s = loom_safetensors_expect_shape(st, p->name, p->ndim, p->shape);
        if (s == LOOM_OK) s = loom_safetensors_read_f32(st, p->name, cv->ld[i], p->shape[0] * p->shape[1]);
        if (s == LOOM_OK)
            s = loom_ckpt_check_finite(path, p->name, cv->ld[i], p->shape[0] * p->shape[1]);
        /* zero-centred norm weights (--apply-layernorm-1p): Hugging Face's are the scale, 1 + w */
        const size_t nl = strlen(p->name), sl = strlen("layernorm.weight");
        if (s == LOOM_OK && cv->cfg.layernorm_1p && nl >= sl &&
            !strcmp(p->name + nl - sl, "layernorm.weight"))
            for (int64_t k = 0; k < p->shape[0]; k++)
                cv->ld[i][k] += 1.0f;
    }
    loom_safetensors_close(st);
    if (s == LOOM_OK) map_tensors(cv, 0);
    return s;
}

static enum loom_status write_hf_config(const struct conversion *cv, const char *path) {
    json_t *o = json_object();
    cv->map->config_write(&cv->cfg, &cv->form, o);
    json_object_set_new(o, "torch_dtype", json_string("float32"));
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (!s) return loom_fail(LOOM_ERR_OOM, "out of memory");
    enum loom_status r = loom_atomic_write_file(path, s, strlen(s));
    free(s);
    return r;
}

static enum loom_status save_hf(struct conversion *cv, const char *hf_dir) {
    char path[4200];
    struct loom_safetensors_writer *w = NULL;
    LOOM_CHECK(loom_mkdir_p(hf_dir));
    LOOM_CHECK(loom_safetensors_writer_init(&w));
    enum loom_status s = LOOM_OK;
    for (int i = 0; i < cv->nparams && s == LOOM_OK; i++)
        for (int k = 0; k < cv->maps[i].n && s == LOOM_OK; k++) {
            int64_t shp[2] = {cv->maps[i].shape[k][0], cv->maps[i].shape[k][1]};
            s = loom_safetensors_writer_add(w, cv->maps[i].name[k], LOOM_DTYPE_F32, shp[1] ? 2 : 1,
                                            shp, cv->hd[i][k]);
        }
    if (s == LOOM_OK) {
        loom_safetensors_writer_set_metadata(w, "format", "pt");
        snprintf(path, sizeof path, "%s/model.safetensors", hf_dir);
        s = loom_safetensors_writer_save(w, path);
    }
    loom_safetensors_writer_free(w);
    if (s == LOOM_OK) {
        snprintf(path, sizeof path, "%s/config.json", hf_dir);
        s = write_hf_config(cv, path);
    }
    return s;
}

/* config.json of hf_dir: the family's mapping, its configuration and form (not finalized) */
static enum loom_status read_hf_config(const char *dir, struct conversion *cv) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    LOOM_CHECK(loom_read_file(path, (size_t)1 << 24, &text, &len));
    json_error_t err;
    json_t *o = json_loadb(text, len, 0, &err);
    free(text);
    if (!o) return loom_fail(LOOM_ERR_FORMAT, "--load-dir: cannot read %s (%s)", path, err.text);
    if (!json_is_object(o)) {
        json_decref(o);
        return loom_fail(LOOM_ERR_FORMAT, "--load-dir: %s is not a JSON object", path);
    }
    const char *type = json_string_value(json_object_get(o, "model_type"));
    enum loom_status s;
    if (!(cv->map = loom_hf_map_for_type(type)))
        s = loom_fail(LOOM_ERR_UNSUPPORTED, "%s: model_type \"%s\" is not supported (%s)", path,
                      type ? type : "(missing)", loom_hf_map_type_names());
    else
        s = cv->map->config_read(o, path, type, &cv->cfg, &cv->form);
    json_decref(o);
    return s;
}

/* The settings table of the mapping's family (meta.json) */
static enum loom_status family_of(const struct loom_hf_map *map,
                                  const struct loom_family_config_desc **fam) {
    if (!(*fam = loom_family_config_find(map->family)))
        return loom_fail(LOOM_ERR_UNSUPPORTED, "model family \"%s\" has no settings table in this "
                         "build (families: %s)", map->family, loom_family_config_names());
    return LOOM_OK;
}

enum loom_status loom_convert_hf_to_loom(const char *hf_dir, const char *loom_dir) {
    struct conversion cv;
    memset(&cv, 0, sizeof cv);
    cv.form.prefix = "";
    const struct loom_family_config_desc *fam = NULL;
    enum loom_status s = read_hf_config(hf_dir, &cv);
    if (s == LOOM_OK) s = family_of(cv.map, &fam);
    if (s == LOOM_OK) s = fam->finalize(&cv.cfg, 1, 1);
    if (s != LOOM_OK) return s;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", hf_dir);
    struct loom_safetensors *st;
    LOOM_CHECK(loom_safetensors_open(&st, path));
    if (cv.map->weights_read) s = cv.map->weights_read(st, &cv.cfg, &cv.form);
    if (s == LOOM_OK) s = conversion_init(&cv, hf_dir);
    if (s == LOOM_OK) s = import_hf(&cv, st);
    loom_safetensors_close(st);
    if (s == LOOM_OK) s = save_loom(&cv, fam, loom_dir);
    conversion_free(&cv);
    return s;
}

enum loom_status loom_convert_loom_to_hf(const char *loom_dir, const char *hf_dir) {
    struct conversion cv;
    memset(&cv, 0, sizeof cv);
    cv.form.prefix = "";
    const struct loom_family_config_desc *fam;
    struct loom_train_state tst;
    int has_optim;
    LOOM_CHECK(loom_ckpt_read_family(loom_dir, &fam));
    if (!(cv.map = loom_hf_map_for_family(fam->name)))
        return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: the %s model family has no Hugging Face form",
                         loom_dir, fam->name);
    if (fam->config_size != sizeof cv.cfg)
        return loom_fail(LOOM_ERR_UNSUPPORTED, "%s: the %s model family's configuration is not "
                         "the transformer's", loom_dir, fam->name);
    LOOM_CHECK(loom_ckpt_read_config(loom_dir, fam, &cv.cfg, &tst, &has_optim));
    LOOM_CHECK(fam->finalize(&cv.cfg, 1, 1));
    LOOM_CHECK(cv.map->export_check(&cv.cfg, &cv.form));
    enum loom_status s = conversion_init(&cv, loom_dir);
    if (s == LOOM_OK) s = load_loom(&cv, loom_dir);
    if (s == LOOM_OK) s = save_hf(&cv, hf_dir);
    conversion_free(&cv);
    return s;
}
