/* The start-up agreement of the ranks a launcher started (loom_comm_agree, include/loom/comm.h).
 *
 * Every rank brings its result so far: an error message, or a record of what must be alike on
 * every rank (lines "KEY\tVALUE"). Rank 0 gathers them and decides (loom_comm_agree_verdict): any
 * error ends the job with that error, naming the ranks that met it unless all did; otherwise the
 * first key whose values differ ends it, naming each value and its ranks. The exchange is MPI's
 * own, on a private communicator, before any group of loom's exists (so no volume counter moves,
 * and no rank is left waiting in a collective the failing rank never joins).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "comm/comm_impl.h"
#include "loom/comm.h"

#define SHOWN_VALUE 160 /* the longest value quoted in a message (longer ones end with "...") */

/* Appends to out[cap] (always terminated) */
__attribute__((format(printf, 3, 4))) static void append(char *out, size_t cap, const char *fmt, ...) {
    size_t n = strlen(out);
    if (n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + n, cap - n, fmt, ap);
    va_end(ap);
}

/* "rank 3", "ranks 0-2", "ranks 0, 2, 5-7": the ranks r with in[r] != 0 */
static void append_ranks(char *out, size_t cap, const unsigned char *in, int n) {
    int count = 0;
    for (int r = 0; r < n; r++) count += in[r] != 0;
    append(out, cap, count == 1 ? "rank " : "ranks ");
    int first = 1;
    for (int r = 0; r < n; r++) {
        if (!in[r]) continue;
        int e = r;
        while (e + 1 < n && in[e + 1]) e++;
        append(out, cap, "%s%d", first ? "" : ", ", r);
        if (e > r) append(out, cap, "-%d", e);
        first = 0;
        r = e;
    }
}

/* The value of line `key` (klen bytes) in record rec: its start and length, or NULL */
static const char *find_value(const char *rec, const char *key, size_t klen, size_t *vlen) {
    for (const char *p = rec; p && *p;) {
        const char *eol = strchr(p, '\n');
        const char *end = eol ? eol : p + strlen(p);
        const char *tab = memchr(p, '\t', (size_t)(end - p));
        if (tab && (size_t)(tab - p) == klen && memcmp(p, key, klen) == 0) {
            *vlen = (size_t)(end - tab - 1);
            return tab + 1;
        }
        p = eol ? eol + 1 : NULL;
    }
    return NULL;
}

static int same_value(const char *a, size_t alen, const char *b, size_t blen) {
    if (!a || !b) return a == b;
    return alen == blen && memcmp(a, b, alen) == 0;
}

static void append_value(char *out, size_t cap, const char *v, size_t len) {
    if (!v) {
        append(out, cap, "absent");
        return;
    }
    if (len > SHOWN_VALUE) append(out, cap, "%.*s...", SHOWN_VALUE, v);
    else append(out, cap, "%.*s", (int)len, v);
}

/* The message for key (klen bytes) when its values differ across the n records; 0 when they
 * agree */
static int compare_key(const char *const *recs, int n, const char *key, size_t klen, char *out,
                       size_t cap) {
    const char **val = malloc((size_t)n * sizeof *val);
    size_t *len = malloc((size_t)n * sizeof *len);
    unsigned char *done = calloc((size_t)n, 1), *group = calloc((size_t)n, 1);
    int differ = 0;
    if (!val || !len || !done || !group) {
        snprintf(out, cap, "start-up agreement: out of memory");
        differ = 1;
        goto out;
    }
    for (int r = 0; r < n; r++) {
        len[r] = 0;
        val[r] = find_value(recs[r], key, klen, &len[r]);
        if (r && !same_value(val[r], len[r], val[0], len[0])) differ = 1;
    }
    if (!differ) goto out;
    snprintf(out, cap, "ranks disagree on %.*s: ", (int)klen, key);
    int groups = 0;
    for (int r = 0; r < n; r++) {
        if (done[r]) continue;
        memset(group, 0, (size_t)n);
        for (int q = r; q < n; q++)
            if (!done[q] && same_value(val[q], len[q], val[r], len[r])) group[q] = done[q] = 1;
        append(out, cap, "%s", groups++ ? ", " : "");
        append_value(out, cap, val[r], len[r]);
        append(out, cap, " on ");
        append_ranks(out, cap, group, n);
    }
out:
    free(val);
    free(len);
    free(done);
    free(group);
    return differ;
}

