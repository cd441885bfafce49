/* Attention through cuDNN's fused flash attention (its graph API, backend descriptors), used by
 * the attention ops for bf16 arrays (loom_attn.dt BF16, with bf16 products) when the head size is
 * a multiple of 8 up to 128 and there is no attention dropout nor document mask (loom_attn's
 * doc_start, which this file never gives cuDNN), with or without grouped-query
 * attention (NKV key/value heads, each shared by G = NH / NKV query heads); everything else takes
 * loom's own kernels (attention_bf16.cu, attention.cu). Built where CMake finds cuDNN 9
 * (LOOM_HAVE_CUDNN); without it loom_cuda_attention_cudnn_ok is 0.
 *
 * Same contract as the other attention kernels: out, lse (natural log of the row sums of
 * exp(scale q.k), fp32 [B, NH, T]) and dqkv assigned. The qkv rows [B, T, (NH + 2 NKV) HS] are in
 * Megatron's grouped order (group j: its G query heads, then its key head, then its value head,
 * HS columns each); query head h = j G + i uses group j's key and value. cuDNN reads k and v in
 * place through strides and writes dk and dv the same way (its graph folds the G query heads'
 * key and value gradients of a group into one, as grouped-query attention needs); out and dout
 * are read and written in place. The query heads have one stride in those rows only without
 * grouping (G = 1): then q and dq are in place too, else q is copied out to a dense
 * [B, T, NH, HS] before a run (sdpa_q_copy) and dq copied back after the backward. The backward
 * accumulates dq with atomics in fp32, so a run is not bit-for-bit repeatable (loom's own kernel
 * is: --attention-backend flash).
 *
 * Graphs (one per shape, direction and mask, built on first use and kept; a shape that cuDNN
 * cannot run falls back to loom's kernel with one line on stderr, or is an error under
 * --attention-backend fused):
 *   forward:  S = scale Q K^T, masked (causal: key index > query index gets -inf),
 *             stats = max + log(sum exp(S - max)), P = exp(S - max) / sum (bf16), O = P V
 *   backward: Dsum = rowsum(dO * O); P = exp(mask(scale Q K^T) - stats);
 *             dV = P^T dO; dS = P (dO V^T - Dsum) scale; dK = dS^T Q; dQ = dS K (fp32, then bf16)
 * Each graph's execution plan: the fastest of the plans of the heuristic's first engine
 * configurations (up to SDPA_CANDIDATES, none needing more workspace than the first), timed at
 * its first call on that call's operands.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/common.cuh"

#ifdef LOOM_HAVE_CUDNN
#include <cudnn.h>

enum { /* tensor ids of the graphs' operands */
       U_Q = 1,
       U_K,
       U_V,
       U_O,
       U_STATS,
       U_SCALE,
       U_NEG_INF,
       U_ONE,
       U_DO,
       U_DQ,
       U_DK,
       U_DV,
       U_DSUM,   /* workspace: rowsum(dO * O) */
       U_DQ_ACC, /* workspace: dq in fp32 */
       U_VIRTUAL = 100
};

#define SDPA_CANDIDATES 4

struct sdpa_plan {
    int64_t B, T, H, HK, HS; /* H query heads, HK key/value heads */
    int causal, backward;
    cudnnBackendDescriptor_t plan; /* NULL: cuDNN cannot run this shape */
    int64_t ws_bytes;              /* cuDNN's workspace (the first candidate's) */
    /* the plans of the heuristic's first engine configurations that finalize and need no more
     * workspace than the first (the peak memory stays the heuristic choice's), timed at the
     * first call (sdpa_execute), the fastest kept as plan */
    cudnnBackendDescriptor_t cand[SDPA_CANDIDATES];
    int ncand;
};

struct loom_cudnn {
    cudnnHandle_t handle;
    int failed; /* no handle could be made: never try again */
    struct sdpa_plan *plans;
    int nplans, cap;
    void *ws; /* cuDNN's workspace, then the backward's Dsum and dq accumulator */
    size_t ws_bytes;
};

/* ---- graph building: every descriptor made goes to a list, destroyed with the graph ---- */

struct gb {
    cudnnBackendDescriptor_t descs[160];
    int ndescs;
    cudnnBackendDescriptor_t ops[48];
    int nops;
    int64_t next_virtual;
    cudnnStatus_t err; /* first failure */
    const char *what;  /* what failed */
};

static cudnnBackendDescriptor_t gb_new(struct gb *g, cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->err != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->ndescs == (int)(sizeof g->descs / sizeof g->descs[0])) {
        g->err = CUDNN_STATUS_INTERNAL_ERROR;
        g->what = "descriptor list full";
        return NULL;
    }
    g->err = cudnnBackendCreateDescriptor(type, &d);
    if (g->err != CUDNN_STATUS_SUCCESS) {
        g->what = "create descriptor";
        return NULL;
    }
    g->descs[g->ndescs++] = d;
    return d;
}

