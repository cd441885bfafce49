/* Tests of the CPU attention and rotary-embedding ops (src/backend/cpu/attention.c).
 *
 * Oracles, all written here independently of the implementation:
 *  - a naive double-precision attention (full T x T softmax, explicit dropout mask from
 *    loom_rng_keep) for forward (out, lse) and backward (dqkv, with sum_j P_ij dP_ij computed
 *    directly rather than through dout . out);
 *  - central finite differences of the op's own forward for the backward;
 *  - a naive rotary embedding (angle computed per element with pow in double), inverse(rope(x))
 *    == x, and finite differences for the rope backward; per-token positions (restarting at
 *    each document) against the same formula;
 *  - document masks (loom_attn.doc_start): the naive attention with the mask applied element by
 *    element, and each document of a packed sample against that document run alone;
 *  - key ends (loom_attn.key_end): padding masks (bidirectional and causal, lengths from 1 to T),
 *    bidirectional document masks [doc_start, key_end), left padding (doc_start alone, without
 *    the causal mask), rows that see no key (out 0, lse -inf, zero gradients, no NaN), key rows
 *    that no query sees (dk = dv = 0), the padded keys' values changing no bit of the results,
 *    and a padded sample against its real tokens run alone;
 *  - dropout-mask consistency across tensor-parallel head slices and data-parallel samples;
 *  - bit-identical results run to run and across thread counts.
 *
 * Modes (used by test_attention_torch.sh and for timing):
 *   test_attention                 run the tests
 *   test_attention dump DIR        write cases for the PyTorch cross-check into DIR
 *   test_attention bench B T NH NKV HS causal [iters]   time forward + backward
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "expect.h"
#include "loom/backend.h"
#include "loom/rng.h"

static struct loom_backend *g_be;

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}
#define ALLOCF(n) ((float *)xmalloc((size_t)(n) * sizeof(float)))
#define ALLOCD(n) ((double *)xmalloc((size_t)(n) * sizeof(double)))

/* n floats ending exactly where an inaccessible page begins: reading or writing past the end
 * of a tensor faults instead of passing unnoticed. Free with guarded_free(p, n). */
static float *guarded_alloc(int64_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (size_t)n * sizeof(float);
    const size_t span = (bytes + page - 1) / page * page;
    char *base = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || mprotect(base + span, page, PROT_NONE) != 0) {
        perror("guarded_alloc");
        exit(2);
    }
    return (float *)(base + span - bytes);
}
static void guarded_free(float *p, int64_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (size_t)n * sizeof(float);
    const size_t span = (bytes + page - 1) / page * page;
    munmap((char *)p + bytes - span, span + page);
}

static void fill_normal(float *x, int64_t n, uint64_t purpose, float sd) {
    for (int64_t i = 0; i < n; i++) x[i] = sd * loom_rng_normal(1234, purpose, (uint64_t)i);
}
static void fill_nan(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
}

/* Every |got - ref| <= atol + rtol |ref| (NaN fails). Prints the worst element. */
static int check_close(const char *what, const float *got, const double *ref, int64_t n,
                       double atol, double rtol) {
    double worst = -1.0, wg = 0, wr = 0;
    int64_t wi = -1, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        /* equal values pass (-inf, the lse of a row that sees no key, included) */
        double d = (double)got[i] == ref[i] ? 0.0 : fabs((double)got[i] - ref[i]);
        double lim = atol + rtol * fabs(ref[i]);
        double r = d / lim;
        if (!(d <= lim)) bad++;
        if (!(r <= worst)) {
            worst = r;
            wi = i;
            wg = got[i];
            wr = ref[i];
        }
    }
    if (getenv("LOOM_TEST_VERBOSE"))
        printf("  %-40s worst |err|/limit %.3f\n", what, worst);
    if (bad) {
        fprintf(stderr, "  %s: %lld of %lld elements off; worst [%lld] got %.9g want %.9g\n", what,
                (long long)bad, (long long)n, (long long)wi, wg, wr);
        expect_failures++;
        return 0;
    }
    return 1;
}

static double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* ------------------------------------------------------------------------------------------ */
/* naive reference                                                                            */

static int64_t row_len(const struct loom_attn *a) { return (a->NH + 2 * a->NKV) * a->HS; }
static int64_t col_q(const struct loom_attn *a, int64_t h) {
    int64_t Q = a->NH / a->NKV;
    return ((h / Q) * (Q + 2) + h % Q) * a->HS;
}
static int64_t col_k(const struct loom_attn *a, int64_t h) {
    int64_t Q = a->NH / a->NKV;
    return ((h / Q) * (Q + 2) + Q) * a->HS;
}
static int64_t col_v(const struct loom_attn *a, int64_t h) { return col_k(a, h) + a->HS; }

/* dropout multiplier M/(1-p) of one probability */
static double ref_mask(const struct loom_attn *a, int64_t b, int64_t h, int64_t tq, int64_t tk) {
    if (!(a->dropout_p > 0.0f)) return 1.0;
    uint64_t idx = (uint64_t)((((a->sample0 + b) * a->NH_global + a->head0 + h) * a->T + tq) *
                                  a->T + tk);
    return loom_rng_keep(a->seed, a->key, idx, a->dropout_p) ? 1.0 / (1.0 - (double)a->dropout_p)
                                                              : 0.0;
}

/* P[tq][tk] (softmax of the masked scaled scores) for one (b, h); returns lse per row */
static void ref_probs(double *P, double *lse, const float *qkv, const struct loom_attn *a,
                      int64_t b, int64_t h) {
    const int64_t T = a->T, R = row_len(a), HS = a->HS;
    for (int64_t i = 0; i < T; i++) {
        const float *q = qkv + (b * T + i) * R + col_q(a, h);
        double m = -INFINITY;
        const int64_t first = a->doc_start ? a->doc_start[b * T + i] : 0; /* document mask */
        const int64_t end = a->key_end ? a->key_end[b * T + i] : T;           /* key end */
        for (int64_t j = 0; j < T; j++) {
            double s = -INFINITY;
            if ((!a->causal || j <= i) && j >= first && j < end) {
                const float *k = qkv + (b * T + j) * R + col_k(a, h);
                s = 0;
                for (int64_t d = 0; d < HS; d++) s += (double)q[d] * (double)k[d];
                s *= (double)a->scale;
            }
            P[i * T + j] = s;
            if (s > m) m = s;
        }
        if (m == -INFINITY) { /* no key: P 0, lse -inf */
            for (int64_t j = 0; j < T; j++) P[i * T + j] = 0.0;
            lse[i] = -INFINITY;
            continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < T; j++) sum += exp(P[i * T + j] - m);
        for (int64_t j = 0; j < T; j++) P[i * T + j] = exp(P[i * T + j] - m) / sum;
        lse[i] = m + log(sum);
    }
}

static void ref_forward(double *out, double *lse, const float *qkv, const struct loom_attn *a) {
    const int64_t B = a->B, T = a->T, NH = a->NH, HS = a->HS, R = row_len(a);
    double *P = ALLOCD(T * T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            ref_probs(P, lse + (b * NH + h) * T, qkv, a, b, h);
            for (int64_t i = 0; i < T; i++)
                for (int64_t d = 0; d < HS; d++) {
                    double s = 0;
                    for (int64_t j = 0; j < T; j++)
                        s += P[i * T + j] * ref_mask(a, b, h, i, j) *
                             (double)qkv[(b * T + j) * R + col_v(a, h) + d];
                    out[(b * T + i) * NH * HS + h * HS + d] = s;
                }
        }
    free(P);
}

