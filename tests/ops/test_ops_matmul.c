/* CPU linear layer: forward against double loops (with and without bias), backward against
 * double loops and central differences; dinp assigned (pre-filled with NaN), dw and db
 * accumulate, dinp/db NULL skip; shapes chosen so that each product is cut along each of its
 * possible dimensions; thread-count behaviour. */
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;

struct prob {
    int64_t N, C, OC;
    double *x, *w, *b, *R, *out;
};

static void ref_forward(struct prob *p) {
    for (int64_t i = 0; i < p->N; i++)
        for (int64_t o = 0; o < p->OC; o++) {
            double s = p->b ? p->b[o] : 0.0;
            for (int64_t c = 0; c < p->C; c++) s += p->x[i * p->C + c] * p->w[o * p->C + c];
            p->out[i * p->OC + o] = s;
        }
}

static double loss_fn(void *ctx) {
    struct prob *p = ctx;
    ref_forward(p);
    double s = 0.0;
    for (int64_t i = 0; i < p->N * p->OC; i++) s += p->out[i] * p->R[i];
    return s;
}

static void run(int64_t N, int64_t C, int64_t OC, int fd) {
    char name[128], shape[48];
    snprintf(shape, sizeof shape, "N=%lld C=%lld OC=%lld", (long long)N, (long long)C,
             (long long)OC);
    float *x = ops_alloc((size_t)(N * C) * sizeof *x), *w = ops_alloc((size_t)(OC * C) * sizeof *w);
    float *b = ops_alloc((size_t)OC * sizeof *b), *R = ops_alloc((size_t)(N * OC) * sizeof *R);
    float *out = ops_alloc((size_t)(N * OC) * sizeof *out);
    ops_fill(x, N * C, 40, -1.0f, 1.0f);
    ops_fill(w, OC * C, 41, -1.0f, 1.0f);
    ops_fill(b, OC, 42, -1.0f, 1.0f);
    ops_fill(R, N * OC, 43, -1.0f, 1.0f);
    struct prob p = {N, C, OC, ops_to_double(x, N * C), ops_to_double(w, OC * C),
                     ops_to_double(b, OC), ops_to_double(R, N * OC),
                     ops_alloc((size_t)(N * OC) * sizeof(double))};

    /* forward: out is pre-filled with NaN, which must not leak through (beta = 0 path) */
    for (int64_t i = 0; i < N * OC; i++) out[i] = NAN;
    loom_op(be, linear_forward, out, x, w, b, N, C, OC);
    ref_forward(&p);
    snprintf(name, sizeof name, "forward with bias %s", shape);
    ops_check(name, ops_max_norm_err(out, p.out, N * OC), 1e-6);
    for (int64_t i = 0; i < N * OC; i++) out[i] = NAN;
    loom_op(be, linear_forward, out, x, w, NULL, N, C, OC);
    double *bsave = p.b;
    p.b = NULL;
    ref_forward(&p);
    p.b = bsave;
    snprintf(name, sizeof name, "forward without bias %s", shape);
    ops_check(name, ops_max_norm_err(out, p.out, N * OC), 1e-6);

    /* backward: dinp pre-filled with NaN (assigned), dw and db pre-filled (accumulate) */
    float *dx = ops_alloc((size_t)(N * C) * sizeof *dx), *dw = ops_alloc((size_t)(OC * C) * sizeof *dw);
    float *db = ops_alloc((size_t)OC * sizeof *db);
    for (int64_t i = 0; i < N * C; i++) dx[i] = NAN;
    ops_fill(dw, OC * C, 44, -1.0f, 1.0f);
    ops_fill(db, OC, 45, -1.0f, 1.0f);
    double *rx = ops_alloc((size_t)(N * C) * sizeof *rx);
    double *rw = ops_to_double(dw, OC * C), *rb = ops_to_double(db, OC);
    loom_op(be, linear_backward, dx, dw, db, R, x, w, N, C, OC);
    for (int64_t i = 0; i < N; i++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0.0;
            for (int64_t o = 0; o < OC; o++) s += p.R[i * OC + o] * p.w[o * C + c];
            rx[i * C + c] = s;
        }
    for (int64_t o = 0; o < OC; o++) {
        for (int64_t c = 0; c < C; c++) {
            double s = 0.0;
            for (int64_t i = 0; i < N; i++) s += p.R[i * OC + o] * p.x[i * C + c];
            rw[o * C + c] += s;
        }
        for (int64_t i = 0; i < N; i++) rb[o] += p.R[i * OC + o];
    }
    snprintf(name, sizeof name, "backward dinp = dout.w (assigned over NaN) %s", shape);
    ops_check(name, ops_max_norm_err(dx, rx, N * C), 1e-6);
    snprintf(name, sizeof name, "backward dw += dout^T.inp %s", shape);
    ops_check(name, ops_max_norm_err(dw, rw, OC * C), 1e-6);
    snprintf(name, sizeof name, "backward db += column sums %s", shape);
    ops_check(name, ops_max_rel_err(db, rb, OC), 1e-6);

    /* dinp NULL and db NULL: dw still accumulates the same amount, db untouched */
    float *dw2 = ops_alloc((size_t)(OC * C) * sizeof *dw2), *db2 = ops_alloc((size_t)OC * sizeof *db2);
    ops_fill(dw2, OC * C, 44, -1.0f, 1.0f);
    ops_fill(db2, OC, 45, -1.0f, 1.0f);
    loom_op(be, linear_backward, NULL, dw2, NULL, R, x, w, N, C, OC);
    snprintf(name, sizeof name, "backward with dinp=NULL, db=NULL: dw %s", shape);
    ops_check(name, ops_max_norm_err(dw2, rw, OC * C), 1e-6);
    int db_same = 1;
    float *db0 = ops_alloc((size_t)OC * sizeof *db0);
    ops_fill(db0, OC, 45, -1.0f, 1.0f);
    db_same = memcmp(db0, db2, (size_t)OC * sizeof *db0) == 0;
    snprintf(name, sizeof name, "backward with db=NULL leaves db alone %s", shape);
    ops_check_true(name, db_same);

    if (fd) {
        /* central differences of sum(out * R) with zeroed gradient buffers */
        memset(dw, 0, (size_t)(OC * C) * sizeof *dw);
        memset(db, 0, (size_t)OC * sizeof *db);
        loom_op(be, linear_backward, dx, dw, db, R, x, w, N, C, OC);
        snprintf(name, sizeof name, "backward dinp against central differences %s", shape);
        ops_check(name, ops_grad_check(loss_fn, &p, p.x, N * C, dx, 1e-3), 5e-5);
        snprintf(name, sizeof name, "backward dw against central differences %s", shape);
        ops_check(name, ops_grad_check(loss_fn, &p, p.w, OC * C, dw, 1e-3), 5e-5);
        snprintf(name, sizeof name, "backward db against central differences %s", shape);
        ops_check(name, ops_grad_check(loss_fn, &p, p.b, OC, db, 1e-3), 5e-5);
    }

    free(x), free(w), free(b), free(R), free(out), free(dx), free(dw), free(db), free(rx);
    free(rw), free(rb), free(dw2), free(db2), free(db0);
    free(p.x), free(p.w), free(p.b), free(p.R), free(p.out);
}