/* Every key of record rec in order: compare it across the records */
static int compare_keys_of(const char *const *recs, int n, const char *rec, char *out,
                           size_t cap) {
    for (const char *p = rec; p && *p;) {
        const char *eol = strchr(p, '\n');
        const char *end = eol ? eol : p + strlen(p);
        const char *tab = memchr(p, '\t', (size_t)(end - p));
        size_t klen = (size_t)((tab ? tab : end) - p);
        if (klen && compare_key(recs, n, p, klen, out, cap)) return 1;
        p = eol ? eol + 1 : NULL;
    }
    return 0;
}

int loom_comm_agree_verdict(int n, const int *failed, const char *const *texts, char *out,
                            size_t cap) {
    if (cap) out[0] = 0;
    if (n < 1 || cap < 2) return 0;
    unsigned char *group = calloc((size_t)n, 1);
    if (!group) {
        snprintf(out, cap, "start-up agreement: out of memory");
        return 1;
    }
    int verdict = 0;
    /* errors first: the first failing rank's, with the ranks that met the same one */
    int first = -1, nfailed = 0;
    for (int r = 0; r < n; r++)
        if (failed[r]) {
            nfailed++;
            if (first < 0) first = r;
        }
    if (first >= 0) {
        int same = 0;
        for (int r = 0; r < n; r++)
            if (failed[r] && strcmp(texts[r], texts[first]) == 0) group[r] = 1, same++;
        const char *msg = texts[first][0] ? texts[first] : "unknown error";
        if (same == n) {
            snprintf(out, cap, "%s", msg);
        } else {
            append(out, cap, "[");
            append_ranks(out, cap, group, n);
            append(out, cap, "] %s", msg);
            if (nfailed > same) {
                for (int r = 0; r < n; r++) group[r] = failed[r] && !group[r];
                append(out, cap, " (and other errors on ");
                append_ranks(out, cap, group, n);
                append(out, cap, ")");
            }
        }
        verdict = 1;
    } else {
        /* records: the keys in rank 0's order, then those that only other ranks have; a record
         * equal to rank 0's needs no look at its keys */
        for (int r = 1; r < n && !verdict; r++) {
            if (strcmp(texts[r], texts[0]) == 0) continue;
            verdict = compare_keys_of(texts, n, texts[0], out, cap) ||
                      compare_keys_of(texts, n, texts[r], out, cap);
            if (!verdict) { /* the same lines in another order or with other line ends */
                verdict = 1;
                snprintf(out, cap, "ranks disagree on their start-up records (rank 0 and rank %d)",
                         r);
            }
        }
    }
    free(group);
    return verdict;
}

#ifdef LOOM_HAVE_CUDA
/* What the nccl and mpi-staged worlds do before MPI starts: this rank's GPU, the local rank's
 * (modulo the devices), so that MPI meets the device the rank will use. No device: nothing (the
 * world reports it). */
static void select_local_device(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        cudaGetLastError();
        return;
    }
    if (cudaSetDevice(loom_comm_local_rank() % ndev) != cudaSuccess) cudaGetLastError();
}
#endif

enum loom_status loom_comm_agree(enum loom_status status, const char *record, int cuda,
                                 int *argc, char ***argv) {
#ifdef LOOM_HAVE_MPI
    if (!loom_comm_launched()) return status;
#ifdef LOOM_HAVE_CUDA
    if (cuda && status == LOOM_OK) select_local_device();
#endif
    (void)cuda;
    /* this rank's message travels in the exchange; the status says how it ends */
    char mine[1024];
    if (status != LOOM_OK) snprintf(mine, sizeof mine, "%s", loom_last_error());
    char verdict[1024];
    int failed = 0;
    enum loom_status s = loom_comm_mpi_agree(status != LOOM_OK, status != LOOM_OK ? mine : record,
                                             &failed, verdict, sizeof verdict, argc, argv);
    if (s != LOOM_OK) return s;
    if (!failed) return status;
    /* rank 0 holds the verdict; the others keep their own message, which they do not print */
    if (verdict[0]) return loom_fail(LOOM_ERR_INVALID_ARG, "%s", verdict);
    if (status != LOOM_OK) return loom_fail(status, "%s", mine);
    return loom_fail(LOOM_ERR_INVALID_ARG, "another rank failed at start-up (rank 0 reports it)");
#else
    (void)record;
    (void)cuda;
    (void)argc;
    (void)argv;
    return status;
#endif
}
