/* The attention backends of the CUDA backend on bf16 arrays (loom_attn.dt = BF16, bf16 products,
 * as the GPT passes them under --bf16), against the CPU's fp32 attention on the same bf16 values:
 *
 *   fused (cuDNN's fused attention, where loom is built with it): out and dqkv within 2e-2
 *   normwise (the probabilities and dS are rounded to bf16 inside, and out and dqkv are stored in
 *   bf16), lse within 1e-4; an error (not a silent fallback) when cuDNN has no plan, so a pass
 *   means cuDNN ran.
 *   flash (loom's kernel), the same shapes and tolerances, and two runs bit for bit.
 *   Both backends on one problem agree within the same tolerance, and a forward of one backend
 *   with the backward of the other gives the gradients of either (lse means the same in both).
 *
 * Shapes: GPT-2 124M's heads (B 2, T 1024, 12 heads of 64, causal), a partial tile (T 77), no
 * causal mask with head size 128, head size 32; grouped-query attention (4 query heads a
 * key/value head; 2 a group with T 77 and head size 128; one key/value head for all, no causal
 * mask). Built without cuDNN, the fused cases are skipped
 * (set_attention_backend says so) and the flash ones still run.
 *
 * Documents packed into samples (loom_attn.doc_start, Megatron-LM's --reset-attention-mask;
 * cuda_test_util.h's ct_docs): flash against the CPU with the same mask, the same tolerances, two
 * runs bit for bit, head sizes 64 and 128, grouped heads; auto on a masked problem takes loom's
 * kernel (cuDNN is given no mask): the same bits as flash.
 *
 * Key ends (loom_attn.key_end): padding masks (bidirectional, as BERT's; causal; lengths from 1
 * to T, crossing the tiles), bidirectional document masks [doc_start, key_end), rows that see no
 * key (out exactly 0, lse -inf where the CPU has it, no NaN): flash (16-bit tensor cores at head
 * sizes 64 and 128, the fp32 kernel through copies at 32) against the CPU within the tolerances
 * above, two runs bit for bit, auto the same bits as flash; and the fp32 kernel (fp32 arrays and
 * products) against the CPU within 1e-5 normwise, two runs bit for bit.
 */
#define CT_SEED 0xa77e
#include "cuda_test_util.h"

static struct loom_backend *g_gpu, *g_cpu;

struct problem {
    struct loom_attn a; /* a.doc_start, a.key_end: the host arrays doc, kend, for the CPU */
    int32_t *doc;       /* document starts [B*T], or NULL */
    int32_t *kend;      /* key ends [B*T], or NULL */
    int f32;            /* the fp32 kernel's problem: out not rounded for the backward's D */
    int64_t nqkv, nout, nl;
    float *qkv, *dout;   /* bf16 values, as floats */
    float *ro, *rl, *rg; /* CPU reference: out, lse, dqkv */
};