static void ref_backward(double *dqkv, const float *dout, const float *qkv,
                         const struct loom_attn *a) {
    const int64_t B = a->B, T = a->T, NH = a->NH, HS = a->HS, R = row_len(a), C = NH * HS;
    double *P = ALLOCD(T * T), *dS = ALLOCD(T * T), *lse = ALLOCD(T);
    memset(dqkv, 0, (size_t)(B * T * R) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++) {
            ref_probs(P, lse, qkv, a, b, h);
            for (int64_t i = 0; i < T; i++) {
                const float *dO = dout + (b * T + i) * C + h * HS;
                double rowdot = 0;
                for (int64_t j = 0; j < T; j++) {
                    const float *v = qkv + (b * T + j) * R + col_v(a, h);
                    double dPd = 0;
                    for (int64_t d = 0; d < HS; d++) dPd += (double)dO[d] * (double)v[d];
                    double mk = ref_mask(a, b, h, i, j);
                    dS[i * T + j] = dPd * mk; /* dP for now */
                    rowdot += P[i * T + j] * dS[i * T + j];
                    /* dv_j += Pd_ij dO_i */
                    double *dv = dqkv + (b * T + j) * R + col_v(a, h);
                    for (int64_t d = 0; d < HS; d++) dv[d] += P[i * T + j] * mk * (double)dO[d];
                }
                for (int64_t j = 0; j < T; j++) dS[i * T + j] = P[i * T + j] * (dS[i * T + j] - rowdot);
            }
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j < T; j++) {
                    double s = dS[i * T + j] * (double)a->scale;
                    if (s == 0.0) continue;
                    const float *q = qkv + (b * T + i) * R + col_q(a, h);
                    const float *k = qkv + (b * T + j) * R + col_k(a, h);
                    double *dq = dqkv + (b * T + i) * R + col_q(a, h);
                    double *dk = dqkv + (b * T + j) * R + col_k(a, h);
                    for (int64_t d = 0; d < HS; d++) {
                        dq[d] += s * (double)k[d];
                        dk[d] += s * (double)q[d];
                    }
                }
        }
    free(P);
    free(dS);
    free(lse);
}

/* ------------------------------------------------------------------------------------------ */
/* attention against the reference                                                            */

static struct loom_attn make_attn(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                  int causal, float p) {
    struct loom_attn a = {0};
    a.B = B;
    a.T = T;
    a.NH = NH;
    a.NKV = NKV;
    a.HS = HS;
    a.causal = causal;
    a.scale = 1.0f / sqrtf((float)HS);
    a.dropout_p = p;
    a.seed = 42;
    a.key = loom_hash_mix(7, 3);
    a.sample0 = 0;
    a.head0 = 0;
    a.NH_global = NH;
    return a;
}

static void run_fwd_bwd(const struct loom_attn *a, float *out, float *lse, float *dqkv,
                        const float *qkv, const float *dout) {
    loom_op(g_be, attention_forward, out, lse, qkv, a);
    loom_op(g_be, attention_backward, dqkv, dout, out, lse, qkv, a);
}

/* doc_start[B*T] of samples packed with documents of the given lengths: lens[b] lists sample b's
 * (0-terminated; whatever is left of T after them is one more document). */
static int32_t *make_docs(int64_t B, int64_t T, const int (*lens)[8]) {
    int32_t *doc = xmalloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++) {
        int64_t t = 0;
        for (int k = 0; k < 8 && lens[b][k] && t < T; k++)
            for (int64_t start = t; t < T && t < start + lens[b][k]; t++)
                doc[b * T + t] = (int32_t)start;
        for (int64_t start = t; t < T; t++)
            doc[b * T + t] = (int32_t)start;
    }
    return doc;
}

/* key_end[B*T] of a padding mask: every row of sample b sees keys [0, len[b]) */
static int32_t *make_pad(int64_t B, int64_t T, const int *len) {
    int32_t *end = xmalloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t bt = 0; bt < B * T; bt++)
        end[bt] = len[bt / T];
    return end;
}

/* key_end[B*T] of a bidirectional document mask: each row's document ends where the next
 * document starts (doc_start as make_docs writes it) */
static int32_t *make_doc_ends(int64_t B, int64_t T, const int32_t *doc) {
    int32_t *end = xmalloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = T - 1; t >= 0; t--)
            end[b * T + t] = t == T - 1 || doc[b * T + t + 1] != doc[b * T + t]
                                 ? (int32_t)(t + 1)
                                 : end[b * T + t + 1];
    return end;
}

/* whether query (b, i) of a problem sees key j */
static int sees(const struct loom_attn *a, int64_t b, int64_t i, int64_t j) {
    const int64_t bt = b * a->T + i;
    return (!a->causal || j <= i) && (!a->doc_start || j >= a->doc_start[bt]) &&
           (!a->key_end || j < a->key_end[bt]);
}

/* Rows that see no key: out 0 and a zero dq exactly; key rows that no query sees: dk = dv = 0
 * exactly (not merely within a tolerance). Returns the number of such query rows. */
static int64_t check_unseen(const struct loom_attn *a, const float *out, const float *dqkv) {
    const int64_t T = a->T, R = row_len(a), C = a->NH * a->HS, HS = a->HS;
    int64_t empty = 0, bad = 0;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t i = 0; i < T; i++) {
            int any_q = 0, any_k = 0;
            for (int64_t j = 0; j < T; j++) {
                any_q |= sees(a, b, i, j); /* query i sees a key */
                any_k |= sees(a, b, j, i); /* key i is seen */
            }
            const float *row = dqkv + (b * T + i) * R;
            if (!any_q) {
                empty++;
                for (int64_t h = 0; h < a->NH; h++)
                    for (int64_t d = 0; d < HS; d++)
                        bad += out[(b * T + i) * C + h * HS + d] != 0.0f ||
                               row[col_q(a, h) + d] != 0.0f;
            }
            if (!any_k)
                for (int64_t h = 0; h < a->NH; h++)
                    for (int64_t d = 0; d < HS; d++)
                        bad += row[col_k(a, h) + d] != 0.0f || row[col_v(a, h) + d] != 0.0f;
        }
    EXPECTF(bad == 0, "%lld elements of unseen rows are not exactly 0\n", (long long)bad);
    return empty;
}