static void gb_set(struct gb *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what) {
    if (g->err != CUDNN_STATUS_SUCCESS) return;
    g->err = cudnnBackendSetAttribute(d, name, type, n, v);
    if (g->err != CUDNN_STATUS_SUCCESS) g->what = what;
}

static void gb_fin(struct gb *g, cudnnBackendDescriptor_t d, const char *what) {
    if (g->err != CUDNN_STATUS_SUCCESS) return;
    g->err = cudnnBackendFinalize(d);
    if (g->err != CUDNN_STATUS_SUCCESS) g->what = what;
}

static void gb_free(struct gb *g) {
    for (int i = g->ndescs - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(g->descs[i]);
    g->ndescs = 0;
}

/* A tensor [d0, d1, d2, d3] with strides s; uid 0 makes a new virtual (graph-internal) one. */
static cudnnBackendDescriptor_t gb_tensor(struct gb *g, int64_t uid, cudnnDataType_t dt,
                                          const int64_t d[4], const int64_t s[4], int by_value) {
    cudnnBackendDescriptor_t t = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    bool virt = uid == 0, byv = by_value != 0;
    if (virt) uid = g->next_virtual++;
    int64_t align = 16;
    gb_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
    gb_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d, "tensor dims");
    gb_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s, "tensor strides");
    gb_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    gb_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor align");
    gb_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    gb_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byv, "tensor by value");
    gb_fin(g, t, "tensor");
    return t;
}

/* Dense strides of dims d (row-major) */
static void dense(const int64_t d[4], int64_t s[4]) {
    s[3] = 1;
    for (int i = 2; i >= 0; i--)
        s[i] = s[i + 1] * d[i + 1];
}

/* A virtual fp32 (or dt) tensor of dims (d0, d1, d2, d3), dense */
static cudnnBackendDescriptor_t gb_virtual(struct gb *g, cudnnDataType_t dt, int64_t d0, int64_t d1,
                                           int64_t d2, int64_t d3) {
    int64_t d[4] = {d0, d1, d2, d3}, s[4];
    dense(d, s);
    return gb_tensor(g, 0, dt, d, s, 0);
}

static cudnnBackendDescriptor_t gb_scalar(struct gb *g, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return gb_tensor(g, uid, CUDNN_DATA_FLOAT, one, one, 1);
}

static void gb_op(struct gb *g, cudnnBackendDescriptor_t op, const char *what) {
    gb_fin(g, op, what);
    if (g->err == CUDNN_STATUS_SUCCESS) g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]) pointwise; compute type prec; axis for GEN_INDEX (else -1) */
static void gb_pw(struct gb *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                  cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                  cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y, int64_t axis) {
    cudnnBackendDescriptor_t pw = gb_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    gb_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pw mode");
    gb_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pw prec");
    if (axis >= 0) gb_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pw axis");
    gb_fin(g, pw, "pointwise descriptor");
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
           &pw, "pw op desc");
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
           "pw x");
    if (b)
        gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b,
               "pw b");
    if (t)
        gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t,
               "pw t");
    gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
           "pw y");
    gb_op(g, op, "pointwise op");
}

static void gb_matmul(struct gb *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t c) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = gb_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    gb_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "matmul comp");
    gb_fin(g, mm, "matmul descriptor");
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "mm a");
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "mm b");
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "mm c");
    gb_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "mm");
    gb_op(g, op, "matmul op");
}

/* y = reduction of x over the dimensions where y has extent 1 (and, for grouped-query attention,
 * over the groups of heads that y's smaller head dimension folds together: gb_grad_of) */
static void gb_reduce(struct gb *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t y) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = gb_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    gb_set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
           "reduction mode");
    gb_set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "reduction comp");
    gb_fin(g, r, "reduction descriptor");
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
           "reduction x");
    gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
           "reduction y");
    gb_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r,
           "reduction desc");
    gb_op(g, op, "reduction op");
}

/* y = x seen through y's dims and strides (a transpose of a virtual tensor) */
static void gb_reshape(struct gb *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = gb_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x,
           "reshape x");
    gb_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y,
           "reshape y");
    gb_op(g, op, "reshape op");
}

/* The strides of the operands as [B, heads, T, HS]: k and v (and dk, dv) in the qkv rows of
 * R = (H + 2 HK) HS elements, group j's key head at column (j (G + 2) + G) HS and value head one
 * head further; q (and dq) there too at (3 h) HS without grouping, else in the dense copy
 * [B, T, H, HS]; out and dout [B, T, H, HS]. */
struct sdpa_layout {
    int64_t B, T, HS;
    int64_t q[4], kv[4], o[4];
};

