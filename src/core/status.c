#include "loom/status.h"

#include <stdlib.h>
#include <string.h>

#include "loom/log.h"

static _Thread_local char g_msg[1024];
static _Thread_local char g_trace[2048];
static void (*g_abort_hook)(int code);

const char *loom_status_str(enum loom_status s) {
    static const char *names[] = {
        [LOOM_OK] = "ok",
        [LOOM_ERR_INVALID_ARG] = "invalid argument",
        [LOOM_ERR_IO] = "i/o error",
        [LOOM_ERR_FORMAT] = "bad file format",
        [LOOM_ERR_OOM] = "out of memory",
        [LOOM_ERR_UNSUPPORTED] = "not supported",
        [LOOM_ERR_COMM] = "communication error",
        [LOOM_ERR_INTERNAL] = "internal error",
    };
    _Static_assert(sizeof(names) / sizeof(names[0]) == LOOM_STATUS_COUNT, "status names");
    return (s >= 0 && s < LOOM_STATUS_COUNT) ? names[s] : "unknown status";
}

enum loom_status loom_fail(enum loom_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char raw[sizeof g_msg];
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* one line, printable: control bytes (from file names or file contents) as \xNN */
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && o + 5 < sizeof g_msg; p++) {
        if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(g_msg + o, sizeof g_msg - o, "\\x%02x", *p);
        else
            g_msg[o++] = (char)*p;
    }
    g_msg[o] = 0;
    g_trace[0] = 0;
    return s;
}

const char *loom_last_error(void) { return g_msg; }

void loom_trace_push(const char *file, int line, const char *expr) {
    size_t n = strlen(g_trace);
    if (n + 8 < sizeof g_trace)
        snprintf(g_trace + n, sizeof g_trace - n, "  at %s:%d: %s\n", file, line, expr);
}

void loom_clear_error(void) {
    g_msg[0] = 0;
    g_trace[0] = 0;
}

void loom_print_error(void) {
    const char *m = g_msg[0] ? g_msg : "unknown error";
    if (loom_log_world() > 1)
        fprintf(stderr, "loom: error: [rank %d] %s\n", loom_log_rank(), m);
    else
        fprintf(stderr, "loom: error: %s\n", m);
    const char *t = getenv("LOOM_TRACE");
    if (t && *t == '1' && g_trace[0]) fputs(g_trace, stderr);
    fflush(stderr);
}

void loom_set_abort_hook(void (*hook)(int code)) { g_abort_hook = hook; }

_Noreturn void loom_abort(const char *file, int line, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "loom: internal error at %s:%d (rank %d): %s\n", file, line, loom_log_rank(),
            buf);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook(2);
    abort();
}
