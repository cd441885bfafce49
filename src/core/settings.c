/* The settings tables' uses (see loom/settings.h): flags, meta.json, --load, Hugging Face's
 * config.json and the start-up notes, each a loop over a family's rows. */
#include "loom/settings.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/bert/bert_settings.h"
#include "models/gpt/gpt_settings.h"
#include "models/t5/t5_settings.h"

/* ---- the families ---- */
static const struct loom_family_config_desc *const families[] = {
    &loom_gpt_config_desc, &loom_bert_config_desc, &loom_t5_config_desc};
#define NFAMILIES ((int)(sizeof families / sizeof families[0]))

const struct loom_family_config_desc *loom_family_config_find(const char *name) {
    for (int i = 0; name && i < NFAMILIES; i++)
        if (strcmp(families[i]->name, name) == 0) return families[i];
    return NULL;
}

const struct loom_family_config_desc *loom_family_config_by_format(const char *format) {
    for (int i = 0; format && i < NFAMILIES; i++)
        if (strcmp(families[i]->ckpt_format, format) == 0) return families[i];
    return NULL;
}

const struct loom_family_config_desc *loom_family_config_default(void) { return families[0]; }
int loom_family_config_count(void) { return NFAMILIES; }
const struct loom_family_config_desc *loom_family_config_at(int i) {
    return i >= 0 && i < NFAMILIES ? families[i] : NULL;
}

const char *loom_family_config_names(void) {
    static char names[256];
    if (!names[0])
        for (int i = 0; i < NFAMILIES; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? "|" : "",
                     families[i]->name);
    return names;
}

/* ---- a row's field ---- */
static void *field(const struct loom_setting *s, void *cfg) { return (char *)cfg + s->offset; }
static const void *cfield(const struct loom_setting *s, const void *cfg) {
    return (const char *)cfg + s->offset;
}

static int64_t get_i(const struct loom_setting *s, const void *cfg) {
    return s->type == LOOM_SETTING_INT ? *(const int64_t *)cfield(s, cfg)
                                       : (int64_t) * (const int *)cfield(s, cfg);
}
static double get_d(const struct loom_setting *s, const void *cfg) {
    return *(const double *)cfield(s, cfg);
}
static void set_i(const struct loom_setting *s, void *cfg, int64_t v) {
    if (s->type == LOOM_SETTING_INT)
        *(int64_t *)field(s, cfg) = v;
    else
        *(int *)field(s, cfg) = (int)v;
}
static void set_d(const struct loom_setting *s, void *cfg, double v) {
    *(double *)field(s, cfg) = v;
}
static int same(const struct loom_setting *s, const void *a, const void *b) {
    return s->type == LOOM_SETTING_DOUBLE ? get_d(s, a) == get_d(s, b) : get_i(s, a) == get_i(s, b);
}
static int is_default(const struct loom_setting *s, const void *cfg) {
    return s->type == LOOM_SETTING_DOUBLE ? get_d(s, cfg) == s->dflt
                                          : get_i(s, cfg) == (int64_t)s->dflt;
}

/* The name of an ENUM's value i (into buf; "?" when out of range) */
static const char *enum_name(const struct loom_setting *s, int64_t i, char *buf, size_t cap) {
    const char *p = s->names;
    for (int64_t k = 0; k < i && p; k++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p || i < 0) {
        snprintf(buf, cap, "?");
        return buf;
    }
    const char *e = strchr(p, '|');
    snprintf(buf, cap, "%.*s", (int)(e ? (size_t)(e - p) : strlen(p)), p);
    return buf;
}
static int enum_index(const struct loom_setting *s, const char *v) {
    char name[64];
    for (int i = 0;; i++) {
        enum_name(s, i, name, sizeof name);
        if (!strcmp(name, "?")) return -1;
        if (!strcmp(name, v)) return i;
    }
}
/* "\"a\", \"b\" or \"c\"" */
static void enum_list(const struct loom_setting *s, char *buf, size_t cap) {
    char name[64];
    int n = 0;
    while (strcmp(enum_name(s, n, name, sizeof name), "?")) n++;
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s\"%s\"",
                 i == 0 ? "" : i == n - 1 ? " or " : ", ", enum_name(s, i, name, sizeof name));
}

