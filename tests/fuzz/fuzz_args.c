/* Flag parsing (src/core/args.c) over a table of every flag type: the GPT or BERT family's
 * settings flags (first input byte picks; src/core/settings.c) plus flags of the types the
 * settings have none of, then the family's after_parse and from_flags hooks and finalize, as
 * `loom train` runs them. Input: one byte, then the arguments separated by NUL bytes. */
#include "fuzz_util.h"
#include "loom/args.h"
#include "loom/settings.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    const struct loom_family_config_desc *fam =
        loom_family_config_at(data[0] % loom_family_config_count());
    char *buf = malloc(size); /* the arguments, NUL-terminated */
    char *argv[MAX_ARGS + 2];
    if (!buf) abort();
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    int argc = 0;
    argv[argc++] = "loom";
    for (size_t i = 0; i < size - 1 && argc < MAX_ARGS + 1; i++) {
        argv[argc++] = buf + i;
        while (i < size - 1 && buf[i]) i++;
    }
    argv[argc] = NULL;
    /* --fz-list's joined value is malloc'd and kept for the process (like argv): given twice,
     * the first is dropped, which is no leak in a process that parses once */
    int lists = 0;
    for (int i = 1; i < argc; i++)
        lists += strncmp(argv[i], "--fz-list", 9) == 0 && (!argv[i][9] || argv[i][9] == '=');
    if (lists > 1) {
        free(buf);
        return 0;
    }

    void *cfg = calloc(1, fam->config_size);
    if (!cfg) abort();
    fam->defaults(cfg);
    const char *path = "", *list = "", *choice = "a";
    double lr = 1e-4;
    int64_t iters = 10;
    int flag = 0, idx = 0, clear = 1;
    struct loom_flag flags[512];
    int n = loom_settings_flags(fam, cfg, flags, 500);
    flags[n++] = (struct loom_flag){"--fz-str", LOOM_FLAG_STR, &path, "a path", NULL, 0};
    flags[n++] = (struct loom_flag){"--fz-list", LOOM_FLAG_LIST, &list, "a list", NULL, 0};
    flags[n++] = (struct loom_flag){"--fz-choice", LOOM_FLAG_CHOICE, &choice, "one of", "a|bb|c", 0};
    flags[n++] = (struct loom_flag){"--fz-enum", LOOM_FLAG_ENUM, &idx, "index", "x|yy|zzz", 0};
    flags[n++] = (struct loom_flag){"--fz-float", LOOM_FLAG_FLOAT, &lr, "a number", NULL, 0};
    flags[n++] = (struct loom_flag){"--fz-int", LOOM_FLAG_INT, &iters, "an integer", NULL, 0};
    flags[n++] = (struct loom_flag){"--fz-bool", LOOM_FLAG_BOOL, &flag, "a switch", NULL, 0};
    flags[n++] = (struct loom_flag){"--fz-clear", LOOM_FLAG_CLEAR, &clear, "off", NULL, 0};
    const char *const list_default = list;
    int help = 0;
    enum loom_status s = loom_flags_parse(flags, n, argc, argv, 1, &help);
    if (list != list_default && (list < buf || list >= buf + size)) free((char *)list);
    if (s == LOOM_OK && !help) {
        (void)loom_flags_find(flags, n, "--fz-int");
        (void)loom_settings_flag_given(flags, n, "--num-layers");
        if ((!fam->after_parse || fam->after_parse(cfg, flags, n) == LOOM_OK) &&
            (!fam->from_flags || fam->from_flags(cfg, flags, n) == LOOM_OK))
            (void)fam->finalize(cfg, 1, 1);
    }
    free(cfg);
    free(buf);
    return 0;
}
