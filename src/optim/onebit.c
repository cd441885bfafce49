/* 1-bit Adam's compressed all-reduce and its element-wise steps (see loom/onebit.h). Host
 * arithmetic in fp32, each norm summed in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/onebit.h"

enum loom_status loom_onebit_init(struct loom_onebit *ob, struct loom_comm *dp,
                                  struct loom_backend *be, int64_t n) {
    memset(ob, 0, sizeof *ob);
    ob->dp = dp;
    ob->be = be;
    ob->W = loom_comm_size(dp);
    ob->rank = loom_comm_rank(dp);
    ob->n = n;
    const int64_t grain = 8 * (int64_t)ob->W;
    ob->npad = (n + grain - 1) / grain * grain;
    ob->chunk = ob->npad / ob->W;
    const size_t np = (size_t)(ob->npad > 0 ? ob->npad : grain);
    ob->worker_error = calloc(np, sizeof(float));
    ob->server_error = calloc(np / (size_t)ob->W, sizeof(float));
    ob->x = calloc(np, sizeof(float));
    ob->signs = calloc(np / 8, 1);
    ob->recv = calloc(np / 8, 1);
    ob->scales = calloc((size_t)ob->W, sizeof(float));
    if (!ob->worker_error || !ob->server_error || !ob->x || !ob->signs || !ob->recv || !ob->scales)
        return loom_fail(LOOM_ERR_OOM, "out of memory for 1-bit Adam's buffers");
    if (loom_comm_device_memory(dp)) {
        /* the largest exchange: npad / 8 bytes sent and received, or W scales */
        ob->dev = be->ops->malloc(be, 2 * (np / 8 + (size_t)ob->W * sizeof(float)));
        if (!ob->dev) return loom_fail(LOOM_ERR_OOM, "out of device memory for 1-bit Adam");
    }
    return LOOM_OK;
}

void loom_onebit_free(struct loom_onebit *ob) {
    free(ob->worker_error);
    free(ob->server_error);
    free(ob->x);
    free(ob->signs);
    free(ob->recv);
    free(ob->scales);
    if (ob->dev) ob->be->ops->free(ob->be, ob->dev);
    memset(ob, 0, sizeof *ob);
}

void loom_onebit_reset(struct loom_onebit *ob) {
    memset(ob->worker_error, 0, (size_t)ob->npad * sizeof(float));
    memset(ob->server_error, 0, (size_t)ob->chunk * sizeof(float));
}

/* An all-to-all (count elements a peer) or all-gather (count elements from each) of host arrays,
 * through device memory when the comm needs it. */
static enum loom_status exchange(struct loom_onebit *ob, int all_to_all, void *recv,
                                 const void *send, int64_t count, enum loom_dtype dt,
                                 size_t elem) {
    const size_t sb = (size_t)count * elem * (all_to_all ? (size_t)ob->W : 1);
    const size_t rb = (size_t)count * elem * (size_t)ob->W;
    if (!ob->dev)
        return all_to_all ? loom_comm_alltoall(ob->dp, recv, send, count, dt)
                          : loom_comm_allgather(ob->dp, recv, send, count, dt);
    struct loom_backend *be = ob->be;
    char *ds = ob->dev, *dr = ds + sb;
    be->ops->to_device(be, ds, send, sb);
    LOOM_CHECK(all_to_all ? loom_comm_alltoall(ob->dp, dr, ds, count, dt)
                          : loom_comm_allgather(ob->dp, dr, ds, count, dt));
    be->ops->to_host(be, recv, dr, rb);
    return LOOM_OK;
}

/* ||x|| / sqrt(n) */
static float rms(const float *x, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return (float)(sqrt(ss) / sqrt((double)n));
}

/* e = x - s sign(x) (sign(0) = +1), the signs packed into bits (8 elements a byte, the first in
 * the high bit); n a multiple of 8 */
static void compress(const float *x, int64_t n, float s, float *e, uint8_t *bits) {
    for (int64_t i = 0; i < n; i += 8) {
        unsigned byte = 0;
        for (int k = 0; k < 8; k++) {
            const int pos = !(x[i + k] < 0.0f);
            byte |= (unsigned)pos << (7 - k);
            e[i + k] = x[i + k] - (pos ? s : -s);
        }
        bits[i / 8] = (uint8_t)byte;
    }
}

static float bit_sign(const uint8_t *bits, int64_t i) {
    return (bits[i / 8] >> (7 - i % 8) & 1) ? 1.0f : -1.0f;
}

enum loom_status loom_onebit_allreduce(struct loom_onebit *ob, float *x) {
    const int W = ob->W;
    const int64_t npad = ob->npad, chunk = ob->chunk, cb = chunk / 8;
    float *buf = ob->x;
    /* worker: compensate, compress, send chunk j to worker j and the scale to all */
    for (int64_t i = 0; i < npad; i++) buf[i] = (i < ob->n ? x[i] : 0.0f) + ob->worker_error[i];
    float s = rms(buf, npad);
    compress(buf, npad, s, ob->worker_error, ob->signs);
    LOOM_CHECK(exchange(ob, 1, ob->recv, ob->signs, cb, LOOM_DTYPE_U8, 1));
    LOOM_CHECK(exchange(ob, 0, ob->scales, &s, 1, LOOM_DTYPE_F32, sizeof(float)));
    /* server of chunk `rank`: the average of the workers' decompressed chunks, compensated and
     * compressed again */
    float *y = buf; /* the worker's copy is no longer needed */
    const float inv = 1.0f / (float)W;
    for (int64_t i = 0; i < chunk; i++) {
        float sum = 0.0f;
        for (int w = 0; w < W; w++) sum += bit_sign(ob->recv + (int64_t)w * cb, i) * ob->scales[w];
        y[i] = sum * inv + ob->server_error[i];
    }
    float t = rms(y, chunk);
    compress(y, chunk, t, ob->server_error, ob->signs);
    LOOM_CHECK(exchange(ob, 0, ob->recv, ob->signs, cb, LOOM_DTYPE_U8, 1));
    LOOM_CHECK(exchange(ob, 0, ob->scales, &t, 1, LOOM_DTYPE_F32, sizeof(float)));
    for (int64_t i = 0; i < ob->n; i++) x[i] = bit_sign(ob->recv, i) * ob->scales[i / chunk];
    return LOOM_OK;
}

void loom_onebit_moments(float *m, float *v, const float *g, int64_t n, double b1, double b2,
                         float gs, int frozen) {
    /* 1 - beta in double, then rounded (as a framework's scalar 1 - beta) */
    const float f1 = (float)b1, f2 = (float)b2, c1 = (float)(1.0 - b1), c2 = (float)(1.0 - b2);
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i] * gs;
        m[i] = f1 * m[i] + c1 * gi;
        if (!frozen) v[i] = f2 * v[i] + c2 * gi * gi;
    }
}

void loom_onebit_update(float *p, const float *m, const float *v, int64_t n, float lr, float eps,
                        float wd) {
    for (int64_t i = 0; i < n; i++) {
        float u = m[i] / (sqrtf(v[i]) + eps);
        if (wd != 0.0f) u += wd * p[i];
        p[i] -= lr * u;
    }
}