const struct loom_setting *loom_settings_find(const struct loom_family_config_desc *d,
                                              const char *name) {
    for (int i = 0; i < d->nsettings; i++)
        if (!strcmp(d->settings[i].name, name)) return &d->settings[i];
    return NULL;
}

void loom_settings_defaults(const struct loom_family_config_desc *d, void *cfg) {
    for (int i = 0; i < d->nsettings; i++) {
        const struct loom_setting *s = &d->settings[i];
        if (s->type == LOOM_SETTING_DOUBLE)
            set_d(s, cfg, s->dflt);
        else
            set_i(s, cfg, (int64_t)s->dflt);
    }
}

/* ---- flags ---- */
int loom_settings_flags(const struct loom_family_config_desc *d, void *cfg, struct loom_flag *out,
                        int cap) {
    int n = 0;
    for (int i = 0; i < d->nsettings && n < cap; i++) {
        const struct loom_setting *s = &d->settings[i];
        if (!s->flag) continue;
        enum loom_flag_type t = s->type == LOOM_SETTING_INT      ? LOOM_FLAG_INT
                                : s->type == LOOM_SETTING_DOUBLE ? LOOM_FLAG_FLOAT
                                : s->type == LOOM_SETTING_ENUM   ? LOOM_FLAG_ENUM
                                : s->negate                      ? LOOM_FLAG_CLEAR
                                                                 : LOOM_FLAG_BOOL;
        out[n++] = (struct loom_flag){s->flag, t, field(s, cfg), s->help,
                                      s->type == LOOM_SETTING_ENUM ? s->names : NULL, 0};
    }
    return n;
}

int loom_settings_flag_given(const struct loom_flag *flags, int nflags, const char *name) {
    for (int i = 0; i < nflags; i++)
        if (!strcmp(flags[i].name, name)) return flags[i].given;
    return 0;
}

/* ---- --load ---- */
static enum loom_status apply_rows(const struct loom_family_config_desc *d, void *cfg,
                                   const void *saved, const struct loom_flag *flags, int nflags,
                                   const char *load);

enum loom_status loom_settings_apply_checkpoint(const struct loom_family_config_desc *d,
                                                void *cfg, const void *saved_in,
                                                const struct loom_flag *flags, int nflags,
                                                const char *load) {
    void *saved = malloc(d->config_size);
    if (!saved) return loom_fail(LOOM_ERR_OOM, "out of memory");
    memcpy(saved, saved_in, d->config_size);
    if (d->ckpt_as_flags) d->ckpt_as_flags(saved);
    enum loom_status s = apply_rows(d, cfg, saved, flags, nflags, load);
    if (s == LOOM_OK && d->load_check) s = d->load_check(cfg, saved, flags, nflags, load);
    free(saved);
    return s;
}