static void test_vs_reference_mask(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                   int causal, float p, int64_t sample0, const int32_t *doc,
                                   const int32_t *kend, const char *label) {
    struct loom_attn a = make_attn(B, T, NH, NKV, HS, causal, p);
    a.sample0 = sample0;
    a.doc_start = doc;
    a.key_end = kend;
    const int64_t R = row_len(&a), C = NH * HS;
    const int f0 = expect_failures;
    /* every tensor the op reads or writes ends against a guard page */
    float *qkv = guarded_alloc(B * T * R), *dout = guarded_alloc(B * T * C);
    float *out = guarded_alloc(B * T * C), *lse = guarded_alloc(B * NH * T);
    float *dqkv = guarded_alloc(B * T * R);
    double *rout = ALLOCD(B * T * C), *rlse = ALLOCD(B * NH * T), *rdqkv = ALLOCD(B * T * R);
    fill_normal(qkv, B * T * R, 1, 1.0f);
    fill_normal(dout, B * T * C, 2, 1.0f);
    fill_nan(out, B * T * C);
    fill_nan(lse, B * NH * T);
    fill_nan(dqkv, B * T * R); /* dqkv is assigned: nothing may leak through */
    run_fwd_bwd(&a, out, lse, dqkv, qkv, dout);
    ref_forward(rout, rlse, qkv, &a);
    ref_backward(rdqkv, dout, qkv, &a);
    check_close("out", out, rout, B * T * C, 2e-6, 1e-5);
    check_close("lse", lse, rlse, B * NH * T, 2e-6, 1e-6);
    check_close("dqkv", dqkv, rdqkv, B * T * R, 5e-6, 5e-5);

    /* run to run, and with a different thread count: bit-identical */
    float *out2 = ALLOCF(B * T * C), *lse2 = ALLOCF(B * NH * T), *dqkv2 = ALLOCF(B * T * R);
    run_fwd_bwd(&a, out2, lse2, dqkv2, qkv, dout);
    EXPECT(memcmp(out, out2, (size_t)(B * T * C) * sizeof(float)) == 0);
    EXPECT(memcmp(lse, lse2, (size_t)(B * NH * T) * sizeof(float)) == 0);
    EXPECT(memcmp(dqkv, dqkv2, (size_t)(B * T * R) * sizeof(float)) == 0);
    int saved = g_be->num_threads;
    g_be->num_threads = saved == 1 ? 2 : 1;
    run_fwd_bwd(&a, out2, lse2, dqkv2, qkv, dout);
    g_be->num_threads = saved;
    EXPECT(memcmp(out, out2, (size_t)(B * T * C) * sizeof(float)) == 0);
    EXPECT(memcmp(dqkv, dqkv2, (size_t)(B * T * R) * sizeof(float)) == 0);

    int64_t empty = 0;
    if (kend || doc) {
        empty = check_unseen(&a, out, dqkv);
        /* the keys that no query of a sample sees (padding) change no bit of the results */
        float *qkv2 = ALLOCF(B * T * R);
        memcpy(qkv2, qkv, (size_t)(B * T * R) * sizeof(float));
        int64_t changed = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < T; j++) {
                int seen = 0;
                for (int64_t i = 0; i < T && !seen; i++) seen = sees(&a, b, i, j);
                if (seen) continue;
                changed++;
                for (int64_t h = 0; h < NKV; h++)
                    for (int64_t d = 0; d < 2 * HS; d++) /* the key and value heads */
                        qkv2[(b * T + j) * R + col_k(&a, h * (NH / NKV)) + d] =
                            1e3f * (float)(d + 1);
            }
        if (changed) {
            run_fwd_bwd(&a, out2, lse2, dqkv2, qkv2, dout);
            EXPECT(memcmp(out, out2, (size_t)(B * T * C) * sizeof(float)) == 0);
            EXPECT(memcmp(lse, lse2, (size_t)(B * NH * T) * sizeof(float)) == 0);
            for (int64_t bt = 0; bt < B * T; bt++) /* all but the changed keys' own rows */
                for (int64_t c = 0; c < R; c++) {
                    const int64_t slot = (c / HS) % (NH / NKV + 2);
                    if (slot < NH / NKV && dqkv[bt * R + c] != dqkv2[bt * R + c]) {
                        EXPECTF(0, "dq [%lld] changed with the padded keys\n", (long long)bt);
                        bt = B * T;
                        break;
                    }
                }
        }
        free(qkv2);
    }

    printf("%-4s attention B=%lld T=%lld NH=%lld NKV=%lld HS=%lld %s p=%.2f sample0=%lld%s%s",
           expect_failures == f0 ? "ok" : "FAIL", (long long)B, (long long)T, (long long)NH,
           (long long)NKV, (long long)HS, causal ? "causal" : "bidirectional", (double)p,
           (long long)sample0, doc ? " document mask" : "", label ? label : "");
    if (empty) printf(" (%lld rows see no key)", (long long)empty);
    printf("\n");
    guarded_free(qkv, B * T * R), guarded_free(dout, B * T * C), guarded_free(out, B * T * C);
    guarded_free(lse, B * NH * T), guarded_free(dqkv, B * T * R);
    free(out2), free(lse2), free(dqkv2), free(rout), free(rlse), free(rdqkv);
}

static void test_vs_reference_doc(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                  int causal, float p, int64_t sample0, const int32_t *doc) {
    test_vs_reference_mask(B, T, NH, NKV, HS, causal, p, sample0, doc, NULL, NULL);
}

static void test_vs_reference_at(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                                 int causal, float p, int64_t sample0) {
    test_vs_reference_doc(B, T, NH, NKV, HS, causal, p, sample0, NULL);
}

static void test_vs_reference(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                              int causal, float p) {
    test_vs_reference_at(B, T, NH, NKV, HS, causal, p, 0);
}

/* Documents packed into a sample do not see each other: each document's out, lse and dqkv rows
 * equal those of the document run alone as a sample of its own (no dropout: its indices depend
 * on the position in the sample). Also a control: without the mask the later documents differ.
 * causal 0: bidirectional documents, [doc_start, key_end). */
static void test_doc_isolation(int64_t T, int64_t NH, int64_t NKV, int64_t HS, const int *lens,
                               int causal) {
    const int f0 = expect_failures;
    const int(*l8)[8] = (const int(*)[8])lens;
    int32_t *doc = make_docs(1, T, l8), *kend = causal ? NULL : make_doc_ends(1, T, doc);
    struct loom_attn a = make_attn(1, T, NH, NKV, HS, causal, 0.0f);
    a.doc_start = doc;
    a.key_end = kend;
    const int64_t R = row_len(&a), C = NH * HS;
    float *qkv = ALLOCF(T * R), *dout = ALLOCF(T * C), *out = ALLOCF(T * C), *lse = ALLOCF(NH * T);
    float *dqkv = ALLOCF(T * R), *o1 = ALLOCF(T * C), *l1 = ALLOCF(NH * T), *d1 = ALLOCF(T * R);
    fill_normal(qkv, T * R, 21, 1.0f);
    fill_normal(dout, T * C, 22, 1.0f);
    run_fwd_bwd(&a, out, lse, dqkv, qkv, dout);
    double worst = 0;
    int ndocs = 0, later_differ = 1;
    for (int64_t t0 = 0; t0 < T; ndocs++) {
        int64_t len = 1;
        while (t0 + len < T && doc[t0 + len] == t0)
            len++;
        struct loom_attn s = make_attn(1, len, NH, NKV, HS, causal, 0.0f);
        run_fwd_bwd(&s, o1, l1, d1, qkv + t0 * R, dout + t0 * C);
        double e =
            fmax(max_abs_diff(o1, out + t0 * C, len * C), max_abs_diff(d1, dqkv + t0 * R, len * R));
        for (int64_t h = 0; h < NH; h++)
            e = fmax(e, max_abs_diff(l1 + h * len, lse + h * T + t0, len));
        worst = fmax(worst, e);
        t0 += len;
    }
    EXPECTF(worst <= 2e-6, "a document differs from itself alone by %g\n", worst);
    /* control: without the mask, the last document's outputs change */
    a.doc_start = NULL;
    a.key_end = NULL;
    loom_op(g_be, attention_forward, o1, l1, qkv, &a);
    later_differ = max_abs_diff(o1, out, T * C) > 1e-3;
    EXPECT(later_differ);
    printf("%-4s attention document isolation T=%lld NH=%lld NKV=%lld HS=%lld %s: %d documents, "
           "each as if alone (max diff %.2g)\n",
           expect_failures == f0 ? "ok" : "FAIL", (long long)T, (long long)NH, (long long)NKV,
           (long long)HS, causal ? "causal" : "bidirectional", ndocs, worst);
    free(kend), free(doc), free(qkv), free(dout), free(out), free(lse), free(dqkv), free(o1);
    free(l1), free(d1);
}

/* A padded batch (key_end = each sample's length): the real rows of every sample (out, lse, dq,
 * dk, dv) equal those of its real tokens run alone as a sample of that length. */
