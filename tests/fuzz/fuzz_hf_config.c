/* Hugging Face config.json as `loom convert --load-dir` reads it (src/ckpt/hf_convert.c): the
 * mapping picked by model_type, its config_read, the family's finalize step, the parameter table
 * and each parameter's source tensors, and config.json written back. Input: config.json. */
#include "fuzz_util.h"
#include "loom/hf_map.h"
#include "loom/settings.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t err;
    json_t *o = json_loadb((const char *)data, size, 0, &err);
    if (!o) return 0;
    if (!json_is_object(o)) {
        json_decref(o);
        return 0;
    }
    const char *type = json_string_value(json_object_get(o, "model_type"));
    const struct loom_hf_map *map = loom_hf_map_for_type(type);
    struct loom_transformer_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct loom_hf_form form = {0, ""};
    enum loom_status s = map ? map->config_read(o, "config.json", type, &cfg, &form) : LOOM_ERR_FORMAT;
    json_decref(o);
    if (s != LOOM_OK) return 0;
    const struct loom_family_config_desc *fam = loom_family_config_find(map->family);
    if (!fam || fam->finalize(&cfg, 1, 1) != LOOM_OK) return 0;
    struct loom_param *params = NULL;
    int nparams = 0;
    if (map->table(&cfg, &params, &nparams) == LOOM_OK) {
        struct loom_hf_sources src;
        for (int i = 0; i < nparams; i++)
            if (map->sources(&cfg, &form, &params[i], &src) == LOOM_OK && params[i].shape[0] > 0) {
                int64_t flat;
                (void)map->locate(&cfg, &form, &params[i], params[i].shape[0] - 1,
                                  params[i].ndim == 2 ? params[i].shape[1] - 1 : 0, &flat);
            }
    }
    free(params);
    struct loom_hf_form eform = {0, ""};
    if (map->export_check(&cfg, &eform) == LOOM_OK) {
        json_t *w = json_object();
        map->config_write(&cfg, &eform, w);
        json_decref(w);
    }
    return 0;
}