static struct sdpa_layout sdpa_layout_of(const struct sdpa_plan *p) {
    struct sdpa_layout l;
    const int64_t G = p->H / p->HK, T = p->T, HS = p->HS;
    const int64_t R = (p->H + 2 * p->HK) * HS, C = p->H * HS;
    l.B = p->B;
    l.T = T;
    l.HS = HS;
    const int64_t kv[4] = {T * R, (G + 2) * HS, R, 1}, o[4] = {T * C, HS, C, 1};
    memcpy(l.kv, kv, sizeof kv);
    memcpy(l.o, o, sizeof o);
    memcpy(l.q, G == 1 ? kv : o, sizeof kv);
    return l;
}

/* An operand [B, heads, T, HS] with strides st, or transposed ([B, heads, HS, T]) when tr */
static cudnnBackendDescriptor_t gb_operand(struct gb *g, int64_t uid, const struct sdpa_layout *l,
                                           const int64_t st[4], int64_t heads, int tr) {
    int64_t d[4] = {l->B, heads, tr ? l->HS : l->T, tr ? l->T : l->HS};
    int64_t s[4] = {st[0], st[1], tr ? st[3] : st[2], tr ? st[2] : st[3]};
    return gb_tensor(g, uid, CUDNN_DATA_BFLOAT16, d, s, 0);
}

/* The masked, scaled scores of Q K^T, [B, H, T, T] fp32 (virtual) */
static cudnnBackendDescriptor_t gb_scores(struct gb *g, const struct sdpa_plan *p,
                                          cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt) {
    int64_t B = p->B, H = p->H, T = p->T;
    cudnnBackendDescriptor_t s = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_matmul(g, q, kt, s);
    cudnnBackendDescriptor_t ss = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, gb_scalar(g, U_SCALE), NULL, ss, -1);
    return ss;
}

/* causal: x where key index <= query index, else -inf */
static cudnnBackendDescriptor_t gb_causal(struct gb *g, const struct sdpa_plan *p,
                                          cudnnBackendDescriptor_t x) {
    if (!p->causal) return x;
    int64_t B = p->B, H = p->H, T = p->T;
    cudnnBackendDescriptor_t row = gb_virtual(g, CUDNN_DATA_INT32, B, H, T, T);
    cudnnBackendDescriptor_t col = gb_virtual(g, CUDNN_DATA_INT32, B, H, T, T);
    cudnnBackendDescriptor_t keep = gb_virtual(g, CUDNN_DATA_BOOLEAN, B, H, T, T);
    cudnnBackendDescriptor_t y = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    gb_pw(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    gb_pw(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, gb_scalar(g, U_NEG_INF), keep, y,
          -1);
    return y;
}

/* A per-row fp32 tensor [B, H, T, 1], dense: the softmax statistics, the backward's Dsum */
static cudnnBackendDescriptor_t gb_rows(struct gb *g, int64_t uid, const struct sdpa_plan *p) {
    int64_t d[4] = {p->B, p->H, p->T, 1}, s[4];
    dense(d, s);
    return gb_tensor(g, uid, CUDNN_DATA_FLOAT, d, s, 0);
}

/* x [B, H, T, HS] (bf16, virtual) folded into y (an operand with HK heads): y's head k is the sum
 * of x's heads k G .. k G + G - 1, as cuDNN's reduction reads a head dimension that shrinks by a
 * whole factor. Without grouping x is y itself (see gb_grad_of). */
static cudnnBackendDescriptor_t gb_grad_of(struct gb *g, const struct sdpa_plan *p,
                                           cudnnBackendDescriptor_t y) {
    if (p->H == p->HK) return y;
    return gb_virtual(g, CUDNN_DATA_BFLOAT16, p->B, p->H, p->T, p->HS);
}

static void gb_forward(struct gb *g, const struct sdpa_plan *p) {
    struct sdpa_layout l = sdpa_layout_of(p);
    int64_t B = p->B, H = p->H, T = p->T;
    cudnnBackendDescriptor_t q = gb_operand(g, U_Q, &l, l.q, H, 0);
    cudnnBackendDescriptor_t kt = gb_operand(g, U_K, &l, l.kv, p->HK, 1);
    cudnnBackendDescriptor_t v = gb_operand(g, U_V, &l, l.kv, p->HK, 0);
    cudnnBackendDescriptor_t o = gb_operand(g, U_O, &l, l.o, H, 0);
    cudnnBackendDescriptor_t stats = gb_rows(g, U_STATS, p);

    cudnnBackendDescriptor_t s = gb_causal(g, p, gb_scores(g, p, q, kt));
    cudnnBackendDescriptor_t mx = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    gb_reduce(g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    cudnnBackendDescriptor_t sub = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, mx, NULL, sub, -1);
    cudnnBackendDescriptor_t e = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sub, NULL, NULL, e, -1);
    cudnnBackendDescriptor_t sum = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    cudnnBackendDescriptor_t lg = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    gb_pw(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, lg, -1);
    gb_pw(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, lg, NULL, stats, -1);
    cudnnBackendDescriptor_t pr = gb_virtual(g, CUDNN_DATA_BFLOAT16, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, sum, NULL, pr, -1);
    gb_matmul(g, pr, v, o);
}