static void test_pad_isolation(int64_t T, int64_t NH, int64_t NKV, int64_t HS, int causal) {
    const int64_t B = 4;
    const int len4[4] = {(int)T, 1, 37, (int)T - 5};
    const int f0 = expect_failures;
    int32_t *kend = make_pad(B, T, len4);
    struct loom_attn a = make_attn(B, T, NH, NKV, HS, causal, 0.0f);
    a.key_end = kend;
    const int64_t R = row_len(&a), C = NH * HS;
    float *qkv = ALLOCF(B * T * R), *dout = ALLOCF(B * T * C), *out = ALLOCF(B * T * C);
    float *lse = ALLOCF(B * NH * T), *dqkv = ALLOCF(B * T * R);
    float *o1 = ALLOCF(T * C), *l1 = ALLOCF(NH * T), *d1 = ALLOCF(T * R);
    fill_normal(qkv, B * T * R, 31, 1.0f);
    fill_normal(dout, B * T * C, 32, 1.0f);
    /* the padded query rows still see the real keys: their output gradient is 0 (a loss
     * ignores them), else they would add to the real keys' dk and dv */
    for (int64_t b = 0; b < B; b++)
        memset(dout + (b * T + len4[b]) * C, 0, (size_t)((T - len4[b]) * C) * sizeof(float));
    run_fwd_bwd(&a, out, lse, dqkv, qkv, dout);
    double worst = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t len = len4[b];
        struct loom_attn s = make_attn(1, len, NH, NKV, HS, causal, 0.0f);
        run_fwd_bwd(&s, o1, l1, d1, qkv + b * T * R, dout + b * T * C);
        double e = fmax(max_abs_diff(o1, out + b * T * C, len * C),
                        max_abs_diff(d1, dqkv + b * T * R, len * R));
        for (int64_t h = 0; h < NH; h++)
            e = fmax(e, max_abs_diff(l1 + h * len, lse + (b * NH + h) * T, len));
        worst = fmax(worst, e);
    }
    EXPECTF(worst <= 2e-6, "a padded sample differs from its real tokens alone by %g\n", worst);
    printf("%-4s attention padding isolation T=%lld NH=%lld NKV=%lld HS=%lld %s: lengths %d %d %d "
           "%d, each as if alone (max diff %.2g)\n",
           expect_failures == f0 ? "ok" : "FAIL", (long long)T, (long long)NH, (long long)NKV,
           (long long)HS, causal ? "causal" : "bidirectional", len4[0], len4[1], len4[2], len4[3],
           worst);
    free(kend), free(qkv), free(dout), free(out), free(lse), free(dqkv), free(o1), free(l1),
        free(d1);
}

/* L = sum(W * out); compare the backward's dL/dqkv with central differences of the forward
 * (docs: with a document mask, sample 0 holding documents of 2, 1 and 3 tokens, sample 1 of 4
 * and 2, and without the causal mask each row's keys ending at its document's end; pad: key
 * ends of a padded batch, samples of 1 and 4 real tokens of 6). */
static void test_finite_differences_mask(int causal, float p, int64_t NH, int64_t NKV, int docs,
                                         int pad) {
    const int64_t B = 2, T = 6, HS = 4;
    static const int lens[2][8] = {{2, 1}, {4}};
    static const int plen[2] = {1, 4};
    int32_t *doc = docs ? make_docs(B, T, lens) : NULL;
    int32_t *kend = pad ? make_pad(B, T, plen) : docs && !causal ? make_doc_ends(B, T, doc) : NULL;
    struct loom_attn a = make_attn(B, T, NH, NKV, HS, causal, p);
    a.doc_start = doc;
    a.key_end = kend;
    const int64_t R = row_len(&a), C = NH * HS, N = B * T * R;
    const int f0 = expect_failures;
    float *qkv = ALLOCF(N), *W = ALLOCF(B * T * C), *out = ALLOCF(B * T * C);
    float *lse = ALLOCF(B * NH * T), *dqkv = ALLOCF(N);
    double *fd = ALLOCD(N);
    fill_normal(qkv, N, 3, 1.0f);
    fill_normal(W, B * T * C, 4, 1.0f);
    run_fwd_bwd(&a, out, lse, dqkv, qkv, W);
    const float eps = 1e-2f;
    for (int64_t i = 0; i < N; i++) {
        float x0 = qkv[i];
        double lp = 0, lm = 0;
        qkv[i] = x0 + eps;
        loom_op(g_be, attention_forward, out, lse, qkv, &a);
        for (int64_t j = 0; j < B * T * C; j++) lp += (double)W[j] * out[j];
        qkv[i] = x0 - eps;
        loom_op(g_be, attention_forward, out, lse, qkv, &a);
        for (int64_t j = 0; j < B * T * C; j++) lm += (double)W[j] * out[j];
        qkv[i] = x0;
        fd[i] = (lp - lm) / (2.0 * (double)eps);
    }
    check_close("dqkv vs finite differences", dqkv, fd, N, 2e-3, 1e-2);
    printf("%-4s attention finite differences %s p=%.2f NH=%lld NKV=%lld%s%s\n",
           expect_failures == f0 ? "ok" : "FAIL", causal ? "causal" : "bidirectional", (double)p,
           (long long)NH, (long long)NKV, docs ? " document mask" : "", pad ? " padding" : "");
    free(qkv), free(W), free(out), free(lse), free(dqkv), free(fd), free(doc), free(kend);
}

static void test_finite_differences_doc(int causal, float p, int64_t NH, int64_t NKV, int docs) {
    test_finite_differences_mask(causal, p, NH, NKV, docs, 0);
}

static void test_finite_differences(int causal, float p, int64_t NH, int64_t NKV) {
    test_finite_differences_doc(causal, p, NH, NKV, 0);
}

/* Tensor parallelism: heads [2,4) of a 4-head call computed by a 2-head call with head0 = 2
 * (its own slice of qkv, the group holding those heads) give the same out, lse and dqkv, dropout
 * mask included. Data parallelism likewise: sample 1 alone with sample0 = 1. */
static void test_dropout_layout(void) {
    const int64_t B = 2, T = 70, NH = 4, NKV = 2, HS = 16;
    const int f0 = expect_failures;
    struct loom_attn a = make_attn(B, T, NH, NKV, HS, 1, 0.25f);
    const int64_t R = row_len(&a), C = NH * HS;
    float *qkv = ALLOCF(B * T * R), *dout = ALLOCF(B * T * C), *out = ALLOCF(B * T * C);
    float *lse = ALLOCF(B * NH * T), *dqkv = ALLOCF(B * T * R);
    fill_normal(qkv, B * T * R, 5, 1.0f);
    fill_normal(dout, B * T * C, 6, 1.0f);
    run_fwd_bwd(&a, out, lse, dqkv, qkv, dout);

    /* the local call: group 1 = query heads 2, 3 with its key and value head */
    struct loom_attn l = a;
    l.NH = 2;
    l.NKV = 1;
    l.head0 = 2;
    l.NH_global = 4;
    const int64_t Rl = row_len(&l), Cl = 2 * HS, G = Rl; /* one group's columns */
    float *qkvl = ALLOCF(B * T * Rl), *doutl = ALLOCF(B * T * Cl), *outl = ALLOCF(B * T * Cl);
    float *lsel = ALLOCF(B * 2 * T), *dqkvl = ALLOCF(B * T * Rl);
    float *want_out = ALLOCF(B * T * Cl), *want_lse = ALLOCF(B * 2 * T), *want_d = ALLOCF(B * T * Rl);
    for (int64_t r = 0; r < B * T; r++) {
        memcpy(qkvl + r * Rl, qkv + r * R + G, (size_t)G * sizeof(float));
        memcpy(doutl + r * Cl, dout + r * C + 2 * HS, (size_t)Cl * sizeof(float));
        memcpy(want_out + r * Cl, out + r * C + 2 * HS, (size_t)Cl * sizeof(float));
        memcpy(want_d + r * Rl, dqkv + r * R + G, (size_t)G * sizeof(float));
    }
    for (int64_t b = 0; b < B; b++)
        memcpy(want_lse + b * 2 * T, lse + (b * NH + 2) * T, (size_t)(2 * T) * sizeof(float));
    run_fwd_bwd(&l, outl, lsel, dqkvl, qkvl, doutl);
    double e_out = max_abs_diff(outl, want_out, B * T * Cl);
    double e_lse = max_abs_diff(lsel, want_lse, B * 2 * T);
    double e_d = max_abs_diff(dqkvl, want_d, B * T * Rl);
    EXPECT(e_out <= 1e-6 && e_lse <= 1e-6 && e_d <= 1e-6);
    if (!(e_out <= 1e-6 && e_lse <= 1e-6 && e_d <= 1e-6))
        fprintf(stderr, "  TP slice differs: out %g lse %g dqkv %g\n", e_out, e_lse, e_d);

    /* control: the same local call keyed as heads [0,2) must see a different mask */
    l.head0 = 0;
    loom_op(g_be, attention_forward, outl, lsel, qkvl, &l);
    EXPECT(max_abs_diff(outl, want_out, B * T * Cl) > 1e-3);

    /* data parallelism: sample 1 alone */
    struct loom_attn d = a;
    d.B = 1;
    d.sample0 = 1;
    float *out1 = ALLOCF(T * C), *lse1 = ALLOCF(NH * T), *dqkv1 = ALLOCF(T * R);
    run_fwd_bwd(&d, out1, lse1, dqkv1, qkv + T * R, dout + T * C);
    EXPECT(max_abs_diff(out1, out + T * C, T * C) <= 1e-6);
    EXPECT(max_abs_diff(dqkv1, dqkv + T * R, T * R) <= 1e-6);
    d.sample0 = 0;
    loom_op(g_be, attention_forward, out1, lse1, qkv + T * R, &d);
    EXPECT(max_abs_diff(out1, out + T * C, T * C) > 1e-3);

    /* the mask drops about p of the probabilities: count through the reference mask */
    int64_t kept = 0, total = 0;
    for (int64_t h = 0; h < NH; h++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j <= i; j++, total++) kept += ref_mask(&a, 0, h, i, j) != 0.0;
    double frac = (double)kept / (double)total;
    EXPECT(fabs(frac - 0.75) < 0.02);

    printf("%-4s attention dropout mask across head slices and samples (kept %.3f)\n",
           expect_failures == f0 ? "ok" : "FAIL", frac);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(qkvl), free(doutl), free(outl);
    free(lsel), free(dqkvl), free(want_out), free(want_lse), free(want_d), free(out1), free(lse1);
    free(dqkv1);
}