/* loom_settings_apply_checkpoint's loop over the rows */
static enum loom_status apply_rows(const struct loom_family_config_desc *d, void *cfg,
                                   const void *saved, const struct loom_flag *flags, int nflags,
                                   const char *load) {
    for (int i = 0; i < d->nsettings; i++) {
        const struct loom_setting *s = &d->settings[i];
        const int given = s->flag && loom_settings_flag_given(flags, nflags, s->flag);
        switch (s->load) {
        case LOOM_LOAD_FLAG:
        case LOOM_LOAD_FAMILY:
            continue;
        case LOOM_LOAD_OVERRIDE:
            if (given) continue;
            break;
        case LOOM_LOAD_CKPT:
            break;
        case LOOM_LOAD_ARCH:
            if (given && !same(s, cfg, saved)) {
                char a[64], b[64];
                switch (s->type) {
                case LOOM_SETTING_INT:
                    return loom_fail(LOOM_ERR_INVALID_ARG,
                                     "%s %lld contradicts the checkpoint %s (%lld); leave it out "
                                     "to use the checkpoint's value",
                                     s->flag, (long long)get_i(s, cfg), load,
                                     (long long)get_i(s, saved));
                case LOOM_SETTING_DOUBLE:
                    return loom_fail(LOOM_ERR_INVALID_ARG,
                                     "%s %g contradicts the checkpoint %s (%g); leave it out to "
                                     "use the checkpoint's value",
                                     s->flag, get_d(s, cfg), load, get_d(s, saved));
                case LOOM_SETTING_BOOL:
                    return loom_fail(LOOM_ERR_INVALID_ARG,
                                     "%s contradicts the checkpoint %s, which was trained without "
                                     "it",
                                     s->flag, load);
                case LOOM_SETTING_ENUM:
                    return loom_fail(LOOM_ERR_INVALID_ARG, "%s %s contradicts the checkpoint %s (%s)",
                                     s->flag, enum_name(s, get_i(s, cfg), a, sizeof a), load,
                                     enum_name(s, get_i(s, saved), b, sizeof b));
                }
            }
            break;
        }
        if (s->type == LOOM_SETTING_DOUBLE)
            set_d(s, cfg, get_d(s, saved));
        else
            set_i(s, cfg, get_i(s, saved));
    }
    return LOOM_OK;
}

/* ---- meta.json ---- */
void loom_settings_meta_write(const struct loom_family_config_desc *d, const void *cfg,
                              json_t *model) {
    for (int i = 0; i < d->nsettings; i++) {
        const struct loom_setting *s = &d->settings[i];
        if (!s->meta || ((s->meta_flags & LOOM_META_IF_SET) && is_default(s, cfg))) continue;
        char name[64];
        json_t *v = s->type == LOOM_SETTING_INT      ? json_integer(get_i(s, cfg))
                    : s->type == LOOM_SETTING_DOUBLE ? json_real(get_d(s, cfg))
                    : s->type == LOOM_SETTING_BOOL
                        ? json_boolean(get_i(s, cfg))
                        : json_string(enum_name(s, get_i(s, cfg), name, sizeof name));
        json_object_set_new(model, s->meta, v);
    }
    if (d->meta_write) d->meta_write(cfg, model);
}

enum loom_status loom_settings_meta_read(const struct loom_family_config_desc *d, json_t *model,
                                         const char *file, void *cfg) {
    if (d->defaults) d->defaults(cfg);
    for (int i = 0; i < d->nsettings; i++) {
        const struct loom_setting *s = &d->settings[i];
        if (!s->meta || (s->meta_flags & LOOM_META_WRITE_ONLY)) continue;
        json_t *v = json_object_get(model, s->meta);
        if (!v && (s->meta_flags & LOOM_META_OPTIONAL)) {
            if (s->type == LOOM_SETTING_DOUBLE)
                set_d(s, cfg, s->dflt);
            else
                set_i(s, cfg, (int64_t)s->dflt);
            continue;
        }
        switch (s->type) {
        case LOOM_SETTING_INT:
            if (!json_is_integer(v))
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" missing or not an integer", file,
                                 s->meta);
            set_i(s, cfg, (int64_t)json_integer_value(v));
            if ((s->meta_flags & LOOM_META_POSITIVE) && get_i(s, cfg) < 1)
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" must be positive (got %lld)", file,
                                 s->meta, (long long)get_i(s, cfg));
            break;
        case LOOM_SETTING_DOUBLE:
            if (!json_is_number(v))
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" missing or not a number", file,
                                 s->meta);
            set_d(s, cfg, json_number_value(v));
            break;
        case LOOM_SETTING_BOOL:
            if (!json_is_boolean(v))
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" missing or not a boolean", file,
                                 s->meta);
            set_i(s, cfg, json_is_true(v));
            break;
        case LOOM_SETTING_ENUM: {
            const char *name = json_string_value(v);
            const int k = name ? enum_index(s, name) : -1;
            if (k < 0) {
                char list[256];
                enum_list(s, list, sizeof list);
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" must be %s", file, s->meta, list);
            }
            set_i(s, cfg, k);
            break;
        }
        }
    }
    return d->meta_read ? d->meta_read(model, file, cfg) : LOOM_OK;
}

