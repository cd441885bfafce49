/* Checkpoint meta.json (src/ckpt/checkpoint.c through the family's settings table), as --load,
 * generate and convert read it: the family, the configuration and training state, the
 * configuration's finalize step, and for families with a Hugging Face form the export check and
 * the parameter table. Input: meta.json. */
#include "fuzz_util.h"
#include "loom/ckpt.h"
#include "loom/hf_map.h"
#include "loom/settings.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fz_write("meta.json", data, size, path, sizeof path);
    const char *root = fz_dir();
    const struct loom_family_config_desc *fam;
    if (loom_ckpt_read_family(root, &fam) != LOOM_OK) return 0;
    void *cfg = calloc(1, fam->config_size);
    if (!cfg) abort();
    fam->defaults(cfg);
    struct loom_train_state st;
    int has_optim;
    if (loom_ckpt_read_config(root, fam, cfg, &st, &has_optim) != LOOM_OK) goto out;
    char desc[4096];
    loom_settings_describe(fam, cfg, desc, sizeof desc);
    json_t *model = json_object();
    loom_settings_meta_write(fam, cfg, model);
    json_decref(model);
    if (fam->finalize(cfg, 1, 1) != LOOM_OK) goto out;
    const struct loom_hf_map *map = loom_hf_map_for_family(fam->name);
    if (!map || fam->config_size != sizeof(struct loom_transformer_config)) goto out;
    struct loom_hf_form form = {0, ""};
    if (map->export_check(cfg, &form) != LOOM_OK) goto out;
    json_t *o = json_object();
    map->config_write(cfg, &form, o);
    json_decref(o);
    struct loom_param *params = NULL;
    int nparams = 0;
    if (map->table(cfg, &params, &nparams) == LOOM_OK) {
        struct loom_hf_sources src;
        for (int i = 0; i < nparams; i++) (void)map->sources(cfg, &form, &params[i], &src);
    }
    free(params);
out:
    free(cfg);
    return 0;
}
