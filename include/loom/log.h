/* Logging. Info lines go to stdout from rank 0 only (so a 64-rank job prints one log);
 * warnings and errors go to stderr from every rank, prefixed with the rank when world > 1. */
#ifndef LOOM_LOG_H
#define LOOM_LOG_H

void loom_log_set_rank(int rank, int world);
int loom_log_rank(void);
int loom_log_world(void);
void loom_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void loom_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Monotonic wall clock in seconds. */
double loom_time_s(void);

#endif