/* forward + backward with 1, 2 and 3 threads: close to each other; bit-identical run to run */
static void threads(int64_t N, int64_t C, int64_t OC) {
    float *x = ops_alloc((size_t)(N * C) * sizeof *x), *w = ops_alloc((size_t)(OC * C) * sizeof *w);
    float *b = ops_alloc((size_t)OC * sizeof *b), *g = ops_alloc((size_t)(N * OC) * sizeof *g);
    ops_fill(x, N * C, 46, -1.0f, 1.0f);
    ops_fill(w, OC * C, 47, -1.0f, 1.0f);
    ops_fill(b, OC, 48, -1.0f, 1.0f);
    ops_fill(g, N * OC, 49, -1.0f, 1.0f);
    const int64_t sz = N * OC + N * C + OC * C + OC;
    float *res[4];
    int maxt = omp_get_max_threads();
    for (int k = 0; k < 4; k++) {
        omp_set_num_threads(k < 3 ? k + 1 : 2);
        res[k] = ops_alloc((size_t)sz * sizeof(float));
        memset(res[k], 0, (size_t)sz * sizeof(float));
        float *o = res[k], *dx = o + N * OC, *dw = dx + N * C, *db = dw + OC * C;
        loom_op(be, linear_forward, o, x, w, b, N, C, OC);
        loom_op(be, linear_backward, dx, dw, db, g, x, w, N, C, OC);
    }
    omp_set_num_threads(maxt);
    char name[128];
    snprintf(name, sizeof name, "N=%lld C=%lld OC=%lld: 1 vs 2 vs 3 threads", (long long)N,
             (long long)C, (long long)OC);
    double *r0 = ops_alloc((size_t)sz * sizeof *r0);
    for (int64_t i = 0; i < sz; i++) r0[i] = res[0][i];
    double e = ops_max_norm_err(res[1], r0, sz), e3 = ops_max_norm_err(res[2], r0, sz);
    ops_check(name, e > e3 ? e : e3, 1e-6);
    snprintf(name, sizeof name, "N=%lld C=%lld OC=%lld: bit-identical run to run (2 threads)",
             (long long)N, (long long)C, (long long)OC);
    ops_check_true(name, memcmp(res[1], res[3], (size_t)sz * sizeof(float)) == 0);
    for (int k = 0; k < 4; k++) free(res[k]);
    free(r0), free(x), free(w), free(b), free(g);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    run(7, 33, 19, 1);
    run(1, 5, 3, 1);
    /* threaded shapes: forward cut along OC / N, dinp along N / C, dw along OC / C */
    run(70, 65, 90, 0);   /* forward: OC; dinp: N; dw: OC */
    run(100, 64, 40, 0);  /* forward: N;  dinp: N; dw: C */
    run(20, 96, 300, 0);  /* forward: OC; dinp: C; dw: OC */
    threads(70, 65, 90);
    threads(20, 96, 300);
    loom_backend_destroy(be);
    return ops_finish();
}
