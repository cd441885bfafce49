/* Where the time of one CPU training step goes: the op sequence of a GPT training step (the
 * same calls, shapes and buffers as src/models/gpt.c, no dropout), each op timed on its own and
 * summed per op family, plus the step's optimizer part (gradient zeroing, norm, AdamW over the
 * parameter table).
 *
 *   bench_ops [L C NH T B V [STEPS]]     defaults: 4 256 4 256 8 8192 10
 *
 * Prints, per family, the median over STEPS steps (after two warm-up steps) of its milliseconds
 * per step, its share of the step, and GFLOP/s for the matrix products; then the median step
 * time and tokens/s. The sum of the families is the step (nothing else runs in between).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/backend.h"

enum fam { F_LINEAR, F_HEAD, F_ATTN, F_NORM, F_GELU, F_XENT, F_EMBED, F_ADD, F_OPTIM, F_COUNT };
static const char *fam_name[F_COUNT] = {
    "linear (blocks)", "linear (output layer)", "attention", "layernorm", "gelu",
    "cross-entropy", "embedding", "residual add", "zero+norm+adamw",
};

static double g_acc[F_COUNT];
#define TIMED(f, call)                                                                        \
    do {                                                                                      \
        double t0_ = omp_get_wtime();                                                         \
        call;                                                                                 \
        g_acc[f] += omp_get_wtime() - t0_;                                                    \
    } while (0)

static float *alloc_f(struct loom_backend *be, int64_t n, unsigned *seed, float scale) {
    float *p = be->ops->malloc(be, (size_t)n * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_ops: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = scale * ((float)(*seed >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct layer {
    float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc1_w, *fc1_b,
        *fc2_w, *fc2_b;
};
struct acts {
    float *x, *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *lse, *xmid, *ln2, *ln2_mean, *ln2_rstd,
        *fc1, *act;
};

int main(int argc, char **argv) {
    int64_t L = 4, C = 256, NH = 4, T = 256, B = 8, V = 8192;
    int steps = 10;
    if (argc >= 7) {
        L = atoll(argv[1]);
        C = atoll(argv[2]);
        NH = atoll(argv[3]);
        T = atoll(argv[4]);
        B = atoll(argv[5]);
        V = atoll(argv[6]);
    }
    if (argc >= 8) steps = atoi(argv[7]);
    if (L < 1 || C < 1 || NH < 1 || C % NH || T < 1 || B < 1 || V < 1 || steps < 1) {
        fprintf(stderr, "usage: bench_ops [L C NH T B V [STEPS]]\n");
        return 1;
    }
    const int64_t N = B * T, F = 4 * C, HS = C / NH, Vp = (V + 127) / 128 * 128;
    struct loom_backend *be;
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 1;
    unsigned seed = 12345;

    /* parameters and gradients, one flat buffer each, in the model's table order */
    int64_t per_layer = 4 * C + 3 * C * C + 3 * C + C * C + C + F * C + F + C * F + C;
    int64_t nparam = Vp * C + T * C + L * per_layer + 2 * C;
    float *pmem = alloc_f(be, nparam, &seed, 0.04f), *gmem = alloc_f(be, nparam, &seed, 0.0f);
    float *mm = alloc_f(be, nparam, &seed, 0.0f), *vv = alloc_f(be, nparam, &seed, 0.0f);
    int64_t sizes[4096], nsizes = 0, off = 0;
    struct layer *w = calloc((size_t)L, sizeof *w), *g = calloc((size_t)L, sizeof *g);
    struct acts *a = calloc((size_t)L, sizeof *a);
    if (!w || !g || !a || 12 * L + 4 > 4096) return 1;