/* The problem with masks doc and kend (host arrays, or NULL; the problem frees them) */
static void problem_make_mask(struct problem *p, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                              int64_t HS, int causal, uint64_t seed, int32_t *doc, int32_t *kend,
                              int f32) {
    memset(p, 0, sizeof *p);
    p->a = ct_attn(B, T, NH, NKV, HS, causal);
    struct loom_attn *a = &p->a;
    p->doc = doc;
    p->kend = kend;
    p->f32 = f32;
    a->doc_start = p->doc;
    a->key_end = p->kend;
    p->nqkv = B * T * (NH + 2 * NKV) * HS;
    p->nout = B * T * NH * HS;
    p->nl = B * NH * T;
    float *q0 = ct_randn(p->nqkv, seed + 1, 1.0f, 0.0f),
          *d0 = ct_randn(p->nout, seed + 2, 0.1f, 0.0f);
    p->qkv = ct_rounded(q0, p->nqkv, 0);
    p->dout = ct_rounded(d0, p->nout, 0);
    free(q0);
    free(d0);
    float *cq = ct_dputf(g_cpu, p->qkv, p->nqkv), *cd = ct_dputf(g_cpu, p->dout, p->nout);
    float *co = ct_dputf(g_cpu, NULL, p->nout), *cl = ct_dputf(g_cpu, NULL, p->nl);
    float *cg = ct_dputf(g_cpu, NULL, p->nqkv);
    g_cpu->ops->attention_forward(g_cpu, co, cl, cq, a);
    /* the backward's D = rowsum(dout * out) uses out as the GPU stores it: bf16 */
    p->ro = ct_dgetf(g_cpu, co, p->nout);
    float *ro_r = f32 ? NULL : ct_rounded(p->ro, p->nout, 0);
    if (!ro_r) { /* fp32: out as computed */
        ro_r = ct_alloc((size_t)p->nout * sizeof(float));
        memcpy(ro_r, p->ro, (size_t)p->nout * sizeof(float));
    }
    g_cpu->ops->to_device(g_cpu, co, ro_r, (size_t)p->nout * sizeof(float));
    g_cpu->ops->attention_backward(g_cpu, cg, cd, co, cl, cq, a);
    p->rl = ct_dgetf(g_cpu, cl, p->nl);
    p->rg = ct_dgetf(g_cpu, cg, p->nqkv);
    free(ro_r);
    void *cb[] = {cq, cd, co, cl, cg};
    for (size_t i = 0; i < 5; i++)
        g_cpu->ops->free(g_cpu, cb[i]);
}

static void problem_make(struct problem *p, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                         int64_t HS, int causal, uint64_t seed, int docs) {
    problem_make_mask(p, B, T, NH, NKV, HS, causal, seed, docs ? ct_docs(B, T) : NULL, NULL, 0);
}

static void problem_free(struct problem *p) {
    float *hb[] = {p->qkv, p->dout, p->ro, p->rl, p->rg};
    for (size_t i = 0; i < 5; i++)
        free(hb[i]);
    free(p->doc);
    free(p->kend);
}

/* Results of one forward (backend fwd) and backward (backend bwd) on the GPU: out, lse, dqkv */
struct result {
    float *o, *l, *g;
};

static void run_gpu(const struct problem *p, enum loom_attn_backend fwd, enum loom_attn_backend bwd,
                    struct result *r) {
    struct loom_attn a = p->a;
    a.dt = LOOM_DTYPE_BF16;
    int32_t *ddoc = p->doc ? ct_dput(g_gpu, p->doc, (size_t)(a.B * a.T) * sizeof(int32_t)) : NULL;
    int32_t *dend = p->kend ? ct_dput(g_gpu, p->kend, (size_t)(a.B * a.T) * sizeof(int32_t)) : NULL;
    a.doc_start = ddoc;
    a.key_end = dend;
    void *q16 = ct_dput16(g_gpu, p->qkv, p->nqkv, 0), *d16 = ct_dput16(g_gpu, p->dout, p->nout, 0);
    void *o16 = ct_dput(g_gpu, NULL, (size_t)p->nout * 2),
         *g16 = ct_dput(g_gpu, NULL, (size_t)p->nqkv * 2);
    float *l = ct_dputf(g_gpu, NULL, p->nl);
    g_gpu->ops->set_attention_backend(g_gpu, fwd);
    g_gpu->ops->attention_forward(g_gpu, o16, l, q16, &a);
    g_gpu->ops->set_attention_backend(g_gpu, bwd);
    g_gpu->ops->attention_backward(g_gpu, g16, d16, o16, l, q16, &a);
    r->o = ct_dget16(g_gpu, o16, p->nout, 0);
    r->l = ct_dgetf(g_gpu, l, p->nl);
    r->g = ct_dget16(g_gpu, g16, p->nqkv, 0);
    void *gb[] = {q16, d16, o16, g16, l};
    for (size_t i = 0; i < 5; i++)
        g_gpu->ops->free(g_gpu, gb[i]);
    if (ddoc) g_gpu->ops->free(g_gpu, ddoc);
    if (dend) g_gpu->ops->free(g_gpu, dend);
}