/* ------------------------------------------------------------------------------------------ */
/* rotary embedding                                                                           */

/* The frequency of pair i of the D rotated values, as Hugging Face's rotary initialisation
 * computes it (1 / theta^(2i / D)), rescaled with rope_type "llama3" by the rule of its
 * _compute_llama3_parameters: wavelengths above original / low_freq_factor divided by factor,
 * below original / high_freq_factor kept, the band between interpolated */
static double ref_rope_freq(const struct loom_rope *r, int64_t D, int64_t ii) {
    double f = 1.0 / pow(r->theta, (double)(2 * ii) / (double)D);
    if (r->factor > 0) {
        const double wavelen = 2.0 * 3.14159265358979323846 / f, old = r->original_max_positions;
        const double smooth =
            (old / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
        if (wavelen > old / r->low_freq_factor)
            f = f / r->factor;
        else if (!(wavelen < old / r->high_freq_factor))
            f = (1.0 - smooth) * f / r->factor + smooth * f;
    }
    /* then Megatron-LM's positions p / interpolation (rope_type "linear") */
    return r->interpolation > 0 ? f / r->interpolation : f;
}

/* position of token bt: pos0 + pos[bt], or pos0 + bt % T without pos; the first D values of a
 * head rotate (D = r->dims, or HS when 0), the rest pass through */
static void ref_rope(double *y, const float *x, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                     int64_t HS, int64_t pos0, const struct loom_rope *r, const int32_t *pos) {
    const int64_t Q = NH / NKV, R = (NH + 2 * NKV) * HS, D = r->dims ? r->dims : HS, half = D / 2;
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t c = 0; c < R; c++) {
            int64_t head = c / HS, i = c % HS, slot = head % (Q + 2);
            double xv = x[bt * R + c];
            if (slot > Q || i >= D) { /* value head, or past the rotated values: untouched */
                y[bt * R + c] = xv;
                continue;
            }
            int64_t ii = i < half ? i : i - half;
            const int64_t p = pos0 + (pos ? pos[bt] : bt % T);
            double ang = (double)p * ref_rope_freq(r, D, ii);
            if (i < half) {
                double x2 = x[bt * R + c + half];
                y[bt * R + c] = xv * cos(ang) - x2 * sin(ang);
            } else {
                double x1 = x[bt * R + c - half];
                y[bt * R + c] = xv * cos(ang) + x1 * sin(ang);
            }
        }
}

static void test_rope_pos(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                          const int32_t *pos, const struct loom_rope *r) {
    const int64_t R = (NH + 2 * NKV) * HS, N = B * T * R, Q = NH / NKV;
    const int f0 = expect_failures;
    float *x = ALLOCF(N), *y = ALLOCF(N);
    double *ry = ALLOCD(N);
    fill_normal(x, N, 7, 1.0f);
    memcpy(y, x, (size_t)N * sizeof(float));
    loom_op(g_be, rope, y, LOOM_DTYPE_F32, pos, B, T, NH, NKV, HS, pos0, r, 0);
    ref_rope(ry, x, B, T, NH, NKV, HS, pos0, r, pos);
    if (r->dims || r->factor > 0 || r->interpolation > 0) { /* not whole-head, plain rope */
        double *plain = ALLOCD(N);
        ref_rope(plain, x, B, T, NH, NKV, HS, pos0, &(struct loom_rope){.theta = r->theta}, pos);
        int64_t differ = 0;
        for (int64_t i = 0; i < N; i++)
            differ += fabs(plain[i] - ry[i]) > 1e-3;
        EXPECT(differ > N / 50);
        free(plain);
    }
    check_close("rope", y, ry, N, 2e-6, 2e-6);
    /* value heads bit-identical */
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t g = 0; g < NKV; g++) {
            int64_t c = (g * (Q + 2) + Q + 1) * HS;
            EXPECT(memcmp(y + bt * R + c, x + bt * R + c, (size_t)HS * sizeof(float)) == 0);
        }
    /* inverse(rope(x)) == x */
    loom_op(g_be, rope, y, LOOM_DTYPE_F32, pos, B, T, NH, NKV, HS, pos0, r, 1);
    double e = max_abs_diff(y, x, N);
    EXPECT(e <= 1e-6);
    if (!(e <= 1e-6)) fprintf(stderr, "  rope inverse error %g\n", e);

    /* backward: L = sum(W * rope(x)); dL/dx = rope_inverse(W); check with central differences
     * on a few elements (rope is linear, so the difference quotient is exact up to rounding) */
    float *W = ALLOCF(N);
    fill_normal(W, N, 8, 1.0f);
    memcpy(y, W, (size_t)N * sizeof(float));
    loom_op(g_be, rope, y, LOOM_DTYPE_F32, pos, B, T, NH, NKV, HS, pos0, r, 1);
    const int64_t nprobe = N < 200 ? N : 200;
    double *fd = ALLOCD(nprobe);
    float *gp = ALLOCF(nprobe), *xp = ALLOCF(N);
    for (int64_t s = 0; s < nprobe; s++) {
        int64_t i = (s * 7919) % N;
        double l[2];
        for (int k = 0; k < 2; k++) {
            memcpy(xp, x, (size_t)N * sizeof(float));
            xp[i] += k == 0 ? 0.5f : -0.5f;
            loom_op(g_be, rope, xp, LOOM_DTYPE_F32, pos, B, T, NH, NKV, HS, pos0, r, 0);
            l[k] = 0;
            for (int64_t j = 0; j < N; j++) l[k] += (double)W[j] * xp[j];
        }
        fd[s] = l[0] - l[1];
        gp[s] = y[i];
    }
    check_close("rope backward vs finite differences", gp, fd, nprobe, 1e-4, 1e-4);
    if (pos) { /* the positions t given explicitly: the same bits as without them */
        int32_t *ident = xmalloc((size_t)(B * T) * sizeof(int32_t));
        for (int64_t bt = 0; bt < B * T; bt++)
            ident[bt] = (int32_t)(bt % T);
        memcpy(y, x, (size_t)N * sizeof(float));
        memcpy(xp, x, (size_t)N * sizeof(float));
        loom_op(g_be, rope, y, LOOM_DTYPE_F32, ident, B, T, NH, NKV, HS, pos0, r, 0);
        loom_op(g_be, rope, xp, LOOM_DTYPE_F32, NULL, B, T, NH, NKV, HS, pos0, r, 0);
        EXPECT(memcmp(y, xp, (size_t)N * sizeof(float)) == 0);
        free(ident);
    }
    printf("%-4s rope B=%lld T=%lld NH=%lld NKV=%lld HS=%lld pos0=%lld rotated %lld%s%s\n",
           expect_failures == f0 ? "ok" : "FAIL", (long long)B, (long long)T, (long long)NH,
           (long long)NKV, (long long)HS, (long long)pos0, (long long)(r->dims ? r->dims : HS),
           r->factor > 0          ? " llama3 scaling"
           : r->interpolation > 0 ? " interpolated"
                                  : "",
           pos ? " per-token positions (restarting at documents)" : "");
    free(x), free(y), free(ry), free(W), free(fd), free(gp), free(xp);
}

