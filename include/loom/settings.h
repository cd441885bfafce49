/* Model settings declared once, in a table per model family.
 *
 * A setting is one row of struct loom_setting: the field of the family's configuration struct it
 * lives in (offset and type), its Megatron-LM flag and default, its key in a checkpoint's
 * meta.json, what a --load does with it, its plain Hugging Face config.json keys and its help.
 * From the table come the flags of `loom train` (loom_settings_flags; --help lists them with
 * their defaults), meta.json's "model" object (loom_settings_meta_write / _read), the --load
 * check and fill-in (loom_settings_apply_checkpoint), the 1:1 part of Hugging Face's config.json
 * (loom_settings_hf_read / _write) and the notes of the start-up line (loom_settings_describe).
 * What a table row cannot say (settings derived by a rule from several flags, nested meta.json
 * objects, Hugging Face's architecture detection) is the family's hooks, in
 * struct loom_family_config_desc.
 */
#ifndef LOOM_SETTINGS_H
#define LOOM_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "loom/args.h"
#include "loom/status.h"

struct json_t; /* jansson's */
struct loom_sample_source;  /* loom/train.h */
struct loom_train_config;   /* loom/train.h */
struct loom_tokenizer;      /* loom/tokenizer.h */

enum loom_setting_type {
    LOOM_SETTING_INT,    /* int64_t */
    LOOM_SETTING_DOUBLE, /* double */
    LOOM_SETTING_BOOL,   /* int, 0 or 1 */
    LOOM_SETTING_ENUM,   /* an enum stored as int: 0, 1, ... named by `names` */
    LOOM_SETTING_TEXT,   /* char[LOOM_SETTING_TEXT_LEN]; its default is `names` */
};
#define LOOM_SETTING_TEXT_LEN LOOM_FLAG_TEXT_LEN

/* What --load does with a setting whose flag was or was not given. */
enum loom_setting_load {
    LOOM_LOAD_FLAG = 0, /* nothing: the flag's value (or default) holds (dropouts, the init) */
    LOOM_LOAD_ARCH,     /* architecture: a flag given must equal the checkpoint's value (else a
                           one-line error naming both); not given, the checkpoint's value */
    LOOM_LOAD_OVERRIDE, /* a flag given changes it; not given, the checkpoint's value */
    LOOM_LOAD_CKPT,     /* always the checkpoint's value (a flag given is not looked at) */
    LOOM_LOAD_FAMILY,   /* the family's load_check hook decides */
};

/* meta.json: how a setting with a key is written and read */
#define LOOM_META_OPTIONAL 0x1u   /* absent (older checkpoints): the row's default */
#define LOOM_META_IF_SET 0x2u     /* written only when not the row's default */
#define LOOM_META_WRITE_ONLY 0x4u /* written, not read (a value derived from the others) */
#define LOOM_META_POSITIVE 0x8u   /* read: must be >= 1 */

/* Hugging Face config.json: one plain key per dialect (a family's Hugging Face architectures
 * that name their keys alike: GPT's gpt2 and llama) */
#define LOOM_HF_DIALECTS 2
#define LOOM_HF_REQUIRED 0x1u  /* read: absent or null is an error */
#define LOOM_HF_READ_ONLY 0x2u /* read, not written */
struct loom_hf_key {
    const char *key; /* NULL: none in this dialect */
    unsigned flags;
    double dflt; /* read: absent (or null, or for a number not one): this value */
};

struct loom_setting {
    const char *name;   /* the row's name: the meta.json key, or the field's name */
    enum loom_setting_type type;
    size_t offset;      /* of the field in the family's configuration struct */
    const char *flag;   /* "--num-layers"; NULL: no flag (set by a hook or derived) */
    int negate;         /* a BOOL flag that sets 0 (--disable-bias-linear) */
    const char *names;  /* ENUM: "LayerNorm|RMSNorm", value i is the i-th name */
    double dflt;        /* the default (an ENUM's index, a BOOL's 0 or 1) */
    const char *meta;   /* meta.json's key in "model"; NULL: not kept in checkpoints */
    unsigned meta_flags;
    enum loom_setting_load load;
    struct loom_hf_key hf[LOOM_HF_DIALECTS];
    /* the start-up line's note when the value is not the default: a format taking the value
     * (%lld for INT, %g for DOUBLE, nothing for BOOL, %s for ENUM); NULL: none */
    const char *note;
    const char *help;
};

/* A model family's configuration: its name, its settings and the hooks for what they do not
 * say. Hooks may be NULL. */