static void gb_backward(struct gb *g, const struct sdpa_plan *p) {
    struct sdpa_layout l = sdpa_layout_of(p);
    int64_t B = p->B, H = p->H, T = p->T, D = p->HS;
    const int64_t HK = p->HK;
    cudnnBackendDescriptor_t q = gb_operand(g, U_Q, &l, l.q, H, 0);
    cudnnBackendDescriptor_t kt = gb_operand(g, U_K, &l, l.kv, HK, 1);
    cudnnBackendDescriptor_t vt = gb_operand(g, U_V, &l, l.kv, HK, 1);
    cudnnBackendDescriptor_t o = gb_operand(g, U_O, &l, l.o, H, 0);
    cudnnBackendDescriptor_t dout = gb_operand(g, U_DO, &l, l.o, H, 0);
    cudnnBackendDescriptor_t dq = gb_operand(g, U_DQ, &l, l.q, H, 0);
    cudnnBackendDescriptor_t dk = gb_operand(g, U_DK, &l, l.kv, HK, 0);
    cudnnBackendDescriptor_t dv = gb_operand(g, U_DV, &l, l.kv, HK, 0);
    cudnnBackendDescriptor_t stats = gb_rows(g, U_STATS, p), dsum = gb_rows(g, U_DSUM, p);
    int64_t ad[4] = {B, H, T, D}, as[4];
    dense(ad, as);
    cudnnBackendDescriptor_t dq_acc = gb_tensor(g, U_DQ_ACC, CUDNN_DATA_FLOAT, ad, as, 0);

    /* Dsum = rowsum(dO * O) (times 1: the form cuDNN's engine expects) */
    int64_t md[4] = {B, H, T, D}, ms[4] = {H * T * D, T * D, H * D, 1};
    cudnnBackendDescriptor_t prod = gb_tensor(g, 0, CUDNN_DATA_FLOAT, md, ms, 0);
    gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, NULL, prod, -1);
    cudnnBackendDescriptor_t rsum = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, 1);
    gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, prod, rsum);
    gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rsum, gb_scalar(g, U_ONE), NULL, dsum, -1);

    /* P = exp(mask(S) - stats) */
    cudnnBackendDescriptor_t s = gb_scores(g, p, q, kt);
    cudnnBackendDescriptor_t sub = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, stats, NULL, sub, -1);
    cudnnBackendDescriptor_t masked = gb_causal(g, p, sub);
    cudnnBackendDescriptor_t pr = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, masked, NULL, NULL, pr, -1);

    /* dV = P^T dO */
    int64_t td[4] = {B, H, T, T}, ts[4] = {H * T * T, T * T, 1, T};
    cudnnBackendDescriptor_t prt = gb_tensor(g, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    gb_reshape(g, pr, prt);
    cudnnBackendDescriptor_t dv_all = gb_grad_of(g, p, dv);
    gb_matmul(g, prt, dout, dv_all);
    if (dv_all != dv) gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, dv_all, dv);

    /* dS = P (dO V^T - Dsum) scale */
    cudnnBackendDescriptor_t dp = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_matmul(g, dout, vt, dp);
    cudnnBackendDescriptor_t dps = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, dsum, NULL, dps, -1);
    cudnnBackendDescriptor_t ds0 = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dps, pr, NULL, ds0, -1);
    cudnnBackendDescriptor_t ds = gb_virtual(g, CUDNN_DATA_FLOAT, B, H, T, T);
    gb_pw(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, ds0, gb_scalar(g, U_SCALE), NULL, ds, -1);

    /* dK = dS^T Q */
    cudnnBackendDescriptor_t dst = gb_tensor(g, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    gb_reshape(g, ds, dst);
    cudnnBackendDescriptor_t dk_all = gb_grad_of(g, p, dk);
    gb_matmul(g, dst, q, dk_all);
    if (dk_all != dk) gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, dk_all, dk);

    /* dQ = dS K, accumulated in fp32, then rounded into dqkv */
    int64_t kd[4] = {B, HK, T, D}, ks[4] = {l.kv[0], l.kv[1], l.kv[2], l.kv[3]};
    cudnnBackendDescriptor_t k = gb_tensor(g, 0, CUDNN_DATA_BFLOAT16, kd, ks, 0);
    gb_reshape(g, kt, k);
    gb_matmul(g, ds, k, dq_acc);
    gb_pw(g, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, dq_acc, NULL, NULL, dq, -1);
}