/* The same with fp32 arrays and fp32 products (the fp32 kernel); bf16 products again after */
static void run_gpu_f32(const struct problem *p, struct result *r) {
    struct loom_attn a = p->a;
    int32_t *ddoc = p->doc ? ct_dput(g_gpu, p->doc, (size_t)(a.B * a.T) * sizeof(int32_t)) : NULL;
    int32_t *dend = p->kend ? ct_dput(g_gpu, p->kend, (size_t)(a.B * a.T) * sizeof(int32_t)) : NULL;
    a.doc_start = ddoc;
    a.key_end = dend;
    if (g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_F32, NULL, 0) != LOOM_OK) loom_print_error();
    float *q = ct_dputf(g_gpu, p->qkv, p->nqkv), *d = ct_dputf(g_gpu, p->dout, p->nout);
    float *o = ct_dputf(g_gpu, NULL, p->nout), *g = ct_dputf(g_gpu, NULL, p->nqkv);
    float *l = ct_dputf(g_gpu, NULL, p->nl);
    g_gpu->ops->set_attention_backend(g_gpu, LOOM_ATTN_FLASH);
    g_gpu->ops->attention_forward(g_gpu, o, l, q, &a);
    g_gpu->ops->attention_backward(g_gpu, g, d, o, l, q, &a);
    r->o = ct_dgetf(g_gpu, o, p->nout);
    r->l = ct_dgetf(g_gpu, l, p->nl);
    r->g = ct_dgetf(g_gpu, g, p->nqkv);
    void *gb[] = {q, d, o, g, l};
    for (size_t i = 0; i < 5; i++)
        g_gpu->ops->free(g_gpu, gb[i]);
    if (ddoc) g_gpu->ops->free(g_gpu, ddoc);
    if (dend) g_gpu->ops->free(g_gpu, dend);
    if (g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0) != LOOM_OK)
        loom_print_error();
}

static void result_free(struct result *r) {
    free(r->o);
    free(r->l);
    free(r->g);
}

/* lse against the reference: -inf (a row that sees no key) exactly where the reference has it,
 * the finite values within tol normwise */
static void check_lse(const char *what, const float *got, const float *ref, int64_t n, double tol) {
    float *g = ct_alloc((size_t)n * sizeof(float)), *r = ct_alloc((size_t)n * sizeof(float));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        const int ri = ref[i] == -INFINITY, gi = got[i] == -INFINITY;
        wrong += ri != gi;
        g[i] = gi ? 0.0f : got[i];
        r[i] = ri ? 0.0f : ref[i];
    }
    char w[224];
    snprintf(w, sizeof w, "%s (%lld of the -inf rows misplaced)", what, (long long)wrong);
    ct_check(w, wrong ? INFINITY : ct_norm_err(g, r, n), tol);
    free(g);
    free(r);
}

/* got against the CPU reference (out, lse, dqkv), with a label; tol for out and dqkv (lse: 1e-4,
 * or tol when smaller). With masks, the rows that see no key must hold an exact zero output. */
static void check_ref_tol(const char *label, const struct problem *p, const struct result *r,
                          double tol) {
    char what[192];
    const struct loom_attn *a = &p->a;
    snprintf(what, sizeof what, "%s: out, B%lld T%lld NH%lld NKV%lld HS%lld %s%s", label,
             (long long)a->B, (long long)a->T, (long long)a->NH, (long long)a->NKV,
             (long long)a->HS,
             p->doc      ? "documents"
             : a->causal ? "causal"
                         : "full",
             p->kend ? " key ends" : "");
    ct_check_norm(what, r->o, p->ro, p->nout, tol);
    snprintf(what, sizeof what, "%s: lse", label);
    check_lse(what, r->l, p->rl, p->nl, tol < 1e-4 ? tol : 1e-4);
    snprintf(what, sizeof what, "%s: dqkv", label);
    ct_check_norm(what, r->g, p->rg, p->nqkv, tol);
    if (p->kend || p->doc) {
        const int64_t C = a->NH * a->HS;
        int64_t bad = 0;
        for (int64_t bt = 0; bt < a->B * a->T; bt++)
            for (int64_t h = 0; h < a->NH; h++)
                if (p->rl[(bt / a->T * a->NH + h) * a->T + bt % a->T] == -INFINITY)
                    for (int64_t d = 0; d < a->HS; d++) bad += r->o[bt * C + h * a->HS + d] != 0.0f;
        snprintf(what, sizeof what, "%s: rows that see no key give out 0", label);
        ct_check_true(what, bad == 0);
    }
}

