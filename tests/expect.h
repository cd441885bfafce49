/* Expectation checks for the single-process test programs. Header-only; include it once per
 * test executable.
 *
 *   expect_failures                       the number of failed expectations so far
 *   EXPECT(cond)                          on failure prints "FAIL file:line: cond" to stderr
 *   EXPECTF(cond, fmt, ...)               the same with a printf-style explanation appended
 *   EXPECT_OK(expr)                       expr (an enum loom_status call) must return LOOM_OK;
 *                                         on failure prints it with loom_last_error()
 *   EXPECT_FAIL(expr, status, needle, ...)
 *                                         clears the error, runs expr and requires `status` and
 *                                         a message (loom_last_error()) containing every needle
 *   expect_finish(name)                   prints "name: N failure(s)" to stderr when there were
 *                                         failures; returns the exit status (0 or 1)
 * Every failed expectation is counted in expect_failures.
 */
#ifndef LOOM_TESTS_EXPECT_H
#define LOOM_TESTS_EXPECT_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "loom/status.h"

static int expect_failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
            expect_failures++;                                                                     \
        }                                                                                          \
    } while (0)

/* The format string is the first of the variable arguments, so that it may come alone. */
#define EXPECTF(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            expect_failures++;                                                                     \
        }                                                                                          \
    } while (0)

#define EXPECT_OK(expr)                                                                            \
    do {                                                                                           \
        enum loom_status expect_s_ = (expr);                                                       \
        if (expect_s_ != LOOM_OK) {                                                                \
            fprintf(stderr, "FAIL %s:%d: %s: status %d: %s\n", __FILE__, __LINE__, #expr,          \
                    (int)expect_s_, loom_last_error());                                            \
            expect_failures++;                                                                     \
        }                                                                                          \
    } while (0)

/* `got` must equal `want` and the current error message contain every string of the
 * NULL-terminated list `needles`. */
static inline void expect_fail_(const char *file, int line, const char *text, enum loom_status got,
                                enum loom_status want, const char *const *needles) {
    bool ok = got == want;
    for (const char *const *n = needles; *n; n++)
        if (!strstr(loom_last_error(), *n)) ok = false;
    if (ok) return;
    fprintf(stderr, "FAIL %s:%d: %s: got status %d, message '%s'; want status %d and", file, line,
            text, (int)got, loom_last_error(), (int)want);
    for (const char *const *n = needles; *n; n++)
        fprintf(stderr, " '%s'", *n);
    fputc('\n', stderr);
    expect_failures++;
}

/* The needles are one or more strings. */
#define EXPECT_FAIL(expr, status, ...)                                                             \
    do {                                                                                           \
        loom_clear_error();                                                                        \
        enum loom_status expect_s_ = (expr);                                                       \
        expect_fail_(__FILE__, __LINE__, #expr, expect_s_, (status),                               \
                     (const char *const[]){__VA_ARGS__, NULL});                                    \
    } while (0)

static inline int expect_finish(const char *name) {
    if (!expect_failures) return 0;
    fprintf(stderr, "%s: %d failure(s)\n", name, expect_failures);
    return 1;
}

#endif
