/* CPU head norms (head_norm_forward, head_norm_backward): the query and key head vectors of a
 * qkv activation gathered by an index map built here from the layout (token, group, head), then
 * normalised and differentiated by plain double loops, against the ops in place on qkv:
 * normalised values, the kept inputs (bit for bit), mean and rstd, the input gradients, the
 * weight gradients accumulated onto nonzero values, the value heads untouched by both passes;
 * LayerNorm (with and without bias) and RMSNorm, grouped and plain attention, head sizes 8, 12
 * and 64, fp32 and bf16 arrays, one thread and several. For fp32 the double reference's own
 * backward is checked against central differences of its forward, and the backward is run twice
 * for the same bits. */
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;
static const float EPS = 1e-5f;

static float bf16_get(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static uint16_t bf16_round(float f) { /* nearest even; the test's values are finite */
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}
static float elem_get(const void *p, enum loom_dtype dt, int64_t i) {
    return dt == LOOM_DTYPE_BF16 ? bf16_get(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
static void elem_put(void *p, enum loom_dtype dt, int64_t i, float v) {
    if (dt == LOOM_DTYPE_BF16)
        ((uint16_t *)p)[i] = bf16_round(v);
    else
        ((float *)p)[i] = v;
}

struct hn {
    int rms, has_b;
    int64_t N, NH, NKV, HS, nq, nv, row;
    enum loom_dtype dt;
    int64_t *off;   /* [nv] element offset in qkv of each head vector, dense order */
    int64_t *voff;  /* [N NKV] offset of each value head */
    double *x, *w4; /* dense inputs [nv HS]; wq, bq, wk, bk [4 HS] */
    double *D;      /* dense output gradient [nv HS] (the loss sum(out * D)) */
    double *out, *mean, *rstd;
};

/* The head vectors' offsets, from the layout: token n, group g holds R query heads, a key and
 * a value, HS each */
static void build_map(struct hn *p) {
    const int64_t R = p->NH / p->NKV;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t g = 0; g < p->NKV; g++) {
            const int64_t base = n * p->row + g * (R + 2) * p->HS;
            for (int64_t j = 0; j < R; j++)
                p->off[n * p->NH + g * R + j] = base + j * p->HS;
            p->off[p->nq + n * p->NKV + g] = base + R * p->HS;
            p->voff[n * p->NKV + g] = base + (R + 1) * p->HS;
        }
}

static void ref_forward(struct hn *p) {
    for (int64_t v = 0; v < p->nv; v++) {
        const double *x = p->x + v * p->HS;
        const double *w = p->w4 + (v < p->nq ? 0 : 2) * p->HS, *b = w + p->HS;
        double m = 0.0, ss = 0.0;
        if (!p->rms) {
            for (int64_t c = 0; c < p->HS; c++)
                m += x[c];
            m /= (double)p->HS;
        }
        for (int64_t c = 0; c < p->HS; c++)
            ss += (x[c] - m) * (x[c] - m);
        const double r = 1.0 / sqrt(ss / (double)p->HS + (double)EPS);
        for (int64_t c = 0; c < p->HS; c++)
            p->out[v * p->HS + c] = (x[c] - m) * r * w[c] + (!p->rms && p->has_b ? b[c] : 0.0);
        p->mean[v] = m;
        p->rstd[v] = r;
    }
}

static double loss_fn(void *ctx) {
    struct hn *p = ctx;
    ref_forward(p);
    double s = 0.0;
    for (int64_t i = 0; i < p->nv * p->HS; i++)
        s += p->out[i] * p->D[i];
    return s;
}

/* The gradients of sum(out * D): dx [nv HS], dw4 [4 HS] (dwq, dbq, dwk, dbk), from the
 * statistics of ref_forward */
static void ref_backward(struct hn *p, double *dx, double *dw4) {
    ref_forward(p);
    memset(dw4, 0, (size_t)(4 * p->HS) * sizeof *dw4);
    for (int64_t v = 0; v < p->nv; v++) {
        const double *x = p->x + v * p->HS, *d = p->D + v * p->HS;
        const int k = v < p->nq ? 0 : 2;
        const double *w = p->w4 + k * p->HS;
        const double m = p->mean[v], r = p->rstd[v];
        double sg = 0.0, sgx = 0.0;
        for (int64_t c = 0; c < p->HS; c++) {
            sg += d[c] * w[c];
            sgx += d[c] * w[c] * (x[c] - m) * r;
        }
        sg /= (double)p->HS;
        sgx /= (double)p->HS;
        for (int64_t c = 0; c < p->HS; c++) {
            const double xh = (x[c] - m) * r;
            dx[v * p->HS + c] = r * (d[c] * w[c] - (p->rms ? 0.0 : sg) - xh * sgx);
            dw4[k * p->HS + c] += d[c] * xh;
            dw4[(k + 1) * p->HS + c] += d[c];
        }
    }
}

static void run(int rms, int has_b, int64_t N, int64_t NH, int64_t NKV, int64_t HS,
                enum loom_dtype dt, int fd) {
    struct hn p = {
        .rms = rms, .has_b = has_b && !rms, .N = N, .NH = NH, .NKV = NKV, .HS = HS, .dt = dt};
    p.nq = N * NH;
    p.nv = N * (NH + NKV);
    p.row = (NH + 2 * NKV) * HS;
    const int64_t total = N * p.row, dense = p.nv * HS;
    const size_t esz = loom_dtype_size(dt);
    char name[160], tag[100];
    snprintf(tag, sizeof tag, "%s%s NH %lld NKV %lld HS %lld N %lld %s",
             rms ? "rmsnorm" : "layernorm", !rms && !has_b ? " (no bias)" : "", (long long)NH,
             (long long)NKV, (long long)HS, (long long)N, dt == LOOM_DTYPE_BF16 ? "bf16" : "f32");
    p.off = ops_alloc((size_t)p.nv * sizeof *p.off);
    p.voff = ops_alloc((size_t)(N * NKV) * sizeof *p.voff);
    build_map(&p);

    /* the activation, every column random (the values too), rounded to dt */
    void *qkv = ops_alloc((size_t)total * esz), *qkv0 = ops_alloc((size_t)total * esz);
    float *tmp = ops_alloc((size_t)total * sizeof *tmp);
    ops_fill(tmp, total, 100 + (uint64_t)HS, -1.5f, 2.5f); /* a mean away from zero */
    for (int64_t i = 0; i < total; i++)
        elem_put(qkv, dt, i, tmp[i]);
    memcpy(qkv0, qkv, (size_t)total * esz);
    float w4[4 * 64];
    ops_fill(w4, 4 * HS, 101, 0.5f, 1.5f);
    ops_fill(w4 + HS, HS, 102, -0.5f, 0.5f);     /* bq */
    ops_fill(w4 + 3 * HS, HS, 103, -0.5f, 0.5f); /* bk */
    p.w4 = ops_to_double(w4, 4 * HS);
    p.x = ops_alloc((size_t)dense * sizeof *p.x);
    for (int64_t v = 0; v < p.nv; v++)
        for (int64_t c = 0; c < HS; c++)
            p.x[v * HS + c] = elem_get(qkv0, dt, p.off[v] + c);
    p.out = ops_alloc((size_t)dense * sizeof *p.out);
    p.mean = ops_alloc((size_t)p.nv * sizeof *p.mean);
    p.rstd = ops_alloc((size_t)p.nv * sizeof *p.rstd);
    ref_forward(&p);

    /* forward */
    void *keep = ops_alloc((size_t)dense * esz);
    float *mean = ops_alloc((size_t)p.nv * sizeof *mean),
          *rstd = ops_alloc((size_t)p.nv * sizeof *rstd);
    const float *bq = p.has_b ? w4 + HS : NULL, *bk = p.has_b ? w4 + 3 * HS : NULL;
    loom_op(be, head_norm_forward, rms, qkv, dt, keep, rms ? NULL : mean, rstd, w4, bq, w4 + 2 * HS,
            bk, N, NH, NKV, HS, EPS);
    float *got = ops_alloc((size_t)dense * sizeof *got);
    int keep_ok = 1;
    for (int64_t v = 0; v < p.nv; v++) {
        for (int64_t c = 0; c < HS; c++)
            got[v * HS + c] = elem_get(qkv, dt, p.off[v] + c);
        keep_ok &= memcmp((char *)keep + (size_t)(v * HS) * esz,
                          (char *)qkv0 + (size_t)p.off[v] * esz, (size_t)HS * esz) == 0;
    }
    /* against the largest value (a sum that cancels, x - mean and + b, leaves an error of the
     * terms' size): fp32 a few roundings; bf16 the rounding at the store (half a unit in the last
     * place, 2^-9 relative) on top */
    const double out_tol = dt == LOOM_DTYPE_BF16 ? 4.0e-3 : 1.0e-6;
    snprintf(name, sizeof name, "fwd out, %s", tag);
    ops_check(name, ops_max_norm_err(got, p.out, dense), out_tol);
    snprintf(name, sizeof name, "fwd keep = the inputs bit for bit, %s", tag);
    ops_check_true(name, keep_ok);
    snprintf(name, sizeof name, "fwd rstd, %s", tag);
    ops_check(name, ops_max_rel_err(rstd, p.rstd, p.nv), 1e-6);
    if (!rms) {
        snprintf(name, sizeof name, "fwd mean, %s", tag);
        ops_check(name, ops_max_rel_err(mean, p.mean, p.nv), 1e-6);
    }
    int vals_ok = 1;
    for (int64_t k = 0; k < N * NKV; k++)
        vals_ok &= memcmp((char *)qkv + (size_t)p.voff[k] * esz,
                          (char *)qkv0 + (size_t)p.voff[k] * esz, (size_t)HS * esz) == 0;
    snprintf(name, sizeof name, "fwd value heads untouched, %s", tag);
    ops_check_true(name, vals_ok);

    /* backward: a random gradient in every column of dqkv */
    void *dq = ops_alloc((size_t)total * esz), *dq0 = ops_alloc((size_t)total * esz);
    ops_fill(tmp, total, 104, -1.0f, 1.0f);
    for (int64_t i = 0; i < total; i++)
        elem_put(dq0, dt, i, tmp[i]);
    memcpy(dq, dq0, (size_t)total * esz);
    p.D = ops_alloc((size_t)dense * sizeof *p.D);
    for (int64_t v = 0; v < p.nv; v++)
        for (int64_t c = 0; c < HS; c++)
            p.D[v * HS + c] = elem_get(dq0, dt, p.off[v] + c);
    double *rdx = ops_alloc((size_t)dense * sizeof *rdx), rdw[4 * 64];
    ref_backward(&p, rdx, rdw);
    float dw0[4 * 64], dw[4 * 64];
    ops_fill(dw0, 4 * HS, 105, -2.0f, 2.0f); /* accumulated onto */
    memcpy(dw, dw0, (size_t)(4 * HS) * sizeof *dw);
    float *dbq = p.has_b ? dw + HS : NULL, *dbk = p.has_b ? dw + 3 * HS : NULL;
    loom_op(be, head_norm_backward, rms, dq, dt, dw, dbq, dw + 2 * HS, dbk, keep, rms ? NULL : mean,
            rstd, w4, w4 + 2 * HS, N, NH, NKV, HS);
    for (int64_t v = 0; v < p.nv; v++)
        for (int64_t c = 0; c < HS; c++)
            got[v * HS + c] = elem_get(dq, dt, p.off[v] + c);
    snprintf(name, sizeof name, "bwd dx, %s", tag);
    ops_check(name, ops_max_norm_err(got, rdx, dense), dt == LOOM_DTYPE_BF16 ? 4e-3 : 2e-6);
    double want[4 * 64];
    for (int j = 0; j < 4; j++)
        for (int64_t c = 0; c < HS; c++) {
            const int on = !(j & 1) || p.has_b; /* a bias gradient only with biases */
            want[j * HS + c] = (double)dw0[j * HS + c] + (on ? rdw[j * HS + c] : 0.0);
        }
    const char *wname[4] = {"dwq", "dbq", "dwk", "dbk"};
    for (int j = 0; j < 4; j++) {
        snprintf(name, sizeof name, "bwd %s += (from nonzero), %s", wname[j], tag);
        ops_check(name, ops_max_norm_err(dw + j * HS, want + j * HS, HS), 1e-6);
    }
    vals_ok = 1;
    for (int64_t k = 0; k < N * NKV; k++)
        vals_ok &= memcmp((char *)dq + (size_t)p.voff[k] * esz,
                          (char *)dq0 + (size_t)p.voff[k] * esz, (size_t)HS * esz) == 0;
    snprintf(name, sizeof name, "bwd value heads untouched, %s", tag);
    ops_check_true(name, vals_ok);

    /* a second run: the same bits */
    void *dq2 = ops_alloc((size_t)total * esz);
    float dw2[4 * 64];
    memcpy(dq2, dq0, (size_t)total * esz);
    memcpy(dw2, dw0, sizeof dw2);
    loom_op(be, head_norm_backward, rms, dq2, dt, dw2, p.has_b ? dw2 + HS : NULL, dw2 + 2 * HS,
            p.has_b ? dw2 + 3 * HS : NULL, keep, rms ? NULL : mean, rstd, w4, w4 + 2 * HS, N, NH,
            NKV, HS);
    snprintf(name, sizeof name, "bwd the same bits run to run, %s", tag);
    ops_check_true(name, memcmp(dq2, dq, (size_t)total * esz) == 0 &&
                             memcmp(dw2, dw, (size_t)(4 * HS) * sizeof *dw) == 0);

    if (fd) { /* the reference's backward against its forward */
        float *rdxf = ops_alloc((size_t)dense * sizeof *rdxf), rdwf[4 * 64];
        for (int64_t i = 0; i < dense; i++)
            rdxf[i] = (float)rdx[i];
        for (int64_t i = 0; i < 4 * HS; i++)
            rdwf[i] = (float)rdw[i];
        snprintf(name, sizeof name, "reference dx against central differences, %s", tag);
        ops_check(name, ops_grad_check(loss_fn, &p, p.x, dense, rdxf, 1e-4), 1e-5);
        snprintf(name, sizeof name, "reference dwq against central differences, %s", tag);
        ops_check(name, ops_grad_check(loss_fn, &p, p.w4, HS, rdwf, 1e-4), 1e-5);
        snprintf(name, sizeof name, "reference dwk against central differences, %s", tag);
        ops_check(name, ops_grad_check(loss_fn, &p, p.w4 + 2 * HS, HS, rdwf + 2 * HS, 1e-4), 1e-5);
        free(rdxf);
    }
    free(p.off), free(p.voff), free(p.x), free(p.w4), free(p.D), free(p.out), free(p.mean);
    free(p.rstd), free(qkv), free(qkv0), free(tmp), free(keep), free(mean), free(rstd), free(got);
    free(dq), free(dq0), free(dq2), free(rdx);
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    const enum loom_dtype dts[2] = {LOOM_DTYPE_F32, LOOM_DTYPE_BF16};
    const int64_t hs[3] = {8, 12, 64};
    for (int norm = 0; norm < 3; norm++) { /* LayerNorm, LayerNorm without bias, RMSNorm */
        const int rms = norm == 2, has_b = norm == 0;
        for (int t = 0; t < 2; t++)
            for (int h = 0; h < 3; h++) {
                run(rms, has_b, 3, 4, 2, hs[h], dts[t], t == 0 && h < 2); /* grouped */
                run(rms, has_b, 3, 3, 3, hs[h], dts[t], 0);               /* one key a head */
            }
        /* past the one-thread size: 64 tokens of 6 vectors of 64 */
        run(rms, has_b, 64, 4, 2, 64, LOOM_DTYPE_F32, 0);
        run(rms, has_b, 64, 4, 2, 64, LOOM_DTYPE_BF16, 0);
    }
    loom_backend_destroy(be);
    return ops_finish();
}