static const struct loom_rope rope_plain = {.theta = 10000.0};

static void test_rope(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0) {
    test_rope_pos(B, T, NH, NKV, HS, pos0, NULL, &rope_plain);
}

/* rope with the positions of documents packed into samples: t - doc_start */
static void test_rope_docs(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0,
                           const int (*lens)[8]) {
    int32_t *doc = make_docs(B, T, lens);
    for (int64_t bt = 0; bt < B * T; bt++)
        doc[bt] = (int32_t)(bt % T) - doc[bt];
    test_rope_pos(B, T, NH, NKV, HS, pos0, doc, &rope_plain);
    free(doc);
}

/* ------------------------------------------------------------------------------------------ */
/* modes: dump cases for the PyTorch cross-check; timing                                      */

static int write_raw(const char *dir, const char *name, const char *ext, int idx, const void *x,
                     size_t size, int64_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s_%d.%s", dir, name, idx, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(x, size, (size_t)n, f) != (size_t)n || fclose(f) != 0) {
        perror(path);
        return 0;
    }
    return 1;
}
static int write_f32(const char *dir, const char *name, int idx, const float *x, int64_t n) {
    return write_raw(dir, name, "f32", idx, x, sizeof(float), n);
}

/* Document layouts of the dumped cases (lengths per sample, as make_docs takes them); a case's
 * `docs` is 1 + its index here, or 0 for none. */
static const int dump_docs[][2][8] = {
    {{1, 1, 70, 5, 60}, {64, 64, 1}}, /* T 150: single tokens, blocks of 64 crossed, met */
    {{3, 40, 2, 17, 50}},             /* T 130 */
    {{7, 7, 7, 7, 7, 7}, {44}},       /* T 45 */
};

/* Writes DIR/cases.txt (one line per case) and the tensors of each case as raw float32. */
static int dump_cases(const char *dir) {
    static const struct {
        int64_t B, T, NH, NKV, HS;
        int causal;
        float p;
        int64_t sample0, head0, NH_global, pos0;
        int docs;
        int ends; /* 1: padding (key_end = the lengths below); 2: each document's end */
    } cases[] = {
        {2, 37, 4, 4, 16, 1, 0.0f, 0, 0, 4, 0, 0, 0},
        {2, 70, 4, 2, 16, 0, 0.0f, 0, 0, 4, 3, 0, 0},
        {2, 70, 4, 1, 16, 1, 0.0f, 0, 0, 4, 0, 0, 0},
        {1, 130, 6, 2, 64, 1, 0.0f, 0, 0, 6, 17, 0, 0},
        {2, 45, 4, 2, 32, 1, 0.2f, 3, 2, 8, 0, 0, 0},
        {1, 64, 2, 1, 16, 0, 0.5f, 0, 0, 2, 0, 0, 0},
        /* documents: the attention mask and rotary positions restarting at each one */
        {2, 150, 4, 2, 16, 1, 0.0f, 0, 0, 4, 0, 1, 0},
        {1, 130, 6, 2, 64, 1, 0.2f, 3, 2, 8, 5, 2, 0},
        {2, 45, 4, 1, 12, 1, 0.0f, 0, 0, 4, 0, 3, 0},
        /* key ends: a padded bidirectional batch (BERT), causal padding, bidirectional
         * documents */
        {4, 70, 4, 2, 16, 0, 0.0f, 0, 0, 4, 0, 0, 1},
        {4, 70, 4, 2, 16, 0, 0.3f, 1, 0, 4, 0, 0, 1},
        {4, 70, 2, 1, 64, 1, 0.0f, 0, 0, 2, 0, 0, 1},
        {2, 150, 4, 2, 16, 0, 0.0f, 0, 0, 4, 0, 1, 2},
    };
    static const int pad_lens[4] = {70, 1, 33, 64};
    char path[1024];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *list = fopen(path, "w");
    if (!list) {
        perror(path);
        return 1;
    }
    const struct loom_rope theta = {.theta = 10000.0};
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        struct loom_attn a = make_attn(cases[c].B, cases[c].T, cases[c].NH, cases[c].NKV,
                                       cases[c].HS, cases[c].causal, cases[c].p);
        a.sample0 = cases[c].sample0;
        a.head0 = cases[c].head0;
        a.NH_global = cases[c].NH_global;
        const int64_t B = a.B, T = a.T, NH = a.NH, R = row_len(&a), C = NH * a.HS;
        float *x = ALLOCF(B * T * R), *qkv = ALLOCF(B * T * R), *dout = ALLOCF(B * T * C);
        float *out = ALLOCF(B * T * C), *lse = ALLOCF(B * NH * T), *dqkv = ALLOCF(B * T * R);
        fill_normal(x, B * T * R, 100 + (uint64_t)c, 1.0f);
        fill_normal(dout, B * T * C, 200 + (uint64_t)c, 1.0f);
        /* with documents: doc_start masks attention, and each token's rotary position is its
         * place in its document, t - doc_start */
        int32_t *doc = NULL, *pos = NULL;
        if (cases[c].docs) {
            doc = make_docs(B, T, dump_docs[cases[c].docs - 1]);
            pos = xmalloc((size_t)(B * T) * sizeof(int32_t));
            for (int64_t bt = 0; bt < B * T; bt++)
                pos[bt] = (int32_t)(bt % T) - doc[bt];
            a.doc_start = doc;
        }
        int32_t *kend = cases[c].ends == 1   ? make_pad(B, T, pad_lens)
                        : cases[c].ends == 2 ? make_doc_ends(B, T, doc)
                                             : NULL;
        a.key_end = kend;
        /* rope, then attention on the rotated qkv; the backward of the pair is attention
         * backward followed by the inverse rotation of dqkv */
        memcpy(qkv, x, (size_t)(B * T * R) * sizeof(float));
        loom_op(g_be, rope, qkv, LOOM_DTYPE_F32, pos, B, T, NH, a.NKV, a.HS, cases[c].pos0, &theta,
                0);
        run_fwd_bwd(&a, out, lse, dqkv, qkv, dout);
        loom_op(g_be, rope, dqkv, LOOM_DTYPE_F32, pos, B, T, NH, a.NKV, a.HS, cases[c].pos0, &theta,
                1);
        fprintf(list,
                "%d %lld %lld %lld %lld %lld %d %.9g %.9g %llu %llu %lld %lld %lld %lld %.9g %d %d\n",
                c, (long long)B, (long long)T, (long long)NH, (long long)a.NKV, (long long)a.HS,
                a.causal, (double)a.scale, (double)a.dropout_p, (unsigned long long)a.seed,
                (unsigned long long)a.key, (long long)a.sample0, (long long)a.head0,
                (long long)a.NH_global, (long long)cases[c].pos0, theta.theta, cases[c].docs != 0,
                kend != NULL);
        int ok = write_f32(dir, "x", c, x, B * T * R) && write_f32(dir, "rope", c, qkv, B * T * R) &&
                 write_f32(dir, "dout", c, dout, B * T * C) &&
                 write_f32(dir, "out", c, out, B * T * C) &&
                 write_f32(dir, "lse", c, lse, B * NH * T) && write_f32(dir, "dx", c, dqkv, B * T * R);
        if (doc) ok = ok && write_raw(dir, "doc", "i32", c, doc, sizeof(int32_t), B * T);
        if (kend) ok = ok && write_raw(dir, "kend", "i32", c, kend, sizeof(int32_t), B * T);
        free(x), free(qkv), free(dout), free(out), free(lse), free(dqkv), free(doc), free(pos);
        free(kend);
        if (!ok) return 1;
    }
    return fclose(list) == 0 ? 0 : 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: test_attention bench B T NH NKV HS causal [iters] [dropout_p] "
                        "[len]\n");
        return 2;
    }
    struct loom_attn a = make_attn(atoll(argv[2]), atoll(argv[3]), atoll(argv[4]), atoll(argv[5]),
                                   atoll(argv[6]), atoi(argv[7]), argc > 9 ? (float)atof(argv[9]) : 0.0f);
    int iters = argc > 8 ? atoi(argv[8]) : 10;
    const int64_t B = a.B, T = a.T, NH = a.NH, R = row_len(&a), C = NH * a.HS;
    /* len: every sample padded after its first len tokens (key_end = len) */
    int32_t *kend = NULL;
    if (argc > 10) {
        kend = xmalloc((size_t)(B * T) * sizeof(int32_t));
        for (int64_t bt = 0; bt < B * T; bt++) kend[bt] = (int32_t)atoi(argv[10]);
        a.key_end = kend;
    }
    float *qkv = ALLOCF(B * T * R), *dout = ALLOCF(B * T * C), *out = ALLOCF(B * T * C);
    float *lse = ALLOCF(B * NH * T), *dqkv = ALLOCF(B * T * R);
    fill_normal(qkv, B * T * R, 1, 1.0f);
    fill_normal(dout, B * T * C, 2, 1.0f);
    run_fwd_bwd(&a, out, lse, dqkv, qkv, dout); /* warm up */
    /* best wall time, and the process CPU time of that iteration (all threads together),
     * which shows when other processes were competing for the cores */
    double tf = 1e30, tb = 1e30, cf = 0, cb = 0;
    for (int it = 0; it < iters; it++) {
        double t0 = now_s(), c0 = cpu_s();
        loom_op(g_be, attention_forward, out, lse, qkv, &a);
        double t1 = now_s(), c1 = cpu_s();
        loom_op(g_be, attention_backward, dqkv, dout, out, lse, qkv, &a);
        double t2 = now_s(), c2 = cpu_s();
        if (t1 - t0 < tf) tf = t1 - t0, cf = c1 - c0;
        if (t2 - t1 < tb) tb = t2 - t1, cb = c2 - c1;
    }
    double flops_f = 4.0 * (double)B * (double)NH * (double)T * (double)T * (double)a.HS;
    if (a.causal) flops_f /= 2;
    double flops_b = 2.5 * flops_f;
    printf("threads %d  B=%lld T=%lld NH=%lld NKV=%lld HS=%lld %s p=%.2f key_end %d (best of %d)\n",
           g_be->num_threads, (long long)B, (long long)T, (long long)NH, (long long)a.NKV,
           (long long)a.HS, a.causal ? "causal" : "bidirectional", (double)a.dropout_p,
           kend ? kend[0] : (int)T, iters);
    printf("forward   %8.2f ms  %7.1f GFLOP/s  (cpu %8.2f ms)\n", tf * 1e3, flops_f / tf * 1e-9,
           cf * 1e3);
    printf("backward  %8.2f ms  %7.1f GFLOP/s  (cpu %8.2f ms)\n", tb * 1e3, flops_b / tb * 1e-9,
           cb * 1e3);
    printf("fwd+bwd   %8.2f ms  %7.1f GFLOP/s  (cpu %8.2f ms)\n", (tf + tb) * 1e3,
           (flops_f + flops_b) / (tf + tb) * 1e-9, (cf + cb) * 1e3);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(kend);
    return 0;
}