/* Builds and finalizes the plan of p (p->plan stays NULL when cuDNN has none). */
static void sdpa_build(struct loom_cudnn *cd, struct sdpa_plan *p, int strict) {
    struct gb *g = (struct gb *)calloc(1, sizeof *g);
    LOOM_ASSERT(g);
    g->next_virtual = U_VIRTUAL;
    g->err = CUDNN_STATUS_SUCCESS;
    if (p->backward)
        gb_backward(g, p);
    else
        gb_forward(g, p);
    cudnnBackendDescriptor_t graph = gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    gb_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops,
           "graph ops");
    gb_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &cd->handle,
           "graph handle");
    gb_fin(g, graph, "operation graph");
    cudnnBackendDescriptor_t heur = gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph,
           "heuristics graph");
    gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    gb_fin(g, heur, "heuristics");
    int64_t ncfg = 0;
    if (g->err == CUDNN_STATUS_SUCCESS) {
        g->err = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &ncfg, NULL);
        if (g->err != CUDNN_STATUS_SUCCESS) g->what = "heuristics count";
    }
    if (ncfg > 8) ncfg = 8;
    cudnnBackendDescriptor_t cfgs[8];
    for (int64_t i = 0; i < ncfg; i++)
        cfgs[i] = gb_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (g->err == CUDNN_STATUS_SUCCESS && ncfg > 0) {
        int64_t got = 0;
        g->err = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &got, cfgs);
        if (g->err != CUDNN_STATUS_SUCCESS) g->what = "heuristics results";
        ncfg = got;
    }
    cudnnStatus_t last = ncfg > 0 ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; g->err == CUDNN_STATUS_SUCCESS && i < ncfg && p->ncand < SDPA_CANDIDATES;
         i++) {
        cudnnBackendDescriptor_t plan = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
            CUDNN_STATUS_SUCCESS)
            break;
        last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                        1, &cd->handle);
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
        if (last == CUDNN_STATUS_SUCCESS) last = cudnnBackendFinalize(plan);
        int64_t ws = 0, n = 0;
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &n, &ws);
        if (last == CUDNN_STATUS_SUCCESS && (!p->plan || ws <= p->ws_bytes)) {
            if (!p->plan) {
                p->plan = plan;
                p->ws_bytes = ws;
            }
            p->cand[p->ncand++] = plan;
        } else {
            cudnnBackendDestroyDescriptor(plan);
        }
    }
    if (!p->plan) {
        char msg[256] = "", line[768];
        cudnnGetLastErrorString(msg, sizeof msg);
        snprintf(line, sizeof line,
                 "cuDNN attention %s has no plan for B %lld T %lld heads %lld (%lld key/value) "
                 "head size %lld%s (%s: %s%s%s)",
                 p->backward ? "backward" : "forward", (long long)p->B, (long long)p->T,
                 (long long)p->H, (long long)p->HK, (long long)p->HS, p->causal ? " causal" : "",
                 g->err != CUDNN_STATUS_SUCCESS ? g->what : "execution plan",
                 cudnnGetErrorString(g->err != CUDNN_STATUS_SUCCESS ? g->err : last),
                 msg[0] ? ", " : "", msg);
        if (strict) loom_abort(__FILE__, __LINE__, "--attention-backend fused: %s", line);
        fprintf(stderr, "loom: %s; using loom's attention kernel\n", line);
    }
    gb_free(g); /* the plan keeps what it needs */
    free(g);
}

static struct loom_cudnn *cudnn_state(struct loom_backend *be) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (!c->cudnn) {
        struct loom_cudnn *cd = (struct loom_cudnn *)calloc(1, sizeof *cd);
        LOOM_ASSERT(cd);
        cudnnStatus_t st = cudnnCreate(&cd->handle);
        if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(cd->handle, c->stream);
        if (st != CUDNN_STATUS_SUCCESS) {
            if (c->attn_backend == LOOM_ATTN_FUSED)
                loom_abort(__FILE__, __LINE__, "--attention-backend fused: cuDNN unavailable (%s)",
                           cudnnGetErrorString(st));
            fprintf(stderr, "loom: cuDNN unavailable (%s); using loom's attention kernel\n",
                    cudnnGetErrorString(st));
            cd->failed = 1;
        }
        c->cudnn = cd;
    }
    return (struct loom_cudnn *)c->cudnn;
}