static void check_ref(const char *label, const struct problem *p, const struct result *r) {
    check_ref_tol(label, p, r, 2e-2);
}

/* Whether two runs gave the same bits: output, log-sum-exp and gradient */
static int same_bits(const struct result *a, const struct result *b, const struct problem *p) {
    return !memcmp(a->o, b->o, (size_t)p->nout * 4) && !memcmp(a->l, b->l, (size_t)p->nl * 4) &&
           !memcmp(a->g, b->g, (size_t)p->nqkv * 4);
}

static void run_case(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int causal,
                     uint64_t seed, int have_fused) {
    struct problem p;
    problem_make(&p, B, T, NH, NKV, HS, causal, seed, 0);
    struct result flash, flash2;
    run_gpu(&p, LOOM_ATTN_FLASH, LOOM_ATTN_FLASH, &flash);
    check_ref("flash", &p, &flash);
    run_gpu(&p, LOOM_ATTN_FLASH, LOOM_ATTN_FLASH, &flash2);
    ct_check_true("flash: two runs bit for bit", same_bits(&flash, &flash2, &p));
    if (have_fused) {
        struct result fused, mixed1, mixed2;
        run_gpu(&p, LOOM_ATTN_FUSED, LOOM_ATTN_FUSED, &fused);
        check_ref("fused", &p, &fused);
        ct_check_norm("fused against flash: out", fused.o, flash.o, p.nout, 2e-2);
        ct_check_norm("fused against flash: dqkv", fused.g, flash.g, p.nqkv, 2e-2);
        run_gpu(&p, LOOM_ATTN_FUSED, LOOM_ATTN_FLASH, &mixed1);
        check_ref("fused forward, flash backward", &p, &mixed1);
        run_gpu(&p, LOOM_ATTN_FLASH, LOOM_ATTN_FUSED, &mixed2);
        check_ref("flash forward, fused backward", &p, &mixed2);
        result_free(&fused);
        result_free(&mixed1);
        result_free(&mixed2);
    }
    result_free(&flash);
    result_free(&flash2);
    problem_free(&p);
}

/* A document mask: loom's kernel against the CPU; auto gives the same bits (no mask for cuDNN) */
static void run_docs_case(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS,
                          uint64_t seed) {
    struct problem p;
    problem_make(&p, B, T, NH, NKV, HS, 1, seed, 1);
    struct result flash, flash2, autob;
    run_gpu(&p, LOOM_ATTN_FLASH, LOOM_ATTN_FLASH, &flash);
    check_ref("flash, document mask", &p, &flash);
    run_gpu(&p, LOOM_ATTN_FLASH, LOOM_ATTN_FLASH, &flash2);
    ct_check_true("flash, document mask: two runs bit for bit", same_bits(&flash, &flash2, &p));
    run_gpu(&p, LOOM_ATTN_AUTO, LOOM_ATTN_AUTO, &autob);
    ct_check_true("auto, document mask: loom's kernel, the same bits as flash",
                  same_bits(&flash, &autob, &p));
    result_free(&flash);
    result_free(&flash2);
    result_free(&autob);
    problem_free(&p);
}

/* key_end of a padding mask: sample b's rows see its first len[b % nlen] keys */
static int32_t *pad_ends(int64_t B, int64_t T, const int *len, int nlen) {
    int32_t *e = ct_alloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t bt = 0; bt < B * T; bt++)
        e[bt] = len[(bt / T) % nlen] < T ? len[(bt / T) % nlen] : (int32_t)T;
    return e;
}

