/* CPU LayerNorm and RMSNorm: forward against double loops (outputs and saved statistics),
 * backward against central differences of sum(out * R) in double, the accumulation rules
 * (dinp, dw, db all +=), b == NULL, inputs with a large mean, and thread-count behaviour. */
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;
static const float EPS = 1e-5f;

struct prob {
    int64_t N, C;
    int rms;         /* 0: LayerNorm, 1: RMSNorm */
    int has_b;       /* LayerNorm bias present */
    double *x, *w, *b, *R, *out, *mean, *rstd;
};

static void ref_forward(struct prob *p) {
    for (int64_t i = 0; i < p->N; i++) {
        const double *x = p->x + i * p->C;
        double m = 0.0, v = 0.0;
        if (!p->rms) {
            for (int64_t c = 0; c < p->C; c++) m += x[c];
            m /= (double)p->C;
        }
        for (int64_t c = 0; c < p->C; c++) v += (x[c] - m) * (x[c] - m);
        double r = 1.0 / sqrt(v / (double)p->C + (double)EPS);
        for (int64_t c = 0; c < p->C; c++)
            p->out[i * p->C + c] =
                (x[c] - m) * r * p->w[c] + (!p->rms && p->has_b ? p->b[c] : 0.0);
        p->mean[i] = m;
        p->rstd[i] = r;
    }
}

static double loss_fn(void *ctx) {
    struct prob *p = ctx;
    ref_forward(p);
    double s = 0.0;
    for (int64_t i = 0; i < p->N * p->C; i++) s += p->out[i] * p->R[i];
    return s;
}

/* One full check of one norm on one shape. fd_count: how many coordinates of each input the
 * central differences cover (all when >= the size). */