static struct sdpa_plan *sdpa_plan_for(struct loom_backend *be, const struct loom_attn *a,
                                       int backward) {
    struct loom_cudnn *cd = cudnn_state(be);
    if (cd->failed) return NULL;
    for (int i = 0; i < cd->nplans; i++) {
        struct sdpa_plan *p = &cd->plans[i];
        if (p->B == a->B && p->T == a->T && p->H == a->NH && p->HK == a->NKV && p->HS == a->HS &&
            p->causal == (a->causal != 0) && p->backward == backward)
            return p->plan ? p : NULL;
    }
    if (cd->nplans == cd->cap) {
        cd->cap = cd->cap ? 2 * cd->cap : 8;
        cd->plans = (struct sdpa_plan *)realloc(cd->plans, (size_t)cd->cap * sizeof *cd->plans);
        LOOM_ASSERT(cd->plans);
    }
    struct sdpa_plan *p = &cd->plans[cd->nplans++];
    memset(p, 0, sizeof *p);
    p->B = a->B;
    p->T = a->T;
    p->H = a->NH;
    p->HK = a->NKV;
    p->HS = a->HS;
    p->causal = a->causal != 0;
    p->backward = backward;
    sdpa_build(cd, p, loom_cuda_impl(be)->attn_backend == LOOM_ATTN_FUSED);
    return p->plan ? p : NULL;
}

/* Runs `plan` on the operands of the variant pack; returns cuDNN's status. */
static cudnnStatus_t sdpa_run(struct loom_cudnn *cd, cudnnBackendDescriptor_t plan, int n,
                              const int64_t *uids, void **ptrs, void *ws) {
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                      uids);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                      &ws);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(vp);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendExecute(cd->handle, plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return st;
}

struct sdpa_trial {
    struct loom_cudnn *cd;
    const struct sdpa_plan *p;
    int n;
    const int64_t *uids;
    void **ptrs;
    void *ws;
};

/* loom_cuda_fastest's run: candidate plan i */
static int sdpa_trial_run(void *ctx, int i) {
    const struct sdpa_trial *t = (const struct sdpa_trial *)ctx;
    return sdpa_run(t->cd, t->p->cand[i], t->n, t->uids, t->ptrs, t->ws) == CUDNN_STATUS_SUCCESS;
}

/* At the first call of a plan with several candidates, on the call's own operands (every output
 * is assigned, so the runs repeat the same work): the fastest is kept, the others destroyed. */
static void sdpa_tune(struct loom_backend *be, struct sdpa_plan *p, int n, const int64_t *uids,
                      void **ptrs, void *ws) {
    struct sdpa_trial trial = {
        (struct loom_cudnn *)loom_cuda_impl(be)->cudnn, p, n, uids, ptrs, ws};
    const int besti = loom_cuda_fastest(be, p->ncand, sdpa_trial_run, &trial);
    if (besti >= 0) p->plan = p->cand[besti];
    for (int i = 0; i < p->ncand; i++)
        if (p->cand[i] != p->plan) cudnnBackendDestroyDescriptor(p->cand[i]);
    p->ncand = 0;
}

static void sdpa_execute(struct loom_backend *be, struct sdpa_plan *p, int n, const int64_t *uids,
                         void **ptrs, void *ws) {
    struct loom_cudnn *cd = (struct loom_cudnn *)loom_cuda_impl(be)->cudnn;
    /* (older engines expect the backward's dq accumulator zeroed before each run: untimed) */
    if (p->ncand > 1 && (!p->backward || cudnnGetVersion() >= 90600))
        sdpa_tune(be, p, n, uids, ptrs, ws);
    cudnnStatus_t st = sdpa_run(cd, p->plan, n, uids, ptrs, ws);
    if (st != CUDNN_STATUS_SUCCESS) {
        char msg[256] = "";
        cudnnGetLastErrorString(msg, sizeof msg);
        loom_abort(__FILE__, __LINE__, "cuDNN attention %s failed: %s %s",
                   p->backward ? "backward" : "forward", cudnnGetErrorString(st), msg);
    }
}

/* cuDNN's workspace followed by `extra` bytes, 256-aligned */
static char *sdpa_workspace(struct loom_backend *be, const struct sdpa_plan *p, size_t extra) {
    struct loom_cudnn *cd = (struct loom_cudnn *)loom_cuda_impl(be)->cudnn;
    size_t head = ((size_t)p->ws_bytes + 255) & ~(size_t)255;
    loom_cuda_grow(be, &cd->ws, &cd->ws_bytes, head + extra + 1, "cuDNN attention workspace");
    return (char *)cd->ws;
}

int loom_cuda_attention_cudnn_ok(struct loom_backend *be, const struct loom_attn *a) {
    struct loom_cuda *c = loom_cuda_impl(be);
    /* no document or key-end (padding) mask is given to cuDNN: loom's kernels take masked
     * problems (under fused, the training CLI refuses --reset-attention-mask before any of this) */
    const int masked = a->doc_start || a->key_end;
    if (masked && c->attn_backend == LOOM_ATTN_FUSED)
        loom_abort(__FILE__, __LINE__,
                   "--attention-backend fused: cuDNN's attention is given no document or "
                   "padding mask (--reset-attention-mask); use flash or auto");
    if (masked || c->attn_backend == LOOM_ATTN_FLASH || c->deterministic || !c->matmul_bf16 ||
        c->matmul_f16 || a->dt != LOOM_DTYPE_BF16 || a->NKV < 1 || a->NH % a->NKV != 0 ||
        a->HS % 8 != 0 || a->HS > 128 || a->dropout_p != 0.0f || !(a->scale > 0.0f) || a->B < 1 ||
        a->T < 1 || a->NH < 1)
        return 0;
    if (c->cudnn && ((struct loom_cudnn *)c->cudnn)->failed) return 0;
    return 1;
}

