/* The "mpi" comm backend under mpirun (run by test_comm.sh with 2, 3 and 8 ranks): every
 * collective for every dtype it reduces or moves, bit-identical all-reduce results, groups from
 * split, non-blocking operations overlapping, the volume counters against the ring formulas of
 * comm.h, long buffers in pieces, and argument errors. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "comm/comm_impl.h"
#include "comm_check.h"

static struct loom_comm *W;
static int R, N;

/* Small integers (exact in every dtype and in any summation order), negative where signed. */
static int64_t val(int rank, int64_t i, int is_signed) {
    int64_t v = (rank * 7 + i * 3) % 29;
    return is_signed ? v - 14 : v;
}

static void store(void *buf, enum loom_dtype dt, int64_t i, int64_t v) {
    switch (dt) {
    case LOOM_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case LOOM_DTYPE_F64: ((double *)buf)[i] = (double)v; break;
    case LOOM_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case LOOM_DTYPE_I64: ((int64_t *)buf)[i] = v; break;
    case LOOM_DTYPE_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case LOOM_DTYPE_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: abort();
    }
}

static int64_t load(const void *buf, enum loom_dtype dt, int64_t i) {
    switch (dt) {
    case LOOM_DTYPE_F32: return (int64_t)((const float *)buf)[i];
    case LOOM_DTYPE_F64: return (int64_t)((const double *)buf)[i];
    case LOOM_DTYPE_I32: return ((const int32_t *)buf)[i];
    case LOOM_DTYPE_I64: return ((const int64_t *)buf)[i];
    case LOOM_DTYPE_U16: return ((const uint16_t *)buf)[i];
    case LOOM_DTYPE_U8: return ((const uint8_t *)buf)[i];
    default: abort();
    }
}

static int64_t reduce_vals(enum loom_redop op, int64_t i, int is_signed) {
    int64_t acc = val(0, i, is_signed);
    for (int r = 1; r < N; r++) {
        int64_t v = val(r, i, is_signed);
        if (op == LOOM_REDOP_SUM) acc += v;
        if (op == LOOM_REDOP_MAX) acc = v > acc ? v : acc;
        if (op == LOOM_REDOP_MIN) acc = v < acc ? v : acc;
    }
    return acc;
}

static const enum loom_dtype k_dtypes[] = {LOOM_DTYPE_F32, LOOM_DTYPE_F64, LOOM_DTYPE_I32,
                                           LOOM_DTYPE_I64, LOOM_DTYPE_U16, LOOM_DTYPE_U8};
static const enum loom_redop k_ops[] = {LOOM_REDOP_SUM, LOOM_REDOP_MAX, LOOM_REDOP_MIN};

static int is_signed(enum loom_dtype dt) { return dt != LOOM_DTYPE_U16 && dt != LOOM_DTYPE_U8; }

static void test_allreduce_dtypes(void) {
    const int64_t n = 37;
    unsigned char buf[37 * 8];
    for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++)
        for (size_t o = 0; o < sizeof k_ops / sizeof k_ops[0]; o++) {
            enum loom_dtype dt = k_dtypes[d];
            int sg = is_signed(dt);
            for (int64_t i = 0; i < n; i++) store(buf, dt, i, val(R, i, sg));
            EXPECT_OK(loom_comm_allreduce(W, buf, n, dt, k_ops[o]));
            int bad = 0;
            for (int64_t i = 0; i < n; i++) bad += load(buf, dt, i) != reduce_vals(k_ops[o], i, sg);
            if (bad)
                fprintf(stderr, "[rank %d] allreduce %s op %d: %d wrong\n", R,
                        loom_dtype_name(dt), (int)k_ops[o], bad);
            EXPECT(bad == 0);
        }
}

static uint64_t g_lcg;
static double lcg_uniform(void) {
    g_lcg = g_lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(g_lcg >> 11) / 9007199254740992.0;
}