/* key_end of a bidirectional document mask: where each row's document (doc) ends */
static int32_t *doc_ends(int64_t B, int64_t T, const int32_t *doc) {
    int32_t *e = ct_alloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = T - 1; t >= 0; t--)
            e[b * T + t] = t == T - 1 || doc[b * T + t + 1] != doc[b * T + t] ? (int32_t)(t + 1)
                                                                              : e[b * T + t + 1];
    return e;
}

/* A masked problem (doc, kend: host arrays, taken): flash against the CPU, two runs bit for
 * bit, auto the same bits; then the fp32 kernel against the CPU in fp32, two runs bit for bit. */
static void run_mask_case(const char *name, int64_t B, int64_t T, int64_t NH, int64_t NKV,
                          int64_t HS, int causal, uint64_t seed, int32_t *doc, int32_t *kend) {
    int32_t *doc2 = NULL, *kend2 = NULL;
    const size_t bytes = (size_t)(B * T) * sizeof(int32_t);
    if (doc) memcpy(doc2 = ct_alloc(bytes), doc, bytes);
    if (kend) memcpy(kend2 = ct_alloc(bytes), kend, bytes);
    char label[96];
    struct problem p;
    problem_make_mask(&p, B, T, NH, NKV, HS, causal, seed, doc, kend, 0);
    struct result flash, flash2, autob;
    snprintf(label, sizeof label, "flash, %s", name);
    run_gpu(&p, LOOM_ATTN_FLASH, LOOM_ATTN_FLASH, &flash);
    check_ref(label, &p, &flash);
    run_gpu(&p, LOOM_ATTN_FLASH, LOOM_ATTN_FLASH, &flash2);
    snprintf(label, sizeof label, "flash, %s: two runs bit for bit", name);
    ct_check_true(label, same_bits(&flash, &flash2, &p));
    run_gpu(&p, LOOM_ATTN_AUTO, LOOM_ATTN_AUTO, &autob);
    snprintf(label, sizeof label, "auto, %s: loom's kernel, the same bits as flash", name);
    ct_check_true(label, same_bits(&flash, &autob, &p));
    result_free(&flash);
    result_free(&flash2);
    result_free(&autob);
    problem_free(&p);

    struct problem q;
    problem_make_mask(&q, B, T, NH, NKV, HS, causal, seed, doc2, kend2, 1);
    struct result f1, f2;
    run_gpu_f32(&q, &f1);
    snprintf(label, sizeof label, "fp32, %s", name);
    check_ref_tol(label, &q, &f1, 1e-5);
    run_gpu_f32(&q, &f2);
    snprintf(label, sizeof label, "fp32, %s: two runs bit for bit", name);
    ct_check_true(label, same_bits(&f1, &f2, &q));
    result_free(&f1);
    result_free(&f2);
    problem_free(&q);
}