/* The graphs declare every operand 16-byte aligned: other arrays take loom's kernels (an error
 * under --attention-backend fused) */
static int aligned16(struct loom_backend *be, const void *const *ptrs, int n) {
    uintptr_t bits = 0;
    for (int i = 0; i < n; i++)
        bits |= (uintptr_t)ptrs[i];
    if ((bits & 15) && loom_cuda_impl(be)->attn_backend == LOOM_ATTN_FUSED)
        loom_abort(__FILE__, __LINE__,
                   "--attention-backend fused: cuDNN's attention needs 16-byte aligned arrays");
    return (bits & 15) == 0;
}

/* The query heads of the grouped qkv rows [B, T, (H + 2 HK) HS] copied to the dense
 * q[B, T, H, HS] (back = 0), or dense dq back into dqkv's query columns (back = 1): 8 elements a
 * thread. */
__global__ void sdpa_q_copy_kernel(__nv_bfloat16 *dense, __nv_bfloat16 *rows, int64_t n, int64_t H,
                                   int64_t HK, int64_t HS, int back) {
    const int64_t G = H / HK;
    for (int64_t e = 8 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x); e < n;
         e += 8 * (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = e % HS, h = (e / HS) % H, bt = e / (HS * H);
        uint4 *r = reinterpret_cast<uint4 *>(rows + bt * (H + 2 * HK) * HS +
                                             ((h / G) * (G + 2) + h % G) * HS + d);
        uint4 *c = reinterpret_cast<uint4 *>(dense + e);
        if (back)
            *r = *c;
        else
            *c = *r;
    }
}

static void sdpa_q_copy(struct loom_backend *be, void *dense, const void *rows,
                        const struct loom_attn *a, int back) {
    const int64_t n = a->B * a->T * a->NH * a->HS;
    sdpa_q_copy_kernel<<<loom_cuda_grid(n / 8, 256), 256, 0, loom_cuda_stream(be)>>>(
        (__nv_bfloat16 *)dense, (__nv_bfloat16 *)rows, n, a->NH, a->NKV, a->HS, back);
    LOOM_CUDA_LAUNCHED();
}

int loom_cuda_attention_forward_cudnn(struct loom_backend *be, void *out, float *lse,
                                      const void *qkv, const struct loom_attn *a) {
    const void *arrays[] = {out, lse, qkv};
    if (!aligned16(be, arrays, 3)) return 0;
    struct sdpa_plan *p = sdpa_plan_for(be, a, 0);
    if (!p) return 0;
    const int64_t G = a->NH / a->NKV;
    const size_t hb = (size_t)a->HS * 2; /* bytes of one head */
    const size_t head = ((size_t)p->ws_bytes + 255) & ~(size_t)255;
    char *ws = sdpa_workspace(be, p, G > 1 ? (size_t)(a->B * a->T * a->NH) * hb : 0);
    const char *base = (const char *)qkv, *q = base;
    if (G > 1) {
        sdpa_q_copy(be, ws + head, qkv, a, 0);
        q = ws + head;
    }
    float scale = a->scale, neg_inf = -INFINITY;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_NEG_INF};
    void *ptrs[] = {
        (void *)q, (void *)(base + G * hb), (void *)(base + (G + 1) * hb), out, lse, &scale,
        &neg_inf};
    sdpa_execute(be, p, p->causal ? 7 : 6, uids, ptrs, ws);
    return 1;
}