/* Random floats of mixed magnitude: the sum depends on the order, yet every rank must hold the
 * same bits. */
static void test_allreduce_bitwise(void) {
    enum { n = 3001 };
    float *x = malloc(n * sizeof *x), *all = malloc((size_t)n * N * sizeof *all);
    double *y = malloc(n * sizeof *y), *ally = malloc((size_t)n * N * sizeof *ally);
    double *ref = calloc(n, sizeof *ref);
    for (int r = 0; r < N; r++) {
        g_lcg = 1000 + (uint64_t)r;
        for (int i = 0; i < n; i++) {
            double v = (lcg_uniform() - 0.5) * pow(10.0, (double)(i % 7) - 3.0);
            ref[i] += (float)v;
            if (r == R) {
                x[i] = (float)v;
                y[i] = v;
            }
        }
    }
    EXPECT_OK(loom_comm_allreduce(W, x, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    EXPECT_OK(loom_comm_allreduce(W, y, n, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
    EXPECT_OK(loom_comm_allgather(W, all, x, n, LOOM_DTYPE_F32));
    EXPECT_OK(loom_comm_allgather(W, ally, y, n, LOOM_DTYPE_F64));
    for (int r = 1; r < N; r++) {
        EXPECT(memcmp(all, all + (size_t)r * n, n * sizeof *all) == 0);
        EXPECT(memcmp(ally, ally + (size_t)r * n, n * sizeof *ally) == 0);
    }
    int far = 0;
    for (int i = 0; i < n; i++)
        far += fabs(x[i] - ref[i]) > 1e-6 * (fabs(ref[i]) + pow(10.0, (double)(i % 7) - 3.0));
    EXPECT(far == 0);
    free(x), free(all), free(y), free(ally), free(ref);
}

static void test_half_types(void) {
    uint16_t h[8] = {0x3f80, 0xbf80, 0x7f80, 0xffff, 1, 2, 3, 4};
    EXPECT_FAIL(loom_comm_allreduce(W, h, 8, LOOM_DTYPE_BF16, LOOM_REDOP_SUM),
                LOOM_ERR_UNSUPPORTED, "SUM reduction of BF16");
    EXPECT_FAIL(loom_comm_allreduce(W, h, 8, LOOM_DTYPE_F16, LOOM_REDOP_MAX),
                LOOM_ERR_UNSUPPORTED, "F16");
    uint16_t out[8];
    EXPECT_FAIL(loom_comm_reduce_scatter(W, out, h, 1, LOOM_DTYPE_BF16, LOOM_REDOP_SUM),
                LOOM_ERR_UNSUPPORTED, "BF16");
    /* moving them keeps every bit */
    uint16_t mine[3] = {(uint16_t)(0x8000 | R), 0x7fc1, (uint16_t)(0xff00 + R)};
    uint16_t *all = malloc((size_t)3 * N * sizeof *all);
    EXPECT_OK(loom_comm_allgather(W, all, mine, 3, LOOM_DTYPE_BF16));
    for (int r = 0; r < N; r++) {
        EXPECT(all[3 * r] == (uint16_t)(0x8000 | r));
        EXPECT(all[3 * r + 1] == 0x7fc1);
        EXPECT(all[3 * r + 2] == (uint16_t)(0xff00 + r));
    }
    uint16_t b[2] = {0, 0};
    if (R == N - 1) b[0] = 0xfbff, b[1] = 0x8001;
    EXPECT_OK(loom_comm_broadcast(W, b, 2, LOOM_DTYPE_F16, N - 1));
    EXPECT(b[0] == 0xfbff && b[1] == 0x8001);
    uint8_t f8 = (uint8_t)(0xf0 | R), *f8all = malloc((size_t)N);
    EXPECT_OK(loom_comm_allgather(W, f8all, &f8, 1, LOOM_DTYPE_F8_E4M3));
    for (int r = 0; r < N; r++) EXPECT(f8all[r] == (uint8_t)(0xf0 | r));
    free(all), free(f8all);
}

static void test_reduce_scatter(void) {
    const int64_t n = 5;
    for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++)
        for (size_t o = 0; o < 2; o++) {
            enum loom_dtype dt = k_dtypes[d];
            int sg = is_signed(dt);
            unsigned char *send = malloc((size_t)(n * N) * 8), recv[5 * 8];
            for (int64_t j = 0; j < n * N; j++) store(send, dt, j, val(R, j, sg));
            EXPECT_OK(loom_comm_reduce_scatter(W, recv, send, n, dt, k_ops[o]));
            for (int64_t i = 0; i < n; i++)
                EXPECT(load(recv, dt, i) == reduce_vals(k_ops[o], R * n + i, sg));
            free(send);
        }
}

/* The in-place non-blocking form: every dtype and op; this rank's block gets its reduction and
 * the request completes through test (polled) or wait */
static void test_ireduce_scatter(void) {
    const int64_t n = 7;
    for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0]; d++)
        for (size_t o = 0; o < 2; o++) {
            enum loom_dtype dt = k_dtypes[d];
            int sg = is_signed(dt);
            unsigned char *buf = malloc((size_t)(n * N) * 8);
            for (int64_t j = 0; j < n * N; j++)
                store(buf, dt, j, val(R, j, sg));
            struct loom_comm_req *rq;
            EXPECT_OK(loom_comm_ireduce_scatter(W, buf, n, dt, k_ops[o], &rq));
            if (o) {
                int done = 0;
                while (!done)
                    EXPECT_OK(loom_comm_test(rq, &done));
            } else {
                EXPECT_OK(loom_comm_wait(rq));
            }
            int bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += load(buf, dt, R * n + i) != reduce_vals(k_ops[o], R * n + i, sg);
            EXPECT(bad == 0);
            free(buf);
        }
}

static void test_allgather(void) {
    const int64_t n = 6;
    int64_t *all = malloc((size_t)(n * N) * sizeof *all), mine[6];
    for (int64_t i = 0; i < n; i++) mine[i] = R * 100 + i;
    EXPECT_OK(loom_comm_allgather(W, all, mine, n, LOOM_DTYPE_I64));
    for (int r = 0; r < N; r++)
        for (int64_t i = 0; i < n; i++) EXPECT(all[r * n + i] == r * 100 + i);
    /* in place: this rank's block already sits in the output */
    memset(all, 0, (size_t)(n * N) * sizeof *all);
    for (int64_t i = 0; i < n; i++) all[R * n + i] = R * 100 + i;
    EXPECT_OK(loom_comm_allgather(W, all, all + R * n, n, LOOM_DTYPE_I64));
    for (int r = 0; r < N; r++)
        for (int64_t i = 0; i < n; i++) EXPECT(all[r * n + i] == r * 100 + i);
    /* non-blocking, in place, the other blocks holding stale values; completed by polling */
    for (int64_t j = 0; j < n * N; j++)
        all[j] = -1;
    for (int64_t i = 0; i < n; i++)
        all[R * n + i] = R * 100 + i;
    struct loom_comm_req *rq;
    EXPECT_OK(loom_comm_iallgather(W, all, n, LOOM_DTYPE_I64, &rq));
    int done = 0;
    while (!done)
        EXPECT_OK(loom_comm_test(rq, &done));
    int bad = 0;
    for (int r = 0; r < N; r++)
        for (int64_t i = 0; i < n; i++)
            bad += all[r * n + i] != r * 100 + i;
    EXPECT(bad == 0);
    free(all);
}

static void test_alltoall(void) {
    const int64_t n = 3;
    int32_t *send = malloc((size_t)(n * N) * sizeof *send);
    int32_t *recv = malloc((size_t)(n * N) * sizeof *recv);
    for (int r = 0; r < N; r++)
        for (int64_t i = 0; i < n; i++) send[r * n + i] = (int32_t)(R * 1000 + r * 10 + i);
    EXPECT_OK(loom_comm_alltoall(W, recv, send, n, LOOM_DTYPE_I32));
    for (int r = 0; r < N; r++)
        for (int64_t i = 0; i < n; i++) EXPECT(recv[r * n + i] == r * 1000 + R * 10 + i);
    EXPECT_OK(loom_comm_alltoall(W, send, send, n, LOOM_DTYPE_I32)); /* in place */
    EXPECT(memcmp(send, recv, (size_t)(n * N) * sizeof *send) == 0);
    EXPECT_FAIL(loom_comm_reduce_scatter(W, send, send, 1, LOOM_DTYPE_I32, LOOM_REDOP_SUM),
                LOOM_ERR_INVALID_ARG, "must not be the same buffer");
    free(send), free(recv);
}

/* rank s sends (s + r) % 3 + 1 elements to rank r, value s*10000 + r*100 + i; the receiver
 * leaves a gap of 2 elements between blocks. */
static int64_t a2av_count(int s, int r) { return (s + r) % 3 + 1; }

static void test_alltoallv(void) {
    int64_t *sc = malloc(4 * (size_t)N * sizeof *sc), *sd = sc + N, *rc = sc + 2 * N,
            *rd = sc + 3 * N;
    int64_t st = 0, rt = 0;
    for (int r = 0; r < N; r++) {
        sc[r] = a2av_count(R, r), sd[r] = st, st += sc[r];
        rc[r] = a2av_count(r, R), rd[r] = rt, rt += rc[r] + 2;
    }
    double *send = malloc((size_t)st * sizeof *send), *recv = malloc((size_t)rt * sizeof *recv);
    for (int r = 0; r < N; r++)
        for (int64_t i = 0; i < sc[r]; i++) send[sd[r] + i] = R * 10000 + r * 100 + (double)i;
    for (int64_t i = 0; i < rt; i++) recv[i] = -1;
    EXPECT_OK(loom_comm_alltoallv(W, recv, rc, rd, send, sc, sd, LOOM_DTYPE_F64));
    for (int r = 0; r < N; r++) {
        for (int64_t i = 0; i < rc[r]; i++) EXPECT(recv[rd[r] + i] == r * 10000 + R * 100 + i);
        EXPECT(recv[rd[r] + rc[r]] == -1 && recv[rd[r] + rc[r] + 1] == -1);
    }
    free(sc), free(send), free(recv);
}

static void test_broadcast(void) {
    for (int root = 0; root < N; root += N > 2 ? N - 1 : 1) {
        float f[4];
        int32_t k[3];
        for (int i = 0; i < 4; i++) f[i] = R == root ? 0.1f * (float)(i + root) : -1.0f;
        for (int i = 0; i < 3; i++) k[i] = R == root ? -7 * i - root : 0;
        EXPECT_OK(loom_comm_broadcast(W, f, 4, LOOM_DTYPE_F32, root));
        EXPECT_OK(loom_comm_broadcast(W, k, 3, LOOM_DTYPE_I32, root));
        for (int i = 0; i < 4; i++) EXPECT(f[i] == 0.1f * (float)(i + root));
        for (int i = 0; i < 3; i++) EXPECT(k[i] == -7 * i - root);
    }
}

static void test_sendrecv(void) {
    int next = (R + 1) % N, prev = (R + N - 1) % N;
    int64_t out[16], in[16];
    for (int i = 0; i < 16; i++) out[i] = R * 1000 + i, in[i] = -1;
    if (R % 2 == 0) { /* even ranks send first, odd ranks receive first: no cycle of waits */
        EXPECT_OK(loom_comm_send(W, out, 16, LOOM_DTYPE_I64, next, 5));
        EXPECT_OK(loom_comm_recv(W, in, 16, LOOM_DTYPE_I64, prev, 5));
    } else {
        EXPECT_OK(loom_comm_recv(W, in, 16, LOOM_DTYPE_I64, prev, 5));
        EXPECT_OK(loom_comm_send(W, out, 16, LOOM_DTYPE_I64, next, 5));
    }
    for (int i = 0; i < 16; i++) EXPECT(in[i] == prev * 1000 + i);
    EXPECT_OK(loom_comm_barrier(W));
}

/* An all-reduce over the world, one over a sub-group and a ring exchange all in flight at once,
 * completed in another order than started. */
static void test_nonblocking(struct loom_comm *half) {
    enum { n = 20000 };
    float *a = malloc(n * sizeof *a), *ring_out = malloc(n * sizeof *a),
          *ring_in = malloc(n * sizeof *a);
    int32_t h[4];
    for (int i = 0; i < n; i++) a[i] = (float)(R + i % 5), ring_out[i] = (float)(R * 3 + i % 11);
    for (int i = 0; i < 4; i++) h[i] = R + i;
    int next = (R + 1) % N, prev = (R + N - 1) % N;
    struct loom_comm_req *ra, *rh, *rs, *rr;
    EXPECT_OK(loom_comm_iallreduce(W, a, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM, &ra));
    EXPECT_OK(loom_comm_irecv(W, ring_in, n, LOOM_DTYPE_F32, prev, 9, &rr));
    EXPECT_OK(loom_comm_iallreduce(half, h, 4, LOOM_DTYPE_I32, LOOM_REDOP_MAX, &rh));
    EXPECT_OK(loom_comm_isend(W, ring_out, n, LOOM_DTYPE_F32, next, 9, &rs));
    EXPECT_OK(loom_comm_wait(rr));
    EXPECT_OK(loom_comm_wait(rh));
    EXPECT_OK(loom_comm_wait(rs));
    EXPECT_OK(loom_comm_wait(ra));
    int bad = 0;
    float rsum = (float)(N * (N - 1) / 2);
    for (int i = 0; i < n; i++) {
        bad += a[i] != rsum + (float)(N * (i % 5));
        bad += ring_in[i] != (float)(prev * 3 + i % 11);
    }
    EXPECT(bad == 0);
    /* half = ranks of the same parity; the largest member of mine */
    int top = (N - 1) % 2 == R % 2 ? N - 1 : N - 2;
    for (int i = 0; i < 4; i++) EXPECT(h[i] == top + i);
    free(a), free(ring_out), free(ring_in);
}

static void test_split(struct loom_comm **half_out) {
    /* colour by parity, key reversed: the highest world rank becomes group rank 0 */
    struct loom_comm *half;
    EXPECT_OK(loom_comm_split(&half, W, R % 2, -R));
    int members = (N - R % 2 + 1) / 2;
    EXPECT(half && loom_comm_size(half) == members);
    int above = 0; /* same-parity ranks above mine */
    for (int r = R + 2; r < N; r += 2) above++;
    EXPECT(loom_comm_rank(half) == above);
    EXPECT(strcmp(loom_comm_backend_name(half), "mpi") == 0);
    int64_t s = R;
    EXPECT_OK(loom_comm_allreduce(half, &s, 1, LOOM_DTYPE_I64, LOOM_REDOP_SUM));
    int64_t want = 0;
    for (int r = R % 2; r < N; r += 2) want += r;
    EXPECT(s == want);
    /* rank 0 opts out */
    struct loom_comm *rest = (struct loom_comm *)1;
    EXPECT_OK(loom_comm_split(&rest, W, R == 0 ? -1 : 7, R));
    if (R == 0) {
        EXPECT(rest == NULL);
    } else {
        EXPECT(rest && loom_comm_size(rest) == N - 1 && loom_comm_rank(rest) == R - 1);
        int one = 1;
        EXPECT_OK(loom_comm_allreduce(rest, &one, 1, LOOM_DTYPE_I32, LOOM_REDOP_SUM));
        EXPECT(one == N - 1);
    }
    loom_comm_free(rest);
    /* a group of one behaves like "self" */
    struct loom_comm *solo;
    EXPECT_OK(loom_comm_split(&solo, W, R, 0));
    EXPECT(loom_comm_size(solo) == 1 && loom_comm_rank(solo) == 0);
    float f[3] = {1, 2, 3}, g[3];
    EXPECT_OK(loom_comm_allreduce(solo, f, 3, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    EXPECT_OK(loom_comm_reduce_scatter(solo, g, f, 3, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    EXPECT(f[2] == 3 && g[0] == 1 && g[2] == 3);
    EXPECT(loom_comm_bytes(solo, LOOM_COLL_ALLREDUCE) == 0);
    loom_comm_free(solo);
    *half_out = half;
}

/* Ring-algorithm volumes, written out independently of comm.c (see comm.h). */
static void test_counters(void) {
    struct loom_comm *c;
    EXPECT_OK(loom_comm_split(&c, W, 0, R));
    for (int k = 0; k < LOOM_COLL_COUNT; k++) EXPECT(loom_comm_bytes(c, (enum loom_coll)k) == 0);
    int64_t want[LOOM_COLL_COUNT] = {0};

    float *f = calloc(4000, sizeof *f);
    EXPECT_OK(loom_comm_allreduce(c, f, 1000, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    want[LOOM_COLL_ALLREDUCE] += 2 * (N - 1) * 4000 / N;
    struct loom_comm_req *rq;
    EXPECT_OK(loom_comm_iallreduce(c, f, 24, LOOM_DTYPE_F32, LOOM_REDOP_MAX, &rq));
    EXPECT_OK(loom_comm_wait(rq));
    want[LOOM_COLL_ALLREDUCE] += 2 * (N - 1) * 96 / N;

    double *d = calloc((size_t)10 * N, sizeof *d), dr[10];
    EXPECT_OK(loom_comm_reduce_scatter(c, dr, d, 10, LOOM_DTYPE_F64, LOOM_REDOP_SUM));
    want[LOOM_COLL_REDUCE_SCATTER] += (N - 1) * 80;
    EXPECT_OK(loom_comm_ireduce_scatter(c, d, 10, LOOM_DTYPE_F64, LOOM_REDOP_SUM, &rq));
    EXPECT_OK(loom_comm_wait(rq));
    want[LOOM_COLL_REDUCE_SCATTER] += (N - 1) * 80;

    int32_t *ig = calloc((size_t)5 * N, sizeof *ig), im[5] = {0};
    EXPECT_OK(loom_comm_allgather(c, ig, im, 5, LOOM_DTYPE_I32));
    want[LOOM_COLL_ALLGATHER] += (N - 1) * 20;
    EXPECT_OK(loom_comm_iallgather(c, ig, 5, LOOM_DTYPE_I32, &rq));
    EXPECT_OK(loom_comm_wait(rq));
    want[LOOM_COLL_ALLGATHER] += (N - 1) * 20;

    uint8_t *u = calloc((size_t)3 * N, 1), *v = calloc((size_t)3 * N, 1);
    EXPECT_OK(loom_comm_alltoall(c, v, u, 3, LOOM_DTYPE_U8));
    want[LOOM_COLL_ALLTOALL] += (N - 1) * 3;
    int64_t *cnt = calloc(2 * (size_t)N, sizeof *cnt), *dsp = cnt + N;
    for (int r = 0; r < N; r++) cnt[r] = 1, dsp[r] = r;
    cnt[R] = 1; /* the block to itself is not counted */
    EXPECT_OK(loom_comm_alltoallv(c, v, cnt, dsp, u, cnt, dsp, LOOM_DTYPE_U8));
    want[LOOM_COLL_ALLTOALL] += N - 1;

    int root = 1 % N;
    EXPECT_OK(loom_comm_broadcast(c, f, 7, LOOM_DTYPE_F32, root));
    /* the last rank of the chain root, root+1, ... sends nothing */
    if (R != (root + N - 1) % N) want[LOOM_COLL_BROADCAST] += 28;

    if (R == 0) {
        EXPECT_OK(loom_comm_send(c, f, 11, LOOM_DTYPE_F32, N - 1, 1));
        want[LOOM_COLL_SENDRECV] += 44;
    }
    if (R == N - 1) EXPECT_OK(loom_comm_recv(c, f, 11, LOOM_DTYPE_F32, 0, 1));
    EXPECT_OK(loom_comm_barrier(c));

    /* failed calls count nothing */
    uint16_t h[2];
    EXPECT_FAIL(loom_comm_allreduce(c, h, 2, LOOM_DTYPE_BF16, LOOM_REDOP_SUM),
                LOOM_ERR_UNSUPPORTED, "BF16");

    for (int k = 0; k < LOOM_COLL_COUNT; k++) {
        int64_t got = loom_comm_bytes(c, (enum loom_coll)k);
        if (got != want[k])
            fprintf(stderr, "[rank %d] counter %d: %lld bytes, expected %lld\n", R, k,
                    (long long)got, (long long)want[k]);
        EXPECT(got == want[k]);
    }
    /* the world's counters did not move, and the total over ranks is the ring total */
    int64_t ag = loom_comm_bytes(c, LOOM_COLL_ALLGATHER);
    EXPECT_OK(loom_comm_allreduce(W, &ag, 1, LOOM_DTYPE_I64, LOOM_REDOP_SUM));
    EXPECT(ag == (int64_t)N * (N - 1) * 40); /* the blocking and the non-blocking form */
    loom_comm_reset_counters(c);
    for (int k = 0; k < LOOM_COLL_COUNT; k++) EXPECT(loom_comm_bytes(c, (enum loom_coll)k) == 0);
    loom_comm_free(c);
    free(f), free(d), free(ig), free(u), free(v), free(cnt);
}

/* Long buffers go to MPI in pieces; shrink the piece to 7 elements to exercise that path. */
static void test_chunks(void) {
#ifdef LOOM_HAVE_MPI
    enum { n = 50 };
    loom_comm_mpi_set_max_chunk(7);
    float a[n], b[n], in[n];
    for (int i = 0; i < n; i++) a[i] = (float)(R + i), b[i] = R == 0 ? (float)(3 * i) : 0.0f;
    EXPECT_OK(loom_comm_allreduce(W, a, n, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    EXPECT_OK(loom_comm_broadcast(W, b, n, LOOM_DTYPE_F32, 0));
    for (int i = 0; i < n; i++) {
        EXPECT(a[i] == (float)(N * (N - 1) / 2 + N * i));
        EXPECT(b[i] == (float)(3 * i));
    }
    struct loom_comm_req *rq, *rs, *rr;
    for (int i = 0; i < n; i++) a[i] = (float)(R + i), b[i] = (float)(R * 100 + i), in[i] = -1;
    EXPECT_OK(loom_comm_iallreduce(W, a, n, LOOM_DTYPE_F32, LOOM_REDOP_MAX, &rq));
    EXPECT_OK(loom_comm_irecv(W, in, n, LOOM_DTYPE_F32, (R + N - 1) % N, 3, &rr));
    EXPECT_OK(loom_comm_isend(W, b, n, LOOM_DTYPE_F32, (R + 1) % N, 3, &rs));
    EXPECT_OK(loom_comm_wait(rq));
    EXPECT_OK(loom_comm_wait(rs));
    EXPECT_OK(loom_comm_wait(rr));
    for (int i = 0; i < n; i++) {
        EXPECT(a[i] == (float)(N - 1 + i));
        EXPECT(in[i] == (float)(((R + N - 1) % N) * 100 + i));
    }
    if (N >= 2) {
        if (R == 0) EXPECT_OK(loom_comm_send(W, b, n, LOOM_DTYPE_F32, 1, 4));
        if (R == 1) {
            EXPECT_OK(loom_comm_recv(W, in, n, LOOM_DTYPE_F32, 0, 4));
            for (int i = 0; i < n; i++) EXPECT(in[i] == (float)i);
        }
    }
    loom_comm_mpi_set_max_chunk(0);
#endif
}

static void test_arg_errors(void) {
    float f[4] = {0};
    struct loom_comm_req *rq = (struct loom_comm_req *)1;
    EXPECT_FAIL(loom_comm_allreduce(W, f, -1, LOOM_DTYPE_F32, LOOM_REDOP_SUM),
                LOOM_ERR_INVALID_ARG, "negative count");
    EXPECT_FAIL(loom_comm_allreduce(W, NULL, 4, LOOM_DTYPE_F32, LOOM_REDOP_SUM),
                LOOM_ERR_INVALID_ARG, "NULL");
    EXPECT_FAIL(loom_comm_broadcast(W, f, 4, LOOM_DTYPE_F32, N), LOOM_ERR_INVALID_ARG,
                "root");
    EXPECT_FAIL(loom_comm_send(W, f, 4, LOOM_DTYPE_F32, -1, 0), LOOM_ERR_INVALID_ARG, "peer -1");
    EXPECT_FAIL(loom_comm_recv(W, f, 4, LOOM_DTYPE_F32, N, 0), LOOM_ERR_INVALID_ARG, "outside");
    EXPECT_FAIL(loom_comm_isend(W, f, 4, LOOM_DTYPE_F32, 0, -3, &rq), LOOM_ERR_INVALID_ARG,
                "tag -3");
    EXPECT(rq == NULL);
    EXPECT_FAIL(loom_comm_allreduce(W, f, 4, LOOM_DTYPE_F32, (enum loom_redop)9),
                LOOM_ERR_INVALID_ARG, "op");
    EXPECT_FAIL(loom_comm_allgather(W, f, f, 1, LOOM_DTYPE_COUNT), LOOM_ERR_INVALID_ARG,
                "dtype");
    struct loom_comm *x;
    EXPECT_FAIL(loom_comm_world(&x, "tcp", NULL, NULL), LOOM_ERR_INVALID_ARG, "valid: self");
    /* zero counts are fine and move nothing */
    EXPECT_OK(loom_comm_allreduce(W, NULL, 0, LOOM_DTYPE_F32, LOOM_REDOP_SUM));
    EXPECT_OK(loom_comm_allgather(W, NULL, NULL, 0, LOOM_DTYPE_F32));
}

int main(int argc, char **argv) {
    if (loom_comm_world(&W, "auto", &argc, &argv) != LOOM_OK) {
        loom_print_error();
        return 1;
    }
    R = loom_comm_rank(W);
    N = loom_comm_size(W);
    EXPECT(strcmp(loom_comm_backend_name(W), "mpi") == 0);
    EXPECT(!loom_comm_device_memory(W) && !loom_comm_stream_ordered(W));
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    EXPECT(env && atoi(env) == N);
    EXPECT(loom_log_rank() == R && loom_log_world() == N);

    struct loom_comm *half = NULL;
    test_allreduce_dtypes();
    test_allreduce_bitwise();
    test_half_types();
    test_reduce_scatter();
    test_ireduce_scatter();
    test_allgather();
    test_alltoall();
    test_alltoallv();
    test_broadcast();
    test_sendrecv();
    test_split(&half);
    if (half) test_nonblocking(half);
    test_counters();
    test_chunks();
    test_arg_errors();
    loom_comm_free(half);

    int rc = check_finish(W, "comm_check");
    loom_comm_free(W);
    loom_comm_finalize();
    return rc;
}
