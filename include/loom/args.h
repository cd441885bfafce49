/* Table-driven command-line flags, shared by every subcommand.
 *
 * A subcommand declares a table of struct loom_flag pointing at variables that already hold the
 * defaults; loom_flags_parse fills them from argv and marks which were given; --help prints
 * every flag with its default (the value the variable held before parsing). A flag given twice
 * keeps its last value (so a base command can be overridden by appending). Errors are one line
 * naming the flag: unknown flag, missing value, value of the wrong type, value not a choice.
 */
#ifndef LOOM_ARGS_H
#define LOOM_ARGS_H

#include <stdint.h>

#include "loom/status.h"

enum loom_flag_type {
    LOOM_FLAG_INT,    /* int64_t *        */
    LOOM_FLAG_FLOAT,  /* double *         */
    LOOM_FLAG_STR,    /* const char **    */
    LOOM_FLAG_CHOICE, /* const char **, value must be one of `choices` ("a|b|c") */
    LOOM_FLAG_BOOL,   /* int *, takes no value, sets 1 */
    LOOM_FLAG_LIST,   /* const char **, takes every following value up to the next --flag,
                         joined with single spaces (for --data-path W1 P1 W2 P2) */
    LOOM_FLAG_CLEAR,  /* int *, takes no value, sets 0 (a negative switch such as
                         --disable-bias-linear; --help shows it on when the int is 0) */
    LOOM_FLAG_ENUM,   /* int *, value must be one of `choices` ("a|b|c"): sets its index */
    LOOM_FLAG_TEXT,   /* char[LOOM_FLAG_TEXT_LEN], the value copied in (a longer one is an
                         error) */
};

struct loom_flag {
    const char *name; /* "--num-layers" */
    enum loom_flag_type type;
    void *ptr;
    const char *help;
    const char *choices; /* LOOM_FLAG_CHOICE and LOOM_FLAG_ENUM only */
    int given;           /* set by loom_flags_parse */
};
#define LOOM_FLAG_TEXT_LEN 128

/* Parse argv[first..argc). Sets *help when --help/-h is present (then nothing else is checked). */
enum loom_status loom_flags_parse(struct loom_flag *flags, int nflags, int argc, char **argv,
                                  int first, int *help);
/* Print usage and each flag with its help and current value as the default. */
void loom_flags_print_help(const char *usage, const struct loom_flag *flags, int nflags);
/* The entry for `name`, or NULL. */
struct loom_flag *loom_flags_find(struct loom_flag *flags, int nflags, const char *name);

#endif