static void run(int rms, int has_b, int64_t N, int64_t C, float offset, int64_t fd_count,
                double fwd_tol) {
    const int64_t n = N * C;
    char name[128];
    const char *kind = rms ? "rmsnorm" : has_b ? "layernorm" : "layernorm (b=NULL)";
    float *x = ops_alloc((size_t)n * sizeof *x), *R = ops_alloc((size_t)n * sizeof *R);
    float *w = ops_alloc((size_t)C * sizeof *w), *b = ops_alloc((size_t)C * sizeof *b);
    float *out = ops_alloc((size_t)n * sizeof *out);
    float *mean = ops_alloc((size_t)N * sizeof *mean), *rstd = ops_alloc((size_t)N * sizeof *rstd);
    ops_fill(x, n, 20 + (uint64_t)C, offset - 2.0f, offset + 2.0f);
    ops_fill(R, n, 21, -1.0f, 1.0f);
    ops_fill(w, C, 22, 0.5f, 1.5f);
    ops_fill(b, C, 23, -0.5f, 0.5f);

    struct prob p = {N, C, rms, has_b, ops_to_double(x, n), ops_to_double(w, C),
                     ops_to_double(b, C), ops_to_double(R, n), ops_alloc((size_t)n * sizeof(double)),
                     ops_alloc((size_t)N * sizeof(double)), ops_alloc((size_t)N * sizeof(double))};
    ref_forward(&p);
    if (rms)
        loom_op(be, rmsnorm_forward, out, LOOM_DTYPE_F32, rstd, x, w, N, C, EPS);
    else
        loom_op(be, layernorm_forward, out, LOOM_DTYPE_F32, mean, rstd, x, w, has_b ? b : NULL, N,
                C, EPS);
    snprintf(name, sizeof name, "%s forward N=%lld C=%lld mean~%g: out", kind, (long long)N,
             (long long)C, offset);
    ops_check(name, ops_max_norm_err(out, p.out, n), fwd_tol);
    snprintf(name, sizeof name, "%s forward N=%lld C=%lld: saved rstd", kind, (long long)N,
             (long long)C);
    ops_check(name, ops_max_rel_err(rstd, p.rstd, N), 1e-6);
    if (!rms) {
        snprintf(name, sizeof name, "%s forward N=%lld C=%lld: saved mean", kind, (long long)N,
                 (long long)C);
        ops_check(name, ops_max_rel_err(mean, p.mean, N), 1e-6);
    }

    /* backward onto zeroed buffers against central differences */
    float *dx = ops_alloc((size_t)n * sizeof *dx), *dw = ops_alloc((size_t)C * sizeof *dw);
    float *db = ops_alloc((size_t)C * sizeof *db);
    memset(dx, 0, (size_t)n * sizeof *dx);
    memset(dw, 0, (size_t)C * sizeof *dw);
    memset(db, 0, (size_t)C * sizeof *db);
    if (rms)
        loom_op(be, rmsnorm_backward, dx, NULL, NULL, dw, R, LOOM_DTYPE_F32, x, w, rstd, N, C);
    else
        loom_op(be, layernorm_backward, dx, NULL, NULL, dw, has_b ? db : NULL, R, LOOM_DTYPE_F32, x,
                w, mean, rstd, N, C);
    const double h = 1e-4, tol = 1e-4;
    snprintf(name, sizeof name, "%s backward dinp against central differences", kind);
    ops_check(name, ops_grad_check_some(loss_fn, &p, p.x, n, dx, h, fd_count), tol);
    snprintf(name, sizeof name, "%s backward dw against central differences", kind);
    ops_check(name, ops_grad_check_some(loss_fn, &p, p.w, C, dw, h, fd_count), tol);
    if (!rms && has_b) {
        snprintf(name, sizeof name, "%s backward db against central differences", kind);
        ops_check(name, ops_grad_check_some(loss_fn, &p, p.b, C, db, h, fd_count), tol);
    }

    /* backward onto pre-filled buffers: dinp, dw and db all accumulate */
    float *ax = ops_alloc((size_t)n * sizeof *ax), *aw = ops_alloc((size_t)C * sizeof *aw);
    float *ab = ops_alloc((size_t)C * sizeof *ab);
    ops_fill(ax, n, 24, -1.0f, 1.0f);
    ops_fill(aw, C, 25, -1.0f, 1.0f);
    ops_fill(ab, C, 26, -1.0f, 1.0f);
    double *ex = ops_to_double(ax, n), *ew = ops_to_double(aw, C), *eb = ops_to_double(ab, C);
    for (int64_t i = 0; i < n; i++) ex[i] += dx[i];
    for (int64_t c = 0; c < C; c++) ew[c] += dw[c];
    for (int64_t c = 0; c < C; c++) eb[c] += db[c];
    if (rms)
        loom_op(be, rmsnorm_backward, ax, NULL, NULL, aw, R, LOOM_DTYPE_F32, x, w, rstd, N, C);
    else
        loom_op(be, layernorm_backward, ax, NULL, NULL, aw, has_b ? ab : NULL, R, LOOM_DTYPE_F32, x,
                w, mean, rstd, N, C);
    double e = ops_max_rel_err(ax, ex, n), e2 = ops_max_rel_err(aw, ew, C);
    if (e2 > e) e = e2;
    if (!rms && has_b) {
        e2 = ops_max_rel_err(ab, eb, C);
        if (e2 > e) e = e2;
    }
    snprintf(name, sizeof name, "%s backward accumulates (+=) into dinp, dw%s", kind,
             !rms && has_b ? ", db" : "");
    ops_check(name, e, 1e-6);

    /* dinp_sum: += the column sums of the updated dinp (the next product's bias gradient) */
    float *sx = ops_alloc((size_t)n * sizeof *sx), *ss = ops_alloc((size_t)C * sizeof *ss);
    memcpy(sx, ax, (size_t)n * sizeof *sx);
    ops_fill(ss, C, 27, -1.0f, 1.0f);
    double *es = ops_to_double(ss, C);
    if (rms)
        loom_op(be, rmsnorm_backward, sx, NULL, ss, aw, R, LOOM_DTYPE_F32, x, w, rstd, N, C);
    else
        loom_op(be, layernorm_backward, sx, NULL, ss, aw, NULL, R, LOOM_DTYPE_F32, x, w, mean, rstd,
                N, C);
    for (int64_t i = 0; i < n; i++)
        es[i % C] += (double)sx[i];
    /* against the largest sum (two float roundings: the sum, then the add onto ss) */
    double dmax = 0.0, emax = 0.0;
    for (int64_t c = 0; c < C; c++) {
        dmax = fmax(dmax, fabs((double)ss[c] - es[c]));
        emax = fmax(emax, fabs(es[c]));
    }
    snprintf(name, sizeof name, "%s backward dinp_sum += column sums of dinp", kind);
    ops_check(name, dmax / emax, 1e-6);
    free(sx), free(ss), free(es);
    free(ax), free(aw), free(ab), free(ex), free(ew), free(eb);

    free(x), free(R), free(w), free(b), free(out), free(mean), free(rstd);
    free(dx), free(dw), free(db);
    free(p.x), free(p.w), free(p.b), free(p.R), free(p.out), free(p.mean), free(p.rstd);
}

