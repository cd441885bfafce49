/* `loom convert`: checkpoints between loom and Hugging Face (Megatron's checkpoint/convert.py
 * flag names: --loader, --saver, --load-dir, --save-dir). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "loom/args.h"
#include "loom/convert.h"
#include "loom/hf_map.h"
#include "loom/log.h"

int loom_cmd_convert(int argc, char **argv) {
    const char *loader = NULL, *saver = NULL, *load_dir = NULL, *save_dir = NULL;
    struct loom_flag flags[] = {
        {"--loader", LOOM_FLAG_CHOICE, &loader, "format of --load-dir", "hf|loom", 0},
        {"--saver", LOOM_FLAG_CHOICE, &saver, "format of --save-dir", "hf|loom", 0},
        {"--load-dir", LOOM_FLAG_STR, &load_dir, "directory to read", NULL, 0},
        {"--save-dir", LOOM_FLAG_STR, &save_dir, "directory to write", NULL, 0},
    };
    int n = (int)(sizeof flags / sizeof flags[0]), help;
    enum loom_status s = loom_flags_parse(flags, n, argc, argv, 2, &help);
    if (s == LOOM_OK && help) {
        char usage[512];
        snprintf(usage, sizeof usage,
                 "usage: loom convert --loader hf|loom --saver hf|loom --load-dir DIR --save-dir "
                 "DIR\n\nhf: config.json + model.safetensors (model_type %s); loom: a loom "
                 "checkpoint directory",
                 loom_hf_map_type_names());
        loom_flags_print_help(usage, flags, n);
        return 0;
    }
    if (s == LOOM_OK && (!loader || !saver || !load_dir || !save_dir))
        s = loom_fail(LOOM_ERR_INVALID_ARG, "--loader, --saver, --load-dir and --save-dir are all "
                      "required (see --help)");
    if (s == LOOM_OK && !strcmp(loader, saver))
        s = loom_fail(LOOM_ERR_INVALID_ARG, "--loader and --saver are both '%s'; valid pairs: "
                      "hf -> loom, loom -> hf", loader);
    if (s == LOOM_OK)
        s = !strcmp(loader, "hf") ? loom_convert_hf_to_loom(load_dir, save_dir)
                                  : loom_convert_loom_to_hf(load_dir, save_dir);
    if (s != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    loom_log_info("converted %s (%s) -> %s (%s)", load_dir, loader, save_dir, saver);
    return 0;
}