/* ---- Hugging Face config.json ---- */
enum loom_status loom_settings_hf_read(const struct loom_family_config_desc *d, int dialect,
                                       json_t *o, const char *file, void *cfg) {
    for (int i = 0; i < d->nsettings; i++) {
        const struct loom_setting *s = &d->settings[i];
        const struct loom_hf_key *k = &s->hf[dialect];
        if (!k->key) continue;
        json_t *v = json_object_get(o, k->key);
        switch (s->type) {
        case LOOM_SETTING_INT:
        case LOOM_SETTING_ENUM:
            if (!v || json_is_null(v)) {
                if (k->flags & LOOM_HF_REQUIRED)
                    return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is missing", file, k->key);
                set_i(s, cfg, (int64_t)k->dflt);
            } else if (!json_is_integer(v)) {
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is not an integer", file, k->key);
            } else {
                set_i(s, cfg, (int64_t)json_integer_value(v));
            }
            break;
        case LOOM_SETTING_DOUBLE:
            if ((!v || json_is_null(v)) && (k->flags & LOOM_HF_REQUIRED))
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is missing", file, k->key);
            if (v && !json_is_null(v) && !json_is_number(v))
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is not a number", file, k->key);
            set_d(s, cfg, json_is_number(v) ? json_number_value(v) : k->dflt);
            break;
        case LOOM_SETTING_BOOL:
            if ((!v || json_is_null(v)) && (k->flags & LOOM_HF_REQUIRED))
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is missing", file, k->key);
            if (v && !json_is_null(v) && !json_is_boolean(v))
                return loom_fail(LOOM_ERR_FORMAT, "%s: \"%s\" is not a boolean", file, k->key);
            set_i(s, cfg, json_is_boolean(v) ? json_is_true(v) : (int64_t)k->dflt);
            break;
        }
    }
    return LOOM_OK;
}

void loom_settings_hf_write(const struct loom_family_config_desc *d, int dialect,
                            const void *cfg, json_t *o) {
    for (int i = 0; i < d->nsettings; i++) {
        const struct loom_setting *s = &d->settings[i];
        const struct loom_hf_key *k = &s->hf[dialect];
        if (!k->key || (k->flags & LOOM_HF_READ_ONLY)) continue;
        json_object_set_new(o, k->key,
                            s->type == LOOM_SETTING_DOUBLE ? json_real(get_d(s, cfg))
                            : s->type == LOOM_SETTING_BOOL ? json_boolean(get_i(s, cfg))
                                                           : json_integer(get_i(s, cfg)));
    }
}

/* ---- the start-up line ---- */
void loom_settings_describe(const struct loom_family_config_desc *d, const void *cfg, char *buf,
                            size_t cap) {
    for (int i = 0; i < d->nsettings; i++) {
        const struct loom_setting *s = &d->settings[i];
        if (!s->note || is_default(s, cfg)) continue;
        const size_t len = strlen(buf);
        char name[64];
        switch (s->type) {
        case LOOM_SETTING_INT: snprintf(buf + len, cap - len, s->note, (long long)get_i(s, cfg)); break;
        case LOOM_SETTING_DOUBLE: snprintf(buf + len, cap - len, s->note, get_d(s, cfg)); break;
        case LOOM_SETTING_BOOL: snprintf(buf + len, cap - len, "%s", s->note); break;
        case LOOM_SETTING_ENUM:
            snprintf(buf + len, cap - len, s->note, enum_name(s, get_i(s, cfg), name, sizeof name));
            break;
        }
    }
    if (d->describe) d->describe(cfg, buf, cap);
}