/* Backward on a larger problem with 1, 2 and 3 threads: close to each other, and bit-identical
 * run to run for a fixed thread count. */
static void threads(int rms) {
    const int64_t N = 96, C = 300, n = N * C;
    float *x = ops_alloc((size_t)n * sizeof *x), *g = ops_alloc((size_t)n * sizeof *g);
    float *w = ops_alloc((size_t)C * sizeof *w), *b = ops_alloc((size_t)C * sizeof *b);
    float *out = ops_alloc((size_t)n * sizeof *out);
    float *mean = ops_alloc((size_t)N * sizeof *mean), *rstd = ops_alloc((size_t)N * sizeof *rstd);
    ops_fill(x, n, 30, -2.0f, 2.0f);
    ops_fill(g, n, 31, -1.0f, 1.0f);
    ops_fill(w, C, 32, 0.5f, 1.5f);
    ops_fill(b, C, 33, -0.5f, 0.5f);
    const size_t sz = (size_t)(n + 2 * C);
    float *res[4];
    int maxt = omp_get_max_threads();
    for (int k = 0; k < 4; k++) {
        int nt = k < 3 ? k + 1 : 2;
        omp_set_num_threads(nt);
        if (rms)
            loom_op(be, rmsnorm_forward, out, LOOM_DTYPE_F32, rstd, x, w, N, C, EPS);
        else
            loom_op(be, layernorm_forward, out, LOOM_DTYPE_F32, mean, rstd, x, w, b, N, C, EPS);
        res[k] = ops_alloc(sz * sizeof(float));
        memset(res[k], 0, sz * sizeof(float));
        if (rms)
            loom_op(be, rmsnorm_backward, res[k], NULL, NULL, res[k] + n, g, LOOM_DTYPE_F32, x, w,
                    rstd, N, C);
        else
            loom_op(be, layernorm_backward, res[k], NULL, NULL, res[k] + n, res[k] + n + C, g,
                    LOOM_DTYPE_F32, x, w, mean, rstd, N, C);
    }
    omp_set_num_threads(maxt);
    const char *kind = rms ? "rmsnorm" : "layernorm";
    char name[128];
    snprintf(name, sizeof name, "%s backward N=96 C=300: 1 vs 2 vs 3 threads", kind);
    double e = ops_max_rel_err_f(res[1], res[0], (int64_t)sz);
    double e3 = ops_max_rel_err_f(res[2], res[0], (int64_t)sz);
    ops_check(name, e > e3 ? e : e3, 1e-6);
    snprintf(name, sizeof name, "%s backward bit-identical run to run (2 threads)", kind);
    ops_check_true(name, memcmp(res[1], res[3], sz * sizeof(float)) == 0);
    for (int k = 0; k < 4; k++) free(res[k]);
    free(x), free(g), free(w), free(b), free(out), free(mean), free(rstd);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    for (int rms = 0; rms <= 1; rms++) {
        run(rms, 1, 7, 33, 0.5f, 1 << 30, 1e-6);
        if (!rms) run(0, 0, 7, 33, 0.5f, 1 << 30, 1e-6);
        /* threaded path, central differences on a sample of coordinates */
        run(rms, 1, 64, 300, 0.0f, 150, 1e-6);
        /* a residual stream with a large mean: one-pass E[x^2] - E[x]^2 in float would lose the
         * variance entirely; what is left is the float rounding of the saved mean (ulp(100)/2
         * against a spread of ~1.2) */
        run(rms, 1, 5, 768, 100.0f, 100, 1e-5);
        threads(rms);
    }
    loom_backend_destroy(be);
    return ops_finish();
}