struct loom_family_config_desc {
    const char *name;        /* "gpt": `loom train --model`'s value, meta.json's "family" */
    const char *ckpt_format; /* meta.json's "format" ("loom-gpt") */
    size_t config_size;      /* sizeof the configuration struct the offsets point into */
    const struct loom_setting *settings;
    int nsettings;
    /* a configuration not made from flags: the table's defaults and what the family adds */
    void (*defaults)(void *cfg);
    /* check against itself and the layout, derive what follows (padded vocabulary, ...) */
    enum loom_status (*finalize)(void *cfg, int tp, int pp);
    /* right after the flags are parsed: flags that are other names of a setting, or other
     * forms of it, folded in (and the flags they stand for marked given) */
    enum loom_status (*after_parse)(void *cfg, struct loom_flag *flags, int nflags);
    /* the checkpoint's configuration as the flags that give it (in place), before --load
     * compares it with the flags */
    void (*ckpt_as_flags)(void *saved);
    /* --load's checks and fill-in of the LOOM_LOAD_FAMILY settings, after the table's */
    enum loom_status (*load_check)(void *cfg, const void *saved, const struct loom_flag *flags,
                                   int nflags, const char *load);
    /* the settings derived by a rule from several flags, once the flags (and --load) are in;
     * errors for flags that go only with others */
    enum loom_status (*from_flags)(void *cfg, const struct loom_flag *flags, int nflags);
    /* meta.json's "model" keys that are not one row's (nested objects, resolved values): after
     * the table's */
    void (*meta_write)(const void *cfg, struct json_t *model);
    enum loom_status (*meta_read)(struct json_t *model, const char *file, void *cfg);
    /* the start-up line's notes that are not one row's, appended after the table's */
    void (*describe)(const void *cfg, char *buf, size_t cap);
    /* The family's samples for the trainer: split `split` (enum loom_split) of the dataset
     * `path` with the --split weights `weights`, n samples, as the training configuration c
     * says (its `model` the family's configuration); tok: the tokenizer data_tokenizer loaded
     * (NULL without that hook). NULL: the family reads no dataset. */
    enum loom_status (*open_source)(struct loom_sample_source *src,
                                    const struct loom_train_config *c,
                                    const struct loom_tokenizer *tok, int split, const char *path,
                                    const char *weights, int64_t n);
    /* the synthetic samples of split `split` (--mock-data); NULL: none */
    enum loom_status (*mock_source)(struct loom_sample_source *src,
                                    const struct loom_train_config *c, int split);
    /* the tokenizer the family's datasets read while they open (--tokenizer-type, --vocab-file,
     * --merge-file), loaded into *tok (a one-line error where the flags do not name one); NULL:
     * its datasets read none */
    enum loom_status (*data_tokenizer)(const struct loom_train_config *c,
                                       struct loom_tokenizer **tok);
};

/* ---- the families ---- */
/* The family named `name`, or NULL */
const struct loom_family_config_desc *loom_family_config_find(const char *name);
/* The family whose checkpoints' meta.json "format" is `format`, or NULL */
const struct loom_family_config_desc *loom_family_config_by_format(const char *format);
/* The default family (gpt), the number of families and family i */
const struct loom_family_config_desc *loom_family_config_default(void);
int loom_family_config_count(void);
const struct loom_family_config_desc *loom_family_config_at(int i);
/* "gpt|bert": the families' names, for --model's choices (static storage) */
const char *loom_family_config_names(void);

/* ---- the table's uses ---- */
/* The row named `name`, or NULL */
const struct loom_setting *loom_settings_find(const struct loom_family_config_desc *d,
                                              const char *name);
/* Every row's default into cfg (the rest of cfg untouched) */
void loom_settings_defaults(const struct loom_family_config_desc *d, void *cfg);
/* The flags of the rows that have one, pointing into cfg, in table order: out[cap]; returns the
 * count (at most d->nsettings) */
int loom_settings_flags(const struct loom_family_config_desc *d, void *cfg, struct loom_flag *out,
                        int cap);
/* Whether the flag `name` is in flags and was given */
int loom_settings_flag_given(const struct loom_flag *flags, int nflags, const char *name);
/* --load: cfg (made from flags) against the checkpoint's configuration `saved` (the family's
 * ckpt_as_flags applied to it here, on a copy): each row by its `load`, then the family's
 * load_check. Errors name the flag, its value, the checkpoint `load` and its value. */
enum loom_status loom_settings_apply_checkpoint(const struct loom_family_config_desc *d,
                                                void *cfg, const void *saved,
                                                const struct loom_flag *flags, int nflags,
                                                const char *load);
/* meta.json's "model" object: the rows with a key, then the family's meta_write */
void loom_settings_meta_write(const struct loom_family_config_desc *d, const void *cfg,
                              struct json_t *model);
/* From meta.json's "model" object into cfg (the family's defaults first), then the family's
 * meta_read; errors name the file and the key */
enum loom_status loom_settings_meta_read(const struct loom_family_config_desc *d,
                                         struct json_t *model, const char *file, void *cfg);
/* Hugging Face config.json: the rows with a key in `dialect`, read into cfg (the rest of cfg
 * untouched) or written into o */
enum loom_status loom_settings_hf_read(const struct loom_family_config_desc *d, int dialect,
                                       struct json_t *o, const char *file, void *cfg);
void loom_settings_hf_write(const struct loom_family_config_desc *d, int dialect,
                            const void *cfg, struct json_t *o);
/* The start-up line's notes (", norms zero-centred (1 + w)"...): the rows' notes of values that
 * are not the defaults, then the family's describe; appended to buf */
void loom_settings_describe(const struct loom_family_config_desc *d, const void *cfg, char *buf,
                            size_t cap);

#endif
