/* CPU token + position embedding: forward and backward against double loops and central
 * differences, vocabulary-shard masking (two shards reproduce one), out-of-range tokens,
 * thread-count invariance of the backward accumulation, and per-token positions (restarting at
 * each document: several tokens share a position row). */
#include <omp.h>
#include <string.h>

#include "loom/backend.h"
#include "ops_ref.h"

static struct loom_backend *be;

enum { B = 3, T = 5, C = 33, V = 11, TMAX = 9, POS0 = 2, N = B * T };

/* positions of the tokens within their documents (documents of 2, 1, 2 | 5 | 1, 3, 1 tokens) */
static const int32_t doc_pos[N] = {0, 1, 0, 0, 1, 0, 1, 2, 3, 4, 0, 0, 1, 2, 0};

/* out[N,C] in double: wte rows of owned tokens (v0 <= tok < v0 + Vl) plus wpe[pos0 + p],
 * p = pos[i] or i % T. */
static void ref_forward_pos(double *out, const int32_t *tok, const int32_t *pos, const double *wte,
                            const double *wpe, int64_t v0, int64_t Vl) {
    for (int64_t i = 0; i < N; i++)
        for (int64_t c = 0; c < C; c++) {
            int64_t r = (int64_t)tok[i] - v0;
            double v = r >= 0 && r < Vl ? wte[r * C + c] : 0.0;
            if (wpe) v += wpe[(POS0 + (pos ? pos[i] : i % T)) * C + c];
            out[i * C + c] = v;
        }
}
static void ref_forward(double *out, const int32_t *tok, const double *wte, const double *wpe,
                        int64_t v0, int64_t Vl) {
    ref_forward_pos(out, tok, NULL, wte, wpe, v0, Vl);
}

struct loss_ctx {
    const int32_t *tok, *pos;
    double *wte, *wpe, *R, *out;
};

static double loss_fn(void *p) {
    struct loss_ctx *k = p;
    ref_forward_pos(k->out, k->tok, k->pos, k->wte, k->wpe, 0, V);
    double s = 0.0;
    for (int64_t i = 0; i < N * C; i++) s += k->out[i] * k->R[i];
    return s;
}

