/* The pipeline schedules themselves (loom_pipeline_schedule, src/parallel/pipeline.c), without a
 * model: for p stages, v virtual chunks and m micro-batches,
 *   - every rank's list holds F(c, k) and B(c, k) exactly once for each chunk c and micro-batch k
 *     (forward-only: each F once, no B), and a micro-batch's B after its F;
 *   - the lists of all ranks, run together with the pipeline's dependencies (virtual stage
 *     s = c*p + r: F(s, k) needs F(s - 1, k), B(s, k) needs F(s, k) and B(s + 1, k); a rank
 *     runs its list in order and waits only for those), finish: no deadlock;
 *   - 1F1B (v = 1) starts with p - r - 1 warm-up forwards (PipeDream-Flush) before its
 *     alternation and keeps at most p - r
 *     micro-batches in flight on rank r (its memory bound), and hand-written lists for p = 2,
 *     m = 3 match exactly;
 *   - the interleaved schedule refuses m not a multiple of p (a one-line error naming the flag).
 */
#include <stdlib.h>

#include "expect.h"
#include "loom/pipeline.h"

static int count_warmup(const struct loom_pipe_op *o, int64_t n) {
    int w = 0;
    while (w < n && !o[w].backward) w++;
    return w;
}

/* Every op once, B after F */
static void check_list(const struct loom_pipe_op *o, int64_t n, int v, int64_t m, int fwd_only,
                       const char *what) {
    const size_t cnt = (size_t)v * (size_t)(m > 0 ? m : 1);
    int *fpos = malloc(sizeof(int) * cnt), *bpos = malloc(sizeof(int) * cnt);
    if (!fpos || !bpos) abort();
    for (int64_t i = 0; i < v * m; i++) fpos[i] = bpos[i] = -1;
    int dup = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t id = o[i].micro * v + o[i].chunk;
        int *pos = o[i].backward ? bpos : fpos;
        if (pos[id] >= 0) dup++;
        pos[id] = (int)i;
    }
    EXPECTF(n == (fwd_only ? 1 : 2) * v * m, "%s: %lld ops\n", what, (long long)n);
    EXPECTF(dup == 0, "%s: %d repeated ops\n", what, dup);
    int order = 0, missing = 0;
    for (int64_t i = 0; i < v * m; i++) {
        missing += fpos[i] < 0 || (!fwd_only && bpos[i] < 0);
        order += !fwd_only && bpos[i] >= 0 && bpos[i] < fpos[i];
    }
    EXPECTF(missing == 0 && order == 0, "%s: %d missing, %d B before F\n", what, missing, order);
    free(fpos);
    free(bpos);
}

/* Run all ranks' lists together under the dependencies; 1 if every op ran */
static int simulate(int p, int v, int64_t m, int fwd_only) {
    struct loom_pipe_op *ops[16];
    int64_t nops[16], next[16] = {0};
    const int S = p * v;
    if (S <= 0 || S > 64 || m <= 0) return 0;
    const size_t cells = (size_t)S * (size_t)(m > 0 ? m : 1);
    char *fdone = calloc(cells, 1), *bdone = calloc(cells, 1);
    if (!fdone || !bdone) abort();
    for (int r = 0; r < p; r++)
        if (loom_pipeline_schedule(p, r, v, m, fwd_only, &ops[r], &nops[r]) != LOOM_OK) return 0;
    int progress = 1, done;
    while (progress) {
        progress = 0;
        for (int r = 0; r < p; r++) {
            if (next[r] == nops[r]) continue;
            const struct loom_pipe_op *o = &ops[r][next[r]];
            const int s = o->chunk * p + r;
            const int64_t k = o->micro;
            int ready;
            if (!o->backward) ready = s == 0 || fdone[(s - 1) * m + k];
            else ready = fdone[s * m + k] && (s == S - 1 || bdone[(s + 1) * m + k]);
            if (!ready) continue;
            (o->backward ? bdone : fdone)[s * m + k] = 1;
            next[r]++;
            progress = 1;
        }
    }
    done = 1;
    for (int r = 0; r < p; r++) {
        done &= next[r] == nops[r];
        free(ops[r]);
    }
    free(fdone);
    free(bdone);
    return done;
}

int main(void) {
    const int ps[] = {1, 2, 3, 4, 8};
    for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++)
        for (int v = 1; v <= 3; v++)
            for (int64_t m = 1; m <= 17; m++) {
                const int p = ps[a];
                if (v > 1 && m % p) continue;
                for (int fwd = 0; fwd <= 1; fwd++) {
                    for (int r = 0; r < p; r++) {
                        struct loom_pipe_op *o;
                        int64_t n;
                        char what[96];
                        snprintf(what, sizeof what, "p %d r %d v %d m %lld%s", p, r, v,
                                 (long long)m, fwd ? " forward-only" : "");
                        EXPECT_OK(loom_pipeline_schedule(p, r, v, m, fwd, &o, &n));
                        check_list(o, n, v, m, fwd, what);
                        if (v == 1 && !fwd) {
                            /* the warm-up forwards, then the steady state's first forward */
                            const int64_t w = p - r - 1 < m ? p - r : m;
                            EXPECTF(count_warmup(o, n) == w, "%s: warm-up %d\n", what,
                                    count_warmup(o, n));
                            const int64_t bound = p - r < m ? p - r : m;
                            EXPECTF(loom_pipeline_max_in_flight(o, n, m) <= bound,
                                    "%s: %d in flight\n", what,
                                    loom_pipeline_max_in_flight(o, n, m));
                        }
                        free(o);
                    }
                    EXPECTF(simulate(p, v, m, fwd), "p %d v %d m %lld%s deadlocks\n", p, v,
                            (long long)m, fwd ? " forward-only" : "");
                }
            }
    /* 1F1B, p = 2, m = 3, by hand: rank 0 F0 F1 B0 F2 B1 B2; rank 1 F0 B0 F1 B1 F2 B2 */
    const struct loom_pipe_op want0[] = {{0, 0, 0}, {0, 0, 1}, {1, 0, 0}, {0, 0, 2}, {1, 0, 1}, {1, 0, 2}};
    const struct loom_pipe_op want1[] = {{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1}, {0, 0, 2}, {1, 0, 2}};
    for (int r = 0; r < 2; r++) {
        struct loom_pipe_op *o;
        int64_t n;
        EXPECT_OK(loom_pipeline_schedule(2, r, 1, 3, 0, &o, &n));
        const struct loom_pipe_op *w = r ? want1 : want0;
        int same = n == 6;
        for (int64_t i = 0; same && i < n; i++)
            same = o[i].backward == w[i].backward && o[i].chunk == w[i].chunk &&
                   o[i].micro == w[i].micro;
        EXPECTF(same, "rank %d's 1F1B list for p 2, m 3\n", r);
        free(o);
    }
    struct loom_pipe_op *o = NULL;
    int64_t n;
    EXPECT_FAIL(loom_pipeline_schedule(4, 0, 2, 6, 0, &o, &n), LOOM_ERR_INVALID_ARG,
                "--pipeline-model-parallel-size 4", "multiple");
    return expect_finish("test_pipeline_schedule");
}
