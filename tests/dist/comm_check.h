/* Expectation macros for the multi-rank test programs (tests/dist/..._check.c): failures are
 * printed with the rank, counted per rank and summed over the world at the end. */
#ifndef LOOM_TEST_COMM_CHECK_H
#define LOOM_TEST_COMM_CHECK_H

#include <stdio.h>
#include <string.h>

#include "loom/comm.h"
#include "loom/log.h"
#include "loom/status.h"

static int g_failures;

#define EXPECT(cond)                                                                          \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "[rank %d] %s:%d: expectation failed: %s\n", loom_log_rank(),    \
                    __FILE__, __LINE__, #cond);                                               \
            g_failures++;                                                                     \
        }                                                                                     \
    } while (0)

#define EXPECT_OK(expr)                                                                       \
    do {                                                                                      \
        enum loom_status s_ = (expr);                                                         \
        if (s_ != LOOM_OK) {                                                                  \
            fprintf(stderr, "[rank %d] %s:%d: %s failed: %s\n", loom_log_rank(), __FILE__,   \
                    __LINE__, #expr, loom_last_error());                                      \
            g_failures++;                                                                     \
        }                                                                                     \
    } while (0)

/* expr must fail with status st and a message containing `needle`. */
#define EXPECT_FAIL(expr, st, needle)                                                         \
    do {                                                                                      \
        loom_clear_error();                                                                   \
        enum loom_status s_ = (expr);                                                         \
        if (s_ != (st) || !strstr(loom_last_error(), (needle))) {                            \
            fprintf(stderr, "[rank %d] %s:%d: %s gave status %d '%s', expected %d with '%s'\n", \
                    loom_log_rank(), __FILE__, __LINE__, #expr, (int)s_, loom_last_error(),   \
                    (int)(st), (needle));                                                     \
            g_failures++;                                                                     \
        }                                                                                     \
    } while (0)

/* Sum the failures over `world`; rank 0 prints the verdict. Returns the exit status. */
static inline int check_finish(struct loom_comm *world, const char *name) {
    int total = g_failures;
    if (loom_comm_allreduce(world, &total, 1, LOOM_DTYPE_I32, LOOM_REDOP_SUM) != LOOM_OK) {
        fprintf(stderr, "%s: final allreduce failed: %s\n", name, loom_last_error());
        return 1;
    }
    if (loom_comm_rank(world) == 0) {
        if (total)
            fprintf(stderr, "%s: %d failure(s) over %d ranks\n", name, total,
                    loom_comm_size(world));
        else
            printf("%s: ok (%d ranks)\n", name, loom_comm_size(world));
        fflush(stdout);
    }
    return total ? 1 : 0;
}

#endif