int loom_cuda_attention_backward_cudnn(struct loom_backend *be, void *dqkv, const void *dout,
                                       const void *out, const float *lse, const void *qkv,
                                       const struct loom_attn *a) {
    const void *arrays[] = {dqkv, dout, out, lse, qkv};
    if (!aligned16(be, arrays, 5)) return 0;
    struct sdpa_plan *p = sdpa_plan_for(be, a, 1);
    if (!p) return 0;
    const int64_t G = a->NH / a->NKV, rows = a->B * a->NH * a->T;
    const size_t hb = (size_t)a->HS * 2;
    /* the workspace: cuDNN's, Dsum, the dq accumulator, then with grouping q and dq dense */
    const size_t head = ((size_t)p->ws_bytes + 255) & ~(size_t)255;
    const size_t nsum = ((size_t)rows * sizeof(float) + 255) & ~(size_t)255;
    const size_t nacc = (size_t)(rows * a->HS) * sizeof(float);
    const size_t nq = G > 1 ? (size_t)rows * hb : 0;
    char *ws = sdpa_workspace(be, p, nsum + nacc + 2 * nq);
    char *qd = ws + head + nsum + nacc, *dqd = qd + nq;
    if (cudnnGetVersion() < 90600) /* older engines expect the dq accumulator zeroed */
        LOOM_CUDA_CHECK(cudaMemsetAsync(ws + head + nsum, 0, nacc, loom_cuda_stream(be)));
    const char *base = (const char *)qkv, *q = base;
    char *dbase = (char *)dqkv, *dq = dbase;
    if (G > 1) {
        sdpa_q_copy(be, qd, qkv, a, 0);
        q = qd;
        dq = dqd;
    }
    float scale = a->scale, neg_inf = -INFINITY, one = 1.0f;
    int64_t uids[] = {U_Q,  U_K,  U_V,    U_O,      U_DO,    U_STATS, U_DQ,
                      U_DK, U_DV, U_DSUM, U_DQ_ACC, U_SCALE, U_ONE,   U_NEG_INF};
    void *ptrs[] = {(void *)q,
                    (void *)(base + G * hb),
                    (void *)(base + (G + 1) * hb),
                    (void *)out,
                    (void *)dout,
                    (void *)lse,
                    dq,
                    dbase + G * hb,
                    dbase + (G + 1) * hb,
                    ws + head,
                    ws + head + nsum,
                    &scale,
                    &one,
                    &neg_inf};
    sdpa_execute(be, p, p->causal ? 14 : 13, uids, ptrs, ws);
    if (G > 1) sdpa_q_copy(be, dqd, dqkv, a, 1);
    return 1;
}

enum loom_status loom_cuda_set_attention_backend(struct loom_backend *be,
                                                 enum loom_attn_backend kind) {
    if (kind == LOOM_ATTN_FUSED && loom_cuda_impl(be)->deterministic)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--attention-backend fused: cuDNN's attention backward is not "
                         "deterministic (leave out --deterministic-mode, or give flash or auto)");
    loom_cuda_impl(be)->attn_backend = kind;
    return LOOM_OK;
}

void loom_cuda_cudnn_free(struct loom_backend *be) {
    struct loom_cuda *c = loom_cuda_impl(be);
    struct loom_cudnn *cd = (struct loom_cudnn *)c->cudnn;
    if (!cd) return;
    for (int i = 0; i < cd->nplans; i++) {
        struct sdpa_plan *p = &cd->plans[i];
        if (p->ncand == 0 && p->plan) cudnnBackendDestroyDescriptor(p->plan);
        for (int k = 0; k < p->ncand; k++)
            cudnnBackendDestroyDescriptor(p->cand[k]); /* untimed */
    }
    free(cd->plans);
    if (cd->handle) cudnnDestroy(cd->handle);
    free(cd); /* the workspace is one of the backend's allocations, freed with them */
    c->cudnn = NULL;
}

#else /* no cuDNN: loom's own kernels only */

int loom_cuda_attention_cudnn_ok(struct loom_backend *, const struct loom_attn *) {
    return 0;
}
int loom_cuda_attention_forward_cudnn(struct loom_backend *, void *, float *, const void *,
                                      const struct loom_attn *) {
    return 0;
}
int loom_cuda_attention_backward_cudnn(struct loom_backend *, void *, const void *, const void *,
                                       const float *, const void *, const struct loom_attn *) {
    return 0;
}
void loom_cuda_cudnn_free(struct loom_backend *) {}
enum loom_status loom_cuda_set_attention_backend(struct loom_backend *be,
                                                 enum loom_attn_backend kind) {
    if (kind == LOOM_ATTN_FUSED)
        return loom_fail(LOOM_ERR_UNSUPPORTED,
                         "--attention-backend fused: this loom was built without cuDNN (install "
                         "cuDNN 9 and rebuild, or give auto or flash)");
    loom_cuda_impl(be)->attn_backend = kind;
    return LOOM_OK;
}

#endif

/* Deterministic mode: the ops repeat their bits from run to run. Here: the products take
 * cuBLASLt's heuristic choice (no timing, matmul_bf16.cu) and attention loom's own kernels, whose
 * backward has no atomics. */
enum loom_status loom_cuda_set_deterministic(struct loom_backend *be, int on) {
    struct loom_cuda *c = loom_cuda_impl(be);
    if (on && c->attn_backend == LOOM_ATTN_FUSED)
        return loom_fail(LOOM_ERR_INVALID_ARG,
                         "--deterministic-mode: cuDNN's attention backward is not deterministic "
                         "(give --attention-backend flash or auto)");
    c->deterministic = on != 0;
    return LOOM_OK;
}
