/* Status codes, error reporting and assertions.
 *
 * Two error paths (see DESIGN.md):
 *  - library functions return enum loom_status; LOOM_CHECK propagates a failure upwards and
 *    records file:line; loom_fail() sets the one-line message that the user finally sees.
 *  - broken invariants use LOOM_ASSERT -> loom_abort(), which aborts every rank of a job.
 * A user's mistake (bad flag, bad file) is never an assert: it is loom_fail(LOOM_ERR_INVALID_ARG,
 * "--flag: what was wrong; what is valid") returned up to main, which prints it and exits 1.
 */
#ifndef LOOM_STATUS_H
#define LOOM_STATUS_H

#include <stdarg.h>
#include <stdio.h>

enum loom_status {
    LOOM_OK = 0,
    LOOM_ERR_INVALID_ARG, /* user input: flag, value, configuration */
    LOOM_ERR_IO,          /* open/read/write/rename failed */
    LOOM_ERR_FORMAT,      /* a file's content is malformed, truncated or of the wrong type */
    LOOM_ERR_OOM,         /* allocation failed */
    LOOM_ERR_UNSUPPORTED, /* op or feature not available on this backend/build */
    LOOM_ERR_COMM,        /* communication failure */
    LOOM_ERR_INTERNAL,    /* should not happen */
    LOOM_STATUS_COUNT
};

const char *loom_status_str(enum loom_status s);

/* Record a one-line error message (printf-style) and return `s`. The message is what the user
 * sees; keep it to one line naming the flag, file or value and what would be valid. */
enum loom_status loom_fail(enum loom_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The last message recorded by loom_fail on this thread ("" if none). */
const char *loom_last_error(void);
/* Append a propagation frame (used by LOOM_CHECK; shown with LOOM_TRACE=1). */
void loom_trace_push(const char *file, int line, const char *expr);
/* Clear the recorded message and trace. */
void loom_clear_error(void);

#define LOOM_CHECK(expr)                                                                      \
    do {                                                                                      \
        enum loom_status loom_s_ = (expr);                                                    \
        if (loom_s_ != LOOM_OK) {                                                             \
            loom_trace_push(__FILE__, __LINE__, #expr);                                       \
            return loom_s_;                                                                   \
        }                                                                                     \
    } while (0)

/* Abort the whole job (every rank, through the hook installed by the comm layer). */
_Noreturn void loom_abort(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Installed by the MPI comm backend so that loom_abort ends every rank. */
void loom_set_abort_hook(void (*hook)(int code));

#define LOOM_ASSERT(cond)                                                                     \
    do {                                                                                      \
        if (!(cond)) loom_abort(__FILE__, __LINE__, "assertion failed: %s", #cond);           \
    } while (0)

/* Print "loom: error: <last message>" on stderr (prefixed with the rank in multi-rank runs). */
void loom_print_error(void);

#endif