int main(void) {
    if (loom_backend_cpu_create(&be) != LOOM_OK) return 2;
    /* token 3 repeats (the backward must sum its rows), 12 and -5 lie outside the vocabulary */
    const int32_t tok[N] = {3, 0, 10, 3, 7, 3, 12, 5, 1, 3, 9, -5, 2, 10, 3};
    float *wte = ops_alloc(V * C * sizeof *wte), *wpe = ops_alloc(TMAX * C * sizeof *wpe);
    float *out = ops_alloc(N * C * sizeof *out), *out1 = ops_alloc(N * C * sizeof *out1);
    float *R = ops_alloc(N * C * sizeof *R);
    double *ref = ops_alloc(N * C * sizeof *ref);
    ops_fill(wte, V * C, 10, -1.0f, 1.0f);
    ops_fill(wpe, TMAX * C, 11, -1.0f, 1.0f);
    ops_fill(R, N * C, 12, -1.0f, 1.0f);
    double *wte_d = ops_to_double(wte, V * C), *wpe_d = ops_to_double(wpe, TMAX * C);

    /* ---- forward ---- */
    loom_op(be, embedding_forward, out, tok, NULL, wte, wpe, B, T, C, 0, V, POS0);
    ref_forward(ref, tok, wte_d, wpe_d, 0, V);
    ops_check("forward with wpe (pos0=2, out-of-range tokens -> wpe only)",
              ops_max_rel_err(out, ref, N * C), 1.2e-7);
    loom_op(be, embedding_forward, out, tok, NULL, wte, NULL, B, T, C, 0, V, POS0);
    ref_forward(ref, tok, wte_d, NULL, 0, V);
    ops_check("forward without wpe (out-of-range tokens -> zero rows)",
              ops_max_rel_err(out, ref, N * C), 0.0);

    /* two shards [0,6) and [6,11): shard 0 adds wpe, shard 1 does not; the sum is the full
     * result, bit for bit (each element is one float add in the same order) */
    const int64_t S0 = 6;
    loom_op(be, embedding_forward, out, tok, NULL, wte, wpe, B, T, C, 0, S0, POS0);
    loom_op(be, embedding_forward, out1, tok, NULL, wte + S0 * C, NULL, B, T, C, S0, V - S0, POS0);
    ref_forward(ref, tok, wte_d + S0 * C, NULL, S0, V - S0);
    ops_check("forward of shard [6,11) against double loops", ops_max_rel_err(out1, ref, N * C),
              0.0);
    float *full = ops_alloc(N * C * sizeof *full);
    loom_op(be, embedding_forward, full, tok, NULL, wte, wpe, B, T, C, 0, V, POS0);
    int same = 1;
    for (int64_t i = 0; i < N * C; i++) same &= out[i] + out1[i] == full[i];
    ops_check_true("forward: shard [0,6) + shard [6,11) == full vocabulary, bit for bit", same);

    /* ---- backward ---- */
    float *dwte = ops_alloc(V * C * sizeof *dwte), *dwpe = ops_alloc(TMAX * C * sizeof *dwpe);
    float *pre_wte = ops_alloc(V * C * sizeof *pre_wte);
    float *pre_wpe = ops_alloc(TMAX * C * sizeof *pre_wpe);
    ops_fill(pre_wte, V * C, 13, -1.0f, 1.0f);
    ops_fill(pre_wpe, TMAX * C, 14, -1.0f, 1.0f);
    memcpy(dwte, pre_wte, V * C * sizeof *dwte);
    memcpy(dwpe, pre_wpe, TMAX * C * sizeof *dwpe);
    loom_op(be, embedding_backward, dwte, dwpe, R, tok, NULL, B, T, C, 0, V, POS0);
    double *rw = ops_to_double(pre_wte, V * C), *rp = ops_to_double(pre_wpe, TMAX * C);
    for (int64_t i = 0; i < N; i++)
        for (int64_t c = 0; c < C; c++) {
            if (tok[i] >= 0 && tok[i] < V) rw[tok[i] * C + c] += R[i * C + c];
            rp[(POS0 + i % T) * C + c] += R[i * C + c];
        }
    ops_check("backward dwte += (accumulates onto existing values)",
              ops_max_rel_err(dwte, rw, V * C), 1e-6);
    ops_check("backward dwpe += (accumulates onto existing values)",
              ops_max_rel_err(dwpe, rp, TMAX * C), 1e-6);

    /* central differences of sum(out * R) in double */
    memset(dwte, 0, V * C * sizeof *dwte);
    memset(dwpe, 0, TMAX * C * sizeof *dwpe);
    loom_op(be, embedding_backward, dwte, dwpe, R, tok, NULL, B, T, C, 0, V, POS0);
    double *out_d = ops_alloc(N * C * sizeof *out_d);
    struct loss_ctx k = {tok, NULL, wte_d, wpe_d, ops_to_double(R, N * C), out_d};
    ops_check("backward dwte against central differences",
              ops_grad_check(loss_fn, &k, wte_d, V * C, dwte, 1e-3), 1e-6);
    ops_check("backward dwpe against central differences",
              ops_grad_check(loss_fn, &k, wpe_d, TMAX * C, dwpe, 1e-3), 1e-6);

    /* dwpe NULL skips positions; shards each fill their own rows */
    float *d0 = ops_alloc(V * C * sizeof *d0);
    memset(d0, 0, V * C * sizeof *d0);
    loom_op(be, embedding_backward, d0, NULL, R, tok, NULL, B, T, C, 0, S0, POS0);
    loom_op(be, embedding_backward, d0 + S0 * C, NULL, R, tok, NULL, B, T, C, S0, V - S0, POS0);
    ops_check_true("backward: shards [0,6) and [6,11) together == full dwte, bit for bit",
                   memcmp(d0, dwte, V * C * sizeof *d0) == 0);

    /* ---- per-token positions ---- */
    loom_op(be, embedding_forward, out, tok, doc_pos, wte, wpe, B, T, C, 0, V, POS0);
    ref_forward_pos(ref, tok, doc_pos, wte_d, wpe_d, 0, V);
    ops_check("forward with per-token positions (restarting at documents)",
              ops_max_rel_err(out, ref, N * C), 1.2e-7);
    {
        int32_t ident[N];
        for (int64_t i = 0; i < N; i++)
            ident[i] = (int32_t)(i % T);
        loom_op(be, embedding_forward, out, tok, ident, wte, wpe, B, T, C, 0, V, POS0);
        loom_op(be, embedding_forward, out1, tok, NULL, wte, wpe, B, T, C, 0, V, POS0);
        ops_check_true("forward: positions t given explicitly == no positions, bit for bit",
                       memcmp(out, out1, N * C * sizeof *out) == 0);
    }
    memcpy(dwte, pre_wte, V * C * sizeof *dwte);
    memcpy(dwpe, pre_wpe, TMAX * C * sizeof *dwpe);
    loom_op(be, embedding_backward, dwte, dwpe, R, tok, doc_pos, B, T, C, 0, V, POS0);
    {
        double *rpp = ops_to_double(pre_wpe, TMAX * C);
        for (int64_t i = 0; i < N; i++)
            for (int64_t c = 0; c < C; c++)
                rpp[(POS0 + doc_pos[i]) * C + c] += R[i * C + c];
        ops_check("backward dwpe += with per-token positions (shared rows summed)",
                  ops_max_rel_err(dwpe, rpp, TMAX * C), 1e-6);
        ops_check("backward dwte with per-token positions unchanged",
                  ops_max_rel_err(dwte, rw, V * C), 1e-6);
        free(rpp);
    }
    memset(dwpe, 0, TMAX * C * sizeof *dwpe);
    memset(dwte, 0, V * C * sizeof *dwte);
    loom_op(be, embedding_backward, dwte, dwpe, R, tok, doc_pos, B, T, C, 0, V, POS0);
    k.pos = doc_pos;
    ops_check("backward dwpe with per-token positions against central differences",
              ops_grad_check(loss_fn, &k, wpe_d, TMAX * C, dwpe, 1e-3), 1e-6);
    k.pos = NULL;

    /* ---- larger problem through the threaded path: 1, 2, 3 threads give the same bits ---- */
    {
        const int64_t b = 4, t = 64, c = 160, v = 50, n = b * t;
        int32_t *tk = ops_alloc((size_t)n * sizeof *tk);
        for (int64_t i = 0; i < n; i++) tk[i] = (int32_t)(loom_rng_uniform(5, 6, (uint64_t)i) * v);
        float *g = ops_alloc((size_t)(n * c) * sizeof *g);
        ops_fill(g, n * c, 15, -1.0f, 1.0f);
        float *res[3];
        int maxt = omp_get_max_threads();
        for (int nt = 1; nt <= 3; nt++) {
            res[nt - 1] = ops_alloc((size_t)((v + t) * c) * sizeof(float));
            memset(res[nt - 1], 0, (size_t)((v + t) * c) * sizeof(float));
            omp_set_num_threads(nt);
            loom_op(be, embedding_backward, res[nt - 1], res[nt - 1] + v * c, g, tk, NULL, b, t, c,
                    0, v, 0);
        }
        omp_set_num_threads(maxt);
        double *rr = ops_alloc((size_t)((v + t) * c) * sizeof *rr);
        memset(rr, 0, (size_t)((v + t) * c) * sizeof *rr);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < c; j++) {
                rr[tk[i] * c + j] += g[i * c + j];
                rr[(v + i % t) * c + j] += g[i * c + j];
            }
        ops_check("backward B=4 T=64 C=160 V=50 against double loops",
                  ops_max_rel_err(res[1], rr, (v + t) * c), 1e-5);
        size_t bytes = (size_t)((v + t) * c) * sizeof(float);
        ops_check_true("backward bit-identical for 1, 2 and 3 threads",
                       memcmp(res[0], res[1], bytes) == 0 && memcmp(res[1], res[2], bytes) == 0);
        /* the same with positions restarting every 10 tokens (documents of 10) */
        int32_t *pp = ops_alloc((size_t)n * sizeof *pp);
        for (int64_t i = 0; i < n; i++)
            pp[i] = (int32_t)((i % t) % 10);
        for (int nt = 1; nt <= 3; nt++) {
            memset(res[nt - 1], 0, bytes);
            omp_set_num_threads(nt);
            loom_op(be, embedding_backward, res[nt - 1], res[nt - 1] + v * c, g, tk, pp, b, t, c, 0,
                    v, 0);
        }
        omp_set_num_threads(maxt);
        memset(rr, 0, (size_t)((v + t) * c) * sizeof *rr);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < c; j++) {
                rr[tk[i] * c + j] += g[i * c + j];
                rr[(v + pp[i]) * c + j] += g[i * c + j];
            }
        /* about 100 fp32 terms a position row (26 a sample): a looser bound than above */
        ops_check("backward with per-token positions B=4 T=64 against double loops",
                  ops_max_rel_err(res[1], rr, (v + t) * c), 5e-5);
        ops_check_true("backward with per-token positions bit-identical for 1, 2 and 3 threads",
                       memcmp(res[0], res[1], bytes) == 0 && memcmp(res[1], res[2], bytes) == 0);
        for (int i = 0; i < 3; i++) free(res[i]);
        free(rr);
        free(g);
        free(tk);
        free(pp);
    }

    free(wte);
    free(wpe);
    free(out);
    free(out1);
    free(R);
    free(ref);
    free(full);
    free(dwte);
    free(dwpe);
    free(pre_wte);
    free(pre_wpe);
    free(rw);
    free(rp);
    free(out_d);
    free(k.R);
    free(wte_d);
    free(wpe_d);
    free(d0);
    loom_backend_destroy(be);
    return ops_finish();
}