#define TAKE(n) (sizes[nsizes++] = (n), off += (n), off - (n))
    int64_t o_wte = TAKE(Vp * C), o_wpe = TAKE(T * C);
    for (int64_t l = 0; l < L; l++) {
        int64_t o[12] = {TAKE(C),     TAKE(C), TAKE(3 * C * C), TAKE(3 * C), TAKE(C * C), TAKE(C),
                         TAKE(C),     TAKE(C), TAKE(F * C),     TAKE(F),     TAKE(C * F), TAKE(C)};
        float **pw = &w[l].ln1_w, **pg = &g[l].ln1_w;
        for (int k = 0; k < 12; k++) {
            pw[k] = pmem + o[k];
            pg[k] = gmem + o[k];
        }
        for (int64_t c = 0; c < C; c++) w[l].ln1_w[c] = w[l].ln2_w[c] = 1.0f;
    }
    int64_t o_lnfw = TAKE(C), o_lnfb = TAKE(C);
#undef TAKE
    for (int64_t c = 0; c < C; c++) pmem[o_lnfw + c] = 1.0f;

    /* activations (as gpt.c lays them out) */
    for (int64_t l = 0; l < L; l++) {
        a[l].x = alloc_f(be, N * C, &seed, 1.0f);
        a[l].ln1 = alloc_f(be, N * C, &seed, 1.0f);
        a[l].ln1_mean = alloc_f(be, N, &seed, 0.0f);
        a[l].ln1_rstd = alloc_f(be, N, &seed, 0.0f);
        a[l].qkv = alloc_f(be, N * 3 * C, &seed, 1.0f);
        a[l].att = alloc_f(be, N * C, &seed, 1.0f);
        a[l].lse = alloc_f(be, B * NH * T, &seed, 0.0f);
        a[l].xmid = alloc_f(be, N * C, &seed, 1.0f);
        a[l].ln2 = alloc_f(be, N * C, &seed, 1.0f);
        a[l].ln2_mean = alloc_f(be, N, &seed, 0.0f);
        a[l].ln2_rstd = alloc_f(be, N, &seed, 0.0f);
        a[l].fc1 = alloc_f(be, N * F, &seed, 1.0f);
        a[l].act = alloc_f(be, N * F, &seed, 1.0f);
    }
    float *x_out = alloc_f(be, N * C, &seed, 1.0f), *lnf = alloc_f(be, N * C, &seed, 1.0f);
    float *lnf_mean = alloc_f(be, N, &seed, 0.0f), *lnf_rstd = alloc_f(be, N, &seed, 0.0f);
    float *logits = alloc_f(be, N * Vp, &seed, 1.0f), *stats = alloc_f(be, 3 * N, &seed, 0.0f);
    float *gstats = alloc_f(be, 2 * N, &seed, 0.0f), *dloss = alloc_f(be, N, &seed, 0.0f);
    float *dres = alloc_f(be, N * C, &seed, 0.0f), *dc = alloc_f(be, N * C, &seed, 0.0f);
    float *full = alloc_f(be, N * C, &seed, 0.0f), *dwide = alloc_f(be, N * 4 * C, &seed, 0.0f);
    float *dwide2 = alloc_f(be, N * 4 * C, &seed, 0.0f);
    int32_t *tokens = malloc((size_t)N * sizeof(int32_t)), *targets = malloc((size_t)N * sizeof(int32_t));
    if (!tokens || !targets) return 1;
    for (int64_t i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        tokens[i] = (int32_t)((seed >> 4) % (unsigned)V);
        targets[i] = (int32_t)((seed >> 12) % (unsigned)V);
        dloss[i] = 1.0f / (float)N;
    }
    struct loom_attn ap = {.B = B, .T = T, .NH = NH, .NKV = NH, .HS = HS, .causal = 1,
                           .scale = (float)(1.0 / sqrt((double)HS)), .NH_global = NH};

    double *per[F_COUNT], *tot = malloc((size_t)steps * sizeof(double));
    for (int f = 0; f < F_COUNT; f++) per[f] = malloc((size_t)steps * sizeof(double));
    if (!tot) return 1;
    for (int s = -2; s < steps; s++) {
        memset(g_acc, 0, sizeof g_acc);
        /* forward */
        TIMED(F_EMBED, loom_op(be, embedding_forward, a[0].x, tokens, NULL, pmem + o_wte,
                               pmem + o_wpe, B, T, C, 0, Vp, 0));
        for (int64_t l = 0; l < L; l++) {
            struct acts *al = &a[l];
            struct layer *wl = &w[l];
            float *y = l + 1 < L ? a[l + 1].x : x_out;
            TIMED(F_NORM, loom_op(be, layernorm_forward, al->ln1, LOOM_DTYPE_F32, al->ln1_mean,
                                  al->ln1_rstd, al->x, wl->ln1_w, wl->ln1_b, N, C, 1e-5f));
            TIMED(F_LINEAR, loom_op(be, linear_forward, al->qkv, al->ln1, wl->qkv_w, wl->qkv_b, N,
                                    C, 3 * C));
            TIMED(F_ATTN, loom_op(be, attention_forward, al->att, al->lse, al->qkv, &ap));
            TIMED(F_LINEAR, loom_op(be, linear_forward, al->xmid, al->att, wl->proj_w, wl->proj_b,
                                    N, C, C));
            TIMED(F_ADD, loom_op(be, add, al->xmid, al->xmid, al->x, N * C));
            TIMED(F_NORM, loom_op(be, layernorm_forward, al->ln2, LOOM_DTYPE_F32, al->ln2_mean,
                                  al->ln2_rstd, al->xmid, wl->ln2_w, wl->ln2_b, N, C, 1e-5f));
            TIMED(F_LINEAR, loom_op(be, linear_forward, al->fc1, al->ln2, wl->fc1_w, wl->fc1_b, N,
                                    C, F));
            TIMED(F_GELU, loom_op(be, gelu_forward, LOOM_GELU_TANH, al->act, al->fc1, N * F));
            TIMED(F_LINEAR, loom_op(be, linear_forward, y, al->act, wl->fc2_w, wl->fc2_b, N, F, C));
            TIMED(F_ADD, loom_op(be, add, y, y, al->xmid, N * C));
        }
        TIMED(F_NORM, loom_op(be, layernorm_forward, lnf, LOOM_DTYPE_F32, lnf_mean, lnf_rstd, x_out,
                              pmem + o_lnfw, pmem + o_lnfb, N, C, 1e-5f));
        TIMED(F_HEAD, loom_op(be, linear_forward, logits, lnf, pmem + o_wte, NULL, N, C, Vp));
        TIMED(F_XENT, loom_op(be, xent_forward, stats, logits, targets, N, Vp, 0, V));
        for (int64_t i = 0; i < N; i++) {
            gstats[2 * i] = stats[3 * i];
            gstats[2 * i + 1] = stats[3 * i + 1];
        }
        /* backward */
        TIMED(F_XENT, loom_op(be, xent_backward, logits, logits, targets, gstats, dloss, N, Vp, 0, V));
        TIMED(F_HEAD, loom_op(be, linear_backward, dc, gmem + o_wte, NULL, logits, lnf,
                              pmem + o_wte, N, C, Vp));
        TIMED(F_NORM, be->ops->zero(be, dres, (size_t)(N * C) * sizeof(float)));
        TIMED(F_NORM,
              loom_op(be, layernorm_backward, dres, NULL, NULL, gmem + o_lnfw, gmem + o_lnfb, dc,
                      LOOM_DTYPE_F32, x_out, pmem + o_lnfw, lnf_mean, lnf_rstd, N, C));
        for (int64_t l = L - 1; l >= 0; l--) {
            struct acts *al = &a[l];
            struct layer *wl = &w[l], *gl = &g[l];
            TIMED(F_LINEAR, loom_op(be, linear_backward, dwide2, gl->fc2_w, gl->fc2_b, dres,
                                    al->act, wl->fc2_w, N, F, C));
            TIMED(F_GELU,
                  loom_op(be, gelu_backward, LOOM_GELU_TANH, dwide, dwide2, al->fc1, N * F));
            TIMED(F_LINEAR, loom_op(be, linear_backward, full, gl->fc1_w, gl->fc1_b, dwide,
                                    al->ln2, wl->fc1_w, N, C, F));
            TIMED(F_NORM,
                  loom_op(be, layernorm_backward, dres, NULL, NULL, gl->ln2_w, gl->ln2_b, full,
                          LOOM_DTYPE_F32, al->xmid, wl->ln2_w, al->ln2_mean, al->ln2_rstd, N, C));
            TIMED(F_LINEAR, loom_op(be, linear_backward, dwide2, gl->proj_w, gl->proj_b, dres,
                                    al->att, wl->proj_w, N, C, C));
            TIMED(F_ATTN, loom_op(be, attention_backward, dwide, dwide2, al->att, al->lse, al->qkv,
                                  &ap));
            TIMED(F_LINEAR, loom_op(be, linear_backward, full, gl->qkv_w, gl->qkv_b, dwide,
                                    al->ln1, wl->qkv_w, N, C, 3 * C));
            TIMED(F_NORM,
                  loom_op(be, layernorm_backward, dres, NULL, NULL, gl->ln1_w, gl->ln1_b, full,
                          LOOM_DTYPE_F32, al->x, wl->ln1_w, al->ln1_mean, al->ln1_rstd, N, C));
        }
        TIMED(F_EMBED, loom_op(be, embedding_backward, gmem + o_wte, gmem + o_wpe, dres, tokens,
                               NULL, B, T, C, 0, Vp, 0));
        /* optimizer part of the step, per parameter tensor as src/optim/adamw.c walks it */
        double t0 = omp_get_wtime(), ss = 0.0;
        int64_t po = 0;
        for (int64_t k = 0; k < nsizes; po += sizes[k++]) ss += loom_op(be, sumsq, gmem + po, sizes[k]);
        po = 0;
        for (int64_t k = 0; k < nsizes; po += sizes[k++])
            loom_op(be, adamw, pmem + po, gmem + po, mm + po, vv + po, sizes[k], 1e-6f, 0.9f,
                    0.999f, 1e-8f, 0.0f, s + 3, (float)(1.0 / (sqrt(ss) + 1.0)));
        be->ops->zero(be, gmem, (size_t)nparam * sizeof(float));
        g_acc[F_OPTIM] += omp_get_wtime() - t0;
        if (s >= 0) {
            tot[s] = 0.0;
            for (int f = 0; f < F_COUNT; f++) {
                per[f][s] = g_acc[f];
                tot[s] += g_acc[f];
            }
        }
    }
    double flops_blocks = 2.0 * 3.0 * (double)N * (double)L * (3.0 * C * C + C * C + 2.0 * F * C);
    double flops_head = 2.0 * 3.0 * (double)N * (double)C * (double)Vp;
    double step = median(tot, steps);
    printf("bench_ops: L=%lld C=%lld NH=%lld T=%lld B=%lld V=%lld (padded %lld), %d threads, "
           "median of %d steps\n", (long long)L, (long long)C, (long long)NH, (long long)T,
           (long long)B, (long long)V, (long long)Vp, omp_get_max_threads(), steps);
    for (int f = 0; f < F_COUNT; f++) {
        double m = median(per[f], steps);
        printf("  %-22s %8.2f ms  %5.1f%%", fam_name[f], 1e3 * m, 100.0 * m / step);
        if (f == F_LINEAR) printf("  %6.1f GFLOP/s", flops_blocks / m / 1e9);
        if (f == F_HEAD) printf("  %6.1f GFLOP/s", flops_head / m / 1e9);
        printf("\n");
    }
    printf("  %-22s %8.2f ms  %.0f tokens/s\n", "step", 1e3 * step, (double)N / step);
    return 0;
}