static void run_mask_cases(void) {
    static const int pad_a[] = {300, 1, 129, 64}, pad_b[] = {200, 77, 2}, pad_c[] = {300, 5, 150};
    run_mask_case("padding", 4, 300, 4, 2, 64, 0, 1200, NULL, pad_ends(4, 300, pad_a, 4));
    run_mask_case("padding", 3, 200, 4, 4, 128, 0, 1300, NULL, pad_ends(3, 200, pad_b, 3));
    run_mask_case("padding", 3, 256, 4, 2, 32, 0, 1400, NULL, pad_ends(3, 256, pad_c, 3));
    run_mask_case("causal padding", 3, 300, 4, 4, 64, 1, 1500, NULL, pad_ends(3, 300, pad_c, 3));
    run_mask_case("causal padding", 3, 300, 8, 2, 128, 1, 1550, NULL, pad_ends(3, 300, pad_a, 4));
    {
        int32_t *d = ct_docs(2, 700);
        run_mask_case("bidirectional documents", 2, 700, 8, 4, 128, 0, 1600, d,
                      doc_ends(2, 700, d));
        d = ct_docs(3, 300);
        run_mask_case("bidirectional documents", 3, 300, 8, 2, 64, 0, 1700, d, doc_ends(3, 300, d));
        d = ct_docs(2, 256);
        run_mask_case("bidirectional documents", 2, 256, 4, 4, 32, 0, 1800, d, doc_ends(2, 256, d));
        d = ct_docs(3, 300);
        run_mask_case("causal documents, padding", 3, 300, 4, 2, 64, 1, 1900, d,
                      pad_ends(3, 300, pad_c, 3));
    }
    {   /* rows that see no key (sample 0: rows 30..39 end before their document starts, rows
         * past 150 too; sample 1: no key at all), and left padding (doc_start alone) */
        const int64_t T = 200;
        int32_t *d = ct_alloc(2 * T * sizeof(int32_t)), *e = ct_alloc(2 * T * sizeof(int32_t));
        int32_t *l = ct_alloc(2 * T * sizeof(int32_t));
        for (int64_t t = 0; t < T; t++) {
            d[t] = t < 30 ? 0 : t < 150 ? 30 : 150;
            e[t] = t < 40 ? 30 : 150;
            d[T + t] = e[T + t] = 0;
            l[t] = 45;
            l[T + t] = 130;
        }
        int32_t *d2 = ct_alloc(2 * T * sizeof(int32_t)), *e2 = ct_alloc(2 * T * sizeof(int32_t));
        memcpy(d2, d, 2 * T * sizeof(int32_t));
        memcpy(e2, e, 2 * T * sizeof(int32_t));
        int32_t *l2 = ct_alloc(2 * T * sizeof(int32_t));
        memcpy(l2, l, 2 * T * sizeof(int32_t));
        run_mask_case("rows without keys", 2, T, 4, 2, 64, 0, 2000, d, e);
        run_mask_case("rows without keys", 2, T, 4, 2, 128, 1, 2100, d2, e2);
        run_mask_case("left padding", 2, T, 4, 2, 64, 0, 2200, l, NULL);
        run_mask_case("causal left padding", 2, T, 4, 4, 64, 1, 2300, l2, NULL);
    }
}

int main(void) {
    int st = ct_open(&g_gpu, &g_cpu);
    if (st) return st;
    if (g_gpu->ops->set_matmul_dtype(g_gpu, LOOM_DTYPE_BF16, NULL, 0) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    int have_fused = g_gpu->ops->set_attention_backend(g_gpu, LOOM_ATTN_FUSED) == LOOM_OK;
    if (!have_fused) {
        printf("fused cases skipped: ");
        loom_print_error();
    }
    run_case(2, 1024, 12, 12, 64, 1, 100, have_fused); /* GPT-2 124M heads */
    run_case(2, 77, 4, 4, 64, 1, 200, have_fused);     /* less than a tile */
    run_case(1, 300, 4, 4, 128, 0, 300, have_fused);   /* no causal mask, head size 128 */
    run_case(2, 256, 4, 4, 32, 1, 400, have_fused);  /* head size 32: cuDNN only; flash via fp32 */
    run_case(2, 1024, 8, 2, 64, 1, 500, have_fused); /* grouped: 4 query heads a group */
    run_case(1, 77, 6, 3, 128, 1, 600, have_fused);  /* 2 a group, a partial tile */
    run_case(2, 256, 4, 1, 64, 0, 700, have_fused);  /* one key/value head, no causal mask */
    /* documents packed into samples (single tokens; lengths below, at and above the kernels'
     * 64-key and 128-query tiles) */
    run_docs_case(2, 1024, 12, 12, 64, 800); /* GPT-2 124M heads */
    run_docs_case(3, 300, 8, 2, 64, 900);    /* grouped, a partial tile */
    run_docs_case(2, 700, 8, 4, 128, 1000);  /* head size 128, grouped */
    run_docs_case(2, 256, 4, 4, 32, 1100);   /* head size 32: the fp32 kernel through copies */
    /* key ends: padding, bidirectional documents, rows that see no key */
    run_mask_cases();
    loom_backend_destroy(g_cpu);
    loom_backend_destroy(g_gpu);
    return ct_finish();
}