int main(int argc, char **argv) {
    if (loom_backend_cpu_create(&g_be) != LOOM_OK) {
        fprintf(stderr, "cannot create the cpu backend: %s\n", loom_last_error());
        return 1;
    }
    int rc;
    if (argc >= 3 && strcmp(argv[1], "dump") == 0) {
        rc = dump_cases(argv[2]);
    } else if (argc >= 2 && strcmp(argv[1], "bench") == 0) {
        rc = bench(argc, argv);
    } else if (argc >= 2) {
        fprintf(stderr, "usage: test_attention [dump DIR | bench B T NH NKV HS causal [iters]]\n");
        rc = 2;
    } else {
        /* layouts: MHA, GQA 2:1, MQA; awkward T (one partial block, several blocks), HS 16..64 */
        test_vs_reference(2, 37, 4, 4, 16, 1, 0.0f);
        test_vs_reference(2, 37, 4, 4, 16, 0, 0.0f);
        test_vs_reference(2, 70, 4, 2, 16, 1, 0.0f);
        test_vs_reference(2, 70, 4, 2, 16, 0, 0.0f);
        test_vs_reference(2, 70, 4, 1, 16, 1, 0.0f);
        test_vs_reference(1, 37, 4, 1, 16, 0, 0.0f);
        test_vs_reference(1, 130, 2, 1, 64, 1, 0.0f);
        test_vs_reference(1, 64, 3, 3, 12, 1, 0.0f);
        /* head sizes that exercise every column-chunk width of the tiled path */
        test_vs_reference(1, 50, 2, 1, 32, 1, 0.0f);
        test_vs_reference(1, 50, 2, 2, 48, 0, 0.0f);
        test_vs_reference(1, 66, 2, 1, 80, 1, 0.0f);
        test_vs_reference(1, 40, 2, 1, 128, 0, 0.0f);
        test_vs_reference(2, 1, 2, 2, 8, 1, 0.0f);
        test_vs_reference(1, 5, 2, 1, 8, 0, 0.0f);
        /* dropout on the probabilities, against the reference with the same mask function */
        test_vs_reference(2, 70, 4, 2, 16, 1, 0.3f);
        test_vs_reference(1, 37, 2, 1, 16, 0, 0.5f);
        /* dropout indices of sample 219130 (4 heads of 70 x 70) straddle 2^32: the counter's
         * high word must carry exactly where loom_rng_keep's does */
        test_vs_reference_at(1, 70, 4, 2, 16, 1, 0.3f, 219130);
        /* document masks (Megatron-LM's --reset-attention-mask): single-token documents,
         * documents crossing and meeting the 64-query blocks (key panels skipped), documents
         * starting inside a 16-key panel; both the tiled path (HS % 16 == 0) and sgemm */
        {
            static const int lens_a[3][8] = {{1, 1, 70, 5, 60}, {64, 64, 1}, {150}};
            static const int lens_b[2][8] = {{3, 40, 2, 17, 50}, {1, 1, 1, 1, 1, 1, 1, 1}};
            static const int lens_c[1][8] = {{20, 13, 100, 1}};
            int32_t *da = make_docs(3, 150, lens_a), *db = make_docs(2, 130, lens_b);
            int32_t *dc = make_docs(1, 200, lens_c);
            test_vs_reference_doc(3, 150, 4, 2, 16, 1, 0.0f, 0, da);
            test_vs_reference_doc(3, 150, 2, 1, 64, 1, 0.0f, 0, da);
            test_vs_reference_doc(2, 130, 3, 3, 12, 1, 0.0f, 0, db);
            test_vs_reference_doc(2, 130, 4, 2, 32, 1, 0.3f, 5, db);
            test_vs_reference_doc(1, 200, 2, 2, 80, 1, 0.0f, 0, dc);
            test_vs_reference_doc(1, 200, 2, 1, 8, 1, 0.2f, 0, dc);
            free(da), free(db), free(dc);
            static const int iso_a[8] = {1, 1, 70, 5, 60};
            static const int iso_b[8] = {17, 64, 3, 40};
            test_doc_isolation(150, 4, 2, 16, iso_a, 1);
            test_doc_isolation(150, 4, 4, 12, iso_b, 1);
            test_doc_isolation(150, 4, 2, 16, iso_a, 0);
            test_doc_isolation(150, 4, 4, 12, iso_b, 0);
        }
        /* key ends (loom_attn.key_end) */
        {
            /* padding masks: a full sample, length 1, lengths crossing and meeting the 16-key
             * panels and 64-query blocks; bidirectional (BERT) and causal; tiled and sgemm */
            static const int pad_a[4] = {150, 1, 77, 64};
            static const int pad_b[3] = {17, 130, 2};
            int32_t *pa = make_pad(4, 150, pad_a), *pb = make_pad(3, 130, pad_b);
            test_vs_reference_mask(4, 150, 4, 2, 16, 0, 0.0f, 0, NULL, pa, " padding");
            test_vs_reference_mask(4, 150, 4, 4, 12, 0, 0.0f, 0, NULL, pa, " padding");
            test_vs_reference_mask(3, 130, 4, 1, 64, 0, 0.3f, 2, NULL, pb, " padding");
            test_vs_reference_mask(4, 150, 4, 2, 16, 1, 0.0f, 0, NULL, pa, " padding");
            test_vs_reference_mask(3, 130, 3, 3, 12, 1, 0.2f, 0, NULL, pb, " padding");
            /* bidirectional document masks [doc_start, key_end) */
            static const int lens_a[3][8] = {{1, 1, 70, 5, 60}, {64, 64, 1}, {150}};
            static const int lens_c[1][8] = {{20, 13, 100, 1}};
            int32_t *da = make_docs(3, 150, lens_a), *dc = make_docs(1, 200, lens_c);
            int32_t *ea = make_doc_ends(3, 150, da), *ec = make_doc_ends(1, 200, dc);
            test_vs_reference_mask(3, 150, 4, 2, 16, 0, 0.0f, 0, da, ea, " key ends");
            test_vs_reference_mask(3, 150, 2, 1, 64, 0, 0.3f, 1, da, ea, " key ends");
            test_vs_reference_mask(1, 200, 2, 2, 80, 0, 0.0f, 0, dc, ec, " key ends");
            test_vs_reference_mask(1, 200, 3, 1, 8, 0, 0.0f, 0, dc, ec, " key ends");
            /* causal documents with key ends too (each document ends where it ends: no change),
             * and causal documents of a padded batch */
            test_vs_reference_mask(3, 150, 4, 2, 16, 1, 0.0f, 0, da, ea, " key ends");
            int32_t *pd = make_pad(3, 150, (const int[3]){150, 70, 3});
            test_vs_reference_mask(3, 150, 4, 2, 16, 1, 0.2f, 0, da, pd, " padding");
            /* rows that see no key: documents whose rows end before they start (rows 30..39 of
             * sample 0, and its rows past 100), a sample of length 0; left padding (doc_start
             * the first real token, rows before it see none under the causal mask) */
            const int64_t T = 130;
            int32_t *de = xmalloc(2 * T * sizeof(int32_t)), *ee = xmalloc(2 * T * sizeof(int32_t));
            for (int64_t t = 0; t < T; t++) {
                de[t] = t < 30 ? 0 : t < 100 ? 30 : 100;
                ee[t] = t < 40 ? 30 : 100;
                de[T + t] = 0;
                ee[T + t] = 0;
            }
            test_vs_reference_mask(2, T, 4, 2, 16, 0, 0.0f, 0, de, ee, " empty rows");
            test_vs_reference_mask(2, T, 2, 1, 12, 1, 0.3f, 0, de, ee, " empty rows");
            test_vs_reference_mask(2, T, 2, 2, 64, 0, 0.0f, 0, NULL, ee, " empty rows");
            for (int64_t t = 0; t < T; t++) {
                de[t] = 45;
                de[T + t] = 1;
            }
            test_vs_reference_mask(2, T, 4, 2, 16, 0, 0.0f, 0, de, NULL, " left padding");
            test_vs_reference_mask(2, T, 4, 2, 16, 1, 0.0f, 0, de, NULL, " left padding");
            test_vs_reference_mask(2, T, 2, 1, 12, 0, 0.2f, 0, de, NULL, " left padding");
            free(pa), free(pb), free(da), free(dc), free(ea), free(ec), free(pd);
            free(de), free(ee);
            test_pad_isolation(150, 4, 2, 16, 0);
            test_pad_isolation(150, 2, 2, 12, 0);
            test_pad_isolation(100, 4, 1, 64, 1);
        }
        test_finite_differences(1, 0.0f, 2, 1);
        test_finite_differences(0, 0.0f, 2, 2);
        test_finite_differences(1, 0.3f, 4, 2);
        test_finite_differences_doc(1, 0.0f, 2, 1, 1);
        test_finite_differences_doc(1, 0.3f, 4, 2, 1);
        test_finite_differences_mask(0, 0.0f, 2, 1, 1, 0); /* bidirectional documents */
        test_finite_differences_mask(0, 0.3f, 4, 2, 1, 0);
        test_finite_differences_mask(0, 0.0f, 2, 2, 0, 1); /* padding */
        test_finite_differences_mask(0, 0.3f, 4, 2, 0, 1);
        test_finite_differences_mask(1, 0.0f, 4, 2, 0, 1); /* causal with key ends */
        test_dropout_layout();
        test_rope(2, 33, 4, 2, 16, 0);
        test_rope(1, 20, 4, 1, 64, 1000);
        test_rope(1, 9, 2, 2, 8, 5);
        /* --rotary-percent: the first half (a third) of each head rotates */
        test_rope_pos(2, 33, 4, 2, 16, 0, NULL, &(struct loom_rope){.theta = 10000.0, .dims = 8});
        test_rope_pos(1, 20, 4, 1, 12, 3, NULL, &(struct loom_rope){.theta = 500.0, .dims = 4});
        /* Llama 3.1's scaling, an original context of 64 so that its three bands (kept, scaled,
         * interpolated) all hold some of the 32 frequencies; with partial rotary too */
        const struct loom_rope llama3 = {.theta = 10000.0,
                                         .factor = 8.0,
                                         .low_freq_factor = 1.0,
                                         .high_freq_factor = 4.0,
                                         .original_max_positions = 64};
        test_rope_pos(1, 40, 4, 2, 64, 100, NULL, &llama3);
        struct loom_rope both = llama3;
        both.dims = 32;
        test_rope_pos(1, 40, 2, 1, 64, 0, NULL, &both);
        /* positions interpolated (--rotary-seq-len-interpolation-factor) */
        test_rope_pos(2, 33, 4, 2, 16, 0, NULL,
                      &(struct loom_rope){.theta = 10000.0, .interpolation = 4.0});
        both.interpolation = 2.0;
        test_rope_pos(1, 40, 2, 1, 64, 0, NULL, &both);
        {
            static const int lens[2][8] = {{1, 5, 12, 1}, {30}};
            test_rope_docs(2, 33, 4, 2, 16, 0, lens);
            test_rope_docs(2, 33, 2, 1, 64, 7, lens);
        }
        rc = expect_finish("test_attention");
    }
    loom_backend_destroy(g_be);
    return rc;
}
