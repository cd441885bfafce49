#include "loom/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static int g_rank = 0, g_world = 1;

void loom_log_set_rank(int rank, int world) {
    g_rank = rank;
    g_world = world;
}
int loom_log_rank(void) { return g_rank; }
int loom_log_world(void) { return g_world; }

void loom_log_info(const char *fmt, ...) {
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

void loom_log_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (g_world > 1)
        fprintf(stderr, "loom: warning: [rank %d] ", g_rank);
    else
        fputs("loom: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

double loom_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
