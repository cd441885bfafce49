#include "loom/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loom_flag *loom_flags_find(struct loom_flag *flags, int nflags, const char *name) {
    for (int i = 0; i < nflags; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

/* The index of v among choices ("a|b|c"), or -1 */
static int choice_index(const char *choices, const char *v) {
    size_t n = strlen(v);
    const char *p = choices;
    for (int i = 0; *p; i++) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return i;
        if (!e) break;
        p = e + 1;
    }
    return -1;
}

/* The name of choice i of choices ("a|b|c") into buf ("?" if there is none) */
static void choice_name(const char *choices, int i, char *buf, size_t cap) {
    const char *p = choices;
    for (int k = 0; k < i && p; k++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p || i < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    const char *e = strchr(p, '|');
    snprintf(buf, cap, "%.*s", (int)(e ? (size_t)(e - p) : strlen(p)), p);
}

static enum loom_status set_value(struct loom_flag *f, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case LOOM_FLAG_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s: expected an integer, got '%s'", f->name, v);
        *(int64_t *)f->ptr = (int64_t)x;
        break;
    }
    case LOOM_FLAG_FLOAT: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s: expected a number, got '%s'", f->name, v);
        *(double *)f->ptr = x;
        break;
    }
    case LOOM_FLAG_ENUM: {
        const int i = choice_index(f->choices, v);
        if (i < 0)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s: '%s' is not one of %s", f->name, v,
                             f->choices);
        *(int *)f->ptr = i;
        break;
    }
    case LOOM_FLAG_CHOICE:
        if (choice_index(f->choices, v) < 0)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s: '%s' is not one of %s", f->name, v,
                             f->choices);
        *(const char **)f->ptr = v;
        break;
    case LOOM_FLAG_STR:
    case LOOM_FLAG_LIST:
        *(const char **)f->ptr = v;
        break;
    case LOOM_FLAG_TEXT:
        if (strlen(v) >= LOOM_FLAG_TEXT_LEN)
            return loom_fail(LOOM_ERR_INVALID_ARG, "%s: '%s' is longer than %d characters",
                             f->name, v, LOOM_FLAG_TEXT_LEN - 1);
        memcpy(f->ptr, v, strlen(v) + 1);
        break;
    case LOOM_FLAG_BOOL:
        *(int *)f->ptr = 1;
        break;
    case LOOM_FLAG_CLEAR:
        *(int *)f->ptr = 0;
        break;
    }
    return LOOM_OK;
}

/* The values joined from several arguments live for the process, like argv: kept here so that
 * none is lost when the flags table that points at it goes out of scope (or the flag is given
 * again). */
static char **g_joined;
static size_t g_njoined, g_capjoined;

static char *joined_alloc(size_t len) {
    if (g_njoined == g_capjoined) {
        size_t cap = g_capjoined ? 2 * g_capjoined : 8;
        char **p = realloc(g_joined, cap * sizeof *p);
        if (!p) return NULL;
        g_joined = p;
        g_capjoined = cap;
    }
    char *s = malloc(len);
    if (s) g_joined[g_njoined++] = s;
    return s;
}

enum loom_status loom_flags_parse(struct loom_flag *flags, int nflags, int argc, char **argv,
                                  int first, int *help) {
    *help = 0;
    for (int i = first; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            *help = 1;
            return LOOM_OK;
        }
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        char name[128];
        const char *inline_val = NULL;
        const char *eq = strchr(arg, '=');
        if (strncmp(arg, "--", 2) != 0)
            return loom_fail(LOOM_ERR_INVALID_ARG, "unexpected argument '%s' (flags start with --; "
                             "see --help)", arg);
        if (eq && (size_t)(eq - arg) < sizeof name) {
            memcpy(name, arg, (size_t)(eq - arg));
            name[eq - arg] = 0;
            inline_val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
        }
        struct loom_flag *f = loom_flags_find(flags, nflags, name);
        if (!f) return loom_fail(LOOM_ERR_INVALID_ARG, "unknown flag %s (see --help)", name);
        f->given = 1; /* given again: the last value wins, as with Megatron's argparse */
        if (f->type == LOOM_FLAG_BOOL || f->type == LOOM_FLAG_CLEAR) {
            if (inline_val)
                return loom_fail(LOOM_ERR_INVALID_ARG, "%s takes no value", name);
            LOOM_CHECK(set_value(f, NULL));
            continue;
        }
        if (f->type == LOOM_FLAG_LIST && !inline_val) {
            /* join every value up to the next flag */
            size_t len = 0;
            int j = i + 1;
            for (; j < argc && strncmp(argv[j], "--", 2) != 0; j++) len += strlen(argv[j]) + 1;
            if (j == i + 1) return loom_fail(LOOM_ERR_INVALID_ARG, "%s needs a value", name);
            char *joined = joined_alloc(len + 1);
            if (!joined) return loom_fail(LOOM_ERR_OOM, "out of memory parsing %s", name);
            joined[0] = 0;
            for (int k = i + 1; k < j; k++) {
                if (k > i + 1) strcat(joined, " ");
                strcat(joined, argv[k]);
            }
            *(const char **)f->ptr = joined;
            i = j - 1;
            continue;
        }
        const char *v = inline_val;
        if (!v) {
            if (i + 1 >= argc || (strncmp(argv[i + 1], "--", 2) == 0))
                return loom_fail(LOOM_ERR_INVALID_ARG, "%s needs a value", name);
            v = argv[++i];
        }
        LOOM_CHECK(set_value(f, v));
    }
    return LOOM_OK;
}

void loom_flags_print_help(const char *usage, const struct loom_flag *flags, int nflags) {
    printf("%s\n\nflags (default in brackets):\n", usage);
    for (int i = 0; i < nflags; i++) {
        const struct loom_flag *f = &flags[i];
        char def[256];
        switch (f->type) {
        case LOOM_FLAG_INT: snprintf(def, sizeof def, "%lld", (long long)*(int64_t *)f->ptr); break;
        case LOOM_FLAG_FLOAT: snprintf(def, sizeof def, "%g", *(double *)f->ptr); break;
        case LOOM_FLAG_BOOL: snprintf(def, sizeof def, "%s", *(int *)f->ptr ? "on" : "off"); break;
        case LOOM_FLAG_CLEAR: snprintf(def, sizeof def, "%s", *(int *)f->ptr ? "off" : "on"); break;
        case LOOM_FLAG_ENUM: choice_name(f->choices, *(int *)f->ptr, def, sizeof def); break;
        case LOOM_FLAG_TEXT: snprintf(def, sizeof def, "%s", (const char *)f->ptr); break;
        default: {
            const char *s = *(const char **)f->ptr;
            snprintf(def, sizeof def, "%s", s ? s : "none");
        }
        }
        char head[160];
        if (f->type == LOOM_FLAG_CHOICE || f->type == LOOM_FLAG_ENUM)
            snprintf(head, sizeof head, "%s {%s}", f->name, f->choices);
        else if (f->type == LOOM_FLAG_BOOL || f->type == LOOM_FLAG_CLEAR)
            snprintf(head, sizeof head, "%s", f->name);
        else
            snprintf(head, sizeof head, "%s %s", f->name,
                     f->type == LOOM_FLAG_INT ? "N" : f->type == LOOM_FLAG_FLOAT ? "X" : "S");
        printf("  %-40s %s [%s]\n", head, f->help ? f->help : "", def);
    }
}
